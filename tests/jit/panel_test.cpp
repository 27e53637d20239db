// Panel kernels (KernelSpec::panel_rows): a chain fused with a GEMM core called per row panel.
// The core here is a test double that records its calls and writes (or reads) the panel's
// rows, so the tests see the order of core and chain, the panels' bounds, and that the chain's
// results equal the plain kernel's on the same data.
#include "jit/jit.h"
#include "pejit/error.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace tests_jit_panel_test {

using namespace pejit::jit;

namespace {

constexpr int64_t kStride = 9; // the core's rows: a wider array, read as a column block

// Forward-like: in 0 is columns [2, 2 + 5) of the core's [rows, 9] product, in 1 a bias row.
KernelSpec epilogue(int64_t panel_rows) {
  KernelSpec s{.width = 5,
               .inputs = {InputShape::Full, InputShape::RowBroadcast},
               .ops = {{ElementwiseOp::Add, 0, 1}, {ElementwiseOp::Sigmoid, 2}},
               .outputs = {3, 2}};
  s.in_strides = {kStride, 0};
  s.panel_rows = panel_rows;
  return s;
}

struct Recorder : PanelCore {
  std::vector<std::pair<int64_t, int64_t>> calls;
  float* c = nullptr;       // the product's rows, written by the core (forward)
  const float* y = nullptr; // rows the chain wrote, read by the core (backward)
  int64_t rows = 0;
  bool chain_rows_ready = true; // backward: the panel's rows were written before the call
};

float product(int64_t r, int64_t col) {
  return 0.01f * static_cast<float>(r * 13 + col * 7 % 11) - 0.5f;
}

void write_rows(const PanelCore* p, int64_t r0, int64_t n) {
  auto* rec = const_cast<Recorder*>(static_cast<const Recorder*>(p));
  rec->calls.emplace_back(r0, n);
  for (int64_t r = r0; r < r0 + n; ++r)
    for (int64_t col = 0; col < kStride; ++col)
      rec->c[r * kStride + col] = product(r, col);
}

void check_rows(const PanelCore* p, int64_t r0, int64_t n) {
  auto* rec = const_cast<Recorder*>(static_cast<const Recorder*>(p));
  rec->calls.emplace_back(r0, n);
  // The chain has written this panel's rows (not NaN) and none after it (still NaN).
  for (int64_t r = 0; r < rec->rows; ++r) {
    bool written = !std::isnan(rec->y[r * 5]);
    if (written != (r < r0 + n))
      rec->chain_rows_ready = false;
  }
}

} // namespace

TEST_CASE("panel kernel, core first: the core fills each panel's rows, then the chain reads them") {
  Jit jit;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t panel : {1, 4, 48})
    for (int64_t rows : {0, 1, 3, 4, 5, 48, 49, 130}) {
      CAPTURE(panel);
      CAPTURE(rows);
      CompiledKernel pk = jit.compile(epilogue(panel));
      CompiledKernel plain = jit.compile(epilogue(0));
      REQUIRE((pk.panel != nullptr));
      CHECK((pk.fn == nullptr));
      REQUIRE((plain.fn != nullptr));
      CHECK((plain.panel == nullptr));
      std::vector<float> c(static_cast<size_t>((rows + 1) * kStride), nan),
          bias{0.1f, -0.2f, 0.3f, 0, 1};
      std::vector<float> o0(static_cast<size_t>((rows + 1) * 5), nan), o1(o0);
      Recorder rec;
      rec.fn = &write_rows;
      rec.c = c.data();
      float* in[] = {c.data() + 2, bias.data()};
      float* out[] = {o0.data(), o1.data()};
      pk.panel(in, out, rows, &rec);
      // Panels of `panel` rows in order, the last one shorter.
      std::vector<std::pair<int64_t, int64_t>> want;
      for (int64_t r0 = 0; r0 < rows; r0 += panel)
        want.emplace_back(r0, std::min(panel, rows - r0));
      CHECK(rec.calls == want);
      // The plain kernel on the finished product gives the same bits.
      std::vector<float> p0(o0.size(), nan), p1(o0.size(), nan);
      float* pout[] = {p0.data(), p1.data()};
      plain.fn(in, pout, rows);
      for (size_t i = 0; i < static_cast<size_t>(rows * 5); ++i) {
        CHECK_FALSE(std::isnan(o0[i]));
        CHECK(o0[i] == p0[i]);
        CHECK(o1[i] == p1[i]);
      }
      jit.remove(pk.handle);
      jit.remove(plain.handle);
    }
}

TEST_CASE("panel kernel, core last: the chain writes a panel's rows before the core reads them") {
  Jit jit;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  KernelSpec s = epilogue(16);
  s.core_first = false;
  s.out_strides = {0, 0};
  CompiledKernel pk = jit.compile(s);
  REQUIRE((pk.panel != nullptr));
  for (int64_t rows : {1, 15, 16, 17, 40}) {
    CAPTURE(rows);
    std::vector<float> c(static_cast<size_t>(rows * kStride)), bias{0.1f, -0.2f, 0.3f, 0, 1};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < kStride; ++col)
        c[static_cast<size_t>(r * kStride + col)] = product(r, col);
    std::vector<float> o0(static_cast<size_t>(rows * 5), nan), o1(o0);
    Recorder rec;
    rec.fn = &check_rows;
    rec.y = o0.data();
    rec.rows = rows;
    float* in[] = {c.data() + 2, bias.data()};
    float* out[] = {o0.data(), o1.data()};
    pk.panel(in, out, rows, &rec);
    CHECK(rec.chain_rows_ready);
    CHECK(rec.calls.size() == static_cast<size_t>((rows + 15) / 16));
    CHECK(rec.calls.back().first + rec.calls.back().second == rows);
  }
}

TEST_CASE("panel kernels: canonical text, signature, validation, IR hash") {
  KernelSpec s = epilogue(48);
  CHECK(s.canonical_text().ends_with(" sched=default panel=48 core=first"));
  CHECK(s.signature() == epilogue(0).signature()); // a tuned chain schedule applies to both
  CHECK(s.canonical_text() != epilogue(0).canonical_text());
  s.core_first = false;
  CHECK(s.canonical_text().ends_with(" panel=48 core=last"));
  s.in_panel = {true, false}; // input 0 holds only the panel's rows
  CHECK(s.canonical_text().ends_with(" panel=48 core=last scratch=0"));
  CHECK(s.signature() == epilogue(0).signature());
  s.in_panel = {false, true}; // a broadcast row is no panel scratch
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s.in_panel = {true};
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  s.in_panel = {};
  s.panel_rows = -1;
  CHECK_THROWS_AS(s.validate(), pejit::Error);
  Jit a, b;
  std::string ir = b.optimized_ir(epilogue(48));
  CHECK(ir.find("define void @pejit_ew(ptr") != std::string::npos);
  CHECK(ir.find("define internal") == std::string::npos); // the chain is inlined
  CHECK(a.compile(epilogue(48)).ir_hash == ir_text_hash(ir));
}

TEST_CASE("panel kernel with a scratch input: the core refills one panel's rows, not advanced") {
  Jit jit;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  KernelSpec s = epilogue(8);
  s.in_panel = {true, false};
  CompiledKernel pk = jit.compile(s);
  CompiledKernel plain = jit.compile(epilogue(0));
  for (int64_t rows : {1, 8, 13, 30}) {
    CAPTURE(rows);
    // The whole product for the plain kernel; the panel kernel's core writes each panel's
    // rows at the start of an 8-row scratch.
    std::vector<float> whole(static_cast<size_t>(rows * kStride)), bias{0.1f, -0.2f, 0.3f, 0, 1};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < kStride; ++col)
        whole[static_cast<size_t>(r * kStride + col)] = product(r, col);
    std::vector<float> scratch(static_cast<size_t>(8 * kStride), nan);
    struct Fill : PanelCore {
      const float* whole;
      float* scratch;
    } fill;
    fill.whole = whole.data();
    fill.scratch = scratch.data();
    fill.fn = [](const PanelCore* p, int64_t r0, int64_t n) {
      const auto& f = *static_cast<const Fill*>(p);
      std::fill(f.scratch, f.scratch + 8 * kStride, std::numeric_limits<float>::quiet_NaN());
      std::copy(f.whole + r0 * kStride, f.whole + (r0 + n) * kStride, f.scratch);
    };
    std::vector<float> o0(static_cast<size_t>(rows * 5), nan), o1(o0), p0(o0), p1(o0);
    float* in[] = {scratch.data() + 2, bias.data()};
    float* out[] = {o0.data(), o1.data()};
    pk.panel(in, out, rows, &fill);
    float* pin[] = {whole.data() + 2, bias.data()};
    float* pout[] = {p0.data(), p1.data()};
    plain.fn(pin, pout, rows);
    for (size_t i = 0; i < o0.size(); ++i) {
      CHECK_FALSE(std::isnan(o0[i]));
      CHECK(o0[i] == p0[i]);
      CHECK(o1[i] == p1[i]);
    }
  }
}

} // namespace tests_jit_panel_test
