// Native stack queries and threads with a stack of a given size, kept per caller where it is
// moderate (native_stack.h).
#include "src/util/native_stack.h"

#include "pejit/error.h"

#include <atomic>
#include <bit>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <string>
#include <sys/mman.h>
#include <vector>

namespace pejit::util {

namespace {

std::atomic<uint64_t> g_threads{0};
std::atomic<uint64_t> g_runs{0};
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

uint64_t native_stack_runs() {
  return g_runs.load(std::memory_order_relaxed);
}

size_t native_stack_last_used() {
  return g_last_used.load(std::memory_order_relaxed);
}

namespace {

// A thread on a stack of its own, mapped here, that runs the bodies handed to it one at a time
// until it is destroyed.
class StackThread {
public:
  explicit StackThread(size_t size) : size_(size) {
    const size_t page = 4096;
    // MAP_NORESERVE: the stack is address space; only the pages the recursion touches become
    // memory (the kernel does not count the whole mapping against the commit limit).
    base_ = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (base_ == MAP_FAILED)
      throw Error(
          "cannot reserve " + std::to_string(size >> 20) +
          " MiB of address space for the native stack of a deep input: " + std::strerror(errno));
    mprotect(base_, page, PROT_NONE); // overflowing it faults instead of writing below
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
      rc = pthread_attr_setstack(&attr, static_cast<char*>(base_) + page, size - page);
      if (rc == 0)
        rc = pthread_create(&th_, &attr, &StackThread::main, this);
      pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
      munmap(base_, size);
      throw Error("cannot start a thread with " + std::to_string(size >> 20) +
                  " MiB of native stack for a deep input: " + std::strerror(rc));
    }
    g_threads.fetch_add(1, std::memory_order_relaxed);
  }

  ~StackThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    pthread_join(th_, nullptr);
    munmap(base_, size_);
  }

  StackThread(const StackThread&) = delete;
  StackThread& operator=(const StackThread&) = delete;

  size_t size() const { return size_; }

  // body(arg) on this thread; returns when it has.
  void run(void (*body)(void*), void* arg) {
    std::unique_lock<std::mutex> lock(mu_);
    body_ = body;
    arg_ = arg;
    cv_.notify_all();
    cv_.wait(lock, [&] { return body_ == nullptr; });
  }

  // The stack's resident bytes: the pages its bodies touched (and that stayed).
  size_t resident() const {
    const size_t page = 4096;
    std::vector<unsigned char> pages((size_ + page - 1) / page);
    if (mincore(base_, size_, pages.data()) != 0)
      return 0;
    size_t n = 0;
    for (unsigned char r : pages)
      n += r & 1;
    return n * page;
  }

private:
  static void* main(void* self) {
    static_cast<StackThread*>(self)->loop();
    return nullptr;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return body_ != nullptr || stop_; });
      if (body_ == nullptr)
        return; // stopped, with nothing handed over
      auto* body = body_;
      void* arg = arg_;
      lock.unlock();
      body(arg);
      lock.lock();
      body_ = nullptr;
      cv_.notify_all();
    }
  }

  void* base_ = nullptr;
  size_t size_ = 0;
  pthread_t th_{};
  std::mutex mu_;
  std::condition_variable cv_;
  void (*body_)(void*) = nullptr; // handed over, until it has run
  void* arg_ = nullptr;
  bool stop_ = false;
};

} // namespace

void run_on_stack(size_t bytes, void (*body)(void*), void* arg) {
  const size_t page = 4096;
  // Besides `bytes`: the reserve native_stack_left() keeps, the thread's own storage (glibc
  // keeps its TLS at the top of the stack it is given) and a guard page.
  size_t size = (bytes + 2 * kReserve + page - 1) / page * page + page;
  const bool keepable = std::bit_ceil(size) <= kKeptStackBytes;
  if (keepable)
    size = std::bit_ceil(size); // batches of about one size then share the thread
  // The calling thread's kept thread; ended (and joined) when the caller ends.
  thread_local std::unique_ptr<StackThread> kept;
  std::unique_ptr<StackThread> started;
  StackThread* t = kept.get();
  if (!keepable || t == nullptr || t->size() < size) {
    started = std::make_unique<StackThread>(size);
    t = started.get();
  }
  g_runs.fetch_add(1, std::memory_order_relaxed);
  t->run(body, arg);
  const size_t used = t->resident();
  g_last_used.store(used, std::memory_order_relaxed);
  const bool keep = keepable && used <= kKeptStackResident;
  if (started && keep)
    kept = std::move(started); // replaces a smaller one
  else if (!started && !keep)
    kept.reset();
}

} // namespace pejit::util
