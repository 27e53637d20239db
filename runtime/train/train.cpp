// The training loop behind `pejit train`, on a public Session: the model and data are read
// first (the vocabulary sizes the model's V), then every batch is a Session::step on `loss`
// with the session's optimizer. Time is measured around the training steps only: data loading
// and evaluation passes are excluded from trees/s, as the benchmark protocol asks of pejit and
// its peers alike (docs/benchmarks.md).
#include "runtime/train/trainer.h"

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/engine.h"
#include "runtime/session_access.h"
#include "runtime/train/common.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <numeric>
#include <ostream>
#include <unistd.h>

namespace pejit::runtime {

namespace {

nlohmann::json num(double v) {
  return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
}

// The per-epoch counters: the difference of the session's stats over the epoch.
void count_epoch(EpochStats& st, const SessionStats& before, const SessionStats& after) {
  st.specialized_batches = after.specialized_batches - before.specialized_batches;
  st.generic_batches = after.generic_batches - before.generic_batches;
  st.specialized_seconds = after.specialized_seconds - before.specialized_seconds;
  st.generic_seconds = after.generic_seconds - before.generic_seconds;
  st.threads = after.threads;
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
}

void print_epoch(const EpochStats& st, std::ostream& os) {
  char buf[400];
  std::snprintf(
      buf, sizeof buf,
      "epoch %d: loss/node %.4f  train root %s node %s  dev root %s node %s  "
      "%.1f trees/s  %.2fs  (generic %lld batches %.2fs, specialized %lld %.2fs, "
      "of it on JIT kernels %.2fs: %s of time specialized)\n",
      st.epoch + 1, st.loss_per_node, fmt_pct(st.root_acc).c_str(), fmt_pct(st.node_acc).c_str(),
      fmt_pct(st.dev_root_acc).c_str(), fmt_pct(st.dev_node_acc).c_str(), st.trees_per_s,
      st.seconds, static_cast<long long>(st.generic_batches), st.generic_seconds,
      static_cast<long long>(st.specialized_batches), st.specialized_seconds, st.jit_seconds,
      fmt_pct(st.specialized_seconds / std::max(st.specialized_seconds + st.generic_seconds, 1e-9))
          .c_str());
  os << buf << std::flush;
}

void print_summary(const std::vector<EpochStats>& all, std::ostream& os) {
  const EpochStats& last = all.back();
  double trees = 0, seconds = 0, spec = 0, gen = 0;
  for (const auto& e : all) {
    trees += static_cast<double>(e.trees);
    seconds += e.seconds;
    spec += e.specialized_seconds;
    gen += e.generic_seconds;
  }
  const int epochs = static_cast<int>(all.size());
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "summary: %d epoch%s, %.0f trees in %.2fs of training (%.1f trees/s); final "
                "loss/node %.4f, root accuracy train %s dev %s, all-node accuracy train %s dev "
                "%s; %s of training time ran specialized\n",
                epochs, epochs == 1 ? "" : "s", trees, seconds, trees / std::max(seconds, 1e-9),
                last.loss_per_node, fmt_pct(last.root_acc).c_str(),
                fmt_pct(last.dev_root_acc).c_str(), fmt_pct(last.node_acc).c_str(),
                fmt_pct(last.dev_node_acc).c_str(),
                fmt_pct(spec / std::max(spec + gen, 1e-9)).c_str());
  os << buf << std::flush;
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
  j["threads"] = threads;
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

namespace {

// An output file named by `flag` can be written: its directory exists, is a directory, and
// this process may create files in it. Throws pejit::Error naming the flag and the path.
void check_output_path(const char* flag, const std::string& path) {
  if (path.empty())
    return;
  namespace fs = std::filesystem;
  fs::path p(path);
  if (p.filename().empty())
    throw Error(std::string(flag) + " " + path + ": names a directory, not a file");
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::exists(dir, ec))
    throw Error(std::string(flag) + " " + path + ": the directory '" + dir.string() +
                "' does not exist");
  if (!fs::is_directory(dir, ec))
    throw Error(std::string(flag) + " " + path + ": '" + dir.string() + "' is not a directory");
  if (fs::is_directory(p, ec))
    throw Error(std::string(flag) + " " + path + ": is a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(std::string(flag) + " " + path + ": cannot write into '" + dir.string() + "'");
}

} // namespace

std::vector<EpochStats> train(const TrainOptions& opt, std::ostream& out, std::ostream& err) {
  (void)parse_mode(opt.session.mode); // a bad mode fails before anything is read
  if (opt.epochs < 1)
    throw Error("--epochs must be >= 1");
  if (opt.batch < 1)
    throw Error("--batch must be >= 1");
  // Where the results go is checked before any training: a run must not end by failing to
  // write what it computed.
  check_output_path("--save", opt.save);
  check_output_path("--trace", opt.session.trace_file);
  SessionOptions so = opt.session;
  // A bad --tuned file fails before anything is read or run.
  if (!opt.tuned.empty())
    so.compile.schedules = ScheduleDB::load(opt.tuned);
  auto m = load_model(opt.model);
  ir::Type elem = batch_element_type(*m, "loss");

  data::Vocab vocab;
  if (!opt.init_params.empty())
    vocab = data::Vocab::from_words(checkpoint::load(opt.init_params).vocab);
  Dataset train_ds = read_dataset(opt.data, vocab, opt.init_params.empty(), elem);
  train_ds.limit(opt.limit);
  Dataset dev_ds;
  if (!opt.dev.empty())
    dev_ds = read_dataset(opt.dev, vocab, false, elem);
  for (const auto& [name, size] : vocab_dims(*m, vocab))
    so.dims[name] = size;
  const Encoder enc(*m, train_ds, elem);

  Session session = SessionAccess::from_module(m, so);
  if (!opt.init_params.empty())
    session.load_params(opt.init_params);
  warn_schedules(so, err);

  const bool progress = opt.progress < 0 ? isatty(2) : opt.progress > 0;
  BatchOrder batch_order(train_ds.size(), so.seed);

  std::vector<EpochStats> all;
  const size_t nb =
      (train_ds.size() + static_cast<size_t>(opt.batch) - 1) / static_cast<size_t>(opt.batch);
  // Batches are encoded once, `lookahead` ahead of training, and handed to the session's
  // pipeline (auto mode). Without a pipeline each is encoded just before its step: encoded
  // ahead, its values would be out of the caches when the step walks them (the skeleton key,
  // the scan).
  const size_t look =
      parse_mode(so.mode) == Mode::Auto ? static_cast<size_t>(std::max(1, so.lookahead)) : 0;
  for (int ep = 0; ep < opt.epochs; ++ep) {
    const std::vector<size_t>& order = batch_order.next_epoch(!opt.fixed_batches);
    EpochStats st;
    st.epoch = ep;
    double loss_sum = 0;
    auto last_print = Clock::now();
    SessionStats before = session.stats();
    std::deque<pejit::Value> ahead;
    size_t encoded = 0;
    std::vector<pejit::Value> fresh;
    auto encode_ahead = [&](size_t upto) {
      fresh.clear();
      for (; encoded < std::min(upto, nb); ++encoded) {
        size_t lo = encoded * static_cast<size_t>(opt.batch);
        size_t hi = std::min(train_ds.size(), lo + static_cast<size_t>(opt.batch));
        ahead.push_back(SessionAccess::wrap(enc.batch(train_ds, order, lo, hi)));
        fresh.push_back(ahead.back());
      }
      session.prefetch("loss", fresh);
    };
    for (size_t b = 0; b < nb; ++b) {
      size_t lo = b * static_cast<size_t>(opt.batch);
      size_t hi = std::min(train_ds.size(), lo + static_cast<size_t>(opt.batch));
      encode_ahead(b + 1 + look);
      pejit::Value v = std::move(ahead.front());
      ahead.pop_front();
      auto t0 = Clock::now();
      float loss = session.step("loss", v);
      auto t1 = Clock::now();
      double dt = secs(t0, t1);
      st.seconds += dt;
      if (opt.explain) {
        std::string why = session.explain("loss");
        if (!why.empty())
          err << "batch " << b << " ran generic: " << why << "\n";
      }
      if (!std::isfinite(loss))
        throw Error("the loss became " + std::to_string(loss) + " at epoch " + std::to_string(ep) +
                    ", batch " + std::to_string(b) + " (try a smaller --lr or --clip)");
      loss_sum += loss;
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
    session.drain();
    count_epoch(st, before, session.stats());
    st.tuned = opt.tuned;
    st.loss_per_node = loss_sum / std::max<int64_t>(1, st.nodes);
    st.trees_per_s = st.trees / std::max(st.seconds, 1e-9);
    if (opt.train_eval) {
      Scores s = score(session, train_ds, enc, opt.batch);
      st.root_acc = ratio(s.root_ok, s.roots);
      st.node_acc = ratio(s.node_ok, s.labeled);
    }
    if (!opt.dev.empty()) {
      Scores s = score(session, dev_ds, enc, opt.batch);
      st.dev_loss_per_node = s.loss / std::max<int64_t>(1, s.nodes);
      st.dev_root_acc = ratio(s.root_ok, s.roots);
      st.dev_node_acc = ratio(s.node_ok, s.labeled);
    }
    if (ep + 1 == opt.epochs) {
      st.kernels.emplace();
      for (const auto& k : session.kernels())
        st.kernels->push_back(
            {k.signature, k.schedule, k.schedule_source, k.ir_hash, k.compile_ms});
    }
    if (opt.json)
      out << st.json() << "\n" << std::flush;
    print_epoch(st, opt.json ? err : out);
    all.push_back(st);
  }
  print_summary(all, opt.json ? err : out);
  session.write_trace();
  if (!opt.save.empty()) {
    session.save(opt.save, vocab.words(), {{"model", opt.model}});
    (opt.json ? err : out) << "saved " << opt.save << "\n";
  }
  return all;
}

} // namespace pejit::runtime
