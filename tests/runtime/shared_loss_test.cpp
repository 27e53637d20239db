// Cross-entropy with one operand shared by every row of a group: a template specialized to
// the zero state (one logits row for all its rows, per-row labels) and one with a label
// computed from a parameter (per-row logits). Both lower to cross-entropy kernels that read
// the shared operand with stride 0 (jit/reduce_spec.h); their plans match the generic path on
// every executor (loss and every gradient), no group runs in the batching interpreter, and
// on JIT kernels one thread and two give the same bits. Also the language model's wide
// cross-entropy, whose backward reads the row statistics of its forward (jit::ReduceSpec::
// row_stats).
#include "runtime/parallel.h"
#include "specializer/template_graph.h"
#include "tests/support/plan_check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace tests_runtime_shared_loss_test {

using namespace pejit;

namespace {

constexpr const char* kModel = PEJIT_SOURCE_DIR "/tests/runtime/models/shared_loss.pe";
constexpr const char* kLm = PEJIT_SOURCE_DIR "/examples/rnn/rnn.pe";

// Sentences of lengths 0 to 6 over `vocab` words, as List[List[i32[]]].
interp::Value sentences(int count, int vocab) {
  interp::Values sents;
  for (int s = 0; s < count; ++s) {
    interp::Values words;
    for (int w = 0; w < s % 7; ++w)
      words.push_back(interp::Value::tensor(Tensor::scalar_i32((s * 7 + w * 3) % vocab)));
    sents.push_back(interp::Value::list(words));
  }
  return interp::Value::list(sents);
}

// The batch's `loss` partially evaluated and planned, with the table of its templates.
struct LossPlan {
  specializer::TemplateTable tt;
  specializer::PeResult pe;
  specializer::Plan plan;
  LossPlan(test::FileModel& md, const interp::Value& batch)
      : pe(specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt)) {
    REQUIRE(pe.ok);
    plan = specializer::make_plan(pe.residual, tt);
  }
};

// An executor on JIT kernels (the test program's shared cache), on `workers` if given.
runtime::PlanExecutor jit_executor(test::FileModel& md, const runtime::Workers* workers) {
  runtime::ExecOptions o;
  o.kernels = &test::shared_test_kernels();
  o.workers = workers;
  return runtime::PlanExecutor(md.m, md.dims, o);
}

// The cross-entropy reductions of the batch's templates, by their spec's text (a backward
// that reads row statistics: then " from " and its forward's).
std::vector<std::string> loss_kernels(test::FileModel& md, const interp::Value& batch) {
  LossPlan lp(md, batch);
  const specializer::TemplateTable& tt = lp.tt;
  std::vector<std::string> out;
  for (size_t i = 0; i < tt.size(); ++i) {
    const auto& t = tt.at(static_cast<int32_t>(i));
    if (t.name != "word_loss" && t.name != "bias_word")
      continue;
    auto tg = specializer::compile_template(*md.m, md.dims, t);
    const specializer::KernelProgram& p = tg.program;
    CHECK_MESSAGE(p.supported(), t.name << ": " << p.why);
    for (const auto& r : p.reductions)
      if (r.spec.kind == jit::ReduceKind::CrossEntropy ||
          r.spec.kind == jit::ReduceKind::CrossEntropyBwd)
        out.push_back(
            r.spec.signature() +
            (r.stats_from >= 0
                 ? " from " + p.reductions[static_cast<size_t>(r.stats_from)].spec.signature()
                 : ""));
  }
  return out;
}

// The plan's loss and gradients on JIT kernels with 1 thread and with 2 (every row block its
// own hand-off): `check` sees each run's executor stats, and both give the same bits.
template <class Check>
void check_threads_same_bits(test::FileModel& md, const interp::Value& batch, Check check) {
  LossPlan lp(md, batch);
  std::vector<float> losses;
  std::vector<std::vector<Tensor>> grads;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    runtime::Workers workers(threads, runtime::SplitPolicy{1});
    runtime::PlanExecutor ex = jit_executor(md, &workers);
    auto got = ex.value_and_grad(lp.plan, lp.pe.residual, lp.tt, md.params);
    check(ex.stats());
    losses.push_back(static_cast<float>(got.loss));
    grads.emplace_back();
    for (size_t p = 0; p < md.params.values.size(); ++p)
      grads.back().push_back(got.grads[p].to_dense(md.params.values[p].shape()));
  }
  CHECK(test::same_bits(static_cast<double>(losses[0]), static_cast<double>(losses[1])));
  for (size_t p = 0; p < grads[0].size(); ++p) {
    CAPTURE(md.params.names[p]);
    CHECK(test::same_bits(grads[0][p], grads[1][p]));
  }
}

} // namespace

TEST_SUITE("runtime") {
  TEST_CASE("shared loss: cross_entropy of one logits row or one label for every row lowers "
            "to its kernels and its plans == generic path with the same bits on 1 and 2 "
            "threads") {
    const int vocab = 12;
    test::FileModel md(kModel, vocab);
    interp::Value batch = sentences(30, vocab);
    for (const auto& [mode, st] : test::check_plan_matches_generic(md, batch)) {
      std::string exec = test::exec_name(mode);
      CAPTURE(exec);
      if (mode == test::Exec::Interpreter)
        continue;
      CHECK(st.graph_fallbacks.empty());
      CHECK(st.interpreted_templates.empty());
      CHECK(st.groups_interpreted == 0);
      if (mode == test::Exec::GraphsJit)
        CHECK(st.jit_reductions > 0);
    }
    // Both shared forms, forward and backward, on their own kernels.
    auto kernels = loss_kernels(md, batch);
    auto has = [&](const std::string& s) {
      return std::find(kernels.begin(), kernels.end(), s) != kernels.end();
    };
    const std::string w = " w=" + std::to_string(vocab);
    CHECK(has("reduce f32 cross_entropy" + w + " shared=logits"));
    CHECK(has("reduce f32 cross_entropy_bwd" + w + " shared=logits"));
    CHECK(has("reduce f32 cross_entropy" + w + " shared=label"));
    CHECK(has("reduce f32 cross_entropy_bwd" + w + " shared=label"));
    CHECK(has("reduce f32 cross_entropy" + w));

    // Narrow logits: no row statistics.
    for (const std::string& k : kernels)
      CHECK(k.find(" stats") == std::string::npos);

    check_threads_same_bits(md, batch,
                            [](const runtime::PlanStats& st) { CHECK(st.jit_reductions > 0); });
  }

  TEST_CASE("row statistics: the language model's wide cross-entropy backward reads its "
            "forward's and its plans == generic path with the same bits on 1 and 2 threads") {
    const int vocab = 300; // from kStatsWidth (256) on, as a vocabulary's logits are
    test::FileModel md(kLm, vocab);
    interp::Value batch = sentences(30, vocab);
    for (const auto& [mode, st] : test::check_plan_matches_generic(md, batch)) {
      CAPTURE(test::exec_name(mode));
      if (mode != test::Exec::Interpreter)
        CHECK(st.groups_interpreted == 0);
      if (mode == test::Exec::GraphsJit)
        CHECK(st.ce_from_stats > 0);
      else
        CHECK(st.ce_from_stats == 0); // reference kernels: no statistics
    }
    const std::string w = " w=" + std::to_string(vocab);
    // Per-row logits linked; the first word's (from the zero state: one logits row for all)
    // without statistics.
    auto kernels = loss_kernels(md, batch);
    std::sort(kernels.begin(), kernels.end());
    CHECK(kernels == std::vector<std::string>{"reduce f32 cross_entropy" + w + " shared=logits",
                                              "reduce f32 cross_entropy" + w + " stats",
                                              "reduce f32 cross_entropy_bwd" + w + " shared=logits",
                                              "reduce f32 cross_entropy_bwd" + w + " stats from " +
                                                  "reduce f32 cross_entropy" + w + " stats"});
    check_threads_same_bits(md, batch,
                            [](const runtime::PlanStats& st) { CHECK(st.ce_from_stats > 0); });
  }

  TEST_CASE("row statistics: a run reuses the last run's scratch buffer, which the statistics "
            "it kept do not hold") {
    const int vocab = 300;
    test::FileModel md(kLm, vocab);
    LossPlan lp(md, sentences(30, vocab));
    runtime::PlanExecutor ex = jit_executor(md, nullptr);
    auto step = [&] { return ex.value_and_grad(lp.plan, lp.pe.residual, lp.tt, md.params).loss; };
    const double first = step();
    CHECK(ex.stats().scratch_buffers == 0); // the first run: no buffer yet
    for (int i = 0; i < 3; ++i) {
      CHECK(test::same_bits(step(), first));
      CHECK(ex.stats().ce_from_stats > 0);
      CHECK(ex.stats().scratch_buffers == 1);
    }
  }
}

} // namespace tests_runtime_shared_loss_test
