// Random programs (random_programs.h) on random batches (random_batches.h): the generic path
// (interpreter + tape AD) and the specialized path (partial evaluation, plan on reference kernels)
// agree on the loss and on every parameter gradient (docs/architecture.md: loss within a relative
// 1e-5, every gradient within 1e-4 * max|ref| + 1e-6, relative to its terms where they cancel),
// and the residual program's reference evaluator agrees with the generic forward. A failing seed
// prints its program and its batch. scripts/sweep.sh runs the wide sweep over any seed range.
#include "jit/kernel_cache.h"
#include "runtime/plan_executor.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "specializer/residual_eval.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "tests/specializer/random_batches.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>

namespace tests_specializer_random_programs_test {

using namespace pejit;

namespace {

struct Totals {
  int programs = 0, with_grads = 0;
  size_t templates = 0, instances = 0, params = 0;
  int64_t groups_batched = 0, groups_row_by_row = 0;
  int64_t groups_on_graphs = 0, graph_fallbacks = 0, jit_launches = 0;
  size_t merged = 0; ///< instances that value numbering merged
};

// The differential bound (tests/support/compare.h) is relative to the gradient's largest
// element. A gradient element is a sum of terms (one per use of the parameter's element: rows
// of a batched template, broadcast lanes, instances), and two float evaluations of a sum in
// different orders differ by up to about n * eps * sum|terms|, whatever the sum's own size.
// Where the terms cancel, the sum is far smaller than its terms and only rounding is left of
// it: the logits' shift invariance of cross_entropy makes the gradient of a scalar added to
// every logit exactly zero, and both paths return rounding noise of the size of the logits'
// gradient (random program seed 3399: a gradient of 5e-7 against terms of order 1, paths 1.4e-6
// apart). There the bound must be relative to the terms, not to the result.
//
// sum|terms| is measured, per element, by the generic path itself: run with every float
// operation rounded up, then rounded down, each operation's rounding error takes its full size
// (one ulp of its result) with one sign, so the two results differ by about 2 * eps times the
// sum of the magnitudes of every intermediate the element is made of (running error analysis;
// for a plain sum, of its partial sums, at least sum|terms|). term_magnitudes returns
// |up - down| / (2 * eps) per element: the magnitude of the terms behind each gradient element.
std::vector<Tensor> term_magnitudes(interp::Interpreter& in, const interp::Value& batch,
                                    const interp::Params& params) {
  const int saved = std::fegetround();
  std::fesetround(FE_UPWARD);
  auto up = in.value_and_grad("loss", {batch}, params);
  std::fesetround(FE_DOWNWARD);
  auto down = in.value_and_grad("loss", {batch}, params);
  std::fesetround(saved);
  const double eps = std::numeric_limits<float>::epsilon() / 2; // unit roundoff
  std::vector<Tensor> out;
  for (size_t i = 0; i < params.values.size(); ++i) {
    const Shape& s = params.values[i].shape();
    Tensor u = up.grads[i].to_dense(s), d = down.grads[i].to_dense(s);
    Tensor m = Tensor::full(s, 0.0f);
    for (int64_t k = 0; k < m.numel(); ++k)
      m.f32()[k] = static_cast<float>(std::fabs(double(u.f32()[k]) - d.f32()[k]) / (2 * eps));
    out.push_back(std::move(m));
  }
  return out;
}

// The differential bound with the scale of each element's terms where they exceed the result
// (cancellation): |got - ref| <= 1e-4 * max(max|ref|, terms) + 1e-6 per element. Unchanged
// wherever the terms are no larger than the gradient. On failure, `why` names the element.
bool close_to_terms(const Tensor& got, const Tensor& ref, const Tensor& terms, std::string& why) {
  const double max_ref = test::max_abs(ref);
  for (int64_t k = 0; k < ref.numel(); ++k) {
    double scale = std::max(max_ref, static_cast<double>(terms.f32()[k]));
    double bound = 1e-4 * scale + 1e-6;
    double diff = std::fabs(double(got.f32()[k]) - ref.f32()[k]);
    if (diff > bound) {
      std::ostringstream o;
      o << "element " << k << ": |" << got.f32()[k] << " - " << ref.f32()[k] << "| = " << diff
        << " > " << bound << " (its terms' magnitude " << terms.f32()[k] << ")";
      why = o.str();
      return false;
    }
  }
  return true;
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
  CHECK_MESSAGE(test::loss_close(res[0].item_f32(), ref.loss),
                "residual " << res[0].item_f32() << " vs generic " << ref.loss);

  // Value numbering, as the engine plans (merge_instances.h): the merged residual's forward
  // too, and on even seeds the plans run on it (odd seeds: every instance, as --no-merge).
  specializer::Residual merged = pe.residual;
  totals.merged +=
      specializer::merge_equal_instances(merged, specializer::equal_payload_slots(p.batch));
  auto mres = specializer::evaluate_residual(merged, tt, in, params);
  REQUIRE(mres.size() == 1);
  CHECK_MESSAGE(test::loss_close(mres[0].item_f32(), ref.loss),
                "merged residual " << mres[0].item_f32() << " vs generic " << ref.loss);
  const specializer::Residual& planned = seed % 2 == 0 ? merged : pe.residual;
  specializer::Plan plan = specializer::make_plan(planned, tt);
  // Every executor configuration: the batching interpreter, the template graphs on reference
  // kernels, and the graphs with JIT-compiled elementwise runs (one kernel cache for all).
  static jit::Jit jit;
  static jit::KernelCache kernels(jit, 1024);
  bool any_grad = false;
  std::optional<std::vector<Tensor>> terms; // term_magnitudes, made when first needed
  for (int mode = 0; mode < 3; ++mode) {
    CAPTURE(mode);
    runtime::ExecOptions eo;
    eo.graphs = mode > 0;
    eo.kernels = mode == 2 ? &kernels : nullptr;
    runtime::PlanExecutor ex(m, dims, eo);
    auto got = ex.value_and_grad(plan, planned, tt, params);
    CHECK_MESSAGE(test::loss_close(got.loss, ref.loss),
                  "plan " << got.loss << " vs generic " << ref.loss);
    REQUIRE(got.grads.size() == params.values.size());
    // Dense before the executor runs again: a row-sparse gradient views its arena.
    std::vector<Tensor> got_dense;
    for (size_t i = 0; i < params.values.size(); ++i)
      got_dense.push_back(got.grads[i].to_dense(params.values[i].shape()));
    auto fwd = ex.run(plan, planned, tt, params);
    REQUIRE(fwd.size() == 1);
    CHECK_MESSAGE(test::loss_close(fwd[0].item_f32(), ref.loss),
                  "plan forward " << fwd[0].item_f32() << " vs generic " << ref.loss);

    for (size_t i = 0; i < params.values.size(); ++i) {
      CAPTURE(params.names[i]);
      const Tensor& g = got_dense[i];
      Tensor r = ref.grads[i].to_dense(params.values[i].shape());
      test::Diff d = test::diff(g, r);
      any_grad = any_grad || d.max_ref > 0;
      if (d.close())
        continue;
      if (!terms)
        terms = term_magnitudes(in, p.batch, params);
      std::string why;
      CHECK_MESSAGE(close_to_terms(g, r, (*terms)[i], why),
                    "gradient of " << params.names[i] << ": " << d.str() << "; " << why);
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

// `trace`: each seed is written to stderr before it runs, so that scripts/sweep.sh can name
// the seed of a crash and go on after it.
void run_seeds(uint64_t first, uint64_t count, testgen::Options opt = {}, bool trace = false) {
  Totals totals;
  for (uint64_t seed = first; seed < first + count; ++seed) {
    if (trace)
      std::fprintf(stderr, "sweep: seed %llu\n", static_cast<unsigned long long>(seed));
    try {
      CAPTURE(seed);
      check_program(testgen::generate(seed, opt), seed, totals);
    } catch (const std::exception& e) {
      testgen::RandomProgram p = testgen::generate(seed, opt);
      FAIL_CHECK("seed " << seed << " threw: " << std::string(e.what()) << "\nprogram:\n"
                         << p.source << "batch: " << p.batch_desc);
    }
  }
  // Rates over a range, not properties of one program: a few seeds (one reproduced by hand)
  // may have nothing to merge or no JIT-compiled run.
  if (count >= 50) {
    // The programs are not degenerate: nearly all have non-zero gradients.
    CHECK(totals.with_grads >= totals.programs * 9 / 10);
    // Template groups run on their graphs (the rest through the interpreter, counted), and
    // the JIT ran some of their code.
    CHECK(totals.groups_on_graphs > 0);
    CHECK(totals.jit_launches > 0);
    CHECK(totals.merged > 0); // value numbering had something to merge
  }
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

  // Found by the wide sweep: the gradient of a scalar added to every logit of a cross_entropy
  // is exactly zero, computed as rounding noise of the logits' gradient on both paths (see
  // term_magnitudes): it holds only with the bound relative to the terms.
  TEST_CASE("random programs: a gradient whose terms cancel (seed 3399)") {
    run_seeds(3399, 1);
  }

  TEST_CASE("random programs with sums passed to templates") {
    testgen::Options opt;
    opt.sums_into_templates = true;
    run_seeds(1, 120, opt);
  }

  // The wide sweep, on demand: scripts/sweep.sh runs it in parallel over seed ranges
  // (PEJIT_SWEEP_SEEDS=FIRST:COUNT, default 1000:3000; PEJIT_SWEEP_NO_SUMS=1: programs
  // without sums into templates). By hand: --no-skip -tc="*wide sweep*".
  TEST_CASE("random programs: wide sweep" * doctest::skip()) {
    unsigned long long first = 1000, count = 3000;
    bool trace = false;
    if (const char* r = std::getenv("PEJIT_SWEEP_SEEDS")) {
      REQUIRE_MESSAGE(std::sscanf(r, "%llu:%llu", &first, &count) == 2,
                      "PEJIT_SWEEP_SEEDS=" << r << ": expected FIRST:COUNT");
      trace = true;
    }
    testgen::Options opt;
    if (const char* n = std::getenv("PEJIT_SWEEP_NO_SUMS"))
      opt.sums_into_templates = std::string(n) != "1";
    run_seeds(first, count, opt, trace);
  }
}

} // namespace tests_specializer_random_programs_test
