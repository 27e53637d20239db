// What handing work to a second thread costs on this host: the numbers behind the split policy
// of runtime/parallel.h (a block must do more than a hand-off costs) and behind the two-thread
// scaling of a training step, which makes dozens of splits per step (docs/architecture.md,
// "Where scaling stops"). Three measurements, each the median (and 90th percentile) of many:
//
//  - wake: one thread sleeps on a futex; another wakes it. The waker's time in the wake call,
//    and the time until the sleeper runs. On a virtual machine whose guest kernel is itself
//    paravirtualized these are far above a bare-metal host's few microseconds, and TBB pays
//    them whenever a worker has gone to sleep between splits.
//  - split: runtime::Workers::for_blocks with two blocks of W microseconds of spinning each,
//    after G microseconds of serial work on the calling thread (the gap between two splits of
//    a step), for several G. Ideal: W (both blocks at once); 2W: no help at all.
//  - spin: the same split on a helper thread that never sleeps (polls an atomic): the floor
//    a hand-off cannot go under on this host.
//
//   pejit_handoff_bench [--work US] [--reps N]
#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <linux/futex.h>
#include <string>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

void spin_for(double us) {
  const auto t0 = Clock::now();
  while (us_since(t0) < us) {
  }
}

struct Summary {
  double median, p90;
};

Summary summarize(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return {xs[xs.size() / 2], xs[xs.size() * 9 / 10]};
}

long futex(std::atomic<int>* word, int op, int value) {
  return syscall(SYS_futex, reinterpret_cast<int*>(word), op, value, nullptr, nullptr, 0);
}

void measure_wake(int reps) {
  std::atomic<int> word{0};
  std::atomic<int64_t> woke_at{0};
  std::thread sleeper([&] {
    for (;;) {
      const int v = word.load();
      if (v < 0)
        return;
      futex(&word, FUTEX_WAIT_PRIVATE, v);
      if (word.load() != v)
        woke_at.store(Clock::now().time_since_epoch().count());
    }
  });
  std::vector<double> call, latency;
  for (int r = 0; r < reps; ++r) {
    spin_for(500); // long enough for the sleeper to be asleep again
    const auto t0 = Clock::now();
    word.fetch_add(1);
    futex(&word, FUTEX_WAKE_PRIVATE, 1);
    call.push_back(us_since(t0));
    spin_for(300);
    latency.push_back(
        static_cast<double>(woke_at.load() - t0.time_since_epoch().count()) / 1000.0);
  }
  word.store(-1);
  futex(&word, FUTEX_WAKE_PRIVATE, 1);
  sleeper.join();
  const auto c = summarize(call), l = summarize(latency);
  std::printf("wake: the waker's futex call %.1f us (p90 %.1f); until the sleeper runs %.1f us "
              "(p90 %.1f)\n",
              c.median, c.p90, l.median, l.p90);
}

// A helper thread that polls for a split and takes blocks from a counter, never sleeping.
struct Spinner {
  std::atomic<int> epoch{0}, acked{0}; // the split published, the last one the helper left
  std::atomic<int> next{0}, done{0};
  int blocks = 2;
  double work_us = 0;
  std::atomic<bool> quit{false};
  std::thread thread;

  void take() {
    for (int b; (b = next.fetch_add(1)) < blocks;) {
      spin_for(work_us);
      done.fetch_add(1);
    }
  }
  Spinner() {
    thread = std::thread([this] {
      int seen = 0;
      while (!quit.load(std::memory_order_relaxed)) {
        const int e = epoch.load(std::memory_order_acquire);
        if (e != seen) {
          seen = e;
          take();
          acked.store(e, std::memory_order_release);
        }
      }
    });
  }
  ~Spinner() {
    quit = true;
    thread.join();
  }
  // Before timing a split: the helper is done with the last one (no late claim on the reset
  // counter).
  void prepare() {
    while (acked.load(std::memory_order_acquire) != epoch.load(std::memory_order_relaxed)) {
    }
  }
  void split() {
    next.store(0);
    done.store(0);
    epoch.fetch_add(1, std::memory_order_release);
    take();
    while (done.load() < blocks) {
    }
  }
};

} // namespace

int main(int argc, char** argv) {
  double work_us = 20;
  int reps = 400;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--work") == 0 && i + 1 < argc)
      work_us = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--work US] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  if (work_us <= 0 || reps < 10) {
    std::fprintf(stderr, "pejit_handoff_bench: --work must be > 0 and --reps >= 10\n");
    return 2;
  }
  std::printf("CPUs in the affinity mask: %d; two blocks of %.0f us per split, %d splits per "
              "row\n",
              pejit::runtime::affinity_cpus(), work_us, reps);
  if (pejit::runtime::affinity_cpus() < 2) {
    std::printf("one CPU: nothing to hand off to (run without taskset, or with two CPUs)\n");
    return 0;
  }
  measure_wake(reps);
  const double gaps[] = {0, 20, 100, 300, 1000};
  {
    pejit::runtime::Workers workers(2, pejit::runtime::SplitPolicy{1});
    for (double gap : gaps) {
      std::vector<double> t;
      for (int r = 0; r < reps; ++r) {
        spin_for(gap);
        const auto t0 = Clock::now();
        workers.for_blocks(2, [&](int64_t) { spin_for(work_us); });
        t.push_back(us_since(t0));
      }
      const auto s = summarize(t);
      std::printf("split (runtime::Workers) after %4.0f us serial: %.1f us (p90 %.1f); ideal "
                  "%.0f, alone %.0f\n",
                  gap, s.median, s.p90, work_us, 2 * work_us);
    }
  }
  {
    Spinner spinner;
    spinner.work_us = work_us;
    for (double gap : gaps) {
      std::vector<double> t;
      for (int r = 0; r < reps; ++r) {
        spin_for(gap);
        spinner.prepare();
        const auto t0 = Clock::now();
        spinner.split();
        t.push_back(us_since(t0));
      }
      const auto s = summarize(t);
      std::printf("split (spinning helper)    after %4.0f us serial: %.1f us (p90 %.1f)\n", gap,
                  s.median, s.p90);
    }
  }
  return 0;
}
