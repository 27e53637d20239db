// Pipeline: the engine's background work in auto mode. Batches handed to prefetch() are
// planned ahead by a TBB pipeline (serial input, parallel planning, bounded by the
// lookahead); other tasks (kernel compiles) run beside it, in the same low-priority arena.
#pragma once

#include "src/interp/value.h"

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace pejit::runtime {

/// Owns the TBB arena and task group, the queue of batches waiting to be planned, and the
/// count of outstanding work (queued batches and tasks), the queue and the count under its
/// one lock. What a batch's work is (plan and publish it) is the engine's `plan_one`; a
/// failure in it or in a task is caught at the task's boundary (best effort: that batch is
/// planned inline or runs generic; what did not compile runs on reference kernels).
/// Destroying it drops the batches still queued and waits for the work under way.
class Pipeline {
public:
  using PlanOne = std::function<void(const std::string& entry, const interp::Value& batch)>;

  /// At most `lookahead` batches are planned at once.
  Pipeline(int lookahead, PlanOne plan_one);
  ~Pipeline();

  /// Queues these batches of `entry`, starting the TBB pipeline if it is idle.
  void prefetch(const std::string& entry, std::vector<interp::Value> batches);
  /// Runs `task` in the arena, counted like a queued batch so that drain() waits for it.
  void background(std::function<void()> task);
  /// Waits until every queued batch and task is done (and, through the lock, makes what they
  /// did visible to the caller).
  void drain();

private:
  void pump(); // the TBB pipeline over the queue, until it is empty
  void done(); // one batch or task finished

  const size_t lookahead_;
  const PlanOne plan_one_;
  struct Tbb; // the arena and the task group (TBB stays out of this header)
  std::unique_ptr<Tbb> tbb_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, interp::Value>> queue_; // under mu_
  size_t outstanding_ = 0;                                  // under mu_
  bool running_ = false; ///< under mu_: a pump() is under way or enqueued
};

} // namespace pejit::runtime
