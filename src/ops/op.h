// The op registry: one OpDef per op, with its signature and shape rule (used by the checker),
// its batching rule, kernel class and algebraic facts (read by the batching backends, fusion,
// constant folding and the profile), and slots for its reference kernel and its gradient rule
// (filled by ops/kernels_table.cpp and ops/grads.cpp). Ops take tensor arguments first, then
// static Int attributes (`sum(x, 0)`, `split(g, 5)`, `zeros(3, 4)`).
#pragma once

#include "src/ir/type.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pejit {
class Tensor;
}

namespace pejit::ops {

enum class OpId : uint16_t {
#define PEJIT_OP(Id, name, tmin, tmax, imin, imax, row, kernel, identity, linear) Id,
#include "src/ops/ops.def"
#undef PEJIT_OP
  Count
};

/// How an op (or gradient helper) acts on a group's rows when a batching backend runs it on
/// all rows at once: a per-row value carries the rows as its leading axis, a shared value has
/// none. batched_row_class (src/ops/batch_rules.h) decides from it which operand mixes batch.
enum class RowRule : uint8_t {
  Elementwise, ///< operands broadcast after the row axis (per-row dims lined up on the right)
  LastAxis,    ///< works along the last axis, so on each row alone (concat repeats shared parts)
  Reduce,      ///< sum/mean: the whole per-row value, or its axis shifted by one
  Reshape,     ///< the row count prepended to the new shape
  MatMul,      ///< per-row vector @ shared matrix: one GEMM over the rows
  Take,        ///< per-row ids into a shared table: one gather
  Loss,        ///< cross_entropy (and gradient): per-row logits or labels, the other may be shared
  None,        ///< no batched form
  Random,      ///< random ops: every operand per row (the key's rows); rows as they are
  // Gradient helpers only.
  Broadcast,     ///< a per-row or shared value broadcast to a per-row or shared target
  BroadcastAxis, ///< the same with an axis re-inserted: the axis attribute shifted by one
  PerRow,        ///< every operand per row
  SumToShape,    ///< to a shared target: summed over the rows; to a per-row target: per row
  MatMulGradA,   ///< dX = dY · W^T: per-row left operand, shared matrix
  MatMulGradB,   ///< dW = X^T · dY of per-row vectors and a shared matrix: summed over the rows
  TakeGrad,      ///< the gradient of a shared table: summed over the rows
};

/// What kind of kernel an op is, as kernel fusion and the profile see it.
enum class KernelClass : uint8_t {
  Elementwise,    ///< one element out of the same-position elements in: fusible into a chain
  Layout,         ///< moves whole column blocks of rows: fusible, and a GEMM's prologue
  Expand,         ///< writes values its operand lacks (broadcast, zero padding): fusible
  Fill,           ///< a constant tensor: fusible
  Rearrange,      ///< reorders elements (gathers, transposes): a kernel of its own
  Reduction,      ///< reductions, softmax, losses and their gradients: a kernel of its own
  ReduceToShape,  ///< a reduction, fusible where it only reshapes (as many elements in as out)
  GemmForward,    ///< x @ W
  GemmInputGrad,  ///< dX = dY · W^T
  GemmWeightGrad, ///< dW = X^T · dY
};

/// The constant operand an op ignores: fold_constants replaces `x + 0`, `x * 1`, ... by x.
enum class Identity : uint8_t {
  None,
  Zero,      ///< 0 on either side
  One,       ///< 1 on either side
  RightZero, ///< 0 on the right
  RightOne,  ///< 1 on the right
};

/// Static attributes of one op application (the Int arguments).
struct Attr {
  std::vector<int64_t> ints;
  bool operator==(const Attr& o) const { return ints == o.ints; }
};

/// Result of a shape rule: a type, or an error message (no location: the caller adds it).
struct ShapeResult {
  ir::Type type;
  std::string error;
  bool ok() const { return error.empty(); }
};

class Emitter;
using Handle = int32_t;

/// Reference kernel: computes outputs from inputs (several outputs only for `split`).
using EvalFn = void (*)(std::span<const Tensor> in, const Attr& attr, std::vector<Tensor>& out);
/// Gradient rule, written once against an Emitter: given input handles, output handles and
/// the output gradients (-1: zero), returns one gradient handle per input (-1: none).
using GradFn = void (*)(Emitter& e, std::span<const Handle> in, std::span<const Handle> out,
                        std::span<const Handle> gout, const Attr& attr, std::vector<Handle>& gin);

struct OpDef {
  OpId id;
  const char* name;
  int min_tensors, max_tensors; ///< max -1: variadic
  int min_ints, max_ints;
  RowRule row;
  KernelClass kernel;
  Identity identity;
  bool linear;      ///< linear in every operand: a sum over the rows may pass through it
  bool elementwise; ///< row == RowRule::Elementwise
  EvalFn eval = nullptr;
  GradFn grad = nullptr;
};

const OpDef& op_def(OpId id);
/// The op of a source name (`tanh`, `split5` = split(_, 5)), with any attribute the name
/// implies; nullopt if no op has that name.
std::optional<std::pair<OpId, Attr>> op_by_name(const std::string& name);
inline const char* op_name(OpId id) {
  return op_def(id).name;
}
/// "NAME: what" for an error an op's kernel threw, without a doubled "NAME: NAME: " when the
/// kernel already named itself (the kernels name the op they check for, as they are also called
/// from plans where no source op is at hand).
inline std::string op_error_text(OpId id, const std::string& what) {
  std::string prefix = std::string(op_name(id)) + ": ";
  return what.rfind(prefix, 0) == 0 ? what : prefix + what;
}
/// The constant that `id` ignores as its left / right operand, if any.
std::optional<float> left_identity(OpId id);
std::optional<float> right_identity(OpId id);
/// Number of results: split(x, n) has n, every other op 1.
int op_num_results(OpId id, const Attr& attr);

/// The op's shape rule over argument types. Ints are the attribute values.
ShapeResult op_result_type(OpId id, std::span<const ir::Type> args, const Attr& attr);

/// The shape rule with attributes that may name dimensions (`zeros(H)`, `slice(x, 0, 2*H)`),
/// for the checker: op_result_type where every attribute and every operand dimension the rule
/// reads is a constant, else a symbolic result (`zeros(H)` is f32[H]). Bounds that depend on
/// the sizes bound at instantiation (a slice's range in a named last dimension, a reshape's
/// element count, a dimension such as H-5 staying >= 0) set `deferred`: interp::bind_dims
/// checks them with the bound sizes. Axes and split counts must stay constants.
ShapeResult op_result_type_dims(OpId id, std::span<const ir::Type> args,
                                std::span<const ir::Dim> attrs, bool& deferred);

/// numpy broadcasting of two dimension lists; false if incompatible.
bool broadcast_dims(const std::vector<ir::Dim>& a, const std::vector<ir::Dim>& b,
                    std::vector<ir::Dim>& out);

/// Whether `id` is a random op (dropout, bernoulli, uniform, normal): its last tensor operand
/// is the key the evaluator adds, its first attribute the op's index in its random context.
inline bool is_random(OpId id) {
  return id == OpId::Dropout || id == OpId::Bernoulli || id == OpId::Uniform || id == OpId::Normal;
}
/// A random op's probability attribute (the f32 bits in attribute 1).
float random_p(const Attr& attr);
/// The attribute value of a probability p (its f32 bits).
int64_t random_p_bits(float p);

/// Mutable access for the tables that fill kernels and gradient rules.
OpDef& op_def_mut(OpId id);

} // namespace pejit::ops
