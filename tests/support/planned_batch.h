// A TreeLSTM training plan for `n` generated SST-like trees with its parameters: the module,
// the partial evaluator's residual and template table, the plan and its layout, for the
// tests that run plans on the executor.
#pragma once

#include "runtime/data/synthetic.h"
#include "runtime/exec_layout.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "src/types/check.h"
#include "tests/support/batches.h"

#include <doctest/doctest.h>

#include <memory>
#include <vector>

namespace pejit::test {

struct PlannedBatch {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  std::vector<data::ParseTree> trees;
  interp::Value batch;
  specializer::TemplateTable tt;
  specializer::PeResult pe;
  specializer::Plan plan;
  runtime::ExecLayout layout;
  interp::Params params;

  PlannedBatch(size_t n, uint64_t seed, data::Shape shape = data::Shape::Sst) {
    Diagnostics d;
    REQUIRE(types::add_file(*m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d).ok);
    data::Vocab vocab;
    trees = data::gen_sst(n, seed, shape, vocab);
    dims = interp::bind_dims(*m, {{"V", static_cast<int64_t>(vocab.size())}});
    batch = tree_batch(*m, trees);
    pe = specializer::partially_evaluate(*m, dims, "loss", batch, tt);
    REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);
    plan = specializer::make_plan(pe.residual, tt);
    layout = runtime::make_layout(plan, pe.residual);
    params = interp::init_params(*m, dims, 3);
  }
};

} // namespace pejit::test
