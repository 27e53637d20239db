// A reference evaluator of residual programs: runs the instance DAG one instance at a time
// (function templates through the generic path's evaluator, one-op templates on reference
// kernels, SumN as a left-to-right sum). Slow and simple on purpose: it is what the batched
// plans are checked against, and it checks the partial evaluator against the generic path.
#pragma once

#include "src/interp/interpreter.h"
#include "specializer/residual.h"

#include <vector>

namespace pejit::specializer {

/// Every output of `r` (Residual::outputs order), computed instance by instance.
std::vector<Tensor> evaluate_residual(const Residual& r, const TemplateTable& templates,
                                      interp::Interpreter& in, const interp::Params& params);

} // namespace pejit::specializer
