// Fusion: partitions a template graph's computed nodes into kernels, the unit that is
// compiled, cached by signature and run once per batched template group.
//
// Design note. A kernel is one *anchor* (an op that is not elementwise: matmul and its
// gradients, reductions, take, softmax, cross_entropy, gathers ...) followed by its
// *epilogue*: fusible ops (elementwise ops, elementwise gradient helpers such as sigmoid_bwd,
// n-ary sums, and the layout ops split/slice/concat/reshape, which an epilogue does by
// addressing) placed after it; or a standalone chain of fusible ops. A matmul-like anchor
// also takes a pure layout *prologue* (the concat that builds its row operand), done while
// packing the operand panel. Every value a kernel computes that something outside it reads
// is a kernel output (stored); everything else stays in registers.
// Algorithm: greedy in id order (a topological order). An anchor opens a kernel. A fusible
// node joins the kernel of its latest operand unless that would close a cycle among kernels
// (another operand's kernel depends on the chosen one); the operand kernels that are
// standalone chains are then merged into it when no third kernel lies between them. An
// elementwise node that reads no kernel's value and that no kernel reads joins a standalone
// chain that reads one of its operands of its shape and holds a node of that shape (a sibling:
// one pass over the shared values). A node no kernel can take opens a standalone chain. Kernels are
// returned in a topological order (ties by smallest node id), so the result is deterministic.
// Within a kernel, nodes run in id order, except around an input gradient's GEMM: the fusible
// nodes it does not need run after it (Kernel::nodes).
// Inputs and constants belong to no kernel: they are buffers and immediates that kernels
// read. Not done: fusing two anchors (a reduction into a matmul epilogue), recomputation
// instead of storing, shape-aware cost decisions.
#pragma once

#include "src/graph/graph.h"

#include <span>
#include <string>
#include <vector>

namespace pejit::specializer::passes {

struct Kernel {
  /// In the order they run: id order, but for an input gradient's GEMM (see execution_order
  /// in fuse_kernels.cpp) the nodes it does not need run after it.
  std::vector<graph::NodeId> nodes;
  graph::NodeId anchor = graph::kNoNode; ///< kNoNode: a standalone fusible chain
  std::vector<graph::NodeId> inputs;     ///< nodes read from outside (not constants)
  std::vector<graph::NodeId> outputs;    ///< nodes read outside the kernel, or roots
  /// The fused op chain with the anchor's static dims and the dtype, e.g.
  /// "concat+matmul[300x750]+add+split5+sigmoid+...:f32". Per instance: no row count.
  std::string signature;
  /// The whole kernel: every node with its operand wiring, attributes, types and constants.
  /// Equal keys mean the same code; this is what a kernel cache is keyed by.
  std::string key;
};

/// Partitions the computed nodes that `roots` need, except those marked in `available`
/// (by id: already computed, e.g. by the forward kernels; may be empty), into kernels in a
/// valid execution order. Every such node is in exactly one kernel.
std::vector<Kernel> fuse_kernels(const graph::Graph& g, std::span<const graph::NodeId> roots,
                                 const std::vector<bool>& available = {});

} // namespace pejit::specializer::passes
