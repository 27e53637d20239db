// Accuracy of the vectorized exp / tanh / sigmoid against double-precision std::, over a dense
// sweep of their input range; the bounds checked here are the ones fast_math.h states.
#include "src/kernels/fast_math.h"
#include "src/kernels/kernels.h"

#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

namespace tests_kernels_fast_math_test {

using namespace pejit;
using namespace pejit::kernels;

namespace {
double rel_err(float got, double want) {
  return std::fabs(double(got) - want) / std::fabs(want);
}
} // namespace

TEST_SUITE("kernels") {
  TEST_CASE("fast_exp accuracy") {
    double worst = 0;
    for (double x = -87.3; x <= 88.7; x += 0.00731) {
      float xf = float(x);
      worst = std::max(worst, rel_err(fast_exp(xf), std::exp(double(xf))));
    }
    CHECK(worst <= 3e-7);
    CHECK(fast_exp(0.0f) == 1.0f);
    CHECK(std::isinf(fast_exp(89.0f)));
    CHECK(std::isinf(fast_exp(std::numeric_limits<float>::infinity())));
    CHECK(fast_exp(-std::numeric_limits<float>::infinity()) == 0.0f);
    CHECK(fast_exp(-200.0f) == 0.0f);
    CHECK(fast_exp(-100.0f) > 0.0f); // denormal, not flushed
    CHECK(std::fabs(fast_exp(-100.0f) - std::exp(-100.0f)) < 1e-44);
    CHECK(std::isnan(fast_exp(NAN)));
  }

  TEST_CASE("fast_tanh and fast_sigmoid accuracy") {
    double wt = 0, ws = 0;
    for (double x = -30; x <= 30; x += 0.000913) {
      float xf = float(x);
      if (xf != 0)
        wt = std::max(wt, rel_err(fast_tanh(xf), std::tanh(double(xf))));
      ws = std::max(ws, rel_err(fast_sigmoid(xf), 1.0 / (1.0 + std::exp(-double(xf)))));
    }
    for (float xf = 1e-30f; xf < 1; xf *= 1.7f) // tiny arguments keep relative accuracy
      wt = std::max(wt, rel_err(fast_tanh(-xf), std::tanh(-double(xf))));
    CHECK(wt <= 5e-7);
    CHECK(ws <= 5e-7);
    for (double x = -87; x >= -87.3; x -= 0.01)
      CHECK(rel_err(fast_sigmoid(float(x)), 1.0 / (1.0 + std::exp(-double(float(x))))) <= 5e-7);
    CHECK(fast_tanh(0.0f) == 0.0f);
    CHECK(fast_tanh(100.0f) == 1.0f);
    CHECK(fast_tanh(-100.0f) == -1.0f);
    CHECK(fast_sigmoid(100.0f) == 1.0f);
    CHECK(fast_sigmoid(-200.0f) == 0.0f);
    CHECK(std::isnan(fast_tanh(NAN)));
    CHECK(std::isnan(fast_sigmoid(NAN)));
  }

  TEST_CASE("vectorized unary matches scalar fast math") {
    // The Tensor-level loop (auto-vectorized) must agree with the scalar inline functions.
    std::vector<float> xs;
    for (int i = 0; i < 777; ++i)
      xs.push_back(-20.0f + 0.05f * float(i));
    Tensor x = Tensor::from_f32({777}, xs);
    Tensor e = unary(Unary::Exp, x), t = unary(Unary::Tanh, x), s = unary(Unary::Sigmoid, x);
    for (int i = 0; i < 777; ++i) {
      CHECK(e.f32()[i] == fast_exp(xs[i]));
      CHECK(t.f32()[i] == fast_tanh(xs[i]));
      CHECK(s.f32()[i] == fast_sigmoid(xs[i]));
    }
  }
}

} // namespace tests_kernels_fast_math_test
