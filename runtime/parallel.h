// Workers: the threads of one training run (a tbb::task_arena sized to the thread count) and
// the one way the executor and the optimizer split work across them: fixed blocks, each run by
// one worker, no reduction across blocks. What a block computes does not depend on the thread
// count or on which worker runs it, so results are the same bits for any number of threads.
// TBB stays out of this header; one thread, or work too small to split, never reaches TBB.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>

namespace pejit::runtime {

/// The CPUs in this process's affinity mask (sched_getaffinity), at least 1.
int affinity_cpus();

/// What to split and how finely (docs/architecture.md, "Threads"). Costs are in floating-point
/// operations, roughly: a block is worth handing to another worker only when it does more
/// than the hand-off costs.
struct SplitPolicy {
  /// The least work (flops) of a block: below it, the work runs on the calling thread whole.
  static constexpr int64_t kMinBlockWork = 32768;
  /// Blocks of rows start at multiples of this many rows (whole vectors of a narrow row, and
  /// few blocks that are mostly a kernel's tail).
  static constexpr int64_t kRowGranule = 8;
  int64_t min_block_work = kMinBlockWork; ///< tests set 1 to split everything they can
  /// Run every split's blocks in order on the calling thread: the same blocks as with
  /// `threads` workers, on one core. What a block costs without a second thread beside it
  /// (pejit_profile_bench --serial-blocks), against which SplitTimes shows what splitting adds.
  bool serial = false;
};

/// Where the time of the splits goes (Workers::time_splits): per split, its wall time from the
/// hand-off to the join, and each block's time, by the calling thread or another worker.
struct SplitTimes {
  int64_t splits = 0, blocks = 0, worker_blocks = 0;
  double wall = 0;        ///< seconds from each split's start to its return, summed
  double caller_busy = 0; ///< seconds the calling thread spent in blocks
  double worker_busy = 0; ///< seconds other workers spent in blocks
  /// Of splits where another worker ran a block: seconds from the split's start to that
  /// worker's first block's start (the hand-off), summed.
  double worker_start = 0;
  /// Seconds from the calling thread's last block's end to the split's return (waiting for
  /// the other workers, then the join), summed.
  double caller_wait = 0;
  /// By the tag the split was made with (for_blocks, for_rows: the executor passes its
  /// profile family, the optimizer kOptimizerTag): splits, blocks, wall and blocks' time.
  static constexpr int kTags = 16;
  static constexpr int kOptimizerTag = kTags - 2; ///< the optimizer's update
  static constexpr int kUntagged = kTags - 1;
  struct Tagged {
    int64_t splits = 0, blocks = 0;
    double wall = 0, busy = 0;
  };
  std::array<Tagged, kTags> by_tag{};
};

class Workers {
public:
  /// `threads` >= 1 (0 or less: affinity_cpus()).
  explicit Workers(int threads, SplitPolicy policy = {});
  ~Workers();
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  int threads() const { return threads_; }
  const SplitPolicy& policy() const { return policy_; }
  /// How many times work was handed to the arena (split in more than one block): what tests
  /// check to know that the parallel path ran.
  int64_t splits() const { return splits_.load(std::memory_order_relaxed); }

  /// Time every split that the calling thread starts from now on into `*into` (null: stop);
  /// for profiling, not while a split runs. A split started inside a block (on any thread) is
  /// part of its block's time, not timed on its own. Two clock reads per block.
  void time_splits(SplitTimes* into);

  /// How many rows make a block of `rows` rows that cost `row_cost` each: a multiple of
  /// `align` (a panel kernel's panel_rows: blocks then hold whole panels), at least
  /// min_block_work of work, and no more blocks than a few per thread. Returns `rows` (one
  /// block: nothing to split) with one thread.
  int64_t block_rows(int64_t rows, int64_t row_cost, int64_t align = 1) const;

  /// f(b) for every block b in [0, blocks), each by one worker; returns when all are done.
  /// Inline on the calling thread with one thread or one block. The first exception thrown
  /// by a block is rethrown here (after the others have finished).
  /// `tag` names the work in SplitTimes::by_tag (0 to SplitTimes::kTags - 1).
  template <class F> void for_blocks(int64_t blocks, F&& f, int tag = SplitTimes::kUntagged) const {
    if (threads_ <= 1 || blocks <= 1 || (policy_.serial && times_ == nullptr)) {
      for (int64_t b = 0; b < blocks; ++b)
        f(b);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    run(
        blocks, [](void* ctx, int64_t b) { (*static_cast<Fn*>(ctx))(b); },
        const_cast<void*>(static_cast<const void*>(&f)), tag);
  }

  /// f(r0, n) over [0, rows) in blocks of block_rows(rows, row_cost, align) rows.
  template <class F>
  void for_rows(int64_t rows, int64_t row_cost, int64_t align, F&& f,
                int tag = SplitTimes::kUntagged) const {
    const int64_t step = block_rows(rows, row_cost, align);
    if (step >= rows) {
      if (rows > 0)
        f(int64_t{0}, rows);
      return;
    }
    for_blocks((rows + step - 1) / step,
               [&](int64_t b) {
                 const int64_t r0 = b * step;
                 f(r0, rows - r0 < step ? rows - r0 : step);
               },
               tag);
  }

private:
  void run(int64_t blocks, void (*fn)(void*, int64_t), void* ctx, int tag) const;
  void timed_run(int64_t blocks, void (*fn)(void*, int64_t), void* ctx, int tag) const;
  void plain_run(int64_t blocks, void (*fn)(void*, int64_t), void* ctx) const;

  int threads_;
  SplitPolicy policy_;
  mutable std::atomic<int64_t> splits_{0};
  SplitTimes* times_ = nullptr;
  std::thread::id timing_thread_; ///< the thread whose splits are timed
  struct Arena;                   // the tbb::task_arena
  std::unique_ptr<Arena> arena_;
};

} // namespace pejit::runtime
