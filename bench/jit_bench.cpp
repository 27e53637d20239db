// pejit_jit_bench: what a fused elementwise kernel costs to compile and what it runs at. The
// chain is a TreeLSTM gate and its gradient (sigmoid(x + b) * tanh(c), and sigmoid_bwd), two
// outputs, at --width columns and --rows rows. Prints the mean warm compile time over
// --compiles kernels (the first compile in a process, which sets LLVM up, is not counted), and
// the chain's time per call on the JIT kernel and on a plain std:: loop over the same data
// (--reps calls each after one untimed call), with Gop/s counting the five ops of the chain as
// one op per element each. One thread. Speed is reported, never asserted.
#include "jit/jit.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

using namespace pejit::jit;

int main(int argc, char** argv) {
  CLI::App app{"Compile time and throughput of a fused elementwise JIT kernel"};
  int64_t width = 750, rows = 400;
  int compiles = 10, reps = 50;
  app.add_option("--width", width, "columns of the chain")->check(CLI::PositiveNumber);
  app.add_option("--rows", rows, "rows per call")->check(CLI::PositiveNumber);
  app.add_option("--compiles", compiles, "warm compiles averaged")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed calls per implementation")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  Jit jit;
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
  double total_ms = 0;
  CompiledKernel k;
  for (int i = 0; i < compiles; ++i) {
    k = jit.compile(s);
    total_ms += k.compile_ms;
    if (i + 1 < compiles)
      jit.remove(k.handle);
  }
  std::printf("warm compile: %.3f ms per kernel (%d kernels)\n", total_ms / compiles, compiles);

  const int64_t n = width * rows;
  std::vector<float> x(n, 0.3f), b(width, 0.1f), c(n, -0.2f), gy(n, 1.5f), o1(n), o2(n);
  float* in[] = {x.data(), b.data(), c.data(), gy.data()};
  float* out[] = {o1.data(), o2.data()};
  auto time_it = [&](auto fn) {
    fn();
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
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
  const double ops = 5.0 * static_cast<double>(n);
  std::printf("fused chain %lldx%lld: jit %.3f ms (%.2f Gop/s), std:: loop %.3f ms (%.2f Gop/s), "
              "speedup %.2fx\n",
              static_cast<long long>(width), static_cast<long long>(rows), jit_s * 1e3,
              ops / jit_s / 1e9, naive_s * 1e3, ops / naive_s / 1e9, naive_s / jit_s);
  return 0;
}
