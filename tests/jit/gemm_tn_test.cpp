// The generated TN gemm (weight gradients dW = X^T·dY, K at run time) in both forms: one A, B
// and a list of stretches. Results ≡ a double-precision loop at every row count 1..13 (every
// near-equal row split), widths that are not a multiple of the vector, K = 0, 1 and odd sizes,
// strided operands, narrow C run transposed; and, where the reference kernels are the AVX-512
// ones, bit-identical to kernels::sgemm_tn_stretches (both sum each element in one fma chain
// over k in order).
#include "jit/jit.h"
#include "pejit/error.h"
#include "src/kernels/kernels.h"
#include "tests/jit/random_data.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace tests_jit_gemm_tn_test {

using namespace pejit::jit;
using pejit::jit::test::random_floats;

namespace {

// Stretches of the given row counts, each its own A [k, lda] and B [k, ldb].
struct Rows {
  std::vector<std::vector<float>> a, b;
  std::vector<GemmStretch> st;
};

Rows make_rows(const GemmSpec& r, const std::vector<int64_t>& ks, std::mt19937& rng) {
  Rows out;
  for (int64_t k : ks) {
    out.a.push_back(random_floats(static_cast<size_t>(std::max<int64_t>(k, 1) * r.lda), rng));
    out.b.push_back(random_floats(static_cast<size_t>(std::max<int64_t>(k, 1) * r.ldb), rng));
  }
  for (size_t s = 0; s < ks.size(); ++s)
    out.st.push_back({out.a[s].data(), out.b[s].data(), ks[s]});
  return out;
}

// max |C - ref| <= 1e-4 * max |ref| + 1e-6 over C's valid entries; padding untouched.
void check_sum(const GemmSpec& r, const Rows& rows, const std::vector<float>& c0,
               const std::vector<float>& c) {
  double worst = 0, scale = 0;
  bool padding_kept = true;
  for (int64_t i = 0; i < r.m; ++i) {
    for (int64_t j = 0; j < r.n; ++j) {
      double ref = r.accumulate ? c0[static_cast<size_t>(i * r.ldc + j)] : 0.0;
      for (const GemmStretch& s : rows.st)
        for (int64_t p = 0; p < s.k; ++p)
          ref += double(s.a[p * r.lda + i]) * double(s.b[p * r.ldb + j]);
      worst = std::max(worst, std::abs(ref - c[static_cast<size_t>(i * r.ldc + j)]));
      scale = std::max(scale, std::abs(ref));
    }
    for (int64_t j = r.n; j < r.ldc; ++j)
      padding_kept &=
          c[static_cast<size_t>(i * r.ldc + j)] == c0[static_cast<size_t>(i * r.ldc + j)];
  }
  CHECK(worst <= 1e-4 * scale + 1e-6);
  CHECK(padding_kept);
}

// The reference kernels' bits are the JIT's where both are the AVX-512 fma kernels.
bool reference_is_avx512(const Jit& jit) {
#ifdef __AVX512F__
  return jit.vector_lanes() == 16;
#else
  (void)jit;
  return false;
#endif
}

const std::vector<std::vector<int64_t>> kSplits = {
    {1}, {0}, {0, 7}, {17, 1, 33}, {64, 100, 3, 0, 29}};

// Runs the stretches kernel of `spec` and the plain one (once per stretch, accumulating after
// the first) on every split: both equal the sum, and each other's bits; and the reference's.
void check_spec(Jit& jit, GemmSpec spec, std::mt19937& rng) {
  const bool acc = spec.accumulate; // with stretches, chosen per call
  spec.stretches = true;
  spec.accumulate = false;
  CAPTURE(spec.canonical_text());
  CAPTURE(acc);
  CompiledGemm g = jit.compile_gemm(spec);
  REQUIRE((g.stretches != nullptr));
  CHECK((g.fn == nullptr));
  GemmSpec plain = spec, plain_acc = spec;
  plain.stretches = plain_acc.stretches = false;
  plain.accumulate = acc;
  plain_acc.accumulate = true;
  CompiledGemm p = jit.compile_gemm(plain);
  CompiledGemm pa = jit.compile_gemm(plain_acc);
  REQUIRE((p.fn != nullptr));
  GemmSpec r = spec.resolved(jit.vector_lanes());
  r.accumulate = acc; // what check_sum expects
  const bool dense = r.lda == r.m && r.ldb == r.n;
  for (const auto& ks : kSplits) {
    CAPTURE(ks.size());
    CAPTURE(ks[0]);
    Rows rows = make_rows(r, ks, rng);
    std::vector<float> c0 = random_floats(static_cast<size_t>(r.m * r.ldc), rng);
    std::vector<float> c = c0;
    g.stretches(rows.st.data(), static_cast<int64_t>(rows.st.size()), c.data(), acc);
    check_sum(r, rows, c0, c);
    std::vector<float> c1 = c0;
    for (size_t s = 0; s < rows.st.size(); ++s)
      (s == 0 ? p : pa).fn(rows.st[s].a, rows.st[s].b, c1.data(), rows.st[s].k);
    CHECK(pejit::test::same_bits(c, c1));
    if (dense && r.ldc == r.n && reference_is_avx512(jit)) {
      std::vector<float> ref = c0;
      std::vector<pejit::kernels::GemmStretch> parts;
      for (const GemmStretch& s : rows.st)
        parts.push_back({s.a, s.b, s.k});
      pejit::kernels::sgemm_tn_stretches(r.m, r.n, parts.data(), parts.size(), acc ? 1.0f : 0.0f,
                                         ref.data(), r.n);
      CHECK(pejit::test::same_bits(c, ref));
    }
  }
}

} // namespace

TEST_CASE("generated TN gemm: every row count 1..13, odd widths, K = 0 and 1, stretches") {
  Jit jit;
  std::mt19937 rng(21);
  for (int64_t m = 1; m <= 13; ++m)
    for (int64_t n : {37, 5})
      check_spec(jit, {.layout = GemmLayout::TN, .m = m, .n = n, .accumulate = m % 2 == 0}, rng);
}

TEST_CASE("generated TN gemm at the TreeLSTM's weight-gradient shapes") {
  Jit jit;
  std::mt19937 rng(22);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{300, 750}, {300, 450}, {150, 5}})
    for (bool acc : {false, true})
      check_spec(jit, {.layout = GemmLayout::TN, .m = m, .n = n, .accumulate = acc}, rng);
}

TEST_CASE("generated TN gemm, narrow C run transposed: row counts around the vector, blocks") {
  Jit jit;
  std::mt19937 rng(24);
  for (int64_t m : {16, 17, 33, 64, 150})
    for (int64_t n : {1, 3, 8})
      check_spec(jit, {.layout = GemmLayout::TN, .m = m, .n = n, .accumulate = m % 2 == 1}, rng);
  for (auto [mr, nr] : {std::pair{1, 1}, {2, 3}, {5, 5}, {3, 8}})
    check_spec(jit, {.layout = GemmLayout::TN, .m = 150, .n = 5, .mr = mr, .nr = nr}, rng);
  check_spec(jit,
             {.layout = GemmLayout::TN,
              .m = 40,
              .n = 6,
              .lda = 41,
              .ldb = 9,
              .ldc = 7,
              .accumulate = true},
             rng);
}

TEST_CASE("generated TN gemm: strided operands, given blocks") {
  Jit jit;
  std::mt19937 rng(23);
  GemmSpec strided{.layout = GemmLayout::TN, .m = 29, .n = 70, .lda = 31, .ldb = 75, .ldc = 72};
  check_spec(jit, strided, rng);
  strided.accumulate = true;
  check_spec(jit, strided, rng);
  for (auto [mr, nr] : {std::pair{1, 1}, {5, 3}, {8, 3}, {24, 1}, {3, 8}}) {
    GemmSpec given{.layout = GemmLayout::TN, .m = 40, .n = 100, .mr = mr, .nr = nr};
    check_spec(jit, given, rng);
  }
}

TEST_CASE("TN gemm spec: the default block, stretches in the text, validation") {
  GemmSpec s{.layout = GemmLayout::TN, .m = 300, .n = 750};
  GemmSpec r = s.resolved(16);
  CHECK(r.mr == 12);
  CHECK(r.nr == 2);
  r = GemmSpec{.layout = GemmLayout::TN, .m = 2, .n = 750}.resolved(16);
  CHECK(r.mr == 2);
  CHECK(r.nr == 8);
  // The classifier's dW [150, 5] runs transposed: all 5 columns x 4 vectors of rows.
  GemmSpec narrow{.layout = GemmLayout::TN, .m = 150, .n = 5};
  CHECK(narrow.tn_transposed(16));
  CHECK(narrow.resolved(16).mr == 5);
  CHECK(narrow.resolved(16).nr == 4);
  CHECK_FALSE(GemmSpec{.layout = GemmLayout::TN, .m = 13, .n = 5}.tn_transposed(16));
  CHECK_FALSE(GemmSpec{.layout = GemmLayout::TN, .m = 150, .n = 9}.tn_transposed(16));
  s.stretches = true;
  CHECK(s.canonical_text() ==
        "gemm f32 tn m=300 n=750 k=? lda=0 ldb=0 ldc=0 acc=? st=1 block=default");
  CHECK(s.signature().find("st=1") != std::string::npos);
  GemmSpec nn{.layout = GemmLayout::NN, .n = 8, .k = 3, .stretches = true};
  CHECK_THROWS_WITH_AS(nn.validate(), doctest::Contains("tn only"), pejit::Error);
  GemmSpec acc{.layout = GemmLayout::TN, .m = 3, .n = 8, .accumulate = true, .stretches = true};
  CHECK_THROWS_WITH_AS(acc.validate(), doctest::Contains("run-time argument"), pejit::Error);
}

} // namespace tests_jit_gemm_tn_test
