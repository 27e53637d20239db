// The plan executor's resources: its in-situ profile (ExecOptions::profile: every GEMM of a
// TreeLSTM training plan lands in its family with exactly its useful flops, nothing is timed
// when the profile is off) and its memory (a plan's second run takes no tensor storage from
// the system: results and gradients live in the arena, temporaries come back from the pool).
#include "runtime/plan_executor.h"
#include "src/tensor/tensor.h"
#include "tests/support/plan_check.h"
#include "tests/support/planned_batch.h"

#include <doctest/doctest.h>

namespace tests_runtime_profile_test {

using namespace pejit;
using test::PlannedBatch;

TEST_SUITE("runtime") {
  TEST_CASE("profile: GEMM families get exactly their flops, off times nothing") {
    PlannedBatch b(6, 5);
    double leaves = 0, nodes = 0;
    for (const auto& t : b.trees) {
      nodes += static_cast<double>(t.nodes.size());
      leaves += static_cast<double>(t.leaves());
    }
    // x @ W per leaf (300 -> 450), per internal node (300 -> 750), per node (150 -> 5).
    const double inner = nodes - leaves;
    const double fwd = 2 * (leaves * 300 * 450 + inner * 300 * 750 + nodes * 150 * 5);
    for (bool on : {true, false}) {
      CAPTURE(on);
      runtime::ExecOptions eo;
      eo.profile = on;
      runtime::PlanExecutor ex(b.m, b.dims, eo);
      ex.value_and_grad(b.plan, b.pe.residual, b.tt, b.params, &b.layout);
      const auto& p = ex.stats().profile;
      auto at = [&](runtime::Family f) { return p[static_cast<size_t>(f)]; };
      if (!on) {
        for (const auto& f : p) {
          CHECK(f.calls == 0);
          CHECK(f.seconds == 0);
        }
        continue;
      }
      CHECK(at(runtime::Family::GemmForward).flops == doctest::Approx(fwd));
      // The weight gradients are the same products, and so are the input gradients: every
      // GEMM's input carries a gradient (the leaves' are embedding rows).
      CHECK(at(runtime::Family::GemmWeightGrad).flops == doctest::Approx(fwd));
      CHECK(at(runtime::Family::GemmInputGrad).flops == doctest::Approx(fwd));
      CHECK(at(runtime::Family::GemmWeightGrad).calls == 3); // one per weight matrix
      CHECK(at(runtime::Family::Gathers).calls > 0);
      for (const auto& f : p)
        CHECK((f.seconds > 0) == (f.calls > 0)); // timed where it ran, nothing elsewhere
    }
  }

  TEST_CASE("profile: the panel cores' weights are packed once per run, into kept buffers") {
    PlannedBatch b(6, 7);
    runtime::ExecOptions eo;
    eo.kernels = &test::shared_test_kernels();
    eo.profile = true;
    runtime::PlanExecutor ex(b.m, b.dims, eo);
    auto packings = [&] {
      return ex.stats().profile[static_cast<size_t>(runtime::Family::Packing)].calls;
    };
    ex.value_and_grad(b.plan, b.pe.residual, b.tt, b.params, &b.layout);
    const int64_t made = ex.stats().packed_buffers, packed = packings();
    // W (forward) and W^T (backward) of W_leaf and U, each packed once though every level
    // multiplies by it; the classifier's W^T is packed by its dX GEMM on a reference kernel
    // (a buffer too, its time in that GEMM's family).
    CHECK(packed >= 4);
    CHECK(made == packed + 1);
    ex.value_and_grad(b.plan, b.pe.residual, b.tt, b.params, &b.layout);
    CHECK(packings() == 2 * packed);          // packed anew (the parameters may have changed)...
    CHECK(ex.stats().packed_buffers == made); // ...into the first run's buffers
  }

  TEST_CASE("a plan's second run takes no tensor storage from the system (arena + pool)") {
    PlannedBatch b(8, 9);
    for (bool graphs : {true, false}) {
      CAPTURE(graphs);
      runtime::ExecOptions eo;
      eo.graphs = graphs;
      runtime::PlanExecutor ex(b.m, b.dims, eo);
      auto first = ex.value_and_grad(b.plan, b.pe.residual, b.tt, b.params, &b.layout);
      first = {}; // its gradients go back to the pool, as an optimizer step's would
      uint64_t before = tensor_pool_stats().system_allocs;
      auto second = ex.value_and_grad(b.plan, b.pe.residual, b.tt, b.params, &b.layout);
      CHECK(tensor_pool_stats().system_allocs == before);
      CHECK(second.loss > 0);
    }
  }
}

} // namespace tests_runtime_profile_test
