// The engine's counters and timings (engine_stats.h).
#include "runtime/engine_stats.h"

#include <algorithm>

namespace pejit::runtime {

namespace {

double secs(StatsRecorder::Clock::time_point a, StatsRecorder::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

} // namespace

void StatsRecorder::plan_hit() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.plan_hits++;
}

void StatsRecorder::plan_miss(double plan_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.plan_misses++;
  stats_.plan_seconds += plan_seconds;
}

void StatsRecorder::plan_prefetched(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.plans_prefetched++;
  stats_.background_plan_seconds += seconds;
}

void StatsRecorder::fallback(const std::string& entry, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.fallbacks[why]++;
  last_explain_[entry] = why;
}

void StatsRecorder::grad_batch() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.grad_batches++;
}

void StatsRecorder::generic_batch(Clock::time_point t0, Clock::time_point t1) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.generic_batches++;
  stats_.generic_seconds += secs(t0, t1);
}

void StatsRecorder::planned_batch(const std::string& entry, Clock::time_point t0,
                                  Clock::time_point t1, bool on_jit, int64_t interpreted_groups,
                                  double interpreted_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.specialized_batches++;
  stats_.specialized_seconds += secs(t0, t1);
  stats_.interpreted_groups += interpreted_groups;
  stats_.interpreted_seconds += interpreted_seconds;
  if (stats_.first_planned_s < 0)
    stats_.first_planned_s = secs(started_, t1);
  if (on_jit) {
    stats_.jit_batches++;
    // The batch's groups in the batching interpreter ran no JIT kernel.
    stats_.jit_seconds += std::max(0.0, secs(t0, t1) - interpreted_seconds);
    if (stats_.first_jit_s < 0)
      stats_.first_jit_s = secs(started_, t1);
  }
  // Only an entry that has fallen back has an explanation to clear.
  if (auto it = last_explain_.find(entry); it != last_explain_.end())
    it->second.clear();
}

void StatsRecorder::compiles(uint64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  if (total > compiles_seen_) {
    compiles_seen_ = total;
    stats_.last_compile_s = secs(started_, Clock::now());
  }
}

void StatsRecorder::interpreted_template(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& all = stats_.interpreted_templates;
  if (std::find(all.begin(), all.end(), what) == all.end())
    all.push_back(what);
}

EngineStats StatsRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string StatsRecorder::explain(const std::string& entry) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = last_explain_.find(entry);
  return it == last_explain_.end() ? std::string() : it->second;
}

} // namespace pejit::runtime
