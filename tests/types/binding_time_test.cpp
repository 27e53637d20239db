// Binding times recorded on expressions, and the warning for control flow on dynamic values.
#include "src/types/check.h"

#include <doctest/doctest.h>

namespace tests_types_binding_time_test {

using namespace pejit;

TEST_SUITE("types") {
  TEST_CASE("binding times: structure static, tensors dynamic, literals constant") {
    ir::Module m;
    Diagnostics d;
    auto r = types::add_source(m, R"(
type T = L(w: i32[], n: Int) | N(l: T, r: T)
param E : f32[10, 2] = zeros
fn depth(t: T) -> Int { match t { L(w, n) => n, N(l, r) => 1 + depth(l) } }
fn f(t: T) -> f32[2] {
  let k = 2.0 * 3.0;
  match t { L(w, n) => take(E, w) * k, N(l, r) => f(l) + f(r) }
}
entry e(ts: List[T]) -> f32[2] { sum_list(map(fn t => f(t), ts)) }
entry g(ts: List[T]) -> Int { length(ts) + depth(N(L(to_i32(zeros()), 1), L(to_i32(zeros()), 2))) }
)",
                               "bt.pe", d);
    INFO(d.render());
    REQUIRE(r.ok);
    CHECK(d.all().empty()); // no warnings: all control flow is static
    const auto& f = *m.fn("f");
    const auto* let = f.body->as<ir::Let>();
    REQUIRE(let);
    CHECK(let->value->bt == ir::BT::Const);  // 2.0 * 3.0 folds
    CHECK(let->body->bt == ir::BT::Dynamic); // tensors from params and payloads
    const auto* mt = let->body->as<ir::Match>();
    REQUIRE(mt);
    CHECK(mt->scrutinee->bt == ir::BT::Static); // the tree's structure
    CHECK(m.fn("depth")->body->bt == ir::BT::Static);
    CHECK(m.fn("g")->body->bt == ir::BT::Static);
  }

  TEST_CASE("a branch on a dynamic value warns at its location, naming the entry") {
    ir::Module m;
    Diagnostics d;
    auto r = types::add_source(m, R"(param W : f32[2] = zeros
fn pick(x: f32[2]) -> f32[2] {
  if to_bool(sum(x * W) > 0.0) { x } else { -x }
}
fn count(n: Int) -> Int { if n <= 0 { 0 } else { 1 + count(n - 1) } }
entry e(x: f32[2]) -> f32[] { sum(pick(x)) }
entry k(x: f32[2]) -> Int { count(to_int(to_i32(sum(x)))) }
entry s(n: Int) -> Int { count(n) }
)",
                               "dyn.pe", d);
    INFO(d.render());
    REQUIRE(r.ok);
    REQUIRE(d.all().size() == 2);
    CHECK(d.all()[0].severity == Severity::Warning);
    CHECK(d.all()[0].span.line == 3);
    CHECK(d.all()[0].span.col == 6);
    CHECK(d.all()[0].message.find("entry 'e'") != std::string::npos);
    // count's condition is dynamic because entry k passes it a value read from a tensor; entry
    // s passes a static Int, but the analysis is monovariant, so both entries are named.
    CHECK(d.all()[1].span.line == 5);
    CHECK(d.all()[1].message.find("'k'") != std::string::npos);
  }
}

} // namespace tests_types_binding_time_test
