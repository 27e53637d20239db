// The engine's background pipeline on TBB (pipeline.h).
#include "runtime/pipeline.h"

#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <pthread.h>
#include <sched.h>

namespace pejit::runtime {

struct Pipeline::Tbb {
  // Background work is enqueued (task_arena::enqueue), not spawned: TBB then guarantees it a
  // thread even where it has no worker (one core, taskset -c 0), so compilation starts with
  // the session and the pipeline plans ahead while training runs; the OS shares the core
  // between them.
  tbb::task_arena arena{1, 0, tbb::task_arena::priority::low};
  tbb::task_group group;
};

namespace {
// With one CPU in the affinity mask (taskset -c 0, or each rank of an MPI job bound to its
// core) TBB allows itself no worker: the background arena's enqueued work still gets a thread,
// but TBB warns on stderr at each session. One worker allowed makes that thread an ordinary
// one; the intra-batch workers keep their own count (SessionOptions::threads).
void allow_background_worker() {
  static const bool once = [] {
    if (tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism) < 2)
      static tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 2);
    return true;
  }();
  (void)once;
}
} // namespace

Pipeline::Pipeline(int lookahead, PlanOne plan_one, int idle_planners)
    : lookahead_(static_cast<size_t>(std::max(1, lookahead))), plan_one_(std::move(plan_one)),
      tbb_((allow_background_worker(), std::make_unique<Tbb>())) {
  for (int i = 0; i < idle_planners; ++i)
    planners_.emplace_back([this] { plan_idle(); });
}

Pipeline::~Pipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_ -= queue_.size() + tasks_.size();
    queue_.clear();
    tasks_.clear();
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : planners_)
    t.join();
  tbb_->arena.execute([this] { tbb_->group.wait(); });
}

void Pipeline::prefetch(const std::string& entry, std::vector<interp::Value> batches) {
  if (batches.empty())
    return;
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& b : batches)
      queue_.emplace_back(entry, std::move(b));
    outstanding_ += batches.size();
    if (!planners_.empty()) {
      // The planners are behind: the oldest batches are the next to run, and their steps will
      // plan them inline before an idle planner could.
      for (; queue_.size() > lookahead_; --outstanding_)
        queue_.pop_front();
    } else if (!running_) {
      running_ = true;
      start = true;
    }
  }
  if (!planners_.empty()) {
    work_cv_.notify_one();
    cv_.notify_all(); // dropped batches count as done for drain()
  } else if (start) {
    tbb_->arena.enqueue(tbb_->group.defer([this] { pump(); }));
  }
}

void Pipeline::background(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++outstanding_;
  }
  tbb_->arena.enqueue(tbb_->group.defer([this, task = std::move(task)] {
    try {
      task();
    } catch (...) {
      // Best effort: what did not compile runs on reference kernels.
    }
    done();
  }));
}

void Pipeline::later(std::function<void()> task) {
  if (planners_.empty()) {
    background(std::move(task));
    return;
  }
  std::function<void()> overdue;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    ++outstanding_;
    // Planners starved (every core busy): the oldest task runs here, so that what the tasks
    // hold (stepped batches) stays bounded.
    if (tasks_.size() > 2 * lookahead_) {
      overdue = std::move(tasks_.front());
      tasks_.pop_front();
    }
  }
  work_cv_.notify_one();
  if (overdue) {
    try {
      overdue();
    } catch (...) {
    }
    overdue = nullptr;
    done();
  }
}

void Pipeline::drain() {
  // This thread plans what is still queued itself rather than wait for idle-priority threads,
  // and joining the arena lets it run what is left there instead of only waiting.
  if (!planners_.empty())
    while (plan_queued()) {
    }
  tbb_->arena.execute([this] { tbb_->group.wait(); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return outstanding_ == 0; });
}

void Pipeline::done() {
  std::lock_guard<std::mutex> lock(mu_);
  --outstanding_;
  cv_.notify_all();
}

bool Pipeline::plan_queued() {
  std::pair<std::string, interp::Value> item;
  std::function<void()> task;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!tasks_.empty()) {
      task = std::move(tasks_.front());
      tasks_.pop_front();
    } else if (!queue_.empty()) {
      item = std::move(queue_.front());
      queue_.pop_front();
    } else {
      return false;
    }
  }
  try {
    if (task)
      task();
    else
      plan_one_(item.first, item.second);
  } catch (...) {
    // Best effort: a batch not planned here is planned inline or runs generic.
  }
  task = nullptr; // what it held is released here, not under the lock
  item = {};
  done();
  return true;
}

void Pipeline::plan_idle() {
#ifdef SCHED_IDLE
  // Best effort: where the policy is refused the planner runs at normal priority, as the
  // TBB pipeline's worker would.
  sched_param sp{};
  sp.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
#endif
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stop_ || !queue_.empty() || !tasks_.empty(); });
      if (stop_)
        return;
    }
    plan_queued();
  }
}

// Serial input from the queue, then planning in parallel (at most lookahead_ at once).
void Pipeline::pump() {
  using Item = std::pair<std::string, interp::Value>;
  tbb::parallel_pipeline(
      lookahead_, tbb::make_filter<void, Item*>(tbb::filter_mode::serial_in_order,
                                                [this](tbb::flow_control& fc) -> Item* {
                                                  std::lock_guard<std::mutex> lock(mu_);
                                                  if (queue_.empty()) {
                                                    running_ = false;
                                                    fc.stop();
                                                    return nullptr;
                                                  }
                                                  auto* item = new Item(std::move(queue_.front()));
                                                  queue_.pop_front();
                                                  return item;
                                                }) &
                      tbb::make_filter<Item*, void>(tbb::filter_mode::parallel, [this](Item* item) {
                        std::unique_ptr<Item> own(item);
                        try {
                          plan_one_(own->first, own->second);
                        } catch (...) {
                          // A failure here only means that batch will be planned inline or run
                          // generic.
                        }
                        done();
                      }));
}

} // namespace pejit::runtime
