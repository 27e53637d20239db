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

/// Operations that gradient rules need besides the registry's ops (src/ops/grad_ops.def
/// lists them with their operands).
enum class GradOp : uint8_t {
#define PEJIT_GRAD_OP(Id, name, row, kernel, shape_only) Id,
#include "src/ops/grad_ops.def"
#undef PEJIT_GRAD_OP
  Count
};

/// A gradient helper's entry in the registry: the same facts as an OpDef's.
struct GradOpDef {
  GradOp id;
  const char* name;
  RowRule row;
  KernelClass kernel;
  bool shape_only; ///< the result is operand 0 when operand 0 has the result's type
};
const GradOpDef& grad_op_def(GradOp g);
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
