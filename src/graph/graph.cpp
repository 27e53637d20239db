// The arena: hash-consing and every node kind's shape rule. Op nodes use the registry's shape
// rules (ops::op_result_type, over ir::Type with constant dims); the rules of gradient helpers,
// gather, scatter and n-ary sums are here, and mirror what the eager emitter's kernels accept.
#include "src/graph/graph.h"

#include "src/util/check.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

namespace pejit::graph {

using ops::GradOp;
using ops::OpId;

namespace {

ir::Elem elem_of(DType d) {
  return d == DType::F32 ? ir::Elem::F32 : ir::Elem::I32;
}
DType dtype_of(ir::Elem e) {
  return e == ir::Elem::F32 ? DType::F32 : DType::I32;
}

ir::Type to_ir(const ShapeType& t) {
  std::vector<ir::Dim> d;
  for (int64_t v : t.dims)
    d.push_back(ir::Dim::of(v));
  return ir::t_tensor(elem_of(t.dtype), std::move(d));
}

ShapeType from_ir(const ir::Type& t) {
  PEJIT_CHECK(t && t->is_tensor()) << "expected a tensor type";
  ShapeType s{dtype_of(t->elem), {}};
  for (const auto& d : t->dims) {
    PEJIT_CHECK(!d.is_named()) << "named dimension in a graph type";
    s.dims.push_back(d.value);
  }
  return s;
}

ShapeType f32(std::vector<int64_t> dims) {
  return ShapeType{DType::F32, std::move(dims)};
}

std::string dims_str(const std::vector<int64_t>& d) {
  return fmt::format("[{}]", fmt::join(d, ", "));
}

// True when `from` broadcasts (numpy rules) to exactly `to`.
bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() > to.size())
    return false;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[off + i])
      return false;
  return true;
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

uint64_t hash_node(const Node& n) {
  uint64_t h = mix(static_cast<uint64_t>(n.kind), n.code);
  h = mix(h, n.output_index);
  h = mix(h, n.slot);
  h = mix(h, std::bit_cast<uint32_t>(n.value));
  for (NodeId o : n.operands)
    h = mix(h, static_cast<uint64_t>(o));
  for (int64_t v : n.attr.ints)
    h = mix(h, static_cast<uint64_t>(v));
  for (int32_t v : n.index_map)
    h = mix(h, static_cast<uint32_t>(v));
  if (n.kind == Kind::Const || n.kind == Kind::Scatter)
    for (int64_t v : n.type.dims)
      h = mix(h, static_cast<uint64_t>(v));
  return h;
}

// The result type of a gradient helper; "" or an error message.
std::string grad_type(GradOp g, std::span<const ShapeType> in, const ops::Attr& attr,
                      ShapeType& out) {
  static constexpr int kArity[] = {2, 2, 2, 2, 2, 3, 2, 2, 2, 3, 3, 3, 2, 2};
  static_assert(sizeof(kArity) / sizeof(kArity[0]) == static_cast<size_t>(GradOp::Count));
  int want = kArity[static_cast<size_t>(g)];
  if (static_cast<int>(in.size()) != want)
    return fmt::format("takes {} operands, got {}", want, in.size());
  auto same = [&](size_t a, size_t b) -> std::string {
    if (in[a].dims == in[b].dims)
      return "";
    return fmt::format("operands {} and {} differ: {} vs {}", a + 1, b + 1, in[a].str(),
                       in[b].str());
  };
  for (size_t i = 0; i < in.size(); ++i) {
    bool label = (g == GradOp::CrossEntropyBwd && i == 1) || (g == GradOp::TakeGrad && i == 0);
    if (!label && in[i].dtype != DType::F32)
      return fmt::format("operand {} must be f32, got {}", i + 1, in[i].str());
  }
  switch (g) {
  case GradOp::SigmoidBwd:
  case GradOp::TanhBwd:
  case GradOp::ReluBwd:
  case GradOp::SoftmaxBwd:
  case GradOp::LogSoftmaxBwd:
    if (g == GradOp::SoftmaxBwd || g == GradOp::LogSoftmaxBwd)
      if (in[0].dims.empty())
        return "needs at least one dimension";
    out = f32(in[0].dims);
    return same(0, 1);
  case GradOp::CrossEntropyBwd: {
    ops::ShapeResult r =
        ops::op_result_type(OpId::CrossEntropy, std::vector{to_ir(in[0]), to_ir(in[1])}, {});
    if (!r.ok())
      return r.error;
    if (from_ir(r.type) != in[2])
      return fmt::format("gradient {} does not match cross_entropy's result {}", in[2].str(),
                         ir::type_str(r.type));
    out = f32(in[0].dims);
    return "";
  }
  case GradOp::SumToShape:
    out = f32(in[1].dims);
    if (!broadcasts_to(in[1].dims, in[0].dims))
      return fmt::format("{} does not broadcast to {}", dims_str(in[1].dims), dims_str(in[0].dims));
    return "";
  case GradOp::BroadcastTo:
    out = f32(in[1].dims);
    if (!broadcasts_to(in[0].dims, in[1].dims))
      return fmt::format("{} does not broadcast to {}", dims_str(in[0].dims), dims_str(in[1].dims));
    return "";
  case GradOp::UnsumAxis: {
    if (attr.ints.size() != 1)
      return "takes one axis";
    int64_t r = static_cast<int64_t>(in[1].dims.size()), ax = attr.ints[0];
    if (ax < 0)
      ax += r;
    if (ax < 0 || ax >= r)
      return fmt::format("axis {} out of range for {}", attr.ints[0], in[1].str());
    auto d = in[1].dims;
    d.erase(d.begin() + ax);
    if (d != in[0].dims)
      return fmt::format("{} is not {} without axis {}", in[0].str(), in[1].str(), attr.ints[0]);
    out = f32(in[1].dims);
    return "";
  }
  case GradOp::MatMulGradA:
  case GradOp::MatMulGradB: {
    ops::ShapeResult r =
        ops::op_result_type(OpId::MatMul, std::vector{to_ir(in[1]), to_ir(in[2])}, {});
    if (!r.ok())
      return r.error;
    if (from_ir(r.type) != in[0])
      return fmt::format("gradient {} does not match matmul's result {}", in[0].str(),
                         ir::type_str(r.type));
    out = f32(in[g == GradOp::MatMulGradA ? 1 : 2].dims);
    return "";
  }
  case GradOp::TakeGrad: {
    ops::ShapeResult r =
        ops::op_result_type(OpId::Take, std::vector{to_ir(in[2]), to_ir(in[0])}, {});
    if (!r.ok())
      return r.error;
    if (from_ir(r.type) != in[1])
      return fmt::format("gradient {} does not match take's result {}", in[1].str(),
                         ir::type_str(r.type));
    out = f32(in[2].dims);
    return "";
  }
  case GradOp::PadSlice: {
    if (attr.ints.size() != 2)
      return "takes {start, end}";
    const auto& x = in[1].dims;
    if (x.empty())
      return "needs rank >= 1";
    int64_t s = attr.ints[0], e = attr.ints[1];
    if (s < 0 || e < s || e > x.back())
      return fmt::format("range [{}, {}) out of bounds for {}", s, e, in[1].str());
    auto d = x;
    d.back() = e - s;
    if (d != in[0].dims)
      return fmt::format("gradient {} is not a [{}, {}) slice of {}", in[0].str(), s, e,
                         in[1].str());
    out = f32(x);
    return "";
  }
  case GradOp::ReshapeLike:
    out = f32(in[1].dims);
    if (in[0].numel() != in[1].numel())
      return fmt::format("{} and {} differ in size", in[0].str(), in[1].str());
    return "";
  case GradOp::Count:
    break;
  }
  PEJIT_CHECK(false) << "unknown gradient op";
}

std::string types_str(const Graph& g, std::span<const NodeId> ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i)
    s += (i ? ", " : "") + g.type(ids[i]).str();
  return s;
}

} // namespace

const char* kind_name(Kind k) {
  switch (k) {
  case Kind::Input:
    return "input";
  case Kind::Const:
    return "const";
  case Kind::Op:
    return "op";
  case Kind::Grad:
    return "grad";
  case Kind::Gather:
    return "gather";
  case Kind::Scatter:
    return "scatter";
  case Kind::SumN:
    return "sum_n";
  }
  return "?";
}

int64_t ShapeType::numel() const {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

std::string ShapeType::str() const {
  return dtype_name(dtype) + dims_str(dims);
}

ShapeType type_of(const Tensor& t) {
  auto d = t.shape().dims();
  return ShapeType{t.dtype(), {d.begin(), d.end()}};
}

bool Node::same_as(const Node& o) const {
  if (kind != o.kind || code != o.code || output_index != o.output_index || slot != o.slot ||
      operands != o.operands || !(attr == o.attr) || index_map != o.index_map)
    return false;
  // The type is implied by the operands except for constants and a scatter's row count.
  if (kind == Kind::Const)
    return std::bit_cast<uint32_t>(value) == std::bit_cast<uint32_t>(o.value) && type == o.type;
  if (kind == Kind::Scatter)
    return type == o.type;
  return true;
}

const Node& Graph::node(NodeId id) const {
  PEJIT_CHECK(id >= 0 && static_cast<size_t>(id) < nodes_.size()) << "bad node id " << id;
  return nodes_[static_cast<size_t>(id)];
}

void Graph::check_id(NodeId id, const char* what) const {
  if (id < 0 || static_cast<size_t>(id) >= nodes_.size())
    throw Error(
        fmt::format("graph: {}: operand %{} does not exist ({} nodes)", what, id, nodes_.size()));
}

NodeId Graph::find(const Node& n) const {
  auto [b, e] = index_.equal_range(hash_node(n));
  for (auto it = b; it != e; ++it)
    if (nodes_[static_cast<size_t>(it->second)].same_as(n))
      return it->second;
  return kNoNode;
}

NodeId Graph::intern(Node n) {
  uint64_t h = hash_node(n);
  auto [b, e] = index_.equal_range(h);
  for (auto it = b; it != e; ++it)
    if (nodes_[static_cast<size_t>(it->second)].same_as(n))
      return it->second;
  auto id = static_cast<NodeId>(nodes_.size());
  nodes_.push_back(std::move(n));
  index_.emplace(h, id);
  return id;
}

NodeId Graph::input(uint32_t slot, ShapeType type) {
  for (int64_t d : type.dims)
    if (d < 0)
      throw Error("graph: input #" + std::to_string(slot) + ": negative dimension");
  Node n;
  n.kind = Kind::Input;
  n.slot = slot;
  if (NodeId old = find(n); old != kNoNode) {
    if (!(nodes_[static_cast<size_t>(old)].type == type))
      throw Error(fmt::format("graph: input #{} used as {} and as {}", slot,
                              nodes_[static_cast<size_t>(old)].type.str(), type.str()));
    return old;
  }
  n.type = std::move(type);
  num_inputs_ = std::max(num_inputs_, slot + 1);
  return intern(std::move(n));
}

NodeId Graph::constant(float v, std::vector<int64_t> dims) {
  for (int64_t d : dims)
    if (d < 0)
      throw Error("graph: constant with a negative dimension " + dims_str(dims));
  Node n;
  n.kind = Kind::Const;
  n.value = v;
  n.type = f32(std::move(dims));
  return intern(std::move(n));
}

NodeId Graph::op(OpId id, std::span<const NodeId> operands, const ops::Attr& attr,
                 uint32_t output_index) {
  const char* nm = ops::op_name(id);
  std::vector<ir::Type> args;
  for (NodeId o : operands) {
    check_id(o, nm);
    args.push_back(to_ir(type(o)));
  }
  ops::ShapeResult r = ops::op_result_type(id, args, attr);
  if (!r.ok())
    throw Error(fmt::format("graph: {} (operands {})", r.error, types_str(*this, operands)));
  ir::Type t = r.type;
  if (t->kind == ir::TypeKind::Tuple) {
    if (output_index >= t->elems.size())
      throw Error(
          fmt::format("graph: {} has {} results, not {}", nm, t->elems.size(), output_index + 1));
    t = t->elems[output_index];
  } else if (output_index != 0) {
    throw Error(fmt::format("graph: {} has one result, not {}", nm, output_index + 1));
  }
  Node n;
  n.kind = Kind::Op;
  n.code = static_cast<uint16_t>(id);
  n.output_index = output_index;
  n.type = from_ir(t);
  n.operands.assign(operands.begin(), operands.end());
  n.attr = attr;
  return intern(std::move(n));
}

std::vector<NodeId> Graph::op_results(OpId id, std::span<const NodeId> operands,
                                      const ops::Attr& attr) {
  std::vector<NodeId> out;
  int n = ops::op_num_results(id, attr);
  for (int i = 0; i < n; ++i)
    out.push_back(op(id, operands, attr, static_cast<uint32_t>(i)));
  return out;
}

NodeId Graph::grad(GradOp id, std::span<const NodeId> operands, const ops::Attr& attr) {
  const char* nm = ops::grad_op_name(id);
  std::vector<ShapeType> in;
  for (NodeId o : operands) {
    check_id(o, nm);
    in.push_back(type(o));
  }
  Node n;
  if (std::string err = grad_type(id, in, attr, n.type); !err.empty())
    throw Error(fmt::format("graph: {}: {} (operands {})", nm, err, types_str(*this, operands)));
  n.kind = Kind::Grad;
  n.code = static_cast<uint16_t>(id);
  n.operands.assign(operands.begin(), operands.end());
  n.attr = attr;
  return intern(std::move(n));
}

NodeId Graph::gather(NodeId src, std::vector<int32_t> index_map) {
  check_id(src, "gather");
  const ShapeType& s = type(src);
  if (s.dims.empty())
    throw Error("graph: gather needs a source of rank >= 1, got " + s.str());
  for (int32_t i : index_map)
    if (i < 0 || i >= s.dims[0])
      throw Error(fmt::format("graph: gather: index {} out of range for {}", i, s.str()));
  Node n;
  n.kind = Kind::Gather;
  n.type = s;
  n.type.dims[0] = static_cast<int64_t>(index_map.size());
  n.operands = {src};
  n.index_map = std::move(index_map);
  return intern(std::move(n));
}

NodeId Graph::scatter(NodeId src, std::vector<int32_t> index_map, int64_t rows) {
  check_id(src, "scatter");
  const ShapeType& s = type(src);
  if (s.dims.empty())
    throw Error("graph: scatter needs a source of rank >= 1, got " + s.str());
  if (static_cast<int64_t>(index_map.size()) != s.dims[0])
    throw Error(fmt::format("graph: scatter: {} indices for the {} rows of {}", index_map.size(),
                            s.dims[0], s.str()));
  if (s.dtype != DType::F32)
    throw Error("graph: scatter needs f32, got " + s.str());
  for (int32_t i : index_map)
    if (i < 0 || i >= rows)
      throw Error(fmt::format("graph: scatter: index {} out of range for {} rows", i, rows));
  Node n;
  n.kind = Kind::Scatter;
  n.type = s;
  n.type.dims[0] = rows;
  n.operands = {src};
  n.index_map = std::move(index_map);
  return intern(std::move(n));
}

NodeId Graph::sum_n(std::span<const NodeId> operands) {
  if (operands.empty())
    throw Error("graph: sum_n needs at least one operand");
  for (NodeId o : operands)
    check_id(o, "sum_n");
  if (operands.size() == 1)
    return operands[0];
  const ShapeType& t = type(operands[0]);
  for (NodeId o : operands)
    if (!(type(o) == t))
      throw Error("graph: sum_n: operands differ in type (" + types_str(*this, operands) + ")");
  Node n;
  n.kind = Kind::SumN;
  n.type = t;
  n.operands.assign(operands.begin(), operands.end());
  return intern(std::move(n));
}

void Graph::add_output(NodeId id) {
  check_id(id, "output");
  outputs_.push_back(id);
}

} // namespace pejit::graph
