// Family-1 kernels (fused elementwise chains): JIT output ≡ a double-precision scalar reference
// on random data, over widths and row counts that cover the vector body, its remainder and the
// broadcast paths; the exp/tanh/sigmoid approximations' error bounds; vector code on AVX hosts.
#include "jit/jit.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

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
  }
  return 0;
}

// Runs `spec` through the JIT and the reference on random inputs in [lo, hi] and checks every
// output element to |jit - ref| <= 2e-5 * (1 + |ref|).
void check_against_reference(Jit& jit, const KernelSpec& spec, float lo = -2.0f, float hi = 2.0f) {
  CompiledKernel k = jit.compile(spec);
  double worst = 0; // max over elements of |jit - ref| / (2e-5 * (1 + |ref|)); must stay <= 1
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t rows : {1, 2, 25}) {
    CAPTURE(rows);
    int64_t n = rows * spec.width;
    std::vector<std::vector<float>> in;
    for (InputShape s : spec.inputs) {
      size_t len = s == InputShape::Full ? n : s == InputShape::RowBroadcast ? spec.width : 1;
      std::vector<float> v(len);
      for (float& x : v)
        x = dist(rng);
      in.push_back(std::move(v));
    }
    std::vector<std::vector<float>> out(spec.outputs.size(), std::vector<float>(n, -777.0f));
    std::vector<float*> in_p, out_p;
    for (auto& v : in)
      in_p.push_back(v.data());
    for (auto& v : out)
      out_p.push_back(v.data());
    k.fn(in_p.data(), out_p.data(), rows);

    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < spec.width; ++c) {
        std::vector<double> v;
        for (size_t i = 0; i < spec.inputs.size(); ++i) {
          InputShape s = spec.inputs[i];
          v.push_back(in[i][s == InputShape::Full           ? r * spec.width + c
                            : s == InputShape::RowBroadcast ? c
                                                            : 0]);
        }
        for (const ElementwiseStep& st : spec.ops)
          v.push_back(reference_op(st.op, v[st.a], st.b >= 0 ? v[st.b] : 0.0));
        for (size_t j = 0; j < spec.outputs.size(); ++j) {
          double want = v[spec.outputs[j]];
          float got = out[j][r * spec.width + c];
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
  const ElementwiseOp binary[] = {ElementwiseOp::Add, ElementwiseOp::Sub, ElementwiseOp::Mul,
                                  ElementwiseOp::SigmoidBwd, ElementwiseOp::TanhBwd};
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

TEST_CASE("the inner loop is vectorized on AVX hosts") {
  Jit jit;
  KernelSpec s{.width = 150,
               .inputs = {InputShape::Full, InputShape::RowBroadcast},
               .ops = {{ElementwiseOp::Add, 0, 1}, {ElementwiseOp::Tanh, 2}},
               .outputs = {3}};
  std::string ir = jit.optimized_ir(s);
  const std::string& f = jit.target_features();
  MESSAGE("target " << jit.target_cpu());
  // AVX-512 hosts whose tuning prefers 256-bit vectors (rocketlake, icelake-client...) get
  // <8 x float> from the vectorizer; either way the loop is vectorized.
  if (f.find("+avx512f") != std::string::npos)
    CHECK((ir.find("<16 x float>") != std::string::npos ||
           ir.find("<8 x float>") != std::string::npos));
  else if (f.find("+avx2") != std::string::npos)
    CHECK(ir.find("<8 x float>") != std::string::npos);
  CHECK(ir.find("target-cpu") != std::string::npos);
}
