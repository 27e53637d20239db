// Elementwise kernels: unary ops, broadcasting binary ops (edge cases and error messages),
// broadcast_to / sum_to_shape, the activation backward rules and the in-place accumulators.
#include "src/kernels/kernels.h"
#include "src/util/check.h"
#include "tests/support/tensors.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

namespace tests_kernels_elementwise_test {

using namespace pejit;
using namespace pejit::kernels;
using namespace pejit::test;

TEST_SUITE("kernels") {
  TEST_CASE("unary") {
    Tensor x = F({4}, {-1, 0, 0.5f, 2});
    CHECK(vf(unary(Unary::Neg, x)) == std::vector<float>{1, -0.0f, -0.5f, -2});
    CHECK(vf(unary(Unary::Relu, x)) == std::vector<float>{0, 0, 0.5f, 2});
    Tensor e = unary(Unary::Exp, x);
    CHECK(e.f32()[3] == doctest::Approx(std::exp(2.0)).epsilon(1e-6));
    Tensor l = unary(Unary::Log, F({2}, {1, std::exp(1.0f)}));
    CHECK(l.f32()[0] == 0);
    CHECK(l.f32()[1] == doctest::Approx(1).epsilon(1e-6));
    CHECK(unary(Unary::Tanh, x).f32()[0] == doctest::Approx(std::tanh(-1.0)).epsilon(1e-6));
    CHECK(unary(Unary::Sigmoid, x).f32()[1] == 0.5f);
    CHECK(unary(Unary::Sigmoid, x).shape() == Shape{4});
    Tensor xi = I({3}, {-2, 0, 5});
    CHECK(vi(unary(Unary::Neg, xi)) == std::vector<int32_t>{2, 0, -5});
    CHECK(vi(unary(Unary::Relu, xi)) == std::vector<int32_t>{0, 0, 5});
    CHECK_THROWS_AS(unary(Unary::Exp, xi), Error);
    CHECK(std::isnan(unary(Unary::Relu, F({1}, {NAN})).f32()[0]));
  }

  TEST_CASE("binary same shape, scalar and i32") {
    Tensor a = F({2, 2}, {1, 2, 3, 4}), b = F({2, 2}, {4, 3, 2, 1});
    CHECK(vf(binary(Binary::Add, a, b)) == std::vector<float>{5, 5, 5, 5});
    CHECK(vf(binary(Binary::Sub, a, b)) == std::vector<float>{-3, -1, 1, 3});
    CHECK(vf(binary(Binary::Mul, a, b)) == std::vector<float>{4, 6, 6, 4});
    CHECK(vf(binary(Binary::Div, a, b)) == std::vector<float>{0.25f, 2.0f / 3, 1.5f, 4});
    CHECK(vf(binary(Binary::Lt, a, b)) == std::vector<float>{1, 1, 0, 0});
    CHECK(vf(binary(Binary::Le, a, F({}, {2}))) == std::vector<float>{1, 1, 0, 0});
    CHECK(vf(binary(Binary::Gt, F({}, {2}), a)) == std::vector<float>{1, 0, 0, 0});
    CHECK(vf(binary(Binary::Ge, a, b)) == std::vector<float>{0, 0, 1, 1});
    CHECK(vf(binary(Binary::Eq, a, F({1}, {3}))) == std::vector<float>{0, 0, 1, 0});
    CHECK(vf(binary(Binary::Ne, a, F({1}, {3}))) == std::vector<float>{1, 1, 0, 1});
    Tensor s = binary(Binary::Add, F({}, {1}), F({}, {2}));
    CHECK(s.rank() == 0);
    CHECK(s.item_f32() == 3);

    Tensor ia = I({4}, {7, -7, 6, 1}), ib = I({4}, {2, 2, -4, 1});
    CHECK(vi(binary(Binary::Div, ia, ib)) == std::vector<int32_t>{3, -3, -1, 1}); // truncates
    CHECK(vi(binary(Binary::Mul, ia, ib)) == std::vector<int32_t>{14, -14, -24, 1});
    CHECK(vi(binary(Binary::Gt, ia, ib)) == std::vector<int32_t>{1, 0, 1, 0});
    CHECK(binary(Binary::Eq, ia, ib).dtype() == DType::I32);
    CHECK_THROWS_WITH_AS(binary(Binary::Div, ia, I({4}, {1, 0, 1, 1})),
                         doctest::Contains("division by zero"), Error);
    CHECK_THROWS_WITH_AS(binary(Binary::Add, a, ia), doctest::Contains("dtypes"), Error);
  }

  TEST_CASE("binary broadcasting") {
    Tensor m = F({2, 3}, {1, 2, 3, 4, 5, 6});
    Tensor row = F({3}, {10, 20, 30}), col = F({2, 1}, {100, 200});
    CHECK(vf(binary(Binary::Add, m, row)) == std::vector<float>{11, 22, 33, 14, 25, 36});
    CHECK(vf(binary(Binary::Sub, row, m)) == std::vector<float>{9, 18, 27, 6, 15, 24});
    CHECK(vf(binary(Binary::Add, m, col)) == std::vector<float>{101, 102, 103, 204, 205, 206});
    Tensor outer = binary(Binary::Mul, col, F({1, 3}, {1, 2, 3})); // [2,1]*[1,3] -> [2,3]
    CHECK(outer.shape() == Shape{2, 3});
    CHECK(vf(outer) == std::vector<float>{100, 200, 300, 200, 400, 600});
    // Rank extension plus a middle broadcast: [2,1,2] + [3,1] -> [2,3,2].
    Tensor x = F({2, 1, 2}, {1, 2, 3, 4}), y = F({3, 1}, {0, 10, 20});
    Tensor z = binary(Binary::Add, x, y);
    CHECK(z.shape() == Shape{2, 3, 2});
    CHECK(vf(z) == std::vector<float>{1, 2, 11, 12, 21, 22, 3, 4, 13, 14, 23, 24});
    // Zero-size dims broadcast against 1.
    CHECK(binary(Binary::Add, F({0, 3}, {}), row).shape() == Shape{0, 3});
    CHECK(binary(Binary::Add, F({1}, {1}), F({0}, {})).shape() == Shape{0});
    // Errors name both shapes.
    CHECK_THROWS_WITH_AS(binary(Binary::Add, m, F({2}, {1, 2})),
                         doctest::Contains("[2, 3] and [2]"), Error);
    CHECK_THROWS_WITH_AS(broadcast_shape({4, 3}, {2, 1, 2}),
                         doctest::Contains("[4, 3] and [2, 1, 2]"), Error);
    CHECK(broadcast_shape({}, {2, 2}) == Shape{2, 2});
    CHECK(broadcast_shape({5, 1, 4}, {3, 1}) == Shape{5, 3, 4});
  }

  TEST_CASE("broadcast_to and sum_to_shape") {
    Tensor row = F({3}, {1, 2, 3});
    Tensor b = broadcast_to(row, {2, 3});
    CHECK(vf(b) == std::vector<float>{1, 2, 3, 1, 2, 3});
    CHECK(vf(broadcast_to(F({2, 1}, {1, 2}), {2, 2})) == std::vector<float>{1, 1, 2, 2});
    CHECK(broadcast_to(row, {3}).shares_storage(row));
    CHECK_THROWS_WITH_AS(broadcast_to(row, {3, 2}), doctest::Contains("[3] to [3, 2]"), Error);

    Tensor g = F({2, 3}, {1, 2, 3, 4, 5, 6});
    CHECK(vf(sum_to_shape(g, {3})) == std::vector<float>{5, 7, 9});
    CHECK(vf(sum_to_shape(g, {1, 3})) == std::vector<float>{5, 7, 9});
    CHECK(vf(sum_to_shape(g, {2, 1})) == std::vector<float>{6, 15});
    CHECK(sum_to_shape(g, {}).item_f32() == 21);
    CHECK(sum_to_shape(g, {1, 1}).shape() == Shape{1, 1});
    CHECK(sum_to_shape(g, {2, 3}).shares_storage(g));
    Tensor g3 = F({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    CHECK(vf(sum_to_shape(g3, {3, 1})) ==
          std::vector<float>{1 + 2 + 7 + 8, 3 + 4 + 9 + 10, 5 + 6 + 11 + 12});
    CHECK(vi(sum_to_shape(I({2, 2}, {1, 2, 3, 4}), {2})) == std::vector<int32_t>{4, 6});
    CHECK_THROWS_WITH_AS(sum_to_shape(g, {2}),
                         doctest::Contains("[2] does not broadcast to [2, 3]"), Error);
    // Gradient identity: sum_to_shape inverts broadcasting's fan-out.
    Tensor bias = F({3}, {0.5f, 1, 2});
    CHECK(vf(sum_to_shape(broadcast_to(bias, {4, 3}), {3})) == std::vector<float>{2, 4, 8});
  }

  TEST_CASE("activation backward rules") {
    Tensor y = F({3}, {0.5f, 0.25f, -0.5f}), gy = F({3}, {1, 2, 4});
    CHECK(vf(sigmoid_backward(y, gy)) == std::vector<float>{0.25f, 2 * 0.25f * 0.75f, -3});
    CHECK(vf(tanh_backward(y, gy)) == std::vector<float>{0.75f, 2 * (1 - 0.0625f), 3});
    CHECK(vf(relu_backward(F({3}, {-1, 0, 2}), gy)) == std::vector<float>{0, 0, 4});
    CHECK_THROWS_WITH_AS(relu_backward(F({2}, {1, 2}), gy), doctest::Contains("[2] and f32[3]"),
                         Error);
  }

  TEST_CASE("add_inplace and scale_inplace") {
    Tensor acc;
    Tensor x = F({2}, {1, 2});
    add_inplace(acc, x); // undefined acc takes x, shared
    CHECK(acc.shares_storage(x));
    add_inplace(acc, x); // shared: cloned before writing
    CHECK(vf(acc) == std::vector<float>{2, 4});
    CHECK(vf(x) == std::vector<float>{1, 2});
    const float* p = acc.f32();
    add_inplace(acc, x); // unique now: written in place
    CHECK(acc.f32() == p);
    CHECK(vf(acc) == std::vector<float>{3, 6});
    Tensor alias = acc;
    scale_inplace(acc, 2);
    CHECK(vf(acc) == std::vector<float>{6, 12});
    CHECK(vf(alias) == std::vector<float>{3, 6});
    CHECK_THROWS_WITH_AS(add_inplace(acc, F({3}, {1, 2, 3})), doctest::Contains("[2] and f32[3]"),
                         Error);
  }
}

} // namespace tests_kernels_elementwise_test
