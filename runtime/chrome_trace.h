// ChromeTrace: the engine's record of pipeline stages and batch executions, written as a
// Chrome trace (chrome://tracing, Perfetto) by Engine::write_trace().
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace pejit::runtime {

/// Timed events recorded from any thread. Owns the event list and the thread numbering, both
/// under its one lock; records nothing when constructed off.
class ChromeTrace {
public:
  using Clock = std::chrono::steady_clock;

  explicit ChromeTrace(bool on) : on_(on), t0_(Clock::now()) {}
  /// An event `name` of category `cat` from `a` to `b`, on the calling thread.
  void add(const std::string& name, const char* cat, Clock::time_point a, Clock::time_point b);
  /// Writes the trace JSON (through a temporary file); pejit::Error if it cannot.
  void write(const std::string& path) const;

private:
  struct Event {
    std::string name;
    const char* cat;
    double ts, dur;
    int tid;
  };
  const bool on_;
  const Clock::time_point t0_;
  mutable std::mutex mu_;
  std::vector<Event> events_;            // under mu_
  std::unordered_map<size_t, int> tids_; // under mu_: thread hash -> trace thread number
};

} // namespace pejit::runtime
