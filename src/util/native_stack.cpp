// Native stack queries and threads with a stack of a given size (native_stack.h).
#include "src/util/native_stack.h"

#include "pejit/error.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <pthread.h>
#include <string>
#include <sys/mman.h>
#include <vector>

namespace pejit::util {

namespace {

std::atomic<uint64_t> g_threads{0};
std::atomic<size_t> g_last_used{0};

// Kept free below what native_stack_left() reports: signal handlers, libc, the frames of
// code that does not count its stack.
constexpr size_t kReserve = size_t{256} << 10;

// The lowest address of this thread's stack (0: unknown), asked once per thread: on the main
// thread pthread_getattr_np reads /proc/self/maps.
uintptr_t stack_low() {
  thread_local uintptr_t low = [] {
    uintptr_t lo = 0;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t sz = 0;
      if (pthread_attr_getstack(&attr, &addr, &sz) == 0 && sz > 0)
        lo = reinterpret_cast<uintptr_t>(addr);
      pthread_attr_destroy(&attr);
    }
    return lo;
  }();
  return low;
}

} // namespace

size_t native_stack_left() {
  auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t lo = stack_low();
  if (!lo || here <= lo + kReserve)
    return lo ? 0 : (size_t{1} << 20); // unknown: assume little
  return here - lo - kReserve;
}

uint64_t native_stack_threads() {
  return g_threads.load(std::memory_order_relaxed);
}

size_t native_stack_last_used() {
  return g_last_used.load(std::memory_order_relaxed);
}

void run_on_new_stack(size_t bytes, void (*body)(void*), void* arg) {
  const size_t page = 4096;
  // Besides `bytes`: the reserve native_stack_left() keeps, the thread's own storage (glibc
  // keeps its TLS at the top of the stack it is given) and a guard page.
  size_t size = (bytes + 2 * kReserve + page - 1) / page * page + page;
  // MAP_NORESERVE: the stack is address space; only the pages the recursion touches become
  // memory (the kernel does not count the whole mapping against the commit limit).
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (base == MAP_FAILED)
    throw Error(
        "cannot reserve " + std::to_string(size >> 20) +
        " MiB of address space for the native stack of a deep input: " + std::strerror(errno));
  mprotect(base, page, PROT_NONE); // overflowing it faults instead of writing below
  struct Call {
    void (*body)(void*);
    void* arg;
  } call{body, arg};
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc == 0) {
    rc = pthread_attr_setstack(&attr, static_cast<char*>(base) + page, size - page);
    pthread_t th{};
    if (rc == 0)
      rc = pthread_create(
          &th, &attr,
          [](void* p) -> void* {
            auto* c = static_cast<Call*>(p);
            c->body(c->arg);
            return nullptr;
          },
          &call);
    pthread_attr_destroy(&attr);
    if (rc == 0) {
      g_threads.fetch_add(1, std::memory_order_relaxed);
      pthread_join(th, nullptr);
      // The pages the thread touched (resident now) measure what its recursion used.
      std::vector<unsigned char> resident((size + page - 1) / page);
      if (mincore(base, size, resident.data()) == 0) {
        size_t n = 0;
        for (unsigned char r : resident)
          n += r & 1;
        g_last_used.store(n * page, std::memory_order_relaxed);
      }
    }
  }
  munmap(base, size);
  if (rc != 0)
    throw Error("cannot start a thread with " + std::to_string(size >> 20) +
                " MiB of native stack for a deep input: " + std::strerror(rc));
}

} // namespace pejit::util
