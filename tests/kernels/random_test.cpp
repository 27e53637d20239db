// The random ops' numbers: Philox4x32-10 against Random123's published known-answer vectors,
// the float conversion, dropout's and the sources' statistics for a fixed key (bounds that a
// correct draw meets and a biased or constant one fails), and the rows of a group drawing
// what each row draws alone.
#include "src/interp/random.h"
#include "src/kernels/random.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tests_kernels_random_test {

using namespace pejit;
using kernels::Philox4x32;

namespace {

kernels::RandomKey key(uint32_t ctx, uint32_t index, uint32_t step, uint64_t seed) {
  kernels::RandomKey k;
  k.context = ctx;
  k.index = index;
  k.step = step;
  k.seed = seed;
  return k;
}

} // namespace

TEST_SUITE("kernels") {
  TEST_CASE("random: Philox4x32-10 gives Random123's known answers (kat_vectors)") {
    // philox4x32 10 CTR KEY -> EXPECTED, from Random123's kat_vectors.
    CHECK(kernels::philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
          Philox4x32{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
    CHECK(kernels::philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                 {0xffffffffu, 0xffffffffu}) ==
          Philox4x32{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
    CHECK(kernels::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                 {0xa4093822u, 0x299f31d0u}) ==
          Philox4x32{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
  }

  TEST_CASE("random: a word gives the float of its top 24 bits times 2^-24, below 1") {
    CHECK(kernels::unit_float(0) == 0.0f);
    CHECK(kernels::unit_float(0xffffffffu) == 1.0f - 0x1p-24f);
    CHECK(kernels::unit_float(0x80000000u) == 0.5f);
    CHECK(kernels::unit_float(0x000000ffu) == 0.0f); // the low 8 bits are dropped
    // Element e of a stream is word e mod 4 of the block e / 4.
    auto k = key(7, 3, 11, 0x123456789abcdefull);
    Philox4x32 w = kernels::philox4x32_10({1, 3 + 2, 7, 11}, {0x89abcdefu, 0x01234567u});
    for (uint32_t e = 4; e < 8; ++e)
      CHECK(kernels::random_word(k, 2, e) == w[e - 4]);
  }

  TEST_CASE("random: dropout keeps a binomial fraction scaled by 1 / (1 - p), off in inference") {
    const int64_t n = 200000;
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] = 1.0f + static_cast<float>(i % 7);
    for (float p : {0.1f, 0.5f, 0.8f}) {
      CAPTURE(p);
      kernels::dropout_row(key(1, 0, 5, 42), 0, p, x.data(), y.data(), n);
      const float scale = 1.0f / (1.0f - p);
      int64_t kept = 0, wrong = 0;
      for (int64_t i = 0; i < n; ++i) {
        float v = y[static_cast<size_t>(i)];
        if (v != 0.0f) {
          ++kept;
          wrong += v != x[static_cast<size_t>(i)] * scale;
        }
      }
      CHECK(wrong == 0);
      // Kept ~ Binomial(n, 1 - p): within 5 standard deviations for this fixed key.
      double mean = static_cast<double>(n) * (1.0 - p);
      double sd = std::sqrt(static_cast<double>(n) * p * (1.0 - p));
      CHECK(std::fabs(static_cast<double>(kept) - mean) < 5 * sd);
    }
    // Another step, another mask; the same key, the same mask.
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    kernels::dropout_row(key(1, 0, 5, 42), 0, 0.5f, x.data(), a.data(), n);
    kernels::dropout_row(key(1, 0, 5, 42), 0, 0.5f, x.data(), b.data(), n);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    kernels::dropout_row(key(1, 0, 6, 42), 0, 0.5f, x.data(), b.data(), n);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) != 0);
    // Inference: the identity.
    auto off = key(1, 0, 5, 42);
    off.train = false;
    kernels::dropout_row(off, 0, 0.5f, x.data(), b.data(), n);
    CHECK(std::memcmp(x.data(), b.data(), x.size() * 4) == 0);
  }

  TEST_CASE("random: bernoulli, uniform and normal have their distribution's moments") {
    const int64_t n = 200000;
    std::vector<float> v(static_cast<size_t>(n));
    auto k = key(9, 1, 2, 3);
    auto moments = [&](double& mean, double& var) {
      mean = var = 0;
      for (float x : v)
        mean += x;
      mean /= static_cast<double>(n);
      for (float x : v)
        var += (x - mean) * (x - mean);
      var /= static_cast<double>(n);
    };
    double m, s2;
    kernels::random_fill(kernels::RandomDist::Uniform, k, 0, 0, v.data(), n);
    CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x >= 0.0f && x < 1.0f; }));
    moments(m, s2);
    CHECK(std::fabs(m - 0.5) < 5 * std::sqrt(1.0 / 12 / static_cast<double>(n)));
    CHECK(std::fabs(s2 - 1.0 / 12) < 0.002);
    kernels::random_fill(kernels::RandomDist::Bernoulli, k, 0, 0.3f, v.data(), n);
    CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f || x == 1.0f; }));
    moments(m, s2);
    CHECK(std::fabs(m - 0.3) < 5 * std::sqrt(0.3 * 0.7 / static_cast<double>(n)));
    kernels::random_fill(kernels::RandomDist::Normal, k, 0, 0, v.data(), n);
    moments(m, s2);
    CHECK(std::fabs(m) < 5 / std::sqrt(static_cast<double>(n)));
    CHECK(std::fabs(s2 - 1.0) < 0.02);
    CHECK(std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }));
  }

  TEST_CASE("random: a group's rows draw what each row draws alone") {
    interp::RandomState rs{77, 4, true};
    const int64_t rows = 5, d = 37;
    std::vector<int32_t> keys;
    for (uint32_t r = 0; r < rows; ++r) {
      Tensor k = interp::random_key_tensor(10 + r, r % 2, rs);
      keys.insert(keys.end(), k.i32(), k.i32() + kernels::kRandomKeyWidth);
    }
    Tensor all = Tensor::from_i32(Shape{rows, kernels::kRandomKeyWidth}, keys);
    Tensor x = Tensor::full(Shape{rows, d}, 2.0f);
    Tensor y = kernels::dropout(x, all, 3, 0.25f);
    Tensor u = kernels::random_op(kernels::RandomDist::Normal, all, 1, 0, Shape{d});
    CHECK(u.shape() == Shape{rows, d});
    for (int64_t r = 0; r < rows; ++r) {
      Tensor k1 = interp::random_key_tensor(10 + static_cast<uint32_t>(r),
                                            static_cast<uint32_t>(r % 2), rs);
      Tensor y1 = kernels::dropout(Tensor::full(Shape{d}, 2.0f), k1, 3, 0.25f);
      Tensor u1 = kernels::random_op(kernels::RandomDist::Normal, k1, 1, 0, Shape{d});
      CHECK(std::memcmp(y1.f32(), y.f32() + r * d, d * 4) == 0);
      CHECK(std::memcmp(u1.f32(), u.f32() + r * d, d * 4) == 0);
    }
    // Rows with other keys draw other numbers.
    CHECK(std::memcmp(u.f32(), u.f32() + d, d * 4) != 0);
  }
}

} // namespace tests_kernels_random_test
