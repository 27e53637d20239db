// Workers on a tbb::task_arena (parallel.h).
#include "runtime/parallel.h"

#include <tbb/blocked_range.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <sched.h>
#include <thread>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define PEJIT_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PEJIT_UNDER_TSAN 1
#endif
#endif
#ifndef PEJIT_UNDER_TSAN
#define PEJIT_UNDER_TSAN 0
#endif

#if PEJIT_UNDER_TSAN
#include <exception>
#include <mutex>
#include <thread>
#include <vector>
#endif

namespace pejit::runtime {

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return 1;
  return std::max(1, CPU_COUNT(&set));
}

// Normal priority: the planning pipeline's arena is low, so a worker that frees up goes to a
// step's blocks before it takes the next background task. No more slots than TBB has threads
// (more would only be refused, with a warning): the blocks stay as many as for `threads`.
struct Workers::Arena {
  explicit Arena(int threads)
      : arena(std::min(threads, tbb::info::default_concurrency()), 1,
              tbb::task_arena::priority::normal) {}
  tbb::task_arena arena;
};

Workers::Workers(int threads, SplitPolicy policy)
    : threads_(threads > 0 ? threads : affinity_cpus()), policy_(policy) {
  policy_.min_block_work = std::max<int64_t>(1, policy_.min_block_work);
  if (threads_ > 1)
    arena_ = std::make_unique<Arena>(threads_);
}

Workers::~Workers() = default;

int64_t Workers::block_rows(int64_t rows, int64_t row_cost, int64_t align) const {
  align = std::max<int64_t>(1, align);
  if (threads_ <= 1 || rows <= 1)
    return rows;
  const int64_t cost = std::max<int64_t>(1, row_cost);
  const int64_t least = (policy_.min_block_work + cost - 1) / cost; // rows worth a hand-off
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t per_thread = std::min<int64_t>(4, rows / (align * threads_));
  if (per_thread < 4) {
    // A small level (a tree's top levels): as many even blocks as threads, or two or three
    // each, of any row count. Blocks that start at `align` would leave the work uneven (8 + 2
    // rows) or whole on the calling thread (up to `align` rows) while the others wait.
    const int64_t step =
        std::max(least, ceil_div(rows, threads_ * std::max<int64_t>(1, per_thread)));
    return std::min(step, rows);
  }
  auto up = [align](int64_t r) { return (r + align - 1) / align * align; };
  // Enough rows for the least work worth a hand-off; and at most 4 blocks per thread, so that
  // an uneven block costs little and the per-block overhead stays small; blocks start at
  // multiples of `align`.
  const int64_t step = std::max(up(least), up(ceil_div(rows, 4 * threads_)));
  return std::min(step, rows);
}

void Workers::run(int64_t blocks, void (*fn)(void*, int64_t), void* ctx, int tag) const {
  splits_.fetch_add(1, std::memory_order_relaxed);
  thread_local bool in_timed_split = false;
  if (times_ != nullptr && !in_timed_split && std::this_thread::get_id() == timing_thread_) {
    struct Inside { // cleared on return and on a block's exception alike
      Inside() { in_timed_split = true; }
      ~Inside() { in_timed_split = false; }
    } inside;
    timed_run(blocks, fn, ctx, tag);
    return;
  }
  if (policy_.serial) {
    for (int64_t b = 0; b < blocks; ++b)
      fn(ctx, b);
    return;
  }
  plain_run(blocks, fn, ctx);
}

void Workers::time_splits(SplitTimes* into) {
  times_ = into;
  timing_thread_ = std::this_thread::get_id();
}

// Each block's start and end into its own slot (no two blocks write one), summed here after
// the join; with SplitPolicy::serial, the blocks in order on this thread.
void Workers::timed_run(int64_t blocks, void (*fn)(void*, int64_t), void* ctx, int tag) const {
  using Clock = std::chrono::steady_clock;
  struct Slot {
    Clock::time_point a, b;
    bool caller = false;
  };
  std::vector<Slot> slots(static_cast<size_t>(blocks));
  struct Ctx {
    void (*fn)(void*, int64_t);
    void* ctx;
    Slot* slots;
    std::thread::id caller;
  } c{fn, ctx, slots.data(), std::this_thread::get_id()};
  auto timed = [](void* p, int64_t b) {
    auto& x = *static_cast<Ctx*>(p);
    Slot& s = x.slots[b];
    s.caller = std::this_thread::get_id() == x.caller;
    s.a = Clock::now();
    x.fn(x.ctx, b);
    s.b = Clock::now();
  };
  const Clock::time_point t0 = Clock::now();
  if (policy_.serial)
    for (int64_t b = 0; b < blocks; ++b)
      timed(&c, b);
  else
    plain_run(blocks, timed, &c);
  const Clock::time_point t1 = Clock::now();
  auto secs = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  SplitTimes& t = *times_;
  const double wall = secs(t0, t1);
  double busy = 0;
  Clock::time_point caller_end = t0, worker_first = t1;
  for (const Slot& s : slots) {
    const double d = secs(s.a, s.b);
    busy += d;
    (s.caller ? t.caller_busy : t.worker_busy) += d;
    if (s.caller)
      caller_end = std::max(caller_end, s.b);
    else {
      t.worker_blocks++;
      worker_first = std::min(worker_first, s.a);
    }
  }
  t.splits++;
  t.blocks += blocks;
  t.wall += wall;
  if (worker_first < t1)
    t.worker_start += secs(t0, worker_first);
  t.caller_wait += secs(caller_end, t1);
  SplitTimes::Tagged& g = t.by_tag[static_cast<size_t>(
      tag >= 0 && tag < SplitTimes::kTags ? tag : SplitTimes::kUntagged)];
  g.splits++;
  g.blocks += blocks;
  g.wall += wall;
  g.busy += busy;
}

void Workers::plain_run(int64_t blocks, void (*fn)(void*, int64_t), void* ctx) const {
#if PEJIT_UNDER_TSAN
  // ThreadSanitizer does not see TBB's hand-offs (libtbb is not instrumented) and the TSan
  // stage suppresses reports through TBB's frames, which would hide a race between two blocks.
  // So under TSan the same blocks run on plain threads it sees whole: what it checks is that
  // the blocks of every split touch disjoint memory.
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex m;
  auto work = [&] {
    for (int64_t b; (b = next.fetch_add(1)) < blocks;) {
      try {
        fn(ctx, b);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error)
          error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> helpers;
  for (int64_t i = 1; i < std::min<int64_t>(threads_, blocks); ++i)
    helpers.emplace_back(work);
  work();
  for (auto& t : helpers)
    t.join();
  if (error)
    std::rethrow_exception(error);
  return;
#endif
  // One task per block (simple_partitioner, grain 1): the blocks are already sized.
  arena_->arena.execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, blocks, 1),
        [&](const tbb::blocked_range<int64_t>& r) {
          for (int64_t b = r.begin(); b < r.end(); ++b)
            fn(ctx, b);
        },
        tbb::simple_partitioner());
  });
}

} // namespace pejit::runtime
