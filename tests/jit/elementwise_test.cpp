// Family-1 kernels (fused elementwise chains): JIT output ≡ a double-precision scalar reference
// on random data, over widths and row counts that cover the vector body, its remainder and the
// broadcast paths; the exp/tanh/sigmoid approximations' error bounds; vector code on AVX hosts.
#include "jit/jit.h"
#include "pejit/error.h"
#include "src/kernels/fast_math.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tests_jit_elementwise_test {

using namespace pejit::jit;

namespace {

double reference_op(ElementwiseOp op, double a, double b) {
  switch (op) {
  case ElementwiseOp::Add:
    return a + b;
  case ElementwiseOp::Sub:
    return a - b;
  case ElementwiseOp::Mul:
    return a * b;
  case ElementwiseOp::Div:
    return a / b;
  case ElementwiseOp::Neg:
    return -a;
  case ElementwiseOp::Exp:
    return std::exp(a);
  case ElementwiseOp::Tanh:
    return std::tanh(a);
  case ElementwiseOp::Sigmoid:
    return 1.0 / (1.0 + std::exp(-a));
  case ElementwiseOp::Relu:
    return a > 0 ? a : 0.0;
  case ElementwiseOp::SigmoidBwd:
    return b * a * (1 - a);
  case ElementwiseOp::TanhBwd:
    return b * (1 - a * a);
  case ElementwiseOp::ReluBwd:
    return a > 0 ? b : 0.0;
  }
  return 0;
}

// Runs `spec` through the JIT and the reference on random inputs in [lo, hi] and checks every
// output element to |jit - ref| <= 2e-5 * (1 + |ref|). A strided array (spec.in_strides /
// out_strides) is a column block at column kOffset of a wider array: the kernel must read and
// write only that block (every other element of an output keeps its sentinel).
void check_against_reference(Jit& jit, const KernelSpec& spec, float lo = -2.0f, float hi = 2.0f) {
  constexpr int64_t kOffset = 5;
  constexpr float kSentinel = -777.0f;
  CompiledKernel k = jit.compile(spec);
  double worst = 0; // max over elements of |jit - ref| / (2e-5 * (1 + |ref|)); must stay <= 1
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(lo, hi);
  auto offset = [&](int64_t stride) { return stride == spec.width ? 0 : kOffset; };
  for (int64_t rows : {1, 2, 25}) {
    CAPTURE(rows);
    std::vector<std::vector<float>> in;
    std::vector<float*> in_p, out_p;
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      InputShape s = spec.inputs[i];
      int64_t st = spec.in_stride(i);
      size_t len = s == InputShape::Full           ? rows * st + offset(st)
                   : s == InputShape::RowBroadcast ? spec.width
                                                   : 1;
      std::vector<float> v(len);
      for (float& x : v)
        x = dist(rng);
      in.push_back(std::move(v));
    }
    std::vector<std::vector<float>> out;
    for (size_t j = 0; j < spec.outputs.size(); ++j)
      out.emplace_back(rows * spec.out_stride(j) + offset(spec.out_stride(j)), kSentinel);
    for (size_t i = 0; i < in.size(); ++i)
      in_p.push_back(in[i].data() +
                     (spec.inputs[i] == InputShape::Full ? offset(spec.in_stride(i)) : 0));
    for (size_t j = 0; j < out.size(); ++j)
      out_p.push_back(out[j].data() + offset(spec.out_stride(j)));
    k.fn(in_p.data(), out_p.data(), rows);

    std::vector<std::vector<bool>> written;
    for (auto& v : out)
      written.emplace_back(v.size(), false);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < spec.width; ++c) {
        std::vector<double> v;
        for (size_t i = 0; i < spec.inputs.size(); ++i) {
          InputShape s = spec.inputs[i];
          v.push_back(s == InputShape::Full           ? in_p[i][r * spec.in_stride(i) + c]
                      : s == InputShape::RowBroadcast ? in[i][c]
                                                      : in[i][0]);
        }
        for (const ElementwiseStep& st : spec.ops)
          v.push_back(reference_op(st.op, v[st.a], st.b >= 0 ? v[st.b] : 0.0));
        for (size_t j = 0; j < spec.outputs.size(); ++j) {
          double want = v[spec.outputs[j]];
          int64_t at = r * spec.out_stride(j) + c;
          float got = out_p[j][at];
          written[j][static_cast<size_t>(at + offset(spec.out_stride(j)))] = true;
          double ratio = std::abs(got - want) / (2e-5 * (1 + std::abs(want)));
          if (!(ratio <= 1)) { // also catches NaN
            CAPTURE(r);
            CAPTURE(c);
            CAPTURE(j);
            CHECK(got == doctest::Approx(want));
            jit.remove(k.handle);
            return;
          }
          worst = std::max(worst, ratio);
        }
      }
    for (size_t j = 0; j < out.size(); ++j)
      for (size_t e = 0; e < out[j].size(); ++e)
        if (!written[j][e] && out[j][e] != kSentinel) {
          CAPTURE(j);
          CAPTURE(e);
          FAIL("a strided kernel wrote outside its column block");
        }
  }
  CHECK(worst <= 1.0);
  jit.remove(k.handle);
}

const std::vector<int64_t> kWidths = {1, 3, 16, 17, 150, 750};

} // namespace

TEST_CASE("each elementwise op matches the reference, full and broadcast inputs") {
  Jit jit;
  const ElementwiseOp unary[] = {ElementwiseOp::Neg, ElementwiseOp::Exp, ElementwiseOp::Tanh,
                                 ElementwiseOp::Sigmoid, ElementwiseOp::Relu};
  const ElementwiseOp binary[] = {ElementwiseOp::Add,     ElementwiseOp::Sub,
                                  ElementwiseOp::Mul,     ElementwiseOp::SigmoidBwd,
                                  ElementwiseOp::TanhBwd, ElementwiseOp::ReluBwd};
  for (int64_t w : kWidths) {
    CAPTURE(w);
    for (ElementwiseOp op : unary) {
      CAPTURE(op_name(op));
      KernelSpec s{.width = w, .inputs = {InputShape::Full}, .ops = {{op, 0}}, .outputs = {1}};
      check_against_reference(jit, s);
    }
    for (ElementwiseOp op : binary)
      for (InputShape second : {InputShape::Full, InputShape::RowBroadcast, InputShape::Scalar}) {
        CAPTURE(op_name(op));
        CAPTURE(static_cast<int>(second));
        KernelSpec s{
            .width = w, .inputs = {InputShape::Full, second}, .ops = {{op, 0, 1}}, .outputs = {2}};
        check_against_reference(jit, s);
      }
    // Division: denominators kept away from zero by adding a positive broadcast bias.
    KernelSpec div{.width = w,
                   .inputs = {InputShape::Full, InputShape::Full, InputShape::Scalar},
                   .ops = {{ElementwiseOp::Exp, 1}, {ElementwiseOp::Div, 0, 3}},
                   .outputs = {4}};
    check_against_reference(jit, div);
  }
  CHECK(jit.live_kernels() == 0);
}

TEST_CASE("fused chains match the reference") {
  Jit jit;
  // A TreeLSTM-like gate: sigmoid(x*W + b) * tanh(c), written twice (both gates as outputs).
  KernelSpec gate{
      .width = 0,
      .inputs = {InputShape::Full, InputShape::RowBroadcast, InputShape::Full, InputShape::Scalar},
      .ops = {{ElementwiseOp::Mul, 0, 3},
              {ElementwiseOp::Add, 4, 1},
              {ElementwiseOp::Sigmoid, 5},
              {ElementwiseOp::Tanh, 2},
              {ElementwiseOp::Mul, 6, 7},
              {ElementwiseOp::Relu, 8},
              {ElementwiseOp::Sub, 9, 0}},
      .outputs = {8, 6, 10}};
  // Its backward helpers: gy * y(1-y) and gy * (1-y^2), on values produced in the chain.
  KernelSpec bwd{.width = 0,
                 .inputs = {InputShape::Full, InputShape::Full, InputShape::RowBroadcast},
                 .ops = {{ElementwiseOp::Sigmoid, 0},
                         {ElementwiseOp::Tanh, 1},
                         {ElementwiseOp::SigmoidBwd, 3, 2},
                         {ElementwiseOp::TanhBwd, 4, 5},
                         {ElementwiseOp::Neg, 6},
                         {ElementwiseOp::Exp, 7}},
                 .outputs = {5, 6, 8}};
  for (int64_t w : kWidths) {
    CAPTURE(w);
    gate.width = w;
    bwd.width = w;
    check_against_reference(jit, gate);
    check_against_reference(jit, bwd);
  }
}

TEST_CASE(
    "strided inputs and outputs: a split's parts read and a concat's parts written in place") {
  Jit jit;
  // Three gates read as column blocks of one [rows, 3w] array (a split), with one plain input;
  // two results written as blocks of a [rows, 2w + 7] array (a concat), one plain.
  for (int64_t w : kWidths) {
    CAPTURE(w);
    KernelSpec s{.width = w,
                 .inputs = {InputShape::Full, InputShape::Full, InputShape::Full, InputShape::Full,
                            InputShape::RowBroadcast},
                 .ops = {{ElementwiseOp::Sigmoid, 0},
                         {ElementwiseOp::Tanh, 1},
                         {ElementwiseOp::Mul, 5, 6},
                         {ElementwiseOp::Sigmoid, 2},
                         {ElementwiseOp::Mul, 8, 3},
                         {ElementwiseOp::Add, 9, 4}},
                 .outputs = {7, 9, 10},
                 .in_strides = {3 * w, 3 * w, 3 * w, 0, 0},
                 .out_strides = {2 * w + 7, 0, 2 * w + 7}};
    CHECK(s.strided());
    CHECK(s.signature().find("in=F/" + std::to_string(3 * w)) != std::string::npos);
    CHECK(s.signature().find("out=7/" + std::to_string(2 * w + 7) + ",9,10/") != std::string::npos);
    check_against_reference(jit, s);
    // Only the outputs strided (the flat loop cannot serve them).
    s.in_strides.clear();
    check_against_reference(jit, s);
  }
  // A stride of exactly the width is the plain layout: the same canonical text.
  KernelSpec plain{
      .width = 16, .inputs = {InputShape::Full}, .ops = {{ElementwiseOp::Tanh, 0}}, .outputs = {1}};
  KernelSpec same = plain;
  same.in_strides = {16};
  same.out_strides = {0};
  CHECK_FALSE(same.strided());
  CHECK(same.canonical_text() == plain.canonical_text());
  // Malformed strides are errors before LLVM sees them.
  KernelSpec bad = plain;
  bad.in_strides = {8};
  CHECK_THROWS_WITH_AS(jit.compile(bad), doctest::Contains("stride 8"), pejit::Error);
  bad = plain;
  bad.out_strides = {32, 32};
  CHECK_THROWS_WITH_AS(jit.compile(bad), doctest::Contains("one stride per"), pejit::Error);
  bad = plain;
  bad.inputs = {InputShape::RowBroadcast};
  bad.in_strides = {32};
  CHECK_THROWS_WITH_AS(jit.compile(bad), doctest::Contains("full inputs only"), pejit::Error);
}

TEST_CASE("exp, tanh and sigmoid stay within their stated error bounds") {
  Jit jit;
  KernelSpec s{
      .width = 1,
      .inputs = {InputShape::Full},
      .ops = {{ElementwiseOp::Exp, 0}, {ElementwiseOp::Tanh, 0}, {ElementwiseOp::Sigmoid, 0}},
      .outputs = {1, 2, 3}};
  CompiledKernel k = jit.compile(s);
  std::vector<float> x;
  for (double v = -20; v <= 20; v += 1e-3)
    x.push_back(static_cast<float>(v));
  for (float v : {-87.0f, -80.0f, -50.0f, 50.0f, 80.0f, 88.0f, 1e-7f, -1e-7f, 0.0f, 0.62499f,
                  0.625f, -0.625f})
    x.push_back(v);
  size_t n = x.size();
  std::vector<float> e(n), t(n), sg(n);
  float* in[] = {x.data()};
  float* out[] = {e.data(), t.data(), sg.data()};
  k.fn(in, out, static_cast<int64_t>(n));
  double max_exp = 0, max_tanh_rel = 0, max_tanh_abs = 0, max_sig = 0;
  for (size_t i = 0; i < n; ++i) {
    double xd = x[i];
    double re = std::exp(xd), rt = std::tanh(xd), rs = 1 / (1 + std::exp(-xd));
    max_exp = std::max(max_exp, std::abs(e[i] - re) / re);
    max_tanh_abs = std::max(max_tanh_abs, std::abs(t[i] - rt));
    if (rt != 0)
      max_tanh_rel = std::max(max_tanh_rel, std::abs(t[i] - rt) / std::abs(rt));
    max_sig = std::max(max_sig, std::abs(sg[i] - rs) / rs);
  }
  MESSAGE("max errors: exp rel " << max_exp << ", tanh rel " << max_tanh_rel << " abs "
                                 << max_tanh_abs << ", sigmoid rel " << max_sig);
  CHECK(max_exp <= 3e-7);
  CHECK(max_tanh_rel <= 5e-7);
  CHECK(max_tanh_abs <= 3e-7);
  CHECK(max_sig <= 5e-7);
  // Overflow and NaN behave like fast_math.h.
  float big[] = {100.0f, std::nanf("")};
  float ob[2], tb[2], sb[2];
  float* in2[] = {big};
  float* out2[] = {ob, tb, sb};
  k.fn(in2, out2, 2);
  CHECK(std::isinf(ob[0]));
  CHECK(tb[0] == 1.0f);
  CHECK(sb[0] == 1.0f);
  CHECK(std::isnan(ob[1]));
}

TEST_CASE("exp equals fast_math.h's fast_exp bit for bit over its whole range (vscalefps on "
          "AVX-512 for the scaling by 2^n)") {
  Jit jit;
  // Every power-of-two scale fast_exp applies, results down through gradual underflow to 0
  // and up to +inf, and the clamps at -104 and 89.
  std::vector<float> x;
  for (double v = -112; v <= 96; v += 1.0 / 64)
    x.push_back(static_cast<float>(v));
  for (float v : {-104.0f, -103.97f, -87.34f, -87.33f, 88.72f, 88.73f, 89.0f, 0.0f, -0.0f, 1e-30f,
                  -1e-30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max()})
    x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    want[i] = pejit::kernels::fast_exp(x[i] + 0.0f);
  // exp(x + b) with b a broadcast row of +0 (x + 0 is x, but -0 + 0 is +0, whose exp is the
  // same): a chain in the default schedule's explicit vectors, where the scaling is one
  // instruction on AVX-512 (a lone exp on contiguous rows is one flat loop that LLVM's loop
  // vectorizer widens, with fast_exp's own scaling). Widths: one lane per row, the vector
  // body with its overlapping end, several vectors.
  auto spec = [](int64_t width) {
    return KernelSpec{.width = width,
                      .inputs = {InputShape::Full, InputShape::RowBroadcast},
                      .ops = {{ElementwiseOp::Add, 0, 1}, {ElementwiseOp::Exp, 2}},
                      .outputs = {3}};
  };
  for (int64_t width : {1, 17, 150, 1000}) {
    CAPTURE(width);
    CompiledKernel k = jit.compile(spec(width));
    const int64_t rows = (n + width - 1) / width;
    std::vector<float> in(static_cast<size_t>(rows * width), 0.0f), out(in.size(), -777.0f);
    std::vector<float> zeros(static_cast<size_t>(width), 0.0f);
    std::copy(x.begin(), x.end(), in.begin());
    float* ip[] = {in.data(), zeros.data()};
    float* op[] = {out.data()};
    k.fn(ip, op, rows);
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (std::memcmp(&out[i], &want[i], sizeof(float)) != 0 && bad++ < 5)
        MESSAGE("exp(" << x[i] << "): JIT " << out[i] << ", fast_exp " << want[i]);
    CHECK(bad == 0);
    jit.remove(k.handle);
  }
  // On AVX-512 hosts the scaling is vscalefps (the instruction's intrinsic in the IR).
  const std::string& f = jit.target_features();
  if ((f + ",").find("+avx512f,") != std::string::npos)
    CHECK(jit.optimized_ir(spec(150)).find("llvm.x86.avx512.mask.scalef.ps") != std::string::npos);
}

TEST_CASE("the inner loop is vectorized on AVX hosts") {
  Jit jit;
  KernelSpec s{.width = 150,
               .inputs = {InputShape::Full, InputShape::RowBroadcast},
               .ops = {{ElementwiseOp::Add, 0, 1}, {ElementwiseOp::Tanh, 2}},
               .outputs = {3}};
  std::string ir = jit.optimized_ir(s);
  const std::string& f = jit.target_features();
  MESSAGE("target " << jit.target_cpu());
  // The default schedule's explicit vectors are two of the host's preferred vectors: <32 x
  // float> where it prefers 512-bit vectors (Zen 4 and 5), <16 x float> on AVX2 hosts and
  // AVX-512 ones that prefer 256-bit vectors.
  const int w = jit.chain_width();
  const std::string vec = "<" + std::to_string(w) + " x float>";
  MESSAGE("default chain width " << w);
  if (jit.target_cpu() == "znver4" || jit.target_cpu() == "znver5")
    CHECK(w == 32);
  if (f.find("+avx2") != std::string::npos)
    CHECK(w >= 16);
  CHECK(ir.find(vec) != std::string::npos);
  // The row's ragged end (150 is not a multiple of w) is one overlapping vector: no scalar
  // tanh (its polynomial on a lone float) is left in the code.
  CHECK(ir.find("fmul float") == std::string::npos);
  CHECK(ir.find("target-cpu") != std::string::npos);
  // The default schedule writes the chain once (the columns in explicit vectors, the last
  // step moved back to end at the row's end): one store of the output. The vectorizer's
  // body, its interleaved copy and a separate tail were three.
  size_t stores = 0;
  for (size_t at = ir.find("store " + vec); at != std::string::npos;
       at = ir.find("store " + vec, at + 1))
    ++stores;
  CHECK(stores == 1);
}

} // namespace tests_jit_elementwise_test
