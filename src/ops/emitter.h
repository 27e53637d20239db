// The emitter interface that every gradient rule is written against, once. The generic path
// implements it by computing eagerly (interp/eager_emitter); the specializer implements it by
// building graph nodes. Handles are opaque ids owned by the emitter.
#pragma once

#include "src/ops/op.h"

#include <initializer_list>
#include <span>
#include <vector>

namespace pejit {
class Tensor;
}

namespace pejit::ops {

/// Operations that gradient rules need besides the registry's ops.
enum class GradOp : uint8_t {
  SigmoidBwd,      ///< (y, gy) -> gy * y * (1 - y)
  TanhBwd,         ///< (y, gy) -> gy * (1 - y^2)
  ReluBwd,         ///< (x, gy) -> gy where x > 0
  SoftmaxBwd,      ///< (y, gy) -> y * (gy - sum(gy * y, last axis))
  LogSoftmaxBwd,   ///< (y, gy) -> gy - exp(y) * sum(gy, last axis)
  CrossEntropyBwd, ///< (logits, labels, gy) -> dlogits
  SumToShape,      ///< (g, like) -> g summed over broadcast dims to like's shape
  BroadcastTo,     ///< (g, like) -> g broadcast to like's shape
  UnsumAxis,       ///< (g, like), attr {axis} -> g with `axis` re-inserted, broadcast to like
  MatMulGradA,     ///< (gy, a, b) -> dL/da for y = a @ b (1-D and 2-D operands)
  MatMulGradB,     ///< (gy, a, b) -> dL/db
  TakeGrad,        ///< (idx, gy, table) -> dL/dtable, row-sparse where the emitter can
  PadSlice,        ///< (gy, x), attr {start, end} -> zeros like x, gy in [start, end) (last axis)
  ReshapeLike,     ///< (g, like) -> g with like's shape
  Count
};
const char* grad_op_name(GradOp g);

class Emitter {
public:
  virtual ~Emitter() = default;
  virtual Handle op(OpId id, std::span<const Handle> in, const Attr& attr) = 0;
  virtual Handle grad_op(GradOp id, std::span<const Handle> in, const Attr& attr) = 0;
  /// A constant f32[] tensor.
  virtual Handle scalar(float v) = 0;
  /// The (concrete) shape of a handle's value.
  virtual std::vector<int64_t> shape(Handle h) = 0;

  Handle op(OpId id, std::initializer_list<Handle> in, const Attr& attr = {}) {
    return op(id, std::span<const Handle>(in.begin(), in.size()), attr);
  }
  Handle grad_op(GradOp id, std::initializer_list<Handle> in, const Attr& attr = {}) {
    return grad_op(id, std::span<const Handle>(in.begin(), in.size()), attr);
  }
};

/// The dense reference kernel of a gradient op (TakeGrad densified).
Tensor eval_grad_op(GradOp g, std::span<const Tensor> in, const Attr& attr);

/// Installs every op's gradient rule into the registry (idempotent; called by op_def users).
void register_gradients();
/// Installs every op's reference kernel into the registry (idempotent).
void register_kernels();

} // namespace pejit::ops
