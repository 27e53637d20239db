// Constant folding and algebraic simplification on a template graph.
//
// Design note. A node is *known* when every node it is computed from is a Const or an input
// whose value is known at compile time (`known[slot]` defined: a template's literal tensors,
// earlier folds). A known op is evaluated once with the reference kernels (graph::evaluate),
// so folding agrees bit for bit with what the kernels would compute at run time; the result
// becomes a Const node when every element is equal (f32), a new known input slot when it is
// small, and otherwise stays an op (folding would only trade a kernel for a big constant).
// Identities that hold exactly are applied to any node: x*1, 1*x, x+0, 0+x, x-0, x/1,
// sum_n terms that are constant zeros, sum_to_shape / broadcast_to / reshape_like to the
// operand's own type, and broadcast_to of a constant (a bigger constant). These are what
// the seeded loss used for AD leaves behind. One more holds for finite operands: a matmul
// with a constant zero operand is a zero constant (the zero state of a recurrence, `h0 @ W`
// with h0 = zeros(H)): a NaN or Inf in the other operand, which would make every product
// NaN, does not propagate, but a parameter gone non-finite shows in every other use of it.
// Not done: x*0 elementwise (NaN and Inf do not vanish), reassociation, anything that
// changes rounding.
#pragma once

#include "src/graph/graph.h"
#include "src/tensor/tensor.h"

#include <vector>

namespace pejit::specializer::passes {

struct FoldOptions {
  /// Largest operand or result (elements) evaluated at compile time.
  int64_t max_elements = int64_t{1} << 16;
  /// Largest non-uniform folded result kept as a known input slot instead of the op.
  int64_t max_const_input = 64;
};

/// A copy of `g` with known nodes folded and identities applied. `known` holds, by input
/// slot, the values known at compile time (undefined: a runtime input); folded non-uniform
/// results get new slots at the end, recorded in `known`. Outputs kept in order.
graph::Graph fold_constants(const graph::Graph& g, std::vector<Tensor>& known,
                            const FoldOptions& opt = {});

} // namespace pejit::specializer::passes
