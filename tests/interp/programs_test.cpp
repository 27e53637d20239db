// Whole programs on the generic path: recursion over a user ADT (expression trees), list
// programs (patterns, map, fold, sum_list, append, length, closures, returned lambdas,
// higher-order functions, if/else, tuples) and Int/Bool arithmetic, values checked by hand and
// gradients by check_grad. The evaluator's errors and its reuse are in evaluator_test.cpp.
#include "tests/interp/programs_test_util.h"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

namespace tests_interp_programs_test {

using namespace pejit;
using namespace pejit::interp::programs_test;
using interp::Value;
using interp::Values;

namespace {

void check_vec(const Tensor& got, const std::vector<double>& want, double tol = 1e-5) {
  INFO("got " << got.str());
  REQUIRE(got.dtype() == DType::F32);
  REQUIRE(static_cast<size_t>(got.numel()) == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ", want " << want[i]);
    CHECK(std::fabs(got.f32()[i] - want[i]) <= tol * std::max(1.0, std::fabs(want[i])));
  }
}

// ---- expression trees ----------------------------------------------------------------------

const char* kExprSrc = R"(
// Expression trees over 3-vectors, evaluated by recursion.
type Expr = Lit(x: f32[3])
          | Var(i: i32[])
          | Plus(l: Expr, r: Expr)
          | Times(l: Expr, r: Expr)
          | Act(e: Expr)

param E : f32[4, 3] = normal(0.0, 1.0)
param W : f32[3, 3] = normal(0.0, 0.5)

fn eval(e: Expr) -> f32[3] {
  match e {
    Lit(x) => x,
    Var(i) => take(E, i),
    Plus(l, r) => eval(l) + eval(r),
    Times(l, r) => eval(l) * eval(r),
    Act(a) => tanh(eval(a) @ W)
  }
}

fn max(a: Int, b: Int) -> Int { if a > b { a } else { b } }

// (number of nodes, depth)
fn stats(e: Expr) -> (Int, Int) {
  match e {
    Plus(l, r) => both(l, r),
    Times(l, r) => both(l, r),
    Act(a) => {
      let (s, d) = stats(a);
      (s + 1, d + 1)
    }
    _ => (1, 1)
  }
}

fn both(l: Expr, r: Expr) -> (Int, Int) {
  let (sl, dl) = stats(l);
  let (sr, dr) = stats(r);
  (sl + sr + 1, max(dl, dr) + 1)
}

entry value(e: Expr) -> f32[3] { eval(e) }
entry shape(e: Expr) -> (Int, Int) { stats(e) }
entry L(e: Expr, c: f32[3]) -> f32[] { sum(eval(e) * c) }
)";

enum ExprTag { kLit = 0, kVar = 1, kPlus = 2, kTimes = 3, kAct = 4 };
Value lit(float a, float b, float c) {
  return Value::adt(kLit, {V(F({3}, {a, b, c}))});
}
Value var(int i) {
  return Value::adt(kVar, {V(Tensor::scalar_i32(i))});
}
Value plus(Value l, Value r) {
  return Value::adt(kPlus, {std::move(l), std::move(r)});
}
Value times(Value l, Value r) {
  return Value::adt(kTimes, {std::move(l), std::move(r)});
}
Value act(Value e) {
  return Value::adt(kAct, {std::move(e)});
}

using Vec3 = std::array<double, 3>;

/// The reference evaluator of an Expr value, in double.
Vec3 ref_eval(const Value& e, const Tensor& Em, const Tensor& Wm) {
  const Values& f = e.items();
  switch (e.tag()) {
  case kLit: {
    const float* x = f[0].as_tensor().f32();
    return {x[0], x[1], x[2]};
  }
  case kVar: {
    int i = f[0].as_tensor().item_i32();
    return {Em.f32()[i * 3], Em.f32()[i * 3 + 1], Em.f32()[i * 3 + 2]};
  }
  case kPlus:
  case kTimes: {
    Vec3 a = ref_eval(f[0], Em, Wm), b = ref_eval(f[1], Em, Wm), r{};
    for (int k = 0; k < 3; ++k)
      r[k] = e.tag() == kPlus ? a[k] + b[k] : a[k] * b[k];
    return r;
  }
  default: {
    Vec3 a = ref_eval(f[0], Em, Wm), r{};
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 3; ++k)
        s += a[k] * Wm.f32()[k * 3 + j];
      r[j] = std::tanh(s);
    }
    return r;
  }
  }
}

/// A seeded random tree of about `n` nodes.
Value random_expr(uint64_t& s, int n) {
  auto next = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>(s >> 33);
  };
  if (n <= 1) {
    if (next() % 2)
      return var(next() % 4);
    return lit(0.1f * (next() % 11) - 0.5f, 0.3f, -0.2f * (next() % 5));
  }
  switch (next() % 3) {
  case 0:
    return act(random_expr(s, n - 1));
  case 1: {
    int k = 1 + next() % (n - 1);
    return plus(random_expr(s, k), random_expr(s, n - 1 - k));
  }
  default: {
    int k = 1 + next() % (n - 1);
    return times(random_expr(s, k), random_expr(s, n - 1 - k));
  }
  }
}

// ---- lists -----------------------------------------------------------------------------------

const char* kListSrc = R"(
param W : f32[2, 2] = normal(0.0, 0.5)
param b : f32[2] = normal(0.0, 0.5)

fn len(xs: List[f32[2]]) -> Int {
  match xs {
    [] => 0
    _ :: t => 1 + len(t)
  }
}

// An order-dependent reduction: acc * 0.5 + h, front to back.
fn decay(xs: List[f32[2]], acc: f32[2]) -> f32[2] {
  match xs {
    Nil => acc,
    Cons(h, t) => decay(t, acc * 0.5 + h),
  }
}

fn rev(xs: List[f32[2]], acc: List[f32[2]]) -> List[f32[2]] {
  match xs {
    [] => acc
    h :: t => rev(t, h :: acc)
  }
}

// A lambda returned from a function, capturing a tensor argument and reading a parameter.
fn scaler(k: f32[]) -> (f32[2]) -> f32[2] { fn x => x * k + b }

// A higher-order function: f applied n times.
fn apply_n(f: (f32[2]) -> f32[2], n: Int, x: f32[2]) -> f32[2] {
  if n <= 0 { x } else { apply_n(f, n - 1, f(x)) }
}

fn compose(f: (f32[2]) -> f32[2], g: (f32[2]) -> f32[2]) -> (f32[2]) -> f32[2] {
  fn x => f(g(x))
}

fn body(xs: List[f32[2]], n: Int) -> f32[2] {
  let layer = fn (x: f32[2]) => tanh(x @ W + b);
  let ys = map(layer, xs);
  let zs = append(ys, map(scaler(2.0), xs));
  let (total, count) = (sum_list(zs), length(zs));
  let twice = compose(layer, scaler(0.5));
  let deep = map(fn x => apply_n(twice, n, x), xs);
  let folded = fold(fn (acc, x) => acc * 0.5 + x, zeros(2), deep);
  let pick = if count == len(zs) && count > 3 { decay(zs, total) } else { total };
  pick + folded
}

entry value(xs: List[f32[2]], n: Int) -> f32[2] { body(xs, n) }
entry L(xs: List[f32[2]], n: Int, c: f32[2]) -> f32[] { sum(body(xs, n) * c) }

entry lists(xs: List[f32[2]]) -> (Int, Int, List[f32[2]], List[Int], Int) {
  let r = rev(xs, []);
  let ns = map(fn x => len(x :: r), xs);
  let firsts = match r { [] => 0, _ :: t => length(t) };
  (len(xs), length(append(xs, r)), r, 7 :: ns, firsts)
}

entry ints(a: Int, b: Int) -> (Int, Int, Int, Bool, Bool) {
  let q = a / b;
  let m = a % b;
  let t = ((a, b), q);
  let ((x, _), y) = t;
  (q, m, x * y - t.0.1, a < b || !(a != b), a >= b && b > 0)
}
)";

using Vec2 = std::array<double, 2>;

struct RefList {
  const float* W;
  const float* b;
  Vec2 layer(Vec2 x) const {
    Vec2 r{};
    for (int j = 0; j < 2; ++j)
      r[j] = std::tanh(x[0] * W[j] + x[1] * W[2 + j] + b[j]);
    return r;
  }
  Vec2 scale(Vec2 x, double k) const { return {x[0] * k + b[0], x[1] * k + b[1]}; }
  Vec2 body(const std::vector<Vec2>& xs, int n) const {
    std::vector<Vec2> zs;
    for (auto x : xs)
      zs.push_back(layer(x));
    for (auto x : xs)
      zs.push_back(scale(x, 2.0));
    Vec2 total{0, 0};
    for (auto z : zs)
      total = {total[0] + z[0], total[1] + z[1]};
    Vec2 folded{0, 0};
    for (auto x : xs) {
      Vec2 d = x;
      for (int i = 0; i < n; ++i)
        d = layer(scale(d, 0.5));
      folded = {folded[0] * 0.5 + d[0], folded[1] * 0.5 + d[1]};
    }
    Vec2 pick = total;
    if (zs.size() > 3)
      for (auto z : zs)
        pick = {pick[0] * 0.5 + z[0], pick[1] * 0.5 + z[1]};
    return {pick[0] + folded[0], pick[1] + folded[1]};
  }
};

Value vec_list(const std::vector<Vec2>& xs) {
  Values v;
  for (auto x : xs)
    v.push_back(V(F({2}, {float(x[0]), float(x[1])})));
  return Value::list(std::move(v));
}

} // namespace

TEST_SUITE("interp") {

  TEST_CASE("a recursive program over a user ADT: values and sizes by hand") {
    Prog p(kExprSrc);
    // Small, exact parameters: E row i = (i, i + 1, -i) / 4, W = a fixed 3x3.
    Tensor& Em = p.param("E");
    for (int i = 0; i < 4; ++i) {
      Em.f32()[i * 3] = i / 4.0f;
      Em.f32()[i * 3 + 1] = (i + 1) / 4.0f;
      Em.f32()[i * 3 + 2] = -i / 4.0f;
    }
    Tensor& Wm = p.param("W");
    const float w[9] = {0.5f, -0.25f, 0, 0.125f, 1, -0.5f, 0, 0.75f, 0.25f};
    std::memcpy(Wm.f32(), w, sizeof w);

    // Plus(Times(Var 1, Lit(1, 2, 3)), Act(Plus(Var 3, Lit(0.5, -1, 2)))): 8 nodes, depth 4.
    Value e = plus(times(var(1), lit(1, 2, 3)), act(plus(var(3), lit(0.5f, -1, 2))));
    // By hand: Var 1 = (0.25, 0.5, -0.25); times (1, 2, 3) = (0.25, 1, -0.75).
    // Var 3 = (0.75, 1, -0.75); + (0.5, -1, 2) = (1.25, 0, 1.25);
    // @ W = (0.625, -0.3125 + 0.9375, 0.3125) = (0.625, 0.625, 0.3125), then tanh.
    std::vector<double> want = {0.25 + std::tanh(0.625), 1 + std::tanh(0.625),
                                -0.75 + std::tanh(0.3125)};
    check_vec(p.run("value", {e}).as_tensor(), want);
    Vec3 r = ref_eval(e, Em, Wm);
    check_vec(p.run("value", {e}).as_tensor(), {r[0], r[1], r[2]});

    Value st = p.run("shape", {e});
    CHECK(st.items()[0].as_int() == 8);
    CHECK(st.items()[1].as_int() == 4);
    Value one = p.run("shape", {lit(0, 0, 0)});
    CHECK(one.items()[0].as_int() == 1);
    CHECK(one.items()[1].as_int() == 1);

    // L = sum(eval(e) * c) by hand.
    Tensor c = F({3}, {1, -2, 0.5f});
    auto g = p.in->value_and_grad("L", {e, V(c)}, p.params);
    CHECK(g.loss == doctest::Approx(want[0] - 2 * want[1] + 0.5 * want[2]).epsilon(1e-5));
  }

  TEST_CASE("a recursive program over a user ADT: gradients on random trees") {
    Prog p(kExprSrc);
    uint64_t s = 42;
    for (int n : {1, 2, 5, 9, 17, 30}) {
      Value e = random_expr(s, n);
      // Keep a parameter on every tree: + Var 2 and an Act at the root.
      Value t = act(plus(e, var(2)));
      Vec3 r = ref_eval(t, p.param("E"), p.param("W"));
      INFO("tree of " << n << " nodes");
      check_vec(p.run("value", {t}).as_tensor(), {r[0], r[1], r[2]}, 1e-4);
      p.grad_ok("L", {t, V(F({3}, {0.7f, -1.3f, 0.4f}))});
    }
  }

  TEST_CASE("a list program: patterns, map, fold, sum_list, append, length, closures") {
    Prog p(kListSrc);
    RefList ref{p.param("W").f32(), p.param("b").f32()};
    const std::vector<Vec2> xs = {{0.5, -1}, {1.5, 0.25}, {-0.75, 2}};
    for (int n : {0, 1, 3}) {
      INFO("n = " << n);
      Vec2 want = ref.body(xs, n);
      check_vec(p.run("value", {vec_list(xs), Value::integer(n)}).as_tensor(), {want[0], want[1]});
    }
    // One element: count == 2, so the else branch (total) is taken.
    Vec2 want1 = ref.body({{0.5, -1}}, 2);
    check_vec(p.run("value", {vec_list({{0.5, -1}}), Value::integer(2)}).as_tensor(),
              {want1[0], want1[1]});
    // The empty list: sum_list of [] is zeros, fold returns its initial value.
    check_vec(p.run("value", {vec_list({}), Value::integer(2)}).as_tensor(), {0, 0});

    Value l = p.run("lists", {vec_list(xs)});
    CHECK(l.items()[0].as_int() == 3);
    CHECK(l.items()[1].as_int() == 6);
    const Value& r = l.items()[2];
    REQUIRE(r.list_size() == 3);
    CHECK(r.list_at(0).as_tensor().f32()[0] == -0.75f); // reversed
    CHECK(r.list_at(2).as_tensor().f32()[0] == 0.5f);
    const Value& ns = l.items()[3];
    REQUIRE(ns.list_size() == 4);
    CHECK(ns.list_at(0).as_int() == 7);
    for (size_t i = 1; i < 4; ++i)
      CHECK(ns.list_at(i).as_int() == 4);
    CHECK(l.items()[4].as_int() == 2);
  }

  TEST_CASE("a list program: gradients through closures, returned lambdas and folds") {
    Prog p(kListSrc);
    for (int n : {0, 2}) {
      INFO("n = " << n);
      p.grad_ok("L", {vec_list({{0.5, -1}, {1.5, 0.25}, {-0.75, 2}}), Value::integer(n),
                      V(F({2}, {1.1f, -0.6f}))});
      p.grad_ok("L", {vec_list({{0.3, 0.8}}), Value::integer(n), V(F({2}, {0.9f, 0.4f}))});
    }
  }

  TEST_CASE("Int and Bool arithmetic, tuples and destructuring") {
    Prog p(kListSrc);
    Value r = p.run("ints", {Value::integer(17), Value::integer(5)});
    CHECK(r.items()[0].as_int() == 3);
    CHECK(r.items()[1].as_int() == 2);
    CHECK(r.items()[2].as_int() == 17 * 3 - 5);
    CHECK(r.items()[3].as_bool() == false);
    CHECK(r.items()[4].as_bool() == true);
    Value n = p.run("ints", {Value::integer(-7), Value::integer(2)});
    CHECK(n.items()[0].as_int() == -3); // truncation toward zero
    CHECK(n.items()[1].as_int() == -1);
    CHECK(n.items()[3].as_bool() == true);
    CHECK(n.items()[4].as_bool() == false);
    Value e = p.run("ints", {Value::integer(4), Value::integer(4)});
    CHECK(e.items()[3].as_bool() == true); // !(a != b)
  }

} // TEST_SUITE

} // namespace tests_interp_programs_test
