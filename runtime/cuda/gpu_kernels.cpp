// The GPU kernels of a template's KernelProgram (gpu_kernels.h): one walk over its steps, as
// GraphRunner walks them on the CPU, each step mapped to the generated kernel, the cuBLAS GEMM
// or the nothing (a view, a gather a panel run does) that runs it on the device.
#include "runtime/cuda/gpu_kernels.h"

#include "runtime/cuda/launch_list.h"
#include "src/ops/op.h"
#include "src/util/overloaded.h"

#include <fmt/format.h>

#include <cctype>
#include <map>
#include <set>

namespace pejit::runtime::cuda {

using specializer::KernelStep;

std::string CublasGemm::canonical_text() const {
  auto dim = [](int64_t d) { return d < 0 ? std::string("?") : std::to_string(d); };
  return fmt::format("cublas sgemm m={} n={} k={} {}{}{}", dim(m), dim(n), dim(k),
                     trans_a ? 't' : 'n', trans_b ? 't' : 'n', weight_grad ? " sum-groups" : "");
}

bool GpuKernel::ptx() const {
  return !std::holds_alternative<CublasGemm>(spec) && !std::holds_alternative<HostOnly>(spec);
}

std::string GpuKernel::canonical_text() const {
  return std::visit(Overloaded{[](const HostOnly& h) { return "host only: " + h.why; },
                               [](const auto& s) { return s.canonical_text(); }},
                    spec);
}

namespace {

int64_t last_dim(const graph::Graph& g, graph::NodeId id) {
  const auto& dims = g.type(id).dims;
  return dims.empty() ? 1 : dims.back();
}

class Walk {
public:
  Walk(const specializer::TemplateGraph& tg, const std::string& prefix, std::vector<GpuKernel>& out)
      : tg_(tg), g_(tg.g), p_(tg.program), prefix_(prefix), out_(out) {}

  void pass(bool forward) {
    const auto& kernels = forward ? p_.fwd : p_.bwd;
    forward_ = forward;
    for (size_t ki = 0; ki < kernels.size(); ++ki) {
      where_ = fmt::format("{} {}", forward ? "fwd" : "bwd", ki);
      name_ = fmt::format("{}_{}{}", prefix_, forward ? "fwd" : "bwd", ki);
      const auto& steps = kernels[ki].steps;
      // Concats whose every part a run writes in place: nothing left to do for them.
      std::map<graph::NodeId, size_t> written;
      for (const KernelStep& s : steps)
        if (const auto* r = std::get_if<specializer::ElementwiseRun>(&s))
          for (const auto& v : r->out_view)
            if (v.first != graph::kNoNode)
              written[v.first]++;
      for (size_t i = 0; i < steps.size(); ++i)
        i += step(steps[i], written);
    }
  }

private:
  void add(std::string suffix, std::string where, GpuKernelSpec spec) {
    out_.push_back(
        GpuKernel{name_ + "_" + suffix, where_ + " " + where, std::move(spec), forward_});
  }

  // Adds the kernels of one step; returns how many of the following steps it covers.
  size_t step(const KernelStep& s, const std::map<graph::NodeId, size_t>& written) {
    return std::visit(
        Overloaded{
            [&](const specializer::ElementwiseRun& r) -> size_t {
              run(r);
              return r.count;
            },
            [&](const specializer::RowGemm& m) -> size_t {
              if (m.fused_into_run < 0)
                add(fmt::format("gemm{}", m.node), fmt::format("gemm %{}", m.node),
                    row_gemm(m.node, m.transposed));
              return 0;
            },
            [&](const specializer::GatherConcat&) -> size_t { return 0; }, // the run's gather
            [&](const specializer::InPlaceView&) -> size_t { return 0; },  // read in place
            [&](const specializer::RowReduction& r) -> size_t {
              add(fmt::format("reduce{}", r.node), fmt::format("reduce %{}", r.node),
                  p_.reductions[r.index].spec);
              out_.back().per_row = p_.reductions[r.index].per_row;
              return 0;
            },
            [&](const specializer::Loss& l) -> size_t {
              add(fmt::format("loss{}", l.node), fmt::format("loss %{}", l.node),
                  p_.reductions[l.index].spec);
              out_.back().per_row = p_.reductions[l.index].per_row;
              return 0;
            },
            [&](const specializer::DeferredWeightGrad& w) -> size_t {
              const auto& dims = g_.type(w.node).dims; // the weight's [k, n]
              CublasGemm gemm{.m = dims.at(0), .n = dims.at(1), .k = -1, .trans_a = true};
              gemm.weight_grad = true;
              add(fmt::format("wgrad{}", w.node), fmt::format("weight grad %{}", w.node), gemm);
              out_.back().param_grad = true;
              return 0;
            },
            [&](const specializer::SparseEmbeddingGrad& e) -> size_t {
              add(fmt::format("sparse{}", e.node), fmt::format("sparse grad %{}", e.node),
                  jit::SegmentSumSpec{last_dim(g_, e.node)});
              return 0;
            },
            [&](const specializer::RowGather& r) -> size_t {
              add(fmt::format("host{}", r.node), fmt::format("row gather %{}", r.node),
                  HostOnly{graph::print_node(g_, r.node)});
              return 0;
            },
            [&](const specializer::ReferenceNode& r) -> size_t {
              reference(r.node, written);
              return 0;
            },
        },
        s);
  }

  void run(const specializer::ElementwiseRun& r) {
    const jit::KernelSpec& spec = r.spec;
    std::string run = fmt::format("run{}", r.index);
    std::string where = fmt::format("run {}", r.index);
    const bool core = r.core != graph::kNoNode && spec.panel_rows > 0;
    if (!spec.gather_widths.empty()) {
      jit::RowGatherSpec gs{.widths = spec.gather_widths};
      gs.dst_stride = spec.gemm_k;
      add(run + "_gather", where + " gather", gs);
    }
    for (size_t j = 0; j < spec.fill_inputs.size(); ++j) {
      const size_t t = static_cast<size_t>(spec.fill_inputs[j]);
      jit::RowGatherSpec gs{.widths = {spec.width}};
      gs.dst_stride = spec.in_stride(t);
      add(fmt::format("{}_fill{}", run, j), fmt::format("{} fill {}", where, j), gs);
    }
    CublasGemm gemm;
    if (core) {
      gemm.n = spec.gemm_n;
      gemm.k = spec.gemm_k;
      gemm.trans_b = !spec.core_first; // backward: dY · W^T
    }
    if (core && spec.core_first)
      add(run + "_gemm", fmt::format("{} gemm %{}", where, r.core), gemm);
    add(run, where, jit::gpu_chain(spec));
    if (core && !spec.core_first)
      add(run + "_gemm", fmt::format("{} gemm %{}", where, r.core), gemm);
  }

  CublasGemm row_gemm(graph::NodeId node, bool transposed) {
    const graph::Node& n = g_.node(node);
    // The shared matrix [a, b]: x @ W's second operand, MatMulGradA(dY, x, W)'s third.
    const auto& w = g_.type(n.operands.at(transposed ? 2 : 1)).dims;
    CublasGemm gemm;
    gemm.n = transposed ? w.at(0) : w.at(1);
    gemm.k = transposed ? w.at(1) : w.at(0);
    gemm.trans_b = transposed;
    return gemm;
  }

  void reference(graph::NodeId id, const std::map<graph::NodeId, size_t>& written) {
    const graph::Node& n = g_.node(id);
    std::string where = fmt::format("ref %{}", id);
    if (n.kind == graph::Kind::Op && n.op() == ops::OpId::Concat) {
      auto it = written.find(id);
      if (it != written.end() && it->second == n.operands.size())
        return; // every part written in place by the runs
      jit::RowGatherSpec gs;
      for (graph::NodeId o : n.operands)
        gs.widths.push_back(last_dim(g_, o));
      add(fmt::format("concat{}", id), where + " concat", gs);
      return;
    }
    if (n.kind == graph::Kind::Op && n.op() == ops::OpId::Slice) {
      jit::RowGatherSpec gs{.widths = {last_dim(g_, id)}};
      gs.src_strides = {last_dim(g_, n.operands.at(0))};
      add(fmt::format("slice{}", id), where + " slice", gs);
      return;
    }
    add(fmt::format("host{}", id), where, HostOnly{graph::print_node(g_, id)});
  }

  const specializer::TemplateGraph& tg_;
  const graph::Graph& g_;
  const specializer::KernelProgram& p_;
  std::string prefix_, name_, where_;
  bool forward_ = true;
  std::vector<GpuKernel>& out_;
};

} // namespace

std::vector<GpuKernel> gpu_kernels(const specializer::TemplateGraph& tg,
                                   const std::string& prefix) {
  std::vector<GpuKernel> out;
  const specializer::KernelProgram& p = tg.program;
  if (!p.supported() || !p.kernels) {
    out.push_back(GpuKernel{prefix, "template", HostOnly{p.supported() ? "no kernels" : p.why}});
    return out;
  }
  Walk w(tg, prefix, out);
  w.pass(true);
  w.pass(false);
  for (const specializer::ParamGradStep& s : p.param_grads)
    if (s.how == specializer::ParamGradStep::How::SumRows && s.reduction >= 0) {
      const specializer::ReductionSpec& r = p.reductions[static_cast<size_t>(s.reduction)];
      out.push_back(GpuKernel{fmt::format("{}_param{}_sum", prefix, s.param),
                              fmt::format("param {} grad sum", s.param), r.spec, false});
      out.back().per_row = r.per_row;
      out.back().param_grad = true;
    }
  return out;
}

TemplateValues template_values(const specializer::TemplateGraph& tg) {
  TemplateValues v;
  const specializer::KernelProgram& p = tg.program;
  for (size_t id = 0; id < tg.g.size(); ++id) {
    const graph::Node& n = tg.g.node(static_cast<graph::NodeId>(id));
    if (n.kind == graph::Kind::Input || id >= p.row_class.size())
      continue; // arguments and parameters live in the arena and the model's memory
    const int64_t numel = n.type.numel();
    (p.row_class[id] == specializer::RowClass::Rows ? v.per_row : v.per_group) += numel;
  }
  return v;
}

GpuKernel take_kernel(const specializer::Template& t, const std::string& prefix) {
  const auto& dims = t.args.at(0).dims; // the table [V, d]
  jit::RowGatherSpec gs{.widths = {dims.empty() ? 1 : dims.back()}};
  return GpuKernel{prefix + "_take", "take rows", gs, true};
}

std::vector<GpuKernel> optimizer_kernels(jit::OptimizerStepSpec::Rule rule,
                                         const std::vector<int64_t>& sparse_widths) {
  std::vector<GpuKernel> out;
  jit::OptimizerStepSpec dense{.rule = rule, .sparse = false, .width = 1};
  out.push_back(GpuKernel{"optim_dense", "optimizer dense", dense, false});
  std::set<int64_t> seen;
  for (int64_t w : sparse_widths)
    if (seen.insert(w).second)
      out.push_back(GpuKernel{fmt::format("optim_sparse_w{}", w), "optimizer sparse",
                              jit::OptimizerStepSpec{.rule = rule, .sparse = true, .width = w},
                              false});
  return out;
}

std::vector<GpuKernel> plan_gpu_kernels(const ir::Module& m, const interp::DimBindings& dims,
                                        const specializer::Plan& plan,
                                        const specializer::Residual& residual,
                                        const specializer::TemplateTable& templates) {
  std::vector<bool> used(templates.size(), false);
  for (const auto& g : plan.groups)
    if (g.tmpl >= 0)
      used[static_cast<size_t>(g.tmpl)] = true;
  std::vector<GpuKernel> out;
  std::vector<int64_t> sparse;
  for (size_t id = 0; id < used.size(); ++id) {
    if (!used[id])
      continue;
    const specializer::Template& t = templates.at(static_cast<int32_t>(id));
    std::string prefix = fmt::format("{}_{}", t.name, id);
    for (char& c : prefix) // a PTX identifier: letters, digits, _ and $
      if (!std::isalnum(static_cast<unsigned char>(c)))
        c = '_';
    if (t.kind == specializer::Template::Kind::Op && t.op == ops::OpId::Take) {
      // Forward a row gather; backward the table's row-sparse gradient, coalesced.
      GpuKernel take = take_kernel(t, prefix);
      const int64_t d = std::get<jit::RowGatherSpec>(take.spec).widths[0];
      out.push_back(take);
      out.push_back(
          GpuKernel{prefix + "_take_grad", "take rows grad", jit::SegmentSumSpec{d}, false});
      sparse.push_back(d);
      continue;
    }
    std::vector<GpuKernel> ks;
    try {
      ks = gpu_kernels(specializer::compile_template(m, dims, t), prefix);
    } catch (const std::exception& e) {
      ks = {GpuKernel{prefix, "template", HostOnly{std::string("no graph: ") + e.what()}}};
    }
    for (const GpuKernel& k : ks)
      if (const auto* s = std::get_if<jit::SegmentSumSpec>(&k.spec))
        sparse.push_back(s->width);
    out.insert(out.end(), ks.begin(), ks.end());
  }
  std::vector<GpuKernel> generic = generic_kernels(make_layout(plan, residual));
  out.insert(out.end(), generic.begin(), generic.end());
  for (auto rule : {jit::OptimizerStepSpec::Rule::Sgd, jit::OptimizerStepSpec::Rule::Adagrad,
                    jit::OptimizerStepSpec::Rule::Adam}) {
    std::vector<GpuKernel> ks = optimizer_kernels(rule, sparse);
    const char* names[] = {"sgd", "adagrad", "adam"};
    for (GpuKernel& k : ks)
      k.name = std::string(names[static_cast<int>(rule)]) + "_" + k.name;
    out.insert(out.end(), ks.begin(), ks.end());
  }
  return out;
}

std::string kernel_ptx(const GpuKernel& k, const jit::PtxCompiler& ptx) {
  return std::visit(
      Overloaded{[&](const jit::KernelSpec& s) { return ptx.elementwise(s, k.name); },
                 [&](const jit::ReduceSpec& s) { return ptx.reduce(s, k.name); },
                 [&](const jit::RowGatherSpec& s) { return ptx.gather(s, k.name); },
                 [&](const jit::SegmentSumSpec& s) { return ptx.segment_sum(s, k.name); },
                 [&](const jit::OptimizerStepSpec& s) { return ptx.optimizer_step(s, k.name); },
                 [](const auto&) { return std::string(); }},
      k.spec);
}

std::string print_gpu_kernels(const std::vector<GpuKernel>& kernels, const jit::PtxCompiler& ptx) {
  std::string s;
  for (const GpuKernel& k : kernels) {
    s += fmt::format("// {} ({}): {}\n", k.name, k.where, k.canonical_text());
    if (k.ptx())
      s += kernel_ptx(k, ptx);
  }
  return s;
}

} // namespace pejit::runtime::cuda
