// An allocator for the specializer's few large, growing arrays (the fragment memo's steps,
// references, result nodes and key arena): blocks of 2 MiB and more are huge-page mappings of
// their own (util::map_huge), so that the memo's growth costs one page fault per 2 MiB instead
// of one per 4 KiB (a cold pass over the data grows the memo every batch). Smaller blocks come
// from operator new, as with std::allocator.
#pragma once

#include "src/util/huge_pages.h"

#include <cstddef>
#include <new>

namespace pejit::specializer {

template <class T> struct HugePageAllocator {
  using value_type = T;

  HugePageAllocator() = default;
  template <class U> HugePageAllocator(const HugePageAllocator<U>&) {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < util::kHugePage)
      return static_cast<T*>(::operator new(bytes));
    void* p = util::map_huge(bytes);
    if (p == nullptr)
      throw std::bad_alloc();
    return static_cast<T*>(p);
  }

  void deallocate(T* p, size_t n) noexcept {
    const size_t bytes = n * sizeof(T);
    if (bytes < util::kHugePage)
      ::operator delete(p);
    else
      util::unmap_huge(p, bytes);
  }

  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) { return true; }
};

} // namespace pejit::specializer
