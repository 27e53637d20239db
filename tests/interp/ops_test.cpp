// Every tensor op of src/ops/ops.def (and the infix operators) through the whole generic path:
// a tiny pejit program is parsed, checked and run by the Interpreter. Forward results are
// compared with hand-computed numbers; gradients with check_grad (random directional
// derivatives) on `sum(OP(params) * C)` losses with a fixed non-uniform constant C, including
// edge shapes (rank 0, one element, sizes 17 and 33, one-row matrices), no-gradient ops and the
// row-sparse gradient of take.
#include "interp/interpreter.h"
#include "types/check.h"
#include "util/check.h"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

using namespace pejit;
using interp::Value;
using interp::Values;

namespace {

Tensor F(const Shape& s, std::vector<float> v) {
  return Tensor::from_f32(s, v);
}
Tensor I(const Shape& s, std::vector<int32_t> v) {
  return Tensor::from_i32(s, v);
}
Value V(Tensor t) {
  return Value::tensor(std::move(t));
}

/// A fixed, non-uniform constant of shape `s` (values in about [-0.6, 1.2], neighbors differ).
Tensor weights(const Shape& s, int salt = 0) {
  Tensor t = Tensor::zeros(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = 0.3f + 0.9f * std::sin(1.7f * static_cast<float>(i) + 0.4f + 0.9f * salt);
  return t;
}

/// A checked module, its interpreter and its parameters (normal-initialized from seed 1).
struct Prog {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  std::unique_ptr<interp::Interpreter> in;
  interp::Params params;

  explicit Prog(const std::string& src) {
    Diagnostics d;
    auto r = types::add_source(*m, src, "test.pe", d);
    INFO(src);
    INFO(d.render());
    REQUIRE(r.ok);
    auto dims = interp::bind_dims(*m, {});
    in = std::make_unique<interp::Interpreter>(m, dims);
    params = interp::init_params(*m, dims, 1);
  }
  Value run(const std::string& entry, const Values& args) { return in->run(entry, args, params); }
  Tensor& param(const std::string& name) {
    int i = params.index(name);
    REQUIRE(i >= 0);
    return params.values[static_cast<size_t>(i)];
  }
  /// Arguments for `entry`: f32 tensor parameters get weights(), the others come from `given`
  /// in order.
  Values args_for(const std::string& entry, const Values& given) {
    const ir::FnDecl* f = m->fn(entry);
    REQUIRE(f);
    Values out;
    size_t next = 0;
    int salt = 0;
    for (const auto& p : f->params) {
      if (p.type->kind == ir::TypeKind::Tensor && p.type->elem == ir::Elem::F32) {
        out.push_back(V(weights(interp::concrete_shape(p.type, in->dims()), salt++)));
      } else {
        REQUIRE(next < given.size());
        out.push_back(given[next++]);
      }
    }
    REQUIRE(next == given.size());
    return out;
  }
};

/// Runs entry `f` of `src` on `args`.
Value run(const std::string& src, const Values& args) {
  Prog p(src);
  return p.run("f", args);
}

void check_f32(const Tensor& got, const Shape& s, const std::vector<float>& want,
               double tol = 1e-5) {
  INFO("got " << got.str());
  REQUIRE(got.defined());
  REQUIRE(got.dtype() == DType::F32);
  REQUIRE(got.shape() == s);
  REQUIRE(static_cast<size_t>(got.numel()) == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(got.f32()[i] - want[i]) <= tol * std::max(1.0, std::fabs(double(want[i]))));
  }
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

void check_close(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  INFO(a.str() << " vs " << b.str());
  REQUIRE(a.shape() == b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(a.f32()[i] - b.f32()[i]) <= tol * std::max(1.0f, std::fabs(b.f32()[i])));
  }
}

/// Moves every element of a parameter at least `gap` away from 0 (keeps relu off its kink),
/// even indices positive and odd ones negative (so relu passes something through).
void away_from_zero(Tensor& t, float gap = 0.2f) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    float& x = t.f32()[i];
    x = (std::fabs(x) + gap) * (i % 2 == 0 ? 1.0f : -1.0f);
  }
}

/// check_grad of entry `L` of `p` (f32 arguments are weights(), others from `given`); also
/// requires every parameter to get a non-empty gradient and the check not to be vacuous.
void grad_ok(Prog& p, const Values& given = {}) {
  Values args = p.args_for("L", given);
  auto g = p.in->value_and_grad("L", args, p.params);
  for (size_t i = 0; i < g.grads.size(); ++i) {
    INFO("parameter " << p.params.names[i]);
    CHECK_FALSE(g.grads[i].empty());
  }
  auto rep = interp::check_grad(*p.in, "L", args, p.params);
  INFO(rep.message);
  CHECK(rep.ok);
  double biggest = 0;
  for (double x : rep.numeric)
    biggest = std::max(biggest, std::fabs(x));
  CHECK(biggest > 1e-2); // a derivative that is all but zero would check nothing
}

void grad_ok(const std::string& src, const Values& given = {}) {
  INFO(src);
  Prog p(src);
  grad_ok(p, given);
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

  // ---- gradients -----------------------------------------------------------------------------

  TEST_CASE("gradient of matmul in every 1-D / 2-D combination") {
    grad_ok(R"(
param A : f32[2, 3] = normal(0.0, 1.0)
param B : f32[3, 4] = normal(0.0, 1.0)
entry L(c: f32[2, 4]) -> f32[] { sum((A @ B) * c) }
)");
    grad_ok(R"(
param x : f32[3] = normal(0.0, 1.0)
param W : f32[3, 4] = normal(0.0, 1.0)
entry L(c: f32[4]) -> f32[] { sum((x @ W) * c) }
)");
    grad_ok(R"(
param A : f32[2, 3] = normal(0.0, 1.0)
param x : f32[3] = normal(0.0, 1.0)
entry L(c: f32[2]) -> f32[] { sum((A @ x) * c) }
)");
    grad_ok(R"(
param x : f32[3] = normal(0.0, 1.0)
param y : f32[3] = normal(0.0, 1.0)
entry L(c: f32[]) -> f32[] { (x @ y) * c }
)");
    // One-row matrices and sizes that are not multiples of 16.
    grad_ok(R"(
param A : f32[1, 17] = normal(0.0, 0.3)
param B : f32[17, 33] = normal(0.0, 0.3)
entry L(c: f32[1, 33]) -> f32[] { sum((A @ B) * c) }
)");
    // A 1-D input times a matrix that is not a parameter (no deferred weight gradient).
    grad_ok(R"(
param x : f32[17] = normal(0.0, 0.3)
param W : f32[17, 5] = normal(0.0, 0.3)
entry L(c: f32[5]) -> f32[] { sum((x @ (W * 2.0)) * c) }
)");
  }

  TEST_CASE("matmul gradients by hand, with a weight used by several 1-D products") {
    // L = sum((x @ W) * c) + sum((y @ W) * d) + sum(W * e): dW = x c^T + y d^T + e (the
    // deferred weight gradients merged into one GEMM plus a dense part), dx = W c, dy = W d.
    Prog p(R"(
param x : f32[3] = normal(0.0, 1.0)
param y : f32[3] = normal(0.0, 1.0)
param W : f32[3, 2] = normal(0.0, 1.0)
entry L(c: f32[2], d: f32[2], e: f32[3, 2]) -> f32[] {
  sum((x @ W) * c) + sum((y @ W) * d) + sum(W * e)
}
)");
    Values args = p.args_for("L", {});
    const Tensor &c = args[0].as_tensor(), &d = args[1].as_tensor(), &e = args[2].as_tensor();
    const Tensor &x = p.param("x"), &y = p.param("y"), &W = p.param("W");
    auto g = p.in->value_and_grad("L", args, p.params);
    REQUIRE(g.grads.size() == 3);
    std::vector<float> dx(3), dy(3), dW(6);
    double loss = 0;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) {
        float w = W.f32()[i * 2 + j];
        dx[i] += w * c.f32()[j];
        dy[i] += w * d.f32()[j];
        dW[i * 2 + j] = x.f32()[i] * c.f32()[j] + y.f32()[i] * d.f32()[j] + e.f32()[i * 2 + j];
        loss += x.f32()[i] * w * c.f32()[j] + y.f32()[i] * w * d.f32()[j] + w * e.f32()[i * 2 + j];
      }
    CHECK(g.loss == doctest::Approx(loss).epsilon(1e-5));
    check_f32(g.grads[0].to_dense({3}), {3}, dx);
    check_f32(g.grads[1].to_dense({3}), {3}, dy);
    check_f32(g.grads[2].to_dense({3, 2}), {3, 2}, dW);
    grad_ok(p);
  }

  TEST_CASE("gradients of + - * / with broadcasting") {
    // (lhs type, rhs type, loss-constant type)
    const std::vector<std::array<const char*, 3>> shapes = {
        {"f32[17]", "f32[17]", "f32[17]"},       {"f32[2, 3]", "f32[3]", "f32[2, 3]"},
        {"f32[2, 3]", "f32[2, 1]", "f32[2, 3]"}, {"f32[2, 3]", "f32[]", "f32[2, 3]"},
        {"f32[]", "f32[2, 3]", "f32[2, 3]"},     {"f32[3, 1]", "f32[1, 4]", "f32[3, 4]"},
        {"f32[1]", "f32[]", "f32[1]"},           {"f32[]", "f32[]", "f32[]"},
        {"f32[1, 33]", "f32[33]", "f32[1, 33]"},
    };
    for (const char* op : {"+", "-", "*", "/"}) {
      for (const auto& s : shapes) {
        // The divisor is exp(b): far from 0.
        std::string rhs = std::string(op) == "/" ? "exp(b)" : "b";
        std::string src = std::string("param a : ") + s[0] + " = normal(0.0, 1.0)\n" +
                          "param b : " + s[1] + " = normal(0.0, 1.0)\n" + "entry L(c: " + s[2] +
                          ") -> f32[] { sum((a " + op + " " + rhs + ") * c) }\n";
        grad_ok(src);
      }
    }
    // The named forms share the rules.
    grad_ok(R"(
param a : f32[2, 3] = normal(0.0, 1.0)
param b : f32[3] = normal(0.0, 1.0)
entry L(c: f32[2, 3]) -> f32[] { sum((add(a, b) * sub(a, b) + mul(a, b) - div(a, exp(b))) * c) }
)");
    // A parameter on both sides (gradients accumulate).
    grad_ok(R"(
param a : f32[5] = normal(0.0, 1.0)
entry L(c: f32[5]) -> f32[] { sum((a * a + a / exp(a) - a) * c) }
)");
  }

  TEST_CASE("gradients of the elementwise unary ops, on edge shapes") {
    const std::vector<std::pair<std::string, std::string>> ops = {
        {"neg", "neg(p)"},           {"unary -", "-p"},   {"exp", "exp(p)"},
        {"log", "log(p * p + 0.5)"}, {"tanh", "tanh(p)"}, {"sigmoid", "sigmoid(p)"},
        {"relu", "relu(p)"},
    };
    for (const char* type : {"f32[]", "f32[1]", "f32[17]", "f32[2, 33]", "f32[1, 3]"}) {
      for (const auto& [name, expr] : ops) {
        INFO(name << " on " << std::string(type));
        Prog p(std::string("param p : ") + type + " = normal(0.0, 1.0)\n" + "entry L(c: " + type +
               ") -> f32[] { sum(" + expr + " * c) }\n");
        away_from_zero(p.param("p")); // relu's kink
        grad_ok(p);
      }
    }
  }

  TEST_CASE("gradients of sum and mean: all, per axis, negative axis, rank 3") {
    for (const char* e : {"sum(p) * k", "sum(sum(p, 0) * c0)", "sum(sum(p, 1) * c1)",
                          "sum(sum(p, -1) * c1)", "sum(sum(p, -2) * c0)", "mean(p) * k * 20.0",
                          "sum(mean(p, 0) * c0)", "sum(mean(p, -1) * c1)"}) {
      grad_ok(std::string("param p : f32[3, 17] = normal(0.0, 1.0)\n") +
              "entry L(k: f32[], c0: f32[17], c1: f32[3]) -> f32[] { " + e + " }\n");
    }
    grad_ok(R"(
param p : f32[2, 3, 4] = normal(0.0, 1.0)
entry L(c: f32[2, 4], d: f32[2, 3]) -> f32[] { sum(sum(p, 1) * c) + sum(mean(p, -1) * d) }
)");
    // Rank 0 and one element.
    grad_ok(R"(
param s : f32[] = normal(0.0, 1.0)
param o : f32[1] = normal(0.0, 1.0)
entry L(k: f32[]) -> f32[] { sum(s) * k + mean(o) * 3.0 + sum(o, 0) * k }
)");
  }

  TEST_CASE("gradients of concat, split, slice, reshape, transpose") {
    grad_ok(R"(
param a : f32[3] = normal(0.0, 1.0)
param b : f32[17] = normal(0.0, 1.0)
entry L(c: f32[20]) -> f32[] { sum(concat(a, b) * c) }
)");
    grad_ok(R"(
param a : f32[2, 1] = normal(0.0, 1.0)
param b : f32[2, 3] = normal(0.0, 1.0)
param d : f32[2, 2] = normal(0.0, 1.0)
entry L(c: f32[2, 6]) -> f32[] { sum(concat(a, b, d) * c) }
)");
    // Only two of the three parts reach the loss: the third's gradient is zeros.
    grad_ok(R"(
param x : f32[2, 6] = normal(0.0, 1.0)
entry L(c: f32[2, 2], d: f32[2, 2]) -> f32[] {
  let (p, q, r) = split3(x);
  sum(p * c) + sum(tanh(r) * d)
}
)");
    grad_ok(R"(
param x : f32[34] = normal(0.0, 1.0)
entry L(c: f32[17]) -> f32[] {
  let (p, q) = split(x, 2);
  sum((p * q) * c)
}
)");
    grad_ok(R"(
param x : f32[3, 17] = normal(0.0, 1.0)
entry L(c: f32[3, 7], d: f32[1]) -> f32[] { sum(slice(x, 2, 9) * c) + sum(slice(x, 16, 17) * d) }
)");
    grad_ok(R"(
param x : f32[6] = normal(0.0, 1.0)
entry L(c: f32[2]) -> f32[] { sum(slice(x, 4, 6) * c) + sum(slice(x, 0, 1)) }
)");
    grad_ok(R"(
param x : f32[2, 6] = normal(0.0, 1.0)
param o : f32[1] = normal(0.0, 1.0)
entry L(c: f32[3, 4], k: f32[]) -> f32[] { sum(reshape(x, 3, 4) * c) + reshape(o) * k }
)");
    grad_ok(R"(
param x : f32[3, 17] = normal(0.0, 1.0)
param r : f32[1, 5] = normal(0.0, 1.0)
entry L(c: f32[17, 3], d: f32[5, 1]) -> f32[] { sum(transpose(x) * c) + sum(transpose(r) * d) }
)");
  }

  TEST_CASE("gradients of softmax, log_softmax, cross_entropy") {
    for (const char* type : {"f32[5]", "f32[3, 7]", "f32[1, 33]"}) {
      INFO(std::string(type));
      grad_ok(std::string("param x : ") + type + " = normal(0.0, 1.0)\n" + "entry L(c: " + type +
              ") -> f32[] { sum(softmax(x) * c) * 5.0 + sum(log_softmax(x) * c) }\n");
    }
    grad_ok(R"(
param x : f32[5] = normal(0.0, 1.0)
entry L(y: i32[]) -> f32[] { cross_entropy(x, y) }
)",
            {V(Tensor::scalar_i32(3))});
    grad_ok(R"(
param X : f32[4, 17] = normal(0.0, 1.0)
entry L(c: f32[4], y: i32[4]) -> f32[] { sum(cross_entropy(X, y) * c) }
)",
            {V(I({4}, {0, 16, 3, 3}))});
  }

  TEST_CASE("gradient of full's value; zeros and ones are constants") {
    grad_ok(R"(
param s : f32[] = normal(0.0, 1.0)
param a : f32[2, 3] = normal(0.0, 1.0)
entry L(c: f32[2, 3]) -> f32[] { sum((full(s, 2, 3) * a + zeros(2, 3) + ones(3) * a) * c) }
)");
  }

  TEST_CASE("to_f32 of an f32 tensor passes its gradient through") {
    // to_f32 of an f32 tensor is the identity, so the gradient passes through.
    grad_ok(R"(
param W : f32[4] = normal(0.0, 1.0)
entry L(c: f32[4]) -> f32[] { sum(to_f32(W) * c) }
)");
  }

  TEST_CASE("a chain of ops: tanh(x @ W + b) with cross-entropy") {
    grad_ok(R"(
param W : f32[17, 5] = normal(0.0, 0.3)
param b : f32[5] = normal(0.0, 0.3)
param x : f32[17] = normal(0.0, 1.0)
entry L(y: i32[]) -> f32[] { cross_entropy(tanh(x @ W + b) * 2.0, y) }
)",
            {V(Tensor::scalar_i32(2))});
  }

  TEST_CASE("ops without a gradient give none to parameters reached only through them") {
    Prog p(R"(
param P : f32[4] = normal(0.0, 1.0)
param Q : f32[4] = normal(0.0, 1.0)
param R : f32[4] = normal(0.0, 1.0)
entry L(c: f32[4]) -> f32[] {
  sum(Q * c) + to_f32(argmax(P)) + sum((P < Q) * c) + sum(ne(R, 0.0) * c)
    + sum(to_f32(to_i32(R * 3.0)) * c) + sum((P >= 0.0) * (Q <= 0.0))
}
)");
    Values args = p.args_for("L", {});
    auto g = p.in->value_and_grad("L", args, p.params);
    REQUIRE(g.grads.size() == 3);
    CHECK(g.grads[0].empty()); // P: argmax, comparisons
    CHECK(g.grads[2].empty()); // R: comparison, to_i32
    // Q gets exactly c from its only differentiable use.
    REQUIRE_FALSE(g.grads[1].empty());
    check_f32(g.grads[1].to_dense({4}), {4},
              {args[0].as_tensor().f32()[0], args[0].as_tensor().f32()[1],
               args[0].as_tensor().f32()[2], args[0].as_tensor().f32()[3]});
    // The loss was evaluated through every term.
    CHECK(g.loss == doctest::Approx(p.run("L", args).as_tensor().item_f32()));

    // A loss that depends on no parameter: every gradient empty, the loss is its value.
    Prog q(R"(
param W : f32[3] = normal(0.0, 1.0)
entry L(c: f32[3]) -> f32[] { sum(ones(3) * c) + to_f32(argmax(W)) * 0.0 }
)");
    Values qa = q.args_for("L", {});
    auto gq = q.in->value_and_grad("L", qa, q.params);
    REQUIRE(gq.grads.size() == 1);
    CHECK(gq.grads[0].empty());
    float want = 0;
    for (int i = 0; i < 3; ++i)
      want += qa[0].as_tensor().f32()[i];
    CHECK(gq.loss == doctest::Approx(want));
  }

  TEST_CASE("take's gradient is row-sparse and equals the one-hot matmul's dense gradient") {
    // Indices with repeats (1 three times), of shapes [], [6] and [2, 3].
    const std::vector<int32_t> idx = {1, 3, 1, 1, 0, 4};
    Prog p(R"(
param E : f32[5, 4] = normal(0.0, 1.0)
entry L(c: f32[6, 4], i: i32[6]) -> f32[] { sum(take(E, i) * c) }
entry L_onehot(c: f32[6, 4], onehot: f32[6, 5]) -> f32[] { sum((onehot @ E) * c) }
entry L_scalar(c: f32[4], i: i32[]) -> f32[] { sum(take(E, i) * c) }
entry L_2d(c: f32[2, 3, 4], i: i32[2, 3]) -> f32[] { sum(take(E, i) * c) + sum(take(E, i) * c) }
)");
    Tensor c = weights({6, 4});
    auto g = p.in->value_and_grad("L", {V(c), V(I({6}, idx))}, p.params);
    REQUIRE(g.grads.size() == 1);
    CHECK_FALSE(g.grads[0].sparse.empty());
    CHECK_FALSE(g.grads[0].dense.defined());
    Tensor sparse_dense = g.grads[0].to_dense({5, 4});

    // By hand: row idx[k] gets c[k].
    std::vector<float> want(20, 0.0f);
    for (size_t k = 0; k < idx.size(); ++k)
      for (int j = 0; j < 4; ++j)
        want[static_cast<size_t>(idx[k] * 4 + j)] += c.f32()[k * 4 + j];
    check_f32(sparse_dense, {5, 4}, want);

    // Independently: the same loss through a one-hot matmul has a dense gradient.
    std::vector<float> oh(30, 0.0f);
    for (size_t k = 0; k < idx.size(); ++k)
      oh[k * 5 + static_cast<size_t>(idx[k])] = 1.0f;
    auto gd = p.in->value_and_grad("L_onehot", {V(c), V(F({6, 5}, oh))}, p.params);
    REQUIRE(gd.grads[0].dense.defined());
    CHECK(gd.loss == doctest::Approx(g.loss).epsilon(1e-5));
    check_close(sparse_dense, gd.grads[0].to_dense({5, 4}));

    // check_grad agrees, for every index shape.
    {
      auto rep = interp::check_grad(*p.in, "L", {V(c), V(I({6}, idx))}, p.params);
      INFO(rep.message);
      CHECK(rep.ok);
    }
    {
      Values a = {V(weights({4})), V(Tensor::scalar_i32(2))};
      auto gs = p.in->value_and_grad("L_scalar", a, p.params);
      CHECK_FALSE(gs.grads[0].sparse.empty());
      std::vector<float> w(20, 0.0f);
      for (int j = 0; j < 4; ++j)
        w[static_cast<size_t>(8 + j)] = a[0].as_tensor().f32()[j];
      check_f32(gs.grads[0].to_dense({5, 4}), {5, 4}, w);
      auto rep = interp::check_grad(*p.in, "L_scalar", a, p.params);
      INFO(rep.message);
      CHECK(rep.ok);
    }
    {
      Values a = {V(weights({2, 3, 4})), V(I({2, 3}, {4, 4, 0, 2, 4, 1}))};
      auto g2 = p.in->value_and_grad("L_2d", a, p.params);
      CHECK(g2.grads[0].sparse.size() == 2); // one part per take, not coalesced
      std::vector<float> w(20, 0.0f);
      const int32_t* ix = a[1].as_tensor().i32();
      for (int k = 0; k < 6; ++k)
        for (int j = 0; j < 4; ++j)
          w[static_cast<size_t>(ix[k] * 4 + j)] += 2 * a[0].as_tensor().f32()[k * 4 + j];
      check_f32(g2.grads[0].to_dense({5, 4}), {5, 4}, w);
      auto rep = interp::check_grad(*p.in, "L_2d", a, p.params);
      INFO(rep.message);
      CHECK(rep.ok);
    }
  }

  TEST_CASE("take from a table that is not a parameter: the gradient flows back densely") {
    grad_ok(R"(
param E : f32[5, 3] = normal(0.0, 1.0)
entry L(c: f32[3, 3], i: i32[3]) -> f32[] { sum(take(tanh(E) * 2.0, i) * c) }
)",
            {V(I({3}, {4, 0, 4}))});
  }

  TEST_CASE("take from a table that also has a dense use: sparse and dense parts both count") {
    Prog p(R"(
param E : f32[5, 3] = normal(0.0, 1.0)
entry L(c: f32[2, 3], d: f32[5, 3], i: i32[2]) -> f32[] { sum(take(E, i) * c) + sum(E * d) }
)");
    Values a = p.args_for("L", {V(I({2}, {3, 3}))});
    auto g = p.in->value_and_grad("L", a, p.params);
    CHECK(g.grads[0].dense.defined());
    CHECK_FALSE(g.grads[0].sparse.empty());
    std::vector<float> want(a[1].as_tensor().f32(), a[1].as_tensor().f32() + 15);
    for (int k = 0; k < 2; ++k)
      for (int j = 0; j < 3; ++j)
        want[static_cast<size_t>(9 + j)] += a[0].as_tensor().f32()[k * 3 + j];
    check_f32(g.grads[0].to_dense({5, 3}), {5, 3}, want);
    grad_ok(p, {V(I({2}, {3, 3}))});
  }

} // TEST_SUITE
