// The training loop behind `pejit train` and `pejit eval`. Everything a batch needs is built
// per batch (encoding trees into values is cheap next to running them). Time is measured
// around the training steps only: data loading and evaluation passes are excluded from
// trees/s, as docs/benchmarks.md asks of pejit and its peers alike.
#include "runtime/train/trainer.h"

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/tree_io.h"
#include "runtime/engine.h"
#include "src/interp/interpreter.h"
#include "jit/jit.h"
#include "jit/schedule.h"
#include "jit/tuner.h"
#include "runtime/kernel_dump.h"
#include "runtime/optim/optimizer.h"
#include "runtime/plan_executor.h"
#include "specializer/dump.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "runtime/train/encode.h"
#include "src/types/check.h"
#include "src/util/check.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <ostream>
#include <unistd.h>

namespace pejit::runtime {

using interp::Value;
using interp::Values;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

nlohmann::json num(double v) {
  return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
}

std::shared_ptr<ir::Module> load_model(const std::string& path) {
  Diagnostics d;
  auto m = std::make_shared<ir::Module>();
  auto r = types::add_file(*m, path, d);
  if (!r.ok)
    throw ProgramError("the model '" + path + "' has errors:\n" + d.render());
  return m;
}

// A data set of trees or sentences, with what is needed to encode and score it.
struct Dataset {
  bool is_trees = true;
  std::vector<data::ParseTree> trees;
  std::vector<std::vector<int32_t>> sents;

  size_t size() const { return is_trees ? trees.size() : sents.size(); }
  // Nodes that carry a loss: labeled nodes of a tree, or the words of a sentence.
  int64_t nodes(size_t i) const {
    if (!is_trees)
      return static_cast<int64_t>(sents[i].size());
    int64_t n = 0;
    for (const auto& nd : trees[i].nodes)
      n += nd.label >= 0;
    return n;
  }
  void limit(int64_t n) {
    if (n <= 0)
      return;
    if (is_trees && trees.size() > static_cast<size_t>(n))
      trees.resize(static_cast<size_t>(n));
    if (!is_trees && sents.size() > static_cast<size_t>(n))
      sents.resize(static_cast<size_t>(n));
  }
};

Dataset read_dataset(const std::string& path, data::Vocab& vocab, bool grow, const ir::Type& elem) {
  Dataset ds;
  data::ReadOptions ro;
  ro.grow_vocab = grow;
  if (elem->kind == ir::TypeKind::Adt) {
    ds.trees = data::read_trees(path, vocab, ro);
  } else if (elem->kind == ir::TypeKind::List && elem->elems[0]->kind == ir::TypeKind::Tensor &&
             elem->elems[0]->elem == ir::Elem::I32 && elem->elems[0]->dims.empty()) {
    ds.is_trees = false;
    ds.sents = data::read_sentences(path, vocab, ro);
  } else {
    throw Error("the model's batch elements have type " + ir::type_str(elem) +
                "; pejit reads trees into an ADT or sentences into List[i32[]]");
  }
  if (ds.size() == 0)
    throw Error("'" + path + "' holds no examples");
  return ds;
}

// Encodes examples [idx...] as one batch value (a List).
struct Encoder {
  std::optional<TreeEncoder> trees;
  Value batch(const Dataset& ds, const std::vector<size_t>& idx, size_t b, size_t e) const {
    Values xs;
    xs.reserve(e - b);
    for (size_t i = b; i < e; ++i)
      xs.push_back(ds.is_trees ? trees->encode(ds.trees[idx[i]])
                               : encode_sentence(ds.sents[idx[i]]));
    return Value::list(std::move(xs));
  }
};

struct Scores {
  double loss = 0;
  int64_t nodes = 0, root_ok = 0, roots = 0, node_ok = 0, labeled = 0;
};

// Loss and accuracy over a data set, without gradients, through the engine (plans where the
// mode allows, the generic path otherwise).
Scores score(Engine& engine, const ir::Module& m, const interp::Params& params, const Dataset& ds,
             const Encoder& enc, int batch) {
  Scores s;
  const bool has_nodes = m.fn("infer_nodes") && m.fn("infer_nodes")->is_entry;
  const bool has_infer = m.fn("infer") && m.fn("infer")->is_entry;
  std::vector<size_t> idx(ds.size());
  std::iota(idx.begin(), idx.end(), 0);
  for (size_t b = 0; b < ds.size(); b += static_cast<size_t>(batch)) {
    size_t e = std::min(ds.size(), b + static_cast<size_t>(batch));
    Value v = enc.batch(ds, idx, b, e);
    s.loss += engine.run("loss", v, params).as_tensor().item_f32();
    for (size_t i = b; i < e; ++i)
      s.nodes += ds.nodes(i);
    if (!ds.is_trees)
      continue;
    if (has_nodes) {
      Value preds = engine.run("infer_nodes", v, params);
      for (size_t i = b; i < e; ++i) {
        const auto& t = ds.trees[i];
        const Value& p = preds.list_at(i - b);
        if (p.list_size() != t.nodes.size())
          throw Error("infer_nodes returned " + std::to_string(p.list_size()) +
                      " predictions for a tree of " + std::to_string(t.nodes.size()) + " nodes");
        for (size_t n = 0; n < t.nodes.size(); ++n) {
          if (t.nodes[n].label < 0)
            continue;
          bool ok = p.list_at(n).as_tensor().item_i32() == t.nodes[n].label;
          s.node_ok += ok;
          s.labeled += 1;
          if (static_cast<int32_t>(n) == t.root()) {
            s.root_ok += ok;
            s.roots += 1;
          }
        }
      }
    } else if (has_infer) {
      Value preds = engine.run("infer", v, params);
      for (size_t i = b; i < e; ++i) {
        const auto& t = ds.trees[i];
        int32_t y = t.nodes[static_cast<size_t>(t.root())].label;
        if (y < 0)
          continue;
        s.root_ok += preds.list_at(i - b).as_tensor().item_i32() == y;
        s.roots += 1;
      }
    }
  }
  return s;
}

double ratio(int64_t a, int64_t b) {
  return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : NAN;
}

void check_mode(const std::string& mode) {
  (void)parse_mode(mode);
}

// The tuned schedule database named by --tuned (null when none: default schedules).
std::shared_ptr<const jit::ScheduleDB> load_tuned(const std::string& path) {
  if (path.empty())
    return nullptr;
  return std::make_shared<const jit::ScheduleDB>(jit::ScheduleDB::load(path));
}

void warn_schedules(const Engine& engine, std::ostream& err) {
  std::string w = engine.stats().schedule_warning;
  if (!w.empty())
    err << "warning: " << w << "\n";
}

std::string fmt_pct(double v) {
  if (std::isnan(v))
    return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * v);
  return buf;
}

} // namespace

std::string EpochStats::json() const {
  nlohmann::json j;
  j["epoch"] = epoch;
  j["loss"] = num(loss_per_node);
  j["root_acc"] = num(root_acc);
  j["node_acc"] = num(node_acc);
  j["dev_loss"] = num(dev_loss_per_node);
  j["dev_root_acc"] = num(dev_root_acc);
  j["dev_node_acc"] = num(dev_node_acc);
  j["trees"] = trees;
  j["nodes"] = nodes;
  j["trees_per_s"] = trees_per_s;
  j["seconds"] = seconds;
  j["batches"] = batches;
  j["specialized_batches"] = specialized_batches;
  j["generic_batches"] = generic_batches;
  j["specialized_seconds"] = specialized_seconds;
  j["generic_seconds"] = generic_seconds;
  j["jit_batches"] = jit_batches;
  j["jit_seconds"] = jit_seconds;
  j["kernels_compiled"] = kernels_compiled;
  j["compile_ms"] = compile_ms;
  j["first_planned_s"] = num(first_planned_s);
  j["first_jit_s"] = num(first_jit_s);
  j["last_compile_s"] = num(last_compile_s);
  j["plan_ms"] = plan_ms;
  j["background_plan_ms"] = background_plan_ms;
  j["plan_cache"] = {{"hits", plan_hits},
                     {"misses", plan_misses},
                     {"prefetched", plans_prefetched},
                     {"evictions", plan_evictions}};
  j["fallbacks"] = fallbacks;
  j["tuned"] = tuned.empty() ? nlohmann::json(nullptr) : nlohmann::json(tuned);
  if (kernels) {
    j["kernels"] = nlohmann::json::array();
    for (const auto& k : *kernels)
      j["kernels"].push_back({{"signature", k.signature},
                              {"schedule", k.schedule},
                              {"schedule_source", k.schedule_source},
                              {"compile_ms", k.compile_ms},
                              {"ir_hash", fmt::format("{:016x}", k.ir_hash)}});
  }
  return j.dump();
}

std::string EvalStats::json() const {
  nlohmann::json j;
  j["trees"] = trees;
  j["nodes"] = nodes;
  j["loss"] = num(loss_per_node);
  j["root_acc"] = num(root_acc);
  j["node_acc"] = num(node_acc);
  j["seconds"] = seconds;
  j["trees_per_s"] = trees_per_s;
  j["specialized_batches"] = specialized_batches;
  j["generic_batches"] = generic_batches;
  j["specialized_seconds"] = specialized_seconds;
  j["generic_seconds"] = generic_seconds;
  j["jit_seconds"] = jit_seconds;
  return j.dump();
}

std::vector<EpochStats> train(const TrainOptions& opt, std::ostream& out, std::ostream& err) {
  check_mode(opt.mode);
  if (opt.epochs < 1)
    throw Error("--epochs must be >= 1");
  if (opt.batch < 1)
    throw Error("--batch must be >= 1");
  // A bad --tuned file fails before anything is read or run.
  std::shared_ptr<const jit::ScheduleDB> tuned = load_tuned(opt.tuned);
  auto m = load_model(opt.model);
  ir::Type elem = batch_element_type(*m, "loss");

  data::Vocab vocab;
  checkpoint::Checkpoint init;
  if (!opt.init_params.empty()) {
    init = checkpoint::load(opt.init_params);
    vocab = data::Vocab::from_words(init.vocab);
  }
  Dataset train_ds = read_dataset(opt.data, vocab, opt.init_params.empty(), elem);
  train_ds.limit(opt.limit);
  Dataset dev_ds;
  if (!opt.dev.empty())
    dev_ds = read_dataset(opt.dev, vocab, false, elem);

  interp::DimBindings over;
  if (m->dim_index("V") >= 0)
    over["V"] = static_cast<int64_t>(vocab.size());
  interp::DimBindings dims = interp::bind_dims(*m, over);
  interp::Params params = interp::init_params(*m, dims, opt.seed);
  if (!opt.init_params.empty()) {
    for (size_t i = 0; i < params.names.size(); ++i) {
      int j = init.params.index(params.names[i]);
      if (j < 0)
        throw Error("checkpoint '" + opt.init_params + "' has no parameter " + params.names[i]);
      if (init.params.values[j].shape() != params.values[i].shape())
        throw Error("checkpoint '" + opt.init_params + "': parameter " + params.names[i] +
                    " has shape " + init.params.values[j].shape().str() + ", the model wants " +
                    params.values[i].shape().str());
      params.values[i] = init.params.values[j];
    }
  }

  Encoder enc;
  if (train_ds.is_trees)
    enc.trees.emplace(*m, elem->name);
  EngineOptions eo;
  eo.mode = parse_mode(opt.mode);
  eo.lookahead = opt.lookahead;
  eo.trace_file = opt.trace;
  eo.jit = opt.jit;
  eo.merge_equal = opt.merge;
  eo.schedules = tuned;
  Engine engine(m, dims, eo);
  warn_schedules(engine, err);

  optim::OptimizerOptions oo;
  oo.kind = optim::parse_kind(opt.optimizer);
  oo.lr = opt.lr;
  oo.weight_decay = opt.weight_decay;
  oo.clip_norm = opt.clip;
  optim::Optimizer optimizer(oo);

  const bool progress = opt.progress < 0 ? isatty(2) : opt.progress > 0;
  std::vector<size_t> order(train_ds.size());
  std::iota(order.begin(), order.end(), 0);
  uint64_t rng = opt.seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  auto next = [&rng]() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };

  std::vector<EpochStats> all;
  const size_t nb =
      (train_ds.size() + static_cast<size_t>(opt.batch) - 1) / static_cast<size_t>(opt.batch);
  for (int ep = 0; ep < opt.epochs; ++ep) {
    if (!opt.fixed_batches)
      for (size_t i = order.size(); i > 1; --i)
        std::swap(order[i - 1], order[next() % i]);
    EpochStats st;
    st.epoch = ep;
    double loss_sum = 0;
    auto last_print = Clock::now();
    EngineStats before = engine.stats();
    // Batches are encoded once, `lookahead` ahead of training, and handed to the pipeline (auto
    // mode). Without a pipeline each is encoded just before its step: encoded ahead, its values
    // would be out of the caches when the step walks them (the skeleton key, the scan).
    std::deque<Value> ahead;
    size_t encoded = 0;
    auto encode_ahead = [&](size_t upto) {
      std::vector<Value> fresh;
      for (; encoded < std::min(upto, nb); ++encoded) {
        size_t lo = encoded * static_cast<size_t>(opt.batch);
        size_t hi = std::min(train_ds.size(), lo + static_cast<size_t>(opt.batch));
        ahead.push_back(enc.batch(train_ds, order, lo, hi));
        fresh.push_back(ahead.back());
      }
      engine.prefetch("loss", std::move(fresh));
    };
    const size_t look = eo.mode == Mode::Auto ? static_cast<size_t>(std::max(1, opt.lookahead)) : 0;
    for (size_t b = 0; b < nb; ++b) {
      size_t lo = b * static_cast<size_t>(opt.batch);
      size_t hi = std::min(train_ds.size(), lo + static_cast<size_t>(opt.batch));
      encode_ahead(b + 1 + look);
      Value v = std::move(ahead.front());
      ahead.pop_front();
      auto t0 = Clock::now();
      auto g = engine.value_and_grad("loss", v, params);
      optimizer.step(params, g.grads);
      auto t1 = Clock::now();
      double dt = secs(t0, t1);
      st.seconds += dt;
      if (opt.explain) {
        std::string why = engine.explain("loss");
        if (!why.empty())
          err << "batch " << b << " ran generic: " << why << "\n";
      }
      if (!std::isfinite(g.loss))
        throw Error("the loss became " + std::to_string(g.loss) + " at epoch " +
                    std::to_string(ep) + ", batch " + std::to_string(b) +
                    " (try a smaller --lr or --clip)");
      loss_sum += g.loss;
      for (size_t i = lo; i < hi; ++i)
        st.nodes += train_ds.nodes(order[i]);
      st.trees += static_cast<int64_t>(hi - lo);
      st.batches += 1;
      if (progress && (secs(last_print, t1) > 0.25 || b + 1 == nb)) {
        last_print = t1;
        double tps = st.trees / std::max(st.seconds, 1e-9);
        double eta = static_cast<double>(train_ds.size() - static_cast<size_t>(st.trees)) /
                     std::max(tps, 1e-9);
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "\repoch %d  batch %zu/%zu  loss %.4f  %.0f trees/s  ETA %.0fs   ", ep + 1,
                      b + 1, nb, loss_sum / std::max<int64_t>(1, st.nodes), tps, eta);
        err << buf << std::flush;
      }
    }
    if (progress)
      err << "\n";
    engine.drain();
    EngineStats after = engine.stats();
    st.specialized_batches = after.specialized_batches - before.specialized_batches;
    st.generic_batches = after.generic_batches - before.generic_batches;
    st.specialized_seconds = after.specialized_seconds - before.specialized_seconds;
    st.generic_seconds = after.generic_seconds - before.generic_seconds;
    st.jit_batches = after.jit_batches - before.jit_batches;
    st.jit_seconds = after.jit_seconds - before.jit_seconds;
    st.kernels_compiled = after.kernels_compiled - before.kernels_compiled;
    st.compile_ms = after.compile_ms - before.compile_ms;
    auto since_start = [](double s) { return s < 0 ? std::nan("") : s; };
    st.first_planned_s = since_start(after.first_planned_s);
    st.first_jit_s = since_start(after.first_jit_s);
    st.last_compile_s = since_start(after.last_compile_s);
    st.plan_ms = 1e3 * (after.plan_seconds - before.plan_seconds);
    st.background_plan_ms = 1e3 * (after.background_plan_seconds - before.background_plan_seconds);
    st.plan_hits = after.plan_hits - before.plan_hits;
    st.plan_misses = after.plan_misses - before.plan_misses;
    st.plans_prefetched = after.plans_prefetched - before.plans_prefetched;
    st.plan_evictions = after.plan_evictions - before.plan_evictions;
    st.fallbacks = after.fallbacks;
    st.tuned = opt.tuned;
    st.loss_per_node = loss_sum / std::max<int64_t>(1, st.nodes);
    st.trees_per_s = st.trees / std::max(st.seconds, 1e-9);
    if (opt.train_eval) {
      Scores s = score(engine, *m, params, train_ds, enc, opt.batch);
      st.root_acc = ratio(s.root_ok, s.roots);
      st.node_acc = ratio(s.node_ok, s.labeled);
    }
    if (!opt.dev.empty()) {
      Scores s = score(engine, *m, params, dev_ds, enc, opt.batch);
      st.dev_loss_per_node = s.loss / std::max<int64_t>(1, s.nodes);
      st.dev_root_acc = ratio(s.root_ok, s.roots);
      st.dev_node_acc = ratio(s.node_ok, s.labeled);
    }
    if (ep + 1 == opt.epochs) {
      st.kernels.emplace();
      for (const auto& k : engine.kernels())
        st.kernels->push_back(
            {k.signature, k.schedule, k.schedule_source, k.ir_hash, k.compile_ms});
    }
    if (opt.json)
      out << st.json() << "\n" << std::flush;
    char buf[400];
    std::snprintf(
        buf, sizeof buf,
        "epoch %d: loss/node %.4f  train root %s node %s  dev root %s node %s  "
        "%.1f trees/s  %.2fs  (generic %lld batches %.2fs, specialized %lld %.2fs, "
        "of it on JIT kernels %.2fs: %s of time specialized)\n",
        ep + 1, st.loss_per_node, fmt_pct(st.root_acc).c_str(), fmt_pct(st.node_acc).c_str(),
        fmt_pct(st.dev_root_acc).c_str(), fmt_pct(st.dev_node_acc).c_str(), st.trees_per_s,
        st.seconds, static_cast<long long>(st.generic_batches), st.generic_seconds,
        static_cast<long long>(st.specialized_batches), st.specialized_seconds, st.jit_seconds,
        fmt_pct(st.specialized_seconds /
                std::max(st.specialized_seconds + st.generic_seconds, 1e-9))
            .c_str());
    (opt.json ? err : out) << buf << std::flush;
    all.push_back(st);
  }
  {
    const EpochStats& last = all.back();
    double trees = 0, seconds = 0, spec = 0, gen = 0;
    for (const auto& e : all) {
      trees += static_cast<double>(e.trees);
      seconds += e.seconds;
      spec += e.specialized_seconds;
      gen += e.generic_seconds;
    }
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "summary: %d epoch%s, %.0f trees in %.2fs of training (%.1f trees/s); final "
                  "loss/node %.4f, root accuracy train %s dev %s, all-node accuracy train %s dev "
                  "%s; %s of training time ran specialized\n",
                  opt.epochs, opt.epochs == 1 ? "" : "s", trees, seconds,
                  trees / std::max(seconds, 1e-9), last.loss_per_node,
                  fmt_pct(last.root_acc).c_str(), fmt_pct(last.dev_root_acc).c_str(),
                  fmt_pct(last.node_acc).c_str(), fmt_pct(last.dev_node_acc).c_str(),
                  fmt_pct(spec / std::max(spec + gen, 1e-9)).c_str());
    (opt.json ? err : out) << buf << std::flush;
  }
  engine.write_trace();
  if (!opt.save.empty()) {
    checkpoint::Checkpoint ck;
    ck.params = params;
    ck.vocab = vocab.words();
    ck.optimizer_state = optimizer.state();
    ck.meta["model"] = opt.model;
    checkpoint::save(opt.save, ck);
    (opt.json ? err : out) << "saved " << opt.save << "\n";
  }
  return all;
}

EvalStats evaluate(const EvalOptions& opt, std::ostream& out, std::ostream& err) {
  check_mode(opt.mode);
  if (opt.batch < 1)
    throw Error("--batch must be >= 1");
  std::shared_ptr<const jit::ScheduleDB> tuned = load_tuned(opt.tuned);
  auto m = load_model(opt.model);
  ir::Type elem = batch_element_type(*m, "loss");
  checkpoint::Checkpoint ck = checkpoint::load(opt.params);
  data::Vocab vocab = data::Vocab::from_words(ck.vocab);
  Dataset ds = read_dataset(opt.data, vocab, false, elem);
  ds.limit(opt.limit);
  interp::DimBindings over;
  if (m->dim_index("V") >= 0)
    over["V"] = static_cast<int64_t>(vocab.size());
  interp::DimBindings dims = interp::bind_dims(*m, over);
  interp::Params params = interp::init_params(*m, dims, 1);
  for (size_t i = 0; i < params.names.size(); ++i) {
    int j = ck.params.index(params.names[i]);
    if (j < 0)
      throw Error("checkpoint '" + opt.params + "' has no parameter " + params.names[i]);
    if (ck.params.values[j].shape() != params.values[i].shape())
      throw Error("checkpoint '" + opt.params + "': parameter " + params.names[i] + " has shape " +
                  ck.params.values[j].shape().str() + ", the model wants " +
                  params.values[i].shape().str());
    params.values[i] = ck.params.values[j];
  }
  Encoder enc;
  if (ds.is_trees)
    enc.trees.emplace(*m, elem->name);
  EngineOptions eo;
  eo.mode = parse_mode(opt.mode);
  eo.jit = opt.jit;
  eo.merge_equal = opt.merge;
  eo.schedules = tuned;
  Engine engine(m, dims, eo);
  warn_schedules(engine, err);
  auto t0 = Clock::now();
  Scores s = score(engine, *m, params, ds, enc, opt.batch);
  EvalStats st;
  st.seconds = secs(t0, Clock::now());
  EngineStats es = engine.stats();
  st.specialized_batches = es.specialized_batches;
  st.generic_batches = es.generic_batches;
  st.specialized_seconds = es.specialized_seconds;
  st.generic_seconds = es.generic_seconds;
  st.jit_seconds = es.jit_seconds;
  st.trees = static_cast<int64_t>(ds.size());
  st.nodes = s.nodes;
  st.loss_per_node = s.loss / std::max<int64_t>(1, s.nodes);
  st.root_acc = ratio(s.root_ok, s.roots);
  st.node_acc = ratio(s.node_ok, s.labeled);
  st.trees_per_s = st.trees / std::max(st.seconds, 1e-9);
  if (opt.json) {
    out << st.json() << "\n";
  } else {
    char buf[300];
    std::snprintf(buf, sizeof buf, "eval: %lld trees  loss/node %.4f  root %s  node %s  %.2fs\n",
                  static_cast<long long>(st.trees), st.loss_per_node, fmt_pct(st.root_acc).c_str(),
                  fmt_pct(st.node_acc).c_str(), st.seconds);
    out << buf;
  }
  return st;
}

void dump(const DumpOptions& opt, std::ostream& out, std::ostream* warnings) {
  if (opt.batch < 1)
    throw Error("--batch must be >= 1");
  std::shared_ptr<const jit::ScheduleDB> tuned = load_tuned(opt.tuned);
  auto m = load_model(opt.model);
  if (tuned && warnings != nullptr) {
    std::string w = tuned->cpu_warning(jit::Jit::host_cpu());
    if (!w.empty())
      *warnings << "warning: " << w << "\n";
  }
  ir::Type elem = batch_element_type(*m, opt.entry);
  data::Vocab vocab;
  Dataset ds = read_dataset(opt.data, vocab, true, elem);
  interp::DimBindings over;
  if (m->dim_index("V") >= 0)
    over["V"] = static_cast<int64_t>(vocab.size());
  interp::DimBindings dims = interp::bind_dims(*m, over);
  size_t lo = static_cast<size_t>(opt.batch_index) * static_cast<size_t>(opt.batch);
  if (opt.batch_index < 0 || lo >= ds.size())
    throw Error("--batch-index " + std::to_string(opt.batch_index) + " is past the data (" +
                std::to_string(ds.size()) + " examples)");
  size_t hi = std::min(ds.size(), lo + static_cast<size_t>(opt.batch));
  std::vector<size_t> idx(ds.size());
  std::iota(idx.begin(), idx.end(), 0);
  Encoder enc;
  if (ds.is_trees)
    enc.trees.emplace(*m, elem->name);
  Value batch = enc.batch(ds, idx, lo, hi);

  specializer::TemplateTable tt;
  auto t0 = Clock::now();
  auto pe = specializer::partially_evaluate(*m, dims, opt.entry, batch, tt);
  auto t1 = Clock::now();
  if (!pe.ok)
    throw Error("entry '" + opt.entry + "' cannot be specialized: " + pe.where.str() + ": " +
                pe.reason);
  size_t merged = 0;
  if (opt.merge) // as the engine plans (EngineOptions::merge_equal)
    merged = specializer::merge_equal_instances(pe.residual, specializer::equal_payload_slots(batch));
  specializer::Plan plan = specializer::make_plan(pe.residual, tt);
  auto t2 = Clock::now();
  char buf[240];
  std::snprintf(buf, sizeof buf,
                "batch %lld: %zu examples, partial evaluation %.0f us, planning %.0f us, %zu "
                "instances merged into equal ones\n",
                static_cast<long long>(opt.batch_index), hi - lo, secs(t0, t1) * 1e6,
                secs(t1, t2) * 1e6, merged);
  out << buf << specializer::dump_counts(pe.residual, plan, tt);
  {
    // The executor's arena for this plan: forward blocks, and with the seed and gradient
    // blocks of training.
    ExecLayout layout = make_layout(plan);
    out << "arena_bytes_forward=" << layout.forward_elems * 4
        << " arena_bytes_training=" << layout.total_elems * 4 << "\n";
  }
  if (opt.emit == "templates")
    out << specializer::dump_templates(pe.residual, tt, *m);
  else if (opt.emit == "instances")
    out << specializer::dump_instances(pe.residual, tt, *m);
  else if (opt.emit == "plan")
    out << plan.describe(tt);
  else if (opt.emit == "dot")
    out << specializer::dump_dot(pe.residual, tt, *m);
  else if (opt.emit == "kernels")
    out << print_kernel_dump(dump_kernels(*m, dims, plan, tt, false, tuned.get()));
  else if (opt.emit == "llvm")
    out << print_kernel_llvm(dump_kernels(*m, dims, plan, tt, true, tuned.get()));
  else
    throw Error("--emit must be templates, instances, plan, dot, kernels or llvm");
}

size_t tune(const TuneOptions& opt, std::ostream& out) {
  if (opt.batch < 1)
    throw Error("--batch must be >= 1");
  if (opt.out.empty())
    throw Error("tune: --out names the database to write");
  auto m = load_model(opt.model);
  ir::Type elem = batch_element_type(*m, "loss");
  data::Vocab vocab;
  Dataset ds = read_dataset(opt.data, vocab, true, elem);
  ds.limit(opt.limit);
  interp::DimBindings over;
  if (m->dim_index("V") >= 0)
    over["V"] = static_cast<int64_t>(vocab.size());
  interp::DimBindings dims = interp::bind_dims(*m, over);
  // Entries already in the database are kept (another CPU's, another model's): a corrupt one
  // is an error here, never silently overwritten.
  jit::ScheduleDB db(opt.out);
  if (std::ifstream(opt.out).good())
    db = jit::ScheduleDB::load(opt.out);

  // The kernels: those of every template the entries that training runs specialize to on
  // the data's batches (planning is cheap; nothing runs).
  std::vector<std::string> entries{"loss"};
  for (const char* e : {"infer_nodes", "infer"})
    if (m->fn(e) && m->fn(e)->is_entry)
      entries.push_back(e);
  Encoder enc;
  if (ds.is_trees)
    enc.trees.emplace(*m, elem->name);
  std::vector<size_t> idx(ds.size());
  std::iota(idx.begin(), idx.end(), 0);
  specializer::TemplateTable tt;
  for (size_t lo = 0; lo < ds.size(); lo += static_cast<size_t>(opt.batch)) {
    Value batch = enc.batch(ds, idx, lo, std::min(ds.size(), lo + static_cast<size_t>(opt.batch)));
    for (const auto& e : entries)
      (void)specializer::partially_evaluate(*m, dims, e, batch, tt); // a refusal: nothing to tune
  }
  std::vector<jit::KernelSpec> specs = template_kernel_specs(*m, dims, tt);
  std::vector<jit::GemmSpec> gemms = template_gemm_specs(*m, dims, tt);
  if (specs.empty() && gemms.empty())
    throw Error("tune: '" + opt.model + "' compiles no JIT kernel on '" + opt.data + "'");

  jit::Jit jit(jit::JitOptions{0});
  jit::TuneTiming to;
  to.rows = opt.rows;
  to.min_ms = opt.min_ms;
  to.repeats = opt.repeats;
  out << "tuning " << specs.size() + gemms.size() << " kernels on " << jit.target_cpu() << " (rows";
  for (int64_t r : opt.rows)
    out << " " << r;
  out << ")\n";
  for (const auto& spec : specs) {
    jit::ScheduleEntry e = jit::tune_kernel(jit, spec, to);
    out << fmt::format("{}: {} ({} candidates; default {:.2f} us, chosen {:.2f} us)\n", e.signature,
                       e.schedule, e.candidates, e.default_us, e.best_us)
        << std::flush;
    db.put(std::move(e));
  }
  for (const auto& spec : gemms) { // weight gradients: their register block
    jit::ScheduleEntry e = jit::tune_kernel(jit, spec, to);
    out << fmt::format("{}: {} ({} candidates; default {:.2f} us, chosen {:.2f} us)\n", e.signature,
                       e.schedule, e.candidates, e.default_us, e.best_us)
        << std::flush;
    db.put(std::move(e));
  }
  db.save(opt.out);
  out << "wrote " << opt.out << " (" << db.size() << " entries)\n";
  return specs.size() + gemms.size();
}

} // namespace pejit::runtime
