// Every tensor op of src/ops/ops.def (and the infix operators) forward through the whole
// generic path: a tiny pejit program is parsed, checked and run by the Interpreter, and its
// results are compared with hand-computed numbers. The gradients are in ops_grad_test.cpp.
#include "tests/interp/ops_test_util.h"
#include "src/util/check.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

namespace tests_interp_ops_test {

using namespace pejit;
using namespace pejit::interp::test;
using interp::Value;
using interp::Values;

namespace {

/// Runs entry `f` of `src` on `args`.
Value run(const std::string& src, const Values& args) {
  Prog p(src);
  return p.run("f", args);
}

void check_i32(const Tensor& got, const Shape& s, const std::vector<int32_t>& want) {
  INFO("got " << got.str());
  REQUIRE(got.defined());
  REQUIRE(got.dtype() == DType::I32);
  REQUIRE(got.shape() == s);
  REQUIRE(static_cast<size_t>(got.numel()) == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(got.i32()[i] == want[i]);
  }
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

} // namespace

TEST_SUITE("interp") {

  // ---- forward -------------------------------------------------------------------------------

  TEST_CASE("matmul forward in every 1-D / 2-D combination") {
    Tensor A = F({2, 3}, {1, 2, 3, 4, 5, 6});
    Tensor B = F({3, 2}, {1, 0, 0, 1, 1, -1});
    Tensor a = F({3}, {1, 2, 3});
    Tensor b = F({3}, {1, 2, -1});
    Value r = run(R"(
entry f(A: f32[2, 3], B: f32[3, 2], a: f32[3], b: f32[3])
    -> (f32[2, 2], f32[2], f32[2], f32[], f32[2, 2]) {
  (A @ B, a @ B, A @ b, a @ b, matmul(A, B))
}
)",
                  {V(A), V(B), V(a), V(b)});
    check_f32(r.items()[0].as_tensor(), {2, 2}, {4, -1, 10, -1});
    check_f32(r.items()[1].as_tensor(), {2}, {4, -1});
    check_f32(r.items()[2].as_tensor(), {2}, {2, 8});
    check_f32(r.items()[3].as_tensor(), {}, {2});
    check_f32(r.items()[4].as_tensor(), {2, 2}, {4, -1, 10, -1});

    // One-row and one-column matrices.
    Value r1 = run("entry f(a: f32[1, 3], b: f32[3, 1]) -> (f32[1, 1], f32[3, 3]) "
                   "{ (a @ b, b @ a) }",
                   {V(F({1, 3}, {1, 2, 3})), V(F({3, 1}, {1, 2, -1}))});
    check_f32(r1.items()[0].as_tensor(), {1, 1}, {2});
    check_f32(r1.items()[1].as_tensor(), {3, 3}, {1, 2, 3, 2, 4, 6, -1, -2, -3});
  }

  TEST_CASE("matmul forward on sizes that are not multiples of 16") {
    Tensor A = weights({3, 17}, 1), B = weights({17, 33}, 2), x = weights({17}, 3);
    Value r = run("entry f(A: f32[3, 17], B: f32[17, 33], x: f32[17]) -> (f32[3, 33], f32[33]) "
                  "{ (A @ B, x @ B) }",
                  {V(A), V(B), V(x)});
    std::vector<float> want(3 * 33), want_x(33);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 33; ++j) {
        double s = 0;
        for (int k = 0; k < 17; ++k)
          s += double(A.f32()[i * 17 + k]) * B.f32()[k * 33 + j];
        want[static_cast<size_t>(i * 33 + j)] = static_cast<float>(s);
      }
    for (int j = 0; j < 33; ++j) {
      double s = 0;
      for (int k = 0; k < 17; ++k)
        s += double(x.f32()[k]) * B.f32()[k * 33 + j];
      want_x[static_cast<size_t>(j)] = static_cast<float>(s);
    }
    check_f32(r.items()[0].as_tensor(), {3, 33}, want, 1e-5);
    check_f32(r.items()[1].as_tensor(), {33}, want_x, 1e-5);
  }

  TEST_CASE("arithmetic with broadcasting: same shape, row, column, scalar, outer") {
    Tensor a = F({2, 3}, {1, 2, 3, 4, 5, 6});
    Tensor row = F({3}, {10, 20, 30});
    Tensor col = F({2, 1}, {100, 200});
    Tensor s = Tensor::scalar_f32(2);
    Value r = run(R"(
entry f(a: f32[2, 3], row: f32[3], col: f32[2, 1], s: f32[])
    -> (f32[2, 3], f32[2, 3], f32[2, 3], f32[2, 3], f32[2, 3], f32[2, 3], f32[2, 3], f32[2, 3]) {
  (a + row, a - col, a * s, a / s, s / a, row - a, col * a, a / a)
}
)",
                  {V(a), V(row), V(col), V(s)});
    check_f32(r.items()[0].as_tensor(), {2, 3}, {11, 22, 33, 14, 25, 36});
    check_f32(r.items()[1].as_tensor(), {2, 3}, {-99, -98, -97, -196, -195, -194});
    check_f32(r.items()[2].as_tensor(), {2, 3}, {2, 4, 6, 8, 10, 12});
    check_f32(r.items()[3].as_tensor(), {2, 3}, {0.5f, 1, 1.5f, 2, 2.5f, 3});
    check_f32(r.items()[4].as_tensor(), {2, 3}, {2, 1, 2.0f / 3, 0.5f, 0.4f, 2.0f / 6});
    check_f32(r.items()[5].as_tensor(), {2, 3}, {9, 18, 27, 6, 15, 24});
    check_f32(r.items()[6].as_tensor(), {2, 3}, {100, 200, 300, 800, 1000, 1200});
    check_f32(r.items()[7].as_tensor(), {2, 3}, {1, 1, 1, 1, 1, 1});

    // The named ops equal the infix operators; [3, 1] with [1, 2] broadcasts to [3, 2];
    // float literals are f32[] scalars.
    Value r2 = run(R"(
entry f(a: f32[3, 1], b: f32[1, 2]) -> (f32[3, 2], f32[3, 2], f32[3, 2], f32[3, 2], f32[3, 1]) {
  (add(a, b), sub(a, b), mul(a, b), div(a, b), a * 2.0 + 0.5)
}
)",
                   {V(F({3, 1}, {1, 2, 3})), V(F({1, 2}, {10, 20}))});
    check_f32(r2.items()[0].as_tensor(), {3, 2}, {11, 21, 12, 22, 13, 23});
    check_f32(r2.items()[1].as_tensor(), {3, 2}, {-9, -19, -8, -18, -7, -17});
    check_f32(r2.items()[2].as_tensor(), {3, 2}, {10, 20, 20, 40, 30, 60});
    check_f32(r2.items()[3].as_tensor(), {3, 2}, {0.1f, 0.05f, 0.2f, 0.1f, 0.3f, 0.15f});
    check_f32(r2.items()[4].as_tensor(), {3, 1}, {2.5f, 4.5f, 6.5f});
  }

  TEST_CASE("i32 arithmetic truncates toward zero") {
    Value r = run(R"(
entry f(a: i32[3], b: i32[3], s: i32[]) -> (i32[3], i32[3], i32[3], i32[3], i32[3]) {
  (a + b, a - s, a * b, a / b, -a)
}
)",
                  {V(I({3}, {7, -7, 9})), V(I({3}, {2, 2, -4})), V(Tensor::scalar_i32(3))});
    check_i32(r.items()[0].as_tensor(), {3}, {9, -5, 5});
    check_i32(r.items()[1].as_tensor(), {3}, {4, -10, 6});
    check_i32(r.items()[2].as_tensor(), {3}, {14, -14, -36});
    check_i32(r.items()[3].as_tensor(), {3}, {3, -3, -2});
    check_i32(r.items()[4].as_tensor(), {3}, {-7, 7, -9});
  }

  TEST_CASE("elementwise unary ops") {
    Value r = run(R"(
entry f(x: f32[3], p: f32[3], t: f32[3], s: f32[3], q: f32[3])
    -> (f32[3], f32[3], f32[3], f32[3], f32[3], f32[3], f32[3]) {
  (-x, neg(x), exp(x), log(p), tanh(t), sigmoid(s), relu(q))
}
)",
                  {V(F({3}, {0, 1, -1})), V(F({3}, {1, std::exp(1.0f), 0.5f})),
                   V(F({3}, {0, 0.5f, -2})), V(F({3}, {0, 2, -3})), V(F({3}, {-1, 0, 2.5f}))});
    check_f32(r.items()[0].as_tensor(), {3}, {0, -1, 1});
    check_f32(r.items()[1].as_tensor(), {3}, {0, -1, 1});
    check_f32(r.items()[2].as_tensor(), {3}, {1, 2.718281828f, 0.367879441f});
    check_f32(r.items()[3].as_tensor(), {3}, {0, 1, -0.693147181f});
    check_f32(r.items()[4].as_tensor(), {3}, {0, 0.462117157f, -0.964027580f});
    check_f32(r.items()[5].as_tensor(), {3}, {0.5f, 0.880797078f, 0.047425873f});
    check_f32(r.items()[6].as_tensor(), {3}, {0, 0, 2.5f});

    // Rank 0 and 17 elements (a vector tail past the SIMD width).
    Tensor x17 = weights({17}, 5);
    Value r2 = run("entry f(x: f32[], y: f32[17]) -> (f32[], f32[17]) { (tanh(x), sigmoid(y)) }",
                   {V(Tensor::scalar_f32(0.25f)), V(x17)});
    check_f32(r2.items()[0].as_tensor(), {}, {std::tanh(0.25f)});
    std::vector<float> want;
    for (int i = 0; i < 17; ++i)
      want.push_back(sigmoid(x17.f32()[i]));
    check_f32(r2.items()[1].as_tensor(), {17}, want);
  }

  TEST_CASE("comparisons on f32 and i32, named and infix, give 0/1 of the operands' dtype") {
    Value r = run(R"(
entry f(a: f32[3], b: f32[3]) -> (f32[3], f32[3], f32[3], f32[3], f32[3], f32[3],
                                   f32[3], f32[3], f32[3], f32[3], f32[3], f32[3], f32[3]) {
  (lt(a, b), le(a, b), gt(a, b), ge(a, b), eq(a, b), ne(a, b),
   a < b, a <= b, a > b, a >= b, a == b, a != b, a > 1.5)
}
)",
                  {V(F({3}, {1, 2, 3})), V(F({3}, {2, 2, 2}))});
    const std::vector<std::vector<float>> want = {{1, 0, 0}, {1, 1, 0}, {0, 0, 1},
                                                  {0, 1, 1}, {0, 1, 0}, {1, 0, 1}};
    for (size_t i = 0; i < 12; ++i) {
      INFO("result " << i);
      check_f32(r.items()[i].as_tensor(), {3}, want[i % 6]);
    }
    check_f32(r.items()[12].as_tensor(), {3}, {0, 1, 1});

    Value ri = run(R"(
entry f(a: i32[3], b: i32[3]) -> (i32[3], i32[3], i32[3], i32[3], i32[3], i32[3], i32[3]) {
  (lt(a, b), le(a, b), gt(a, b), ge(a, b), eq(a, b), ne(a, b), a < b)
}
)",
                   {V(I({3}, {1, 2, 3})), V(I({3}, {2, 2, 2}))});
    for (size_t i = 0; i < 7; ++i) {
      INFO("result " << i);
      check_i32(ri.items()[i].as_tensor(), {3},
                std::vector<int32_t>(want[i % 6].begin(), want[i % 6].end()));
    }
  }

  TEST_CASE("to_f32 and to_i32 (truncation toward zero)") {
    Value r = run(R"(
entry f(i: i32[2], x: f32[4]) -> (f32[2], i32[4], f32[4], i32[2]) {
  (to_f32(i), to_i32(x), to_f32(x), to_i32(i))
}
)",
                  {V(I({2}, {3, -2})), V(F({4}, {2.9f, -1.7f, 0, 5}))});
    check_f32(r.items()[0].as_tensor(), {2}, {3, -2});
    check_i32(r.items()[1].as_tensor(), {4}, {2, -1, 0, 5});
    check_f32(r.items()[2].as_tensor(), {4}, {2.9f, -1.7f, 0, 5});
    check_i32(r.items()[3].as_tensor(), {2}, {3, -2});
  }

  TEST_CASE("sum and mean: all, per axis, negative axis, rank 3, i32") {
    Value r = run(R"(
entry f(a: f32[2, 3], c: f32[2, 2, 2], i: i32[3])
    -> (f32[], f32[3], f32[2], f32[2], f32[3], f32[], f32[3], f32[2], f32[2, 2], f32[2, 2], i32[]) {
  (sum(a), sum(a, 0), sum(a, 1), sum(a, -1), sum(a, -2),
   mean(a), mean(a, 0), mean(a, -1), sum(c, 1), mean(c, -1), sum(i))
}
)",
                  {V(F({2, 3}, {1, 2, 3, 4, 5, 6})), V(F({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})),
                   V(I({3}, {1, 2, 3}))});
    check_f32(r.items()[0].as_tensor(), {}, {21});
    check_f32(r.items()[1].as_tensor(), {3}, {5, 7, 9});
    check_f32(r.items()[2].as_tensor(), {2}, {6, 15});
    check_f32(r.items()[3].as_tensor(), {2}, {6, 15});
    check_f32(r.items()[4].as_tensor(), {3}, {5, 7, 9});
    check_f32(r.items()[5].as_tensor(), {}, {3.5f});
    check_f32(r.items()[6].as_tensor(), {3}, {2.5f, 3.5f, 4.5f});
    check_f32(r.items()[7].as_tensor(), {2}, {2, 5});
    check_f32(r.items()[8].as_tensor(), {2, 2}, {2, 4, 10, 12});
    check_f32(r.items()[9].as_tensor(), {2, 2}, {0.5f, 2.5f, 4.5f, 6.5f});
    check_i32(r.items()[10].as_tensor(), {}, {6});
  }

  TEST_CASE("concat, split, slice, reshape, transpose") {
    Value r = run(R"(
entry f(a: f32[2], b: f32[1], c: f32[2, 1], d: f32[2, 2], e: f32[2, 1], x: f32[6], y: f32[2, 4])
    -> (f32[3], f32[2, 4], (f32[2], f32[2], f32[2]), (f32[2, 2], f32[2, 2]), f32[2, 2],
        f32[4, 2], f32[4, 2], f32[2]) {
  (concat(a, b), concat(c, d, e), split3(x), split(y, 2), slice(y, 1, 3),
   reshape(y, 4, 2), transpose(reshape(y, 2, 4)), slice(x, 4, 6))
}
)",
                  {V(F({2}, {1, 2})), V(F({1}, {3})), V(F({2, 1}, {1, 2})),
                   V(F({2, 2}, {3, 4, 5, 6})), V(F({2, 1}, {7, 8})), V(F({6}, {0, 1, 2, 3, 4, 5})),
                   V(F({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}))});
    check_f32(r.items()[0].as_tensor(), {3}, {1, 2, 3});
    check_f32(r.items()[1].as_tensor(), {2, 4}, {1, 3, 4, 7, 2, 5, 6, 8});
    const Value& s3 = r.items()[2];
    REQUIRE(s3.items().size() == 3);
    check_f32(s3.items()[0].as_tensor(), {2}, {0, 1});
    check_f32(s3.items()[1].as_tensor(), {2}, {2, 3});
    check_f32(s3.items()[2].as_tensor(), {2}, {4, 5});
    const Value& s2 = r.items()[3];
    REQUIRE(s2.items().size() == 2);
    check_f32(s2.items()[0].as_tensor(), {2, 2}, {0, 1, 4, 5});
    check_f32(s2.items()[1].as_tensor(), {2, 2}, {2, 3, 6, 7});
    check_f32(r.items()[4].as_tensor(), {2, 2}, {1, 2, 5, 6});
    check_f32(r.items()[5].as_tensor(), {4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
    check_f32(r.items()[6].as_tensor(), {4, 2}, {0, 4, 1, 5, 2, 6, 3, 7});
    check_f32(r.items()[7].as_tensor(), {2}, {4, 5});

    // Reshape to and from rank 0; split into one part; transpose of a 1-row matrix.
    Value r2 = run(R"(
entry f(o: f32[1], s: f32[], m: f32[1, 3]) -> (f32[], f32[1, 1], (f32[1],), f32[3, 1]) {
  (reshape(o), reshape(s, 1, 1), split1(o), transpose(m))
}
)",
                   {V(F({1}, {4.5f})), V(Tensor::scalar_f32(-2)), V(F({1, 3}, {1, 2, 3}))});
    check_f32(r2.items()[0].as_tensor(), {}, {4.5f});
    check_f32(r2.items()[1].as_tensor(), {1, 1}, {-2});
    check_f32(r2.items()[2].items()[0].as_tensor(), {1}, {4.5f});
    check_f32(r2.items()[3].as_tensor(), {3, 1}, {1, 2, 3});
  }

  TEST_CASE("take with i32[], i32[n] and i32[n, m] indices") {
    Tensor E = F({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
    Value r =
        run(R"(
entry f(E: f32[4, 2], i: i32[], j: i32[3], k: i32[2, 2]) -> (f32[2], f32[3, 2], f32[2, 2, 2]) {
  (take(E, i), take(E, j), take(E, k))
}
)",
            {V(E), V(Tensor::scalar_i32(2)), V(I({3}, {3, 0, 3})), V(I({2, 2}, {1, 1, 0, 2}))});
    check_f32(r.items()[0].as_tensor(), {2}, {20, 21});
    check_f32(r.items()[1].as_tensor(), {3, 2}, {30, 31, 0, 1, 30, 31});
    check_f32(r.items()[2].as_tensor(), {2, 2, 2}, {10, 11, 10, 11, 0, 1, 20, 21});

    // An index out of range (either side) is a pejit::Error, not a crash.
    for (int bad : {4, -1}) {
      INFO("index " << bad);
      CHECK_THROWS_AS(run("entry f(E: f32[4, 2], i: i32[]) -> f32[2] { take(E, i) }",
                          {V(E), V(Tensor::scalar_i32(bad))}),
                      Error);
    }
  }

  TEST_CASE("softmax, log_softmax, cross_entropy on [C] and [n, C]") {
    Tensor x = F({3}, {1, 2, 3});
    Tensor X = F({2, 3}, {1, 2, 3, 0, 0, 0});
    Value r =
        run(R"(
entry f(x: f32[3], X: f32[2, 3], big: f32[2], y: i32[], Y: i32[2])
    -> (f32[3], f32[2, 3], f32[3], f32[2, 3], f32[], f32[2], f32[2]) {
  (softmax(x), softmax(X), log_softmax(x), log_softmax(X), cross_entropy(x, y),
   cross_entropy(X, Y), softmax(big))
}
)",
            {V(x), V(X), V(F({2}, {1000, 1000})), V(Tensor::scalar_i32(0)), V(I({2}, {2, 1}))});
    const float p0 = 0.0900305732f, p1 = 0.2447284711f, p2 = 0.6652409558f;
    const float l0 = -2.4076059644f, l1 = -1.4076059644f, l2 = -0.4076059644f;
    const float third = 1.0f / 3, lthird = -1.0986122887f;
    check_f32(r.items()[0].as_tensor(), {3}, {p0, p1, p2});
    check_f32(r.items()[1].as_tensor(), {2, 3}, {p0, p1, p2, third, third, third});
    check_f32(r.items()[2].as_tensor(), {3}, {l0, l1, l2});
    check_f32(r.items()[3].as_tensor(), {2, 3}, {l0, l1, l2, lthird, lthird, lthird});
    check_f32(r.items()[4].as_tensor(), {}, {-l0});
    check_f32(r.items()[5].as_tensor(), {2}, {-l2, -lthird});
    check_f32(r.items()[6].as_tensor(), {2}, {0.5f, 0.5f}); // max-subtracted: no overflow

    // A label outside [0, C) is a pejit::Error.
    CHECK_THROWS_AS(run("entry f(x: f32[3], y: i32[]) -> f32[] { cross_entropy(x, y) }",
                        {V(x), V(Tensor::scalar_i32(3))}),
                    Error);
  }

  TEST_CASE("argmax takes the first of tied maxima") {
    Value r = run(
        R"(
entry f(x: f32[4], X: f32[3, 3], one: f32[1]) -> (i32[], i32[3], i32[]) {
  (argmax(x), argmax(X), argmax(one))
}
)",
        {V(F({4}, {1, 3, 3, 2})), V(F({3, 3}, {5, 5, 1, 0, 2, 2, -1, -3, -2})), V(F({1}, {-7}))});
    check_i32(r.items()[0].as_tensor(), {}, {1});
    check_i32(r.items()[1].as_tensor(), {3}, {0, 1, 0});
    check_i32(r.items()[2].as_tensor(), {}, {0});
  }

  TEST_CASE("zeros, ones, full") {
    Value r = run(R"(
entry f(v: i32[]) -> (f32[2, 3], f32[2], f32[3], i32[2, 2], f32[], f32[17]) {
  (zeros(2, 3), ones(2), full(2.5, 3), full(v, 2, 2), zeros(), full(-1.0, 17))
}
)",
                  {V(Tensor::scalar_i32(7))});
    check_f32(r.items()[0].as_tensor(), {2, 3}, {0, 0, 0, 0, 0, 0});
    check_f32(r.items()[1].as_tensor(), {2}, {1, 1});
    check_f32(r.items()[2].as_tensor(), {3}, {2.5f, 2.5f, 2.5f});
    check_i32(r.items()[3].as_tensor(), {2, 2}, {7, 7, 7, 7});
    check_f32(r.items()[4].as_tensor(), {}, {0});
    check_f32(r.items()[5].as_tensor(), {17}, std::vector<float>(17, -1.0f));
  }

  TEST_CASE("a composite: a tiny MLP layer by hand") {
    Value r = run(R"(
entry f(x: f32[2], W: f32[2, 3], b: f32[3]) -> f32[3] { tanh(x @ W + b) }
)",
                  {V(F({2}, {1, -1})), V(F({2, 3}, {0.5f, 1, 2, 0.25f, -1, 1})),
                   V(F({3}, {0, 0.1f, -0.5f}))});
    check_f32(r.as_tensor(), {3}, {std::tanh(0.25f), std::tanh(2.1f), std::tanh(0.5f)});
  }

} // TEST_SUITE

} // namespace tests_interp_ops_test
