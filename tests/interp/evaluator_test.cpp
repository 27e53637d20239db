// The generic evaluator: its backend protocol (a backend missing an operation does not satisfy
// EvaluatorBackend); its errors (recursion deeper than the limit, Int division by zero,
// wrongly-shaped arguments named by their path, unknown entries, wrong argument counts and
// non-scalar losses are pejit::Errors naming the location); an Interpreter stays usable after
// them and gives the same results when reused across calls.
#include "src/interp/evaluator_backend.h"
#include "tests/interp/programs_test_util.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tests_interp_evaluator_test {

using namespace pejit;
using namespace pejit::interp::programs_test;
using interp::Value;
using interp::Values;

namespace {

// ---- the backend protocol --------------------------------------------------------------------
// Declarations only: the concepts look at signatures. Each near miss below would compile as a
// backend if the concept did not name that operation.

struct FullBackend {
  Value param(int);
  Value op(ops::OpId, const ops::Attr&, const Value*, size_t, const Span&, Values* = nullptr);
  std::optional<Value> call(const ir::FnDecl&, int, const Values&, const Span&);
  Value sum_list(const Value&, const ir::Type&, const Span&);
  Value to_int(const Value&, const Span&);
  Value to_bool(const Value&, const Span&);
  Value random_key(const Span&, int64_t&);
  const interp::DimBindings& dims() const;
};
static_assert(interp::EvaluatorBackend<FullBackend>);

struct NoDims { // named dimensions in expressions (zeros(H)) need the bound sizes
  Value param(int);
  Value op(ops::OpId, const ops::Attr&, const Value*, size_t, const Span&, Values* = nullptr);
  std::optional<Value> call(const ir::FnDecl&, int, const Values&, const Span&);
  Value sum_list(const Value&, const ir::Type&, const Span&);
  Value to_int(const Value&, const Span&);
  Value to_bool(const Value&, const Span&);
  Value random_key(const Span&, int64_t&);
};
static_assert(!interp::EvaluatorBackend<NoDims>);

struct NoRandomKey { // a random op's key and index j come from the backend
  Value param(int);
  Value op(ops::OpId, const ops::Attr&, const Value*, size_t, const Span&, Values* = nullptr);
  std::optional<Value> call(const ir::FnDecl&, int, const Values&, const Span&);
  Value sum_list(const Value&, const ir::Type&, const Span&);
  Value to_int(const Value&, const Span&);
  Value to_bool(const Value&, const Span&);
};
static_assert(!interp::EvaluatorBackend<NoRandomKey>);
static_assert(!interp::FlatCallBackend<FullBackend> && !interp::InlineMemoBackend<FullBackend>);

struct NoToBool {
  Value param(int);
  Value op(ops::OpId, const ops::Attr&, const Value*, size_t, const Span&, Values* = nullptr);
  std::optional<Value> call(const ir::FnDecl&, int, const Values&, const Span&);
  Value sum_list(const Value&, const ir::Type&, const Span&);
  Value to_int(const Value&, const Span&);
};
static_assert(!interp::EvaluatorBackend<NoToBool>);

struct NoMultiResultOp { // op cannot return every result of split
  Value param(int);
  Value op(ops::OpId, const ops::Attr&, const Value*, size_t, const Span&);
  std::optional<Value> call(const ir::FnDecl&, int, const Values&, const Span&);
  Value sum_list(const Value&, const ir::Type&, const Span&);
  Value to_int(const Value&, const Span&);
  Value to_bool(const Value&, const Span&);
};
static_assert(!interp::EvaluatorBackend<NoMultiResultOp>);

struct CallNotOptional : FullBackend { // call must be able to decline (nullopt)
  Value call(const ir::FnDecl&, int, const Values&, const Span&);
};
static_assert(!interp::EvaluatorBackend<CallNotOptional>);

struct FlatCall : FullBackend {
  bool call_flat(const ir::FnDecl&, int, const Values&, const Span&, Values& out);
};
static_assert(interp::EvaluatorBackend<FlatCall> && interp::FlatCallBackend<FlatCall>);

struct FlatCallWithoutOut : FullBackend { // would be ignored by the evaluator, not called
  bool call_flat(const ir::FnDecl&, int, const Values&, const Span&);
};
static_assert(!interp::EvaluatorBackend<FlatCallWithoutOut>);

struct Memo : FullBackend {
  int32_t inline_begin(const ir::FnDecl&, int, const Values&, int, Values&, bool);
  void inline_end(int32_t, const Value*, size_t, bool, int);
};
static_assert(interp::EvaluatorBackend<Memo> && interp::InlineMemoBackend<Memo>);

struct MemoWithoutEnd : FullBackend {
  int32_t inline_begin(const ir::FnDecl&, int, const Values&, int, Values&, bool);
};
static_assert(!interp::EvaluatorBackend<MemoWithoutEnd>);

// ---- a batch of trees, for argument checking ------------------------------------------------

const char* kTreeSrc = R"(
type Tree = Leaf(word: i32[], label: i32[])
          | Node(left: Tree, right: Tree, label: i32[])

dim V = 6
param emb : f32[V, 4] = normal(0.0, 1.0)
param Wo : f32[4, 3] = normal(0.0, 1.0)

fn enc(t: Tree) -> (f32[4], f32[]) {
  match t {
    Leaf(w, y) => {
      let h = tanh(take(emb, w));
      (h, cross_entropy(h @ Wo, y))
    }
    Node(l, r, y) => {
      let (hl, ll) = enc(l);
      let (hr, lr) = enc(r);
      let h = tanh(hl + hr);
      (h, ll + lr + cross_entropy(h @ Wo, y))
    }
  }
}

entry loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => enc(t).1, batch)) }
entry embed(batch: List[Tree]) -> List[f32[4]] { map(fn t => enc(t).0, batch) }
entry count(batch: List[Tree]) -> Int { length(batch) }
fn helper(x: Int) -> Int { x }
)";

Value leaf(int w, int y) {
  return Value::adt(0, {V(Tensor::scalar_i32(w)), V(Tensor::scalar_i32(y))});
}
Value node(Value l, Value r, int y) {
  return Value::adt(1, {std::move(l), std::move(r), V(Tensor::scalar_i32(y))});
}

} // namespace

TEST_SUITE("interp") {

  const char* kDeepSrc = R"(
param W : f32[2, 2] = normal(0.0, 0.5)
fn down(n: Int) -> Int { if n == 0 { 0 } else { 1 + down(n - 1) } }
fn iter(n: Int, x: f32[2]) -> f32[2] { if n == 0 { x } else { iter(n - 1, tanh(x @ W)) } }
entry deep(n: Int) -> Int { down(n) }
entry L(n: Int, c: f32[2]) -> f32[] { sum(iter(n, c) * c) }
)";

  TEST_CASE("recursion deeper than a set limit is a pejit::Error, the evaluator stays usable") {
    interp::InterpreterOptions opt;
    opt.max_depth = 50;
    Prog p(kDeepSrc, opt);
    CHECK(p.run("deep", {Value::integer(40)}).as_int() == 40);
    std::string msg = error_of([&] { p.run("deep", {Value::integer(100000)}); });
    CHECK(contains(msg, "recursion deeper than 50"));
    CHECK(contains(msg, "test.pe:3:"));
    Values args = {Value::integer(100000), V(F({2}, {0.5f, -0.5f}))};
    msg = error_of([&] { p.in->value_and_grad("L", args, p.params); });
    CHECK(contains(msg, "recursion deeper than 50"));
    // Still usable after the errors (the tape of the failed call is not in the way).
    args[0] = Value::integer(10);
    auto g1 = p.in->value_and_grad("L", args, p.params);
    Prog fresh(kDeepSrc, opt);
    auto g2 = fresh.in->value_and_grad("L", args, fresh.params);
    CHECK(g1.loss == g2.loss);
    CHECK_FALSE(g1.grads[0].empty());
    CHECK(p.run("deep", {Value::integer(5)}).as_int() == 5);
    p.grad_ok("L", args);
  }

  TEST_CASE("recursion 100000 deep with the default limit is a pejit::Error, not a crash") {
    // Deep recursion stops at the depth limit (or earlier, when the native stack runs
    // low) with an error naming the call; it never overflows the stack.
    Prog p(kDeepSrc);
    CHECK(p.run("deep", {Value::integer(1000)}).as_int() == 1000); // within the limit
    // Either way the message names the bound, the input's depth and what raises it.
    auto stopped = [](const std::string& m) {
      return (contains(m, "recursion deeper than 4000 calls") ||
              contains(m, "ran out of the native stack")) &&
             contains(m, "the limit is max_depth 4000 + 4 per level of the input") &&
             contains(m, "the input's depth is 0") && contains(m, "--max-depth");
    };
    std::string msg = error_of([&] { p.run("deep", {Value::integer(100000)}); });
    CHECK_MESSAGE(stopped(msg), msg);
    Values args = {Value::integer(100000), V(F({2}, {0.5f, -0.5f}))};
    msg = error_of([&] { p.in->value_and_grad("L", args, p.params); });
    CHECK_MESSAGE(stopped(msg), msg);
  }

  TEST_CASE("an Int literal beside a tensor is a 0-d tensor of that tensor's element type") {
    Prog p(R"(
entry gt_call(y: i32[3]) -> i32[3] { gt(y, 2) }
entry gt_op(y: i32[3]) -> i32[3] { y > 2 }
entry lt_left(y: i32[3]) -> i32[3] { lt(1, y) }
entry affine(x: f32[3]) -> f32[3] { x * 2 + 1 }
entry minus(x: f32[3]) -> f32[3] { 2 - x }
)");
    Value y = Value::tensor(Tensor::from_i32({3}, std::vector<int32_t>{1, 2, 3}));
    Value x = Value::tensor(Tensor::from_f32({3}, std::vector<float>{0.5f, -1.0f, 4.0f}));
    auto ints = [](const Value& v) {
      const Tensor& t = v.as_tensor();
      return std::vector<int32_t>(t.i32(), t.i32() + t.numel());
    };
    auto floats = [](const Value& v) {
      const Tensor& t = v.as_tensor();
      return std::vector<float>(t.f32(), t.f32() + t.numel());
    };
    CHECK(ints(p.run("gt_call", {y})) == std::vector<int32_t>{0, 0, 1});
    CHECK(ints(p.run("gt_op", {y})) == std::vector<int32_t>{0, 0, 1});
    CHECK(ints(p.run("lt_left", {y})) == std::vector<int32_t>{0, 1, 1});
    CHECK(floats(p.run("affine", {x})) == std::vector<float>{2.0f, -1.0f, 9.0f});
    CHECK(floats(p.run("minus", {x})) == std::vector<float>{1.5f, 3.0f, -2.0f});
  }

  TEST_CASE("a kernel's error names its op once") {
    Prog p(R"(
entry ce(x: f32[3], y: i32[]) -> f32[] { cross_entropy(x, y) }
)");
    Value x = Value::tensor(Tensor::from_f32({3}, std::vector<float>{0.5f, -1.0f, 4.0f}));
    std::string msg = error_of([&] { p.run("ce", {x, Value::tensor(Tensor::scalar_i32(7))}); });
    CHECK(contains(msg, "test.pe:2:"));
    CHECK(contains(msg, "cross_entropy: label 7"));
    CHECK_FALSE(contains(msg, "cross_entropy: cross_entropy"));
  }

  TEST_CASE("Int division by zero is a pejit::Error naming the location") {
    Prog p(R"(
entry idiv(a: Int, b: Int) -> Int { a / b }
entry imod(a: Int, b: Int) -> Int {
  a % b
}
)");
    CHECK(p.run("idiv", {Value::integer(7), Value::integer(2)}).as_int() == 3);
    std::string msg = error_of([&] { p.run("idiv", {Value::integer(7), Value::integer(0)}); });
    CHECK(contains(msg, "test.pe:2:"));
    CHECK(contains(msg, "division by zero"));
    msg = error_of([&] { p.run("imod", {Value::integer(7), Value::integer(0)}); });
    CHECK(contains(msg, "test.pe:4:3"));
    CHECK(contains(msg, "division by zero"));
  }

  TEST_CASE("a wrongly-shaped argument is a pejit::Error naming its path") {
    Prog p(kTreeSrc);
    Value good = Value::list({leaf(1, 2), node(leaf(0, 1), leaf(5, 0), 2)});
    CHECK(std::isfinite(p.run("loss", {good}).as_tensor().item_f32()));

    // batch[1].word is i32[2], not i32[].
    Value bad_word = Value::list(
        {leaf(1, 2), Value::adt(0, {V(Tensor::from_i32({2}, std::vector<int32_t>{1, 2})),
                                    V(Tensor::scalar_i32(0))})});
    std::string msg = error_of([&] { p.run("loss", {bad_word}); });
    CHECK(contains(msg, "batch[1].word"));
    CHECK(contains(msg, "i32[]"));
    // The same through value_and_grad.
    msg = error_of([&] { p.in->value_and_grad("loss", {bad_word}, p.params); });
    CHECK(contains(msg, "batch[1].word"));

    // Nested: batch[0].right.label is f32[], not i32[].
    Value bad_label = Value::list({Value::adt(
        1, {leaf(0, 0), Value::adt(0, {V(Tensor::scalar_i32(3)), V(Tensor::scalar_f32(1))}),
            V(Tensor::scalar_i32(1))})});
    msg = error_of([&] { p.run("loss", {bad_label}); });
    CHECK(contains(msg, "batch[0].right.label"));

    // Not a list at all; an ADT value with a tag out of range; an Int for a list.
    CHECK(contains(error_of([&] { p.run("count", {Value::integer(3)}); }), "batch"));
    CHECK(contains(error_of([&] { p.run("count", {Value::list({Value::adt(5, {})})}); }),
                   "batch[0]"));
    // A word id out of the vocabulary (V = 6) is caught when it is used.
    CHECK_THROWS_AS(p.run("loss", {Value::list({leaf(6, 0)})}), Error);
  }

  TEST_CASE("unknown entries, wrong argument counts and non-scalar losses are pejit::Errors") {
    Prog p(kTreeSrc);
    Value batch = Value::list({leaf(1, 2)});
    CHECK(contains(error_of([&] { p.run("nope", {batch}); }), "nope"));
    CHECK(contains(error_of([&] { p.in->value_and_grad("nope", {batch}, p.params); }), "nope"));
    // A function that is not an entry.
    CHECK(contains(error_of([&] { p.run("helper", {Value::integer(1)}); }), "helper"));
    CHECK(contains(error_of([&] { p.run("loss", {}); }), "argument"));
    CHECK(contains(error_of([&] { p.run("loss", {batch, batch}); }), "argument"));
    // value_and_grad needs an f32[] result.
    CHECK(contains(error_of([&] { p.in->value_and_grad("embed", {batch}, p.params); }), "f32[]"));
    CHECK(contains(error_of([&] { p.in->value_and_grad("count", {batch}, p.params); }), "f32[]"));
  }

  TEST_CASE("one Interpreter reused across calls gives the same results") {
    Prog p(kTreeSrc);
    Value batch = Value::list({node(node(leaf(1, 2), leaf(3, 0), 1), leaf(5, 2), 0), leaf(0, 1),
                               node(leaf(2, 2), leaf(2, 2), 2)});
    std::vector<interp::Interpreter::Gradients> gs;
    std::vector<float> runs;
    for (int i = 0; i < 3; ++i) {
      gs.push_back(p.in->value_and_grad("loss", {batch}, p.params));
      runs.push_back(p.run("loss", {batch}).as_tensor().item_f32());
    }
    for (int i = 1; i < 3; ++i) {
      CHECK(gs[i].loss == gs[0].loss);
      CHECK(runs[i] == runs[0]);
      REQUIRE(gs[i].grads.size() == gs[0].grads.size());
      for (size_t k = 0; k < gs[0].grads.size(); ++k) {
        INFO("call " << i << ", parameter " << p.params.names[k]);
        Shape s = p.params.values[k].shape();
        CHECK(test::same_bits(gs[i].grads[k].to_dense(s), gs[0].grads[k].to_dense(s)));
      }
    }
    CHECK(runs[0] == doctest::Approx(gs[0].loss).epsilon(1e-6));
    // emb's gradient is row-sparse; both parameters get one, and the whole is right.
    CHECK_FALSE(gs[0].grads[0].sparse.empty());
    CHECK_FALSE(gs[0].grads[1].empty());
    auto rep = interp::check_grad(*p.in, "loss", {batch}, p.params);
    INFO(rep.message);
    CHECK(rep.ok);
    // A different entry in between leaves no trace.
    Value emb = p.run("embed", {batch});
    CHECK(emb.list_size() == 3);
    CHECK(p.in->value_and_grad("loss", {batch}, p.params).loss == gs[0].loss);
  }

} // TEST_SUITE

} // namespace tests_interp_evaluator_test
