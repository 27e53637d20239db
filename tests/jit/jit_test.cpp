// Jit: errors from LLVM become pejit::Error and leave the Jit usable; remove frees code through
// its tracker; concurrent compiles from several threads. Compile time and throughput are
// measured by bench/jit_bench.cpp.
#include "jit/jit.h"
#include "pejit/error.h"

#include <doctest/doctest.h>

#include <thread>
#include <vector>

namespace tests_jit_jit_test {

using namespace pejit::jit;

namespace {

KernelSpec axpy(int64_t width) {
  return KernelSpec{.width = width,
                    .inputs = {InputShape::Scalar, InputShape::Full, InputShape::Full},
                    .ops = {{ElementwiseOp::Mul, 0, 1}, {ElementwiseOp::Add, 3, 2}},
                    .outputs = {4}};
}

float run_axpy(const CompiledKernel& k, int64_t width) {
  float a = 2.0f;
  std::vector<float> x(width, 3.0f), y(width, 1.0f), out(width);
  float* in[] = {&a, x.data(), y.data()};
  float* o[] = {out.data()};
  k.fn(in, o, 1);
  return out[width - 1];
}

} // namespace

TEST_CASE("invalid IR becomes a pejit::Error and the Jit stays usable") {
  Jit jit;
  KernelSpec bad = axpy(8);
  bad.inject_invalid_ir = true;
  CHECK_THROWS_WITH_AS(jit.compile(bad), doctest::Contains("fails verification"), pejit::Error);
  CHECK_THROWS_WITH_AS(jit.optimized_ir(bad), doctest::Contains("terminator"), pejit::Error);
  CHECK(jit.live_kernels() == 0);
  CompiledKernel k = jit.compile(axpy(8));
  CHECK(run_axpy(k, 8) == 7.0f);
  CHECK(jit.live_kernels() == 1);
}

TEST_CASE("malformed specs are rejected before LLVM sees them") {
  Jit jit;
  KernelSpec s = axpy(8);
  s.ops[0].b = 4; // reads its own result
  CHECK_THROWS_WITH_AS(jit.compile(s), doctest::Contains("not defined before"), pejit::Error);
  s = axpy(0);
  CHECK_THROWS_AS(jit.compile(s), pejit::Error);
  s = axpy(8);
  s.outputs = {9};
  CHECK_THROWS_AS(jit.compile(s), pejit::Error);
  s = axpy(8);
  s.dtype = "f64";
  CHECK_THROWS_AS(jit.compile(s), pejit::Error);
}

TEST_CASE("remove frees a kernel, compile again gives working code") {
  Jit jit;
  for (int i = 0; i < 20; ++i) {
    CompiledKernel k = jit.compile(axpy(16));
    CHECK(run_axpy(k, 16) == 7.0f);
    jit.remove(k.handle);
    jit.remove(k.handle); // a second remove is a no-op
  }
  CHECK(jit.live_kernels() == 0);
}

TEST_CASE("zero rows touch nothing") {
  Jit jit;
  CompiledKernel k = jit.compile(axpy(16));
  float* in[] = {nullptr, nullptr, nullptr}; // a load would fault
  std::vector<float> canary(16, 42.0f);
  float* out[] = {canary.data()};
  k.fn(in, out, 0);
  for (float v : canary)
    CHECK(v == 42.0f); // nothing stored
}

TEST_CASE("concurrent compiles from four threads: two compile threads, or none (in place)") {
  for (unsigned pool : {2u, 0u}) {
    CAPTURE(pool);
    Jit jit(JitOptions{.compile_threads = pool});
    std::vector<std::thread> threads;
    std::vector<float> results(4 * 5);
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 5; ++i) {
          int64_t w = 1 + t * 5 + i;
          CompiledKernel k = jit.compile(axpy(w));
          results[t * 5 + i] = run_axpy(k, w);
          if (i % 2)
            jit.remove(k.handle);
        }
      });
    for (auto& th : threads)
      th.join();
    for (float r : results)
      CHECK(r == 7.0f);
    CHECK(jit.live_kernels() == 4 * 3);
  }
}

} // namespace tests_jit_jit_test
