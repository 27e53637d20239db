// The schedule tuner behind `pejit tune`: for one kernel, compiles each candidate schedule of
// its family on this machine, times it on random data at a few run-time row counts, and
// returns the database entry of the fastest (docs/cli.md). Every candidate must produce
// bitwise the same outputs as the default schedule (schedules change speed, never results);
// one that does not is dropped. No LLVM type here.
#pragma once

#include "jit/jit.h"
#include "jit/schedule.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pejit::jit {

struct TuneTiming {
  /// Run-time row counts timed (elementwise rows; GEMM M, or K for TN); a candidate's cost is
  /// the sum of its times over them. The defaults span a TreeLSTM batch's level sizes.
  std::vector<int64_t> rows = {16, 128, 512};
  double min_ms = 1.0; ///< each timing repeats the call for at least this long
  int repeats = 3;     ///< timings per (candidate, rows); the fastest counts
  /// The default wins unless a candidate is faster by more than this fraction (noise).
  double margin = 0.03;
};

/// The candidate schedules tried for `spec` (the default first), in the family's text.
std::vector<std::string> tune_candidates(const KernelSpec& spec, int lanes);
std::vector<std::string> tune_candidates(const GemmSpec& spec, int lanes);

/// Measures tune_candidates(spec) and returns the winner's entry for (spec.signature(),
/// jit.target_cpu()). `spec` must name no schedule. Throws pejit::Error when it is malformed
/// or the default schedule fails to compile.
ScheduleEntry tune_kernel(Jit& jit, const KernelSpec& spec, const TuneTiming& opt = {});
ScheduleEntry tune_kernel(Jit& jit, const GemmSpec& spec, const TuneTiming& opt = {});

} // namespace pejit::jit
