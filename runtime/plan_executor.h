// The plan executor: runs a plan's groups as batched template calls and, for training, their
// backward in reverse group order. Each function template's body runs once per group on
// tensors with a leading row dimension, through the shared evaluator with a batching backend
// (every op has a batching rule; an op without one makes that group run row by row), on the
// registry's reference kernels; one-op templates run their kernel on all rows at once. The
// backward of a group is the reverse sweep of the tape it recorded, seeded with its results'
// gradients; parameter gradients are summed over all rows of a group in one step (one
// weight-gradient GEMM per weight per group), and the embedding's stays row-sparse.
#pragma once

#include "interp/interpreter.h"
#include "specializer/plan.h"

#include <memory>
#include <string>
#include <vector>

namespace pejit::runtime {

struct PlanStats {
  int64_t groups_batched = 0;    ///< groups run as one batched call
  int64_t groups_row_by_row = 0; ///< groups whose template has an op without a batching rule
  std::vector<std::string> row_by_row_reasons; ///< "template: why", one per such group
};

class PlanExecutor {
public:
  PlanExecutor(std::shared_ptr<const ir::Module> m, interp::DimBindings dims);
  ~PlanExecutor();

  /// The entry's outputs (Residual::outputs order).
  std::vector<Tensor> run(const spec::Plan& plan, const spec::Residual& r,
                          const spec::TemplateTable& templates, const interp::Params& params);

  /// Value of a scalar entry and the gradient of every parameter.
  interp::Interpreter::Gradients value_and_grad(const spec::Plan& plan, const spec::Residual& r,
                                                const spec::TemplateTable& templates,
                                                const interp::Params& params);

  const PlanStats& stats() const { return stats_; }

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PlanStats stats_;
};

} // namespace pejit::runtime
