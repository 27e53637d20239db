// Pipeline: the engine's background work in auto mode. Batches handed to prefetch() are
// planned ahead by a TBB pipeline (serial input, parallel planning, bounded by the
// lookahead), or, when a step's work is split across threads, by planner threads at the OS's
// idle priority; other tasks (kernel compiles) run in a low-priority TBB arena.
#pragma once

#include "src/interp/value.h"

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

  /// At most `lookahead` batches are planned at once. `idle_planners` > 0: batches are planned
  /// by that many threads of their own at the OS's idle priority (SCHED_IDLE) instead of on
  /// TBB. That is for a step split across threads (SessionOptions::threads > 1): TBB does not
  /// preempt a task, so a plan taken by the worker a step's blocks need would delay the step,
  /// whereas an idle-priority thread only runs on a core nothing else wants. Such a planner
  /// keeps at most `lookahead` batches queued: when it falls behind, the oldest are dropped
  /// (their steps plan them inline).
  Pipeline(int lookahead, PlanOne plan_one, int idle_planners = 0);
  ~Pipeline();

  /// Queues these batches of `entry`, starting the TBB pipeline if it is idle.
  void prefetch(const std::string& entry, std::vector<interp::Value> batches);
  /// Runs `task` in the arena, counted like a queued batch so that drain() waits for it.
  void background(std::function<void()> task);
  /// Work nothing waits for (freeing a stepped batch): on the idle planners where there are
  /// some, before their next batch; else as background(). Never dropped.
  void later(std::function<void()> task);
  /// Waits until every queued batch and task is done (and, through the lock, makes what they
  /// did visible to the caller).
  void drain();

private:
  void pump();        // the TBB pipeline over the queue, until it is empty
  void done();        // one batch or task finished
  void plan_idle();   // an idle planner's loop, until stop_
  bool plan_queued(); // runs the first later() task, else plans the queue's first batch
                      // (false: both empty)

  const size_t lookahead_;
  const PlanOne plan_one_;
  struct Tbb; // the arena and the task group (TBB stays out of this header)
  std::unique_ptr<Tbb> tbb_;
  std::mutex mu_;
  std::condition_variable cv_;                              // outstanding_ fell
  std::condition_variable work_cv_;                         // a batch was queued, or stop_
  std::deque<std::pair<std::string, interp::Value>> queue_; // under mu_
  std::deque<std::function<void()>> tasks_; // under mu_: later() tasks for the idle planners
  size_t outstanding_ = 0;                  // under mu_
  bool running_ = false;                    ///< under mu_: a pump() is under way or enqueued
  bool stop_ = false;                       ///< under mu_: the idle planners are to return
  std::vector<std::thread> planners_;       // the idle planners (none: TBB plans)
};

} // namespace pejit::runtime
