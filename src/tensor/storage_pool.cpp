// The size-class pool behind Tensor storage (see storage_pool.h). Classes are multiples of
// 64 bytes up to 1 KiB, then four classes per power of two (at most 25% slack) up to 1 GiB;
// bigger blocks go straight to the system. Each thread keeps a few blocks per class without
// locking; the shared lists are never trimmed implicitly (tensor_pool_trim() does it).
#include "src/tensor/storage_pool.h"

#include "src/tensor/tensor.h"
#include "src/util/asan.h"
#include "src/util/check.h"
#include "src/util/huge_pages.h"

#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace pejit::detail {
namespace {

constexpr size_t kSmallLimit = 1024; // classes 0..15: 64, 128, ..., 1024
constexpr int kSmallClasses = 16;
constexpr int kMaxLog2 = 30; // largest pooled block: 1 GiB
constexpr int kNumClasses = kSmallClasses + (kMaxLog2 - 10) * 4;
constexpr int kLocalSlots = 8;                     // blocks per class in a thread cache
constexpr size_t kLocalMaxBlock = size_t(1) << 22; // bigger blocks skip the thread cache

int class_of(size_t bytes) {
  if (bytes <= kSmallLimit)
    return bytes <= 64 ? 0 : static_cast<int>((bytes + 63) / 64) - 1;
  int p = std::bit_width(bytes - 1) - 1; // 2^p < bytes <= 2^(p+1), p >= 10
  if (p >= kMaxLog2)
    return -1;
  size_t step = size_t(1) << (p - 2);
  size_t j = (bytes - (size_t(1) << p) + step - 1) / step; // 1..4
  return kSmallClasses + (p - 10) * 4 + static_cast<int>(j) - 1;
}

size_t class_bytes(int c) {
  if (c < kSmallClasses)
    return static_cast<size_t>(c + 1) * 64;
  int p = (c - kSmallClasses) / 4 + 10;
  size_t j = static_cast<size_t>((c - kSmallClasses) % 4) + 1;
  return (size_t(1) << p) + j * (size_t(1) << (p - 2));
}

struct SharedList {
  std::mutex mu;
  std::vector<void*> blocks;
};

struct SharedPool {
  SharedList lists[kNumClasses];
  std::atomic<uint64_t> system_allocs{0};
  std::atomic<uint64_t> reuses{0};
  std::atomic<uint64_t> cached_bytes{0};
};

// Leaked on purpose: tensors destroyed during static destruction still find the pool.
SharedPool& shared() {
  static SharedPool* p = new SharedPool;
  return *p;
}

// Trivially destructible, so its storage stays valid for the whole thread lifetime; the
// Flusher below empties it into the shared pool when the thread ends.
struct LocalCache {
  void* slots[kNumClasses][kLocalSlots];
  uint8_t count[kNumClasses];
  bool registered;
  bool dead;
};
thread_local LocalCache t_cache; // zero-initialized

void flush_local(LocalCache& lc) {
  SharedPool& sp = shared();
  for (int c = 0; c < kNumClasses; ++c) {
    if (lc.count[c] == 0)
      continue;
    std::lock_guard lock(sp.lists[c].mu);
    for (int i = 0; i < lc.count[c]; ++i)
      sp.lists[c].blocks.push_back(lc.slots[c][i]);
    sp.cached_bytes += class_bytes(c) * lc.count[c];
    lc.count[c] = 0;
  }
}

struct Flusher {
  ~Flusher() {
    flush_local(t_cache);
    t_cache.dead = true;
  }
};
thread_local Flusher t_flusher;

LocalCache* local_cache() {
  LocalCache& lc = t_cache;
  if (lc.dead)
    return nullptr;
  if (!lc.registered) {
    lc.registered = true;
    (void)&t_flusher; // odr-use: constructs the flusher, registering its destructor
  }
  return &lc;
}

// Blocks of 2 MiB and more are huge-page mappings of their own: a plan's arena or a large
// gradient is touched through first in one run, at a page fault per 2 MiB instead of per 4 KiB.
void* system_alloc(size_t bytes) {
  void* p = bytes >= util::kHugePage ? util::map_huge(bytes)
                                     : ::operator new(bytes, std::align_val_t(64), std::nothrow);
  if (p == nullptr)
    throw Error("tensor storage: out of memory allocating " + std::to_string(bytes) + " bytes");
  shared().system_allocs.fetch_add(1, std::memory_order_relaxed);
  return p;
}

// A block poisoned in the pool (storage_free) is made addressable again first.
void system_free(void* p, size_t bytes) {
  util::asan_unpoison(p, bytes);
  if (bytes >= util::kHugePage)
    util::unmap_huge(p, bytes);
  else
    ::operator delete(p, std::align_val_t(64));
}

} // namespace

StorageHeader* storage_alloc(size_t data_bytes) {
  size_t need = data_bytes + sizeof(StorageHeader);
  int c = class_of(need);
  void* block = nullptr;
  size_t bytes = c < 0 ? (need + 63) / 64 * 64 : class_bytes(c);
  if (c >= 0) {
    LocalCache* lc = bytes <= kLocalMaxBlock ? local_cache() : nullptr;
    if (lc != nullptr && lc->count[c] > 0) {
      block = lc->slots[c][--lc->count[c]];
    } else {
      SharedPool& sp = shared();
      std::lock_guard lock(sp.lists[c].mu);
      if (!sp.lists[c].blocks.empty()) {
        block = sp.lists[c].blocks.back();
        sp.lists[c].blocks.pop_back();
        sp.cached_bytes -= bytes;
      }
    }
    if (block != nullptr) {
      shared().reuses.fetch_add(1, std::memory_order_relaxed);
      util::asan_unpoison(block, bytes);
    }
  }
  if (block == nullptr)
    block = system_alloc(bytes);
  auto* h = new (block) StorageHeader;
  h->size_class = c;
  h->block_bytes = bytes;
  // Under ASan, the block's slack past the data (up to its class's size) is unaddressable.
  util::asan_poison(static_cast<char*>(h->data()) + data_bytes, bytes - need);
  return h;
}

void storage_free(StorageHeader* h) {
  int c = h->size_class;
  size_t bytes = h->block_bytes;
  h->~StorageHeader();
  void* block = h;
  if (c < 0) {
    system_free(block, bytes);
    return;
  }
  // Under ASan, a pooled block is unaddressable until it is handed out again: a read through
  // a pointer into storage already released is reported, not served from the next tensor's.
  util::asan_poison(block, bytes);
  LocalCache* lc = bytes <= kLocalMaxBlock ? local_cache() : nullptr;
  if (lc != nullptr && lc->count[c] < kLocalSlots) {
    lc->slots[c][lc->count[c]++] = block;
    return;
  }
  SharedPool& sp = shared();
  std::lock_guard lock(sp.lists[c].mu);
  sp.lists[c].blocks.push_back(block);
  sp.cached_bytes += bytes;
}

} // namespace pejit::detail

namespace pejit {

TensorPoolStats tensor_pool_stats() {
  auto& sp = detail::shared();
  return {sp.system_allocs.load(), sp.reuses.load(), sp.cached_bytes.load()};
}

void tensor_pool_trim() {
  using namespace detail;
  if (LocalCache* lc = local_cache())
    flush_local(*lc);
  SharedPool& sp = shared();
  for (int c = 0; c < kNumClasses; ++c) {
    std::vector<void*> blocks;
    {
      std::lock_guard lock(sp.lists[c].mu);
      blocks.swap(sp.lists[c].blocks);
      sp.cached_bytes -= class_bytes(c) * blocks.size();
    }
    for (void* b : blocks)
      system_free(b, class_bytes(c));
  }
}

} // namespace pejit
