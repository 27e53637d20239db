// Family-3 kernels (row sums, cross-entropy and its backward, sums, means, softmax and
// log-softmax along rows): JIT ≡ the reference kernels of src/kernels/reduce.cpp on random
// sizes (0 and 1 rows, widths around the vector widths, C = 1 and 5), bit for bit for the sums
// and means; cross-entropy within the bound stated in reduce_codegen.cpp against double
// precision; the kinds with e^x bit for bit with the reference algorithm without contraction
// and within a few ulps of the reference kernels; labels out of range.
#include "jit/kernel_cache.h"
#include "pejit/error.h"
#include "src/kernels/fast_math.h"
#include "src/kernels/kernels.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <vector>

namespace tests_jit_reduce_test {

using namespace pejit;
using namespace pejit::jit;

namespace {

Tensor random_f32(Shape s, std::mt19937& rng, float lo = -3.0f, float hi = 3.0f) {
  Tensor t = Tensor::empty(DType::F32, s);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = d(rng);
  return t;
}

Tensor random_labels(int64_t rows, int64_t c, std::mt19937& rng) {
  Tensor t = Tensor::empty(DType::I32, Shape{rows});
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(c - 1));
  for (int64_t i = 0; i < rows; ++i)
    t.i32()[i] = d(rng);
  return t;
}

// Bound of reduce_codegen.cpp's design note, with a factor of 2 of slack for the double
// reference's own rounding of the inputs' exponentials (none) and logs.
double loss_bound(int64_t c, double loss, double xl_minus_m) {
  return 2 * (3e-7 + c * 6e-8 + 2 * 6e-8 * (std::abs(loss) + std::abs(xl_minus_m)));
}

const std::vector<int64_t> kRows = {0, 1, 2, 15, 16, 17, 33, 200};

// The reference kernels' algorithm (src/kernels/reduce.cpp: row_max, 16-lane sums of fast_exp,
// the 8-4-2-1 fold, logf), compiled here without multiply-add contraction (as all of pejit is), as
// the JIT evaluates it: the JIT must give these bits exactly.
float lane_sum(const float* e, int64_t n) {
  float lane[16] = {};
  for (int64_t i = 0; i < n; ++i)
    lane[i % 16] += e[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j)
      lane[j] += lane[j + w];
  return lane[0];
}

void ce_emulated(const float* x, int32_t label, float gy, int64_t c, float& loss, float* dx) {
  float m = x[0];
  for (int64_t i = 1; i < c; ++i)
    m = x[i] > m ? x[i] : m;
  std::vector<float> e(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i)
    e[static_cast<size_t>(i)] = kernels::fast_exp(x[i] - m);
  float s = lane_sum(e.data(), c);
  float lse = std::isinf(m) ? 0.0f : std::log(s);
  loss = lse - (x[label] - m);
  float scale = gy / s;
  for (int64_t i = 0; i < c; ++i)
    dx[i] = e[static_cast<size_t>(i)] * scale;
  dx[label] -= gy;
}

} // namespace

TEST_CASE("sum_rows: JIT equals kernels::sum_axis(x, 0) bit for bit") {
  Jit jit;
  std::mt19937 rng(7);
  // Around the host's vector width (4, 8 or 16 floats), its 4-vector blocks, and the
  // TreeLSTM's widths.
  for (int64_t w : {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 150, 450, 750}) {
    CAPTURE(w);
    CompiledReduce k = jit.compile_reduce({.kind = ReduceKind::SumRows, .width = w});
    for (int64_t rows : kRows) {
      CAPTURE(rows);
      Tensor x = random_f32(Shape{rows, w}, rng);
      Tensor want = kernels::sum_axis(x, 0);
      Tensor got = Tensor::full(Shape{w}, -777.0f);
      const void* in[] = {x.raw()};
      void* out[] = {got.raw()};
      CHECK(k.fn(in, out, rows) == -1);
      CHECK(test::same_bits(got, want));
    }
    jit.remove(k.handle);
  }
}

TEST_CASE("cross_entropy: JIT within its stated bound of double precision, near the reference") {
  Jit jit;
  std::mt19937 rng(11);
  for (int64_t c : {1, 2, 5, 15, 16, 17, 40}) {
    CAPTURE(c);
    CompiledReduce fwd = jit.compile_reduce({.kind = ReduceKind::CrossEntropy, .width = c});
    CompiledReduce bwd = jit.compile_reduce({.kind = ReduceKind::CrossEntropyBwd, .width = c});
    for (int64_t rows : kRows) {
      CAPTURE(rows);
      // Large logits too: the max subtraction must keep them exact.
      Tensor x =
          random_f32(Shape{rows, c}, rng, rows == 17 ? -60.0f : -4.0f, rows == 17 ? 90.0f : 4.0f);
      Tensor y = random_labels(rows, c, rng);
      Tensor gy = random_f32(Shape{rows}, rng, -2.0f, 2.0f);
      Tensor loss = Tensor::full(Shape{rows}, -777.0f);
      Tensor dx = Tensor::full(Shape{rows, c}, -777.0f);
      const void* in[] = {x.raw(), y.raw(), gy.raw()};
      void* out_l[] = {loss.raw()};
      void* out_d[] = {dx.raw()};
      CHECK(fwd.fn(in, out_l, rows) == -1);
      CHECK(bwd.fn(in, out_d, rows) == -1);
      Tensor ref_l = kernels::cross_entropy(x, y);
      Tensor ref_d = kernels::cross_entropy_backward(x, y, gy);
      for (int64_t r = 0; r < rows; ++r) {
        CAPTURE(r);
        const float* xr = x.f32() + r * c;
        double m = xr[0];
        for (int64_t i = 1; i < c; ++i)
          m = std::max(m, static_cast<double>(xr[i]));
        double s = 0;
        for (int64_t i = 0; i < c; ++i)
          s += std::exp(xr[i] - m);
        int32_t l = y.i32()[r];
        double want = std::log(s) - (xr[l] - m);
        CHECK(std::abs(loss.f32()[r] - want) <= loss_bound(c, want, xr[l] - m));
        CHECK(std::abs(loss.f32()[r] - ref_l.f32()[r]) <= 1e-6 * (1 + std::abs(want)));
        double g = gy.f32()[r];
        for (int64_t i = 0; i < c; ++i) {
          double p = std::exp(xr[i] - m) / s;
          double want_d = g * (p - (i == l ? 1.0 : 0.0));
          float got = dx.f32()[r * c + i];
          CHECK(std::abs(got - want_d) <=
                (3e-7 + c * 6e-8) * std::abs(g) * p * 2 + 2.4e-7 * std::abs(want_d) + 1e-12);
          CHECK(std::abs(got - ref_d.f32()[r * c + i]) <= 1e-6 * (std::abs(g) + 1e-6));
        }
      }
    }
    jit.remove(fwd.handle);
    jit.remove(bwd.handle);
  }
}

TEST_CASE("cross_entropy: JIT equals the reference algorithm without contraction, bit for bit") {
  Jit jit;
  std::mt19937 rng(5);
  // Up to 40: the row max in one accumulator; from 64 on in interleaved ones, with 0 to 3
  // whole vectors after the last block of four and with or without a partial vector.
  for (int64_t c : {1, 2, 5, 15, 16, 17, 40, 64, 80, 100, 150, 1000}) {
    CAPTURE(c);
    CompiledReduce fwd = jit.compile_reduce({.kind = ReduceKind::CrossEntropy, .width = c});
    CompiledReduce bwd = jit.compile_reduce({.kind = ReduceKind::CrossEntropyBwd, .width = c});
    const int64_t rows = 50;
    Tensor x = random_f32(Shape{rows, c}, rng, -30.0f, 30.0f);
    Tensor y = random_labels(rows, c, rng);
    Tensor gy = random_f32(Shape{rows}, rng, -2.0f, 2.0f);
    Tensor loss = Tensor::empty(DType::F32, Shape{rows});
    Tensor dx = Tensor::empty(DType::F32, Shape{rows, c});
    Tensor want_l = Tensor::empty(DType::F32, Shape{rows});
    Tensor want_d = Tensor::empty(DType::F32, Shape{rows, c});
    const void* in[] = {x.raw(), y.raw(), gy.raw()};
    void* out_l[] = {loss.raw()};
    void* out_d[] = {dx.raw()};
    REQUIRE(fwd.fn(in, out_l, rows) == -1);
    REQUIRE(bwd.fn(in, out_d, rows) == -1);
    for (int64_t r = 0; r < rows; ++r)
      ce_emulated(x.f32() + r * c, y.i32()[r], gy.f32()[r], c, want_l.f32()[r],
                  want_d.f32() + r * c);
    CHECK(test::same_bits(loss, want_l));
    CHECK(test::same_bits(dx, want_d));
  }
}

TEST_CASE("cross_entropy: the backward from the forward's row statistics equals the full "
          "backward bit for bit, and either pointer may be null") {
  Jit jit;
  std::mt19937 rng(8);
  for (int64_t c : {5, 16, 17, 300, 1000}) {
    CAPTURE(c);
    const ReduceSpec plain_f{.kind = ReduceKind::CrossEntropy, .width = c};
    const ReduceSpec plain_b{.kind = ReduceKind::CrossEntropyBwd, .width = c};
    ReduceSpec stats_f = plain_f, stats_b = plain_b;
    stats_f.row_stats = stats_b.row_stats = true;
    CHECK(stats_b.canonical_text() ==
          plain_b.canonical_text().replace(plain_b.canonical_text().find(" sched"), 0, " stats"));
    CompiledReduce f0 = jit.compile_reduce(plain_f), b0 = jit.compile_reduce(plain_b);
    CompiledReduce f1 = jit.compile_reduce(stats_f), b1 = jit.compile_reduce(stats_b);
    const int64_t rows = 40;
    Tensor x = random_f32(Shape{rows, c}, rng, -30.0f, 30.0f);
    Tensor y = random_labels(rows, c, rng);
    Tensor gy = random_f32(Shape{rows}, rng, -2.0f, 2.0f);
    auto empty = [](Shape s) { return Tensor::empty(DType::F32, std::move(s)); };
    Tensor want_l = empty({rows}), want_d = empty({rows, c});
    {
      const void* in[] = {x.raw(), y.raw(), gy.raw()};
      void* ol[] = {want_l.raw()};
      void* od[] = {want_d.raw()};
      REQUIRE(f0.fn(in, ol, rows) == -1);
      REQUIRE(b0.fn(in, od, rows) == -1);
    }
    // The forward with statistics: the same losses, and each row's m and s.
    Tensor loss = empty({rows}), stats = Tensor::full(Shape{rows, 2}, -7.0f);
    const void* in[] = {x.raw(), y.raw(), gy.raw(), stats.raw()};
    void* ol[] = {loss.raw(), stats.raw()};
    REQUIRE(f1.fn(in, ol, rows) == -1);
    CHECK(test::same_bits(loss, want_l));
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.f32() + r * c;
      CHECK(stats.f32()[2 * r] == *std::max_element(xr, xr + c));
      CHECK(stats.f32()[2 * r + 1] >= 1.0f);
    }
    // The backward from them, and without them (in[3] null): the full backward's bits.
    Tensor dx = empty({rows, c}), dx_null = empty({rows, c});
    void* od[] = {dx.raw()};
    REQUIRE(b1.fn(in, od, rows) == -1);
    CHECK(test::same_bits(dx, want_d));
    const void* in_null[] = {x.raw(), y.raw(), gy.raw(), nullptr};
    void* od_null[] = {dx_null.raw()};
    REQUIRE(b1.fn(in_null, od_null, rows) == -1);
    CHECK(test::same_bits(dx_null, want_d));
    // The forward without a place for them (out[1] null): the same losses.
    Tensor loss_null = empty({rows});
    void* ol_null[] = {loss_null.raw(), nullptr};
    REQUIRE(f1.fn(in, ol_null, rows) == -1);
    CHECK(test::same_bits(loss_null, want_l));
    // Statistics the backward did not come from (a wrong m) change its result: it reads them.
    stats.f32()[0] += 1.0f;
    REQUIRE(b1.fn(in, od, rows) == -1);
    CHECK_FALSE(test::same_bits(dx, want_d));
  }
  // Only cross-entropy over per-row logits has them.
  CHECK_THROWS_WITH_AS(
      jit.compile_reduce({.kind = ReduceKind::Softmax, .width = 8, .row_stats = true}),
      doctest::Contains("row statistics of softmax"), Error);
  CHECK_THROWS_WITH_AS(
      jit.compile_reduce(
          {.kind = ReduceKind::CrossEntropy, .width = 8, .shared_logits = true, .row_stats = true}),
      doctest::Contains("with shared logits"), Error);
}

TEST_CASE("cross_entropy: one logits row or one label shared by every row (stride 0) gives the "
          "bits of the per-row kernel on that row or label repeated") {
  Jit jit;
  std::mt19937 rng(8);
  for (int64_t c : {1, 5, 16, 17, 40}) {
    CAPTURE(c);
    for (bool shared_logits : {true, false}) {
      CAPTURE(shared_logits);
      const int64_t rows = 23;
      Tensor x = random_f32(shared_logits ? Shape{c} : Shape{rows, c}, rng, -30.0f, 30.0f);
      Tensor y = random_labels(shared_logits ? rows : 1, c, rng);
      Tensor gy = random_f32(Shape{rows}, rng, -2.0f, 2.0f);
      // The per-row operands: the shared one repeated on every row.
      Tensor xr = Tensor::empty(DType::F32, Shape{rows, c});
      Tensor yr = Tensor::empty(DType::I32, Shape{rows});
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < c; ++i)
          xr.f32()[r * c + i] = x.f32()[(shared_logits ? 0 : r * c) + i];
        yr.i32()[r] = y.i32()[shared_logits ? r : 0];
      }
      for (auto kind : {ReduceKind::CrossEntropy, ReduceKind::CrossEntropyBwd}) {
        CAPTURE(reduce_kind_name(kind));
        ReduceSpec spec{.kind = kind, .width = c};
        spec.shared_logits = shared_logits;
        spec.shared_label = !shared_logits;
        CompiledReduce shared = jit.compile_reduce(spec);
        CompiledReduce per_row = jit.compile_reduce({.kind = kind, .width = c});
        const Shape out_shape = kind == ReduceKind::CrossEntropy ? Shape{rows} : Shape{rows, c};
        Tensor got = Tensor::empty(DType::F32, out_shape);
        Tensor want = Tensor::empty(DType::F32, out_shape);
        const void* in[] = {x.raw(), y.raw(), gy.raw()};
        const void* in_r[] = {xr.raw(), yr.raw(), gy.raw()};
        void* o[] = {got.raw()};
        void* o_r[] = {want.raw()};
        REQUIRE(shared.fn(in, o, rows) == -1);
        REQUIRE(per_row.fn(in_r, o_r, rows) == -1);
        CHECK(test::same_bits(got, want));
      }
    }
  }
  // A shared label out of range is reported at the first row.
  CompiledReduce k = jit.compile_reduce(
      ReduceSpec{.kind = ReduceKind::CrossEntropy, .width = 5, .shared_label = true});
  Tensor x = random_f32(Shape{4, 5}, rng);
  Tensor y = Tensor::empty(DType::I32, Shape{1});
  y.i32()[0] = 5;
  Tensor out = Tensor::empty(DType::F32, Shape{4});
  const void* in[] = {x.raw(), y.raw()};
  void* o[] = {out.raw()};
  CHECK(k.fn(in, o, 4) == 0);
}

TEST_CASE("cross_entropy: a label out of range is reported, never read out of bounds") {
  Jit jit;
  std::mt19937 rng(3);
  const int64_t c = 5, rows = 9;
  for (auto kind : {ReduceKind::CrossEntropy, ReduceKind::CrossEntropyBwd}) {
    CAPTURE(reduce_kind_name(kind));
    CompiledReduce k = jit.compile_reduce({.kind = kind, .width = c});
    Tensor x = random_f32(Shape{rows, c}, rng);
    Tensor gy = random_f32(Shape{rows}, rng);
    Tensor out = Tensor::zeros(DType::F32, Shape{rows, c});
    void* o[] = {out.raw()};
    Tensor y = random_labels(rows, c, rng);
    const void* in[] = {x.raw(), y.raw(), gy.raw()};
    CHECK(k.fn(in, o, rows) == -1);
    y.i32()[4] = 5; // == C
    y.i32()[7] = -1;
    CHECK(k.fn(in, o, rows) == 4);
    y.i32()[4] = 0;
    CHECK(k.fn(in, o, rows) == 7);
    CHECK_THROWS_AS(kernels::cross_entropy(x, y), Error); // what the caller then reports
    jit.remove(k.handle);
  }
}

namespace {

// The reference kernels' algorithms along a row (src/kernels/reduce.cpp, the gradient ops of
// src/ops/grad_kernels.cpp), without contraction, as the JIT evaluates them.
float row_max(const float* x, int64_t c) {
  float m = x[0];
  for (int64_t i = 1; i < c; ++i)
    m = x[i] > m ? x[i] : m;
  return m;
}

void along_emulated(ReduceKind kind, const float* x, const float* g, int64_t c, float* y) {
  std::vector<float> e(static_cast<size_t>(c));
  auto each = [&](auto f) {
    for (int64_t i = 0; i < c; ++i)
      e[static_cast<size_t>(i)] = f(i);
  };
  switch (kind) {
  case ReduceKind::SumCols:
  case ReduceKind::MeanCols:
    each([&](int64_t i) { return x[i]; });
    y[0] = lane_sum(e.data(), c);
    if (kind == ReduceKind::MeanCols)
      y[0] *= 1.0f / static_cast<float>(c);
    return;
  case ReduceKind::Softmax: {
    float m = row_max(x, c);
    each([&](int64_t i) { return kernels::fast_exp(x[i] - m); });
    float inv = 1.0f / lane_sum(e.data(), c);
    for (int64_t i = 0; i < c; ++i)
      y[i] = e[static_cast<size_t>(i)] * inv;
    return;
  }
  case ReduceKind::LogSoftmax: {
    float m = row_max(x, c);
    each([&](int64_t i) { return kernels::fast_exp(x[i] - m); });
    float lse = std::isinf(m) ? 0.0f : std::log(lane_sum(e.data(), c));
    for (int64_t i = 0; i < c; ++i)
      y[i] = (x[i] - m) - lse;
    return;
  }
  case ReduceKind::SoftmaxBwd: {
    each([&](int64_t i) { return g[i] * x[i]; });
    float s = lane_sum(e.data(), c);
    for (int64_t i = 0; i < c; ++i)
      y[i] = x[i] * (g[i] - s);
    return;
  }
  case ReduceKind::LogSoftmaxBwd: {
    each([&](int64_t i) { return g[i]; });
    float s = lane_sum(e.data(), c);
    for (int64_t i = 0; i < c; ++i)
      y[i] = g[i] - kernels::fast_exp(x[i]) * s;
    return;
  }
  default:
    FAIL("not a kind along rows");
  }
}

// The reference kernels themselves on rows of x [rows, c] (and g for the backward kinds).
Tensor along_reference(ReduceKind kind, const Tensor& x, const Tensor& g) {
  using kernels::Binary;
  switch (kind) {
  case ReduceKind::SumCols:
    return kernels::sum_axis(x, 1);
  case ReduceKind::MeanCols:
    return kernels::mean_axis(x, 1);
  case ReduceKind::Softmax:
    return kernels::softmax(x);
  case ReduceKind::LogSoftmax:
    return kernels::log_softmax(x);
  case ReduceKind::SoftmaxBwd: {
    Tensor s = kernels::sum_axis(kernels::binary(Binary::Mul, g, x), -1);
    Tensor d = kernels::binary(Binary::Sub, g, s.reshaped(Shape{x.dim(0), 1}));
    return kernels::binary(Binary::Mul, x, d);
  }
  default: { // LogSoftmaxBwd
    Tensor s = kernels::sum_axis(g, -1).reshaped(Shape{x.dim(0), 1});
    Tensor p = kernels::unary(kernels::Unary::Exp, x);
    return kernels::binary(Binary::Sub, g, kernels::binary(Binary::Mul, p, s));
  }
  }
}

} // namespace

TEST_CASE("along rows: sum, mean, softmax, log_softmax and their backward equal the reference") {
  Jit jit;
  std::mt19937 rng(11);
  for (auto kind : {ReduceKind::SumCols, ReduceKind::MeanCols, ReduceKind::Softmax,
                    ReduceKind::LogSoftmax, ReduceKind::SoftmaxBwd, ReduceKind::LogSoftmaxBwd}) {
    const std::string name = reduce_kind_name(kind);
    CAPTURE(name);
    const bool per_row = kind == ReduceKind::SumCols || kind == ReduceKind::MeanCols;
    const bool exact = per_row; // no e^x: the reference kernels' own bits
    for (int64_t c : {1, 2, 5, 15, 16, 17, 33, 150, 1000}) {
      CAPTURE(c);
      CompiledReduce k = jit.compile_reduce({.kind = kind, .width = c});
      for (int64_t rows : kRows) {
        CAPTURE(rows);
        Tensor x = random_f32(Shape{rows, c}, rng, -30.0f, 30.0f);
        if (kind == ReduceKind::SoftmaxBwd) // softmax's outputs
          x = kernels::softmax(x);
        if (kind == ReduceKind::LogSoftmaxBwd)
          x = kernels::log_softmax(x);
        Tensor g = random_f32(Shape{rows, c}, rng, -2.0f, 2.0f);
        Shape ys = per_row ? Shape{rows} : Shape{rows, c};
        Tensor got = Tensor::full(ys, -777.0f), want = Tensor::full(ys, -777.0f);
        const void* in[] = {x.raw(), g.raw()};
        void* out[] = {got.raw()};
        REQUIRE(k.fn(in, out, rows) == -1);
        for (int64_t r = 0; r < rows; ++r)
          along_emulated(kind, x.f32() + r * c, g.f32() + r * c, c,
                         want.f32() + r * (per_row ? 1 : c));
        CHECK(test::same_bits(got, want));
        // The reference kernels: the same bits without e^x; with it, within a few ulps here
        // (the bitwise comparison is with the emulated algorithm above).
        Tensor ref = along_reference(kind, x, g);
        REQUIRE(ref.numel() == got.numel());
        if (exact) {
          CHECK(test::same_bits(got, ref));
          continue;
        }
        // Relative to the magnitude of what was added up: the backward kinds subtract terms
        // of up to sum |gy| (y and e^y are at most 1), which may cancel.
        double worst = 0;
        for (int64_t r = 0; r < rows; ++r) {
          const bool bwd = kind == ReduceKind::SoftmaxBwd || kind == ReduceKind::LogSoftmaxBwd;
          double terms = 0; // |gy_i| + |y_i * s| <= 2 * sum |gy|
          for (int64_t i = 0; bwd && i < c; ++i)
            terms += 2 * std::abs(static_cast<double>(g.f32()[r * c + i]));
          for (int64_t i = r * c; i < (r + 1) * c; ++i)
            worst =
                std::max(worst, std::abs(static_cast<double>(got.f32()[i]) - ref.f32()[i]) /
                                    (std::abs(static_cast<double>(ref.f32()[i])) + terms + 1e-3));
        }
        CHECK(worst <= 2e-6);
      }
      jit.remove(k.handle);
    }
  }
}

TEST_CASE("reduce specs: canonical text, validation, the kernel cache") {
  ReduceSpec s{.kind = ReduceKind::CrossEntropy, .width = 5};
  CHECK(s.canonical_text() == "reduce f32 cross_entropy w=5 sched=default");
  CHECK(s.signature() == "reduce f32 cross_entropy w=5");
  CHECK(ReduceSpec{.kind = ReduceKind::CrossEntropyBwd, .width = 5, .shared_logits = true}
            .canonical_text() == "reduce f32 cross_entropy_bwd w=5 shared=logits sched=default");
  CHECK(
      ReduceSpec{.kind = ReduceKind::CrossEntropy, .width = 5, .shared_label = true}.signature() ==
      "reduce f32 cross_entropy w=5 shared=label");
  CHECK_THROWS_AS(
      (ReduceSpec{.kind = ReduceKind::SumRows, .width = 3, .shared_logits = true}.validate()),
      Error);
  CHECK_THROWS_AS(
      (ReduceSpec{
          .kind = ReduceKind::CrossEntropy, .width = 3, .shared_logits = true, .shared_label = true}
           .validate()),
      Error);
  CHECK_THROWS_AS((ReduceSpec{.width = 0}.validate()), Error);
  CHECK_THROWS_AS((ReduceSpec{.width = 3, .dtype = "f16"}.validate()), Error);
  CHECK_THROWS_AS((ReduceSpec{.width = 3, .schedule = "v16x2"}.validate()), Error);
  CHECK(ReduceSpec{.kind = ReduceKind::LogSoftmaxBwd, .width = 7}.canonical_text() ==
        "reduce f32 log_softmax_bwd w=7 sched=default");
  CHECK(reduce_inputs(ReduceKind::SumCols) == 1);
  CHECK(reduce_inputs(ReduceKind::SoftmaxBwd) == 2);
  CHECK(reduce_inputs(ReduceKind::CrossEntropyBwd) == 3);
  Jit jit;
  CHECK_THROWS_AS(jit.compile_reduce(ReduceSpec{.width = 0}), Error);
  KernelCache cache(jit, 8);
  auto a = cache.get_reduce(s);
  auto b = cache.get_reduce(s);
  auto sum = cache.get_reduce({.kind = ReduceKind::SumRows, .width = 150});
  CHECK(a == b);
  CHECK(std::holds_alternative<ReduceKernel>(a->family));
  CHECK_THROWS_AS(a->elementwise(), std::bad_variant_access); // not that family
  CHECK(static_cast<bool>(a->reduce().fn));
  CHECK(a->schedule == "default");
  CHECK(a->schedule_source == "default");
  CHECK(a->key == cache.key(s));
  CHECK(a->key.find("cpu=" + jit.target_cpu()) != std::string::npos);
  CHECK(cache.stats().hits == 1);
  CHECK(cache.stats().misses == 2);
  CHECK(cache.stats().compiles == 2);
  CHECK(a->ir_hash == ir_text_hash(jit.optimized_ir(s)));
  CHECK(sum->key != a->key);
}

namespace {

// Equal bits, or both NaN (a NaN's sign and payload depend on operand order in the machine
// code, which neither kernel promises).
bool same_or_both_nan(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) &&
        !test::same_bits(a.subspan(i, 1), b.subspan(i, 1)))
      return false;
  return true;
}

} // namespace

TEST_CASE("row max in interleaved accumulators: rows with +0 and -0 maxima, infinities and NaNs "
          "give the reference algorithm's results") {
  Jit jit;
  std::mt19937 rng(21);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t c : {80, 100, 1000}) {
    CAPTURE(c);
    // Row 0: lane 3 holds +0 in vector 1 and -0 in vector 4. In row order the max keeps the
    // first, +0; in four interleaved accumulators vector 4 shares the first accumulator with
    // vector 0, which is combined first, so it keeps -0. Row 1 the other way round. Row 2
    // zeros of both signs in every accumulator; row 3 a +inf; row 4 all -inf; row 5 a NaN
    // first; row 6 a NaN last.
    const int64_t rows = 7;
    Tensor x = random_f32(Shape{rows, c}, rng, -30.0f, -1.0f);
    float* p = x.f32();
    p[0 * c + 16 + 3] = 0.0f;
    p[0 * c + 64 + 3] = -0.0f;
    p[1 * c + 16 + 3] = -0.0f;
    p[1 * c + 64 + 3] = 0.0f;
    for (int64_t i = 0; i < c; i += 7)
      p[2 * c + i] = i % 2 ? 0.0f : -0.0f;
    p[3 * c + c / 2] = inf;
    for (int64_t i = 0; i < c; ++i)
      p[4 * c + i] = -inf;
    p[5 * c] = nan;
    p[6 * c + c - 1] = nan;
    Tensor y = random_labels(rows, c, rng);
    y.i32()[0] = 64 + 3; // the labels on the zero maxima
    y.i32()[1] = 16 + 3;
    Tensor gy = random_f32(Shape{rows}, rng, -2.0f, 2.0f);
    CompiledReduce fwd = jit.compile_reduce({.kind = ReduceKind::CrossEntropy, .width = c});
    CompiledReduce bwd = jit.compile_reduce({.kind = ReduceKind::CrossEntropyBwd, .width = c});
    Tensor loss = Tensor::empty(DType::F32, Shape{rows});
    Tensor dx = Tensor::empty(DType::F32, Shape{rows, c});
    const void* in[] = {x.raw(), y.raw(), gy.raw()};
    void* out_l[] = {loss.raw()};
    void* out_d[] = {dx.raw()};
    REQUIRE(fwd.fn(in, out_l, rows) == -1);
    REQUIRE(bwd.fn(in, out_d, rows) == -1);
    std::vector<float> want_l(rows), want_d(static_cast<size_t>(rows * c));
    for (int64_t r = 0; r < rows; ++r)
      ce_emulated(p + r * c, y.i32()[r], gy.f32()[r], c, want_l[static_cast<size_t>(r)],
                  want_d.data() + r * c);
    CHECK(same_or_both_nan({loss.f32(), static_cast<size_t>(rows)}, want_l));
    CHECK(same_or_both_nan({dx.f32(), want_d.size()}, want_d));
    for (auto kind : {ReduceKind::Softmax, ReduceKind::LogSoftmax}) {
      CAPTURE(reduce_kind_name(kind));
      CompiledReduce k = jit.compile_reduce({.kind = kind, .width = c});
      Tensor got = Tensor::empty(DType::F32, Shape{rows, c});
      std::vector<float> want(static_cast<size_t>(rows * c));
      const void* kin[] = {x.raw(), x.raw()};
      void* kout[] = {got.raw()};
      REQUIRE(k.fn(kin, kout, rows) == -1);
      for (int64_t r = 0; r < rows; ++r)
        along_emulated(kind, p + r * c, p + r * c, c, want.data() + r * c);
      CHECK(same_or_both_nan({got.f32(), want.size()}, want));
      jit.remove(k.handle);
    }
    jit.remove(fwd.handle);
    jit.remove(bwd.handle);
  }
}

} // namespace tests_jit_reduce_test
