// Random programs (random_programs.h) on random batches (random_batches.h): the generic path
// (interpreter + tape AD) and the specialized path (partial evaluation, plan on reference kernels)
// agree on the loss and on every parameter gradient (loss within a relative 1e-5,
// every gradient within 1e-4 * max|ref| + 1e-6), and the residual program's reference evaluator
// agrees with the generic forward. A failing seed prints its program and its batch.
#include "src/interp/interpreter.h"
#include "jit/kernel_cache.h"
#include "runtime/plan_executor.h"
#include "tests/specializer/random_batches.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "specializer/residual_eval.h"
#include "src/types/check.h"

#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

using namespace pejit;

namespace {

struct Totals {
  int programs = 0, with_grads = 0;
  size_t templates = 0, instances = 0, params = 0;
  int64_t groups_batched = 0, groups_row_by_row = 0;
  int64_t groups_on_graphs = 0, graph_fallbacks = 0, jit_launches = 0;
  size_t merged = 0; ///< instances that value numbering merged
};

bool loss_close(double got, double ref) {
  return std::fabs(got - ref) <= 1e-5 * std::fabs(ref);
}

// Checks one generated program on its batch; every mismatch is a failed CHECK with the seed,
// the program and the batch in its context.
void check_program(const testgen::RandomProgram& p, uint64_t seed, Totals& totals) {
  INFO("program:\n" << p.source);
  INFO("batch: " << p.batch_desc);

  auto m = std::make_shared<ir::Module>();
  Diagnostics d;
  bool ok = types::add_source(*m, p.source, "random.pe", d).ok;
  // An ill-typed program is a generator bug.
  REQUIRE_MESSAGE(ok, d.render());
  interp::DimBindings dims = interp::bind_dims(*m, {});
  interp::Params params = interp::init_params(*m, dims, seed);

  interp::Interpreter in(m, dims);
  auto ref = in.value_and_grad("loss", {p.batch}, params);
  REQUIRE(std::isfinite(ref.loss));

  specializer::TemplateTable tt;
  auto pe = specializer::partially_evaluate(*m, dims, "loss", p.batch, tt);
  // The programs have no control flow on dynamic values: no refusal.
  REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);

  // The residual program's reference evaluator == the generic forward.
  auto res = specializer::evaluate_residual(pe.residual, tt, in, params);
  REQUIRE(res.size() == 1);
  CHECK_MESSAGE(loss_close(res[0].item_f32(), ref.loss),
                "residual " << res[0].item_f32() << " vs generic " << ref.loss);

  // Value numbering, as the engine plans (merge_instances.h): the merged residual's forward
  // too, and on even seeds the plans run on it (odd seeds: every instance, as --no-merge).
  specializer::Residual merged = pe.residual;
  totals.merged += specializer::merge_equal_instances(merged, specializer::equal_payload_slots(p.batch));
  auto mres = specializer::evaluate_residual(merged, tt, in, params);
  REQUIRE(mres.size() == 1);
  CHECK_MESSAGE(loss_close(mres[0].item_f32(), ref.loss),
                "merged residual " << mres[0].item_f32() << " vs generic " << ref.loss);
  const specializer::Residual& planned = seed % 2 == 0 ? merged : pe.residual;
  specializer::Plan plan = specializer::make_plan(planned, tt);
  // Every executor configuration: the batching interpreter, the template graphs on reference
  // kernels, and the graphs with JIT-compiled elementwise runs (one kernel cache for all).
  static jit::Jit jit;
  static jit::KernelCache kernels(jit, 1024);
  bool any_grad = false;
  for (int mode = 0; mode < 3; ++mode) {
    CAPTURE(mode);
    runtime::ExecOptions eo;
    eo.graphs = mode > 0;
    eo.kernels = mode == 2 ? &kernels : nullptr;
    runtime::PlanExecutor ex(m, dims, eo);
    auto got = ex.value_and_grad(plan, planned, tt, params);
    CHECK_MESSAGE(loss_close(got.loss, ref.loss),
                  "plan " << got.loss << " vs generic " << ref.loss);
    auto fwd = ex.run(plan, planned, tt, params);
    REQUIRE(fwd.size() == 1);
    CHECK_MESSAGE(loss_close(fwd[0].item_f32(), ref.loss),
                  "plan forward " << fwd[0].item_f32() << " vs generic " << ref.loss);

    REQUIRE(got.grads.size() == params.values.size());
    for (size_t i = 0; i < params.values.size(); ++i) {
      CAPTURE(params.names[i]);
      const Shape& s = params.values[i].shape();
      Tensor a = got.grads[i].to_dense(s), b = ref.grads[i].to_dense(s);
      double max_ref = 0, max_diff = 0;
      for (int64_t k = 0; k < a.numel(); ++k) {
        max_ref = std::max(max_ref, static_cast<double>(std::fabs(b.f32()[k])));
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(a.f32()[k] - b.f32()[k])));
      }
      any_grad = any_grad || max_ref > 0;
      CHECK_MESSAGE(max_diff <= 1e-4 * max_ref + 1e-6, "gradient of " << params.names[i]
                                                                      << ": max diff " << max_diff
                                                                      << ", max |ref| " << max_ref);
    }
    if (mode == 0) {
      totals.groups_batched += ex.stats().groups_batched;
      totals.groups_row_by_row += ex.stats().groups_row_by_row;
    } else {
      totals.groups_on_graphs += ex.stats().groups_on_graphs;
      totals.graph_fallbacks += static_cast<int64_t>(ex.stats().graph_fallbacks.size());
      if (mode == 2)
        totals.jit_launches += ex.stats().jit_launches;
    }
  }
  totals.programs++;
  // Every node's loss goes through a head with parameters, but a zero hidden state (an empty
  // sequence, `a - a`) can make every gradient vanish: counted, asserted over all seeds.
  if (any_grad)
    totals.with_grads++;
  totals.templates += tt.size();
  totals.instances += pe.residual.instances.size();
  totals.params += params.values.size();
}

void run_seeds(uint64_t first, uint64_t count, testgen::Options opt = {}) {
  Totals totals;
  for (uint64_t seed = first; seed < first + count; ++seed) {
    try {
      CAPTURE(seed);
      check_program(testgen::generate(seed, opt), seed, totals);
    } catch (const std::exception& e) {
      testgen::RandomProgram p = testgen::generate(seed, opt);
      FAIL_CHECK("seed " << seed << " threw: " << std::string(e.what()) << "\nprogram:\n"
                         << p.source << "batch: " << p.batch_desc);
    }
  }
  // The programs are not degenerate: nearly all have non-zero gradients.
  CHECK(totals.with_grads >= totals.programs * 9 / 10);
  // Template groups run on their graphs (the rest through the interpreter, counted), and the
  // JIT ran some of their code.
  CHECK(totals.groups_on_graphs > 0);
  CHECK(totals.jit_launches > 0);
  CHECK(totals.merged > 0); // value numbering had something to merge
  MESSAGE(totals.programs << " random programs (" << totals.with_grads
                          << " with non-zero gradients): " << totals.params << " params, "
                          << totals.templates << " templates, " << totals.instances
                          << " instances, " << totals.groups_batched << " batched groups, "
                          << totals.groups_row_by_row << " row-by-row groups; on graphs "
                          << totals.groups_on_graphs << " groups (" << totals.graph_fallbacks
                          << " template fallbacks to the interpreter), " << totals.jit_launches
                          << " JIT launches, " << totals.merged << " instances merged");
}

} // namespace

TEST_SUITE("specializer") {
  TEST_CASE("random programs: generator output is deterministic per seed") {
    for (uint64_t seed : {1u, 7u, 42u}) {
      auto a = testgen::generate(seed), b = testgen::generate(seed);
      CHECK(a.source == b.source);
      CHECK(a.batch_desc == b.batch_desc);
    }
    CHECK(testgen::generate(1).source != testgen::generate(2).source);
  }

  TEST_CASE("random programs on random batches: generic path == residual == plan (loss, grads)") {
    run_seeds(1, 150);
  }

  // Found by the generator: `+` of two residual tensors outside a template stays a symbolic
  // sum, and the SumN it becomes must be placed before the template call that consumes it,
  // both in the instance list (partial evaluation) and in the schedule (make_plan).
  TEST_CASE("random programs minimal: a symbolic sum passed to a template") {
    testgen::RandomProgram p;
    p.source = R"(param p : f32[4] = normal(0.0, 0.5)
fn f(a: f32[4]) -> f32[4] { tanh(a) * p }
entry loss(xs: List[f32[4]]) -> f32[] { sum_list(map(fn x => sum(f(x) + f(x * 2.0)), xs)) }
)";
    p.batch = interp::Value::list({interp::Value::tensor(Tensor::full({4}, 0.5f)),
                                   interp::Value::tensor(Tensor::full({4}, -0.25f))});
    p.batch_desc = "two f32[4]";
    Totals totals;
    check_program(p, 0, totals);
  }

  TEST_CASE("random programs with sums passed to templates") {
    testgen::Options opt;
    opt.sums_into_templates = true;
    run_seeds(1, 120, opt);
  }

  // A wider sweep for hunting bugs by hand: --no-skip -tc="*wide sweep*".
  TEST_CASE("random programs: wide sweep" * doctest::skip()) {
    run_seeds(1000, 3000);
  }
}
