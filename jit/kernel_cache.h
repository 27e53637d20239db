// KernelCache: compiled kernels (elementwise, GEMM, reductions) keyed by signature (the spec's
// canonical text with the schedule it compiles with + target CPU), compiled once even under
// concurrent requests, bounded with LRU eviction. A spec that names no schedule gets the entry of
// the cache's tuned database for this CPU if there is one, else its default (jit/schedule.h); the
// entry records which and where from. An entry is handed out as a shared_ptr; its code is
// freed (Jit::remove) when it has been evicted and the last holder lets go, so a kernel never
// disappears under a running caller. With the Jit's object store, a miss may link a stored
// kernel instead of compiling it (counted apart: loaded).
#pragma once

#include "jit/jit.h"
#include "jit/schedule.h"

#include <cstddef>
#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace pejit::jit {

/// The kernel families, each the spec that was compiled (its schedule resolved) with its code.
struct ElementwiseKernel {
  KernelSpec spec;
  CompiledKernel code;
};
struct GemmKernel {
  GemmSpec spec; ///< its block resolved when tuned
  CompiledGemm code;
};
struct ReduceKernel { ///< family 3: a row reduction or a loss
  ReduceSpec spec;
  CompiledReduce code;
};
/// One closed set: a new family is a compile error wherever a visitor does not handle it.
using KernelFamily = std::variant<ElementwiseKernel, GemmKernel, ReduceKernel>;

/// One cached kernel: immutable once published.
struct CachedKernel {
  KernelFamily family;
  std::string key;
  std::string schedule; ///< the schedule it was compiled with ("default", "v16x2", "6x4", ...)
  /// Where the schedule came from: "default", "given" (by the caller's spec) or
  /// "tuned FILE entry N" (jit::tuned_source).
  std::string schedule_source;
  uint64_t ir_hash = 0; ///< the hash of the optimized IR that was linked
  KernelHandle handle;  ///< its code in the Jit
  double compile_ms = 0;
  bool loaded = false; ///< linked from the Jit's object store, not compiled

  /// The code of a kernel of that family (std::bad_variant_access for another family).
  const CompiledKernel& elementwise() const { return std::get<ElementwiseKernel>(family).code; }
  const CompiledGemm& gemm() const { return std::get<GemmKernel>(family).code; }
  const CompiledReduce& reduce() const { return std::get<ReduceKernel>(family).code; }
};

struct KernelCacheStats {
  uint64_t hits = 0;      ///< requests answered by an entry, ready or being compiled
  uint64_t misses = 0;    ///< requests that found no entry (each one compiles)
  uint64_t compiles = 0;  ///< successful compiles
  uint64_t loaded = 0;    ///< misses answered by the Jit's object store (not compiled)
  uint64_t failures = 0;  ///< compiles that threw
  uint64_t evictions = 0; ///< entries dropped to respect max_entries
  double compile_ms = 0;  ///< total over successful compiles (loaded kernels not included)
};

/// Thread-safe. The Jit must outlive the cache and every CachedKernel it handed out.
class KernelCache {
public:
  /// `schedules`: a tuned database to take schedules from (null: defaults only). It is
  /// never looked for elsewhere (docs/architecture.md, schedules).
  KernelCache(Jit& jit, size_t max_entries, std::shared_ptr<const ScheduleDB> schedules = nullptr);
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  /// The kernel for `spec`, compiling it on a miss. Concurrent requests for one key compile once;
  /// the others wait for it. A failed compile throws pejit::Error to every waiter and leaves no
  /// entry, so a later request retries.
  std::shared_ptr<const CachedKernel> get(const KernelSpec& spec);
  /// The same for a GEMM kernel (family 2): a spec with mr = nr = 0 gets its tuned block or
  /// the default.
  std::shared_ptr<const CachedKernel> get_gemm(const GemmSpec& spec);
  /// The same for a row-reduction or loss kernel (family 3), whose only schedule is its
  /// default (source "default").
  std::shared_ptr<const CachedKernel> get_reduce(const ReduceSpec& spec);

  /// The key `get` uses for `spec` (after resolving its schedule).
  std::string key(const KernelSpec& spec) const;
  std::string key(const GemmSpec& spec) const;
  std::string key(const ReduceSpec& spec) const;

  /// The spec `get` compiles for `spec`, and where its schedule comes from (source).
  KernelSpec resolve(const KernelSpec& spec, std::string& source) const;
  GemmSpec resolve(const GemmSpec& spec, std::string& source) const;
  /// The tuned database (null: none).
  const ScheduleDB* schedules() const { return schedules_.get(); }

  KernelCacheStats stats() const;
  size_t size() const;

  /// The compiled entries (not those still compiling), by key.
  std::vector<std::shared_ptr<const CachedKernel>> entries() const;
  /// (key, ir_hash) of every compiled entry, by key.
  std::vector<std::pair<std::string, uint64_t>> ir_hashes() const;

private:
  using Future = std::shared_future<std::shared_ptr<const CachedKernel>>;
  struct Entry {
    Future future;
    std::list<std::string>::iterator lru; // position in lru_
    uint64_t generation;                  // tells a re-inserted key from the original
  };
  void evict_over_bound(); // mu_ held
  // A miss runs `compile` (which returns the compiled family) outside the lock.
  template <class Compile>
  std::shared_ptr<const CachedKernel> get_or_compile(const std::string& k,
                                                     const std::string& source, Compile compile);

  Jit& jit_;
  std::shared_ptr<const ScheduleDB> schedules_;
  size_t max_entries_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_; // guarded by mu_
  std::list<std::string> lru_;                     // most recent first; guarded by mu_
  KernelCacheStats stats_;                         // guarded by mu_
  uint64_t generation_ = 0;                        // guarded by mu_
};

} // namespace pejit::jit
