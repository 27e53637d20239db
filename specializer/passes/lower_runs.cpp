// The lowering's elementwise runs: the maximal runs of f32 elementwise nodes in a template
// graph's kernels, their JIT kernel specs, and the in-place views (a split's parts read as
// column blocks of its operand, a bias sum added inside the run, a concat's parts written
// into it). The runs' GEMM cores are lower_panels.cpp.
#include "specializer/passes/lower_internal.h"

#include <algorithm>
#include <array>
#include <span>

namespace pejit::specializer::passes::lowering {

using graph::Kind;
using graph::Node;
using graph::NodeId;
using ops::GradOp;
using ops::OpId;

std::optional<jit::ElementwiseOp> jit_op(const Node& n) {
  if (n.kind == Kind::Op)
    return jit::elementwise_op(n.op());
  if (n.kind == Kind::SumN)
    return jit::ElementwiseOp::Add; // a chain of adds
  if (n.kind == Kind::Grad)
    return jit::elementwise_op(n.grad_op());
  return std::nullopt;
}

void plan_runs(Lowering& l) {
  const graph::Graph& g = l.g;
  const TemplateGraph& tg = l.tg;
  auto runnable = [&](NodeId id) {
    const Node& n = g.node(id);
    return l.cls(id) == RowClass::Rows && n.type.dtype == DType::F32 && rank_of(n) == 1 &&
           jit_op(n).has_value();
  };
  std::vector<int32_t> run_of(g.size(), -1); // global run number
  // A lone elementwise node is a run too when it is a GEMM's whole epilogue (the classifier's
  // logits = h·W + b), so that it gets a panel kernel; not when a split reads it (a bias sum
  // that the gate runs add themselves).
  std::vector<std::vector<NodeId>> readers(g.size());
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id)
    for (NodeId o : g.node(id).operands)
      readers[static_cast<size_t>(o)].push_back(id);
  auto epilogue_of_gemm = [&](NodeId id) {
    bool gemm = false;
    for (NodeId o : g.node(id).operands) {
      const Node& on = g.node(o);
      gemm = gemm || (on.kind == Kind::Op && on.op() == OpId::MatMul && l.cls(o) == RowClass::Rows);
    }
    for (NodeId u : readers[static_cast<size_t>(id)]) {
      const Node& un = g.node(u);
      gemm = gemm && !(un.kind == Kind::Op && un.op() == OpId::Split);
    }
    return gemm;
  };
  // Likewise a lone node that is the whole dY of a dY·W^T (a RecNN's tanh gradient), so that
  // the GEMM is its panel kernel's core (lower_panels.cpp).
  auto prologue_of_gemm_grad = [&](NodeId id) {
    for (NodeId u : readers[static_cast<size_t>(id)]) {
      const Node& un = g.node(u);
      if (un.kind == Kind::Grad && un.grad_op() == GradOp::MatMulGradA && un.operands[0] == id &&
          l.cls(u) == RowClass::Rows)
        return true;
    }
    return false;
  };
  int32_t next = 0;
  auto form = [&](const std::vector<specializer::Kernel>& ks,
                  std::vector<std::vector<ElementwiseRun>>& out) {
    out.assign(ks.size(), {});
    for (size_t ki = 0; ki < ks.size(); ++ki) {
      const auto& nodes = ks[ki].nodes;
      for (size_t i = 0; i < nodes.size();) {
        if (!runnable(nodes[i])) {
          ++i;
          continue;
        }
        ElementwiseRun r;
        r.first = i;
        r.width = g.node(nodes[i]).type.dims[0];
        size_t j = i;
        for (; j < nodes.size() && runnable(nodes[j]) && g.node(nodes[j]).type.dims[0] == r.width;
             ++j) {
          // Every operand from outside the run must be a full row, a broadcast row or a scalar.
          bool ok = true;
          for (NodeId o : g.node(nodes[j]).operands) {
            if (run_of[static_cast<size_t>(o)] == next)
              continue;
            const Node& on = g.node(o);
            RowClass oc = l.cls(o);
            bool full = oc == RowClass::Rows && on.type.dims == std::vector<int64_t>{r.width};
            bool bcast = oc == RowClass::Shared &&
                         (on.type.numel() == 1 || on.type.dims == std::vector<int64_t>{r.width});
            ok = ok && on.type.dtype == DType::F32 && (full || bcast);
          }
          if (!ok)
            break;
          run_of[static_cast<size_t>(nodes[j])] = next;
        }
        r.count = j - i;
        if (r.count >= 2 ||
            (r.count == 1 && (epilogue_of_gemm(nodes[i]) || prologue_of_gemm_grad(nodes[i])))) {
          out[ki].push_back(std::move(r));
          ++next;
        } else {
          for (size_t t = i; t < j; ++t)
            run_of[static_cast<size_t>(nodes[t])] = -1;
        }
        i = std::max(j, i + 1);
      }
    }
  };
  form(tg.fwd_kernels, l.fwd_runs);
  form(tg.bwd_kernels, l.bwd_runs);
  // In-place views. Kept values (results, gradients, seeds) never become views.
  std::vector<std::vector<NodeId>> users(g.size());
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id)
    for (NodeId o : g.node(id).operands)
      users[static_cast<size_t>(o)].push_back(id);
  std::vector<bool> kept(g.size(), false);
  for (std::span<const NodeId> list :
       {g.outputs(), std::span<const NodeId>(tg.fwd_outputs), std::span<const NodeId>(tg.seeds),
        std::span<const NodeId>(tg.bwd_arg_grads), std::span<const NodeId>(tg.bwd_param_grads)})
    for (NodeId o : list)
      if (o != graph::kNoNode)
        kept[static_cast<size_t>(o)] = true;
  auto row_vector = [&](NodeId id) {
    const Node& n = g.node(id);
    return l.cls(id) == RowClass::Rows && n.type.dtype == DType::F32 && rank_of(n) == 1;
  };
  auto is_op = [&](NodeId id, OpId op) {
    const Node& n = g.node(id);
    return n.kind == Kind::Op && n.op() == op;
  };
  // A split's part of a row vector, or a slice of one (a dY·W^T product's columns per
  // child): read in place by the runs.
  auto split_view = [&](NodeId p) -> std::pair<NodeId, int64_t> {
    const bool split = is_op(p, OpId::Split), slice = is_op(p, OpId::Slice);
    if ((!split && !slice) || !row_vector(p) || !row_vector(g.node(p).operands[0]))
      return {graph::kNoNode, 0};
    const Node& n = g.node(p);
    return {n.operands[0], split ? n.output_index * n.type.dims[0] : n.attr.ints.at(0)};
  };
  // A run output read only by one concat of row vectors, whose operands all come from that
  // run, once each: written into the concat's value in place.
  std::vector<std::pair<NodeId, int64_t>> concat_of(g.size(), {graph::kNoNode, 0});
  for (NodeId c = 0; c < static_cast<NodeId>(g.size()); ++c) {
    if (!is_op(c, OpId::Concat) || !row_vector(c))
      continue;
    const auto& ops = g.node(c).operands;
    bool ok = !ops.empty() && run_of[static_cast<size_t>(ops[0])] >= 0;
    for (size_t i = 0; ok && i < ops.size(); ++i) {
      size_t o = static_cast<size_t>(ops[i]);
      ok = row_vector(ops[i]) && run_of[o] == run_of[static_cast<size_t>(ops[0])] && !kept[o] &&
           users[o].size() == 1 && std::count(ops.begin(), ops.end(), ops[i]) == 1;
    }
    int64_t off = 0;
    for (size_t i = 0; ok && i < ops.size(); ++i) {
      concat_of[static_cast<size_t>(ops[i])] = {c, off};
      off += g.node(ops[i]).type.dims[0];
    }
  }
  // Splits whose every part is read only by runs, in place: not computed once every run has
  // its kernel.
  l.skip.assign(g.size(), false);
  for (NodeId p = 0; p < static_cast<NodeId>(g.size()); ++p) {
    if (split_view(p).first == graph::kNoNode)
      continue;
    if (is_op(p, OpId::Slice)) { // likewise a slice read only by runs
      bool ok = !kept[static_cast<size_t>(p)] && !users[static_cast<size_t>(p)].empty();
      for (NodeId u : users[static_cast<size_t>(p)])
        ok = ok && run_of[static_cast<size_t>(u)] >= 0;
      l.skip[static_cast<size_t>(p)] = ok;
      continue;
    }
    bool ok = true;
    for (NodeId q : l.p.split_parts[static_cast<size_t>(p)])
      ok = ok && split_view(q).first != graph::kNoNode;
    for (NodeId q : l.p.split_parts[static_cast<size_t>(p)])
      if (ok) {
        ok = !kept[static_cast<size_t>(q)];
        for (NodeId u : users[static_cast<size_t>(q)])
          ok = ok && run_of[static_cast<size_t>(u)] >= 0;
      }
    ok = ok && !kept[static_cast<size_t>(p)];
    for (NodeId u : users[static_cast<size_t>(p)])
      ok = ok && run_of[static_cast<size_t>(u)] >= 0;
    l.skip[static_cast<size_t>(p)] = ok;
  }
  // A row-vector sum x + b, with b one row for every row (a bias), read only by such splits:
  // the runs add their columns of b themselves, and the sum is not computed either. Not a sum
  // inside a run (x = U_1 h_1 + U_2 h_2, then + b): that run computes it, and its x is no
  // run output for the readers to take.
  std::vector<std::pair<NodeId, NodeId>> bias_sum(g.size(), {graph::kNoNode, graph::kNoNode});
  for (NodeId a = 0; a < static_cast<NodeId>(g.size()); ++a) {
    if (!is_op(a, OpId::Add) || !row_vector(a) || kept[static_cast<size_t>(a)] ||
        run_of[static_cast<size_t>(a)] >= 0)
      continue;
    const Node& n = g.node(a);
    NodeId x = n.operands[0], b = n.operands[1];
    if (l.cls(x) != RowClass::Rows)
      std::swap(x, b);
    const Node& nb = g.node(b);
    bool ok = row_vector(x) && nb.kind == Kind::Input && l.cls(b) == RowClass::Shared &&
              nb.type.dtype == DType::F32 && nb.type.dims == n.type.dims &&
              !users[static_cast<size_t>(a)].empty();
    for (NodeId u : users[static_cast<size_t>(a)])
      ok = ok && l.skip[static_cast<size_t>(u)];
    if (ok) {
      bias_sum[static_cast<size_t>(a)] = {x, b};
      l.skip[static_cast<size_t>(a)] = true;
    }
  }

  // Run outputs: nodes read by a node outside their run, or graph outputs.
  std::vector<bool> outside(g.size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id)
    for (NodeId o : g.node(id).operands)
      if (run_of[static_cast<size_t>(o)] >= 0 &&
          run_of[static_cast<size_t>(o)] != run_of[static_cast<size_t>(id)])
        outside[static_cast<size_t>(o)] = true;
  for (NodeId o : g.outputs())
    outside[static_cast<size_t>(o)] = true;
  auto spec_of = [&](const specializer::Kernel& k, ElementwiseRun& r) {
    jit::KernelSpec s;
    s.width = r.width;
    std::vector<int> value(g.size(), -1);
    std::vector<NodeId> in_nodes;
    // Parts of a bias sum: (part, its columns of x, its columns of b) as input numbers.
    std::vector<std::array<int, 3>> sums;
    auto add_input = [&](NodeId o, std::pair<NodeId, int64_t> view, jit::InputShape shape) {
      in_nodes.push_back(o);
      r.in_view.push_back(view);
      s.in_strides.push_back(shape == jit::InputShape::Full && view.first != graph::kNoNode
                                 ? g.node(view.first).type.dims[0]
                                 : 0);
      s.inputs.push_back(shape);
      return static_cast<int>(in_nodes.size()) - 1;
    };
    for (size_t t = r.first; t < r.first + r.count; ++t)
      for (NodeId o : g.node(k.nodes[t]).operands) {
        if (run_of[static_cast<size_t>(o)] == run_of[static_cast<size_t>(k.nodes[r.first])] ||
            value[static_cast<size_t>(o)] != -1)
          continue;
        auto view = split_view(o);
        if (view.first != graph::kNoNode &&
            bias_sum[static_cast<size_t>(view.first)].first != graph::kNoNode) {
          auto [x, b] = bias_sum[static_cast<size_t>(view.first)];
          int xi = add_input(x, {x, view.second}, jit::InputShape::Full);
          int bi = add_input(b, {b, view.second}, jit::InputShape::RowBroadcast);
          sums.push_back({static_cast<int>(o), xi, bi});
          value[static_cast<size_t>(o)] = -2; // numbered below, after the inputs
          continue;
        }
        const Node& on = g.node(o);
        value[static_cast<size_t>(o)] =
            add_input(o, view,
                      l.cls(o) == RowClass::Rows             ? jit::InputShape::Full
                      : on.type.numel() == 1 && r.width != 1 ? jit::InputShape::Scalar
                                                             : jit::InputShape::RowBroadcast);
      }
    for (auto [o, xi, bi] : sums) { // the bias sums first, as the reference computes them
      s.ops.push_back({jit::ElementwiseOp::Add, xi, bi});
      value[static_cast<size_t>(o)] = static_cast<int>(in_nodes.size() + s.ops.size()) - 1;
    }
    for (size_t t = r.first; t < r.first + r.count; ++t) {
      const Node& n = g.node(k.nodes[t]);
      auto operand = [&](size_t i) { return value[static_cast<size_t>(n.operands[i])]; };
      auto last = [&] { return static_cast<int>(in_nodes.size() + s.ops.size()) - 1; };
      if (n.kind == Kind::SumN) { // x1 + ... + xn, left to right like the reference
        int acc = operand(0);
        for (size_t i = 1; i < n.operands.size(); ++i) {
          s.ops.push_back({jit::ElementwiseOp::Add, acc, operand(i)});
          acc = last();
        }
        value[static_cast<size_t>(k.nodes[t])] = acc;
      } else {
        s.ops.push_back({*jit_op(n), operand(0), n.operands.size() > 1 ? operand(1) : -1});
        value[static_cast<size_t>(k.nodes[t])] = last();
      }
      if (outside[static_cast<size_t>(k.nodes[t])]) {
        s.outputs.push_back(value[static_cast<size_t>(k.nodes[t])]);
        r.outputs.push_back(k.nodes[t]);
        auto view = concat_of[static_cast<size_t>(k.nodes[t])];
        r.out_view.push_back(view);
        s.out_strides.push_back(view.first == graph::kNoNode ? 0 : g.node(view.first).type.dims[0]);
      }
    }
    r.inputs = std::move(in_nodes);
    return s;
  };
  l.p.run_output.assign(g.size(), false);
  for (int pass = 0; pass < 2; ++pass) {
    const auto& ks = pass == 0 ? tg.fwd_kernels : tg.bwd_kernels;
    auto& runs = pass == 0 ? l.fwd_runs : l.bwd_runs;
    for (size_t ki = 0; ki < ks.size(); ++ki)
      for (auto& r : runs[ki]) {
        jit::KernelSpec s = spec_of(ks[ki], r);
        for (size_t j = 0; j < r.outputs.size(); ++j)
          if (r.out_view[j].first == graph::kNoNode && l.cls(r.outputs[j]) == RowClass::Rows)
            l.p.run_output[static_cast<size_t>(r.outputs[j])] = true;
        if (s.outputs.empty()) { // nothing read outside: dead, but keep the code simple
          r.outputs.push_back(ks[ki].nodes[r.first + r.count - 1]);
          r.out_view.push_back({graph::kNoNode, 0});
          s.outputs.push_back(static_cast<int>(r.inputs.size() + s.ops.size() - 1));
          s.out_strides.push_back(0);
        }
        r.spec = std::move(s);
      }
  }
  find_cores(l, users, kept);
}

} // namespace pejit::specializer::passes::lowering
