// The op registry: one OpDef per op, with its signature and shape rule (used by the checker),
// and slots for its reference kernel and its gradient rule (filled by ops/kernels_table.cpp
// and ops/grads.cpp). Ops take tensor arguments first, then static Int attributes
// (`sum(x, 0)`, `split(g, 5)`, `zeros(3, 4)`).
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
#define PEJIT_OP(Id, name, tmin, tmax, imin, imax, ew) Id,
#include "src/ops/ops.def"
#undef PEJIT_OP
  Count
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
  bool elementwise;
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
/// Number of results: split(x, n) has n, every other op 1.
int op_num_results(OpId id, const Attr& attr);

/// The op's shape rule over argument types. Ints are the attribute values.
ShapeResult op_result_type(OpId id, std::span<const ir::Type> args, const Attr& attr);

/// numpy broadcasting of two dimension lists; false if incompatible.
bool broadcast_dims(const std::vector<ir::Dim>& a, const std::vector<ir::Dim>& b,
                    std::vector<ir::Dim>& out);

/// Mutable access for the tables that fill kernels and gradient rules.
OpDef& op_def_mut(OpId id);

} // namespace pejit::ops
