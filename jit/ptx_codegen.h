// PTX for NVIDIA GPUs through LLVM's NVPTX backend: the kernels a plan runs on the device, as
// PTX text for the CUDA driver (cuModuleLoadData) or for ptxas. The elementwise chains and the
// row reductions and loss are the CPU families' specs (kernel_spec.h, reduce_spec.h) lowered for
// the GPU, one thread per element or per row in a grid-stride loop, with the CPU kernels'
// operations (the same emitters); the GPU-only kinds below gather rows, coalesce a row-sparse
// gradient and step an optimizer. GEMMs are cuBLAS's, not generated. No LLVM type here.
#pragma once

#include "jit/kernel_spec.h"
#include "jit/reduce_spec.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pejit::jit {

/// Assembles dst [rows, K] (row stride dst_stride, 0: K = the sum of widths) from parts side by
/// side, as a panel kernel's gather does on the CPU (PanelCore step 1; a fill is one part):
/// part i's row r is at rows_i[r] (a device table of row addresses) or, where rows_i is null,
/// at src_i + r * src_stride(i). Kernel `(f32* dst, {f32* src_i, f32** rows_i}..., i64 rows)`.
/// Also a concat (parts dense), a slice (one part, its source a column block of a wider
/// array) and a take of embedding rows (one part, its rows listed).
struct RowGatherSpec {
  std::vector<int64_t> widths;
  std::vector<int64_t> src_strides{}; ///< per part; empty or 0: the part's width
  int64_t dst_stride = 0;
  int64_t stride() const; ///< dst_stride, or the sum of widths
  int64_t src_stride(size_t i) const;
  std::string canonical_text() const; ///< "gather w=100,100 src=100,100 stride=200"
};

/// Coalesces a row-sparse gradient (an embedding's): out[u] = the sum of g's rows order[k] for
/// k in [offsets[u], offsets[u + 1]), in k order, starting from the first (RowSparse::coalesce's
/// order and bits). Kernel `(f32* out, f32* g, i64* order, i64* offsets, i64 segments)`. With
/// `element_offsets`, order[k] is the element offset of a row in g (not its row number): the
/// executor's seed sums, each result row's seed the sum of its consumers' gradient rows
/// anywhere in the arena, and the loss sum (SumN) of terms anywhere.
struct SegmentSumSpec {
  int64_t width = 1;
  bool element_offsets = false;
  std::string canonical_text() const; ///< "segment_sum w=300", "segment_sum w=150 elems"
};

/// One optimizer step on a parameter (runtime/optim/optimizer.cpp's update_span, operation for
/// operation): dense over `rows` elements, or row-sparse over `rows` coalesced rows of `width`
/// at ids[u]. Kernel `(f32* p, f32* g, f32* a, f32* b, i64* ids, i64 rows, f32 lr, f32 wd,
/// f32 coef, f32 eps, f32 b1, f32 b2, f32 one_minus_b1, f32 one_minus_b2, f32 step_size,
/// f32 bc2_sqrt)`; a and b are the rule's state (Adagrad: a; Adam: a = m, b = v).
struct OptimizerStepSpec {
  enum class Rule : uint8_t { Sgd, Adagrad, Adam };
  Rule rule = Rule::Adagrad;
  bool sparse = false;
  int64_t width = 1;                  ///< sparse: floats per row
  std::string canonical_text() const; ///< "optim adagrad sparse w=300"
};

struct PtxOptions {
  std::string arch = "sm_90"; ///< the GPU the PTX is for (--gpu-name of ptxas)
};

/// One NVPTX target machine; thread-safe (compiles are serialized). Every kernel is verified,
/// optimized at O3 and printed as a self-contained PTX module whose one `.entry` is `name`.
/// Floating point as on the CPU: no FMA contraction, IEEE division and square root.
class PtxCompiler {
public:
  /// Throws pejit::Error when this LLVM has no NVPTX target.
  explicit PtxCompiler(PtxOptions options = {});
  ~PtxCompiler();
  PtxCompiler(const PtxCompiler&) = delete;
  PtxCompiler& operator=(const PtxCompiler&) = delete;

  /// True when LLVM was built with the NVPTX target (llvm-config --targets-built).
  static bool available();

  /// A family-1 chain as a plain kernel `(f32* in..., f32* out..., i64 rows)`: one thread per
  /// element of the [rows, width] grid. A panel spec's chain only (its GEMM is cuBLAS's, its
  /// gathers RowGatherSpec kernels): see gpu_chain().
  std::string elementwise(const KernelSpec& spec, const std::string& name) const;
  /// A family-3 kernel `(void* in..., void* out, i64 rows, i64* bad)` (reduce_codegen.cpp).
  std::string reduce(const ReduceSpec& spec, const std::string& name) const;
  std::string gather(const RowGatherSpec& spec, const std::string& name) const;
  std::string segment_sum(const SegmentSumSpec& spec, const std::string& name) const;
  std::string optimizer_step(const OptimizerStepSpec& spec, const std::string& name) const;

  const std::string& arch() const;

private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

/// The chain of a (panel) spec as the GPU runs it: no panel, no GEMM core, no gathers or fills
/// (those run before it as their own kernels), every Full input a whole array.
KernelSpec gpu_chain(const KernelSpec& spec);

} // namespace pejit::jit
