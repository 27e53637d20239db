// The in-situ profile of plan runs (ExecOptions::profile): time, launches and useful GEMM
// flops per kernel family, filled by the template-graph runner and the plan executor and read
// by pejit_profile_bench.
#pragma once

#include "src/graph/graph.h"
#include "src/tensor/tensor.h"

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <utility>

namespace pejit::runtime {

enum class Family : uint8_t {
  GemmForward,    ///< x @ W over a group's rows
  GemmInputGrad,  ///< dX = dY · W^T (W^T made once per plan run, counted here)
  GemmWeightGrad, ///< dW = X^T · dY (one stacked GEMM per weight per run)
  PanelForward,   ///< x @ W fused per row panel with its epilogue run (JIT panel kernels)
  PanelInputGrad, ///< a backward run fused per row panel with dX = dY · W^T
  ElementwiseJit, ///< compiled elementwise runs
  ElementwiseRef, ///< elementwise ops on reference kernels
  Layout,         ///< concat, split, slice, take, reshapes and their gradients
  Other,          ///< reductions, softmax, losses and their gradients
  Gathers,        ///< the executor's argument gathers and seed gather-sums
  Packing,        ///< W and W^T packed for the panel kernels' GEMM cores (once per plan run)
  kCount
};
const char* family_name(Family f);

struct FamilyTime {
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0; ///< useful multiply-adds x 2 (GEMM families only)
};
using Profile = std::array<FamilyTime, static_cast<size_t>(Family::kCount)>;
using ProfileClock = std::chrono::steady_clock;

/// One launch of family `f` that started at `t0` and ends now.
void record(Profile& p, Family f, ProfileClock::time_point t0, double flops = 0);
/// `into` += `p`, family by family.
void accumulate(Profile& into, const Profile& p);

/// The family of graph node `id`, run on a reference kernel over `rows` rows, and its useful
/// flops if it is a GEMM; `vals` holds the node values (the node's own included).
std::pair<Family, double> family_of(const graph::Graph& g, graph::NodeId id,
                                    std::span<const Tensor> vals, int64_t rows);

} // namespace pejit::runtime
