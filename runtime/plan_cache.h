// PlanCache: the engine's published plans by plan key, bounded 2Q style so that shuffled
// training (skeletons that almost never repeat) cannot push out the plans that are reused.
// PlanEntry: one published plan with what running it needs besides the batch's payloads.
#pragma once

#include "runtime/exec_layout.h"
#include "specializer/plan.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace pejit::runtime {

/// A published plan: immutable once published (but for compile_requested), so the training
/// thread runs it while the pipeline interns new templates.
struct PlanEntry {
  std::string entry;
  /// Constants, outputs, result shape, random slots; inputs cleared, and instances and their
  /// arguments dropped once the layout is made (SpecializerService::keep_instances)
  specializer::Residual residual;
  specializer::Plan plan;
  ExecLayout layout; ///< the executor's index maps and arena offsets
  /// Set once a compile of this plan's templates has been asked for.
  mutable std::atomic<bool> compile_requested{false};
  /// A snapshot of the template table (shared by the plans made while it did not grow).
  std::shared_ptr<const specializer::TemplateTable> templates;
  size_t bytes = 0; ///< an estimate of its memory, for the cache's byte bound
};

struct PlanCacheLimits {
  size_t entries = 2048;         ///< plans on the LRU list of reused plans
  size_t bytes = 512u << 20;     ///< bytes of every cached plan, both lists
  size_t probation_entries = 64; ///< plans on the probation list
};

/// The 2Q cache of plans over plan keys. A new plan waits on a short probation list (oldest
/// out first, but a plan made ahead waits for its batch unless the byte bound is hit); its
/// second use moves it to the LRU list of reused plans. A key that left probation unused is
/// remembered (a ghost): if its plan is published again it goes straight to the LRU list, so
/// passes that repeat less often than probation turns over are kept from their second pass
/// on. A plan whose batch is known to repeat (a scored data set's; every plan when the
/// caller's batches repeat: EngineOptions::batches_repeat) goes there at once, kept from its
/// first pass. A key whose plan is being made is claimed, so that a batch that catches up
/// with it waits for that plan instead of making it twice. Owns
/// the lists, the slots, the ghosts, the claims and the eviction count, all under its one lock.
class PlanCache {
public:
  explicit PlanCache(PlanCacheLimits limits) : limits_(limits) {}

  /// Whether a plan for `key` is cached. Only asks: neither a use nor a refresh.
  bool cached(uint64_t key) const;
  /// The plan for `key` for a batch about to run it (a use: counts towards promotion and
  /// refreshes its place on the LRU list), waiting while another thread makes it (claim): a
  /// batch that catches up with its plan being made ahead waits for that plan rather than
  /// making it again. Else null, and `key` is claimed for the caller,
  /// who makes its plan and publishes it, or abandons the claim.
  std::shared_ptr<const PlanEntry> use_or_claim(uint64_t key);
  /// Claims `key` for making its plan: false when its plan is cached or being made.
  bool claim(uint64_t key);
  /// Ends a claim that made no plan (the batch cannot be planned): waiters look again.
  void abandon(uint64_t key);
  /// Publishes `e` under `key` unless a plan is there already, ending a claim of `key`.
  /// `uses`: 1 for a plan made for the batch that runs it now, 0 for one made ahead.
  /// `repeats`: its batch is known to run again (a scored data set's; every batch when the
  /// caller's batches repeat): on the LRU list at once, as a ghost's plan is.
  void publish(uint64_t key, std::shared_ptr<const PlanEntry> e, int uses, bool repeats = false);
  /// Drops the plans of these entries (their definitions changed).
  void drop_entries(const std::vector<std::string>& entries);
  /// The number of cached plans of `entry`.
  size_t count(const std::string& entry) const;
  /// Plans dropped by the bounds so far (not by drop_entries()).
  int64_t evictions() const;

private:
  struct Slot {
    std::shared_ptr<const PlanEntry> entry;
    std::list<uint64_t>::iterator pos;
    bool reused = false; ///< on the LRU list (else on probation)
    int uses = 0;
  };
  using Slots = std::unordered_map<uint64_t, Slot>;
  static constexpr size_t kGhosts = size_t{1} << 16;

  void drop(Slots::iterator it);                            // mu_ held
  void evict();                                             // mu_ held
  std::shared_ptr<const PlanEntry> use(Slots::iterator it); // mu_ held

  const PlanCacheLimits limits_;
  mutable std::mutex mu_;
  // Everything below is under mu_.
  std::list<uint64_t> lru_, probation_; // most recent first
  Slots slots_;
  size_t bytes_ = 0;
  std::unordered_set<uint64_t> ghosts_; // keys that left probation unused, oldest first in
  std::deque<uint64_t> ghost_order_;    // ghost_order_, at most kGhosts
  std::unordered_set<uint64_t> making_; // claimed keys
  std::condition_variable made_;        // a claim ended
  int64_t evictions_ = 0;
};

} // namespace pejit::runtime
