// KernelCache: hits return the same code, different specs miss, concurrent requests compile
// once, the LRU bound evicts and frees code, and a failed compile leaves no entry.
#include "jit/kernel_cache.h"
#include "pejit/error.h"

#include <doctest/doctest.h>

#include <thread>
#include <vector>

namespace tests_jit_kernel_cache_test {

using namespace pejit::jit;

namespace {

KernelSpec scale(int64_t width) {
  return KernelSpec{.width = width,
                    .inputs = {InputShape::Full, InputShape::Scalar},
                    .ops = {{ElementwiseOp::Mul, 0, 1}},
                    .outputs = {2}};
}

float run_scale(const CachedKernel& k, int64_t width) {
  std::vector<float> x(width, 3.0f), out(width);
  float a = 2.0f;
  float* in[] = {x.data(), &a};
  float* o[] = {out.data()};
  k.elementwise().fn(in, o, 1);
  return out[0];
}

} // namespace

TEST_CASE("a second request is a hit with the same code, a different spec misses") {
  Jit jit;
  KernelCache cache(jit, 8);
  auto a = cache.get(scale(16));
  auto b = cache.get(scale(16));
  CHECK(a.get() == b.get());
  CHECK((a->elementwise().fn == b->elementwise().fn));
  CHECK(a->schedule == "default");
  CHECK(a->schedule_source == "default");
  CHECK(a->key.find("cpu=" + jit.target_cpu()) != std::string::npos);
  CHECK(run_scale(*a, 16) == 6.0f);
  auto c = cache.get(scale(17));
  CHECK((c->elementwise().fn != a->elementwise().fn));
  KernelCacheStats st = cache.stats();
  CHECK(st.hits == 1);
  CHECK(st.misses == 2);
  CHECK(st.compiles == 2);
  CHECK(st.evictions == 0);
  CHECK(st.compile_ms > 0);
}

TEST_CASE("the key is the canonical text plus the target") {
  Jit jit;
  KernelCache cache(jit, 8);
  KernelSpec s = scale(16);
  CHECK(cache.key(s) ==
        "ew f32 w=16 in=F,S ops=mul(0,1) out=2 sched=default cpu=" + jit.target_cpu());
  KernelSpec t = s;
  t.inputs[1] = InputShape::RowBroadcast;
  CHECK(cache.key(t) != cache.key(s));
}

TEST_CASE("concurrent requests for one key compile once") {
  Jit jit(JitOptions{.compile_threads = 2});
  KernelCache cache(jit, 8);
  std::vector<std::shared_ptr<const CachedKernel>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] { got[t] = cache.get(scale(150)); });
  for (auto& th : threads)
    th.join();
  for (auto& g : got)
    CHECK(g.get() == got[0].get());
  KernelCacheStats st = cache.stats();
  CHECK(st.compiles == 1);
  CHECK(st.misses == 1);
  CHECK(st.hits == 3);
  CHECK(jit.live_kernels() == 1);
}

TEST_CASE("a bound of 2 evicts the least recently used entry and frees its code") {
  Jit jit;
  KernelCache cache(jit, 2);
  cache.get(scale(1));
  cache.get(scale(2));
  cache.get(scale(1)); // 1 is now the most recent
  cache.get(scale(3)); // evicts 2
  KernelCacheStats st = cache.stats();
  CHECK(st.evictions == 1);
  CHECK(cache.size() == 2);
  CHECK(jit.live_kernels() == 2); // 2's code is gone (nobody held it)
  cache.get(scale(1));
  CHECK(cache.stats().hits == 2);
  auto again = cache.get(scale(2)); // recompiled, evicts 3
  CHECK(run_scale(*again, 2) == 6.0f);
  st = cache.stats();
  CHECK(st.compiles == 4);
  CHECK(st.evictions == 2);
  CHECK(jit.live_kernels() == 2);
}

TEST_CASE("an evicted kernel still held by a caller stays callable until released") {
  Jit jit;
  KernelCache cache(jit, 1);
  auto held = cache.get(scale(5));
  cache.get(scale(6)); // evicts 5 from the cache
  CHECK(cache.stats().evictions == 1);
  CHECK(jit.live_kernels() == 2); // 5 is held by us, 6 by the cache
  CHECK(run_scale(*held, 5) == 6.0f);
  held.reset();
  CHECK(jit.live_kernels() == 1);
}

TEST_CASE("a failed compile throws pejit::Error, leaves no entry, and the cache stays usable") {
  Jit jit;
  KernelCache cache(jit, 4);
  KernelSpec bad = scale(8);
  bad.inject_invalid_ir = true;
  CHECK_THROWS_AS(cache.get(bad), pejit::Error);
  CHECK_THROWS_AS(cache.get(bad), pejit::Error);
  KernelCacheStats st = cache.stats();
  CHECK(st.failures == 2);
  CHECK(st.misses == 2);
  CHECK(cache.size() == 0);
  CHECK(run_scale(*cache.get(scale(8)), 8) == 6.0f);
}

} // namespace tests_jit_kernel_cache_test
