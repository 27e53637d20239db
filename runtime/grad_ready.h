// Told as a training step's parameter gradients become final, while the rest of its backward
// pass still runs: the data-parallel reduction (runtime/dist/grad_reducer.h) starts sending a
// weight's gradient as soon as its weight-gradient GEMM is done.
#pragma once

#include "src/interp/tape.h"

#include <cstddef>

namespace pejit::runtime {

class GradReady {
public:
  virtual ~GradReady() = default;
  /// The gradient of parameter `p` is final for this step: nothing adds to it afterwards.
  virtual void ready(size_t p, const interp::ParamGrad& g) = 0;
  /// The step's gradients are computed anew (a planned run failed and the generic path runs
  /// the batch): what was announced is void. Throws pejit::Error when that can no longer be.
  virtual void restart() = 0;
};

} // namespace pejit::runtime
