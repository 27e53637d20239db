// pejit::keep_freed_memory (include/pejit/pejit.h): glibc malloc tuned for a training loop.
#include "pejit/pejit.h"

#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pejit {

bool keep_freed_memory() {
#if defined(__GLIBC__)
  // Blocks of up to 32 MiB from the heap rather than fresh mappings, and the heap's top never
  // given back: what bench/torch/run_peer.sh gives the PyTorch peers through GLIBC_TUNABLES.
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
#else
  return false;
#endif
}

} // namespace pejit
