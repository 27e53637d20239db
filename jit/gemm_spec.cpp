// GemmSpec's defaults, canonical text and validation: plain C++, no LLVM (the lowering is
// gemm_codegen.cpp and gemm_panel_codegen.cpp).
#include "jit/gemm_codegen.h"

#include "pejit/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace pejit::jit {

const char* layout_name(GemmLayout layout) {
  switch (layout) {
  case GemmLayout::NN:
    return "nn";
  case GemmLayout::NT:
    return "nt";
  case GemmLayout::TN:
    return "tn";
  }
  return "?";
}

namespace {

// TN: the blocks of kernels::sgemm_tn_stretches: 12 rows x 2 vectors (24 accumulators), or for
// at most 3 rows up to 8 vectors; with 16 registers, half of each.
void tn_default_block(GemmSpec& s, int lanes) {
  bool wide = lanes >= 16;
  int64_t vecs = (s.n + lanes - 1) / lanes;
  if (s.tn_transposed(lanes)) { // all columns x as many vectors of rows as fit in 24
    int64_t mvecs = (s.m + lanes - 1) / lanes;
    s.mr = static_cast<int>(s.n);
    s.nr = static_cast<int>(std::clamp<int64_t>(24 / s.n, 1, mvecs));
  } else if (s.m <= 3) {
    s.mr = static_cast<int>(std::max<int64_t>(s.m, 1));
    s.nr = static_cast<int>(std::min<int64_t>(vecs, wide ? 8 : 4));
  } else {
    s.mr = wide ? 12 : 6;
    s.nr = static_cast<int>(std::min<int64_t>(vecs, 2));
  }
}

} // namespace

GemmSpec GemmSpec::resolved(int lanes) const {
  GemmSpec s = *this;
  if (s.lda == 0)
    s.lda = layout == GemmLayout::TN ? m : k;
  if (s.ldb == 0)
    s.ldb = layout == GemmLayout::NT ? k : n;
  if (s.ldc == 0)
    s.ldc = n;
  bool wide = lanes >= 16; // 32 vector registers (AVX-512) rather than 16
  if (s.packed_b && 2 * n <= lanes && n * k <= kMaxPackedB) { // runs as the plain narrow NN
    s.ldb = kPackedCols;
    if (s.mr == 0 || s.nr == 0) {
      s.nr = static_cast<int>(n);
      s.mr = static_cast<int>(std::clamp<int64_t>(24 / n, 1, 8));
    }
  } else if (s.packed_b) {
    s.ldb = kPackedCols;
    s.nr = static_cast<int>(std::max<int64_t>(1, kPackedCols / lanes));
    if (s.mr == 0)
      s.mr = std::max(1, (wide ? 24 : 12) / s.nr);
  } else if ((s.mr == 0 || s.nr == 0) && layout == GemmLayout::TN) {
    tn_default_block(s, lanes);
  } else if (s.mr == 0 || s.nr == 0) {
    if (s.packs_b_transposed(lanes)) {
      s.nr = static_cast<int>(n);
      s.mr = static_cast<int>(std::clamp<int64_t>(24 / n, 1, 8));
    } else if (layout == GemmLayout::NT) {
      s.mr = wide ? 4 : 3;
      s.nr = wide ? 6 : 4;
    } else {
      int64_t vecs = (n + lanes - 1) / lanes;
      int nr = static_cast<int>(std::min<int64_t>(vecs, wide ? 4 : 3));
      s.nr = nr;
      s.mr = (wide ? 24 : 12) / nr;
    }
  }
  return s;
}

bool GemmSpec::tn_transposed(int lanes) const {
  return layout == GemmLayout::TN && 2 * n <= lanes && m >= lanes;
}

bool GemmSpec::packs_b_transposed(int lanes) const {
  return layout == GemmLayout::NN && !packed_b && 2 * n <= lanes && n * k <= kMaxPackedB;
}

std::string GemmSpec::signature() const {
  auto dim = [](int64_t v) { return v == 0 ? std::string("?") : std::to_string(v); };
  return fmt::format("gemm f32 {} m={} n={} k={} lda={} ldb={} ldc={} acc={}{}{}",
                     layout_name(layout), dim(m), dim(n), dim(k), lda, ldb, ldc,
                     stretches    ? "?"
                     : accumulate ? "1"
                                  : "0",
                     stretches ? " st=1" : "", packed_b ? " b=packed" : "");
}

std::string GemmSpec::canonical_text() const {
  std::string block = mr && nr ? fmt::format("{}x{}", mr, nr) : "default";
  return signature() + " block=" + block;
}

void GemmSpec::validate() const {
  auto fail = [&](const std::string& why) {
    throw Error(fmt::format("jit: gemm kernel ({}): {}", canonical_text(), why));
  };
  if (n < 1)
    fail("n must be static and >= 1");
  if (layout == GemmLayout::TN) {
    if (m < 1 || k != 0)
      fail("tn needs a static m >= 1 and k = 0 (k is the run-time row count)");
  } else if (k < 1 || m != 0) {
    fail("nn/nt need a static k >= 1 and m = 0 (m is the run-time row count)");
  }
  if (stretches && layout != GemmLayout::TN)
    fail("stretches are for tn only");
  if (stretches && accumulate)
    fail("with stretches, accumulate is a run-time argument (leave it false)");
  if (lda < 0 || ldb < 0 || ldc < 0)
    fail("negative leading dimension");
  if (packed_b && (layout != GemmLayout::NN || ldb != 0))
    fail("a packed B needs layout nn and ldb = 0");
  GemmSpec r = resolved(16);
  int64_t a_row = layout == GemmLayout::TN ? m : k;
  int64_t b_row = packed_b ? kPackedCols : layout == GemmLayout::NT ? k : n;
  if (r.lda < a_row || r.ldb < b_row || r.ldc < n)
    fail("a leading dimension is smaller than its row");
  if ((mr == 0) != (nr == 0) && !packed_b)
    fail("give both mr and nr, or neither");
  const int vecs = packed_b ? static_cast<int>(kPackedCols / 16) : nr;
  if (mr < 0 || nr < 0 || mr > 32 || nr > 32 || mr * vecs > 28)
    fail("block must be at most 32 x 32 with at most 28 accumulators");
}

} // namespace pejit::jit
