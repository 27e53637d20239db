// The checker: types and shapes, name resolution, incremental add and the call graph.
#include "src/types/check.h"

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

namespace tests_types_check_test {

using namespace pejit;

namespace {
types::AddResult add(ir::Module& m, const std::string& src, Diagnostics& d) {
  return types::add_source(m, src, "test.pe", d);
}
} // namespace

TEST_SUITE("types") {
  TEST_CASE("the TreeLSTM example checks cleanly, without warnings") {
    ir::Module m;
    Diagnostics d;
    auto r = types::add_file(m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d);
    INFO(d.render());
    CHECK(r.ok);
    CHECK(d.all().empty());
    CHECK(m.entries() == std::vector<std::string>{"loss", "infer", "infer_nodes"});
    const ir::FnDecl* enc = m.fn("encode");
    REQUIRE(enc);
    CHECK(ir::type_str(enc->body->type) == "(f32[150], f32[150], f32[])");
  }

  TEST_CASE("shape inference through ops") {
    ir::Module m;
    Diagnostics d;
    auto r = add(m, R"(
dim V = 10
param E : f32[V, 4] = normal(0.0, 1.0)
param W : f32[8, 6] = xavier
fn f(x: f32[4], i: i32[3]) -> (f32[6], f32[3, 4], f32[2], i32[], f32[]) {
  let h = concat(x, x) @ W;
  let (a, b, c) = split3(h);
  (h, take(E, i), a + b * c, argmax(h), sum(h))
}
)",
                 d);
    INFO(d.render());
    CHECK(r.ok);
  }

  TEST_CASE("a named dimension is a constant in expressions: op Int arguments type symbolically") {
    ir::Module m;
    Diagnostics d;
    auto r = add(m, R"(
dim H = 4
dim K = 2
param W : f32[H, H] = xavier
fn f(x: f32[H]) -> f32[H] {
  let z = zeros(H);
  slice(concat(x, z), 0, H) @ W
}
fn g(x: f32[H]) -> (f32[2*H], f32[H+1], f32[K, H], f32[3*H-K], f32[H], Int) {
  let w = concat(x, x, ones(H));
  (slice(w, H, 3*H), slice(w, H-1, 2*H), full(0.5, K, H), slice(w, K, 3*H), zeros(2*H/2), H * K)
}
fn r(x: f32[H, 2]) -> f32[2*H] { reshape(x, 2*H) }
fn u() -> f32[H] { uniform(H) }
)",
                 d);
    INFO(d.render());
    REQUIRE(r.ok);
    // zeros(H) is f32[H], the slice of an f32[2*H] from 0 to H is f32[H].
    const auto& body = m.fn("f")->body->cast<ir::Let>();
    CHECK(ir::type_str(body.value->type) == "f32[H]");
    CHECK(ir::type_str(body.body->type) == "f32[H]");
    const auto& mm = body.body->cast<ir::Binary>();
    CHECK(ir::type_str(mm.lhs->type) == "f32[H]");
    // The attributes that name H stay symbolic on the call (the constant ones are resolved).
    const auto& sl = mm.lhs->cast<ir::Call>();
    REQUIRE(sl.attr_dims.size() == 2);
    CHECK(sl.attr_dims[1].str() == "H");
    CHECK(sl.attr_ints == std::vector<int64_t>{0, 0});
    CHECK(body.value->cast<ir::Call>().attr_dims.size() == 1);
    // Binding H checks every such call with the bound sizes.
    CHECK(m.uses("f").count("H") == 1);
  }

  TEST_CASE("named dimensions in op arguments: misuses are refused at their location") {
    ir::Module m;
    Diagnostics d;
    auto r = add(m, R"(dim H = 4
fn a(n: Int) -> f32[H] { zeros(n) }
fn b(x: f32[H]) -> f32[H] { slice(x, 0, H+1) }
fn c() -> f32[H] { zeros(H*H) }
fn e(x: f32[H]) -> f32[] { sum(x, H - 4) }
fn g(x: f32[H]) -> f32[H] { slice(x, K, 2) }
fn h(x: f32[2*H]) -> f32[H] { slice(x, 0, H, x) }
fn k() -> f32[H] { zeros(H - H - 1) }
fn m() -> f32[1] { zeros(3037000500 * 3037000500) }
)",
                 d);
    CHECK_FALSE(r.ok);
    auto has = [&](unsigned line, unsigned col, const std::string& text) {
      for (const auto& diag : d.all())
        if (diag.span.line == line && diag.span.col == col &&
            diag.message.find(text) != std::string::npos)
          return true;
      return false;
    };
    INFO(d.render());
    CHECK(has(2, 32, "zeros: an Int argument fixes a shape: it must be a literal, a dimension"));
    CHECK(has(3, 29, "slice: range [0, H+1) out of bounds for last dimension H"));
    CHECK(has(4, 26, "zeros: an Int argument fixes a shape"));
    CHECK(has(5, 28, "sum: the axis must be a constant (it fixes the result's rank), got H-4"));
    CHECK(has(6, 38, "unknown name 'K'"));
    CHECK(has(7, 46, "slice: tensor arguments must come before Int arguments"));
    CHECK(has(8, 20, "zeros: negative dimension -1"));
    CHECK(has(9, 26, "zeros: an Int argument fixes a shape")); // would overflow
    CHECK(d.all().size() == 8); // one error each, none after an unknown name
  }

  TEST_CASE("type errors carry their location") {
    ir::Module m;
    Diagnostics d;
    auto r = add(m, "fn f(x: f32[3]) -> f32[4] {\n  x + x\n}\n", d);
    CHECK_FALSE(r.ok);
    REQUIRE(d.error_count() == 1);
    CHECK(d.all()[0].span.line == 2);
    CHECK(d.all()[0].span.col == 3);
    CHECK(d.render().find("returns f32[4] but its body has type f32[3]") != std::string::npos);
  }

  TEST_CASE("several errors are reported in one run") {
    ir::Module m;
    Diagnostics d;
    add(m,
        "fn f(x: f32[3]) -> f32[3] { y }\nfn g(x: Int) -> Bool { x + true }\nfn h() -> Int { q(1) "
        "}\n",
        d);
    CHECK(d.error_count() == 3);
  }

  TEST_CASE("incremental add re-checks only what changed, and the module stays usable") {
    ir::Module m;
    Diagnostics d;
    auto r1 = add(m, R"(
param W : f32[3, 3] = xavier
fn a(x: f32[3]) -> f32[3] { x @ W }
fn b(x: f32[3]) -> f32[3] { tanh(x) }
fn c(x: f32[3]) -> f32[3] { a(x) }
entry ea(x: f32[3]) -> f32[] { sum(c(x)) }
entry eb(x: f32[3]) -> f32[] { sum(b(x)) }
)",
                  d);
    REQUIRE(r1.ok);
    CHECK(m.version("a") == 1);
    // Replacing `a` re-checks a and its caller c, touches entry ea only.
    auto r2 = add(m, "fn a(x: f32[3]) -> f32[3] { sigmoid(x @ W) }", d);
    INFO(d.render());
    REQUIRE(r2.ok);
    CHECK(r2.changed == std::vector<std::string>{"a"});
    CHECK(r2.checked == std::vector<std::string>{"a", "c"});
    CHECK(r2.affected_entries == std::vector<std::string>{"ea"});
    CHECK(m.version("a") == 2);
    CHECK(m.version("b") == 1);
    // The same text again changes nothing.
    auto r3 = add(m, "fn a(x: f32[3]) -> f32[3] { sigmoid(x @ W) }", d);
    CHECK(r3.changed.empty());
    CHECK(m.version("a") == 2);
    // A bad replacement leaves the module as it was.
    Diagnostics bad;
    auto r4 = add(m, "fn b(x: f32[3]) -> f32[3] { x @ x }", bad);
    CHECK_FALSE(r4.ok);
    CHECK(m.version("b") == 1);
    CHECK(m.fn("b")->body->type);
    CHECK(ir::type_str(m.fn("b")->body->type) == "f32[3]");
    // A changed param touches every entry that reads it.
    auto r5 = add(m, "param W : f32[3, 3] = zeros", d);
    REQUIRE(r5.ok);
    CHECK(r5.affected_entries == std::vector<std::string>{"ea"});
  }

  TEST_CASE("call graph: dependency cones and entries touched by a change") {
    ir::Module m;
    Diagnostics d;
    auto r = types::add_file(m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d);
    REQUIRE(r.ok);
    auto cone = m.dependency_cone("loss");
    for (const char* n : {"encode", "cell", "leaf", "node_loss", "logits", "U", "emb", "Tree", "V"})
      CHECK(cone.count(n) == 1);
    CHECK(cone.count("predict") == 0);
    CHECK(m.affected_entries({"cell"}) == std::vector<std::string>{"loss", "infer", "infer_nodes"});
    CHECK(m.affected_entries({"node_loss"}) == std::vector<std::string>{"loss", "infer"});
    CHECK(m.affected_entries({"predict"}) == std::vector<std::string>{"infer_nodes"});
    uint64_t v1 = m.cone_version("loss"), v2 = m.cone_version("infer_nodes");
    r = add(m, "fn node_loss(h: f32[150], y: i32[]) -> f32[] { cross_entropy(logits(h), y) * 1.0 }",
            d);
    REQUIRE(r.ok);
    CHECK(m.cone_version("loss") != v1);
    CHECK(m.cone_version("infer_nodes") == v2);
  }

  TEST_CASE("closures capture by slot, lambdas get parameter types from map and fold") {
    ir::Module m;
    Diagnostics d;
    auto r = add(m, R"(
fn scale(xs: List[f32[2]], k: f32[]) -> List[f32[2]] { map(fn x => x * k, xs) }
fn total(xs: List[f32[2]]) -> f32[2] { fold(fn (acc, x) => acc + x, zeros(2), xs) }
fn count(xs: List[Int]) -> Int { match xs { [] => 0, h :: t => 1 + count(t) } }
)",
                 d);
    INFO(d.render());
    REQUIRE(r.ok);
    const auto* call = m.fn("scale")->body->as<ir::Call>();
    REQUIRE(call);
    const auto* lam = call->args[0]->as<ir::Lambda>();
    REQUIRE(lam);
    REQUIRE(lam->captures.size() == 1);
    CHECK(lam->captures[0].kind == ir::VarRef::Kind::Local);
  }
}

} // namespace tests_types_check_test
