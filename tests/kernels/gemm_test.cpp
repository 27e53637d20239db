// sgemm against a naive triple loop over random sizes (m = 1, sizes off multiples of 16, all
// transpose combinations, alpha/beta variants, padded leading dims) and matmul's shape rules;
// the packed right operand (pack_b + sgemm_packed) and the unstacked weight gradient
// (sgemm_tn_stretches) against the same loop and, bit for bit, against sgemm.
#include "src/kernels/kernels.h"
#include "src/util/check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

namespace tests_kernels_gemm_test {

using namespace pejit;
using namespace pejit::kernels;

namespace {

void naive(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += double(ta ? a[p * lda + i] : a[i * lda + p]) *
             double(tb ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = float(alpha * s + (beta == 0 ? 0.0 : beta * double(c[i * ldc + j])));
    }
}

void check_case(std::mt19937& rng, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                float beta, int64_t pad) {
  std::uniform_real_distribution<float> u(-1, 1);
  int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  std::vector<float> a((ta ? k : m) * lda), b((tb ? n : k) * ldb), c(m * ldc), ref;
  for (auto& v : a)
    v = u(rng);
  for (auto& v : b)
    v = u(rng);
  for (auto& v : c)
    v = beta == 0 ? NAN : u(rng); // beta == 0 must not read C
  ref = c;
  naive(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, ref.data(), ldc);
  sgemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  double err = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      err = std::max(err, double(std::fabs(c[i * ldc + j] - ref[i * ldc + j])));
  INFO("ta=", ta, " tb=", tb, " m=", m, " n=", n, " k=", k, " alpha=", alpha, " beta=", beta,
       " pad=", pad);
  CHECK(err <= 1e-5 * std::sqrt(double(k) + 1) * 4);
}

std::vector<float> random_vec(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v)
    x = u(rng);
  return v;
}

// sgemm_packed on pack_b(trans_b) of a random B, against the naive loop and against sgemm on
// the unpacked B.
void check_packed(std::mt19937& rng, bool trans_b, int64_t m, int64_t n, int64_t k, float beta,
                  int64_t pad) {
  int64_t lda = k + pad, ldb = (trans_b ? k : n) + pad, ldc = n + pad;
  std::vector<float> a = random_vec(rng, m * lda), b = random_vec(rng, (trans_b ? n : k) * ldb);
  std::vector<float> c = random_vec(rng, m * ldc);
  if (beta == 0)
    std::fill(c.begin(), c.end(), NAN); // beta == 0 must not read C
  std::vector<float> packed(static_cast<size_t>(packed_size(k, n)), NAN);
  pack_b(trans_b, k, n, b.data(), ldb, packed.data());
  std::vector<float> ref = c, via_sgemm = c;
  naive(false, trans_b, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, beta, ref.data(), ldc);
  sgemm(false, trans_b, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, beta, via_sgemm.data(), ldc);
  sgemm_packed(m, n, k, a.data(), lda, packed.data(), beta, c.data(), ldc);
  double err = 0;
  bool same = true;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      err = std::max(err, double(std::fabs(c[i * ldc + j] - ref[i * ldc + j])));
      same = same && c[i * ldc + j] == via_sgemm[i * ldc + j];
    }
  INFO("trans_b=", trans_b, " m=", m, " n=", n, " k=", k, " beta=", beta, " pad=", pad);
  CHECK(err <= 1e-5 * std::sqrt(double(k) + 1) * 4);
#ifdef __AVX512F__
  if (!trans_b || m > 8) // (sgemm takes a few rows times B^T as row dot products)
    CHECK(same);         // one kernel, the same sums in the same order
#endif
  for (int64_t i = 0; i < m; ++i) // padding between rows untouched
    for (int64_t j = n; j < ldc; ++j)
      CHECK(std::isnan(c[i * ldc + j]) == (beta == 0));
}

// sgemm_tn_stretches over rows cut into random stretches (empty ones included), against the
// naive loop and sgemm over the stacked rows.
void check_stretches(std::mt19937& rng, int64_t m, int64_t n, std::vector<int64_t> rows,
                     float beta) {
  int64_t k = 0;
  for (int64_t r : rows)
    k += r;
  std::vector<float> a = random_vec(rng, k * m), b = random_vec(rng, k * n);
  std::vector<float> c = random_vec(rng, m * n);
  if (beta == 0)
    std::fill(c.begin(), c.end(), NAN);
  std::vector<GemmStretch> parts;
  std::vector<std::vector<float>> copies; // each stretch in its own buffer
  int64_t at = 0;
  for (int64_t r : rows) {
    copies.emplace_back(a.begin() + at * m, a.begin() + (at + r) * m);
    copies.emplace_back(b.begin() + at * n, b.begin() + (at + r) * n);
    at += r;
  }
  for (size_t s = 0; s < rows.size(); ++s)
    parts.push_back({copies[2 * s].data(), copies[2 * s + 1].data(), rows[s]});
  std::vector<float> ref = c, stacked = c;
  naive(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, beta, ref.data(), n);
  sgemm(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, beta, stacked.data(), n);
  sgemm_tn_stretches(m, n, parts.data(), parts.size(), beta, c.data(), n);
  double err = 0;
  bool same = true;
  for (size_t i = 0; i < c.size(); ++i) {
    err = std::max(err, double(std::fabs(c[i] - ref[i])));
    same = same && c[i] == stacked[i];
  }
  INFO("m=", m, " n=", n, " k=", k, " stretches=", rows.size(), " beta=", beta);
  CHECK(err <= 1e-5 * std::sqrt(double(k) + 1) * 4);
#ifdef __AVX512F__
  CHECK(same);
#endif
}

} // namespace

TEST_SUITE("kernels") {
  TEST_CASE("sgemm vs naive, all transposes") {
    std::mt19937 rng(42);
    std::uniform_int_distribution<int> sz(1, 70);
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        for (float beta : {0.0f, 1.0f}) {
          check_case(rng, ta, tb, 1, 750, 300, 1.0f, beta, 0); // the TreeLSTM GEMV
          check_case(rng, ta, tb, 25, 33, 17, 1.0f, beta, 0);
          check_case(rng, ta, tb, 3, 5, 1, 1.0f, beta, 3);
          check_case(rng, ta, tb, 17, 1, 31, 1.0f, beta, 0);
          check_case(rng, ta, tb, 9, 20, 7, 1.0f, beta, 5); // padded leading dims
        }
        check_case(rng, ta, tb, 12, 19, 23, 0.5f, 0.0f, 0);
        check_case(rng, ta, tb, 12, 19, 23, -2.0f, 0.25f, 2);
        for (int r = 0; r < 6; ++r)
          check_case(rng, ta, tb, sz(rng), sz(rng), sz(rng), 1.0f, r % 2 ? 1.0f : 0.0f, r % 3);
      }
  }

  TEST_CASE("sgemm over row panels and summed chunks (plan-sized GEMMs)") {
    // More rows than a panel (64) and, for A^T·B weight gradients, a summed dimension cut
    // into chunks: remainders included, padded leading dimensions, beta 0 and 1.
    std::mt19937 rng(7);
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.0f, 1.0f}) {
          check_case(rng, ta, tb, 150, 37, 20, 1.0f, beta, 0);
          check_case(rng, ta, tb, 129, 16, 300, 1.0f, beta, 3);
          check_case(rng, ta, tb, 30, 45, 333, 1.0f, beta, 1); // k > 4 panels
          check_case(rng, ta, tb, 70, 9, 700, 0.5f, beta, 0);
        }
  }

  TEST_CASE("packed right operand: pack_b + sgemm_packed") {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> sz(1, 90);
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.0f, 1.0f}) {
        check_packed(rng, tb, 1, 750, 300, beta, 0); // a level of one node: dX of the cell
        check_packed(rng, tb, 13, 300, 750, beta, 0);
        check_packed(rng, tb, 37, 33, 1, beta, 2); // k = 1, one column past a panel
        check_packed(rng, tb, 5, 5, 150, beta, 1); // narrower than a vector
        check_packed(rng, tb, 130, 64, 17, beta, 0);
        for (int r = 0; r < 5; ++r)
          check_packed(rng, tb, sz(rng), sz(rng), sz(rng), beta, r % 3);
      }
    std::vector<float> c{1, 2}, none;
    sgemm_packed(1, 2, 0, none.data(), 1, none.data(), 0.0f, c.data(), 2); // k == 0: C = 0
    CHECK(c == std::vector<float>{0, 0});
    CHECK_THROWS(sgemm_packed(1, 2, 0, none.data(), 1, none.data(), 0.5f, c.data(), 2));
  }

  TEST_CASE("packed right operand in panel ranges: pack_b_panels gives pack_b's floats") {
    // What several workers pack together: each range alone, then all of them, equal pack_b's
    // output float for float (whole panels, the partial last one, transposed or not).
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> val(-1.0f, 1.0f);
    for (int tb = 0; tb < 2; ++tb)
      for (auto [k, n, pad] : {std::array<int64_t, 3>{300, 750, 0},
                               {750, 300, 3},
                               {7, 33, 1},
                               {5, 5, 0},
                               {150, 64, 2},
                               {1, 1, 0}}) {
        const int64_t ldb = (tb ? k : n) + pad;
        std::vector<float> b(static_cast<size_t>((tb ? n : k) * ldb));
        for (float& x : b)
          x = val(rng);
        const auto size = static_cast<size_t>(packed_size(k, n));
        std::vector<float> whole(size), parts(size, -7.0f);
        pack_b(tb != 0, k, n, b.data(), ldb, whole.data());
        const int64_t panels = packed_panels(n);
        CHECK(static_cast<int64_t>(size) == panels * kPackedWidth * k);
        for (int64_t per : {int64_t{1}, int64_t{2}, int64_t{3}, panels}) {
          std::fill(parts.begin(), parts.end(), -7.0f);
          for (int64_t p = 0; p < panels; p += per)
            pack_b_panels(tb != 0, k, n, b.data(), ldb, parts.data(), p, std::min(panels, p + per));
          CAPTURE(k);
          CAPTURE(n);
          CAPTURE(per);
          CHECK(parts == whole);
        }
        CHECK_THROWS(pack_b_panels(tb != 0, k, n, b.data(), ldb, parts.data(), 0, panels + 1));
        CHECK_THROWS(pack_b_panels(tb != 0, k, n, b.data(), ldb, parts.data(), 1, 0));
      }
  }

  TEST_CASE("weight gradient over unstacked rows: sgemm_tn_stretches") {
    std::mt19937 rng(12);
    std::uniform_int_distribution<int> sz(1, 40), cnt(1, 9), rows(0, 30);
    for (float beta : {0.0f, 1.0f}) {
      check_stretches(rng, 30, 75, {1}, beta);
      check_stretches(rng, 1, 17, {3, 0, 5}, beta);
      check_stretches(rng, 150, 5, {40, 1, 0, 33, 12}, beta); // the classifier's shape
      check_stretches(rng, 31, 750, {64, 7, 300}, beta);
      for (int r = 0; r < 6; ++r) {
        std::vector<int64_t> parts(static_cast<size_t>(cnt(rng)));
        for (auto& p : parts)
          p = rows(rng);
        check_stretches(rng, sz(rng), sz(rng), parts, beta);
      }
    }
    std::vector<float> c{1, 2};
    check_stretches(rng, 2, 3, {0, 0}, 1.0f); // no rows: C unchanged
    sgemm_tn_stretches(1, 2, nullptr, 0, 0.0f, c.data(), 2);
    CHECK(c == std::vector<float>{0, 0});
  }

  TEST_CASE("a row's result does not depend on the rows beside it") {
    // Plans batch a different number of rows every time: row i of a product must come out the
    // same bits for any row count (where one kernel family serves every count).
    std::mt19937 rng(13);
    const int64_t k = 300, n = 750;
    std::vector<float> a = random_vec(rng, 40 * k), b = random_vec(rng, k * n);
    std::vector<float> one(static_cast<size_t>(n)), many(static_cast<size_t>(40 * n));
    sgemm(false, false, 40, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, many.data(), n);
    for (int64_t i : {0, 13, 39}) {
      sgemm(false, false, 1, n, k, 1.0f, a.data() + i * k, k, b.data(), n, 0.0f, one.data(), n);
      double err = 0;
      for (int64_t j = 0; j < n; ++j)
        err = std::max(err, double(std::fabs(one[j] - many[i * n + j])));
      CHECK(err <= 1e-4);
#ifdef __AVX512F__
      CHECK(std::equal(one.begin(), one.end(), many.begin() + i * n));
#endif
    }
  }

  TEST_CASE("sgemm degenerate sizes") {
    std::vector<float> c{1, 2, 3, 4};
    float a = 0, b = 0;
    sgemm(false, false, 2, 2, 0, 1.0f, &a, 1, &b, 2, 0.5f, c.data(), 2); // k == 0: C = beta*C
    CHECK(c == std::vector<float>{0.5f, 1, 1.5f, 2});
    sgemm(false, false, 2, 2, 0, 1.0f, &a, 1, &b, 2, 0.0f, c.data(), 2);
    CHECK(c == std::vector<float>{0, 0, 0, 0});
    sgemm(false, false, 0, 2, 3, 1.0f, &a, 3, &b, 2, 0.0f, c.data(), 2); // m == 0: no-op
  }

  TEST_CASE("matmul shapes") {
    float a[] = {1, 2, 3, 4, 5, 6}; // [2,3]
    float b[] = {1, 0, 0, 1, 1, 1}; // [3,2]
    Tensor A = Tensor::from_f32({2, 3}, a), B = Tensor::from_f32({3, 2}, b);
    Tensor C = matmul(A, B);
    CHECK(C.shape() == Shape{2, 2});
    CHECK(std::vector<float>(C.f32(), C.f32() + 4) == std::vector<float>{4, 5, 10, 11});
    float v[] = {1, 1, 1};
    Tensor V = Tensor::from_f32({3}, v);
    Tensor vb = matmul(V, B); // [3]@[3,2] -> [2]
    CHECK(vb.shape() == Shape{2});
    CHECK(vb.f32()[0] == 2);
    CHECK(vb.f32()[1] == 2);
    Tensor av = matmul(A, V); // [2,3]@[3] -> [2]
    CHECK(av.shape() == Shape{2});
    CHECK(av.f32()[0] == 6);
    CHECK(av.f32()[1] == 15);
    Tensor vv = matmul(V, V);
    CHECK(vv.rank() == 0);
    CHECK(vv.item_f32() == 3);
    CHECK_THROWS_WITH_AS(matmul(A, A), doctest::Contains("[2, 3] by [2, 3]"), Error);
    CHECK_THROWS_AS(matmul(A, Tensor::zeros(DType::I32, {3, 2})), Error);
  }
}

} // namespace tests_kernels_gemm_test
