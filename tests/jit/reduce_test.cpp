// Family-3 kernels (row sums, cross-entropy and its backward): JIT ≡ the reference kernels of
// src/kernels/reduce.cpp on random sizes (0 and 1 rows, widths around the vector widths, C = 1
// and 5), bit for bit for the sums; cross-entropy within the bound stated in reduce_codegen.cpp
// against double precision, and within a few ulps of the reference; labels out of range.
#include "jit/kernel_cache.h"
#include "kernels/fast_math.h"
#include "kernels/kernels.h"
#include "pejit/error.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

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

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Bound of reduce_codegen.cpp's design note, with a factor of 2 of slack for the double
// reference's own rounding of the inputs' exponentials (none) and logs.
double loss_bound(int64_t c, double loss, double xl_minus_m) {
  return 2 * (3e-7 + c * 6e-8 + 2 * 6e-8 * (std::abs(loss) + std::abs(xl_minus_m)));
}

const std::vector<int64_t> kRows = {0, 1, 2, 15, 16, 17, 33, 200};

// The reference kernels' algorithm (src/kernels/reduce.cpp: row_max, 16-lane sums of fast_exp,
// the 8-4-2-1 fold, logf), compiled here without multiply-add contraction (CMakeLists.txt), as
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
      CHECK(same_bits(got, want));
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
  for (int64_t c : {1, 2, 5, 15, 16, 17, 40}) {
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
    CHECK(same_bits(loss, want_l));
    CHECK(same_bits(dx, want_d));
  }
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

TEST_CASE("reduce specs: canonical text, validation, the kernel cache") {
  ReduceSpec s{.kind = ReduceKind::CrossEntropy, .width = 5};
  CHECK(s.canonical_text() == "reduce f32 cross_entropy w=5 sched=default");
  CHECK(s.signature() == "reduce f32 cross_entropy w=5");
  CHECK_THROWS_AS((ReduceSpec{.width = 0}.validate()), Error);
  CHECK_THROWS_AS((ReduceSpec{.width = 3, .dtype = "f16"}.validate()), Error);
  CHECK_THROWS_AS((ReduceSpec{.width = 3, .schedule = "v16x2"}.validate()), Error);
  Jit jit;
  CHECK_THROWS_AS(jit.compile_reduce(ReduceSpec{.width = 0}), Error);
  KernelCache cache(jit, 8);
  auto a = cache.get_reduce(s);
  auto b = cache.get_reduce(s);
  auto sum = cache.get_reduce({.kind = ReduceKind::SumRows, .width = 150});
  CHECK(a == b);
  CHECK(a->is_reduce);
  CHECK(static_cast<bool>(a->reduce.fn));
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
