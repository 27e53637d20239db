// The generated GEMM core of panel kernels (GemmSpec::packed_b, KernelSpec::gemm_n): on its own
// against kernels::sgemm_packed at the TreeLSTM's shapes and at edge sizes (bit for bit where
// the reference kernels are the AVX-512 ones: the same fma in the same k order, a narrow C as
// the same dot products; else within rounding), and inside a panel kernel: core first
// (into the product or a panel scratch) and core last, against the product made whole and the plain
// kernel.
#include "jit/jit.h"
#include "src/kernels/kernels.h"
#include "pejit/error.h"
#include "tests/jit/random_data.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace tests_jit_gemm_panel_test {

using namespace pejit::jit;
using pejit::jit::test::random_floats;
namespace kernels = pejit::kernels;

namespace {

std::vector<float> packed(const std::vector<float>& b, int64_t k, int64_t n) {
  std::vector<float> p(static_cast<size_t>(kernels::packed_size(k, n)));
  kernels::pack_b(false, k, n, b.data(), n, p.data());
  return p;
}

// Bitwise on AVX-512 builds, where the C++ kernels run the generated cores' algorithms (a
// narrow C as the same dot products); else within rounding.
void check_same(const std::vector<float>& got, const std::vector<float>& want, int64_t k) {
  REQUIRE(got.size() == want.size());
#ifdef __AVX512F__
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i)
    differ += got[i] == want[i] ? 0 : 1;
  CHECK(differ == 0);
  return;
#endif
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, double(std::abs(got[i] - want[i])));
  CHECK(worst <= 1e-6 * double(k));
}

GemmSpec packed_spec(int64_t n, int64_t k, bool accumulate = false) {
  GemmSpec s{.layout = GemmLayout::NN, .n = n, .k = k, .accumulate = accumulate};
  s.packed_b = true;
  return s;
}

} // namespace

TEST_CASE("generated GEMM core on a packed B == kernels::sgemm_packed") {
  Jit jit;
  std::mt19937 rng(7);
  struct Shape {
    int64_t n, k;
  };
  // Forward x·W (cell, leaf), dX = dY·W^T (cell, leaf), the classifier; then edge sizes: a
  // masked last vector, a k over one chunk, k = 1, one column.
  for (Shape sh : {Shape{750, 300}, Shape{450, 300}, Shape{300, 750}, Shape{300, 450},
                   Shape{5, 150}, Shape{33, 321}, Shape{16, 1}, Shape{1, 5}})
    for (bool acc : {false, true}) {
      CAPTURE(sh.n);
      CAPTURE(sh.k);
      CAPTURE(acc);
      CompiledGemm g = jit.compile_gemm(packed_spec(sh.n, sh.k, acc));
      REQUIRE((g.fn != nullptr));
      std::vector<float> b = random_floats(static_cast<size_t>(sh.k * sh.n), rng);
      std::vector<float> bp = packed(b, sh.k, sh.n);
      for (int64_t rows :
           {0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 17, 25, 48, 49, 130}) {
        CAPTURE(rows);
        std::vector<float> a =
            random_floats(static_cast<size_t>(std::max<int64_t>(rows, 1) * sh.k), rng);
        std::vector<float> c = random_floats(static_cast<size_t>(rows * sh.n), rng), want = c;
        g.fn(a.data(), bp.data(), c.data(), rows);
        kernels::sgemm_packed(rows, sh.n, sh.k, a.data(), sh.k, bp.data(), acc ? 1.0f : 0.0f,
                              want.data(), sh.n);
        check_same(c, want, sh.k);
      }
      jit.remove(g.handle);
    }
}

TEST_CASE("packed GEMM spec: canonical text, default block, validation") {
  GemmSpec s = packed_spec(750, 300);
  CHECK(s.canonical_text() ==
        "gemm f32 nn m=? n=750 k=300 lda=0 ldb=0 ldc=0 acc=0 b=packed block=default");
  GemmSpec r = s.resolved(16);
  CHECK(r.mr == 12);
  CHECK(r.nr == 2);
  CHECK(r.ldb == GemmSpec::kPackedCols);
  CHECK(s.resolved(8).nr == 4);
  CHECK_NOTHROW(s.validate());
  s.ldb = 750;
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s.ldb = 0;
  s.layout = GemmLayout::NT;
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s.layout = GemmLayout::NN;
  s.mr = 15; // 15 x 2 vectors: more than 28 accumulators
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s.mr = 4; // rows alone; the panel fixes the vectors
  CHECK_NOTHROW(s.validate());
  CHECK(s.resolved(16).mr == 4);
}

namespace {

constexpr int64_t kN = 9, kK = 7; // the product [rows, 9] = x [rows, 7] · W [7, 9]

// Forward-like: in 0 = columns [2, 2 + 5) of the product, in 1 a bias row; sigmoid(in0 + in1).
KernelSpec epilogue(int64_t panel_rows, bool gemm) {
  KernelSpec s{.width = 5,
               .inputs = {InputShape::Full, InputShape::RowBroadcast},
               .ops = {{ElementwiseOp::Add, 0, 1}, {ElementwiseOp::Sigmoid, 2}},
               .outputs = {3}};
  s.in_strides = {kN, 0};
  s.panel_rows = panel_rows;
  if (gemm) {
    s.gemm_n = kN;
    s.gemm_k = kK;
  }
  return s;
}

struct Counter : PanelCore {
  std::vector<std::pair<int64_t, int64_t>> calls;
};

void count(const PanelCore* p, int64_t r0, int64_t n) {
  const_cast<Counter*>(static_cast<const Counter*>(p))->calls.emplace_back(r0, n);
}

} // namespace

TEST_CASE("panel kernel with a generated GEMM core: the same bits as the product made whole") {
  Jit jit;
  std::mt19937 rng(11);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CompiledKernel plain = jit.compile(epilogue(0, false));
  std::vector<float> w = random_floats(static_cast<size_t>(kK * kN), rng);
  std::vector<float> wp = packed(w, kK, kN);
  std::vector<float> bias{0.1f, -0.2f, 0.3f, 0, 1};
  for (bool scratch : {false, true})
    for (int64_t panel : {1, 4, 48}) {
      KernelSpec s = epilogue(panel, true);
      if (scratch)
        s.in_panel = {true, false};
      CHECK(s.canonical_text().find(" gemm=9x7") != std::string::npos);
      CompiledKernel pk = jit.compile(s);
      REQUIRE((pk.panel != nullptr));
      for (int64_t rows : {1, 3, 4, 13, 49, 100}) {
        CAPTURE(scratch);
        CAPTURE(panel);
        CAPTURE(rows);
        std::vector<float> x = random_floats(static_cast<size_t>(rows * kK), rng);
        // The reference: the whole product, then the plain kernel.
        std::vector<float> whole(static_cast<size_t>(rows * kN));
        kernels::sgemm_packed(rows, kN, kK, x.data(), kK, wp.data(), 0.0f, whole.data(), kN);
        std::vector<float> want(static_cast<size_t>(rows * 5), nan), got(want);
        float* pin[] = {whole.data() + 2, bias.data()};
        float* pout[] = {want.data()};
        plain.fn(pin, pout, rows);
        // The panel kernel computes the product's rows itself, panel by panel.
        std::vector<float> c(static_cast<size_t>((scratch ? std::min(rows, panel) : rows) * kN),
                             nan);
        Counter core;
        core.fn = &count;
        core.gemm_a = x.data();
        core.gemm_b = wp.data();
        core.gemm_c = c.data();
        core.gemm_c_step = scratch ? 0 : kN;
        float* in[] = {c.data() + 2, bias.data()};
        float* out[] = {got.data()};
        pk.panel(in, out, rows, &core);
        CHECK(core.calls.size() == static_cast<size_t>((rows + panel - 1) / panel));
        check_same(got, want, kK);
        if (!scratch)
          check_same(c, whole, kK);
        // Without gemm_b the kernel leaves the product to the core's fn: nothing is written.
        std::fill(c.begin(), c.end(), nan);
        core.gemm_b = nullptr;
        pk.panel(in, out, rows, &core);
        CHECK(std::all_of(c.begin(), c.end(), [](float v) { return std::isnan(v); }));
      }
      jit.remove(pk.handle);
    }
}

TEST_CASE("panel kernel, core last: the generated GEMM multiplies the rows the chain wrote") {
  Jit jit;
  std::mt19937 rng(13);
  // dY = in0 * in1 over 5 columns, then dX [rows, 3] = dY · B [5, 3].
  KernelSpec s{.width = 5,
               .inputs = {InputShape::Full, InputShape::Full},
               .ops = {{ElementwiseOp::Mul, 0, 1}},
               .outputs = {2}};
  KernelSpec plain_spec = s;
  s.panel_rows = 8;
  s.core_first = false;
  s.gemm_n = 3;
  s.gemm_k = 5;
  CompiledKernel pk = jit.compile(s), plain = jit.compile(plain_spec);
  std::vector<float> b = random_floats(15, rng);
  std::vector<float> bp = packed(b, 5, 3);
  for (int64_t rows : {1, 8, 9, 30}) {
    CAPTURE(rows);
    std::vector<float> x = random_floats(static_cast<size_t>(rows * 5), rng);
    std::vector<float> y = random_floats(static_cast<size_t>(rows * 5), rng);
    std::vector<float> dy(static_cast<size_t>(rows * 5)), want_dy(dy);
    std::vector<float> dx(static_cast<size_t>(rows * 3)), want_dx(dx);
    float* pin[] = {x.data(), y.data()};
    float* pout[] = {want_dy.data()};
    plain.fn(pin, pout, rows);
    kernels::sgemm_packed(rows, 3, 5, want_dy.data(), 5, bp.data(), 0.0f, want_dx.data(), 3);
    Counter core;
    core.fn = &count;
    core.gemm_a = dy.data();
    core.gemm_b = bp.data();
    core.gemm_c = dx.data();
    core.gemm_c_step = 3;
    float* out[] = {dy.data()};
    pk.panel(pin, out, rows, &core);
    check_same(dy, want_dy, 5);
    check_same(dx, want_dx, 5); // 3 columns: a narrow C, dot products in both
  }
}

TEST_CASE("panel kernel's GEMM core: validation") {
  KernelSpec s = epilogue(48, true);
  CHECK_NOTHROW(s.validate());
  s.gemm_k = 0;
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s = epilogue(0, true); // a GEMM core needs a panel kernel
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s = epilogue(48, true);
  s.gemm_n = -1;
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  // The core is part of the kernel: another canonical text, the same tuning signature.
  CHECK(epilogue(48, true).canonical_text() != epilogue(48, false).canonical_text());
  CHECK(epilogue(48, true).signature() == epilogue(48, false).signature());
}

TEST_CASE("panel kernel gathers A's rows from its parts and fills an input, per panel") {
  Jit jit;
  std::mt19937 rng(17);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // sigmoid(product[:, 2:7] + bias) * z, the product = x · W with x = [p0 | p1] (3 + 4 columns)
  // assembled by the kernel: p0 a dense block, p1's rows scattered; z's rows copied in too.
  KernelSpec s{
      .width = 5,
      .inputs = {InputShape::Full, InputShape::RowBroadcast, InputShape::Full},
      .ops = {{ElementwiseOp::Add, 0, 1}, {ElementwiseOp::Sigmoid, 3}, {ElementwiseOp::Mul, 4, 2}},
      .outputs = {5}};
  s.in_strides = {kN, 0, 0};
  KernelSpec plain_spec = s;
  s.panel_rows = 4;
  s.gemm_n = kN;
  s.gemm_k = kK;
  s.gather_widths = {3, 4};
  s.fill_inputs = {2};
  CHECK(s.canonical_text().ends_with(" panel=4 core=first gemm=9x7 gather=3,4 fill=2"));
  CompiledKernel pk = jit.compile(s), plain = jit.compile(plain_spec);
  std::vector<float> w = random_floats(static_cast<size_t>(kK * kN), rng);
  std::vector<float> wp = packed(w, kK, kN);
  std::vector<float> bias = random_floats(5, rng);
  for (int64_t rows : {1, 4, 9, 30}) {
    CAPTURE(rows);
    const auto n = static_cast<size_t>(rows);
    std::vector<float> p0 = random_floats(n * 3, rng);
    std::vector<float> p1_store = random_floats(n * 4 + 8, rng),
                       z_store = random_floats(n * 5 + 5, rng);
    std::vector<const float*> p1_rows, z_rows;
    for (size_t r = 0; r < n; ++r) { // rows in reverse order, apart
      p1_rows.push_back(p1_store.data() + (n - 1 - r) * 4 + 8);
      z_rows.push_back(z_store.data() + (n - 1 - r) * 5 + 5);
    }
    // The reference: x and z assembled, the product whole, the plain kernel.
    std::vector<float> x(n * kK), z(n * 5);
    for (size_t r = 0; r < n; ++r) {
      std::copy(p0.begin() + static_cast<std::ptrdiff_t>(r * 3),
                p0.begin() + static_cast<std::ptrdiff_t>(r * 3 + 3),
                x.begin() + static_cast<std::ptrdiff_t>(r * kK));
      std::copy(p1_rows[r], p1_rows[r] + 4, x.begin() + static_cast<std::ptrdiff_t>(r * kK + 3));
      std::copy(z_rows[r], z_rows[r] + 5, z.begin() + static_cast<std::ptrdiff_t>(r * 5));
    }
    std::vector<float> whole(n * kN), want(n * 5), got(n * 5, nan);
    kernels::sgemm_packed(rows, kN, kK, x.data(), kK, wp.data(), 0.0f, whole.data(), kN);
    float* pin[] = {whole.data() + 2, bias.data(), z.data()};
    float* pout[] = {want.data()};
    plain.fn(pin, pout, rows);
    // The panel kernel: x, z and the product start as NaN.
    std::vector<float> gx(n * kK, nan), gz(n * 5, nan), c(n * kN, nan);
    Counter core;
    core.fn = &count;
    core.gemm_a = gx.data();
    core.gemm_b = wp.data();
    core.gemm_c = c.data();
    core.gemm_c_step = kN;
    core.gather_dst = gx.data();
    core.part_src[0] = p0.data();
    core.part_rows[1] = p1_rows.data();
    core.fill_rows[0] = z_rows.data();
    float* in[] = {c.data() + 2, bias.data(), gz.data()};
    float* out[] = {got.data()};
    pk.panel(in, out, rows, &core);
    CHECK(gx == x);
    CHECK(gz == z);
    check_same(got, want, kK);
  }
}

// Compile time: the code O3 and instruction selection work on, for the TreeLSTM classifier's
// kernel (logits = h · W + b, h gathered). The loop over panels reads the core's fields in
// every panel: hoisted, their null tests made loop unswitching copy the panel's body (the
// chain inlined) once per combination. A chain narrower than a vector is one masked vector
// per row, not a loop for the vectorizer. The narrow core's B^T copy is one loop of gathers,
// not ~50 unrolled ones, and its sums of lanes are one tree of shuffles for 16 dot products.
TEST_CASE("panel kernel's optimized IR: one chain, one B^T copy loop, no per-sum reductions") {
  Jit jit;
  KernelSpec s{.width = 5,
               .inputs = {InputShape::Full, InputShape::RowBroadcast},
               .ops = {{ElementwiseOp::Add, 0, 1}},
               .outputs = {2}};
  s.panel_rows = 48;
  s.in_panel = {true, false}; // the logits before the bias: the core's rows in scratch
  s.gemm_n = 5;
  s.gemm_k = 150;
  s.gather_widths = {150};
  CHECK(s.canonical_text().ends_with(" panel=48 core=first scratch=0 gemm=5x150 gather=150"));
  const std::string ir = jit.optimized_ir(s);
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = ir.find(what); at != std::string::npos; at = ir.find(what, at + 1))
      ++n;
    return n;
  };
  CHECK(count("call void @llvm.masked.store.v8f32") == 1); // the chain's one output, once
  if (jit.vector_lanes() == 16) // B^T gathered per column, 16 rows of B at a time
    CHECK(count("call <16 x float> @llvm.masked.gather.v16f32") == 10); // 5 columns x 2 steps
  // The dot products' lanes are summed by interleaving shuffles, not one reduction each.
  CHECK(count("llvm.vector.reduce.fadd") == 0);
}

TEST_CASE("panel kernel gathers and fills: validation") {
  KernelSpec s = epilogue(48, true);
  s.gather_widths = {3, 4};
  CHECK_NOTHROW(s.validate());
  s.gather_widths = {3, 3}; // 6 columns, not gemm_k = 7
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s.gather_widths = {7, 0};
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s.gather_widths = {7};
  s.core_first = false; // a core-last kernel has no A to assemble before its chain
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s = epilogue(48, false);
  s.gather_widths = {7}; // no GEMM core
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s = epilogue(48, true);
  s.fill_inputs = {1}; // a broadcast row
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s.fill_inputs = {0};
  CHECK_NOTHROW(s.validate());
  s.in_panel = {true, false}; // a panel's scratch is the core's, not filled
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s = epilogue(0, false);
  s.fill_inputs = {0}; // not a panel kernel
  CHECK_THROWS_AS(s.validate(), pejit::Error);
}

} // namespace tests_jit_gemm_panel_test
