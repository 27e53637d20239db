// Batched execution of template graphs (see graph_runner.h).
#include "runtime/graph_runner.h"

#include "runtime/graph_runs.h"
#include "runtime/parallel.h"

#include "jit/kernel_cache.h"
#include "src/kernels/kernels.h"
#include "src/ops/emitter.h"
#include "src/util/asan.h"
#include "src/util/check.h"
#include "src/util/overloaded.h"

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
Tensor run_op(OpId o, const std::vector<Tensor>& args, const ops::Attr& attr, uint32_t k = 0) {
  std::vector<Tensor> out;
  ops::op_def(o).eval(args, attr, out);
  return std::move(out[k]);
}

// dX = dY · W^T for a weight W [N,K] that every group of a plan run multiplies by, into y
// [rows, N]: W^T is packed once per run (kernels::pack_b transposes while packing) and kept in
// `packed` under W's address + 1 byte (never dereferenced; the address itself keys the plain
// W^T that other shapes use); it is invalidated when the parameters may change. With workers,
// blocks of rows go to them (each row's sums are its own: the same bits).
void matmul_packed_wt(const Tensor& gy, const Tensor& w, PackedWeights& packed,
                      const Workers* workers, float* y) {
  const int64_t k = w.dim(1), n = w.dim(0);
  const void* key = static_cast<const char*>(w.raw()) + 1;
  Tensor& p = packed.at(key);
  if (!p.defined()) {
    p = packed.buffer(key, kernels::packed_size(k, n));
    kernels::pack_b(true, k, n, w.f32(), k, p.f32());
  }
  const int64_t rows = gy.dim(0);
  const int64_t step =
      workers != nullptr ? workers->block_rows(rows, 2 * n * k, SplitPolicy::kRowGranule) : rows;
  if (step >= rows) {
    kernels::sgemm_packed(rows, n, k, gy.f32(), k, p.f32(), 0.0f, y, n);
    return;
  }
  workers->for_blocks((rows + step - 1) / step,
                      [&](int64_t b) {
                        const int64_t r0 = b * step;
                        kernels::sgemm_packed(std::min(step, rows - r0), n, k, gy.f32() + r0 * k, k,
                                              p.f32(), 0.0f, y + r0 * n, n);
                      },
                      static_cast<int>(Family::GemmInputGrad));
}

// Whether matmul_packed_wt computes a MatMulGradA node (dY, X, W): a 2-D f32 dY [rows, N] by
// a 2-D f32 W [K, N].
bool packed_wt_applies(const Tensor& gy, const Tensor& w, const GraphRunner::State& st) {
  return st.transposed != nullptr && w.rank() == 2 && gy.rank() == 2 && gy.dim(1) == w.dim(1) &&
         gy.dtype() == DType::F32 && w.dtype() == DType::F32;
}

} // namespace

Tensor ScratchArena::take(DType dt, const Shape& shape) {
  const int64_t n = shape.numel();
  // The next view starts 64 bytes aligned; under ASan, after a poisoned redzone of 64 bytes
  // (with the alignment's gap), so that a kernel writing past its view's end is reported.
  const int64_t span = ((n + 15) & ~int64_t{15}) + (util::kAsan ? 16 : 0);
  asked_ += span;
  need_ = std::max(need_, asked_);
  if (buf_.defined() && top_ + n <= buf_.numel()) {
    util::asan_unpoison(buf_.f32() + top_, static_cast<size_t>(n) * 4); // release_to poisons
    Tensor v = buf_.view(top_, dt, shape);
    const int64_t end = std::min(top_ + span, buf_.numel());
    util::asan_poison(buf_.f32() + top_ + n, static_cast<size_t>(end - top_ - n) * 4);
    top_ += span;
    return v;
  }
  overflows_++;
  return Tensor::empty(dt, shape);
}

void ScratchArena::reset() {
  if (need_ > 0 && (!buf_.defined() || !buf_.unique() || buf_.numel() < need_)) {
    // An eighth more than the last run asked: the next batch's plan may be a little larger.
    const int64_t n = std::max(need_ + need_ / 8, buf_.defined() ? buf_.numel() : 0);
    buf_ = Tensor::empty(DType::F32, Shape{n});
    buffers_++;
  } else if (buf_.defined()) { // reused: the last run's redzones are addressable again
    util::asan_unpoison(buf_.raw(), buf_.nbytes());
  }
  top_ = 0;
  asked_ = 0;
  need_ = 0;
  overflows_ = 0;
}

void ScratchArena::release_to(Mark m) {
  PEJIT_CHECK(m.top <= top_ && m.asked <= asked_) << "ScratchArena::release_to: a later mark";
  if (buf_.defined() && top_ > m.top) // a view still read after this is reported under ASan
    util::asan_poison(buf_.f32() + m.top, static_cast<size_t>(top_ - m.top) * 4);
  top_ = m.top;
  asked_ = m.asked;
}

Tensor PackedWeights::buffer(const void* key, int64_t floats) {
  auto it = spare_.find(key);
  if (it != spare_.end() && it->second.numel() == floats && it->second.unique())
    return std::move(it->second);
  allocated_++;
  return Tensor::empty(DType::F32, Shape{floats});
}

void PackedWeights::invalidate() {
  // Only the last run's buffers are kept: a weight that moved leaves nothing behind. A
  // training run invalidates twice (at its start and after its backward): the second call
  // between two runs finds nothing made, and must not drop the buffers the first kept.
  if (now_.empty())
    return;
  spare_ = std::move(now_);
  now_.clear();
}

Tensor GraphRunner::eval(NodeId id, State& st) const {
  const graph::Graph& g = tg_.g;
  const Node& n = g.node(id);
  const int64_t rows = st.rows;
  auto val = [&](size_t i) -> const Tensor& { return st.vals[static_cast<size_t>(n.operands[i])]; };
  const specializer::KernelProgram& p = program();
  auto cls = [&](size_t i) { return p.cls(n.operands[i]); };
  RowClass me = p.cls(id);
  std::vector<Tensor> in;
  for (size_t i = 0; i < n.operands.size(); ++i)
    in.push_back(val(i));
  auto op = [](OpId o, const std::vector<Tensor>& args, const ops::Attr& attr, uint32_t k = 0) {
    return run_op(o, args, attr, k);
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
    // How the op acts on the rows: the registry's batching rule (src/ops/ops.def).
    switch (ops::op_def(o).row) {
    case ops::RowRule::LastAxis:
      if (ops::op_num_results(o, n.attr) > 1) {
        // A split: all parts at once; the sibling nodes (the other parts) get theirs too.
        std::vector<Tensor> parts;
        ops::op_def(o).eval(in, n.attr, parts);
        for (NodeId sib : p.split_parts[static_cast<size_t>(id)])
          st.vals[static_cast<size_t>(sib)] = parts[g.node(sib).output_index];
        return parts[n.output_index];
      }
      for (size_t i = 0; i < in.size(); ++i) // each row alone: a shared part on every row
        if (cls(i) == RowClass::Shared)
          in[i] = repeat_rows(in[i], rows);
      return op(o, in, n.attr, n.output_index);
    case ops::RowRule::Reduce: {
      if (n.attr.ints.empty()) {
        Tensor flat = in[0].reshaped(Shape{rows, in[0].numel() / std::max<int64_t>(rows, 1)});
        return op(o, {flat}, ops::Attr{{1}});
      }
      int64_t ax = n.attr.ints[0];
      if (ax < 0)
        ax += static_cast<int64_t>(in[0].rank()) - 1;
      return op(o, in, ops::Attr{{ax + 1}});
    }
    case ops::RowRule::Reshape: {
      ops::Attr a;
      a.ints.push_back(rows);
      a.ints.insert(a.ints.end(), n.attr.ints.begin(), n.attr.ints.end());
      return op(o, in, a);
    }
    case ops::RowRule::Loss: // a shared logits row or label: on every row
      for (size_t i = 0; i < in.size(); ++i)
        if (cls(i) == RowClass::Shared)
          in[i] = repeat_rows(in[i], rows);
      return op(o, in, n.attr, n.output_index);
    default: // matmul, take: the reference kernel takes the rows as they are
      return op(o, in, n.attr, n.output_index);
    }
  }
  PEJIT_CHECK(n.kind == Kind::Grad) << "unexpected node " << graph::print_node(g, id);
  GradOp go = n.grad_op();
  switch (ops::grad_op_def(go).row) {
  case ops::RowRule::Elementwise: {
    // Their kernels take operands of one shape: both as [rows, per-row dims].
    align();
    Shape full = with_rows(rows, n.type.dims);
    for (auto& t : in)
      if (t.shape() != full)
        t = kernels::broadcast_to(t, full);
    return ops::eval_grad_op(go, in, n.attr);
  }
  case ops::RowRule::SumToShape:
    if (me == RowClass::Summed)
      return grad2(go, sum_rows(in[0]), in[1], n.attr);
    [[fallthrough]];
  case ops::RowRule::Broadcast: {
    // The target is per row: line the per-row dimensions up after the row axis.
    Tensor like = cls(1) == RowClass::Rows ? in[1] : repeat_rows(in[1], rows);
    Tensor x = cls(0) == RowClass::Rows ? in[0] : repeat_rows(in[0], rows);
    size_t rx = x.rank() - 1, rl = like.rank() - 1;
    if (rx < rl)
      x = expand_rows(x, rl);
    else if (rl < rx)
      like = expand_rows(like, rx);
    return grad2(go, x, like, n.attr).reshaped(with_rows(rows, n.type.dims));
  }
  case ops::RowRule::BroadcastAxis: {
    int64_t ax = n.attr.ints[0];
    if (ax < 0)
      ax += static_cast<int64_t>(r);
    Tensor like = cls(1) == RowClass::Rows ? in[1] : repeat_rows(in[1], rows);
    Tensor x = cls(0) == RowClass::Rows ? in[0] : repeat_rows(in[0], rows);
    return grad2(go, x, like, ops::Attr{{ax + 1}});
  }
  case ops::RowRule::MatMulGradA:
    if (packed_wt_applies(in[0], in[2], st)) {
      // A GEMM without a transposed operand, on W^T packed once per run for every group,
      // instead of transposing W for each level's small GEMM.
      Tensor y = Tensor::empty(DType::F32, Shape{in[0].dim(0), in[2].dim(0)});
      matmul_packed_wt(in[0], in[2], *st.transposed, st.workers, y.f32());
      return y;
    }
    if (st.transposed != nullptr && in[2].rank() == 2) {
      Tensor& wt = st.transposed->at(in[2].raw());
      if (!wt.defined())
        wt = run_op(OpId::Transpose, {in[2]}, {});
      return run_op(OpId::MatMul, {in[0], wt}, {});
    }
    return ops::eval_grad_op(go, in, n.attr);
  case ops::RowRule::Loss: // cross_entropy's: a shared logits row or label on every row
    for (size_t i = 0; i < in.size(); ++i)
      if (cls(i) == RowClass::Shared)
        in[i] = repeat_rows(in[i], rows);
    return ops::eval_grad_op(go, in, n.attr);
  default: // per-row gradients (softmax, log_softmax, pad_slice, reshape_like:
           // every operand per row), matmul_grad_b, take_grad
    return ops::eval_grad_op(go, in, n.attr);
  }
}

bool GraphRunner::gemm_into(NodeId id, Tensor& dest, State& st) const {
  const Node& n = tg_.g.node(id);
  if (n.kind != Kind::Grad || n.operands.size() != 3)
    return false;
  const Tensor& gy = st.vals[static_cast<size_t>(n.operands[0])];
  const Tensor& w = st.vals[static_cast<size_t>(n.operands[2])];
  if (!gy.defined() || !w.defined() || !packed_wt_applies(gy, w, st) || gy.dim(0) != st.rows ||
      dest.numel() != st.rows * w.dim(0))
    return false;
  matmul_packed_wt(gy, w, *st.transposed, st.workers, dest.f32());
  st.vals[static_cast<size_t>(id)] = dest.reshaped(Shape{st.rows, w.dim(0)});
  return true;
}

void GraphRunner::run_kernel(const specializer::KernelSteps& k, State& st,
                             GraphRunStats& stats) const {
  using Clock = ProfileClock;
  // A node on its reference kernel, unless something computed it already (a split part
  // computed with its siblings, a concat made by a run, a GEMM made by its run's core).
  // A slice or a dY·W^T that is a caller's block is written straight into it (bind_direct).
  auto compute = [&](NodeId id) {
    if (st.vals[static_cast<size_t>(id)].defined())
      return;
    auto t0 = stats.profile ? Clock::now() : Clock::time_point{};
    Tensor* dest = direct_dest(id, st); // bound by bind_direct: a slice or a dY·W^T
    const bool slice = dest != nullptr && slice_into(id, *dest, st);
    const bool gemm = dest != nullptr && !slice && gemm_into(id, *dest, st);
    if (!slice && !gemm)
      st.vals[static_cast<size_t>(id)] = eval(id, st);
    if (stats.profile) {
      auto [f, flops] = family_of(tg_.g, id, st.vals, st.rows);
      record(stats.time, f, t0, flops);
    }
    (slice ? stats.direct_slices : gemm ? stats.direct_gemms : stats.ref_nodes)++;
  };
  auto defined = [&](NodeId id) { return st.vals[static_cast<size_t>(id)].defined(); };
  for (size_t i = 0; i < k.steps.size();) {
    // Each step says how many of the steps after it it has done (a compiled run: its nodes').
    i +=
        1 + std::visit(Overloaded{
                           [&](const specializer::ElementwiseRun& r) -> size_t {
                             const auto& kernel = run_kernels_[r.index];
                             if (!kernel)
                               return 0; // not compiled (yet): its nodes run on reference kernels
                             launch(r, *kernel, st.ins, st.outs, st, stats);
                             return r.count;
                           },
                           [&](const specializer::InPlaceView& v) -> size_t {
                             if (!defined(v.node) && st.views)
                               stats.in_place++; // read in place by the runs
                             else
                               compute(v.node);
                             return 0;
                           },
                           [&](const specializer::RowGemm& m) -> size_t {
                             // A forward core's product is made by its run, panel by panel.
                             if (!(m.fused_into_run >= 0 && !m.transposed && st.views && st.panels))
                               compute(m.node);
                             return 0;
                           },
                           [&](const specializer::GatherConcat& c) -> size_t {
                             if (!(st.views && st.panels)) // else its run's core assembles it
                               compute(c.node);
                             return 0;
                           },
                           [&](const specializer::DeferredWeightGrad& w) -> size_t {
                             if (st.deferred == nullptr) // else the caller does it, with the other
                               compute(w.node);          // groups' rows
                             return 0;
                           },
                           [&](const specializer::RowReduction& r) -> size_t {
                             if (!defined(r.node) && !run_reduction(r.index, r.node, st, stats))
                               compute(r.node);
                             return 0;
                           },
                           [&](const specializer::Loss& l) -> size_t {
                             if (!defined(l.node) && !run_reduction(l.index, l.node, st, stats))
                               compute(l.node);
                             return 0;
                           },
                           [&](const specializer::SparseEmbeddingGrad& e) -> size_t {
                             if (e.dense) // else never densified
                               compute(e.node);
                             return 0;
                           },
                           [&](const specializer::RowGather& r) -> size_t {
                             gather_rows(r.node, st, stats);
                             return 0;
                           },
                           [&](const specializer::ReferenceNode& r) -> size_t {
                             compute(r.node);
                             return 0;
                           },
                       },
                       k.steps[i]);
  }
}

void GraphRunner::gather_rows(NodeId id, State& st, GraphRunStats& stats) const {
  const Node& n = tg_.g.node(id);
  Tensor& v = st.vals[static_cast<size_t>(id)];
  if (!v.defined()) // not a result the caller gave a block for
    v = st.make(n.type.dtype, with_rows(st.rows, n.type.dims));
  auto t0 = stats.profile ? ProfileClock::now() : ProfileClock::time_point{};
  kernels::take_into(st.vals[static_cast<size_t>(n.operands[0])],
                     st.vals[static_cast<size_t>(n.operands[1])], v);
  if (stats.profile)
    record(stats.time, Family::Gathers, t0);
  stats.row_gathers++;
}

void GraphRunner::forward(int64_t rows, std::span<const Tensor> args, const interp::Params& params,
                          std::span<Tensor> results, State& st, GraphRunStats& stats) const {
  PEJIT_CHECK(supported()) << "GraphRunner::forward on an unsupported graph: " << why();
  const graph::Graph& g = tg_.g;
  st.rows = rows;
  st.vals.assign(g.size(), Tensor());
  const specializer::KernelProgram& p = program();
  st.views =
      p.kernels && !tg_.fwd_kernels.empty() && (st.inference ? forward_compiled() : compiled());
  for (Tensor& t : st.row_stats) // a backward reads only what this forward writes
    t = Tensor();
  for (NodeId id : leaves_) {
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
    for (NodeId id : leaves_)   // fill_arg fills Input nodes only
      fill_arg(id, st);
  bind(tg_.fwd_outputs, results, st);
  bind_direct(tg_.fwd_outputs, results, st);
  // A lookup whose rows are a result writes them into the caller's block (RowGather).
  for (const specializer::RowGather& r : result_gathers_) {
    Tensor& dest = results[static_cast<size_t>(r.result)];
    const graph::ShapeType& t = g.node(r.node).type;
    if (dest.defined() && dest.dtype() == t.dtype && dest.numel() == rows * t.numel())
      st.vals[static_cast<size_t>(r.node)] = dest.reshaped(with_rows(rows, t.dims));
  }
  for (const specializer::KernelSteps& k : p.fwd)
    run_kernel(k, st, stats);
  st.direct_dests.clear();
  for (size_t k = 0; k < tg_.fwd_outputs.size(); ++k) {
    NodeId o = tg_.fwd_outputs[k];
    Tensor v = st.vals[static_cast<size_t>(o)];
    if (p.cls(o) == RowClass::Shared)
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
  const specializer::KernelProgram& p = program();
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
  bind(tg_.bwd_arg_grads, arg_grads, st);
  bind_direct(tg_.bwd_arg_grads, arg_grads, st);
  for (const specializer::KernelSteps& k : p.bwd)
    run_kernel(k, st, stats);
  st.direct_dests.clear();
  for (size_t a = 0; a < tg_.bwd_arg_grads.size() && a < arg_grads.size(); ++a) {
    if (!arg_grads[a].defined())
      continue;
    NodeId o = tg_.bwd_arg_grads[a];
    if (o == graph::kNoNode) {
      std::memset(arg_grads[a].raw(), 0, arg_grads[a].nbytes());
      continue;
    }
    Tensor v = st.vals[static_cast<size_t>(o)];
    if (p.cls(o) == RowClass::Shared)
      v = repeat_rows(v, rows);
    PEJIT_CHECK(p.cls(o) != RowClass::Summed && v.numel() == arg_grads[a].numel())
        << tg_.name << ": argument gradient " << a;
    if (v.raw() != arg_grads[a].raw()) // not written in place
      std::memmove(arg_grads[a].raw(), v.raw(), v.nbytes());
  }
  using How = specializer::ParamGradStep::How;
  for (const specializer::ParamGradStep& pg : p.param_grads) {
    const NodeId o = pg.node;
    if (o == graph::kNoNode)
      continue;
    auto& dst = param_grads[static_cast<size_t>(pg.param)];
    const Tensor& table = params.values[static_cast<size_t>(pg.param)];
    if (st.deferred != nullptr && pg.how == How::Deferred) {
      const Node& n = g.node(o);
      st.deferred->push_back(
          {pg.param, st.vals[static_cast<size_t>(n.operands[1])],
           st.vals[static_cast<size_t>(n.operands[0])],
           pg.weight_grad >= 0 ? weight_grad_kernels_[static_cast<size_t>(pg.weight_grad)]
                               : nullptr,
           pg.weight_grad >= 0 &&
                   static_cast<size_t>(pg.weight_grad) < weight_grad_blocks_.size() &&
                   weight_grad_blocks_[static_cast<size_t>(pg.weight_grad)].block
               ? &weight_grad_blocks_[static_cast<size_t>(pg.weight_grad)]
               : nullptr});
      continue;
    }
    if (pg.how == How::Sparse) {
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
    switch (p.cls(o)) {
    case RowClass::Rows:
      v = sum_rows(pg, v, rows, stats);
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
