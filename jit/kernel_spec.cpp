// KernelSpec's canonical text and validation: plain C++, no LLVM.
#include "jit/kernel_spec.h"

#include "jit/schedule.h"
#include "pejit/error.h"
#include "src/ops/emitter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string_view>

namespace pejit::jit {

bool is_binary(ElementwiseOp op) {
  switch (op) {
  case ElementwiseOp::Add:
  case ElementwiseOp::Sub:
  case ElementwiseOp::Mul:
  case ElementwiseOp::Div:
  case ElementwiseOp::SigmoidBwd:
  case ElementwiseOp::TanhBwd:
  case ElementwiseOp::ReluBwd:
    return true;
  default:
    return false;
  }
}

const char* op_name(ElementwiseOp op) {
  switch (op) {
  case ElementwiseOp::Add:
    return "add";
  case ElementwiseOp::Sub:
    return "sub";
  case ElementwiseOp::Mul:
    return "mul";
  case ElementwiseOp::Div:
    return "div";
  case ElementwiseOp::Neg:
    return "neg";
  case ElementwiseOp::Exp:
    return "exp";
  case ElementwiseOp::Tanh:
    return "tanh";
  case ElementwiseOp::Sigmoid:
    return "sigmoid";
  case ElementwiseOp::Relu:
    return "relu";
  case ElementwiseOp::SigmoidBwd:
    return "sigmoid_bwd";
  case ElementwiseOp::TanhBwd:
    return "tanh_bwd";
  case ElementwiseOp::ReluBwd:
    return "relu_bwd";
  }
  return "?";
}

std::optional<ElementwiseOp> elementwise_op(ops::OpId id) {
  using ops::OpId;
  switch (id) {
  case OpId::Add:
    return ElementwiseOp::Add;
  case OpId::Sub:
    return ElementwiseOp::Sub;
  case OpId::Mul:
    return ElementwiseOp::Mul;
  case OpId::Div:
    return ElementwiseOp::Div;
  case OpId::Neg:
    return ElementwiseOp::Neg;
  case OpId::Exp:
    return ElementwiseOp::Exp;
  case OpId::Tanh:
    return ElementwiseOp::Tanh;
  case OpId::Sigmoid:
    return ElementwiseOp::Sigmoid;
  case OpId::Relu:
    return ElementwiseOp::Relu;
  default:
    return std::nullopt;
  }
}

std::optional<ElementwiseOp> elementwise_op(ops::GradOp g) {
  switch (g) {
  case ops::GradOp::SigmoidBwd:
    return ElementwiseOp::SigmoidBwd;
  case ops::GradOp::TanhBwd:
    return ElementwiseOp::TanhBwd;
  case ops::GradOp::ReluBwd:
    return ElementwiseOp::ReluBwd;
  default:
    return std::nullopt;
  }
}

std::string KernelSpec::canonical_text() const {
  std::string s = signature();
  // The schedule goes before the testing flag, as canonical texts have always read.
  bool invalid = inject_invalid_ir;
  if (invalid)
    s.resize(s.size() - std::string_view(" invalid").size());
  s += fmt::format(" sched={}", schedule);
  if (panel_rows > 0) {
    s += fmt::format(" panel={} core={}", panel_rows, core_first ? "first" : "last");
    std::string scratch;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (panel_input(i))
        scratch += fmt::format("{}{}", scratch.empty() ? "" : ",", i);
    if (!scratch.empty())
      s += " scratch=" + scratch;
    if (gemm_n > 0)
      s += fmt::format(" gemm={}x{}", gemm_n, gemm_k);
    if (!gather_widths.empty())
      s += fmt::format(" gather={}", fmt::join(gather_widths, ","));
    if (!fill_inputs.empty())
      s += fmt::format(" fill={}", fmt::join(fill_inputs, ","));
  }
  if (invalid)
    s += " invalid";
  return s;
}

std::string KernelSpec::signature() const {
  std::string s = fmt::format("ew {} w={} in=", dtype, width);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i)
      s += ',';
    s += inputs[i] == InputShape::Full ? 'F' : inputs[i] == InputShape::RowBroadcast ? 'R' : 'S';
    if (inputs[i] == InputShape::Full && in_stride(i) != width)
      s += fmt::format("/{}", in_stride(i));
  }
  s += " ops=";
  for (size_t i = 0; i < ops.size(); ++i) {
    if (i)
      s += ';';
    s += is_binary(ops[i].op) ? fmt::format("{}({},{})", op_name(ops[i].op), ops[i].a, ops[i].b)
                              : fmt::format("{}({})", op_name(ops[i].op), ops[i].a);
  }
  s += " out=";
  for (size_t i = 0; i < outputs.size(); ++i)
    s += out_stride(i) != width ? fmt::format("{}{}/{}", i ? "," : "", outputs[i], out_stride(i))
                                : fmt::format("{}{}", i ? "," : "", outputs[i]);
  if (inject_invalid_ir)
    s += " invalid";
  return s;
}

bool KernelSpec::strided() const {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i] == InputShape::Full && in_stride(i) != width)
      return true;
  for (size_t j = 0; j < outputs.size(); ++j)
    if (out_stride(j) != width)
      return true;
  return false;
}

void KernelSpec::validate() const {
  if (dtype != "f32")
    throw Error(fmt::format("jit: elementwise kernel: unsupported dtype '{}'", dtype));
  if (width < 1)
    throw Error(fmt::format("jit: elementwise kernel: width {} < 1", width));
  if (outputs.empty())
    throw Error("jit: elementwise kernel has no outputs");
  (void)parse_elementwise_schedule(schedule);
  int defined = static_cast<int>(inputs.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const ElementwiseStep& st = ops[i];
    bool bad = st.a < 0 || st.a >= defined ||
               (is_binary(st.op) ? (st.b < 0 || st.b >= defined) : st.b != -1);
    if (bad)
      throw Error(fmt::format("jit: elementwise op {} ({}) reads a value not defined before it", i,
                              op_name(st.op)));
    ++defined;
  }
  for (int o : outputs)
    if (o < 0 || o >= defined)
      throw Error(fmt::format("jit: elementwise output {} is not a value of the kernel", o));
  if ((!in_strides.empty() && in_strides.size() != inputs.size()) ||
      (!out_strides.empty() && out_strides.size() != outputs.size()))
    throw Error("jit: elementwise kernel: one stride per input / output, or none");
  for (size_t i = 0; i < in_strides.size(); ++i)
    if (in_strides[i] != 0 && (in_strides[i] < width || inputs[i] != InputShape::Full))
      throw Error(fmt::format("jit: elementwise input {}: stride {} (width {}, full inputs only)",
                              i, in_strides[i], width));
  for (size_t j = 0; j < out_strides.size(); ++j)
    if (out_strides[j] != 0 && out_strides[j] < width)
      throw Error(fmt::format("jit: elementwise output {}: stride {} < width {}", j, out_strides[j],
                              width));
  if (panel_rows < 0 || panel_rows > 4096)
    throw Error(fmt::format("jit: elementwise kernel: panel of {} rows (0..4096)", panel_rows));
  if (!in_panel.empty() && in_panel.size() != inputs.size())
    throw Error("jit: elementwise kernel: one panel flag per input, or none");
  for (size_t i = 0; i < in_panel.size(); ++i)
    if (in_panel[i] && (panel_rows == 0 || inputs[i] != InputShape::Full))
      throw Error(fmt::format("jit: elementwise input {}: a panel's scratch needs a panel kernel "
                              "and a full input",
                              i));
  if (gemm_n < 0 || gemm_k < 0 || (gemm_n == 0) != (gemm_k == 0) || (gemm_n > 0 && panel_rows == 0))
    throw Error(fmt::format("jit: elementwise kernel: GEMM core {}x{} (both > 0, and a panel "
                            "kernel; or both 0)",
                            gemm_n, gemm_k));
  int64_t gathered = 0;
  for (int64_t w : gather_widths)
    gathered += w > 0 ? w : -1;
  if (!gather_widths.empty() && (gemm_n == 0 || !core_first ||
                                 gather_widths.size() > PanelCore::kMaxParts || gathered != gemm_k))
    throw Error(fmt::format("jit: elementwise kernel: gather of {} parts into the GEMM's {} "
                            "columns (widths >= 1 summing to gemm_k, at most {} parts, a "
                            "core-first GEMM core)",
                            gather_widths.size(), gemm_k, PanelCore::kMaxParts));
  if (fill_inputs.size() > PanelCore::kMaxParts || (!fill_inputs.empty() && panel_rows == 0))
    throw Error("jit: elementwise kernel: filled inputs need a panel kernel (at most 8)");
  for (int t : fill_inputs)
    if (t < 0 || static_cast<size_t>(t) >= inputs.size() ||
        inputs[static_cast<size_t>(t)] != InputShape::Full || panel_input(static_cast<size_t>(t)))
      throw Error(fmt::format("jit: elementwise kernel: filled input {} is not a full input", t));
}

} // namespace pejit::jit
