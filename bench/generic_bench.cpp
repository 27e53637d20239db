// pejit_generic_bench: the generic path's TreeLSTM training (and inference) speed through the
// C++ API, on SST-like trees generated in-process (or read from a file with --data).
//
// What is timed, per batch of --batch trees (docs/benchmarks.md's "training loop"): Interpreter::
// value_and_grad("loss") + Optimizer::step (Adagrad, lr 0.05). Encoding the batch's trees into
// ADT values is timed separately ("encode_s") and NOT included in trees/s, as in
// `pejit train` (runtime/train/train.cpp). Shuffled per epoch (xorshift, --seed).
// Inference (--infer): after the training epochs (--epochs 0: none), over the same trees in
// file order, three entries timed separately:
//  - `bench_infer_roots`, added here (kInferRoots below): forward (h, c) of every node,
//    classifier + argmax at the roots only: exactly the PyTorch peer's inference pass;
//  - the model's `infer`: argmax at the roots, but through `encode`, which also computes the
//    classifier + cross-entropy at every node (the eager interpreter does not drop it);
//  - the model's `infer_nodes`: argmax at every node (what `pejit eval` runs, after `loss`).
// With --infer-mode specialized the same entries run through runtime::Engine in specialized
// mode (a plan per batch, on JIT kernels), timed twice: a pass that plans each batch as it
// comes (the like-for-like figure), then one on the cached plans (a fixed evaluation set).
//
// Output: one human line per epoch and a summary with the median to stderr; with --json one
// JSON object per line to stdout.
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/synthetic.h"
#include "runtime/data/tree.h"
#include "runtime/data/tree_io.h"
#include "runtime/engine.h"
#include "src/interp/interpreter.h"
#include "src/interp/params.h"
#include "runtime/optim/optimizer.h"
#include "pejit/error.h"
#include "pejit/pejit.h"
#include "runtime/train/encode.h"
#include "src/types/check.h"
#include "src/util/diagnostics.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#ifndef PEJIT_DEFAULT_MODEL
#define PEJIT_DEFAULT_MODEL "examples/treelstm/treelstm.pe"
#endif

using namespace pejit;
using Clock = std::chrono::steady_clock;

namespace {

// Roots-only inference, like the PyTorch peer's predict(): no per-node classifier or loss.
const char* kInferRoots = R"(
fn bench_hc(t: Tree) -> (f32[150], f32[150]) {
  match t {
    Leaf(w, y) => leaf(take(emb, w))
    Node(l, r, y) => {
      let (hl, cl) = bench_hc(l);
      let (hr, cr) = bench_hc(r);
      cell(hl, cl, hr, cr)
    }
  }
}
entry bench_infer_roots(batch: List[Tree]) -> List[i32[]] {
  map(fn t => argmax(logits(bench_hc(t).0)), batch)
}
)";

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU time of this thread: unlike wall time, barely affected by other processes sharing the
// core (cache and frequency effects aside). Reported next to the wall-clock figure.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  if (v.empty())
    return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Counts {
  int64_t trees = 0, leaves = 0, internal = 0, labeled = 0, max_depth = 0;
  double mean_depth = 0;
};

Counts count(const std::vector<data::ParseTree>& ts) {
  Counts c;
  double dsum = 0;
  for (const auto& t : ts) {
    c.trees += 1;
    for (const auto& n : t.nodes) {
      (n.children.empty() ? c.leaves : c.internal) += 1;
      c.labeled += n.label >= 0;
    }
    int64_t d = static_cast<int64_t>(t.depth());
    dsum += static_cast<double>(d);
    c.max_depth = std::max(c.max_depth, d);
  }
  c.mean_depth = c.trees ? dsum / static_cast<double>(c.trees) : 0;
  return c;
}

// Useful forward FLOPs (docs/benchmarks.md): per leaf 2*300*450, per internal node 2*300*750, per
// (labelled) node classifier 2*150*5.
double forward_flops(const Counts& c) {
  return 2.0 * 300 * 450 * static_cast<double>(c.leaves) +
         2.0 * 300 * 750 * static_cast<double>(c.internal) +
         2.0 * 150 * 5 * static_cast<double>(c.leaves + c.internal);
}

} // namespace

int main(int argc, char** argv) {
  pejit::keep_freed_memory(); // as `pejit` does (include/pejit/pejit.h)
  CLI::App app{"pejit_generic_bench: generic-path TreeLSTM training/inference trees/s"};
  int64_t trees = 1000;
  int epochs = 3, batch = 25;
  std::string shape = "sst", model = PEJIT_DEFAULT_MODEL, data_file;
  uint64_t seed = 1;
  bool json = false, infer = false;
  int warmup = 0;
  app.add_option("--trees", trees, "trees to generate (or the first N of --data; 0: all)");
  app.add_option("--epochs", epochs, "timed training epochs");
  app.add_option("--warmup", warmup, "untimed batches run before the first epoch");
  app.add_option("--shape", shape, "sst, deep or balanced (generated data)");
  app.add_option("--batch", batch, "trees per batch");
  app.add_option("--seed", seed, "data, init and shuffle seed");
  app.add_option("--model", model, "the TreeLSTM program");
  app.add_option("--data", data_file, "read trees from this PTB/SST file instead of generating");
  std::string init;
  app.add_option("--init", init, "start from this pejit checkpoint (parameters and vocabulary)");
  app.add_flag("--infer", infer, "also time the `infer` and `infer_nodes` entries afterwards");
  std::string infer_mode = "generic";
  app.add_option("--infer-mode", infer_mode,
                 "path of the timed inference: generic (the interpreter) or specialized (plans "
                 "on JIT kernels through the engine)")
      ->check(CLI::IsMember({"generic", "specialized"}));
  app.add_flag("--json", json, "JSON lines on stdout");
  CLI11_PARSE(app, argc, argv);

  try {
    if (epochs < 0 || batch < 1)
      throw Error("--epochs must be >= 0 and --batch >= 1");
    if (epochs == 0 && !infer)
      throw Error("--epochs 0 needs --infer");
    auto m = std::make_shared<ir::Module>();
    Diagnostics d;
    if (!types::add_file(*m, model, d).ok)
      throw Error("model has errors:\n" + d.render());
    bool has_roots = types::add_source(*m, kInferRoots, "bench_infer_roots", d).ok;
    if (!has_roots)
      std::fprintf(stderr, "note: bench_infer_roots not added (model is not the TreeLSTM):\n%s",
                   d.render().c_str());

    data::Vocab vocab;
    checkpoint::Checkpoint ck;
    if (!init.empty()) {
      ck = checkpoint::load(init);
      vocab = data::Vocab::from_words(ck.vocab);
    }
    std::vector<data::ParseTree> ts;
    std::string source;
    auto tl0 = Clock::now();
    if (!data_file.empty()) {
      data::ReadOptions ro;
      ro.grow_vocab = init.empty();
      ts = data::read_trees(data_file, vocab, ro);
      if (trees > 0 && ts.size() > static_cast<size_t>(trees))
        ts.resize(static_cast<size_t>(trees));
      source = data_file;
    } else {
      ts = data::gen_sst(static_cast<size_t>(trees), seed, data::parse_shape(shape), vocab);
      source = "gen_sst:" + shape;
    }
    double load_s = secs(tl0, Clock::now());
    Counts cnt = count(ts);
    const double fwd_flops = forward_flops(cnt);

    interp::DimBindings over;
    if (m->dim_index("V") >= 0)
      over["V"] = static_cast<int64_t>(vocab.size());
    interp::DimBindings dims = interp::bind_dims(*m, over);
    interp::Params params = interp::init_params(*m, dims, seed);
    if (!init.empty()) {
      for (size_t i = 0; i < params.names.size(); ++i) {
        int j = ck.params.index(params.names[i]);
        if (j < 0 || ck.params.values[j].shape() != params.values[i].shape())
          throw Error("checkpoint '" + init + "' lacks " + params.names[i] +
                      " or its shape differs");
        params.values[i] = ck.params.values[j];
      }
    }
    ir::Type elem = runtime::batch_element_type(*m, "loss");
    runtime::TreeEncoder enc(*m, elem->name);
    interp::Interpreter in(m, dims);
    optim::OptimizerOptions oo; // Adagrad, lr 0.05, eps 1e-10
    optim::Optimizer opt(oo);

    std::fprintf(stderr,
                 "data %s: %lld trees, %lld leaves, %lld internal, %lld labelled nodes, mean "
                 "depth %.1f, max %lld (loaded in %.2fs); batch %d, %d epochs\n",
                 source.c_str(), (long long)cnt.trees, (long long)cnt.leaves,
                 (long long)cnt.internal, (long long)cnt.labeled, cnt.mean_depth,
                 (long long)cnt.max_depth, load_s, batch, epochs);

    std::vector<size_t> order(ts.size());
    std::iota(order.begin(), order.end(), 0);
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    auto next = [&rng]() {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      return rng;
    };
    auto make_batch = [&](size_t lo, size_t hi) {
      interp::Values xs;
      xs.reserve(hi - lo);
      for (size_t i = lo; i < hi; ++i)
        xs.push_back(enc.encode(ts[order[i]]));
      return interp::Value::list(std::move(xs));
    };
    const size_t B = static_cast<size_t>(batch);
    const size_t nb = (ts.size() + B - 1) / B;

    for (int w = 0; w < warmup && static_cast<size_t>(w) < nb; ++w) {
      size_t lo = static_cast<size_t>(w) * B, hi = std::min(ts.size(), lo + B);
      auto g = in.value_and_grad("loss", {make_batch(lo, hi)}, params);
      opt.step(params, g.grads);
    }

    std::vector<double> tps, cpu_tps;
    for (int ep = 0; ep < epochs; ++ep) {
      for (size_t i = order.size(); i > 1; --i)
        std::swap(order[i - 1], order[next() % i]);
      double train_s = 0, encode_s = 0, grad_s = 0, loss_sum = 0, cpu_s = 0;
      for (size_t b = 0; b < nb; ++b) {
        size_t lo = b * B, hi = std::min(ts.size(), lo + B);
        auto t0 = Clock::now();
        interp::Value v = make_batch(lo, hi);
        double c1 = cpu_now();
        auto t1 = Clock::now();
        auto g = in.value_and_grad("loss", {v}, params);
        auto t2 = Clock::now();
        opt.step(params, g.grads);
        auto t3 = Clock::now();
        cpu_s += cpu_now() - c1;
        encode_s += secs(t0, t1);
        grad_s += secs(t1, t2);
        train_s += secs(t1, t3);
        if (!std::isfinite(g.loss))
          throw Error("loss became non-finite");
        loss_sum += g.loss;
      }
      double r = static_cast<double>(cnt.trees) / train_s;
      tps.push_back(r);
      double rc = static_cast<double>(cnt.trees) / cpu_s;
      cpu_tps.push_back(rc);
      double gflops = 3 * fwd_flops / train_s * 1e-9;
      std::fprintf(stderr,
                   "epoch %d: %.1f trees/s (%.1f per CPU-second, %.0f nodes/s)  train %.3fs = "
                   "value_and_grad %.3fs + "
                   "step %.3fs; encode %.3fs (excluded)  loss/node %.4f  useful %.1f GFLOP/s\n",
                   ep + 1, r, rc, static_cast<double>(cnt.leaves + cnt.internal) / train_s, train_s,
                   grad_s, train_s - grad_s, encode_s, loss_sum / static_cast<double>(cnt.labeled),
                   gflops);
      if (json)
        std::printf(
            "{\"kind\":\"train\",\"source\":\"%s\",\"epoch\":%d,\"trees\":%lld,\"batch\":%d,"
            "\"trees_per_s\":%.3f,\"trees_per_cpu_s\":%.3f,\"seconds\":%.6f,\"grad_seconds\":%.6f,"
            "\"step_seconds\":%.6f,"
            "\"encode_seconds\":%.6f,\"loss_per_node\":%.6f,\"useful_gflops\":%.3f}\n",
            source.c_str(), ep, (long long)cnt.trees, batch, r, rc, train_s, grad_s,
            train_s - grad_s, encode_s, loss_sum / static_cast<double>(cnt.labeled), gflops);
    }
    if (!tps.empty()) {
      double med = median(tps);
      std::fprintf(stderr,
                   "TRAIN %s: median %.1f trees/s over %d epochs (min %.1f, max %.1f); "
                   "median %.1f trees per CPU-second\n",
                   source.c_str(), med, epochs, *std::min_element(tps.begin(), tps.end()),
                   *std::max_element(tps.begin(), tps.end()), median(cpu_tps));
      if (json)
        std::printf("{\"kind\":\"train_summary\",\"source\":\"%s\",\"median_trees_per_s\":%.3f,"
                    "\"min\":%.3f,\"max\":%.3f,\"median_trees_per_cpu_s\":%.3f,\"epochs\":%d}\n",
                    source.c_str(), med, *std::min_element(tps.begin(), tps.end()),
                    *std::max_element(tps.begin(), tps.end()), median(cpu_tps), epochs);
    }

    if (infer) {
      std::iota(order.begin(), order.end(), 0); // file order, like the peer's inference pass
      std::unique_ptr<runtime::Engine> engine;
      if (infer_mode == "specialized") {
        runtime::EngineOptions eo;
        eo.mode = runtime::Mode::Specialized;
        engine = std::make_unique<runtime::Engine>(m, dims, eo);
      }
      for (const char* entry : {"bench_infer_roots", "infer", "infer_nodes"}) {
        if (!m->fn(entry) || !m->fn(entry)->is_entry)
          continue;
        // One timed pass over every batch; `label` names the path in the output.
        auto pass = [&](const std::string& label) {
          double run_s = 0, encode_s = 0, cpu_s = 0;
          for (size_t b = 0; b < nb; ++b) {
            size_t lo = b * B, hi = std::min(ts.size(), lo + B);
            auto t0 = Clock::now();
            interp::Value v = make_batch(lo, hi);
            double c1 = cpu_now();
            auto t1 = Clock::now();
            interp::Value out = engine ? engine->run(entry, v, params) : in.run(entry, {v}, params);
            auto t2 = Clock::now();
            cpu_s += cpu_now() - c1;
            encode_s += secs(t0, t1);
            run_s += secs(t1, t2);
            (void)out;
          }
          double r = static_cast<double>(cnt.trees) / run_s;
          std::fprintf(stderr,
                       "INFER %s (%s, %s): %.1f trees/s (%.1f per CPU-second)  run %.3fs; encode "
                       "%.3fs (excluded)\n",
                       source.c_str(), entry, label.c_str(), r, cnt.trees / cpu_s, run_s, encode_s);
          if (json)
            std::printf(
                "{\"kind\":\"infer\",\"entry\":\"%s\",\"mode\":\"%s\",\"source\":\"%s\","
                "\"trees\":%lld,\"trees_per_s\":%.3f,\"trees_per_cpu_s\":%.3f,\"seconds\":%."
                "6f,\"encode_seconds\":%.6f}\n",
                entry, label.c_str(), source.c_str(), (long long)cnt.trees, r, cnt.trees / cpu_s,
                run_s, encode_s);
        };
        if (!engine) {
          pass("generic");
          continue;
        }
        // Specialized: the kernels compiled on the first batch (untimed), then a pass that
        // plans every other batch as it comes (like for like with a peer that batches each
        // batch as it comes), then a pass on the cached plans (a fixed evaluation set).
        (void)engine->run(entry, make_batch(0, std::min(ts.size(), B)), params);
        pass("specialized, planned inline");
        pass("specialized, cached plans");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pejit_generic_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
