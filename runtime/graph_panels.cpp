// GraphRunner's panel kernels: which runs get a GEMM core (find_cores: the x·W a gate
// epilogue reads, the dY·W^T a gate-gradient chain feeds, the rows a core gathers itself) and
// launching a run with its core (launch: the C++ side of jit::PanelCore, the packed weights,
// the scratch, the arguments the caller left ungathered). The generated side is
// jit/elementwise_codegen.cpp; the design note is in graph_runner.h ("Panels").
#include "runtime/graph_runs.h"

#include "src/kernels/kernels.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace pejit::runtime {

using graph::Kind;
using graph::Node;
using graph::NodeId;
using ops::GradOp;
using ops::OpId;

using detail::rank_of;
using detail::with_rows;

void GraphRunner::find_cores(const std::vector<std::vector<NodeId>>& users,
                             const std::vector<bool>& kept) {
  const graph::Graph& g = tg_.g;
  // Rows of a panel: a multiple of the GEMM kernels' 12-row blocks; 48 rows of a 750-wide
  // product (144 KB) and the epilogue's outputs stay in L2 between the GEMM and the chain.
  // (Other panel heights and whole levels train at the same speed; bench/RESULTS.md.)
  constexpr int64_t kPanelRows = 48;
  fused_.assign(g.size(), false);
  lazy_arg_.clear();
  auto row_vector = [&](NodeId id) {
    const Node& n = g.node(id);
    return cls_[static_cast<size_t>(id)] == RowClass::Rows && n.type.dtype == DType::F32 &&
           rank_of(n) == 1;
  };
  auto weight = [&](NodeId w, int64_t rows, int64_t cols) {
    const Node& n = g.node(w);
    return cls_[static_cast<size_t>(w)] == RowClass::Shared && n.type.dtype == DType::F32 &&
           n.type.dims == std::vector<int64_t>{rows, cols};
  };
  auto position = [](const specializer::Kernel& k, NodeId id) {
    return static_cast<size_t>(std::find(k.nodes.begin(), k.nodes.end(), id) - k.nodes.begin());
  };
  // Forward: the x·W that the run reads (through a split's view, a bias sum or directly),
  // with nothing computed between the GEMM and the run but what the views skip.
  for (size_t ki = 0; ki < fwd_runs_.size(); ++ki)
    for (Run& r : fwd_runs_[ki]) {
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
      const specializer::Kernel& k = tg_.fwd_kernels[ki];
      size_t pm = position(k, m);
      bool ok = row_vector(m) && row_vector(mn.operands[0]) &&
                !deferrable_[static_cast<size_t>(m)] &&
                weight(mn.operands[1], g.node(mn.operands[0]).type.dims[0], mn.type.dims[0]) &&
                pm < r.first;
      for (size_t t = pm + 1; ok && t < r.first; ++t)
        ok = skip_[static_cast<size_t>(k.nodes[t])];
      if (!ok)
        continue;
      r.core = m;
      r.spec.panel_rows = kPanelRows;
      r.spec.core_first = true;
      r.spec.gemm_n = mn.type.dims[0];
      r.spec.gemm_k = g.node(mn.operands[0]).type.dims[0];
      fused_[static_cast<size_t>(m)] = true;
      // x = concat(h_l, h_r) made just before the GEMM: the core assembles each panel's rows of
      // x right before multiplying them (x is still kept whole: the weight gradient reads it).
      NodeId x = mn.operands[0];
      const Node& xn = g.node(x);
      bool gather = xn.kind == Kind::Op && xn.op() == OpId::Concat && pm > 0 &&
                    k.nodes[pm - 1] == x && !xn.operands.empty() &&
                    xn.operands.size() <= detail::kMaxGatherParts;
      for (NodeId o : xn.operands)
        gather = gather && row_vector(o);
      for (const auto* all : {&fwd_runs_, &bwd_runs_}) // not a concat some run writes
        for (const auto& runs : *all)
          for (const Run& o : runs)
            for (auto [dst, off] : o.out_view)
              gather = gather && dst != x;
      auto mark_lazy = [&](NodeId o) {
        size_t a = static_cast<size_t>(tg_.slots[g.node(o).slot].index);
        if (lazy_arg_.size() <= a)
          lazy_arg_.resize(a + 1, false);
        lazy_arg_[a] = true;
      };
      auto is_arg = [&](NodeId o) {
        const Node& on = g.node(o);
        return on.kind == Kind::Input && tg_.slots[on.slot].role == specializer::InputSlot::Role::Arg &&
               !kept[static_cast<size_t>(o)];
      };
      if (gather) {
        r.gather = x;
        for (NodeId o : xn.operands)
          r.spec.gather_widths.push_back(g.node(o).type.dims[0]);
        fused_[static_cast<size_t>(x)] = true;
        // A part that is an argument read by nothing else can stay ungathered by the caller.
        for (NodeId o : xn.operands)
          if (is_arg(o) && users[static_cast<size_t>(o)].size() == 1)
            mark_lazy(o);
      } else if (is_arg(x) && row_vector(x)) {
        // x is an argument (a leaf's embedding rows): the core gathers each panel's rows into
        // x's block just before multiplying them, if nothing in the forward pass reads x
        // before the run (the backward pass, after it, finds the block filled).
        bool only_m = true;
        for (const auto& fk : tg_.fwd_kernels)
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
        for (const auto& fk : tg_.fwd_kernels)
          for (NodeId u : fk.nodes)
            for (NodeId p : g.node(u).operands)
              only_run =
                  only_run &&
                  (p != o ||
                   std::find(k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first),
                             k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first + r.count), u) !=
                       k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first + r.count));
        if (only_run && r.fills.size() < detail::kMaxGatherParts) {
          r.fills.push_back(o);
          r.spec.fill_inputs.push_back(static_cast<int>(i));
          mark_lazy(o);
        }
      }
      // Nothing but this run reads the product (through its bias sum and split views, which
      // are not computed): the GEMM writes each panel into scratch, never the whole product.
      auto reads_m = [&](const Run& o) {
        for (size_t i = 0; i < o.inputs.size(); ++i)
          if (o.inputs[i] == m || o.in_view[i].first == m)
            return true;
        return false;
      };
      bool dead = !kept[static_cast<size_t>(m)];
      for (NodeId u : users[static_cast<size_t>(m)])
        dead = dead &&
               (skip_[static_cast<size_t>(u)] ||
                std::find(k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first),
                          k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first + r.count),
                          u) != k.nodes.begin() + static_cast<std::ptrdiff_t>(r.first + r.count));
      for (const auto* all : {&fwd_runs_, &bwd_runs_})
        for (const auto& runs : *all)
          for (const Run& o : runs)
            dead = dead && (&o == &r || !reads_m(o));
      if (dead) {
        r.spec.in_panel.assign(r.inputs.size(), false);
        for (size_t i = 0; i < r.inputs.size(); ++i)
          r.spec.in_panel[i] = r.inputs[i] == m || r.in_view[i].first == m;
      }
    }
  // Backward: the dY·W^T (MatMulGradA) whose dY is a concat that the run writes, met next
  // (in this kernel or at the start of the next) with only such concats between.
  for (size_t ki = 0; ki < bwd_runs_.size(); ++ki)
    for (Run& r : bwd_runs_[ki]) {
      std::vector<NodeId> made; // the concats the run writes in place
      for (auto [dst, off] : r.out_view)
        if (dst != graph::kNoNode && std::find(made.begin(), made.end(), dst) == made.end())
          made.push_back(dst);
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
          deferrable_[static_cast<size_t>(q)])
        continue;
      bool reached = false, ok = true;
      size_t t = r.first + r.count;
      for (size_t kk = ki; kk < tg_.bwd_kernels.size() && kk <= ki + 1 && ok && !reached;
           ++kk, t = 0) {
        const auto& nodes = tg_.bwd_kernels[kk].nodes;
        for (; t < nodes.size(); ++t) {
          if (nodes[t] == q) {
            reached = true;
            break;
          }
          if (std::find(made.begin(), made.end(), nodes[t]) == made.end()) {
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

namespace {

// The C++ side of a panel kernel's core (jit::PanelCore): the generated code gathers the rows
// and computes the product's rows; `run` computes them instead when the generated core is not
// used (ExecOptions::jit_gemm off: C++ GEMM kernels, for comparison), `copy` takes them from a
// product computed whole before.
struct GemmPanel : jit::PanelCore {
  // The product's operands are PanelCore's gemm_a, gemm_c and gemm_c_step (dense: A's rows k
  // apart, C's n); gemm_b is set to `packed` only for a kernel whose generated core runs.
  const float* packed = nullptr;
  int64_t n = 0, k = 0;
  const float* whole = nullptr; ///< copy: the product, already computed, [rows, n]

  static void run(const jit::PanelCore* core, int64_t r0, int64_t rows) {
    const auto& g = *static_cast<const GemmPanel*>(core);
    if (g.gemm_b == nullptr) // else the kernel's generated core computes the rows next
      kernels::sgemm_packed(rows, g.n, g.k, g.gemm_a + r0 * g.k, g.k, g.packed, 0.0f,
                            g.gemm_c + r0 * g.gemm_c_step, g.n);
  }
  // The product computed whole before (panels off, or no views): its panel rows into scratch.
  static void copy(const jit::PanelCore* core, int64_t r0, int64_t rows) {
    const auto& g = *static_cast<const GemmPanel*>(core);
    std::memcpy(g.gemm_c, g.whole + r0 * g.n, static_cast<size_t>(rows * g.n) * sizeof(float));
  }
  static void none(const jit::PanelCore*, int64_t, int64_t) {}
};

// B = w (forward x·W, w [k,n]) or w^T (dX = dY·W^T, w [n,k]) packed once per plan run, kept
// in `cache` under w's address + 2 or + 1 bytes (the key matmul_packed_wt uses for W^T);
// without a cache, into `local`.
const float* packed_weight(const Tensor& w, bool transposed,
                           std::unordered_map<const void*, Tensor>* cache, Tensor& local) {
  const int64_t k = transposed ? w.dim(1) : w.dim(0), n = transposed ? w.dim(0) : w.dim(1);
  Tensor& p =
      cache != nullptr ? (*cache)[static_cast<const char*>(w.raw()) + (transposed ? 1 : 2)] : local;
  if (!p.defined()) {
    p = Tensor::empty(DType::F32, Shape{kernels::packed_size(k, n)});
    kernels::pack_b(transposed, k, n, w.f32(), transposed ? k : n, p.f32());
  }
  return p.f32();
}

} // namespace

const std::vector<const float*>* GraphRunner::arg_rows(NodeId id, const State& st) const {
  const Node& n = tg_.g.node(id);
  if (n.kind != Kind::Input || tg_.slots[n.slot].role != specializer::InputSlot::Role::Arg)
    return nullptr;
  size_t a = static_cast<size_t>(tg_.slots[n.slot].index);
  return a < st.arg_rows.size() && !st.arg_rows[a].empty() ? &st.arg_rows[a] : nullptr;
}

void GraphRunner::fill_arg(NodeId id, State& st) const {
  const std::vector<const float*>* rows = arg_rows(id, st);
  if (rows == nullptr)
    return;
  Tensor& v = st.vals[static_cast<size_t>(id)];
  const int64_t width = st.rows > 0 ? v.numel() / st.rows : 0;
  for (size_t i = 0; i < rows->size(); ++i)
    std::memcpy(v.f32() + static_cast<int64_t>(i) * width, (*rows)[i],
                static_cast<size_t>(width) * sizeof(float));
  st.arg_rows[static_cast<size_t>(tg_.slots[tg_.g.node(id).slot].index)].clear();
}

void GraphRunner::launch(const Run& r, std::vector<float*>& ins, std::vector<float*>& outs,
                         State& st, GraphRunStats& stats) const {
  using Clock = ProfileClock;
  const graph::Graph& g = tg_.g;
  auto val = [&](NodeId id) -> Tensor& { return st.vals[static_cast<size_t>(id)]; };
  // The run's GEMM core, if it has one and its product is not computed yet (panels off, or
  // the views not taken: then a core that does nothing, or copies a scratch's rows).
  GemmPanel core;
  core.fn = &GemmPanel::none;
  Tensor local;
  auto dense = [&](const Tensor& t, int64_t cols) {
    return t.defined() && t.dtype() == DType::F32 && t.rank() == 2 && t.dim(0) == st.rows &&
           t.dim(1) == cols;
  };
  auto set_core = [&](const Tensor& a, const Tensor& w, bool transposed, Tensor& c) {
    core.fn = &GemmPanel::run;
    core.gemm_a = a.f32();
    core.packed = packed_weight(w, transposed, st.transposed, local);
    core.gemm_c = c.f32();
    core.n = c.dim(1);
    core.k = a.dim(1);
    core.gemm_c_step = core.n;
  };
  // Forward: C = x·W, into a scratch of one panel's rows when only this run reads C.
  Tensor scratch;
  std::vector<const float*>* x_arg_gathered = nullptr; ///< x's rows, gathered by the core
  std::array<std::vector<const float*>*, detail::kMaxGatherParts> filled{}; ///< the chain's
  if (r.core != graph::kNoNode && r.spec.core_first) {
    const Node& m = g.node(r.core);
    const NodeId xid = m.operands[0];
    const Tensor& w = val(m.operands[1]);
    const int64_t n = m.type.dims[0];
    const bool to_scratch = !r.spec.in_panel.empty();
    if (to_scratch)
      scratch = Tensor::empty(DType::F32, Shape{std::min(st.rows, r.spec.panel_rows), n});
    const bool weight_ok = w.rank() == 2 && w.dim(1) == n;
    // x's concat was skipped (panels on): the core assembles it, if its parts are plain rows.
    // Or x is an argument whose rows the caller left where they are: the core gathers them.
    const bool x_is_arg = r.gather == xid && g.node(xid).kind == Kind::Input;
    bool gather = r.gather != graph::kNoNode && !val(r.core).defined() && weight_ok &&
                  (x_is_arg ? arg_rows(xid, st) != nullptr && dense(val(xid), w.dim(0))
                            : !val(xid).defined());
    if (x_is_arg && !gather)
      fill_arg(xid, st);
    if (gather && !x_is_arg) {
      const Node& xn = g.node(xid);
      int64_t cols = 0;
      for (NodeId o : xn.operands) {
        const int64_t pw = g.node(o).type.dims[0];
        gather = gather && dense(val(o), pw);
        cols += pw;
      }
      gather = gather && cols == w.dim(0);
    }
    if (!gather && !val(xid).defined()) {
      for (NodeId o : g.node(xid).operands)
        fill_arg(o, st);
      val(xid) = eval(xid, st);
    }
    if (gather && !x_is_arg)
      val(xid) = Tensor::empty(DType::F32, Shape{st.rows, w.dim(0)});
    const Tensor& a = val(xid);
    if (!val(r.core).defined() && weight_ok && dense(a, w.dim(0))) {
      Tensor& c =
          to_scratch ? scratch : (val(r.core) = Tensor::empty(DType::F32, Shape{st.rows, n}));
      set_core(a, w, false, c);
      if (to_scratch) // one panel's rows
        core.gemm_c_step = 0;
      // The kernel assembles x's rows per panel (its spec's gather_widths, set with r.gather).
      if (gather && x_is_arg) {
        core.gather_dst = val(xid).f32();
        x_arg_gathered = const_cast<std::vector<const float*>*>(arg_rows(xid, st));
        core.part_rows[0] = x_arg_gathered->data();
      } else if (gather) {
        core.gather_dst = val(xid).f32();
        size_t i = 0;
        for (NodeId o : g.node(xid).operands) {
          const std::vector<const float*>* rows = arg_rows(o, st);
          core.part_src[i] = val(o).f32();
          core.part_rows[i++] = rows != nullptr ? rows->data() : nullptr;
        }
      }
    } else {
      if (!val(r.core).defined())
        val(r.core) = eval(r.core, st);
      if (to_scratch) {
        core.fn = &GemmPanel::copy;
        core.whole = val(r.core).f32();
        core.gemm_c = scratch.f32();
        core.n = n;
      }
    }
  }
  // The chain's ungathered argument rows: filled per panel by a kernel whose core runs (its
  // spec's fill_inputs, in r.fills' order), else now.
  for (size_t j = 0; j < r.fills.size(); ++j) {
    const NodeId o = r.fills[j];
    std::vector<const float*>* rows = const_cast<std::vector<const float*>*>(arg_rows(o, st));
    if (rows == nullptr)
      continue;
    if (core.fn == &GemmPanel::run && val(o).numel() == st.rows * g.node(o).type.dims[0]) {
      filled[j] = rows;
      core.fill_rows[j] = rows->data();
    } else {
      fill_arg(o, st);
    }
  }
  ins.clear();
  outs.clear();
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    auto [src, off] = r.in_view[i];
    ins.push_back(r.spec.panel_input(i)   ? scratch.f32() + off
                  : src == graph::kNoNode ? val(r.inputs[i]).f32()
                                          : val(src).f32() + off);
  }
  for (size_t j = 0; j < r.outputs.size(); ++j) {
    auto [dst, off] = r.out_view[j];
    if (dst != graph::kNoNode) { // a concat's columns, the concat made here
      Tensor& c = val(dst);
      if (!c.defined()) {
        c = Tensor::empty(DType::F32, with_rows(st.rows, g.node(dst).type.dims));
        stats.in_place++;
      }
      outs.push_back(c.f32() + off);
      continue;
    }
    Tensor& v = val(r.outputs[j]);
    if (!v.defined() || v.numel() != st.rows * r.width)
      v = Tensor::empty(DType::F32, Shape{st.rows, r.width});
    else
      stats.in_place++; // the caller's block (bind)
    outs.push_back(v.f32());
  }
  // A backward core: dX = dY·W^T on the rows the run has just written into dY.
  if (r.core != graph::kNoNode && !r.spec.core_first && st.panels && !val(r.core).defined()) {
    const Node& q = g.node(r.core);
    const Tensor &gy = val(q.operands[0]), &w = val(q.operands[2]);
    const int64_t k = q.type.dims[0];
    if (w.rank() == 2 && w.dim(0) == k && dense(gy, w.dim(1))) {
      val(r.core) = Tensor::empty(DType::F32, Shape{st.rows, k});
      set_core(gy, w, true, val(r.core));
    } // else computed after the run, on its own
  }
  // The kernel's generated GEMM core takes the product, when it has one of these sizes.
  if (core.fn == &GemmPanel::run && st.jit_gemm && r.spec.gemm_n == core.n &&
      r.spec.gemm_k == core.k)
    core.gemm_b = core.packed;
  auto t0 = stats.profile ? Clock::now() : Clock::time_point{};
  if (r.spec.panel_rows > 0)
    r.kernel->kernel.panel(ins.data(), outs.data(), st.rows, &core);
  else
    r.kernel->kernel.fn(ins.data(), outs.data(), st.rows);
  const bool fused = core.fn == &GemmPanel::run;
  if (x_arg_gathered != nullptr) // the block is filled now
    x_arg_gathered->clear();
  for (std::vector<const float*>* f : filled) // those blocks are filled now
    if (f != nullptr)
      f->clear();
  if (stats.profile)
    record(stats.time,
           !fused              ? Family::ElementwiseJit
           : r.spec.core_first ? Family::PanelForward
                               : Family::PanelInputGrad,
           t0, fused ? 2.0 * static_cast<double>(st.rows * core.n * core.k) : 0.0);
  stats.jit_launches++;
  stats.panel_launches += fused ? 1 : 0;
  stats.jit_gemm_cores += fused && core.gemm_b != nullptr ? 1 : 0;
}

} // namespace pejit::runtime
