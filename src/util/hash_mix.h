// hash_mix: the one step that folds a word into a 64-bit hash, shared by the hashes that
// key plans and caches (the specializer's skeleton and instance hashes, the specializer
// service's plan keys, a session's parameter hash). Not a cryptographic hash: equal hashes
// are always confirmed by comparing what they hash.
#pragma once

#include <cstdint>

namespace pejit::util {

inline uint64_t hash_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

} // namespace pejit::util
