// Jit: errors from LLVM become pejit::Error and leave the Jit usable; remove frees code through
// its tracker; concurrent compiles from several threads. A skipped case measures compile time
// and throughput (run with --no-skip; speed is reported, never asserted).
#include "jit/jit.h"
#include "pejit/error.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

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
  float* in[] = {nullptr, nullptr, nullptr};
  float* out[] = {nullptr};
  k.fn(in, out, 0); // would fault on a load
  CHECK(true);
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

TEST_CASE("measure: compile time and fused-chain throughput" * doctest::skip()) {
  Jit jit;
  const int64_t width = 750, rows = 400;
  // gate: sigmoid(x + b) * tanh(c) and its sigmoid_bwd, 2 outputs.
  KernelSpec s{
      .width = width,
      .inputs = {InputShape::Full, InputShape::RowBroadcast, InputShape::Full, InputShape::Full},
      .ops = {{ElementwiseOp::Add, 0, 1},
              {ElementwiseOp::Sigmoid, 4},
              {ElementwiseOp::Tanh, 2},
              {ElementwiseOp::Mul, 5, 6},
              {ElementwiseOp::SigmoidBwd, 5, 3}},
      .outputs = {7, 8}};
  jit.remove(jit.compile(s).handle); // the first compile in a process pays for setup
  double total = 0;
  const int kCompiles = 10;
  CompiledKernel k;
  for (int i = 0; i < kCompiles; ++i) {
    k = jit.compile(s);
    total += k.compile_ms;
    if (i + 1 < kCompiles)
      jit.remove(k.handle);
  }
  MESSAGE("warm compile: " << total / kCompiles << " ms per kernel");

  int64_t n = width * rows;
  std::vector<float> x(n, 0.3f), b(width, 0.1f), c(n, -0.2f), gy(n, 1.5f), o1(n), o2(n);
  float* in[] = {x.data(), b.data(), c.data(), gy.data()};
  float* out[] = {o1.data(), o2.data()};
  auto time_it = [&](auto fn) {
    fn();
    auto t0 = std::chrono::steady_clock::now();
    const int kReps = 50;
    for (int r = 0; r < kReps; ++r)
      fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kReps;
  };
  double jit_s = time_it([&] { k.fn(in, out, rows); });
  double naive_s = time_it([&] {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < width; ++j) {
        int64_t i = r * width + j;
        float s1 = 1.0f / (1.0f + std::exp(-(x[i] + b[j])));
        o1[i] = s1 * std::tanh(c[i]);
        o2[i] = gy[i] * s1 * (1 - s1);
      }
  });
  // ~"flops": add, sigmoid, tanh, mul, sigmoid_bwd counted as 1 each per element.
  double elems = static_cast<double>(n);
  MESSAGE("fused chain " << width << "x" << rows << ": jit " << jit_s * 1e3 << " ms ("
                         << 5 * elems / jit_s / 1e9 << " Gop/s), naive std:: loop " << naive_s * 1e3
                         << " ms (" << 5 * elems / naive_s / 1e9 << " Gop/s), speedup "
                         << naive_s / jit_s);
}
