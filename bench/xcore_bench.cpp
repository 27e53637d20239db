// What reading rows that another core has just written costs on this host, against reading
// rows this core wrote: the quantity behind a split step's locality (docs/architecture.md,
// "Where scaling stops"). When a level's blocks run on two cores, the next level, the
// executor's serial work between levels and the packing of weights that the optimizer's blocks
// updated all read rows that may sit in the other core's private L2.
//
// For each size: the measuring thread (first CPU of the affinity mask) writes a buffer and
// sums it (own), then a helper pinned to the second CPU writes it and the measuring thread sums
// it (cross). Medians of many repetitions, in microseconds and GB/s.
//
//   pejit_xcore_bench [--reps N] [KB...]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <thread>
#include <vector>

namespace {

bool pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return pthread_setaffinity_np(pthread_self(), sizeof s, &s) == 0;
}

long parse(const char* what, const char* text, long lo, long hi) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi) {
    std::fprintf(stderr, "pejit_xcore_bench: %s: expected an integer in [%ld, %ld], got '%s'\n",
                 what, lo, hi, text);
    std::exit(2);
  }
  return v;
}

// Sixteen independent sums, so that the read, not one add chain, bounds the loop.
float sum(const float* p, size_t n) {
  float acc[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      acc[j] += p[i + j];
  for (; i < n; ++i)
    acc[0] += p[i];
  float s = 0;
  for (float a : acc)
    s += a;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
  int reps = 500;
  std::vector<long> sizes;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = static_cast<int>(parse("--reps", argv[++i], 1, 1000000));
    else if (argv[i][0] == '-') {
      std::fprintf(stderr, "usage: %s [--reps N] [KB...]\n", argv[0]);
      return 2;
    } else
      sizes.push_back(parse("KB", argv[i], 1, 1 << 20));
  }
  if (sizes.empty())
    sizes = {16, 64, 256, 1024};
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set))
        cpus.push_back(c);
  if (cpus.size() < 2) {
    std::fprintf(stderr, "pejit_xcore_bench: needs two CPUs in the affinity mask, has %zu\n",
                 cpus.size());
    return 2;
  }
  std::printf("measuring on CPU %d, the other core CPU %d; %d repetitions per size\n", cpus[0],
              cpus[1], reps);
  for (long kb : sizes) {
    const size_t n = static_cast<size_t>(kb) * 1024 / sizeof(float);
    std::vector<float> buf(n);
    std::atomic<int> phase{0}; // 1: the helper writes; 2: written; -1: stop
    std::thread helper([&] {
      pin(cpus[1]);
      for (int p; (p = phase.load(std::memory_order_acquire)) != -1;)
        if (p == 1) {
          for (size_t i = 0; i < n; ++i)
            buf[i] = static_cast<float>(i & 7);
          phase.store(2, std::memory_order_release);
        }
    });
    pin(cpus[0]);
    using Clock = std::chrono::steady_clock;
    std::vector<double> own, cross;
    volatile float sink = 0;
    for (int r = 0; r < reps; ++r) {
      for (size_t i = 0; i < n; ++i)
        buf[i] = static_cast<float>(i & 3);
      auto t0 = Clock::now();
      sink = sink + sum(buf.data(), n);
      own.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      phase.store(1, std::memory_order_release);
      while (phase.load(std::memory_order_acquire) != 2) {
      }
      phase.store(0, std::memory_order_release);
      t0 = Clock::now();
      sink = sink + sum(buf.data(), n);
      cross.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    phase.store(-1, std::memory_order_release);
    helper.join();
    const double o = median(own), c = median(cross), bytes = static_cast<double>(n) * 4;
    std::printf("%6ld KB: after this core's write %8.2f us (%5.1f GB/s); after the other core's "
                "%8.2f us (%5.1f GB/s); %.2fx\n",
                kb, o, bytes / o / 1e3, c, bytes / c / 1e3, c / o);
  }
  return 0;
}
