// The differential check of a model file's plans against its generic path, on every executor
// configuration (the batching interpreter, the template graphs on reference kernels, and with
// JIT-compiled runs: one Jit and kernel cache for the whole test program): the loss of a
// training run and of a forward run, and every parameter's gradient, within the tolerances of
// docs/architecture.md. Each configuration's statistics go back to the caller for its own
// checks (what ran where).
#pragma once

#include "jit/kernel_cache.h"
#include "runtime/plan_executor.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pejit::test {

/// A model file instantiated with its vocabulary size (V), any other sizes in `more`, and
/// parameters of seed 9.
struct FileModel {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  interp::Params params;
  FileModel(const std::string& file, int64_t vocab, interp::DimBindings more = {}) {
    Diagnostics d;
    REQUIRE_MESSAGE(types::add_file(*m, file, d).ok, d.render());
    more["V"] = vocab;
    dims = interp::bind_dims(*m, more);
    params = interp::init_params(*m, dims, 9);
  }
};

enum class Exec { Interpreter, Graphs, GraphsJit };
inline const char* exec_name(Exec e) {
  return e == Exec::Interpreter ? "interpreter" : e == Exec::Graphs ? "graphs" : "graphs+jit";
}
inline jit::KernelCache& shared_test_kernels() {
  static jit::Jit jit;
  static jit::KernelCache cache(jit, 512);
  return cache;
}

/// Plans `batch` for entry `loss` and checks it against the generic path on each executor
/// configuration; every parameter must get a gradient (the batches use them all). Returns
/// each configuration's PlanStats, in the order Interpreter, Graphs, GraphsJit.
inline std::vector<std::pair<Exec, runtime::PlanStats>>
check_plan_matches_generic(FileModel& md, const interp::Value& batch) {
  specializer::TemplateTable tt;
  auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
  REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);
  specializer::Plan plan = specializer::make_plan(pe.residual, tt);
  interp::Interpreter in(md.m, md.dims);
  auto ref = in.value_and_grad("loss", {batch}, md.params);
  std::vector<std::pair<Exec, runtime::PlanStats>> out;
  for (Exec mode : {Exec::Interpreter, Exec::Graphs, Exec::GraphsJit}) {
    std::string exec = exec_name(mode);
    CAPTURE(exec);
    runtime::ExecOptions o;
    o.graphs = mode != Exec::Interpreter;
    o.kernels = mode == Exec::GraphsJit ? &shared_test_kernels() : nullptr;
    runtime::PlanExecutor ex(md.m, md.dims, o);
    auto got = ex.value_and_grad(plan, pe.residual, tt, md.params);
    CHECK(loss_close(got.loss, ref.loss));
    // The gradients before the executor runs again: a row-sparse one views its arena.
    for (size_t p = 0; p < md.params.values.size(); ++p) {
      CAPTURE(md.params.names[p]);
      const Shape& s = md.params.values[p].shape();
      CHECK_FALSE(ref.grads[p].empty());
      CHECK(got.grads[p].empty() == ref.grads[p].empty());
      check_close(got.grads[p].to_dense(s), ref.grads[p].to_dense(s), md.params.names[p]);
    }
    auto fwd = ex.run(plan, pe.residual, tt, md.params);
    REQUIRE(fwd.size() == 1);
    CHECK(loss_close(fwd[0].item_f32(), ref.loss));
    CHECK(ex.stats().groups_row_by_row == 0);
    out.emplace_back(mode, ex.stats());
  }
  return out;
}

} // namespace pejit::test
