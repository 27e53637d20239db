// The background pipeline's idle planners (runtime/pipeline.h), used when a step is split
// across threads: batches are planned on a thread at the OS's idle priority, a planner that
// falls behind keeps only the newest `lookahead` batches, drain() plans what is left on the
// caller, and later() tasks run there too, bounded when the planner is starved.
#include "runtime/pipeline.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#include <set>
#include <string>
#include <thread>

using namespace pejit;

namespace {

// A gate the first planned batch waits at, so that a test can hold the planner busy.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool entered = false, open = false;
  void enter_and_wait() {
    std::unique_lock<std::mutex> lock(m);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void wait_entered() {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return entered; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(m);
    open = true;
    cv.notify_all();
  }
};

std::vector<interp::Value> one_batch() {
  return {interp::Value::list({})};
}

} // namespace

TEST_SUITE("threads") {
  TEST_CASE("idle planner: batches are planned on a thread of their own at idle priority") {
    std::mutex m;
    std::vector<int> policies;
    std::set<std::thread::id> threads;
    runtime::Pipeline p(
        4,
        [&](const std::string&, const interp::Value&) {
          std::lock_guard<std::mutex> lock(m);
          policies.push_back(sched_getscheduler(0));
          threads.insert(std::this_thread::get_id());
        },
        1);
    for (int i = 0; i < 3; ++i)
      p.prefetch("loss", one_batch());
    // Not drain(): it would plan what is still queued on this thread. This test's process is
    // otherwise idle, so the planner gets a core.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(m);
        if (policies.size() == 3 || std::chrono::steady_clock::now() > deadline)
          break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    p.drain();
    REQUIRE(policies.size() == 3);
    CHECK(threads.size() == 1);
    CHECK(threads.count(std::this_thread::get_id()) == 0);
#ifdef SCHED_IDLE
    for (int pol : policies)
      CHECK(pol == SCHED_IDLE);
#endif
  }

  TEST_CASE("idle planner behind: the newest lookahead batches stay queued, drain plans them") {
    Gate gate;
    std::mutex m;
    std::multiset<std::string> planned;
    runtime::Pipeline p(
        3,
        [&](const std::string& entry, const interp::Value&) {
          if (entry == "b0")
            gate.enter_and_wait();
          std::lock_guard<std::mutex> lock(m);
          planned.insert(entry);
        },
        1);
    p.prefetch("b0", one_batch());
    gate.wait_entered(); // the planner holds b0
    for (int i = 1; i <= 10; ++i)
      p.prefetch("b" + std::to_string(i), one_batch());
    // b1..b7 were dropped (their steps plan them inline); b8..b10 wait. drain() plans them
    // here while the planner is held, then waits for b0.
    std::thread release([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      gate.release();
    });
    p.drain();
    release.join();
    CHECK(planned == std::multiset<std::string>{"b0", "b10", "b8", "b9"});
  }

  TEST_CASE("idle planner: later() tasks run there, the oldest on the caller when starved") {
    Gate gate;
    runtime::Pipeline p(
        2, [&](const std::string&, const interp::Value&) { gate.enter_and_wait(); }, 1);
    p.prefetch("loss", one_batch());
    gate.wait_entered(); // the planner is busy: tasks wait
    std::atomic<int> on_caller{0}, elsewhere{0};
    const auto me = std::this_thread::get_id();
    auto task = [&, me] { (std::this_thread::get_id() == me ? on_caller : elsewhere)++; };
    for (int i = 0; i < 4; ++i) // 2 * lookahead: all queued
      p.later(task);
    CHECK(on_caller == 0);
    p.later(task); // one too many: the oldest runs now, here
    CHECK(on_caller == 1);
    gate.release();
    p.drain(); // the rest: on the planner or here
    CHECK(on_caller + elsewhere == 5);
  }
}
