// GraphRunner's elementwise runs: finding the maximal runs of elementwise nodes in a template
// graph's kernels, their JIT kernel specs, the in-place views (a split's parts read as column
// blocks of its operand, a bias sum added inside the run, a concat's parts written into it),
// compiling them through the kernel cache, and binding run outputs to the caller's blocks.
// Launching them is GraphRunner::run_kernel (graph_runner.cpp).
#include "runtime/graph_runs.h"

#include <algorithm>
#include <array>

namespace pejit::runtime {

using graph::Kind;
using graph::Node;
using graph::NodeId;
using ops::GradOp;
using ops::OpId;

namespace detail {

size_t rank_of(const Node& n) {
  return n.type.dims.size();
}

std::optional<jit::ElementwiseOp> jit_op(const Node& n) {
  if (n.kind == Kind::Op)
    return jit::elementwise_op(n.op());
  if (n.kind == Kind::SumN)
    return jit::ElementwiseOp::Add; // a chain of adds
  if (n.kind == Kind::Grad)
    return jit::elementwise_op(n.grad_op());
  return std::nullopt;
}

} // namespace detail

using detail::jit_op;
using detail::rank_of;

void GraphRunner::compile(jit::KernelCache& cache, bool inject_failure) {
  for (auto* runs : {&fwd_runs_, &bwd_runs_})
    for (auto& k : *runs)
      for (auto& r : k) {
        jit::KernelSpec s = r.spec;
        s.inject_invalid_ir = inject_failure;
        r.kernel = cache.get(s);
      }
  for (auto& r : reductions_)
    r.kernel = cache.get_reduce(r.spec);
  for (auto& w : weight_grads_)
    w.kernel = cache.get_gemm(w.spec);
}

bool GraphRunner::compiled() const {
  for (const auto* runs : {&fwd_runs_, &bwd_runs_})
    for (const auto& k : *runs)
      for (const auto& r : k)
        if (!r.kernel)
          return false;
  for (const auto& r : reductions_)
    if (!r.kernel)
      return false;
  for (const auto& w : weight_grads_)
    if (!w.kernel)
      return false;
  return true;
}

std::vector<GraphRunner::KernelRun> GraphRunner::jit_runs() const {
  std::vector<KernelRun> out;
  for (int pass = 0; pass < 2; ++pass) {
    const auto& runs = pass == 0 ? fwd_runs_ : bwd_runs_;
    for (size_t ki = 0; ki < runs.size(); ++ki)
      for (const auto& r : runs[ki])
        out.push_back({pass == 0, ki, r.spec, r.kernel ? r.kernel->schedule : std::string(),
                       r.kernel ? r.kernel->schedule_source : std::string()});
  }
  return out;
}

void GraphRunner::plan_runs() {
  const graph::Graph& g = tg_.g;
  auto runnable = [&](NodeId id) {
    const Node& n = g.node(id);
    return cls_[static_cast<size_t>(id)] == RowClass::Rows && n.type.dtype == DType::F32 &&
           rank_of(n) == 1 && jit_op(n).has_value();
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
      gemm = gemm || (on.kind == Kind::Op && on.op() == OpId::MatMul &&
                      cls_[static_cast<size_t>(o)] == RowClass::Rows);
    }
    for (NodeId u : readers[static_cast<size_t>(id)]) {
      const Node& un = g.node(u);
      gemm = gemm && !(un.kind == Kind::Op && un.op() == OpId::Split);
    }
    return gemm;
  };
  int32_t next = 0;
  auto form = [&](const std::vector<specializer::Kernel>& ks, std::vector<std::vector<Run>>& out) {
    out.assign(ks.size(), {});
    for (size_t ki = 0; ki < ks.size(); ++ki) {
      const auto& nodes = ks[ki].nodes;
      for (size_t i = 0; i < nodes.size();) {
        if (!runnable(nodes[i])) {
          ++i;
          continue;
        }
        Run r;
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
            RowClass oc = cls_[static_cast<size_t>(o)];
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
        if (r.count >= 2 || (r.count == 1 && epilogue_of_gemm(nodes[i]))) {
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
  form(tg_.fwd_kernels, fwd_runs_);
  form(tg_.bwd_kernels, bwd_runs_);
  // In-place views. Kept values (results, gradients, seeds) never become views.
  std::vector<std::vector<NodeId>> users(g.size());
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id)
    for (NodeId o : g.node(id).operands)
      users[static_cast<size_t>(o)].push_back(id);
  std::vector<bool> kept(g.size(), false);
  for (std::span<const NodeId> list :
       {g.outputs(), std::span<const NodeId>(tg_.fwd_outputs), std::span<const NodeId>(tg_.seeds),
        std::span<const NodeId>(tg_.bwd_arg_grads), std::span<const NodeId>(tg_.bwd_param_grads)})
    for (NodeId o : list)
      if (o != graph::kNoNode)
        kept[static_cast<size_t>(o)] = true;
  auto row_vector = [&](NodeId id) {
    const Node& n = g.node(id);
    return cls_[static_cast<size_t>(id)] == RowClass::Rows && n.type.dtype == DType::F32 &&
           rank_of(n) == 1;
  };
  auto is_op = [&](NodeId id, OpId op) {
    const Node& n = g.node(id);
    return n.kind == Kind::Op && n.op() == op;
  };
  // A split's part of a row vector: read in place by the runs.
  auto split_view = [&](NodeId p) -> std::pair<NodeId, int64_t> {
    if (!is_op(p, OpId::Split) || !row_vector(p) || !row_vector(g.node(p).operands[0]))
      return {graph::kNoNode, 0};
    const Node& n = g.node(p);
    return {n.operands[0], n.output_index * n.type.dims[0]};
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
  skip_.assign(g.size(), false);
  for (NodeId p = 0; p < static_cast<NodeId>(g.size()); ++p) {
    if (split_view(p).first == graph::kNoNode)
      continue;
    bool ok = true;
    for (NodeId q : split_parts_[static_cast<size_t>(p)])
      ok = ok && split_view(q).first != graph::kNoNode;
    for (NodeId q : split_parts_[static_cast<size_t>(p)])
      if (ok) {
        ok = !kept[static_cast<size_t>(q)];
        for (NodeId u : users[static_cast<size_t>(q)])
          ok = ok && run_of[static_cast<size_t>(u)] >= 0;
      }
    ok = ok && !kept[static_cast<size_t>(p)];
    for (NodeId u : users[static_cast<size_t>(p)])
      ok = ok && run_of[static_cast<size_t>(u)] >= 0;
    skip_[static_cast<size_t>(p)] = ok;
  }
  // A row-vector sum x + b, with b one row for every row (a bias), read only by such splits:
  // the runs add their columns of b themselves, and the sum is not computed either.
  std::vector<std::pair<NodeId, NodeId>> bias_sum(g.size(), {graph::kNoNode, graph::kNoNode});
  for (NodeId a = 0; a < static_cast<NodeId>(g.size()); ++a) {
    if (!is_op(a, OpId::Add) || !row_vector(a) || kept[static_cast<size_t>(a)])
      continue;
    const Node& n = g.node(a);
    NodeId x = n.operands[0], b = n.operands[1];
    if (cls_[static_cast<size_t>(x)] != RowClass::Rows)
      std::swap(x, b);
    const Node& nb = g.node(b);
    bool ok = row_vector(x) && nb.kind == Kind::Input &&
              cls_[static_cast<size_t>(b)] == RowClass::Shared && nb.type.dtype == DType::F32 &&
              nb.type.dims == n.type.dims && !users[static_cast<size_t>(a)].empty();
    for (NodeId u : users[static_cast<size_t>(a)])
      ok = ok && skip_[static_cast<size_t>(u)];
    if (ok) {
      bias_sum[static_cast<size_t>(a)] = {x, b};
      skip_[static_cast<size_t>(a)] = true;
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
  auto spec_of = [&](const specializer::Kernel& k, Run& r) {
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
                      cls_[static_cast<size_t>(o)] == RowClass::Rows ? jit::InputShape::Full
                      : on.type.numel() == 1 && r.width != 1         ? jit::InputShape::Scalar
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
  run_output_.assign(g.size(), false);
  for (int pass = 0; pass < 2; ++pass) {
    const auto& ks = pass == 0 ? tg_.fwd_kernels : tg_.bwd_kernels;
    auto& runs = pass == 0 ? fwd_runs_ : bwd_runs_;
    for (size_t ki = 0; ki < ks.size(); ++ki)
      for (auto& r : runs[ki]) {
        jit::KernelSpec s = spec_of(ks[ki], r);
        for (size_t j = 0; j < r.outputs.size(); ++j)
          if (r.out_view[j].first == graph::kNoNode &&
              cls_[static_cast<size_t>(r.outputs[j])] == RowClass::Rows)
            run_output_[static_cast<size_t>(r.outputs[j])] = true;
        if (s.outputs.empty()) { // nothing read outside: dead, but keep the code simple
          r.outputs.push_back(ks[ki].nodes[r.first + r.count - 1]);
          r.out_view.push_back({graph::kNoNode, 0});
          s.outputs.push_back(static_cast<int>(r.inputs.size() + s.ops.size() - 1));
          s.out_strides.push_back(0);
        }
        r.spec = std::move(s);
      }
  }
  find_cores(users, kept);
}

void GraphRunner::bind(std::span<const NodeId> nodes, std::span<Tensor> dest, State& st) const {
  if (!st.views)
    return; // a run that has no kernel yet computes its nodes on reference kernels
  for (size_t k = 0; k < nodes.size() && k < dest.size(); ++k) {
    NodeId o = nodes[k];
    if (o == graph::kNoNode || !run_output_[static_cast<size_t>(o)] || !dest[k].defined() ||
        st.vals[static_cast<size_t>(o)].defined() ||
        dest[k].numel() != st.rows * tg_.g.node(o).type.numel())
      continue;
    st.vals[static_cast<size_t>(o)] = dest[k];
  }
}

} // namespace pejit::runtime
