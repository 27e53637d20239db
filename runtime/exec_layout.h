// ExecLayout: the plan executor's index maps and arena offsets for one plan, made once per
// plan (by the pipeline, with the plan) and cached with it. See plan_executor.h for how the
// executor uses the blocks: results, gathered arguments, and for training seeds and argument
// gradients, each result's seed read from its consumers' gradient rows.
#pragma once

#include "specializer/plan.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pejit::runtime {

/// Where one row lives when a run starts: in the arena (kind Inst: `off` is an arena offset),
/// or inside a batch input, a parameter or a constant tensor (`index`, `off` into it).
struct RowSource {
  spec::Ref::Kind kind = spec::Ref::Kind::Inst;
  int32_t index = -1;
  int64_t off = 0;
};

/// The executor's index maps and arena offsets for one plan (element offsets, 4-byte elements).
struct ExecLayout {
  struct Arg {
    bool shared = false;
    int64_t off = -1;      ///< per-row: the gathered [rows, ...] block
    int64_t grad_off = -1; ///< per-row f32: its gradient block (training)
    int64_t row_elems = 0;
    std::vector<RowSource> rows; ///< per-row: where row i is gathered from
  };
  struct Result {
    int64_t off = -1;      ///< the [rows, ...] block
    int64_t seed_off = -1; ///< f32: the block of incoming gradients (training)
    int64_t row_elems = 0;
    /// Row i's seed = sum of arena[seed_src[k]..] for k in [seed_start[i], seed_start[i+1]).
    std::vector<int32_t> seed_start;
    std::vector<int64_t> seed_src;
  };
  struct Group {
    int64_t rows = 0;
    std::vector<Arg> args;
    std::vector<Result> results;
  };
  std::vector<Group> groups;
  std::vector<RowSource> outputs;
  int64_t forward_elems = 0; ///< arena elements a forward run needs
  int64_t total_elems = 0;   ///< with the seed and gradient blocks

  size_t bytes() const; ///< memory this layout holds (for cache accounting)
};

/// The layout of `plan` (deterministic; depends only on the plan).
ExecLayout make_layout(const spec::Plan& plan);

} // namespace pejit::runtime
