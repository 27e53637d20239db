// ExecLayout: the plan executor's index maps and arena offsets for one plan, made once per
// plan (by the pipeline, with the plan) and cached with it. See plan_executor.h for how the
// executor uses the blocks: results, gathered arguments, and for training seeds and argument
// gradients, each result's seed read from its consumers' gradient rows.
#pragma once

#include "specializer/plan.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pejit::runtime {

/// Where one row lives when a run starts: in the arena (kind Inst: `off` is an arena offset),
/// or inside a batch input, a parameter or a constant tensor (`index`, `off` into it).
struct RowSource {
  specializer::Ref::Kind kind = specializer::Ref::Kind::Inst;
  int32_t index = -1;
  int64_t off = 0;
};

/// The executor's index maps and arena offsets for one plan (element offsets, 4-byte elements).
/// The per-row index maps of every argument and result are slices of three flat arrays, so a
/// layout is a few allocations whatever the plan's size (a batch's loss sum alone has one
/// argument per labelled node).
struct ExecLayout {
  struct Arg {
    bool shared = false;
    int64_t off = -1;      ///< per-row: the gathered [rows, ...] block
    int64_t grad_off = -1; ///< per-row f32: its gradient block (training)
    int64_t row_elems = 0;
    /// Per-row: row i is gathered from sources[first_row + i], i < num_rows (rows()).
    uint32_t first_row = 0, num_rows = 0;
  };
  struct Result {
    int64_t off = -1;      ///< the [rows, ...] block
    int64_t seed_off = -1; ///< f32: the block of incoming gradients (training)
    int64_t row_elems = 0;
    /// With a seed block: row i's seed = sum of arena[seed_src[k]..] for k in
    /// [seed_start[seed_first + i], seed_start[seed_first + i + 1]).
    uint32_t seed_first = 0;
  };
  struct Group {
    int64_t rows = 0;
    std::vector<Arg> args;
    std::vector<Result> results;
  };
  std::vector<Group> groups;
  std::vector<RowSource> outputs;
  std::vector<RowSource> sources;  ///< the per-row arguments' rows, argument after argument
  std::vector<int32_t> seed_start; ///< per result with a seed block: rows + 1 bounds in seed_src
  std::vector<int64_t> seed_src;
  int64_t forward_elems = 0; ///< arena elements a forward run needs
  int64_t total_elems = 0;   ///< with the seed and gradient blocks

  std::span<const RowSource> rows(const Arg& a) const {
    return {sources.data() + a.first_row, a.num_rows};
  }
  size_t bytes() const; ///< memory this layout holds (for cache accounting)
};

/// The layout of `plan`, made from the residual `r` (whose instances give the per-row
/// arguments' rows: GroupArg). Deterministic: depends only on the two.
ExecLayout make_layout(const specializer::Plan& plan, const specializer::Residual& r);

} // namespace pejit::runtime
