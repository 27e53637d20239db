// AddressSanitizer's manual poisoning, for the allocators that hand out memory ASan cannot see
// into on its own (the tensor storage pool reuses freed blocks; a plan run's scratch buffer
// and the executor's arena are single allocations cut into blocks): without it, a read of a
// freed pooled block, or past a block's end into the next one, is silent under
// scripts/asan.sh. Outside an ASan build these do nothing.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define PEJIT_HAS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PEJIT_HAS_ASAN 1
#endif
#endif

#if defined(PEJIT_HAS_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace pejit::util {

#if defined(PEJIT_HAS_ASAN)
inline constexpr bool kAsan = true;
/// Marks [p, p + bytes) unaddressable: ASan reports any access to it (it may leave the bytes
/// of a partial 8-byte granule at either end addressable).
inline void asan_poison(const void* p, size_t bytes) {
  ASAN_POISON_MEMORY_REGION(p, bytes);
}
inline void asan_unpoison(const void* p, size_t bytes) {
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
}
inline bool asan_poisoned(const void* p) {
  return __asan_address_is_poisoned(p) != 0;
}
#else
inline constexpr bool kAsan = false;
inline void asan_poison(const void*, size_t) {}
inline void asan_unpoison(const void*, size_t) {}
inline bool asan_poisoned(const void*) {
  return false;
}
#endif

} // namespace pejit::util
