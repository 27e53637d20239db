// The graph's reference semantics: evaluates nodes on host tensors with the registry's
// reference kernels, and gradient helpers with the same kernels and math as the generic
// path's eager emitter (interp/tape.cpp). Differential tests compare plans against it.
#pragma once

#include "src/graph/graph.h"
#include "src/tensor/tensor.h"

#include <span>
#include <vector>

namespace pejit::graph {

/// Values of `outputs` given one tensor per input slot (inputs[slot]; slots the graph does not
/// use may be undefined). Only the nodes the outputs need are computed, in id order. Input
/// tensors whose dtype or shape differ from their node's type are a pejit::Error.
/// Unlike the eager emitter, TakeGrad is computed densely and MatMulGradB is never deferred;
/// the sums are the same, so results agree to rounding.
std::vector<Tensor> evaluate(const Graph& g, std::span<const Tensor> inputs,
                             std::span<const NodeId> outputs);

} // namespace pejit::graph
