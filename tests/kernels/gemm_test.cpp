// sgemm against a naive triple loop over random sizes (m = 1, sizes off multiples of 16, all
// transpose combinations, alpha/beta variants, padded leading dims) and matmul's shape rules.
#include "kernels/kernels.h"
#include "util/check.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

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
