// Gradients of every tensor op of src/ops/ops.def (and the infix operators) through the
// generic path, with check_grad (random directional derivatives) on `sum(OP(params) * C)`
// losses with a fixed non-uniform constant C, including edge shapes (rank 0, one element, sizes
// 17 and 33, one-row matrices), no-gradient ops and the row-sparse gradient of take. The
// forward results are in ops_test.cpp.
#include "tests/interp/ops_test_util.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

namespace tests_interp_ops_grad_test {

using namespace pejit;
using namespace pejit::interp::test;
using interp::Value;
using interp::Values;

namespace {

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

} // namespace

TEST_SUITE("interp") {

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

  TEST_CASE("gradient of full's value, zeros and ones are constants") {
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
    pejit::test::check_elementwise(sparse_dense, gd.grads[0].to_dense({5, 4}), 1e-5);

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

} // namespace tests_interp_ops_grad_test
