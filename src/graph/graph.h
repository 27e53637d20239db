// The tensor dataflow graph: a flat, append-only arena of hash-consed nodes (tinygrad-style).
// Design note. A node is one value: a tensor of a concrete ShapeType, produced by applying
// its kind (a registry op, a gradient op, a gather/scatter by a static row map, an n-ary sum)
// to earlier nodes, or a leaf (a runtime input slot, a known constant). Invariants:
//  - operands always have smaller ids than their user, so id order is a topological order;
//  - add() returns the existing id for a structurally equal node (kind, code, operands, attr,
//    index map, result index, slot, constant bits): equal ids <=> equal values, CSE for free;
//  - nothing has side effects; every node's type is inferred and checked when it is added.
// Not represented: control flow, named/symbolic dims, in-place updates, sparse values
// (a TakeGrad node is a dense tensor here), tuples (split has one node per result).
#pragma once

#include "src/ops/emitter.h"
#include "src/ops/op.h"
#include "src/tensor/tensor.h"

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace pejit::graph {

/// Index of a node in its Graph; -1 means "none" (the emitter's convention for handles).
using NodeId = int32_t;
inline constexpr NodeId kNoNode = -1;

/// What a node computes.
enum class Kind : uint8_t {
  Input,   ///< runtime input `slot` (parameters, payloads); no operands
  Const,   ///< a tensor of `type` with every element equal to `value` (f32 only)
  Op,      ///< registry op `code` (an ops::OpId); result `output_index` of a multi-result op
  Grad,    ///< gradient helper `code` (an ops::GradOp), same semantics as the eager emitter
  Gather,  ///< out[i] = src[index_map[i]] (rows = first axis)
  Scatter, ///< out = zeros([rows, ...]); out[index_map[i]] += src[i] (duplicates add)
  SumN,    ///< x1 + ... + xn, all of one type, summed left to right
};
/// "input", "const", "op", ...
const char* kind_name(Kind k);

/// A tensor's element type and concrete dimensions.
struct ShapeType {
  DType dtype = DType::F32;
  std::vector<int64_t> dims;

  int64_t numel() const;
  bool operator==(const ShapeType& o) const { return dtype == o.dtype && dims == o.dims; }
  /// "f32[300, 450]", "f32[]".
  std::string str() const;
  Shape shape() const { return Shape(std::span<const int64_t>(dims)); }
};

/// One node of the arena. Fields a kind does not use stay at their defaults.
struct Node {
  Kind kind = Kind::Const;
  uint16_t code = 0;              ///< OpId (Op) or GradOp (Grad)
  uint32_t output_index = 0;      ///< Op: which result (split has one node per result)
  uint32_t slot = 0;              ///< Input: the runtime input slot
  float value = 0;                ///< Const: the fill value
  ShapeType type;                 ///< inferred on add (given for Input and Const)
  std::vector<NodeId> operands;   ///< all with smaller ids
  ops::Attr attr;                 ///< Op/Grad: the static ints
  std::vector<int32_t> index_map; ///< Gather/Scatter: static row map

  ops::OpId op() const { return static_cast<ops::OpId>(code); }
  ops::GradOp grad_op() const { return static_cast<ops::GradOp>(code); }
  /// Structural equality (what hash-consing compares).
  bool same_as(const Node& o) const;
};

/// The arena. Build with the typed add functions; each returns an existing id when an equal
/// node exists. Shape errors throw pejit::Error naming the op and the operand types.
/// Not thread-safe while being built; a finished Graph is immutable and freely shared.
class Graph {
public:
  /// Runtime input `slot` of `type`. The same slot twice gives the same id; a second use with
  /// another type is a pejit::Error.
  NodeId input(uint32_t slot, ShapeType type);
  /// A constant f32 tensor of `dims` (empty: a scalar) filled with `v`.
  NodeId constant(float v, std::vector<int64_t> dims = {});
  /// Registry op application; `output_index` selects the result of a multi-result op.
  NodeId op(ops::OpId id, std::span<const NodeId> operands, const ops::Attr& attr = {},
            uint32_t output_index = 0);
  NodeId op(ops::OpId id, std::initializer_list<NodeId> operands, const ops::Attr& attr = {},
            uint32_t output_index = 0) {
    return op(id, std::span<const NodeId>(operands.begin(), operands.size()), attr, output_index);
  }
  /// All results of an op (one node each): split(x, n) gives n ids.
  std::vector<NodeId> op_results(ops::OpId id, std::span<const NodeId> operands,
                                 const ops::Attr& attr = {});
  /// Gradient helper op (see ops::GradOp for each one's operands).
  NodeId grad(ops::GradOp id, std::span<const NodeId> operands, const ops::Attr& attr = {});
  NodeId grad(ops::GradOp id, std::initializer_list<NodeId> operands, const ops::Attr& attr = {}) {
    return grad(id, std::span<const NodeId>(operands.begin(), operands.size()), attr);
  }
  /// Rows of `src` (rank >= 1) selected by `index_map`; every index in [0, rows of src).
  NodeId gather(NodeId src, std::vector<int32_t> index_map);
  /// A [rows, ...] zero tensor with row index_map[i] += src[i]; index_map.size() must equal
  /// src's row count, every index in [0, rows).
  NodeId scatter(NodeId src, std::vector<int32_t> index_map, int64_t rows);
  /// The n-ary sum (n >= 1) of same-typed nodes; n == 1 returns the operand itself.
  NodeId sum_n(std::span<const NodeId> operands);

  /// The existing id of a node equal to `n`, or kNoNode. The type is compared only where the
  /// operands do not imply it (Const, Scatter); for Input only the slot counts.
  NodeId find(const Node& n) const;

  size_t size() const { return nodes_.size(); }
  const Node& node(NodeId id) const;
  const ShapeType& type(NodeId id) const { return node(id).type; }
  std::span<const Node> nodes() const { return nodes_; }
  /// One more than the largest input slot (0 without inputs).
  uint32_t num_inputs() const { return num_inputs_; }

  /// The graph's roots (what a caller wants computed); kept in order, duplicates allowed.
  void add_output(NodeId id);
  std::span<const NodeId> outputs() const { return outputs_; }

private:
  NodeId intern(Node n);
  void check_id(NodeId id, const char* what) const;

  std::vector<Node> nodes_;
  std::unordered_multimap<uint64_t, NodeId> index_;
  std::vector<NodeId> outputs_;
  uint32_t num_inputs_ = 0;
};

/// The ShapeType of a host tensor.
ShapeType type_of(const Tensor& t);

/// One node per line (`%7 = add(%3, %5) : f32[150]`), then `return %a, %b` if there are
/// outputs. Deterministic: used by golden tests and --dump-after.
std::string print(const Graph& g);
/// One node's line, without a newline.
std::string print_node(const Graph& g, NodeId id);
/// The graph in GraphViz dot syntax (edges from operand to user; outputs double-circled).
std::string to_dot(const Graph& g);

} // namespace pejit::graph
