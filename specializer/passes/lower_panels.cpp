// The lowering's panel kernels: which elementwise runs get a GEMM core (the x·W a gate
// epilogue reads, the dY·W^T a gate-gradient chain feeds), and the rows a core gathers itself
// (a concat of row vectors, arguments the caller may leave ungathered). Launching them is the
// executor's (runtime/graph_panels.cpp); the generated side is jit/elementwise_codegen.cpp.
#include "specializer/passes/lower_internal.h"

#include <algorithm>

namespace pejit::specializer::passes::lowering {

using graph::Kind;
using graph::Node;
using graph::NodeId;
using ops::GradOp;
using ops::OpId;

void find_cores(Lowering& l, const std::vector<std::vector<NodeId>>& users,
                const std::vector<bool>& kept) {
  const graph::Graph& g = l.g;
  const TemplateGraph& tg = l.tg;
  // Rows of a panel: a multiple of the GEMM kernels' 12-row blocks; 48 rows of a 750-wide
  // product and the epilogue's outputs stay in L2 between the GEMM and the chain (other
  // heights and whole levels measured in training: bench/RESULTS.md).
  constexpr int64_t kPanelRows = 48;
  l.fused.assign(g.size(), false);
  l.p.lazy_args.clear();
  auto row_vector = [&](NodeId id) {
    const Node& n = g.node(id);
    return l.cls(id) == RowClass::Rows && n.type.dtype == DType::F32 && rank_of(n) == 1;
  };
  auto weight = [&](NodeId w, int64_t rows, int64_t cols) {
    const Node& n = g.node(w);
    return l.cls(w) == RowClass::Shared && n.type.dtype == DType::F32 &&
           n.type.dims == std::vector<int64_t>{rows, cols};
  };
  auto position = [](const specializer::Kernel& k, NodeId id) {
    return static_cast<size_t>(std::find(k.nodes.begin(), k.nodes.end(), id) - k.nodes.begin());
  };
  // Forward: the x·W that the run reads (through a split's view, a bias sum or directly),
  // with nothing computed between the GEMM and the run but what the views skip.
  for (size_t ki = 0; ki < l.fwd_runs.size(); ++ki)
    for (ElementwiseRun& r : l.fwd_runs[ki]) {
      NodeId m = graph::kNoNode;
      bool unique = true;
      for (size_t i = 0; i < r.inputs.size(); ++i) {
        NodeId src = r.in_view[i].first != graph::kNoNode ? r.in_view[i].first : r.inputs[i];
        const Node& n = g.node(src);
        if (r.spec.inputs[i] != jit::InputShape::Full || n.kind != Kind::Op ||
            n.op() != OpId::MatMul)
          continue;
        unique = unique && (m == graph::kNoNode || m == src);
        m = src;
      }
      if (m == graph::kNoNode || !unique)
        continue;
      const Node& mn = g.node(m);
      const specializer::Kernel& k = tg.fwd_kernels[ki];
      size_t pm = position(k, m);
      bool ok = row_vector(m) && row_vector(mn.operands[0]) &&
                !l.deferrable[static_cast<size_t>(m)] &&
                weight(mn.operands[1], g.node(mn.operands[0]).type.dims[0], mn.type.dims[0]) &&
                pm < r.first;
      for (size_t t = pm + 1; ok && t < r.first; ++t)
        ok = l.skip[static_cast<size_t>(k.nodes[t])];
      if (!ok)
        continue;
      r.core = m;
      r.spec.panel_rows = kPanelRows;
      r.spec.core_first = true;
      r.spec.gemm_n = mn.type.dims[0];
      r.spec.gemm_k = g.node(mn.operands[0]).type.dims[0];
      l.fused[static_cast<size_t>(m)] = true;
      // x = concat(h_l, h_r) made just before the GEMM: the core assembles each panel's rows of
      // x right before multiplying them (x is still kept whole: the weight gradient reads it).
      NodeId x = mn.operands[0];
      const Node& xn = g.node(x);
      bool gather = xn.kind == Kind::Op && xn.op() == OpId::Concat && pm > 0 &&
                    k.nodes[pm - 1] == x && !xn.operands.empty() &&
                    xn.operands.size() <= kMaxGatherParts;
      for (NodeId o : xn.operands)
        gather = gather && row_vector(o);
      for (const auto* all : {&l.fwd_runs, &l.bwd_runs}) // not a concat some run writes
        for (const auto& runs : *all)
          for (const ElementwiseRun& o : runs)
            for (auto [dst, off] : o.out_view)
              gather = gather && dst != x;
      auto mark_lazy = [&](NodeId o) {
        size_t a = static_cast<size_t>(tg.slots[g.node(o).slot].index);
        if (l.p.lazy_args.size() <= a)
          l.p.lazy_args.resize(a + 1, false);
        l.p.lazy_args[a] = true;
      };
      auto is_arg = [&](NodeId o) {
        const Node& on = g.node(o);
        return on.kind == Kind::Input &&
               tg.slots[on.slot].role == specializer::InputSlot::Role::Arg &&
               !kept[static_cast<size_t>(o)];
      };
      if (gather) {
        r.gather = x;
        for (NodeId o : xn.operands)
          r.spec.gather_widths.push_back(g.node(o).type.dims[0]);
        l.fused[static_cast<size_t>(x)] = true;
        // A part that is an argument read by nothing else can stay ungathered by the caller.
        for (NodeId o : xn.operands)
          if (is_arg(o) && users[static_cast<size_t>(o)].size() == 1)
            mark_lazy(o);
      } else if (is_arg(x) && row_vector(x)) {
        // x is an argument (a leaf's embedding rows): the core gathers each panel's rows into
        // x's block just before multiplying them, if nothing in the forward pass reads x
        // before the run (the backward pass, after it, finds the block filled).
        bool only_m = true;
        for (const auto& fk : tg.fwd_kernels)
          for (NodeId u : fk.nodes)
            for (NodeId o : g.node(u).operands)
              only_m = only_m && (o != x || u == m);
        if (only_m) {
          r.gather = x;
          r.spec.gather_widths = {xn.type.dims[0]};
          mark_lazy(x);
        }
      }
      // The run's other per-row inputs that are arguments read in the forward pass by this
      // run alone (a cell's c_l, c_r): the core gathers each panel's rows into their blocks
      // too, before the chain reads them (the backward pass finds the blocks filled).
      for (size_t i = 0; i < r.inputs.size(); ++i) {
        NodeId o = r.inputs[i];
        if (r.spec.inputs[i] != jit::InputShape::Full || r.in_view[i].first != graph::kNoNode ||
            !is_arg(o) || !row_vector(o) || o == x ||
            std::find(r.fills.begin(), r.fills.end(), o) != r.fills.end())
          continue;
        bool only_run = true;
        for (const auto& fk : tg.fwd_kernels)
          for (NodeId u : fk.nodes)
            for (NodeId p : g.node(u).operands)
              only_run =
                  only_run &&
                  (p != o ||
                   std::find(k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first),
                             k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first + r.count), u) !=
                       k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first + r.count));
        if (only_run && r.fills.size() < kMaxGatherParts) {
          r.fills.push_back(o);
          r.spec.fill_inputs.push_back(static_cast<int>(i));
          mark_lazy(o);
        }
      }
      // Nothing but this run reads the product (through its bias sum and split views, which
      // are not computed): the GEMM writes each panel into scratch, never the whole product.
      auto reads_m = [&](const ElementwiseRun& o) {
        for (size_t i = 0; i < o.inputs.size(); ++i)
          if (o.inputs[i] == m || o.in_view[i].first == m)
            return true;
        return false;
      };
      bool dead = !kept[static_cast<size_t>(m)];
      for (NodeId u : users[static_cast<size_t>(m)])
        dead = dead &&
               (l.skip[static_cast<size_t>(u)] ||
                std::find(k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first),
                          k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first + r.count),
                          u) != k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first + r.count));
      for (const auto* all : {&l.fwd_runs, &l.bwd_runs})
        for (const auto& runs : *all)
          for (const ElementwiseRun& o : runs)
            dead = dead && (&o == &r || !reads_m(o));
      if (dead) {
        r.spec.in_panel.assign(r.inputs.size(), false);
        for (size_t i = 0; i < r.inputs.size(); ++i)
          r.spec.in_panel[i] = r.inputs[i] == m || r.in_view[i].first == m;
      }
    }
  // Backward: the dY·W^T (MatMulGradA) whose dY is a concat that the run writes, or one of
  // its outputs, met next (in this kernel or at the start of a later one) with only such
  // concats and deferred weight gradients (run after the whole backward) between.
  for (size_t ki = 0; ki < l.bwd_runs.size(); ++ki)
    for (ElementwiseRun& r : l.bwd_runs[ki]) {
      std::vector<NodeId> made; // the concats the run writes in place, and its outputs
      for (size_t j = 0; j < r.outputs.size(); ++j) {
        NodeId dst = r.out_view[j].first != graph::kNoNode ? r.out_view[j].first : r.outputs[j];
        if (std::find(made.begin(), made.end(), dst) == made.end())
          made.push_back(dst);
      }
      NodeId q = graph::kNoNode;
      bool unique = true;
      for (NodeId d : made)
        for (NodeId u : users[static_cast<size_t>(d)]) {
          const Node& un = g.node(u);
          if (un.kind == Kind::Grad && un.grad_op() == GradOp::MatMulGradA && un.operands[0] == d) {
            unique = unique && q == graph::kNoNode;
            q = u;
          }
        }
      if (q == graph::kNoNode || !unique)
        continue;
      const Node& qn = g.node(q);
      NodeId d = qn.operands[0];
      if (!row_vector(q) || !row_vector(d) || qn.operands.size() < 3 ||
          !weight(qn.operands[2], qn.type.dims[0], g.node(d).type.dims[0]) ||
          l.deferrable[static_cast<size_t>(q)])
        continue;
      bool reached = false, ok = true;
      size_t t = r.first + r.count;
      for (size_t kk = ki; kk < tg.bwd_kernels.size() && ok && !reached; ++kk, t = 0) {
        const auto& nodes = tg.bwd_kernels[kk].nodes;
        for (; t < nodes.size(); ++t) {
          if (nodes[t] == q) {
            reached = true;
            break;
          }
          if (std::find(made.begin(), made.end(), nodes[t]) == made.end() &&
              !l.deferrable[static_cast<size_t>(nodes[t])]) {
            ok = false;
            break;
          }
        }
      }
      if (!reached || !ok)
        continue;
      r.core = q;
      r.spec.panel_rows = kPanelRows;
      r.spec.core_first = false;
      r.spec.gemm_n = qn.type.dims[0];
      r.spec.gemm_k = g.node(d).type.dims[0];
    }
}

} // namespace pejit::specializer::passes::lowering
