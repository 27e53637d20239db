// Internal: the block allocator behind Tensor storage. A block is a 64-byte header (refcount,
// size class) followed by the 64-byte-aligned data. Freed blocks go to a per-thread cache
// (lock-free, bounded) and overflow to a shared free list per size class (one mutex each), so
// steady-state training reuses blocks instead of calling malloc/mmap (docs/dependencies.md).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pejit::detail {

struct alignas(64) StorageHeader {
  std::atomic<int32_t> refs{1};
  int32_t size_class = -1; ///< -1: too big to pool, freed straight to the system
  size_t block_bytes = 0;

  void* data() { return reinterpret_cast<char*>(this) + sizeof(StorageHeader); }
};
static_assert(sizeof(StorageHeader) == 64);

/// A block with room for `data_bytes` of data and refs == 1.
StorageHeader* storage_alloc(size_t data_bytes);
/// Returns a block whose refcount reached zero.
void storage_free(StorageHeader* h);

inline void storage_retain(StorageHeader* h) {
  h->refs.fetch_add(1, std::memory_order_relaxed);
}
inline void storage_release(StorageHeader* h) {
  if (h->refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
    storage_free(h);
}

} // namespace pejit::detail
