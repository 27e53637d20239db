// The GPU kernels of a template (docs/cuda.md): what the CUDA executor launches for each step
// of the template's KernelProgram, as specs for the PTX generator (jit/ptx_codegen.h) or as a
// cuBLAS GEMM. A panel run is its gathers and fills (row-gather kernels), the GEMM on cuBLAS,
// then its chain; a reduction or the loss is its reduce kernel; a deferred weight gradient and
// a row GEMM are cuBLAS GEMMs; the row-sparse embedding gradient is a segment sum; a concat, a
// slice and a take of embedding rows are row gathers. A step with none of these (another
// reference node) is listed as `host`: such a template does not run on the device.
#pragma once

#include "jit/kernel_spec.h"
#include "jit/ptx_codegen.h"
#include "jit/reduce_spec.h"
#include "specializer/plan.h"
#include "specializer/residual.h"
#include "specializer/template_graph.h"

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace pejit::runtime::cuda {

/// A GEMM on cuBLAS, row-major C [m, n] = op(A) [m, k] · op(B) [k, n] per group, batched over
/// a level's groups by the launch list. `m` is the rows of the group (-1: known per batch).
struct CublasGemm {
  int64_t m = -1, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool weight_grad = false;           ///< x^T·gy summed over every group's rows (C += per group)
  std::string canonical_text() const; ///< "cublas sgemm m=? n=450 k=300 nn"
};

/// A step the device cannot run (the reason, e.g. "ref %4 = foo(...)").
struct HostOnly {
  std::string why;
};

using GpuKernelSpec =
    std::variant<jit::KernelSpec, jit::ReduceSpec, jit::RowGatherSpec, jit::SegmentSumSpec,
                 jit::OptimizerStepSpec, CublasGemm, HostOnly>;

struct GpuKernel {
  std::string name;  ///< the PTX entry, e.g. "cell_fwd0_run0"
  std::string where; ///< "fwd 0 run 0 gather", "bwd 1 gemm %44", ...
  GpuKernelSpec spec;
  bool forward = true;
  /// A reduction's kernel rows per plan row (specializer::ReductionSpec::per_row).
  int64_t per_row = 1;
  /// A parameter's gradient summed over the rows (ParamGradStep::SumRows), or a weight
  /// gradient: summed over every group of the template after the backward pass.
  bool param_grad = false;
  bool ptx() const; ///< a generated kernel (not cuBLAS, not host-only)
  std::string canonical_text() const;
};

/// The kernels of template graph `tg` (its lowered program), in program order: forward steps,
/// backward steps, then the parameter-gradient sums. `prefix` starts every name (the
/// template's name and id). A template the lowering does not support is one HostOnly entry,
/// but for a take of embedding rows (`op.take`), which is one row gather.
std::vector<GpuKernel> gpu_kernels(const specializer::TemplateGraph& tg, const std::string& prefix);

/// The values a group of template graph `tg` keeps on the device, as floats per row (`per_row`:
/// every node with a value per row) and per group (`per_group`: shared values and gradients
/// summed over the rows). An upper bound: every value of the forward and backward graphs kept
/// for the whole batch (the backward pass reads forward values), views and in-place parts
/// included.
struct TemplateValues {
  int64_t per_row = 0, per_group = 0;
};
TemplateValues template_values(const specializer::TemplateGraph& tg);

/// The row gather that a take of rows of a [V, d] table runs on the device (a listed part).
GpuKernel take_kernel(const specializer::Template& t, const std::string& prefix);

/// The optimizer kernels of a model: one dense step per rule, and one row-sparse step per width
/// of an embedding table in `sparse_widths`.
std::vector<GpuKernel> optimizer_kernels(jit::OptimizerStepSpec::Rule rule,
                                         const std::vector<int64_t>& sparse_widths);

/// Every GPU kernel of the templates `plan` (made from `residual`) launches, in template order
/// (names start with the template's name and id), then the launch list's generic kernels
/// (generic_kernels), then the optimizer kernels of every rule (the sparse ones at the widths of
/// the plan's row-sparse gradients). No JIT and no device needed.
std::vector<GpuKernel> plan_gpu_kernels(const ir::Module& m, const interp::DimBindings& dims,
                                        const specializer::Plan& plan,
                                        const specializer::Residual& residual,
                                        const specializer::TemplateTable& templates);

/// `pejit dump --emit ptx`'s text for `kernels`: per kernel "// NAME (WHERE): TEXT" and, for a
/// generated kernel, its PTX; a host-only or cuBLAS step is its comment line alone.
std::string print_gpu_kernels(const std::vector<GpuKernel>& kernels, const jit::PtxCompiler& ptx);

/// The PTX of a generated kernel.
std::string kernel_ptx(const GpuKernel& k, const jit::PtxCompiler& ptx);

} // namespace pejit::runtime::cuda
