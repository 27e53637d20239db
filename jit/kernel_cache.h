// KernelCache: compiled kernels keyed by signature (spec's canonical text + target CPU),
// compiled once even under concurrent requests, bounded with LRU eviction. An entry is handed
// out as a shared_ptr; its code is freed (Jit::remove) when it has been evicted and the last
// holder lets go, so a kernel never disappears under a running caller.
#pragma once

#include "jit/jit.h"

#include <cstddef>
#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pejit::jit {

/// One cached kernel: immutable once published.
struct CachedKernel {
  CompiledKernel kernel;
  std::string key;
  std::string schedule;        ///< the schedule it was compiled with
  std::string schedule_source; ///< where the schedule came from: "default" or a tuned DB's path
  uint64_t ir_hash = 0;        ///< kernel.ir_hash: the hash of the optimized IR that was linked
};

struct KernelCacheStats {
  uint64_t hits = 0;      ///< requests answered by an entry, ready or being compiled
  uint64_t misses = 0;    ///< requests that found no entry (each one compiles)
  uint64_t compiles = 0;  ///< successful compiles
  uint64_t failures = 0;  ///< compiles that threw
  uint64_t evictions = 0; ///< entries dropped to respect max_entries
  double compile_ms = 0;  ///< total over successful compiles
};

/// Thread-safe. The Jit must outlive the cache and every CachedKernel it handed out.
class KernelCache {
public:
  KernelCache(Jit& jit, size_t max_entries);
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  /// The kernel for `spec`, compiling it on a miss. Concurrent requests for one key compile once;
  /// the others wait for it. A failed compile throws pejit::Error to every waiter and leaves no
  /// entry, so a later request retries.
  std::shared_ptr<const CachedKernel> get(const KernelSpec& spec);

  /// The key `get` uses for `spec`.
  std::string key(const KernelSpec& spec) const;

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

  Jit& jit_;
  size_t max_entries_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_; // guarded by mu_
  std::list<std::string> lru_;                     // most recent first; guarded by mu_
  KernelCacheStats stats_;                         // guarded by mu_
  uint64_t generation_ = 0;                        // guarded by mu_
};

} // namespace pejit::jit
