// Reductions: sum/mean (all, per axis), softmax and log-softmax stability, cross-entropy and
// its backward against hand values and finite differences, argmax ties.
#include "src/kernels/kernels.h"
#include "src/util/check.h"
#include "tests/support/tensors.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

namespace tests_kernels_reduce_test {

using namespace pejit;
using namespace pejit::kernels;
using namespace pejit::test;

TEST_SUITE("kernels") {
  TEST_CASE("sum and mean") {
    Tensor x = F({2, 3}, {1, 2, 3, 4, 5, 6});
    CHECK(sum(x).rank() == 0);
    CHECK(sum(x).item_f32() == 21);
    CHECK(vf(sum_axis(x, 0)) == std::vector<float>{5, 7, 9});
    CHECK(vf(sum_axis(x, 1)) == std::vector<float>{6, 15});
    CHECK(vf(sum_axis(x, -1)) == std::vector<float>{6, 15});
    CHECK(mean(x).item_f32() == 3.5f);
    CHECK(vf(mean_axis(x, 0)) == std::vector<float>{2.5f, 3.5f, 4.5f});
    CHECK(vf(mean_axis(x, -1)) == std::vector<float>{2, 5});
    Tensor x3 = F({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(vf(sum_axis(x3, 1)) == std::vector<float>{4, 6, 12, 14});
    CHECK(sum_axis(x3, 1).shape() == Shape{2, 2});
    CHECK(sum(I({3}, {1, 2, -5})).item_i32() == -2);
    CHECK(vi(sum_axis(I({2, 2}, {1, 2, 3, 4}), 0)) == std::vector<int32_t>{4, 6});
    CHECK(sum(F({0}, {})).item_f32() == 0);
    CHECK_THROWS_WITH_AS(sum_axis(x, 2), doctest::Contains("axis 2 out of range for shape [2, 3]"),
                         Error);
    CHECK_THROWS_AS(mean(I({1}, {1})), Error);
    // Long rows: the 16-lane sum is exact on integers and independent of alignment.
    std::vector<float> big(1000);
    for (int i = 0; i < 1000; ++i)
      big[i] = float(i % 7);
    float expect = 0;
    for (float v : big)
      expect += v;
    CHECK(sum(F({1000}, big)).item_f32() == expect);
  }

  TEST_CASE("softmax and log_softmax") {
    Tensor x = F({2, 3}, {1, 2, 3, 1000, 1000, 1000});
    Tensor s = softmax(x);
    double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    CHECK(s.f32()[0] == doctest::Approx(std::exp(1.0) / z).epsilon(1e-6));
    CHECK(s.f32()[2] == doctest::Approx(std::exp(3.0) / z).epsilon(1e-6));
    CHECK(s.f32()[4] == doctest::Approx(1.0 / 3).epsilon(1e-6)); // no overflow at 1000
    Tensor ls = log_softmax(x);
    CHECK(ls.f32()[0] == doctest::Approx(1 - std::log(z)).epsilon(1e-6));
    CHECK(ls.f32()[5] == doctest::Approx(-std::log(3.0)).epsilon(1e-6));
    Tensor neg = log_softmax(F({2}, {-1000, 0})); // tiny probability stays finite in log space
    CHECK(neg.f32()[0] == doctest::Approx(-1000).epsilon(1e-6));
    CHECK(neg.f32()[1] == 0);
    CHECK_THROWS_AS(softmax(F({}, {1})), Error);
  }

  TEST_CASE("cross_entropy and backward") {
    Tensor logits = F({2, 3}, {1, 2, 3, 0, 0, 0});
    Tensor labels = I({2}, {2, 0});
    Tensor ce = cross_entropy(logits, labels);
    double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    CHECK(ce.shape() == Shape{2});
    CHECK(ce.f32()[0] == doctest::Approx(std::log(z) - 3).epsilon(1e-6));
    CHECK(ce.f32()[1] == doctest::Approx(std::log(3.0)).epsilon(1e-6));
    CHECK(cross_entropy(F({3}, {0, 0, 0}), I({}, {1})).item_f32() ==
          doctest::Approx(std::log(3.0)));
    Tensor gy = F({2}, {1, 2});
    Tensor d = cross_entropy_backward(logits, labels, gy);
    CHECK(d.f32()[0] == doctest::Approx(std::exp(1.0) / z).epsilon(1e-6));
    CHECK(d.f32()[2] == doctest::Approx(std::exp(3.0) / z - 1).epsilon(1e-6));
    CHECK(d.f32()[3] == doctest::Approx(2 * (1.0 / 3 - 1)).epsilon(1e-6));
    CHECK(d.f32()[4] == doctest::Approx(2.0 / 3).epsilon(1e-6));
    // Central differences of the loss agree with the backward.
    float eps = 1e-2f;
    for (int i = 0; i < 6; ++i) {
      Tensor lp = logits.clone(), lm = logits.clone();
      lp.f32()[i] += eps;
      lm.f32()[i] -= eps;
      Tensor cp = cross_entropy(lp, labels), cm = cross_entropy(lm, labels);
      double fd = (1 * (cp.f32()[0] - cm.f32()[0]) + 2 * (cp.f32()[1] - cm.f32()[1])) / (2 * eps);
      CHECK(d.f32()[i] == doctest::Approx(fd).epsilon(1e-3));
    }
    CHECK_THROWS_WITH_AS(cross_entropy(logits, I({2}, {0, 3})),
                         doctest::Contains("label 3 at position 1"), Error);
    CHECK_THROWS_WITH_AS(cross_entropy(logits, I({3}, {0, 0, 0})),
                         doctest::Contains("[2, 3] do not match labels [3]"), Error);
    CHECK_THROWS_AS(cross_entropy_backward(logits, labels, F({1}, {1})), Error);
  }

  TEST_CASE("argmax") {
    Tensor x = F({3, 3}, {1, 3, 3, 5, 5, 5, -1, -2, 0});
    Tensor a = argmax(x);
    CHECK(a.dtype() == DType::I32);
    CHECK(vi(a) == std::vector<int32_t>{1, 0, 2}); // ties -> first
    CHECK(argmax(F({4}, {0, 7, 7, 1})).item_i32() == 1);
    CHECK(vi(argmax(I({2, 2}, {4, 9, 3, 3}))) == std::vector<int32_t>{1, 0});
    CHECK_THROWS_AS(argmax(F({2, 0}, {})), Error);
  }
}

} // namespace tests_kernels_reduce_test
