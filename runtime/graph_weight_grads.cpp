// GraphRunner's weight gradients on generated code: every weight gradient x^T·gy that a caller
// may take (State::deferred: the plan executor sums all groups' rows in one GEMM per weight)
// gets a TN GEMM kernel spec (jit/gemm_codegen.h: m = x's width, n = gy's width, K the rows at
// run time, given as the groups' row stretches, C accumulated or not as the call says),
// compiled with the runner's other kernels. The kernel sums each element of dW in one fma chain
// over the rows in order, as kernels::sgemm_tn_stretches does, so the JIT and the reference kernel
// give the same bits on AVX-512 builds.
#include "runtime/graph_runs.h"

namespace pejit::runtime {

using graph::Node;
using graph::NodeId;

void GraphRunner::plan_weight_grads() {
  const graph::Graph& g = tg_.g;
  for (size_t j = 0; j < tg_.bwd_param_grads.size(); ++j) {
    NodeId o = tg_.bwd_param_grads[j];
    if (o == graph::kNoNode || !deferrable_[static_cast<size_t>(o)])
      continue;
    const Node& n = g.node(o);
    const Node& gy = g.node(n.operands[0]);
    const Node& x = g.node(n.operands[1]);
    if (gy.type.dtype != DType::F32 || x.type.dtype != DType::F32 || gy.type.dims.size() != 1 ||
        x.type.dims.size() != 1 || gy.type.dims[0] < 1 || x.type.dims[0] < 1)
      continue; // runs on the reference kernel
    jit::GemmSpec spec{.layout = jit::GemmLayout::TN,
                       .m = x.type.dims[0],
                       .n = gy.type.dims[0],
                       .stretches = true};
    weight_grads_.push_back({o, tg_.param_index[j], spec, nullptr});
  }
}

std::shared_ptr<const jit::CachedKernel> GraphRunner::weight_grad_kernel(NodeId id) const {
  for (const auto& w : weight_grads_)
    if (w.node == id)
      return w.kernel;
  return nullptr;
}

std::vector<GraphRunner::WeightGradRun> GraphRunner::weight_grad_runs() const {
  std::vector<WeightGradRun> out;
  for (const auto& w : weight_grads_)
    out.push_back({w.node, w.param, w.spec, w.kernel ? w.kernel->schedule : std::string(),
                   w.kernel ? w.kernel->schedule_source : std::string()});
  return out;
}

} // namespace pejit::runtime
