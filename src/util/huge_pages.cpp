// Huge-page mappings (huge_pages.h).
#include "src/util/huge_pages.h"

#include <cstdint>
#include <sys/mman.h>

namespace pejit::util {

void* map_huge(size_t bytes) {
  const size_t len = huge_round(bytes);
  // Over-map by one huge page and trim both ends, so that the block is 2 MiB-aligned.
  void* p =
      mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return nullptr;
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (a + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  if (aligned > a)
    munmap(p, aligned - a);
  if (aligned + len < a + len + kHugePage)
    munmap(reinterpret_cast<void*>(aligned + len), a + len + kHugePage - (aligned + len));
  madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void unmap_huge(void* p, size_t bytes) noexcept {
  munmap(p, huge_round(bytes));
}

} // namespace pejit::util
