// PlanExecutor on its own: a planned TreeLSTM batch against the generic path on every executor
// configuration (the batching interpreter; template graphs on reference kernels; on JIT
// kernels, with their panels, generated GEMM cores or TN weight-gradient kernels turned off;
// with a runner cache shared with another executor; with kernels it may not compile itself);
// configurations that differ only in who builds or compiles give the same bits; the arena is
// reused across runs and plans without a trace in the results; and misuse is an error.
#include "jit/jit.h"
#include "jit/kernel_cache.h"
#include "pejit/error.h"
#include "runtime/exec_layout.h"
#include "runtime/plan_executor.h"
#include "runtime/runner_cache.h"
#include "specializer/residual.h"
#include "src/interp/interpreter.h"
#include "src/util/asan.h"
#include "src/util/check.h"
#include "tests/support/compare.h"
#include "tests/support/planned_batch.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

namespace tests_runtime_plan_executor_test {

using namespace pejit;
using test::PlannedBatch;

namespace {

// The executor for options `o`, made the way the engine makes its own.
std::unique_ptr<runtime::PlanExecutor> make_executor(const PlannedBatch& b,
                                                     const runtime::ExecOptions& o) {
  return std::make_unique<runtime::PlanExecutor>(b.m, b.dims, o);
}

jit::KernelCache& shared_kernels() {
  static jit::Jit jit;
  static jit::KernelCache cache(jit, 512);
  return cache;
}

enum class Config {
  Interpreter,    ///< every group through the batching interpreter
  Graphs,         ///< template graphs on reference kernels
  Jit,            ///< template graphs on JIT kernels, compiled before first use
  NoPanels,       ///< JIT, the GEMMs whole and then their epilogues
  CppCores,       ///< JIT panels whose GEMM rows run on the C++ kernels
  RefWeightGrads, ///< JIT, the weight gradients on the reference TN kernel
  NotCompiled,    ///< a kernel cache, but nothing compiled by this executor
  SharedRunners,  ///< JIT through a runner cache that another executor shares
};
constexpr Config kConfigs[] = {Config::Interpreter, Config::Graphs,       Config::Jit,
                               Config::NoPanels,    Config::CppCores,     Config::RefWeightGrads,
                               Config::NotCompiled, Config::SharedRunners};

const char* name(Config c) {
  switch (c) {
  case Config::Interpreter:
    return "interpreter";
  case Config::Graphs:
    return "graphs";
  case Config::Jit:
    return "jit";
  case Config::NoPanels:
    return "jit, no panels";
  case Config::CppCores:
    return "jit, C++ GEMM cores";
  case Config::RefWeightGrads:
    return "jit, reference weight gradients";
  case Config::NotCompiled:
    return "kernels not compiled here";
  case Config::SharedRunners:
    return "shared runner cache";
  }
  return "?";
}

runtime::ExecOptions options(Config c, runtime::RunnerCache* runners = nullptr) {
  runtime::ExecOptions o;
  o.graphs = c != Config::Interpreter;
  o.kernels = c == Config::Interpreter || c == Config::Graphs ? nullptr : &shared_kernels();
  o.panels = c != Config::NoPanels;
  o.jit_gemm = c != Config::CppCores;
  o.jit_weight_grads = c != Config::RefWeightGrads;
  o.compile = c != Config::NotCompiled;
  o.runners = c == Config::SharedRunners ? runners : nullptr;
  return o;
}

bool uses_jit(Config c) {
  return c != Config::Interpreter && c != Config::Graphs && c != Config::NotCompiled;
}

// A training run's loss and dense gradients, taken as soon as the run returns: its row-sparse
// embedding gradient reads the executor's arena (the rows' word ids), which the executor's
// next run overwrites.
struct Step {
  double loss = 0;
  std::vector<Tensor> grads;
};

Step dense(const interp::Interpreter::Gradients& g, const interp::Params& params) {
  Step s{g.loss, {}};
  for (size_t p = 0; p < params.values.size(); ++p)
    s.grads.push_back(g.grads[p].to_dense(params.values[p].shape()));
  return s;
}

// The loss and every gradient of `a` have `b`'s bits.
void check_same_bits(const Step& a, const Step& b, const interp::Params& params) {
  CHECK(test::same_bits(a.loss, b.loss));
  REQUIRE(a.grads.size() == b.grads.size());
  for (size_t p = 0; p < params.values.size(); ++p)
    CHECK_MESSAGE(test::same_bits(a.grads[p], b.grads[p]), "d/" << params.names[p]);
}

Step train_step(runtime::PlanExecutor& ex, const PlannedBatch& b, bool layout = true) {
  return dense(
      ex.value_and_grad(b.plan, b.pe.residual, b.tt, b.params, layout ? &b.layout : nullptr),
      b.params);
}

} // namespace

TEST_SUITE("runtime") {
  TEST_CASE("PlanExecutor: every configuration == the generic path, loss and every gradient") {
    PlannedBatch b(25, 41);
    interp::Interpreter in(b.m, b.dims);
    auto ref = in.value_and_grad("loss", {b.batch}, b.params);
    runtime::RunnerCache runners(b.m, b.dims, &shared_kernels());
    for (Config c : kConfigs) {
      CAPTURE(std::string(name(c)));
      auto ex = make_executor(b, options(c, &runners));
      auto got = ex->value_and_grad(b.plan, b.pe.residual, b.tt, b.params, &b.layout);
      CHECK(test::loss_close(got.loss, ref.loss));
      for (size_t p = 0; p < b.params.values.size(); ++p) {
        const Shape& s = b.params.values[p].shape();
        CHECK(got.grads[p].empty() == ref.grads[p].empty());
        test::check_close(got.grads[p].to_dense(s), ref.grads[p].to_dense(s), b.params.names[p]);
      }
      auto fwd = ex->run(b.plan, b.pe.residual, b.tt, b.params, &b.layout);
      REQUIRE(fwd.size() == 1);
      CHECK(test::loss_close(fwd[0].item_f32(), ref.loss));

      const runtime::PlanStats& st = ex->stats();
      CHECK(st.groups_row_by_row == 0);
      CHECK(st.graph_fallbacks.empty());
      CHECK((st.groups_on_graphs > 0) == (c != Config::Interpreter));
      CHECK((st.jit_launches > 0) == uses_jit(c));
      CHECK((st.jit_reductions > 0) == uses_jit(c));
      CHECK((st.panel_launches > 0) == (uses_jit(c) && c != Config::NoPanels));
      CHECK((st.jit_gemm_cores > 0) ==
            (uses_jit(c) && c != Config::NoPanels && c != Config::CppCores));
      // One GEMM per weight matrix per training run on graphs (three: W_leaf, U, W_out), on
      // its generated TN kernel unless turned off.
      CHECK(st.weight_grad_gemms == (c == Config::Interpreter ? 0 : 3));
      CHECK(st.jit_weight_grads ==
            (uses_jit(c) && c != Config::RefWeightGrads ? st.weight_grad_gemms : 0));
    }
  }

  TEST_CASE("PlanExecutor: who builds the graphs, who compiles and who lays out change no bit") {
    PlannedBatch b(12, 43);
    // A kernel cache the executor may not compile on runs what the reference kernels run.
    Step graphs = train_step(*make_executor(b, options(Config::Graphs)), b);
    auto idle = make_executor(b, options(Config::NotCompiled));
    check_same_bits(train_step(*idle, b), graphs, b.params);
    CHECK(idle->stats().jit_launches == 0);
    // A runner cache shared with another executor, before and after that one compiled.
    Step own = train_step(*make_executor(b, options(Config::Jit)), b);
    runtime::RunnerCache runners(b.m, b.dims, &shared_kernels());
    runtime::ExecOptions lazy = options(Config::SharedRunners, &runners);
    lazy.compile = false;
    auto first = make_executor(b, lazy);
    check_same_bits(train_step(*first, b), graphs, b.params); // nothing compiled yet
    auto second = make_executor(b, options(Config::SharedRunners, &runners));
    check_same_bits(train_step(*second, b), own, b.params);
    check_same_bits(train_step(*first, b), own, b.params); // now on what `second` compiled
    CHECK(first->stats().jit_launches > 0);
    CHECK(runners.compile_failures().empty());
    // The layout made by the caller once, or by the executor on every run.
    for (Config c : {Config::Interpreter, Config::Graphs, Config::Jit}) {
      CAPTURE(std::string(name(c)));
      auto ex = make_executor(b, options(c));
      check_same_bits(train_step(*ex, b, false), train_step(*ex, b, true), b.params);
    }
  }

  TEST_CASE("make_layout reads the rows from the plan's residual and refuses another") {
    PlannedBatch b(12, 44);
    // The rows a layout gathers are the instances' arguments: every row of a per-row argument
    // is a source, and every sum term one row of its own.
    size_t rows = 0;
    for (const auto& g : b.plan.groups)
      for (const auto& a : g.args)
        rows += a.shared ? 0 : g.tmpl == specializer::Instance::kSumN ? 1 : g.instances.size();
    CHECK(b.layout.sources.size() == rows);
    CHECK(rows > b.plan.groups.size());
    // What a plan runs on per batch (with_payloads) has no instances: no layout from it.
    specializer::Residual bare = specializer::with_payloads(b.pe.residual, {}, {});
    CHECK(bare.instances.empty());
    CHECK_THROWS_WITH_AS(runtime::make_layout(b.plan, bare),
                         doctest::Contains("make_layout: a plan of"), InternalError);
  }

  TEST_CASE("PlanExecutor: the arena is reused across runs and plans, leaving no trace") {
    PlannedBatch big(25, 47);
    // A smaller plan of the same model: the last four trees, sharing the template table.
    std::vector<data::ParseTree> four(big.trees.end() - 4, big.trees.end());
    auto pe = specializer::partially_evaluate(*big.m, big.dims, "loss",
                                              test::tree_batch(*big.m, four), big.tt);
    REQUIRE_MESSAGE(pe.ok, pe.reason);
    specializer::Plan plan = specializer::make_plan(pe.residual, big.tt);
    REQUIRE(plan.groups.size() < big.plan.groups.size());
    auto small_step = [&](runtime::PlanExecutor& ex) {
      return dense(ex.value_and_grad(plan, pe.residual, big.tt, big.params), big.params);
    };
    for (Config c : {Config::Interpreter, Config::Graphs, Config::Jit}) {
      CAPTURE(std::string(name(c)));
      auto ex = make_executor(big, options(c));
      Step big1 = train_step(*ex, big);
      std::vector<Tensor> out1 = ex->run(big.plan, big.pe.residual, big.tt, big.params);
      Step small1 = small_step(*ex);    // a smaller plan in the same arena
      Step big2 = train_step(*ex, big); // the big one again, over the small one's rows
      std::vector<Tensor> out2 = ex->run(big.plan, big.pe.residual, big.tt, big.params);
      check_same_bits(big2, big1, big.params);
      REQUIRE(out1.size() == 1);
      REQUIRE(out2.size() == 1);
      CHECK(test::same_bits(out1[0], out2[0]));
      CHECK(test::same_bits(out1[0].item_f32(), big1.loss));
      // The small plan on a fresh executor: the big one's rows left in the arena change nothing.
      check_same_bits(small1, small_step(*make_executor(big, options(c))), big.params);
      CHECK(!test::same_bits(small1.loss, big1.loss));
    }
  }

  TEST_CASE("PlanExecutor: a training run packs its weights into the last run's buffers") {
    PlannedBatch b(12, 61);
    auto ex = make_executor(b, options(Config::Jit));
    Step first = train_step(*ex, b);
    const int64_t made = ex->stats().packed_buffers;
    CHECK(made > 0); // W and W^T of the weights that the panel cores multiply by
    for (int i = 0; i < 2; ++i) {
      check_same_bits(train_step(*ex, b), first, b.params);
      CHECK(ex->stats().packed_buffers == made);
    }
  }

  TEST_CASE("PlanExecutor: a run's intermediates come from the last run's scratch buffer") {
    PlannedBatch b(12, 61);
    auto ex = make_executor(b, options(Config::Jit));
    Step first = train_step(*ex, b); // no buffer yet: a storage block per intermediate
    CHECK(ex->stats().scratch_buffers == 0);
    check_same_bits(train_step(*ex, b), first, b.params); // one buffer, sized by the first run
    CHECK(ex->stats().scratch_buffers == 1);
    for (int i = 0; i < 2; ++i) {
      check_same_bits(train_step(*ex, b), first, b.params);
      CHECK(ex->stats().scratch_buffers == 1); // nothing of the run before is held
    }
    std::vector<Tensor> out1 = ex->run(b.plan, b.pe.residual, b.tt, b.params);
    CHECK(ex->stats().scratch_buffers == 1);
    REQUIRE(out1.size() == 1);
    CHECK(test::same_bits(out1[0].item_f32(), first.loss));
  }

  // An inference run has no backward to keep its groups' intermediates for: each group's go
  // back to the scratch buffer when the group is done, so the run holds one group's at a
  // time, where a training run's forward holds every group's.
  TEST_CASE("PlanExecutor: an inference run holds one group's intermediates at a time") {
    PlannedBatch b(40, 62);
    auto ex = make_executor(b, options(Config::Jit));
    Step first = train_step(*ex, b);
    const int64_t training = ex->stats().scratch_elems;
    std::vector<Tensor> out1 = ex->run(b.plan, b.pe.residual, b.tt, b.params);
    const int64_t inference = ex->stats().scratch_elems;
    CHECK(inference > 0);
    CHECK(inference * 4 < training);
    std::vector<Tensor> out2 = ex->run(b.plan, b.pe.residual, b.tt, b.params); // reused
    REQUIRE(out1.size() == 1);
    REQUIRE(out2.size() == 1);
    CHECK(test::same_bits(out1[0], out2[0]));
    CHECK(test::same_bits(out1[0].item_f32(), first.loss));
    CHECK(ex->stats().scratch_elems == inference);
  }

  // Under AddressSanitizer (scripts/asan.sh) the arena's bytes outside the plan's blocks are
  // poisoned for the run: a C++ kernel, gather or seed sum reading or writing past its block is
  // reported. The embedding's row-sparse gradient views two blocks (the rows' ids and their
  // gradient rows), so their ends can be looked at from here. Elsewhere nothing to check.
  TEST_CASE("PlanExecutor: under AddressSanitizer only the plan's blocks are addressable" *
            doctest::skip(!util::kAsan)) {
    PlannedBatch b(12, 61);
    auto ex = make_executor(b, options(Config::Jit));
    for (int run = 0; run < 2; ++run) { // the second in the arena the first left
      interp::Interpreter::Gradients g =
          ex->value_and_grad(b.plan, b.pe.residual, b.tt, b.params, &b.layout);
      const kernels::RowSparse* rs = nullptr;
      for (const auto& pg : g.grads)
        if (!pg.sparse.empty())
          rs = &pg.sparse[0];
      REQUIRE(rs != nullptr);
      int gaps = 0;
      for (const Tensor* t : {&rs->indices, &rs->rows}) {
        const char* p = static_cast<const char*>(t->raw());
        const auto bytes = static_cast<int64_t>(t->nbytes());
        CHECK_FALSE(util::asan_poisoned(p));
        CHECK_FALSE(util::asan_poisoned(p + bytes - 1));
        if (bytes % 64 != 0) { // blocks start 64 bytes apart: a gap follows this one
          CHECK(util::asan_poisoned(p + bytes));
          gaps++;
        }
      }
      CHECK(gaps > 0);
    }
  }

  TEST_CASE("PlanExecutor: value_and_grad of an entry without one scalar result is an error") {
    PlannedBatch b(3, 59);
    specializer::TemplateTable tt;
    auto pe = specializer::partially_evaluate(*b.m, b.dims, "infer", b.batch, tt);
    REQUIRE_MESSAGE(pe.ok, pe.reason);
    specializer::Plan plan = specializer::make_plan(pe.residual, tt);
    for (Config c : {Config::Interpreter, Config::Graphs, Config::Jit}) {
      CAPTURE(std::string(name(c)));
      auto ex = make_executor(b, options(c));
      CHECK_THROWS_WITH_AS(ex->value_and_grad(plan, pe.residual, tt, b.params),
                           doctest::Contains("one f32[] result"), pejit::Error);
      // run() gives the entry's outputs: one prediction per tree.
      auto out = ex->run(plan, pe.residual, tt, b.params);
      CHECK(out.size() == b.trees.size());
    }
  }
}

} // namespace tests_runtime_plan_executor_test
