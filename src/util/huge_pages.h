// Large blocks mapped on their own, 2 MiB-aligned and marked for transparent huge pages, so
// that touching one costs a page fault per 2 MiB instead of one per 4 KiB. Used for the
// specializer's growing arrays (specializer/huge_pages.h) and for tensor storage of 2 MiB
// and more (src/tensor/storage_pool.cpp). Where huge pages are off, the mapping still works,
// with 4 KiB pages.
#pragma once

#include <cstddef>

namespace pejit::util {

inline constexpr size_t kHugePage = size_t{2} << 20;

/// `bytes` rounded up to whole huge pages: what map_huge maps.
inline size_t huge_round(size_t bytes) {
  return (bytes + kHugePage - 1) & ~(kHugePage - 1);
}

/// A zeroed, 2 MiB-aligned mapping of huge_round(bytes); null when the system has no memory.
void* map_huge(size_t bytes);

/// Unmaps what map_huge(bytes) returned.
void unmap_huge(void* p, size_t bytes) noexcept;

} // namespace pejit::util
