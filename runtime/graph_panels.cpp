// GraphRunner's panel kernels: launching a run with its GEMM core (the C++ side of
// jit::PanelCore, the packed weights, the scratch, the arguments the caller left ungathered).
// Which runs get a core is the lowering's (specializer/passes/lower_panels.cpp); the generated
// side is jit/elementwise_codegen.cpp.
#include "runtime/graph_runs.h"
#include "runtime/parallel.h"

#include "src/kernels/kernels.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace pejit::runtime {

// Splits are tagged with their profile family (SplitTimes::by_tag), below the optimizer's tag.
static_assert(static_cast<int>(Family::kCount) <= SplitTimes::kOptimizerTag);

using graph::Kind;
using graph::Node;
using graph::NodeId;
using ops::GradOp;
using ops::OpId;

using detail::rank_of;
using detail::with_rows;

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
// without a cache, into `local`. With workers, its column panels are shared out: packing is
// a copy (a transpose for W^T) that the calling thread would otherwise do alone while the
// others wait for the level that needs it.
const float* packed_weight(const Tensor& w, bool transposed, PackedWeights* cache, Tensor& local,
                           const Workers* workers, GraphRunStats& stats) {
  const int64_t k = transposed ? w.dim(1) : w.dim(0), n = transposed ? w.dim(0) : w.dim(1);
  const void* key = static_cast<const char*>(w.raw()) + (transposed ? 1 : 2);
  Tensor& p = cache != nullptr ? cache->at(key) : local;
  if (!p.defined()) {
    auto t0 = stats.profile ? ProfileClock::now() : ProfileClock::time_point{};
    p = cache != nullptr ? cache->buffer(key, kernels::packed_size(k, n))
                         : Tensor::empty(DType::F32, Shape{kernels::packed_size(k, n)});
    const int64_t panels = kernels::packed_panels(n);
    // A panel costs about k * kPackedWidth copies; min_block_work of them make a block.
    const int64_t per =
        workers != nullptr ? workers->block_rows(panels, k * kernels::kPackedWidth) : panels;
    if (per >= panels) {
      kernels::pack_b(transposed, k, n, w.f32(), transposed ? k : n, p.f32());
    } else {
      float* dst = p.f32();
      workers->for_blocks((panels + per - 1) / per,
                          [&](int64_t b) {
                            kernels::pack_b_panels(transposed, k, n, w.f32(), transposed ? k : n,
                                                   dst, b * per, std::min(panels, (b + 1) * per));
                          },
                          static_cast<int>(Family::Packing));
    }
    if (stats.profile)
      record(stats.time, Family::Packing, t0);
  }
  return p.f32();
}

// Runs a compiled run over rows [0, rows) in `blocks` blocks of `step` rows, one worker each:
// every pointer of the launch moved to the block's first row, and each block its own panel
// scratch. The kernel computes a row from that row alone, in an order its shapes fix (the GEMM
// core's k chunks, the chain per element), not from which rows share its panel: so each row
// comes out as in one launch, bit for bit (tests/runtime/threads_test.cpp splits every run).
void launch_blocks(const jit::KernelSpec& spec, const jit::CachedKernel& kernel,
                   const std::vector<float*>& ins, const std::vector<float*>& outs,
                   const GemmPanel& core, Tensor& scratch, int64_t rows, int64_t step,
                   int64_t blocks, const Workers& workers) {
  const int64_t scratch_floats =
      scratch.defined() ? scratch.numel() / blocks : 0; // one block's panel of the product
  const int tag = static_cast<int>(core.fn != &GemmPanel::run ? Family::ElementwiseJit
                                   : spec.core_first          ? Family::PanelForward
                                                              : Family::PanelInputGrad);
  auto block = [&](int64_t b) {
    const int64_t r0 = b * step, n = std::min(step, rows - r0);
    float* const own_scratch = scratch.defined() ? scratch.f32() + b * scratch_floats : nullptr;
    std::vector<float*> in(ins.size()), out(outs.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      if (i >= spec.inputs.size() || spec.inputs[i] != jit::InputShape::Full || ins[i] == nullptr)
        in[i] = ins[i];
      else if (spec.panel_input(i)) // the same column of this block's scratch
        in[i] = own_scratch + (ins[i] - scratch.f32());
      else
        in[i] = ins[i] + r0 * spec.in_stride(i);
    }
    for (size_t j = 0; j < outs.size(); ++j)
      out[j] = outs[j] + r0 * spec.out_stride(j);
    if (spec.panel_rows <= 0) {
      kernel.elementwise().fn(in.data(), out.data(), n);
      return;
    }
    GemmPanel c = core;
    if (c.fn == &GemmPanel::run) {
      c.gemm_a += r0 * c.k;
      c.gemm_c = c.gemm_c_step == 0 ? own_scratch : c.gemm_c + r0 * c.gemm_c_step;
    } else if (c.fn == &GemmPanel::copy) {
      c.whole += r0 * c.n;
      c.gemm_c = own_scratch;
    }
    if (c.gather_dst != nullptr) {
      c.gather_dst += r0 * c.k;
      for (size_t i = 0; i < jit::PanelCore::kMaxParts; ++i) {
        if (c.part_rows[i] != nullptr)
          c.part_rows[i] += r0;
        else if (c.part_src[i] != nullptr && i < spec.gather_widths.size())
          c.part_src[i] += r0 * spec.gather_widths[i];
      }
    }
    for (auto& f : c.fill_rows)
      if (f != nullptr)
        f += r0;
    kernel.elementwise().panel(in.data(), out.data(), n, &c);
  };
  workers.for_blocks(blocks, block, tag);
}

} // namespace

int64_t GraphRunner::run_block_rows(const Run& r, const State& st) const {
  if (st.workers == nullptr || st.workers->threads() <= 1)
    return st.rows;
  // Per row: the chain's ops over its width, and the GEMM core's 2 n k.
  int64_t cost =
      r.spec.width * static_cast<int64_t>(r.spec.ops.size() + r.inputs.size() + r.outputs.size());
  if (r.core != graph::kNoNode) {
    const Node& c = tg_.g.node(r.core);
    const Node& a = tg_.g.node(c.operands[0]);
    if (!c.type.dims.empty() && !a.type.dims.empty())
      cost += 2 * c.type.dims.back() * a.type.dims.back();
  }
  return st.workers->block_rows(st.rows, cost, SplitPolicy::kRowGranule);
}

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

void GraphRunner::launch(const Run& r, const jit::CachedKernel& kernel, std::vector<float*>& ins,
                         std::vector<float*>& outs, State& st, GraphRunStats& stats) const {
  using Clock = ProfileClock;
  const graph::Graph& g = tg_.g;
  auto val = [&](NodeId id) -> Tensor& { return st.vals[static_cast<size_t>(id)]; };
  // Blocks of rows that the workers share (one block: the calling thread alone).
  const int64_t step = run_block_rows(r, st);
  const int64_t blocks = step < st.rows ? (st.rows + step - 1) / step : 1;
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
    core.packed = packed_weight(w, transposed, st.transposed, local, st.workers, stats);
    core.gemm_c = c.f32();
    core.n = c.dim(1);
    core.k = a.dim(1);
    core.gemm_c_step = core.n;
  };
  // Forward: C = x·W, into a scratch of one panel's rows when only this run reads C.
  Tensor scratch;
  std::vector<const float*>* x_arg_gathered = nullptr; ///< x's rows, gathered by the core
  std::array<std::vector<const float*>*, jit::PanelCore::kMaxParts> filled{}; ///< the chain's
  if (r.core != graph::kNoNode && r.spec.core_first) {
    const Node& m = g.node(r.core);
    const NodeId xid = m.operands[0];
    const Tensor& w = val(m.operands[1]);
    const int64_t n = m.type.dims[0];
    const bool to_scratch = !r.spec.in_panel.empty();
    if (to_scratch) // one panel's rows per block of rows
      scratch = st.make(DType::F32, Shape{blocks * std::min(st.rows, r.spec.panel_rows), n});
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
      val(xid) = st.make(DType::F32, Shape{st.rows, w.dim(0)});
    const Tensor& a = val(xid);
    if (!val(r.core).defined() && weight_ok && dense(a, w.dim(0))) {
      Tensor& c =
          to_scratch ? scratch : (val(r.core) = st.make(DType::F32, Shape{st.rows, n}));
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
        c = st.make(DType::F32, with_rows(st.rows, g.node(dst).type.dims));
        stats.in_place++;
      }
      outs.push_back(c.f32() + off);
      continue;
    }
    Tensor& v = val(r.outputs[j]);
    if (!v.defined() || v.numel() != st.rows * r.width)
      v = st.make(DType::F32, Shape{st.rows, r.width});
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
      val(r.core) = st.make(DType::F32, Shape{st.rows, k});
      set_core(gy, w, true, val(r.core));
    } // else computed after the run, on its own
  }
  // The kernel's generated GEMM core takes the product, when it has one of these sizes.
  if (core.fn == &GemmPanel::run && st.jit_gemm && r.spec.gemm_n == core.n &&
      r.spec.gemm_k == core.k)
    core.gemm_b = core.packed;
  auto t0 = stats.profile ? Clock::now() : Clock::time_point{};
  if (blocks > 1)
    launch_blocks(r.spec, kernel, ins, outs, core, scratch, st.rows, step, blocks, *st.workers);
  else if (r.spec.panel_rows > 0)
    kernel.elementwise().panel(ins.data(), outs.data(), st.rows, &core);
  else
    kernel.elementwise().fn(ins.data(), outs.data(), st.rows);
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
