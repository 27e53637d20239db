// KernelProgram's text form (kernel_program.h): what `pejit dump --emit kernel-program` and
// `--dump-after lower` print, one line per step, a run's spec on the line after it.
#include "specializer/kernel_program.h"

#include "specializer/template_graph.h"
#include "src/util/overloaded.h"

#include <fmt/format.h>

namespace pejit::specializer {

using graph::NodeId;

const char* row_class_name(RowClass c) {
  switch (c) {
  case RowClass::Shared:
    return "shared";
  case RowClass::Rows:
    return "rows";
  case RowClass::Summed:
    return "summed";
  }
  return "?";
}

namespace {

std::string view_text(NodeId id, ColumnView v) {
  if (v.first == graph::kNoNode)
    return fmt::format("%{}", id);
  return v.first == id ? fmt::format("%{}+{}", id, v.second)
                       : fmt::format("%{}@%{}+{}", id, v.first, v.second);
}

std::string run_text(const graph::Graph& g, const ElementwiseRun& r) {
  std::string s =
      fmt::format("run {}: {} node{} w={} in", r.index, r.count, r.count == 1 ? "" : "s", r.width);
  for (size_t i = 0; i < r.inputs.size(); ++i)
    s += (i ? "," : "=") + view_text(r.inputs[i], r.in_view[i]);
  s += " out";
  for (size_t j = 0; j < r.outputs.size(); ++j)
    s += (j ? "," : "=") + view_text(r.outputs[j], r.out_view[j]);
  if (r.core != graph::kNoNode) {
    const graph::Node& c = g.node(r.core);
    s +=
        r.spec.core_first
            ? fmt::format(" core=%{} (epilogue of %{} @ %{})", r.core, c.operands[0], c.operands[1])
            : fmt::format(" core=%{} (feeds %{} @ %{}^T)", r.core, c.operands[0], c.operands[2]);
  }
  if (r.gather != graph::kNoNode)
    s += fmt::format(" gather=%{}", r.gather);
  for (size_t j = 0; j < r.fills.size(); ++j)
    s += fmt::format("{}%{}", j ? "," : " fills=", r.fills[j]);
  return s;
}

} // namespace

std::string print_kernel_program(const TemplateGraph& tg, const KernelProgram& p) {
  const graph::Graph& g = tg.g;
  std::string s;
  if (!p.lowered)
    return "not lowered\n";
  if (!p.supported())
    return "not supported (batching interpreter): " + p.why + "\n";
  for (RowClass c : {RowClass::Shared, RowClass::Rows, RowClass::Summed}) {
    std::string line;
    for (size_t i = 0; i < p.row_class.size(); ++i)
      if (p.row_class[i] == c)
        line += fmt::format(" %{}", i);
    if (!line.empty())
      s += fmt::format("{}:{}\n", row_class_name(c), line);
  }
  if (!p.kernels)
    s += "reference kernels only\n";
  std::string lazy;
  for (size_t a = 0; a < p.lazy_args.size(); ++a)
    if (p.lazy_args[a])
      lazy += fmt::format(" {}", a);
  if (!lazy.empty())
    s += "arguments a panel core gathers (the caller may pass their rows):" + lazy + "\n";
  for (int pass = 0; pass < 2; ++pass) {
    const auto& ks = pass == 0 ? tg.fwd_kernels : tg.bwd_kernels;
    const auto& steps = pass == 0 ? p.fwd : p.bwd;
    for (size_t ki = 0; ki < steps.size() && ki < ks.size(); ++ki) {
      s += fmt::format("{} {}: {}\n", pass == 0 ? "fwd" : "bwd", ki, ks[ki].signature);
      size_t in_run = 0; // the steps of a run's nodes, indented under it
      for (const KernelStep& step : steps[ki].steps) {
        std::string indent = in_run > 0 ? "    " : "  ";
        in_run -= in_run > 0 ? 1 : 0;
        s += indent;
        s += std::visit(
            Overloaded{
                [&](const ElementwiseRun& r) {
                  in_run = r.count;
                  return run_text(g, r) + "\n    spec " + r.spec.canonical_text();
                },
                [&](const RowGemm& m) {
                  const graph::Node& n = g.node(m.node);
                  std::string t = m.transposed
                                      ? fmt::format("gemm %{} = %{} @ %{}^T (rows @ shared^T)",
                                                    m.node, n.operands[0], n.operands[2])
                                      : fmt::format("gemm %{} = %{} @ %{} (rows @ shared)", m.node,
                                                    n.operands[0], n.operands[1]);
                  if (m.fused_into_run >= 0)
                    t += fmt::format(", core of run {}", m.fused_into_run);
                  return t;
                },
                [&](const GatherConcat& c) {
                  return fmt::format("gather %{} (assembled per panel by run {})", c.node, c.run);
                },
                [&](const InPlaceView& v) {
                  return fmt::format("view {} (read in place by the runs)",
                                     graph::print_node(g, v.node));
                },
                [&](const RowReduction& r) {
                  const ReductionSpec& rs = p.reductions[r.index];
                  return fmt::format("reduce %{}: {}{}", r.node, rs.spec.canonical_text(),
                                     rs.per_row != 1 ? fmt::format(" ({} per row)", rs.per_row)
                                                     : std::string());
                },
                [&](const Loss& l) {
                  return fmt::format("loss %{}: {}", l.node,
                                     p.reductions[l.index].spec.canonical_text());
                },
                [&](const DeferredWeightGrad& w) {
                  return fmt::format(
                      "weight grad %{} of param {}, deferred: {}", w.node, w.param,
                      w.index >= 0
                          ? p.weight_grads[static_cast<size_t>(w.index)].spec.canonical_text()
                          : std::string("reference gemm"));
                },
                [&](const SparseEmbeddingGrad& e) {
                  return fmt::format("sparse embedding grad %{} (rows and ids{})", e.node,
                                     e.dense ? ", also dense" : "");
                },
                [&](const RowGather& r) {
                  return fmt::format("row gather %{} by ids{}", r.node,
                                     r.result >= 0 ? fmt::format(" (into result {})", r.result)
                                                   : std::string());
                },
                [&](const ReferenceNode& r) { return "ref " + graph::print_node(g, r.node); },
            },
            step);
        s += "\n";
      }
    }
  }
  for (const ReductionSpec& r : p.reductions)
    if (r.param_sum)
      s += fmt::format("param sum %{}: {}\n", r.node, r.spec.canonical_text());
  for (const ParamGradStep& pg : p.param_grads) {
    using How = ParamGradStep::How;
    const char* how = "";
    switch (pg.how) {
    case How::None:
      how = "none";
      break;
    case How::Deferred:
      how = "deferred weight grad";
      break;
    case How::Sparse:
      how = "row-sparse";
      break;
    case How::SumRows:
      how = pg.reduction >= 0 ? "summed over the rows (kernel)" : "summed over the rows";
      break;
    case How::TimesRows:
      how = "shared, times the rows";
      break;
    case How::AsIs:
      how = "summed";
      break;
    }
    s += pg.node == graph::kNoNode ? fmt::format("param {} grad: {}\n", pg.param, how)
                                   : fmt::format("param {} grad %{}: {}\n", pg.param, pg.node, how);
  }
  return s;
}

} // namespace pejit::specializer
