// Batched execution of template graphs (see graph_runner.h).
#include "runtime/graph_runner.h"

#include "runtime/graph_runs.h"

#include "jit/kernel_cache.h"
#include "src/kernels/kernels.h"
#include "src/ops/emitter.h"
#include "src/util/check.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace pejit::runtime {

using graph::Kind;
using graph::Node;
using graph::NodeId;
using ops::GradOp;
using ops::OpId;

using detail::jit_op;
using detail::rank_of;
using detail::with_rows;

namespace {

// [rows, d...] as [rows, 1, ..., 1, d...] with per-row rank r.
Tensor expand_rows(const Tensor& t, size_t r) {
  Shape s{t.dim(0)};
  for (size_t k = t.rank() - 1; k < r; ++k)
    s.push_back(1);
  for (size_t k = 1; k < t.rank(); ++k)
    s.push_back(t.shape()[k]);
  return t.reshaped(s);
}

// A shared value repeated on every row.
Tensor repeat_rows(const Tensor& t, int64_t rows) {
  return kernels::broadcast_to(t, with_rows(rows, t.shape().dims()));
}

// A two-operand gradient helper's reference kernel.
Tensor grad2(GradOp g, const Tensor& a, const Tensor& b, const ops::Attr& attr) {
  Tensor in[2] = {a, b};
  return ops::eval_grad_op(g, in, attr);
}

// A registry op's reference kernel; result k of a multi-result op.
Tensor run_op(OpId o, std::vector<Tensor> args, const ops::Attr& attr, uint32_t k = 0) {
  std::vector<Tensor> out;
  ops::op_def(o).eval(args, attr, out);
  return std::move(out[k]);
}

// dX = dY · W^T for a weight W [N,K] that every group of a plan run multiplies by: W^T is
// packed once per run (kernels::pack_b transposes while packing) and kept in `packed` under
// W's address + 1 byte (never dereferenced; the address itself keys the plain W^T that other
// shapes use); the map is cleared when the parameters may change.
Tensor matmul_packed_wt(const Tensor& gy, const Tensor& w,
                        std::unordered_map<const void*, Tensor>& packed) {
  const int64_t k = w.dim(1), n = w.dim(0);
  Tensor& p = packed[static_cast<const char*>(w.raw()) + 1];
  if (!p.defined()) {
    p = Tensor::empty(DType::F32, Shape{kernels::packed_size(k, n)});
    kernels::pack_b(true, k, n, w.f32(), k, p.f32());
  }
  return kernels::matmul_packed(gy, p, n);
}

} // namespace

GraphRunner::GraphRunner(specializer::TemplateGraph tg, bool jit_runs) : tg_(std::move(tg)) {
  ops::register_kernels();
  // The parts of each split: nodes with the same operand and attribute.
  const graph::Graph& g = tg_.g;
  split_parts_.assign(g.size(), {});
  for (NodeId a = 0; a < static_cast<NodeId>(g.size()); ++a) {
    const Node& na = g.node(a);
    if (na.kind != Kind::Op || na.op() != OpId::Split)
      continue;
    for (NodeId b = 0; b < static_cast<NodeId>(g.size()); ++b) {
      const Node& nb = g.node(b);
      if (b != a && nb.kind == Kind::Op && nb.op() == OpId::Split && nb.operands == na.operands &&
          nb.attr.ints == na.attr.ints)
        split_parts_[static_cast<size_t>(a)].push_back(b);
    }
  }
  classify();
  // Weight gradients x^T·gy that are a parameter's whole gradient and read by nothing else.
  deferrable_.assign(g.size(), false);
  std::vector<int> users(g.size(), 0);
  for (const Node& n : g.nodes())
    for (NodeId o : n.operands)
      ++users[static_cast<size_t>(o)];
  for (NodeId o : tg_.bwd_param_grads) {
    if (o == graph::kNoNode || users[static_cast<size_t>(o)] != 0)
      continue;
    const Node& n = g.node(o);
    if (n.kind == Kind::Grad && n.grad_op() == GradOp::MatMulGradB &&
        cls_[static_cast<size_t>(o)] == RowClass::Summed && rank_of(g.node(n.operands[1])) == 1 &&
        rank_of(g.node(n.operands[0])) == 1 && rank_of(g.node(n.operands[2])) == 2 &&
        std::count(tg_.bwd_param_grads.begin(), tg_.bwd_param_grads.end(), o) == 1)
      deferrable_[static_cast<size_t>(o)] = true;
  }
  if (supported() && jit_runs) {
    plan_runs();
    plan_reductions();
    plan_weight_grads();
  }
}

GraphRunner::GraphRunner(const GraphRunner&) = default;

GraphRunner::~GraphRunner() = default;

void GraphRunner::classify() {
  const graph::Graph& g = tg_.g;
  cls_.assign(g.size(), RowClass::Shared);
  auto fail = [this](NodeId id, const std::string& what) {
    if (why_.empty()) // appended piece by piece: GCC 12 -O3 warns (-Wrestrict) on "%" + s
      why_.append("%")
          .append(std::to_string(id))
          .append(" ")
          .append(what)
          .append(": ")
          .append(graph::print_node(tg_.g, id));
  };
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    bool rows = false, summed = false;
    for (NodeId o : n.operands) {
      rows = rows || cls_[static_cast<size_t>(o)] == RowClass::Rows;
      summed = summed || cls_[static_cast<size_t>(o)] == RowClass::Summed;
    }
    auto c = [&](size_t i) { return cls_[static_cast<size_t>(n.operands[i])]; };
    RowClass& out = cls_[static_cast<size_t>(id)];
    switch (n.kind) {
    case Kind::Input: {
      auto role = tg_.slots[n.slot].role;
      out = role == specializer::InputSlot::Role::Arg || role == specializer::InputSlot::Role::Seed
                ? RowClass::Rows
                : RowClass::Shared;
      continue;
    }
    case Kind::Const:
      continue;
    case Kind::Gather:
    case Kind::Scatter:
      if (rows || summed)
        fail(id, "gather/scatter of per-row values");
      continue;
    default:
      break;
    }
    if (!rows && !summed)
      continue; // Shared
    if (summed) {
      // Linear combinations of summed gradients (a parameter read twice); a per-row term is
      // summed over the rows first.
      bool linear = n.kind == Kind::SumN ||
                    (n.kind == Kind::Op &&
                     (n.op() == OpId::Add || n.op() == OpId::Sub || n.op() == OpId::Neg));
      for (size_t i = 0; i < n.operands.size(); ++i)
        linear = linear && c(i) != RowClass::Shared;
      if (!linear)
        fail(id, "non-linear use of a row-summed gradient");
      out = RowClass::Summed;
      continue;
    }
    out = RowClass::Rows;
    if (n.kind == Kind::SumN)
      continue;
    if (n.kind == Kind::Op) {
      const auto& def = ops::op_def(n.op());
      if (def.elementwise)
        continue;
      switch (n.op()) {
      case OpId::MatMul:
        if (!(c(0) == RowClass::Rows && c(1) == RowClass::Shared &&
              rank_of(g.node(n.operands[0])) == 1 && rank_of(g.node(n.operands[1])) == 2))
          fail(id, "matmul other than per-row vector @ shared matrix");
        continue;
      case OpId::Concat:
      case OpId::Split:
      case OpId::Slice:
      case OpId::Softmax:
      case OpId::LogSoftmax:
      case OpId::Argmax:
      case OpId::Sum:
      case OpId::Mean:
      case OpId::Reshape:
        continue;
      case OpId::Take:
        if (c(0) != RowClass::Shared)
          fail(id, "take from a per-row table");
        continue;
      case OpId::CrossEntropy:
        if (c(0) != RowClass::Rows || c(1) != RowClass::Rows)
          fail(id, "cross_entropy of shared logits or labels");
        continue;
      default:
        fail(id, "no batched rule");
        continue;
      }
    }
    // Gradient helpers.
    switch (n.grad_op()) {
    case GradOp::SigmoidBwd:
    case GradOp::TanhBwd:
    case GradOp::ReluBwd:
    case GradOp::BroadcastTo:
    case GradOp::UnsumAxis:
      continue;
    case GradOp::SoftmaxBwd:
    case GradOp::LogSoftmaxBwd:
    case GradOp::CrossEntropyBwd:
    case GradOp::PadSlice:
    case GradOp::ReshapeLike:
      for (size_t i = 0; i < n.operands.size(); ++i)
        if (c(i) != RowClass::Rows)
          fail(id, "per-row gradient op with a shared operand");
      continue;
    case GradOp::SumToShape:
      if (c(1) == RowClass::Shared)
        out = RowClass::Summed; // the gradient of a shared value: summed over the rows
      continue;
    case GradOp::MatMulGradA:
      if (!(c(1) == RowClass::Rows && c(2) == RowClass::Shared))
        fail(id, "matmul gradient of a shared left operand");
      continue;
    case GradOp::MatMulGradB:
      if (c(1) == RowClass::Rows && c(2) == RowClass::Shared && rank_of(g.node(n.operands[1])) == 1)
        out = RowClass::Summed; // one GEMM over all rows: a^T gy
      else
        fail(id, "matmul gradient other than of a shared matrix");
      continue;
    case GradOp::TakeGrad:
      if (c(2) == RowClass::Shared)
        out = RowClass::Summed;
      else
        fail(id, "gradient of a per-row table");
      continue;
    default:
      fail(id, "no batched rule");
      continue;
    }
  }
  // Argument gradients are per row; one summed over the rows would be a batched rule this
  // runner does not have (the interpreter takes such a template).
  for (NodeId o : tg_.bwd_arg_grads)
    if (o != graph::kNoNode && cls_[static_cast<size_t>(o)] == RowClass::Summed)
      fail(o, "an argument gradient summed over the rows");
}

Tensor GraphRunner::eval(NodeId id, State& st) const {
  const graph::Graph& g = tg_.g;
  const Node& n = g.node(id);
  const int64_t rows = st.rows;
  auto val = [&](size_t i) -> const Tensor& { return st.vals[static_cast<size_t>(n.operands[i])]; };
  auto cls = [&](size_t i) { return cls_[static_cast<size_t>(n.operands[i])]; };
  RowClass me = cls_[static_cast<size_t>(id)];
  std::vector<Tensor> in;
  for (size_t i = 0; i < n.operands.size(); ++i)
    in.push_back(val(i));
  auto op = [](OpId o, std::vector<Tensor> args, const ops::Attr& attr, uint32_t k = 0) {
    return run_op(o, std::move(args), attr, k);
  };
  auto sum_rows = [&](const Tensor& t) { return kernels::sum_axis(t, 0); };

  if (n.kind == Kind::Const)
    return Tensor::full(n.type.shape(), n.value);
  if (n.kind == Kind::Gather || n.kind == Kind::Scatter) {
    PEJIT_CHECK(me == RowClass::Shared) << "gather of rows in a batched template";
  }
  if (me == RowClass::Shared) {
    if (n.kind == Kind::Op)
      return op(n.op(), in, n.attr, n.output_index);
    if (n.kind == Kind::Grad)
      return ops::eval_grad_op(n.grad_op(), in, n.attr);
    if (n.kind == Kind::SumN) {
      Tensor v = in[0].clone();
      for (size_t j = 1; j < in.size(); ++j)
        kernels::add_inplace(v, in[j]);
      return v;
    }
    PEJIT_CHECK(false) << "unexpected shared node " << graph::print_node(g, id);
  }
  if (me == RowClass::Summed && n.kind != Kind::Grad) {
    // Linear ops over summed gradients; per-row terms are summed over the rows first.
    for (size_t i = 0; i < in.size(); ++i)
      if (cls(i) == RowClass::Rows)
        in[i] = sum_rows(in[i]);
    if (n.kind == Kind::SumN) {
      Tensor v = in[0].clone();
      for (size_t j = 1; j < in.size(); ++j)
        kernels::add_inplace(v, in[j]);
      return v;
    }
    return op(n.op(), in, n.attr);
  }
  // Rows (or a gradient op that sums over the rows).
  const size_t r = rank_of(n);
  auto align = [&]() {
    for (size_t i = 0; i < in.size(); ++i)
      if (cls(i) == RowClass::Rows && in[i].rank() - 1 < r)
        in[i] = expand_rows(in[i], r);
  };
  if (n.kind == Kind::SumN) {
    align();
    Tensor v;
    for (size_t i = 0; i < in.size(); ++i) {
      Tensor t = cls(i) == RowClass::Rows ? in[i] : repeat_rows(in[i], rows);
      if (!v.defined())
        v = t.clone();
      else
        kernels::add_inplace(v, t);
    }
    return v.reshaped(with_rows(rows, n.type.dims));
  }
  if (n.kind == Kind::Op) {
    OpId o = n.op();
    if (ops::op_def(o).elementwise) {
      align();
      return op(o, in, n.attr).reshaped(with_rows(rows, n.type.dims));
    }
    switch (o) {
    case OpId::Concat:
      for (size_t i = 0; i < in.size(); ++i)
        if (cls(i) == RowClass::Shared)
          in[i] = repeat_rows(in[i], rows);
      return op(o, in, n.attr);
    case OpId::Sum:
    case OpId::Mean: {
      if (n.attr.ints.empty()) {
        Tensor flat = in[0].reshaped(Shape{rows, in[0].numel() / std::max<int64_t>(rows, 1)});
        return op(o, {flat}, ops::Attr{{1}});
      }
      int64_t ax = n.attr.ints[0];
      if (ax < 0)
        ax += static_cast<int64_t>(in[0].rank()) - 1;
      return op(o, in, ops::Attr{{ax + 1}});
    }
    case OpId::Reshape: {
      ops::Attr a;
      a.ints.push_back(rows);
      a.ints.insert(a.ints.end(), n.attr.ints.begin(), n.attr.ints.end());
      return op(o, in, a);
    }
    case OpId::Split: {
      // All parts at once; the sibling nodes (the other parts) get theirs too.
      std::vector<Tensor> parts;
      ops::op_def(o).eval(in, n.attr, parts);
      for (NodeId sib : split_parts_[static_cast<size_t>(id)])
        st.vals[static_cast<size_t>(sib)] = parts[g.node(sib).output_index];
      return parts[n.output_index];
    }
    default: // matmul, slice, softmax, log_softmax, argmax, take, cross_entropy
      return op(o, in, n.attr, n.output_index);
    }
  }
  PEJIT_CHECK(n.kind == Kind::Grad) << "unexpected node " << graph::print_node(g, id);
  GradOp go = n.grad_op();
  switch (go) {
  case GradOp::SigmoidBwd:
  case GradOp::TanhBwd:
  case GradOp::ReluBwd: {
    // Their kernels take operands of one shape: both as [rows, per-row dims].
    align();
    Shape full = with_rows(rows, n.type.dims);
    for (auto& t : in)
      if (t.shape() != full)
        t = kernels::broadcast_to(t, full);
    return ops::eval_grad_op(go, in, n.attr);
  }
  case GradOp::SumToShape:
    if (me == RowClass::Summed)
      return grad2(go, sum_rows(in[0]), in[1], n.attr);
    [[fallthrough]];
  case GradOp::BroadcastTo:
  case GradOp::ReshapeLike: {
    // The target is per row: line the per-row dimensions up after the row axis.
    Tensor like = cls(1) == RowClass::Rows ? in[1] : repeat_rows(in[1], rows);
    Tensor x = cls(0) == RowClass::Rows ? in[0] : repeat_rows(in[0], rows);
    size_t rx = x.rank() - 1, rl = like.rank() - 1;
    if (go != GradOp::ReshapeLike) {
      if (rx < rl)
        x = expand_rows(x, rl);
      else if (rl < rx)
        like = expand_rows(like, rx);
    }
    return grad2(go, x, like, n.attr).reshaped(with_rows(rows, n.type.dims));
  }
  case GradOp::UnsumAxis: {
    int64_t ax = n.attr.ints[0];
    if (ax < 0)
      ax += static_cast<int64_t>(r);
    Tensor like = cls(1) == RowClass::Rows ? in[1] : repeat_rows(in[1], rows);
    Tensor x = cls(0) == RowClass::Rows ? in[0] : repeat_rows(in[0], rows);
    return grad2(go, x, like, ops::Attr{{ax + 1}});
  }
  case GradOp::MatMulGradA:
    if (st.transposed != nullptr && in[2].rank() == 2 && in[0].rank() == 2 &&
        in[0].dim(1) == in[2].dim(1) && in[0].dtype() == DType::F32 && in[2].dtype() == DType::F32)
      // A GEMM without a transposed operand, on W^T packed once per run for every group,
      // instead of transposing W for each level's small GEMM.
      return matmul_packed_wt(in[0], in[2], *st.transposed);
    if (st.transposed != nullptr && in[2].rank() == 2) {
      Tensor& wt = (*st.transposed)[in[2].raw()];
      if (!wt.defined())
        wt = run_op(OpId::Transpose, {in[2]}, {});
      return run_op(OpId::MatMul, {in[0], wt}, {});
    }
    return ops::eval_grad_op(go, in, n.attr);
  default: // softmax/log_softmax/cross_entropy/matmul_grad_b, pad_slice, take_grad
    return ops::eval_grad_op(go, in, n.attr);
  }
}

void GraphRunner::run_kernel(const specializer::Kernel& k, const std::vector<Run>* runs, State& st,
                             GraphRunStats& stats) const {
  using Clock = ProfileClock;
  size_t next = 0;
  std::vector<float*> ins, outs;
  for (size_t i = 0; i < k.nodes.size();) {
    if (runs != nullptr && next < runs->size() && (*runs)[next].first == i &&
        (*runs)[next].kernel) {
      const Run& r = (*runs)[next++];
      launch(r, ins, outs, st, stats);
      i += r.count;
      continue;
    }
    if (runs != nullptr && next < runs->size() && (*runs)[next].first == i)
      ++next; // not compiled (yet): its nodes run on reference kernels
    NodeId id = k.nodes[i++];
    if (st.vals[static_cast<size_t>(id)].defined())
      continue; // a split part computed with its siblings, or a concat made by a run
    if (st.views && skip_[static_cast<size_t>(id)]) {
      stats.in_place++; // read in place by the runs
      continue;
    }
    if (st.views && st.panels && fused_[static_cast<size_t>(id)])
      continue; // its run computes it, panel by panel
    if (st.deferred != nullptr && deferrable_[static_cast<size_t>(id)])
      continue; // the caller does it, with the other groups' rows
    if (run_reduction(id, st, stats))
      continue; // on its row-reduction kernel
    auto t0 = stats.profile ? Clock::now() : Clock::time_point{};
    st.vals[static_cast<size_t>(id)] = eval(id, st);
    if (stats.profile) {
      auto [f, flops] = family_of(tg_.g, id, st.vals, st.rows);
      record(stats.time, f, t0, flops);
    }
    stats.ref_nodes++;
  }
}

void GraphRunner::forward(int64_t rows, std::span<const Tensor> args, const interp::Params& params,
                          std::span<Tensor> results, State& st, GraphRunStats& stats) const {
  PEJIT_CHECK(supported()) << "GraphRunner::forward on an unsupported graph: " << why_;
  const graph::Graph& g = tg_.g;
  st.rows = rows;
  st.vals.assign(g.size(), Tensor());
  st.views = !fwd_runs_.empty() && compiled();
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    if (n.kind == Kind::Const) {
      st.vals[static_cast<size_t>(id)] = Tensor::full(n.type.shape(), n.value);
      continue;
    }
    if (n.kind != Kind::Input)
      continue;
    const auto& slot = tg_.slots[n.slot];
    Tensor& v = st.vals[static_cast<size_t>(id)];
    switch (slot.role) {
    case specializer::InputSlot::Role::Arg:
      v = args[static_cast<size_t>(slot.index)];
      break;
    case specializer::InputSlot::Role::Param:
      v = params.values[static_cast<size_t>(slot.index)];
      break;
    case specializer::InputSlot::Role::Const:
      v = tg_.consts[n.slot];
      break;
    case specializer::InputSlot::Role::Seed:
      break; // bound by backward
    }
  }
  if (!(st.views && st.panels)) // no core gathers: the concats read the blocks
    for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id)
      fill_arg(id, st);
  bind(tg_.fwd_outputs, results, st);
  for (size_t k = 0; k < tg_.fwd_kernels.size(); ++k)
    run_kernel(tg_.fwd_kernels[k], fwd_runs_.empty() ? nullptr : &fwd_runs_[k], st, stats);
  for (size_t k = 0; k < tg_.fwd_outputs.size(); ++k) {
    NodeId o = tg_.fwd_outputs[k];
    Tensor v = st.vals[static_cast<size_t>(o)];
    if (cls_[static_cast<size_t>(o)] == RowClass::Shared)
      v = repeat_rows(v, rows);
    PEJIT_CHECK(v.numel() == results[k].numel()) << tg_.name << ": result " << k << " size";
    if (v.raw() != results[k].raw()) // not written in place
      std::memmove(results[k].raw(), v.raw(), v.nbytes());
  }
}

void GraphRunner::backward(std::span<const Tensor> seeds, const interp::Params& params,
                           std::span<Tensor> arg_grads, std::vector<interp::ParamGrad>& param_grads,
                           State& st, GraphRunStats& stats) const {
  const graph::Graph& g = tg_.g;
  const int64_t rows = st.rows;
  for (size_t k = 0; k < tg_.seeds.size(); ++k) {
    NodeId s = tg_.seeds[k];
    if (s == graph::kNoNode)
      continue;
    Tensor v = k < seeds.size() ? seeds[k] : Tensor();
    if (!v.defined())
      v = Tensor::zeros(DType::F32, with_rows(rows, g.node(s).type.dims));
    st.vals[static_cast<size_t>(s)] = v;
  }
  // The row-sparse embedding gradient: a parameter gradient that is a TakeGrad of per-row ids
  // is not computed densely (its kernel node is skipped).
  std::vector<bool> sparse(g.size(), false);
  for (NodeId p : tg_.bwd_param_grads)
    if (p != graph::kNoNode && g.node(p).kind == Kind::Grad &&
        g.node(p).grad_op() == GradOp::TakeGrad)
      sparse[static_cast<size_t>(p)] = true;
  bind(tg_.bwd_arg_grads, arg_grads, st);
  for (size_t k = 0; k < tg_.bwd_kernels.size(); ++k) {
    const auto& kn = tg_.bwd_kernels[k];
    if (kn.nodes.size() == 1 && sparse[static_cast<size_t>(kn.nodes[0])])
      continue;
    run_kernel(kn, bwd_runs_.empty() ? nullptr : &bwd_runs_[k], st, stats);
  }
  for (size_t a = 0; a < tg_.bwd_arg_grads.size() && a < arg_grads.size(); ++a) {
    if (!arg_grads[a].defined())
      continue;
    NodeId o = tg_.bwd_arg_grads[a];
    if (o == graph::kNoNode) {
      std::memset(arg_grads[a].raw(), 0, arg_grads[a].nbytes());
      continue;
    }
    Tensor v = st.vals[static_cast<size_t>(o)];
    if (cls_[static_cast<size_t>(o)] == RowClass::Shared)
      v = repeat_rows(v, rows);
    PEJIT_CHECK(cls_[static_cast<size_t>(o)] != RowClass::Summed &&
                v.numel() == arg_grads[a].numel())
        << tg_.name << ": argument gradient " << a;
    if (v.raw() != arg_grads[a].raw()) // not written in place
      std::memmove(arg_grads[a].raw(), v.raw(), v.nbytes());
  }
  for (size_t j = 0; j < tg_.bwd_param_grads.size(); ++j) {
    NodeId o = tg_.bwd_param_grads[j];
    if (o == graph::kNoNode)
      continue;
    auto& dst = param_grads[static_cast<size_t>(tg_.param_index[j])];
    const Tensor& table = params.values[static_cast<size_t>(tg_.param_index[j])];
    if (st.deferred != nullptr && deferrable_[static_cast<size_t>(o)]) {
      const Node& n = g.node(o);
      st.deferred->push_back({tg_.param_index[j], st.vals[static_cast<size_t>(n.operands[1])],
                              st.vals[static_cast<size_t>(n.operands[0])], weight_grad_kernel(o)});
      continue;
    }
    if (sparse[static_cast<size_t>(o)]) {
      const Node& n = g.node(o);
      const Tensor& idx = st.vals[static_cast<size_t>(n.operands[0])];
      const Tensor& gy = st.vals[static_cast<size_t>(n.operands[1])];
      kernels::RowSparse rs;
      rs.indices = idx.reshaped(Shape{idx.numel()});
      Shape rs_shape{idx.numel()};
      for (size_t d = 1; d < table.rank(); ++d)
        rs_shape.push_back(table.shape()[d]);
      rs.rows = gy.reshaped(rs_shape);
      rs.num_rows = table.dim(0);
      dst.sparse.push_back(std::move(rs));
      continue;
    }
    Tensor v = st.vals[static_cast<size_t>(o)];
    switch (cls_[static_cast<size_t>(o)]) {
    case RowClass::Rows:
      v = sum_rows(o, v, rows, stats);
      break;
    case RowClass::Shared: // the same gradient for every row
      v = run_op(OpId::Mul, {v, Tensor::scalar_f32(static_cast<float>(rows))}, {});
      break;
    case RowClass::Summed:
      break;
    }
    if (!dst.dense.defined())
      dst.dense = v.unique() ? v : v.clone();
    else
      kernels::add_inplace(dst.dense, v);
  }
  st.vals.clear();
}

} // namespace pejit::runtime
