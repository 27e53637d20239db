// The launch list of a plan on the GPU (docs/cuda.md): per level, forward in level order and
// backward in reverse, what the CUDA executor enqueues on its stream: each template's
// generated kernels, one launch per group with its grid and block, and its GEMMs as one cuBLAS
// call per (level, template, GEMM) batched over the level's groups of that template (a
// grouped GEMM: the same n and k, each group its own m). After the backward levels, each
// template's parameter gradients are summed over all its groups: a weight gradient as one
// cuBLAS call accumulating every group (beta = 1 after the first), a per-row gradient's sum as
// one reduce launch per group into its row of a [groups, width] block, then one sum of those
// rows. Plain C++, made on the host once per plan (and cached with it).
#pragma once

#include "runtime/cuda/gpu_kernels.h"
#include "runtime/exec_layout.h"
#include "specializer/plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pejit::runtime::cuda {

struct Launch {
  enum class Pass : uint8_t { Forward, Backward, ParamGrads };
  Pass pass = Pass::Forward;
  int32_t level = -1;          ///< the plan level (-1: after the backward levels)
  int32_t tmpl = -1;           ///< the template
  std::string kernel;          ///< GpuKernel::name
  std::vector<int32_t> groups; ///< the groups it covers (one for a generated kernel)
  bool cublas = false;
  // A generated kernel: elements (or rows, or columns) its grid-stride loop covers.
  int64_t elements = 0;
  uint32_t grid = 0, block = 0;
  // A cuBLAS call: per group its rows m; n, k and the transposes from the kernel's spec.
  std::vector<int64_t> gemm_m;
  int64_t gemm_n = 0, gemm_k = 0;
  bool trans_a = false, trans_b = false;
  bool accumulate = false; ///< C += each group's product (a weight gradient over the groups)
  bool fold = false;       ///< the sum of a [groups, width] block of per-group sums
};

struct LaunchOptions {
  uint32_t block = 256;
  /// The most blocks of one launch: beyond it the grid-stride loop takes several elements
  /// per thread (132 SMs of an H100/H200, 16 blocks each).
  uint32_t max_grid = 132 * 16;
};

struct LaunchList {
  std::vector<Launch> launches;
  size_t kernel_launches = 0, cublas_calls = 0;
  /// Templates of the plan with a host-only step (the plan does not run on the device), and
  /// why: empty when it does.
  std::vector<std::string> host_only;
  bool runs_on_device() const { return host_only.empty(); }
  /// One line per launch: "fwd L2 cell_3_fwd0_run0 groups=4 elements=N grid=G block=B", or for
  /// cuBLAS "... cublas m=3,5 n=750 k=300 nn" (deterministic: golden-testable).
  std::string describe() const;
};

/// The launches of `plan` (its executor layout `layout`): per group first the gathers of its
/// per-row arguments (a generic row gather per width, rows listed by the plan's row sources),
/// a loss-sum group (SumN) as a segment sum of its terms; with `training`, per group of the
/// backward levels the sums of its results' seeds (seed maps) before its kernels, then the
/// parameter gradients. `kernels[t]`: template t's kernels (gpu_kernels; empty for templates
/// the plan does not launch). Throws pejit::Error when a launched template has no kernels
/// listed or the layout is not the plan's.
LaunchList make_launch_list(const specializer::Plan& plan, const ExecLayout& layout,
                            const std::vector<std::vector<GpuKernel>>& kernels, bool training,
                            const LaunchOptions& options = {});

/// The plan-independent kernels the launch list names by width: "rows_gather_w{W}" (a per-row
/// argument's gather), "seed_sum_w{W}" (a result's seeds, element offsets) and "sumn_w1" (a
/// loss sum's terms), for every width `layout` needs, in width order.
std::vector<GpuKernel> generic_kernels(const ExecLayout& layout);

/// Blocks of `block` threads for `elements` (at least 1, at most options.max_grid).
uint32_t grid_for(int64_t elements, const LaunchOptions& options);

} // namespace pejit::runtime::cuda
