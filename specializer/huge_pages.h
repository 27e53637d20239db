// An allocator for the specializer's few large, growing arrays (the fragment memo's steps,
// references, result nodes and key arena): blocks of 2 MiB and more are mapped on their own,
// 2 MiB-aligned, and marked for transparent huge pages, so that the memo's growth costs one page
// fault per 2 MiB instead of one per 4 KiB (a cold pass over the data grows the memo every
// batch). Smaller blocks come from operator new, as with std::allocator. Where huge pages are
// off, the mapping still works, with 4 KiB pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <sys/mman.h>

namespace pejit::specializer {

template <class T> struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{2} << 20;

  HugePageAllocator() = default;
  template <class U> HugePageAllocator(const HugePageAllocator<U>&) {}

  T* allocate(size_t n) {
    size_t bytes = n * sizeof(T);
    if (bytes < kHuge)
      return static_cast<T*>(::operator new(bytes));
    size_t len = round_up(bytes);
    // Over-map by one huge page and trim both ends, so that the block is 2 MiB-aligned.
    void* p =
        mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw std::bad_alloc();
    auto a = reinterpret_cast<uintptr_t>(p);
    uintptr_t aligned = (a + kHuge - 1) & ~(uintptr_t{kHuge} - 1);
    if (aligned > a)
      munmap(p, aligned - a);
    if (aligned + len < a + len + kHuge)
      munmap(reinterpret_cast<void*>(aligned + len), a + len + kHuge - (aligned + len));
    madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);
    return reinterpret_cast<T*>(aligned);
  }

  void deallocate(T* p, size_t n) noexcept {
    size_t bytes = n * sizeof(T);
    if (bytes < kHuge)
      ::operator delete(p);
    else
      munmap(p, round_up(bytes));
  }

  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) { return true; }

private:
  static size_t round_up(size_t bytes) { return (bytes + kHuge - 1) & ~(kHuge - 1); }
};

} // namespace pejit::specializer
