// Family-2 kernels (the generated GEMM core): NN, NT and TN results ≡ a double-precision loop
// on random data, over the TreeLSTM's column counts (5, 150, 450, 750, covering full register
// blocks, a leftover block and a masked last vector), k = 150 and 300 (NT: also a k tail), and
// row counts that cover full row blocks and every leftover path; strides, accumulation, given
// blocks, validation, canonical text, and 16-wide fma code on AVX-512 hosts.
#include "jit/jit.h"
#include "pejit/error.h"
#include "tests/jit/random_data.h"
#include "tests/support/skip.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace tests_jit_gemm_codegen_test {

using namespace pejit::jit;
using pejit::jit::test::random_floats;

namespace {

// Runs `spec` with `rows` at run time on random A, B (and C when accumulating) and checks
// max |C - ref| <= 1e-4 * max |ref| + 1e-6 over C's valid entries, and that the padding
// between rows of a strided C is untouched.
void check_gemm(const CompiledGemm& g, const GemmSpec& spec, int64_t rows, std::mt19937& rng) {
  GemmSpec r = spec.resolved(16); // only the strides are used
  bool tn = spec.layout == GemmLayout::TN;
  int64_t m = tn ? spec.m : rows, k = tn ? rows : spec.k, n = spec.n;
  int64_t a_rows = tn ? k : m, b_rows = spec.layout == GemmLayout::NT ? n : k;
  std::vector<float> a = random_floats(size_t(std::max<int64_t>(a_rows, 1) * r.lda), rng);
  std::vector<float> b = random_floats(size_t(std::max<int64_t>(b_rows, 1) * r.ldb), rng);
  std::vector<float> c = random_floats(size_t(std::max<int64_t>(m, 1) * r.ldc), rng);
  std::vector<float> c0 = c;
  auto at = [&](int64_t i, int64_t p) { return tn ? a[p * r.lda + i] : a[i * r.lda + p]; };
  auto bt = [&](int64_t p, int64_t j) {
    return spec.layout == GemmLayout::NT ? b[j * r.ldb + p] : b[p * r.ldb + j];
  };
  g.fn(a.data(), b.data(), c.data(), rows);
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = spec.accumulate ? c0[i * r.ldc + j] : 0.0;
      for (int64_t p = 0; p < k; ++p)
        ref += double(at(i, p)) * double(bt(p, j));
      worst = std::max(worst, std::abs(ref - c[i * r.ldc + j]));
      scale = std::max(scale, std::abs(ref));
    }
  CHECK(worst <= 1e-4 * scale + 1e-6);
  bool padding_kept = true;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = n; j < r.ldc; ++j)
      padding_kept &= c[i * r.ldc + j] == c0[i * r.ldc + j];
  CHECK(padding_kept);
}

} // namespace

TEST_CASE("generated NN gemm matches a double-precision loop") {
  Jit jit;
  std::mt19937 rng(7);
  for (int64_t n : {5, 150, 450, 750})
    for (int64_t k : {150, 300})
      for (bool acc : {false, true}) {
        GemmSpec spec{.layout = GemmLayout::NN, .n = n, .k = k, .accumulate = acc};
        CAPTURE(spec.canonical_text());
        CompiledGemm g = jit.compile_gemm(spec);
        for (int64_t m : {1, 7, 17, 64, 100}) {
          CAPTURE(m);
          check_gemm(g, spec, m, rng);
        }
      }
}

TEST_CASE("generated NT gemm (dX = dY W^T) matches a double-precision loop") {
  Jit jit;
  std::mt19937 rng(8);
  for (int64_t n : {5, 150, 300})
    for (int64_t k : {150, 450, 750})
      for (bool acc : {false, true}) {
        GemmSpec spec{.layout = GemmLayout::NT, .n = n, .k = k, .accumulate = acc};
        CAPTURE(spec.canonical_text());
        CompiledGemm g = jit.compile_gemm(spec);
        for (int64_t m : {1, 7, 17, 64, 100}) {
          CAPTURE(m);
          check_gemm(g, spec, m, rng);
        }
      }
}

TEST_CASE("generated TN gemm (dW = X^T dY) sums a run-time row count") {
  Jit jit;
  std::mt19937 rng(9);
  for (int64_t m : {150, 300})
    for (int64_t n : {5, 450, 750})
      for (bool acc : {false, true}) {
        GemmSpec spec{.layout = GemmLayout::TN, .m = m, .n = n, .accumulate = acc};
        CAPTURE(spec.canonical_text());
        CompiledGemm g = jit.compile_gemm(spec);
        for (int64_t k : {0, 1, 7, 17, 64, 100}) {
          CAPTURE(k);
          check_gemm(g, spec, k, rng);
        }
      }
}

TEST_CASE("strided operands, given blocks, and zero rows") {
  Jit jit;
  std::mt19937 rng(10);
  for (GemmLayout layout : {GemmLayout::NN, GemmLayout::NT, GemmLayout::TN}) {
    bool tn = layout == GemmLayout::TN;
    GemmSpec strided{.layout = layout,
                     .m = tn ? 37 : 0,
                     .n = 150,
                     .k = tn ? 0 : 300,
                     .lda = tn ? 40 : 310,
                     .ldb = layout == GemmLayout::NT ? 305 : 160,
                     .ldc = 151,
                     .accumulate = true};
    CAPTURE(strided.canonical_text());
    CompiledGemm g = jit.compile_gemm(strided);
    for (int64_t rows : {1, 9, 33})
      check_gemm(g, strided, rows, rng);
    for (auto [mr, nr] : {std::pair{1, 1}, std::pair{3, 2}, std::pair{5, 5}}) {
      GemmSpec given = strided;
      given.mr = mr;
      given.nr = nr;
      CAPTURE(given.canonical_text());
      CompiledGemm h = jit.compile_gemm(given);
      CHECK(h.schedule.find("given") != std::string::npos);
      for (int64_t rows : {1, 9, 33})
        check_gemm(h, given, rows, rng);
    }
  }
  // A narrow NN whose B is too large to pack on the stack runs the vector-per-row code.
  GemmSpec narrow{.layout = GemmLayout::NN, .n = 5, .k = 4000};
  CHECK(!narrow.packs_b_transposed(16));
  CHECK(GemmSpec{.layout = GemmLayout::NN, .n = 5, .k = 300}.packs_b_transposed(16));
  CompiledGemm nw = jit.compile_gemm(narrow);
  for (int64_t rows : {1, 30})
    check_gemm(nw, narrow, rows, rng);
  // No rows: nothing is written.
  CompiledGemm g = jit.compile_gemm({.layout = GemmLayout::NN, .n = 20, .k = 10});
  std::vector<float> a(10, 1.0f), b(200, 1.0f), c(20, 42.0f);
  g.fn(a.data(), b.data(), c.data(), 0);
  CHECK(std::all_of(c.begin(), c.end(), [](float x) { return x == 42.0f; }));
}

TEST_CASE("gemm spec: canonical text and validation") {
  GemmSpec spec{.layout = GemmLayout::NN, .n = 450, .k = 300};
  CHECK(spec.canonical_text() ==
        "gemm f32 nn m=? n=450 k=300 lda=0 ldb=0 ldc=0 acc=0 block=default");
  GemmSpec r = spec.resolved(16);
  CHECK(r.lda == 300);
  CHECK(r.ldb == 450);
  CHECK(r.ldc == 450);
  CHECK(r.mr * r.nr <= 28);
  CHECK(GemmSpec{.layout = GemmLayout::TN, .m = 300, .n = 750}.resolved(16).lda == 300);
  CHECK(GemmSpec{.layout = GemmLayout::NT, .n = 300, .k = 750}.resolved(16).ldb == 750);

  auto invalid = [](GemmSpec s, const char* why) {
    CAPTURE(s.canonical_text());
    CHECK_THROWS_WITH_AS(s.validate(), doctest::Contains(why), pejit::Error);
  };
  invalid({.layout = GemmLayout::NN, .n = 0, .k = 3}, "n must be");
  invalid({.layout = GemmLayout::NN, .m = 4, .n = 2, .k = 3}, "m = 0");
  invalid({.layout = GemmLayout::TN, .n = 2, .k = 3}, "static m");
  invalid({.layout = GemmLayout::NN, .n = 8, .k = 3, .lda = 2}, "smaller than its row");
  invalid({.layout = GemmLayout::NN, .n = 8, .k = 3, .mr = 8, .nr = 4}, "accumulators");
  invalid({.layout = GemmLayout::NN, .n = 8, .k = 3, .mr = 2}, "both mr and nr");
  Jit jit;
  CHECK_THROWS_AS(jit.compile_gemm({.layout = GemmLayout::NN, .n = 8}), pejit::Error);
}

TEST_CASE("the NN gemm is 16-wide fma code on AVX-512 hosts") {
  Jit jit;
  if (jit.target_features().find("+avx512f") == std::string::npos) {
    pejit::test::skip("the host has no AVX-512 (the vector width follows the host)");
    return;
  }
  std::string ir = jit.optimized_ir(GemmSpec{.layout = GemmLayout::NN, .n = 750, .k = 300});
  CHECK(ir.find("<16 x float>") != std::string::npos);
  CHECK(ir.find("@llvm.fma.v16f32") != std::string::npos);
  CHECK(ir.find("@llvm.masked.store.v16f32") != std::string::npos); // 750 % 16 = 14
}

} // namespace tests_jit_gemm_codegen_test
