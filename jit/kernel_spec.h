// KernelSpec: what the JIT compiles. Family 1 is a fused elementwise chain over f32 arrays: a
// straight-line program whose values are its inputs followed by its ops' results, evaluated
// independently at every element of a [rows, width] grid. `width` is static (baked into the
// code); `rows` is an argument of the compiled function. No LLVM type here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pejit::ops {
enum class OpId : uint16_t;
enum class GradOp : uint8_t;
} // namespace pejit::ops

namespace pejit::jit {

/// How an input array is laid out relative to the [rows, width] grid.
enum class InputShape {
  Full,         ///< [rows, width], row-major
  RowBroadcast, ///< [width], the same row for every row
  Scalar,       ///< one float for the whole grid
};

/// Elementwise ops. Unary ops read `a`; binary ops read `a` and `b`.
enum class ElementwiseOp {
  Add,        ///< a + b
  Sub,        ///< a - b
  Mul,        ///< a * b
  Div,        ///< a / b
  Neg,        ///< -a
  Exp,        ///< e^a (branch-free polynomial, rel. error <= 3e-7)
  Tanh,       ///< tanh(a) (branch-free, rel. error <= 5e-7)
  Sigmoid,    ///< 1 / (1 + e^-a) (branch-free, rel. error <= 5e-7 for a >= -87)
  Relu,       ///< max(a, 0)
  SigmoidBwd, ///< b * a * (1 - a), with a = sigmoid's output y and b = the output gradient gy
  TanhBwd,    ///< b * (1 - a * a), with a = tanh's output y and b = gy
  ReluBwd,    ///< b where a > 0, else 0, with a = relu's input x and b = gy
};

/// True for ops that read two values.
bool is_binary(ElementwiseOp op);
/// The op's name in canonical text ("add", "sigmoid_bwd", ...).
const char* op_name(ElementwiseOp op);
/// The chain op that computes registry op `id` (gradient helper `g`) on f32 elements; nullopt
/// where the code generator has none.
std::optional<ElementwiseOp> elementwise_op(ops::OpId id);
std::optional<ElementwiseOp> elementwise_op(ops::GradOp g);

/// The GEMM core a panel kernel calls (KernelSpec::panel_rows): `fn(core, r0, n)` computes rows
/// [r0, r0 + n) of its product, C rows = A rows · B (forward x·W), or rows of dX = dY · W^T.
/// Callers derive from it to carry their operands; the generated code only loads `fn`.
/// What a panel kernel is given besides its arrays (KernelSpec::panel_rows). Per panel of rows
/// [r0, r0 + n) the generated code, in this order:
/// 1. with KernelSpec::gather_widths and gather_dst set, assembles rows r of the GEMM's A at
///    gather_dst (gemm_k floats apart) from its parts side by side: part i's row r is at
///    part_rows[i][r], or where part_rows[i] is null at part_src[i] + r * width;
/// 2. for each KernelSpec::fill_inputs[j] whose fill_rows[j] is set, copies row r from
///    fill_rows[j][r] into that input's array (before the chain reads it);
/// 3. calls fn(core, r0, n) (and, for a core-last kernel, runs the chain first, from here on);
/// 4. with KernelSpec::gemm_n > 0 and gemm_b set, computes rows of C [rows, gemm_n] =
///    A [rows, gemm_k] · B: A's row r at gemm_a + r * gemm_k, B packed (GemmSpec::packed_b) at
///    gemm_b, C's row r at gemm_c + r * gemm_c_step (0: C holds one panel's rows, a scratch).
/// The generated code reads the fields at fixed offsets (static_assert in jit.cpp); callers
/// derive from it to carry what their fn needs.
struct PanelCore {
  static constexpr size_t kMaxParts = 8;
  void (*fn)(const PanelCore* core, int64_t r0, int64_t n) = nullptr;
  const float* gemm_a = nullptr;
  const float* gemm_b = nullptr; ///< null: no product here (fn makes it, or none is needed)
  float* gemm_c = nullptr;
  int64_t gemm_c_step = 0;
  float* gather_dst = nullptr; ///< null: A is not assembled here
  const float* part_src[kMaxParts] = {};
  const float* const* part_rows[kMaxParts] = {};
  const float* const* fill_rows[kMaxParts] = {};
};

/// One op of the chain. Value ids: 0..inputs-1 are the inputs, inputs+i is op i's result.
struct ElementwiseStep {
  ElementwiseOp op;
  int a = 0;
  int b = -1; ///< unused (-1) for unary ops
};

/// A fused elementwise kernel. Compiled to `void k(float** in, float** out, int64_t rows)`:
/// out[j][r*stride + c] = value outputs[j] at (r, c), stride = out_strides[j] (or width).
/// A Full input is read at in[i][r*stride + c] the same way: a strided array is a column
/// block of a wider row-major array (a split's part read in place, a concat's part written
/// in place), its pointer offset to the block by the caller.
struct KernelSpec {
  int64_t width = 1;
  std::vector<InputShape> inputs;
  std::vector<ElementwiseStep> ops;
  std::vector<int> outputs; ///< value ids written, in order
  /// Row strides in floats of the Full inputs / the outputs; empty, or 0 at an index: width.
  std::vector<int64_t> in_strides{}, out_strides{};
  std::string dtype = "f32";
  /// "default" (the loop vectorizer's choice: what compiles unless a tuned database or the
  /// caller says otherwise) or "vWxU": vectors of W floats, U interleaved (jit/schedule.h).
  std::string schedule = "default";

  /// Fused with a GEMM core (0: a plain kernel). The kernel then compiles to
  /// `void k(float** in, float** out, int64_t rows, const PanelCore* core)` and works on row
  /// panels of `panel_rows` rows (the last one shorter): per panel it calls the core for the
  /// panel's rows and runs the chain on them, core first (`core_first`: forward, the chain is
  /// the GEMM's epilogue and reads its rows while they are in cache) or last (backward: the
  /// chain makes dY's rows, then the core multiplies them). Row r of every Full array is at
  /// r * stride, as in a plain kernel.
  int64_t panel_rows = 0;
  bool core_first = true;
  /// Per Full input of a panel kernel, true: the array holds only the current panel's rows
  /// (scratch the core refills per panel: the GEMM's product when nothing else reads it), so
  /// its pointer is not advanced. Empty: none.
  std::vector<bool> in_panel{};
  bool panel_input(size_t i) const { return i < in_panel.size() && in_panel[i]; }
  /// A panel kernel's GEMM core as generated code (0, 0: none; the core's fn does it all):
  /// C [rows, gemm_n] = A [rows, gemm_k] · B packed, per panel after the core's fn, when the
  /// core sets PanelCore::gemm_b. Lowered as GemmSpec{nn, n, k, packed_b} into the kernel.
  int64_t gemm_n = 0, gemm_k = 0;
  /// With a GEMM core, core first: the widths of the parts the kernel assembles A's rows from
  /// (PanelCore step 1; they sum to gemm_k). Empty: A is given.
  std::vector<int64_t> gather_widths{};
  /// Full inputs (not a panel's scratch) whose rows the kernel may copy in per panel
  /// (PanelCore step 2).
  std::vector<int> fill_inputs{};

  /// Testing only: the lowering leaves a basic block without a terminator, so the module fails
  /// llvm::verifyModule. Part of the canonical text so that it never hits a valid cache entry.
  bool inject_invalid_ir = false;

  /// Canonical text: equal for specs that compile to the same code (target excluded; the cache
  /// appends it). Example: "ew f32 w=16 in=F,R,S ops=mul(0,1);sigmoid(3) out=4 sched=default".
  std::string canonical_text() const;
  /// The canonical text without the schedule and the panel (" panel=48 core=first scratch=0",
  /// after the schedule in the canonical text): what a tuned database is keyed by
  /// (a panel kernel's chain takes the schedule tuned for the plain kernel).
  std::string signature() const;

  int64_t in_stride(size_t i) const {
    return i < in_strides.size() && in_strides[i] != 0 ? in_strides[i] : width;
  }
  int64_t out_stride(size_t j) const {
    return j < out_strides.size() && out_strides[j] != 0 ? out_strides[j] : width;
  }
  /// Some Full input or some output has a row stride other than the width.
  bool strided() const;

  /// Throws pejit::Error naming the problem when the spec is malformed (an op reading a value
  /// not defined before it, no outputs, width < 1, an unknown dtype, a bad schedule).
  void validate() const;
};

} // namespace pejit::jit
