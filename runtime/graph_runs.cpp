// GraphRunner's compiled kernels: compiling the program's elementwise runs, row reductions and
// weight-gradient GEMMs through the kernel cache, listing them with their schedules, and
// binding run outputs to the caller's blocks. Launching them is graph_runner.cpp (run_kernel),
// graph_panels.cpp (launch) and graph_reductions.cpp.
#include "runtime/graph_runs.h"

#include "src/ops/emitter.h"
#include "src/util/check.h"

#include <cstring>
#include <variant>

namespace pejit::runtime {

using graph::NodeId;
using specializer::ElementwiseRun;
using specializer::KernelStep;

namespace {

// `each(run, forward, kernel)` for every elementwise run of `p`, in ElementwiseRun::index order.
template <class Each> void for_each_run(const specializer::KernelProgram& p, Each each) {
  for (int pass = 0; pass < 2; ++pass) {
    const auto& ks = pass == 0 ? p.fwd : p.bwd;
    for (size_t ki = 0; ki < ks.size(); ++ki)
      for (const KernelStep& s : ks[ki].steps)
        if (const auto* r = std::get_if<ElementwiseRun>(&s))
          each(*r, pass == 0, ki);
  }
}

std::string schedule_of(const std::shared_ptr<const jit::CachedKernel>& k) {
  return k ? k->schedule : std::string();
}
std::string source_of(const std::shared_ptr<const jit::CachedKernel>& k) {
  return k ? k->schedule_source : std::string();
}

} // namespace

GraphRunner::GraphRunner(specializer::TemplateGraph tg) : tg_(std::move(tg)) {
  ops::register_kernels();
  PEJIT_CHECK(tg_.program.lowered) << tg_.name << ": GraphRunner on a graph that was not lowered";
  run_kernels_.resize(program().run_count);
  reduce_kernels_.resize(program().reductions.size());
  weight_grad_kernels_.resize(program().weight_grads.size());
  for (const specializer::KernelSteps& k : program().fwd)
    for (const specializer::KernelStep& s : k.steps)
      if (const auto* r = std::get_if<specializer::RowGather>(&s); r != nullptr && r->result >= 0)
        result_gathers_.push_back(*r);
  for (NodeId id = 0; id < static_cast<NodeId>(tg_.g.size()); ++id)
    if (tg_.g.node(id).kind == graph::Kind::Input || tg_.g.node(id).kind == graph::Kind::Const)
      leaves_.push_back(id);
}

GraphRunner::GraphRunner(const GraphRunner&) = default;

GraphRunner::~GraphRunner() = default;

namespace {
// Whether reduction i of `p` is one its forward kernels use (a loss or a row reduction there).
std::vector<bool> forward_reductions(const specializer::KernelProgram& p) {
  std::vector<bool> fwd(p.reductions.size(), false);
  for (const auto& k : p.fwd)
    for (const KernelStep& s : k.steps) {
      if (const auto* r = std::get_if<specializer::RowReduction>(&s))
        fwd[r->index] = true;
      if (const auto* l = std::get_if<specializer::Loss>(&s))
        fwd[l->index] = true;
    }
  return fwd;
}
} // namespace

void GraphRunner::compile(jit::KernelCache& cache, bool inject_failure, CompileScope scope) {
  const bool forward_only = scope.forward_only;
  for_each_run(program(), [&](const ElementwiseRun& r, bool forward, size_t) {
    if (forward_only && !forward)
      return;
    jit::KernelSpec s = r.spec;
    s.inject_invalid_ir = inject_failure;
    run_kernels_[r.index] = cache.get(s);
  });
  const std::vector<bool> fwd = forward_reductions(program());
  for (size_t i = 0; i < program().reductions.size(); ++i)
    if (!forward_only || fwd[i])
      reduce_kernels_[i] = cache.get_reduce(program().reductions[i].spec);
  if (forward_only)
    return;
  for (size_t i = 0; i < program().weight_grads.size(); ++i)
    weight_grad_kernels_[i] = cache.get_gemm(program().weight_grads[i].spec);
  if (!scope.weight_grad_blocks)
    return;
  weight_grad_blocks_.resize(program().weight_grads.size());
  constexpr int64_t cols = WeightGradBlocks::kBlockCols;
  for (size_t i = 0; i < program().weight_grads.size(); ++i) {
    const jit::GemmSpec& whole = program().weight_grads[i].spec;
    if (whole.n < 2 * cols || whole.ldb != 0 || whole.ldc != 0)
      continue;
    // The blocks take the whole kernel's register block (a tuned one too), so that a
    // schedule chosen for the weight applies to its blocks.
    const auto* compiled = weight_grad_kernels_[i]
                               ? std::get_if<jit::GemmKernel>(&weight_grad_kernels_[i]->family)
                               : nullptr;
    auto part = [&](int64_t n) {
      jit::GemmSpec s = compiled != nullptr ? compiled->spec : whole;
      s.n = n;
      s.ldb = s.ldc = whole.n;
      return cache.get_gemm(s);
    };
    WeightGradBlocks& b = weight_grad_blocks_[i];
    b.block = part(cols);
    if (whole.n % cols != 0)
      b.tail = part(whole.n % cols);
  }
}

bool GraphRunner::compiled() const {
  for (const auto* ks : {&run_kernels_, &reduce_kernels_, &weight_grad_kernels_})
    for (const auto& k : *ks)
      if (!k)
        return false;
  return true;
}

bool GraphRunner::forward_compiled() const {
  bool all = true;
  for_each_run(program(), [&](const ElementwiseRun& r, bool forward, size_t) {
    all = all && (!forward || run_kernels_[r.index] != nullptr);
  });
  const std::vector<bool> fwd = forward_reductions(program());
  for (size_t i = 0; i < fwd.size(); ++i)
    all = all && (!fwd[i] || reduce_kernels_[i] != nullptr);
  return all;
}

std::vector<GraphRunner::KernelRun> GraphRunner::jit_runs() const {
  std::vector<KernelRun> out;
  for_each_run(program(), [&](const ElementwiseRun& r, bool forward, size_t ki) {
    const auto& k = run_kernels_[r.index];
    out.push_back({forward, ki, r.spec, schedule_of(k), source_of(k)});
  });
  return out;
}

std::vector<GraphRunner::ReduceRun> GraphRunner::reduce_runs() const {
  std::vector<ReduceRun> out;
  for (size_t i = 0; i < program().reductions.size(); ++i) {
    const auto& r = program().reductions[i];
    out.push_back({r.node, r.spec, r.param_sum, schedule_of(reduce_kernels_[i]),
                   source_of(reduce_kernels_[i])});
  }
  return out;
}

std::vector<GraphRunner::WeightGradRun> GraphRunner::weight_grad_runs() const {
  std::vector<WeightGradRun> out;
  for (size_t i = 0; i < program().weight_grads.size(); ++i) {
    const auto& w = program().weight_grads[i];
    out.push_back({w.node, w.param, w.spec, schedule_of(weight_grad_kernels_[i]),
                   source_of(weight_grad_kernels_[i])});
  }
  return out;
}

void GraphRunner::bind(std::span<const NodeId> nodes, std::span<Tensor> dest, State& st) const {
  if (!st.views)
    return; // a run that has no kernel yet computes its nodes on reference kernels
  const std::vector<bool>& run_output = program().run_output;
  for (size_t k = 0; k < nodes.size() && k < dest.size(); ++k) {
    NodeId o = nodes[k];
    if (o == graph::kNoNode || !run_output[static_cast<size_t>(o)] || !dest[k].defined() ||
        st.vals[static_cast<size_t>(o)].defined() ||
        dest[k].numel() != st.rows * tg_.g.node(o).type.numel())
      continue;
    st.vals[static_cast<size_t>(o)] = dest[k];
  }
}

void GraphRunner::bind_direct(std::span<const NodeId> nodes, std::span<Tensor> dest,
                              State& st) const {
  st.direct_dests.clear();
  const specializer::KernelProgram& p = program();
  for (size_t k = 0; k < nodes.size() && k < dest.size(); ++k) {
    const NodeId o = nodes[k];
    if (o == graph::kNoNode || !dest[k].defined() || dest[k].dtype() != DType::F32 ||
        st.vals[static_cast<size_t>(o)].defined() ||
        (static_cast<size_t>(o) < p.run_output.size() && p.run_output[static_cast<size_t>(o)]) ||
        p.cls(o) != RowClass::Rows)
      continue;
    const graph::Node& n = tg_.g.node(o);
    if (n.type.dims.size() != 1 || n.type.dtype != DType::F32 ||
        dest[k].numel() != st.rows * n.type.dims[0])
      continue;
    const bool slice = n.kind == graph::Kind::Op && n.op() == ops::OpId::Slice &&
                       n.attr.ints.size() == 2 && p.cls(n.operands[0]) == RowClass::Rows;
    const bool gemm = n.kind == graph::Kind::Grad && n.operands.size() == 3 &&
                      ops::grad_op_def(n.grad_op()).row == ops::RowRule::MatMulGradA &&
                      p.cls(n.operands[0]) == RowClass::Rows &&
                      p.cls(n.operands[2]) == RowClass::Shared;
    if (!slice && !gemm)
      continue;
    bool bound = false; // a node that is two arguments' gradient fills one block
    for (const auto& [id, t] : st.direct_dests)
      bound = bound || id == o;
    if (!bound)
      st.direct_dests.emplace_back(o, dest[k]);
  }
}

Tensor* GraphRunner::direct_dest(NodeId id, State& st) {
  for (auto& [o, t] : st.direct_dests)
    if (o == id)
      return &t;
  return nullptr;
}

bool GraphRunner::slice_into(NodeId id, Tensor& dest, State& st) const {
  const graph::Node& n = tg_.g.node(id);
  if (n.kind != graph::Kind::Op)
    return false;
  const Tensor& x = st.vals[static_cast<size_t>(n.operands[0])];
  if (!x.defined() || x.dtype() != DType::F32 || x.rank() != 2 || x.dim(0) != st.rows)
    return false;
  // The bounds as kernels::slice reads them.
  const int64_t cols = x.dim(1);
  const int64_t b = n.attr.ints[0] < 0 ? n.attr.ints[0] + cols : n.attr.ints[0];
  const int64_t e = n.attr.ints[1] < 0 ? n.attr.ints[1] + cols : n.attr.ints[1];
  const int64_t w = e - b;
  if (b < 0 || e > cols || w < 0 || dest.numel() != st.rows * w)
    return false;
  const float* src = x.f32() + b;
  float* dst = dest.f32();
  for (int64_t i = 0; i < st.rows; ++i)
    std::memcpy(dst + i * w, src + i * cols, static_cast<size_t>(w) * sizeof(float));
  st.vals[static_cast<size_t>(id)] = dest.reshaped(detail::with_rows(st.rows, n.type.dims));
  return true;
}

} // namespace pejit::runtime
