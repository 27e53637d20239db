// The plan cache (runtime/plan_cache.h) on its own: probation, promotion, ghosts, the LRU and
// byte bounds, plans whose batches repeat, claims of plans being made, and invalidation.
#include "runtime/plan_cache.h"

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

namespace tests_runtime_plan_cache_test {

using namespace pejit;

namespace {

// A plan of `entry` whose size counts `bytes` towards the cache's byte bound.
std::shared_ptr<const runtime::PlanEntry> plan_of(const std::string& entry, size_t bytes = 1) {
  auto e = std::make_shared<runtime::PlanEntry>();
  e->entry = entry;
  e->bytes = bytes;
  return e;
}

} // namespace

TEST_SUITE("engine") {
  TEST_CASE("plan cache: new plans wait on probation, oldest out first, and leave ghosts") {
    runtime::PlanCache cache({/*entries=*/8, /*bytes=*/1000, /*probation_entries=*/2});
    for (uint64_t k = 1; k <= 4; ++k)
      cache.publish(k, plan_of("a"), 1);
    CHECK(cache.count("a") == 2);
    CHECK(cache.evictions() == 2);
    CHECK_FALSE(cache.cached(1)); // the oldest went first
    CHECK_FALSE(cache.cached(2));
    CHECK(cache.cached(3));
    // Key 1 left probation unused: published again, it goes to the LRU list and stays while
    // new plans churn through probation.
    cache.publish(1, plan_of("a"), 1);
    for (uint64_t k = 10; k < 20; ++k)
      cache.publish(k, plan_of("a"), 1);
    CHECK(cache.cached(1));
    CHECK(cache.count("a") == 3); // 1 on the LRU list, two on probation
  }

  TEST_CASE("plan cache: a second use promotes, the LRU list keeps the most recent") {
    runtime::PlanCache cache({/*entries=*/2, /*bytes=*/1000, /*probation_entries=*/1});
    for (uint64_t k = 1; k <= 3; ++k) {
      cache.publish(k, plan_of("a"), 1);
      CHECK(cache.use_or_claim(k) != nullptr); // the second use: off probation
    }
    // Looking without using neither promotes nor refreshes.
    cache.publish(4, plan_of("a"), 1);
    CHECK(cache.cached(4));
    cache.publish(5, plan_of("a"), 1);
    CHECK_FALSE(cache.cached(4)); // stayed on probation, pushed out by 5
    // Three promoted into room for two: 1, the least recently used, is gone.
    CHECK_FALSE(cache.cached(1));
    CHECK(cache.use_or_claim(2) != nullptr);
    CHECK(cache.use_or_claim(3) != nullptr);
    CHECK(cache.evictions() == 2);
  }

  TEST_CASE("plan cache: plans made ahead wait for their batch unless the byte bound is hit") {
    runtime::PlanCache cache({/*entries=*/8, /*bytes=*/100, /*probation_entries=*/1});
    for (uint64_t k = 1; k <= 4; ++k)
      cache.publish(k, plan_of("a", 10), 0); // made ahead: no use yet
    CHECK(cache.count("a") == 4);
    CHECK(cache.evictions() == 0);
    // Its batch ran: that plan may leave probation now, the others still wait.
    CHECK(cache.use_or_claim(1) != nullptr);
    CHECK_FALSE(cache.cached(1));
    CHECK(cache.count("a") == 3);
    // Over the byte bound, even unused plans go, oldest first.
    cache.publish(5, plan_of("a", 80), 0);
    CHECK_FALSE(cache.cached(2));
    CHECK(cache.cached(5));
    CHECK(cache.evictions() == 2);
  }

  TEST_CASE("plan cache: when batches repeat new plans skip probation but not the bounds") {
    runtime::PlanCache cache({/*entries=*/4, /*bytes=*/1000, /*probation_entries=*/1});
    for (uint64_t k = 1; k <= 4; ++k)
      cache.publish(k, plan_of("a"), 1, true); // one use each: on probation they would go
    CHECK(cache.count("a") == 4);
    CHECK(cache.evictions() == 0);
    CHECK(cache.use_or_claim(1) != nullptr); // refreshed: 2 is now the least recently used
    cache.publish(5, plan_of("a"), 1, true);
    CHECK(cache.count("a") == 4);
    CHECK(cache.evictions() == 1);
    CHECK_FALSE(cache.cached(2));
    CHECK(cache.cached(1));
  }

  TEST_CASE("plan cache: a batch that catches up with its plan being made waits for it") {
    runtime::PlanCache cache({});
    REQUIRE(cache.claim(1)); // the pipeline makes key 1's plan
    CHECK_FALSE(cache.claim(1));
    auto made = plan_of("a");
    std::thread maker([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      cache.publish(1, made, 0);
    });
    CHECK(cache.use_or_claim(1) == made); // waited for it rather than making it again
    maker.join();
    CHECK_FALSE(cache.claim(1)); // cached
    // A claim that ends without a plan (the batch cannot be planned): the waiter claims the
    // key itself, to make the plan or find the reason.
    REQUIRE(cache.claim(2));
    std::thread failer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      cache.abandon(2);
    });
    CHECK(cache.use_or_claim(2) == nullptr);
    failer.join();
    CHECK_FALSE(cache.claim(2)); // the waiter holds it
    cache.abandon(2);
    CHECK(cache.claim(2));
  }

  TEST_CASE("plan cache: drop_entries drops exactly the plans of those entries") {
    runtime::PlanCache cache({});
    cache.publish(1, plan_of("a"), 1);
    cache.publish(2, plan_of("b"), 1);
    cache.publish(3, plan_of("a"), 0);
    CHECK(cache.use_or_claim(2) != nullptr); // b's plan on the LRU list
    cache.drop_entries({"b"});
    CHECK(cache.count("a") == 2);
    CHECK(cache.count("b") == 0);
    CHECK_FALSE(cache.cached(2));
    CHECK(cache.evictions() == 0); // an invalidation is not an eviction
  }
}

} // namespace tests_runtime_plan_cache_test
