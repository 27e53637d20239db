// Where a specialized training step's time goes, by kernel family, measured in situ: a model
// (the TreeLSTM unless --model names another) on shuffled 25-example batches, each
// partially evaluated, planned and run on its template graphs with JIT elementwise kernels
// (what `pejit train --mode specialized` does, without the plan cache), then an Adagrad step.
// Each batch is planned as the engine plans it (runtime::SpecializerService: one walk of the
// batch for its depth, key and payloads, then partial evaluation without copying the
// payloads, merging, planning, layout) and run on its payloads as the engine runs it.
// The plan executor times every launch (ExecOptions::profile); GEMM families report GFLOP/s
// and the fraction of this machine's SGEMM peak, measured in the same process (the best
// libxsmm rate over large square shapes). The last line is the model's roofline: the useful
// GEMM FLOPs per example (tree or sentence) and per step, and the whole step's rate (those
// FLOPs over the step's time, planning and the optimizer included) as a fraction of that peak.
//
//   pejit_profile_bench [TRAIN_FILE] [TREES] [EPOCHS] [--model FILE.pe]
//                       [--ab-panels | --ab-core | --ab-wgrad | --no-merge] [--threads N]
//                       [--serial-blocks] [--stages]
//
// Any model `pejit train` takes: the data file is read and encoded as `pejit train` reads it
// for the model's `loss` entry (runtime/train/common.h: trees into the batch element's ADT,
// root-labeled trees such as ListOps into their wrapper, plain sentences into List[i32[]];
// the child-sum TreeLSTM wants n-ary data: `pejit gen sst --arity K`). TREES counts examples.
// Equal instances are merged before planning, as the engine does (--no-merge: not).
// --threads N: the executor and the optimizer split their work across N threads (runtime::
// Workers, as `pejit train --threads N`; default 1), so that each family's time on N threads
// can be set beside its time on one; planning stays on the calling thread. With N > 1 the
// last epoch's splits are timed (runtime::SplitTimes): the splits' wall time, the blocks' time
// on the calling thread and on the other workers, the hand-off and the wait at the join.
// --stages: also where the last epoch's planning went, stage by stage, in microseconds per
// batch (runtime::PlanningStages: the batch's walk, its payloads' equality pattern, the scan
// and the evaluation of partial evaluation, merging, make_plan, make_layout), printed before
// the family table.
// --serial-blocks: the same blocks as N threads make, run in order on the calling thread
// (SplitPolicy::serial): the blocks' time on one core, to set beside the N-thread run's.
//
// --ab-panels: each batch's plan also runs on a second executor with ExecOptions::panels off
// (the GEMM whole, then its epilogue run), the two in alternating order, unprofiled; prints
// the per-batch time of both and the median of the per-batch ratios (paired, so the
// machine's minute-to-minute speed swings cancel). --ab-core: the same with
// ExecOptions::jit_gemm off instead (the panel kernels' GEMM rows on the C++ kernels of
// src/kernels/gemm.cpp, not on the kernels' generated core).
// --ab-wgrad: the same, with the second executor's weight gradients on
// kernels::sgemm_tn_stretches instead of their generated TN kernels
// (ExecOptions::jit_weight_grads off); both profiled, so that the weight-gradient GEMMs' own
// time is paired too.
//
// Without TRAIN_FILE (or when it does not exist) the data follow what the model reads: trees
// from ../shared/data/sst/train.txt, sentences from ../shared/data/ptb/valid.txt, when those
// optional files are there; else TREES generated examples, seed 1, as `pejit gen` makes them
// (SST-like trees, their words as sentences, or ListOps for a root-labeled wrapper).
#include "bench/bench_data.h"
#include "jit/jit.h"
#include "jit/kernel_cache.h"
#include "pejit/pejit.h"
#include "runtime/chrome_trace.h"
#include "runtime/data/synthetic.h"
#include "runtime/exec_layout.h"
#include "runtime/optim/optimizer.h"
#include "runtime/parallel.h"
#include "runtime/plan_executor.h"
#include "runtime/specializer_service.h"
#include "runtime/train/common.h"
#include "specializer/plan.h"
#include "src/kernels/kernels.h"
#include "src/types/check.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace pejit;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Best GFLOP/s of kernels::sgemm (libxsmm underneath) over a few large shapes, each run for at
// least 50 ms.
double sgemm_peak() {
  double best = 0;
  for (int64_t n : {256, 384, 512}) {
    std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(a), c(a);
    int reps = 0;
    auto t0 = Clock::now();
    do {
      kernels::sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      ++reps;
    } while (secs(t0, Clock::now()) < 0.05);
    best = std::max(best, 2.0 * static_cast<double>(n * n * n) * reps / secs(t0, Clock::now()));
  }
  return best / 1e9;
}

// Whether the batch element wraps a tree labeled at its root only (`Example(tree: Tree,
// label: i32[])`, ListOps): one constructor with a field of another ADT (TreeEncoder's rule).
bool root_labeled(const ir::Module& m, const ir::Type& elem) {
  const ir::TypeDecl* d = elem->kind == ir::TypeKind::Adt ? m.adt(elem->name) : nullptr;
  if (d == nullptr || d->ctors.size() != 1)
    return false;
  for (const auto& f : d->ctors[0].fields)
    if (f.type->kind == ir::TypeKind::Adt && f.type->name != elem->name)
      return true;
  return false;
}

// `n` generated examples of the kind the model reads, seed 1, words in `v`: what
// `pejit gen sst` (with --sentences for a sentence model) or `pejit gen listops` makes.
runtime::Dataset generated(const ir::Module& m, const ir::Type& elem, size_t n, data::Vocab& v) {
  runtime::Dataset ds;
  if (root_labeled(m, elem)) {
    ds.trees = data::gen_listops(n, 1, v);
    return ds;
  }
  ds.trees = data::gen_sst(n, 1, data::Shape::Sst, v);
  if (elem->kind == ir::TypeKind::List) { // the leaves, left to right (post-order keeps it)
    ds.is_trees = false;
    for (const auto& t : ds.trees) {
      std::vector<int32_t> words;
      for (const auto& node : t.nodes)
        if (node.children.empty())
          words.push_back(node.word);
      ds.sents.push_back(std::move(words));
    }
    ds.trees.clear();
  }
  return ds;
}

} // namespace

int main(int argc, char** argv) {
  pejit::keep_freed_memory(); // as `pejit` does (include/pejit/pejit.h)
  std::vector<std::string> pos;
  std::string ab_mode, model = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";
  int threads = 1;
  runtime::SplitPolicy policy;
  bool stages_on = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc)
      model = argv[++i];
    else if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
      if (threads < 1) {
        std::fprintf(stderr, "pejit_profile_bench: --threads takes a count of at least 1\n");
        return 2;
      }
    } else if (a == "--serial-blocks")
      policy.serial = true;
    else if (a == "--stages")
      stages_on = true;
    else if (a == "--ab-panels" || a == "--ab-core" || a == "--ab-wgrad" || a == "--no-merge")
      ab_mode = a;
    else if (a.rfind("--", 0) != 0 && pos.size() < 3)
      pos.push_back(a);
    else {
      std::fprintf(stderr, "pejit_profile_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::string data = !pos.empty() ? pos[0] : "";
  size_t limit = pos.size() > 1 ? std::stoul(pos[1]) : 2000;
  int epochs = pos.size() > 2 ? std::stoi(pos[2]) : 2;
  const bool ab_wgrad = ab_mode == "--ab-wgrad";
  const bool ab = ab_mode == "--ab-panels" || ab_mode == "--ab-core" || ab_wgrad;
  const bool merge = ab_mode != "--no-merge";
  auto m = std::make_shared<ir::Module>();
  Diagnostics d;
  if (!types::add_file(*m, model, d).ok) {
    std::fputs(d.render().c_str(), stderr);
    return 2;
  }
  data::Vocab v;
  runtime::Dataset ds;
  std::vector<interp::Value> encoded;
  interp::DimBindings dims;
  try {
    const ir::Type elem = runtime::batch_element_type(*m, "loss");
    if (data.empty() && !root_labeled(*m, elem))
      data = PEJIT_SOURCE_DIR "/../shared/data/" +
             std::string(elem->kind == ir::TypeKind::Adt ? "sst/train.txt" : "ptb/valid.txt");
    if (!data.empty() && std::filesystem::exists(data))
      ds = runtime::read_dataset(data, v, true, elem);
    else {
      if (!pos.empty() && !pos[0].empty())
        std::fprintf(stderr, "pejit_profile_bench: %s not found; using generated data\n",
                     data.c_str());
      ds = generated(*m, elem, limit, v);
    }
    bench::EncodedData e = bench::encode_examples(*m, ds, elem, v, limit);
    dims = std::move(e.dims);
    encoded = std::move(e.examples);
  } catch (const Error& e) {
    std::fprintf(stderr, "pejit_profile_bench: %s\n", e.what());
    return 2;
  }
  if (encoded.size() < 25) {
    std::fprintf(stderr, "pejit_profile_bench: %zu examples; a batch takes 25\n", encoded.size());
    return 2;
  }
  const char* unit = ds.is_trees ? "tree" : "sentence";

  double peak_before = sgemm_peak();
  jit::Jit jit;
  jit::KernelCache cache(jit, 256);
  auto split_workers = std::make_shared<runtime::Workers>(threads, policy);
  std::shared_ptr<const runtime::Workers> workers = split_workers;
  runtime::SplitTimes splits;
  runtime::ExecOptions eo;
  eo.kernels = &cache;
  eo.profile = true;
  eo.workers = workers.get();
  runtime::PlanExecutor exec(m, dims, eo);
  runtime::ExecOptions on = eo, off = eo;
  on.profile = off.profile = ab_wgrad;
  if (ab_mode == "--ab-core")
    off.jit_gemm = false;
  else
    off.panels = ab_wgrad;
  off.jit_weight_grads = !ab_wgrad;
  runtime::PlanExecutor exec_on(m, dims, on), exec_off(m, dims, off);
  std::vector<double> ab_on, ab_off, dw_on, dw_off; // dw: the weight-gradient GEMMs alone
  auto dw_seconds = [](const runtime::PlanExecutor& ex) {
    return ex.stats().profile[static_cast<size_t>(runtime::Family::GemmWeightGrad)].seconds;
  };
  interp::Params params = interp::init_params(*m, dims, 1);
  optim::Optimizer opt(optim::OptimizerOptions{});
  opt.set_workers(workers);
  runtime::ChromeTrace trace(false);
  runtime::SpecializerService service(m, dims, merge, nullptr, trace);
  runtime::PlanningStages stages; // --stages: the last epoch's
  interp::RandomState rs;
  rs.seed = 1;
  rs.train = true;

  std::vector<size_t> order(encoded.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(1);
  double plan_s = 0, run_s = 0, step_s = 0, total_s = 0, ab_s = 0;
  size_t nbatches = 0;
  runtime::Profile first{}; // epoch 0 includes the first batch's compiles: report the last epoch
  for (int ep = 0; ep < epochs; ++ep) {
    std::shuffle(order.begin(), order.end(), rng);
    if (ep + 1 == epochs) {
      first = exec.stats().profile;
      if (threads > 1 && !ab) // the A/B executors' splits are not the training's
        split_workers->time_splits(&splits);
      if (stages_on)
        service.time_stages(&stages);
      plan_s = run_s = step_s = total_s = 0;
      nbatches = 0;
    }
    auto e0 = Clock::now();
    for (size_t b = 0; (b + 1) * 25 <= order.size(); ++b) {
      interp::Values xs;
      for (size_t i = b * 25; i < (b + 1) * 25; ++i)
        xs.push_back(encoded[order[i]]);
      auto t0 = Clock::now();
      interp::Value batch = interp::Value::list(xs);
      runtime::BatchPart part = service.batch_part(batch);
      const runtime::PlanKey key = service.key("loss", part.key);
      std::string why;
      double plan_seconds = 0;
      auto entry = service.make("loss", batch, key.slots, why, plan_seconds,
                                runtime::BatchKnown{part.depth, part.skeleton});
      if (!entry) {
        std::fprintf(stderr, "pejit_profile_bench: a batch was not planned: %s\n", why.c_str());
        return 1;
      }
      auto t1 = Clock::now();
      // The plan's constants and outputs with this batch's payloads, as the engine runs it.
      const specializer::Plan& plan = entry->plan;
      const runtime::ExecLayout& layout = entry->layout;
      const specializer::TemplateTable& tt = *entry->templates;
      const specializer::Residual residual =
          specializer::with_payloads(entry->residual, std::move(part.payloads), rs);
      rs.step++;
      auto g = exec.value_and_grad(plan, residual, tt, params, &layout);
      auto t2 = Clock::now();
      if (ab && ep + 1 == epochs) {
        for (int k = 0; k < 2; ++k) {
          bool first_on = (b + static_cast<size_t>(k)) % 2 == 0;
          for (auto* ex : {first_on ? &exec_on : &exec_off, first_on ? &exec_off : &exec_on}) {
            double w0 = dw_seconds(*ex);
            auto a0 = Clock::now();
            (void)ex->value_and_grad(plan, residual, tt, params, &layout);
            (ex == &exec_on ? ab_on : ab_off).push_back(secs(a0, Clock::now()));
            (ex == &exec_on ? dw_on : dw_off).push_back(dw_seconds(*ex) - w0);
          }
        }
      }
      auto t2s = Clock::now();
      opt.step(params, g.grads);
      auto t3 = Clock::now();
      plan_s += secs(t0, t1);
      run_s += secs(t1, t2);
      step_s += secs(t2s, t3);
      ab_s += secs(t2, t2s);
      ++nbatches;
    }
    total_s += secs(e0, Clock::now()) - ab_s; // the A/B runs are not the training's
    ab_s = 0;
  }
  double peak_after = sgemm_peak();
  double peak = std::max(peak_before, peak_after);

  const runtime::Profile& all = exec.stats().profile;
  double trees_n = static_cast<double>(nbatches * 25);
  std::printf("last epoch, %d thread%s: %zu batches of 25 %ss, %.1f %ss/s (%.2f ms per batch: "
              "PE+plan %.2f, plan run %.2f, optimizer %.2f)\n",
              threads, threads == 1 ? "" : "s", nbatches, unit, trees_n / total_s, unit,
              1e3 * total_s / nbatches, 1e3 * plan_s / nbatches, 1e3 * run_s / nbatches,
              1e3 * step_s / nbatches);
  const runtime::SpecializerService::MemoFacts memo = service.fragment_memo();
  std::printf("fragment memo after the run: %.1f MiB%s\n",
              static_cast<double>(memo.bytes) / (1 << 20),
              memo.full ? " (full: past its bound, replaying what it holds)" : "");
  std::printf("SGEMM peak in this run: %.1f GFLOP/s before, %.1f after\n", peak_before, peak_after);
  if (stages_on) {
    service.time_stages(nullptr);
    auto us = [](double s, int64_t n) { return n > 0 ? 1e6 * s / static_cast<double>(n) : 0.0; };
    const int64_t w = stages.walked, p = stages.planned;
    std::printf("planning stages, us per batch: walk %.1f, payload pattern %.1f, scan %.1f, "
                "evaluation %.1f, merge %.1f, plan %.1f, layout %.1f (%lld batches)\n",
                us(stages.walk, w), us(stages.payload_pattern, w), us(stages.scan, p),
                us(stages.evaluate, p), us(stages.merge, p), us(stages.plan, p),
                us(stages.layout, p), static_cast<long long>(p));
  }
  std::printf("%-28s %9s %11s %8s %9s %8s\n", "family", "calls/bt", "ms/batch", "of run", "GFLOP/s",
              "of peak");
  double profiled = 0;
  for (size_t f = 0; f < all.size(); ++f) {
    double s = all[f].seconds - first[f].seconds;
    double flops = all[f].flops - first[f].flops;
    int64_t calls = all[f].calls - first[f].calls;
    profiled += s;
    char rate[16] = "", share[16] = "";
    if (flops > 0 && s > 0) {
      std::snprintf(rate, sizeof rate, "%.1f", flops / s / 1e9);
      std::snprintf(share, sizeof share, "%.0f%%", 100 * flops / s / 1e9 / peak);
    }
    std::printf("%-28s %9.1f %11.3f %7.1f%% %9s %8s\n",
                runtime::family_name(static_cast<runtime::Family>(f)),
                static_cast<double>(calls) / nbatches, 1e3 * s / nbatches, 100 * s / run_s, rate,
                share);
  }
  std::printf("%-28s %9s %11.3f %7.1f%%\n", "(not in a family)", "",
              1e3 * (run_s - profiled) / nbatches, 100 * (run_s - profiled) / run_s);
  split_workers->time_splits(nullptr);
  if (splits.splits > 0) {
    const double nb = static_cast<double>(nbatches);
    const double busy = splits.caller_busy + splits.worker_busy;
    std::printf("splits%s: %.1f per batch, %.1f blocks each (%.1f%% on other workers); wall "
                "%.3f ms per batch, blocks' time %.3f ms (calling thread %.3f, others %.3f) = "
                "%.2f of %d x wall; hand-off %.1f us per split, the calling thread waits %.1f "
                "us per split at the join\n",
                policy.serial ? " (blocks in order on the calling thread)" : "",
                static_cast<double>(splits.splits) / nb,
                static_cast<double>(splits.blocks) / static_cast<double>(splits.splits),
                100.0 * static_cast<double>(splits.worker_blocks) /
                    static_cast<double>(splits.blocks),
                1e3 * splits.wall / nb, 1e3 * busy / nb, 1e3 * splits.caller_busy / nb,
                1e3 * splits.worker_busy / nb, busy / (threads * splits.wall), threads,
                1e6 * splits.worker_start / static_cast<double>(splits.splits),
                1e6 * splits.caller_wait / static_cast<double>(splits.splits));
    std::printf("%-28s %9s %11s %11s %9s\n", "splits by family", "splits/bt", "wall ms/bt",
                "blocks ms/bt", "busy");
    for (int tag = 0; tag < runtime::SplitTimes::kTags; ++tag) {
      const auto& g = splits.by_tag[static_cast<size_t>(tag)];
      if (g.splits == 0)
        continue;
      const char* name = tag == runtime::SplitTimes::kOptimizerTag ? "optimizer"
                         : tag == runtime::SplitTimes::kUntagged
                             ? "(untagged)"
                             : runtime::family_name(static_cast<runtime::Family>(tag));
      std::printf("%-28s %9.1f %11.3f %11.3f %8.2f\n", name, static_cast<double>(g.splits) / nb,
                  1e3 * g.wall / nb, 1e3 * g.busy / nb, g.busy / (threads * g.wall));
    }
  }
  // The roofline: every GEMM family's FLOPs (the useful work: what the model's products
  // compute, forward and backward) over the whole step's time.
  double gemm_flops = 0;
  for (size_t f = 0; f < all.size(); ++f)
    gemm_flops += all[f].flops - first[f].flops;
  const double no_plan_s = total_s - plan_s; // the engine's pipeline plans in the background
  std::printf("roofline %s: %.2f MFLOP per %s, %.1f MFLOP per step; the step runs at %.1f "
              "GFLOP/s = %.0f%% of the SGEMM peak (%.0f%% without the inline planning)\n",
              std::filesystem::path(model).filename().c_str(), gemm_flops / trees_n / 1e6, unit,

              gemm_flops / nbatches / 1e6, gemm_flops / total_s / 1e9,
              100 * gemm_flops / total_s / 1e9 / peak, 100 * gemm_flops / no_plan_s / 1e9 / peak);
  if (ab && !ab_on.empty()) {
    std::vector<double> ratio;
    for (size_t i = 0; i < ab_on.size(); ++i)
      ratio.push_back(ab_on[i] / ab_off[i]);
    std::sort(ratio.begin(), ratio.end());
    double on_s = std::accumulate(ab_on.begin(), ab_on.end(), 0.0);
    double off_s = std::accumulate(ab_off.begin(), ab_off.end(), 0.0);
    const char* what = ab_wgrad                 ? "JIT weight gradients"
                       : ab_mode == "--ab-core" ? "generated GEMM core"
                                                : "panels";
    std::printf("A/B plan run, %zu paired runs: %s on %.2f ms, off %.2f ms per run; on/off "
                "per-run ratio median %.3f (p25 %.3f, p75 %.3f)\n",
                ab_on.size(), what, 1e3 * on_s / static_cast<double>(ab_on.size()),
                1e3 * off_s / static_cast<double>(ab_off.size()), ratio[ratio.size() / 2],
                ratio[ratio.size() / 4], ratio[3 * ratio.size() / 4]);
    if (ab_wgrad) {
      std::vector<double> dr;
      for (size_t i = 0; i < dw_on.size(); ++i)
        dr.push_back(dw_on[i] / dw_off[i]);
      std::sort(dr.begin(), dr.end());
      std::printf("A/B weight-gradient GEMMs alone: on %.3f ms, off %.3f ms per run; on/off "
                  "per-run ratio median %.3f (p25 %.3f, p75 %.3f)\n",
                  1e3 * std::accumulate(dw_on.begin(), dw_on.end(), 0.0) /
                      static_cast<double>(dw_on.size()),
                  1e3 * std::accumulate(dw_off.begin(), dw_off.end(), 0.0) /
                      static_cast<double>(dw_off.size()),
                  dr[dr.size() / 2], dr[dr.size() / 4], dr[3 * dr.size() / 4]);
    }
  }
  return 0;
}
