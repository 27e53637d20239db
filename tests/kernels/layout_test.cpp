// Layout kernels (concat, slice, transpose) and row gathers: take, take_backward, coalesce,
// to_dense and add_rows_inplace against a dense scatter.
#include "src/kernels/kernels.h"
#include "src/util/check.h"
#include "tests/support/tensors.h"

#include <doctest/doctest.h>

#include <random>
#include <vector>

namespace tests_kernels_layout_test {

using namespace pejit;
using namespace pejit::kernels;
using namespace pejit::test;

TEST_SUITE("kernels") {
  TEST_CASE("concat") {
    Tensor a = F({2, 2}, {1, 2, 3, 4}), b = F({2, 1}, {5, 6});
    Tensor xs[] = {a, b};
    Tensor c = concat(xs, 1);
    CHECK(c.shape() == Shape{2, 3});
    CHECK(vf(c) == std::vector<float>{1, 2, 5, 3, 4, 6});
    Tensor ys[] = {a, F({1, 2}, {7, 8})};
    CHECK(vf(concat(ys, -2)) == std::vector<float>{1, 2, 3, 4, 7, 8});
    Tensor vs[] = {F({2}, {1, 2}), F({0}, {}), F({1}, {3})};
    CHECK(vf(concat(vs, 0)) == std::vector<float>{1, 2, 3});
    Tensor bad[] = {a, F({3, 1}, {1, 2, 3})};
    CHECK_THROWS_WITH_AS(concat(bad, 1), doctest::Contains("f32[3, 1]"), Error);
    Tensor mixed[] = {a, I({2, 2}, {1, 2, 3, 4})};
    CHECK_THROWS_AS(concat(mixed, 0), Error);
  }

  TEST_CASE("slice and transpose") {
    Tensor x = F({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
    CHECK(vf(slice(x, 1, 1, 3)) == std::vector<float>{1, 2, 5, 6});
    CHECK(vf(slice(x, -1, -2, 4)) == std::vector<float>{2, 3, 6, 7});
    CHECK(vf(slice(x, 0, 1, 2)) == std::vector<float>{4, 5, 6, 7});
    CHECK(slice(x, 0, 1, 1).shape() == Shape{0, 4});
    CHECK_THROWS_WITH_AS(slice(x, 1, 2, 5), doctest::Contains("shape [2, 4]"), Error);
    Tensor t = transpose(x);
    CHECK(t.shape() == Shape{4, 2});
    CHECK(vf(t) == std::vector<float>{0, 4, 1, 5, 2, 6, 3, 7});
    // Every element, at sizes around the 8x8 register blocks and the 64x64 tiles (ragged
    // edges on both sides), f32 and i32.
    for (auto [r, c] : {std::pair{1, 1}, {8, 8}, {7, 9}, {70, 45}, {64, 136}, {300, 750}}) {
      std::vector<float> big(static_cast<size_t>(r * c));
      std::vector<int32_t> ints(big.size());
      for (size_t i = 0; i < big.size(); ++i) {
        big[i] = float(i) * 0.5f;
        ints[i] = static_cast<int32_t>(i) - 7;
      }
      Tensor bt = transpose(F({r, c}, big)), it = transpose(I({r, c}, ints));
      REQUIRE(bt.shape() == Shape{c, r});
      int wrong = 0;
      for (int i = 0; i < r; ++i)
        for (int j = 0; j < c; ++j)
          wrong += bt.f32()[j * r + i] != big[static_cast<size_t>(i * c + j)] ||
                   it.i32()[j * r + i] != ints[static_cast<size_t>(i * c + j)];
      CHECK_MESSAGE(wrong == 0, r << "x" << c);
    }
    CHECK_THROWS_AS(transpose(F({3}, {1, 2, 3})), Error);
  }

  TEST_CASE("take") {
    Tensor table = F({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
    Tensor r = take(table, I({2, 2}, {3, 0, 1, 3}));
    CHECK(r.shape() == Shape{2, 2, 2});
    CHECK(vf(r) == std::vector<float>{30, 31, 0, 1, 10, 11, 30, 31});
    CHECK(take(table, I({}, {2})).shape() == Shape{2});
    CHECK(vi(take(I({3}, {5, 6, 7}), I({2}, {2, 2}))) == std::vector<int32_t>{7, 7});
    CHECK_THROWS_WITH_AS(take(table, I({2}, {1, 4})), doctest::Contains("id 4"), Error);
    CHECK_THROWS_AS(take(table, I({1}, {-1})), Error);
    CHECK_THROWS_AS(take(table, F({1}, {1})), Error);
  }

  TEST_CASE("take_backward, coalesce, to_dense vs dense scatter") {
    std::mt19937 rng(7);
    const int64_t v = 9, d = 5, n = 23;
    std::vector<int32_t> ids(n);
    for (auto& i : ids)
      i = int32_t(rng() % v);
    ids[3] = ids[10] = ids[17] = 4; // repeats
    std::vector<float> g(n * d);
    for (auto& x : g)
      x = float(int(rng() % 17)) - 8; // small integers: sums are exact in any order
    Tensor idx = I({n}, ids), gy = F({n, d}, g);
    std::vector<float> dense(v * d, 0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < d; ++j)
        dense[ids[i] * d + j] += g[i * d + j];

    RowSparse rs = take_backward(idx, gy, {v, d});
    CHECK(rs.num_rows == v);
    CHECK(rs.rows.shares_storage(gy)); // no copy
    CHECK(vf(rs.to_dense()) == dense);
    RowSparse c = rs;
    c.coalesce();
    CHECK(c.indices.numel() < n);
    for (int64_t i = 1; i < c.indices.numel(); ++i)
      CHECK(c.indices.i32()[i - 1] < c.indices.i32()[i]);
    CHECK(vf(c.to_dense()) == dense);
    CHECK(vf(rs.rows) == g); // coalescing a copy leaves the original alone

    Tensor table = Tensor::full({v, d}, 1.0f);
    Tensor alias = table;
    add_rows_inplace(table, c, -0.5f);
    for (int64_t i = 0; i < v * d; ++i)
      CHECK(table.f32()[i] == 1.0f - 0.5f * dense[i]);
    CHECK(alias.f32()[0] == 1.0f); // shared table was cloned

    // Index tensors of higher rank map onto rows of a table with more dims.
    RowSparse r2 =
        take_backward(I({2, 1}, {1, 1}), F({2, 1, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), {3, 2, 2});
    CHECK(vf(r2.to_dense()) == std::vector<float>{0, 0, 0, 0, 6, 8, 10, 12, 0, 0, 0, 0});
    CHECK_THROWS_WITH_AS(take_backward(idx, F({n, d + 1}, std::vector<float>(n * (d + 1))), {v, d}),
                         doctest::Contains("expected [23, 5]"), Error);
    CHECK_THROWS_AS(take_backward(I({1}, {9}), F({1, d}, std::vector<float>(d)), {v, d}), Error);
    Tensor wrong = Tensor::zeros(DType::F32, {v + 1, d});
    CHECK_THROWS_AS(add_rows_inplace(wrong, c), Error);
  }
}

} // namespace tests_kernels_layout_test
