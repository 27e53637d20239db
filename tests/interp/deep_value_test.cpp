// Values deeper than the native stack: their depth is measured and they are freed without
// recursion (a thread with an ordinary stack survives a 1,000,000-level tree), and
// util::with_native_stack runs work on a thread whose stack fits, handing back its result or
// its exception, and keeps a moderate stack's thread for the caller's next body.
#include "pejit/error.h"
#include "src/interp/call_limit.h"
#include "src/interp/value.h"
#include "src/util/native_stack.h"

#include <doctest/doctest.h>

#include <alloca.h>
#include <bit>
#include <pthread.h>
#include <stdexcept>
#include <string>
#include <thread>

namespace tests_interp_deep_value_test {

using namespace pejit;
using interp::Value;
using interp::Values;

namespace {
Value leaf() {
  return Value::adt(0, {Value::integer(1)});
}
// fn() on a new thread whose stack is `bytes`, joined.
template <class F> void on_thread_with_stack(size_t bytes, F fn) {
  pthread_attr_t attr;
  REQUIRE(pthread_attr_init(&attr) == 0);
  REQUIRE(pthread_attr_setstacksize(&attr, bytes) == 0);
  pthread_t th{};
  const int rc = pthread_create(
      &th, &attr,
      [](void* p) -> void* {
        (*static_cast<F*>(p))();
        return nullptr;
      },
      &fn);
  pthread_attr_destroy(&attr);
  REQUIRE(rc == 0);
  pthread_join(th, nullptr);
}
Value chain(size_t depth) {
  Value t = leaf();
  for (size_t i = 0; i < depth; ++i)
    t = Value::adt(1, {leaf(), std::move(t)});
  return t;
}
} // namespace

TEST_SUITE("interp") {
  TEST_CASE("nesting_depth: constructor and tuple levels, list positions, shared payloads") {
    CHECK(interp::nesting_depth(Value::integer(3)) == 0);
    CHECK(interp::nesting_depth(leaf()) == 1);
    CHECK(interp::nesting_depth(chain(5)) == 6);
    Values ws(10, Value::integer(0));
    Value sentence = Value::list(ws);
    CHECK(interp::nesting_depth(sentence) == 10); // one level deeper per element
    // A batch: its length plus the deepest element's depth at its position.
    CHECK(interp::nesting_depth(Value::list({chain(3), sentence, leaf()})) == 12);
    CHECK(interp::nesting_depth(Value::tuple({Value::integer(1), chain(2)})) == 4);
    // A DAG: each level holds the level below twice; measured in linear time.
    Value dag = leaf();
    for (int i = 0; i < 60; ++i)
      dag = Value::adt(1, {dag, dag});
    CHECK(interp::nesting_depth(dag) == 61);
  }

  TEST_CASE("a value 1,000,000 levels deep is measured and freed on an ordinary stack") {
    // A std::thread's stack is an ordinary one (8 MiB): a release recursing once per level
    // would overflow it.
    size_t depth = 0;
    std::thread t([&depth] {
      Value v = chain(1000000);
      depth = interp::nesting_depth(v);
      Value copy = v; // shared: the last release frees it
      v = Value::integer(0);
    });
    t.join();
    CHECK(depth == 1000001);
  }

  TEST_CASE("with_native_stack: here when the stack suffices, else a thread of that size") {
    uint64_t threads = util::native_stack_threads();
    CHECK(util::with_native_stack(64 << 10, 0, [] { return 7; }) == 7);
    CHECK(util::native_stack_threads() == threads);
    size_t big = size_t{512} << 20;
    CHECK(util::native_stack_left() < big);
    size_t left = util::with_native_stack(big, big, [] { return util::native_stack_left(); });
    CHECK(util::native_stack_threads() == threads + 1);
    CHECK(left >= big - (size_t{1} << 20)); // less what the thread keeps at its stack's top
    CHECK_THROWS_WITH_AS(util::with_native_stack(big, big, []() -> int { throw Error("inner"); }),
                         "inner", Error);
    std::string s = util::with_native_stack(big, big, [] { return std::string("moved out"); });
    CHECK(s == "moved out");
  }

  TEST_CASE("with_native_stack: a moderate stack's thread is kept for the caller's next body") {
    // On a thread of the test's own, with a stack of a known size (the sanitizer stages raise
    // the default), so that no thread kept by an earlier test is there; its kept thread ends
    // with it. Asserts there are CHECKs: a REQUIRE would throw out of that thread.
    on_thread_with_stack(size_t{4} << 20, [] {
      thread_local int calls = 0; // of the thread each body runs on
      auto count = [] { return ++calls; };
      // More than this thread has left, so another thread's stack; then a stack larger than
      // the first's rounded size, both of them kept.
      const size_t need = util::native_stack_left() + (size_t{4} << 20);
      const size_t larger = std::bit_ceil(need + (size_t{1} << 20)) + (size_t{1} << 20);
      CHECK(std::bit_ceil(larger + (size_t{1} << 20)) <= util::kKeptStackBytes);
      const uint64_t threads = util::native_stack_threads(), runs = util::native_stack_runs();
      CHECK(util::with_native_stack(need, need, count) == 1);
      CHECK(util::with_native_stack(need, need, count) == 2); // the same thread, kept
      CHECK(util::native_stack_threads() == threads + 1);
      CHECK(util::native_stack_runs() == runs + 2);
      // A larger stack replaces it, and serves the smaller requests after it.
      CHECK(util::with_native_stack(larger, larger, count) == 1);
      CHECK(util::with_native_stack(need, need, count) == 2);
      CHECK(util::native_stack_threads() == threads + 2);
      // A body that leaves more of the stack resident than a kept thread may hold: its thread
      // ends after it.
      auto deep = [] {
        const size_t n = util::kKeptStackResident + (size_t{1} << 20);
        auto* p = static_cast<volatile char*>(alloca(n));
        for (size_t i = 0; i < n; i += 4096)
          p[i] = 1;
        return ++calls;
      };
      CHECK(util::with_native_stack(larger, larger, deep) == 3);
      CHECK(util::native_stack_last_used() > util::kKeptStackResident);
      CHECK(util::with_native_stack(need, need, count) == 1);
      CHECK(util::native_stack_threads() == threads + 3);
      // Past kKeptStackBytes: a thread for each body.
      const size_t big = util::kKeptStackBytes * 2;
      CHECK(util::with_native_stack(big, big, count) == 1);
      CHECK(util::with_native_stack(big, big, count) == 1);
      CHECK(util::native_stack_threads() == threads + 5);
      CHECK(util::native_stack_runs() == runs + 8);
    });
  }

  TEST_CASE("CallLimit: max_depth plus calls per level, stack only past the default bound") {
    auto l = interp::CallLimit::of(4000, 30);
    CHECK(l.calls == 4120);
    CHECK(l.stack_bytes == interp::CallLimit::kBaseStack + 120 * interp::CallLimit::kStackPerCall);
    CHECK(l.explain().find("the input's depth is 30") != std::string::npos);
    CHECK(l.explain().find("--max-depth") != std::string::npos);
    auto fixed = interp::CallLimit::of(30, 1000, 0);
    CHECK(fixed.calls == 30);
    CHECK(fixed.stack_bytes == interp::CallLimit::kBaseStack);
    // A thread started for an input reserves stack for every call, not only those past 4000.
    CHECK(l.thread_stack_bytes ==
          interp::CallLimit::kBaseStack + 4120 * interp::CallLimit::kStackPerCall);
    CHECK(interp::CallLimit::of(0, 0).calls == interp::CallLimit::kDefaultMaxDepth);
    CHECK(interp::CallLimit::of(4000, size_t{1} << 40).calls == INT32_MAX);
  }
}

} // namespace tests_interp_deep_value_test
