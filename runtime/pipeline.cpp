// The engine's background pipeline on TBB (pipeline.h).
#include "runtime/pipeline.h"

#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <algorithm>

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

Pipeline::Pipeline(int lookahead, PlanOne plan_one)
    : lookahead_(static_cast<size_t>(std::max(1, lookahead))), plan_one_(std::move(plan_one)),
      tbb_((allow_background_worker(), std::make_unique<Tbb>())) {}

Pipeline::~Pipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_ -= queue_.size();
    queue_.clear();
  }
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
    if (!running_) {
      running_ = true;
      start = true;
    }
  }
  if (start)
    tbb_->arena.enqueue(tbb_->group.defer([this] { pump(); }));
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

void Pipeline::drain() {
  // Joining the arena lets this thread run what is left itself instead of only waiting.
  tbb_->arena.execute([this] { tbb_->group.wait(); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return outstanding_ == 0; });
}

void Pipeline::done() {
  std::lock_guard<std::mutex> lock(mu_);
  --outstanding_;
  cv_.notify_all();
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
