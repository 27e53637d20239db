// StatsRecorder: the engine's counters and timings (EngineStats) and the reason each entry's
// last batch ran generic, updated by the dispatcher and the pipeline.
#pragma once

#include "runtime/engine.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace pejit::runtime {

/// Owns the EngineStats it hands out, the per-entry explanations and the kernel-cache compile
/// count last seen, all under its one lock. Times are measured from its construction (the
/// engine's start). The fields other owners keep (plan evictions, kernel cache counts, compile
/// failures) are filled in by Engine::stats(), not here.
class StatsRecorder {
public:
  using Clock = std::chrono::steady_clock;

  /// A batch found its plan in the cache.
  void plan_hit();
  /// A batch missed the cache; `plan_seconds`: the inline PE + planning it paid (0 if none).
  void plan_miss(double plan_seconds);
  /// The pipeline published a plan made in `seconds`.
  void plan_prefetched(double seconds);
  /// A batch ran with gradients (value_and_grad).
  void grad_batch();
  /// A batch of `entry` will run generic because of `why`; explain(entry) returns it.
  void fallback(const std::string& entry, const std::string& why);
  /// A batch ran on the generic interpreter from `t0` to `t1`.
  void generic_batch(Clock::time_point t0, Clock::time_point t1);
  /// A batch of `entry` ran its plan from `t0` to `t1`, on JIT kernels if `on_jit`, with
  /// `interpreted_groups` groups and `interpreted_seconds` of it in the batching interpreter;
  /// clears explain(entry).
  void planned_batch(const std::string& entry, Clock::time_point t0, Clock::time_point t1,
                     bool on_jit, int64_t interpreted_groups = 0, double interpreted_seconds = 0);
  /// The kernel cache has compiled `total` kernels so far: if that grew, now is when the
  /// last one finished (EngineStats::last_compile_s).
  void compiles(uint64_t total);
  /// Template `what` ("template: why") ran in the batching interpreter (kept once).
  void interpreted_template(const std::string& what);

  EngineStats snapshot() const;
  std::string explain(const std::string& entry) const;

private:
  const Clock::time_point started_ = Clock::now();
  mutable std::mutex mu_;
  EngineStats stats_;                               // under mu_
  std::map<std::string, std::string> last_explain_; // under mu_
  uint64_t compiles_seen_ = 0;                      // under mu_
};

} // namespace pejit::runtime
