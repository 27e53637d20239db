// Tests of the builder API: a module built without text covering every construct prints,
// parses back to a structurally equal module and prints identically.
#include "tests/ir/ast_equal.h"
#include "src/ir/builder.h"
#include "src/parse/parser.h"

#include <doctest/doctest.h>

namespace tests_ir_builder_test {

using namespace pejit;
using namespace pejit::ir;
using namespace pejit::testing;
namespace b = pejit::ir::build;

namespace {

Expr v(const char* n) {
  return b::var(n);
}

std::vector<Decl> built_program() {
  std::vector<Decl> out;
  Type tree = t_adt("Tree");
  out.push_back(b::type_decl(
      "Tree",
      {b::ctor("Leaf", {b::field("word", t_i32({})), b::field("label", t_i32({}))}),
       b::ctor("Node", {b::field("left", tree), b::field("right", tree)}), b::ctor("Empty")}));
  out.push_back(b::dim_decl("V"));
  out.push_back(b::dim_decl("H", 150));
  out.push_back(b::param_decl("emb", t_tensor(Elem::F32, {Dim::named("V"), Dim::named("H")}),
                              b::init_normal(0.0, 0.1)));
  out.push_back(b::param_decl("w", t_f32({3, 3}), b::init_xavier()));
  out.push_back(b::param_decl("o", t_f32({3}), b::init_ones()));
  out.push_back(b::param_decl("z", t_i32({}), b::init_zeros()));
  out.push_back(b::param_decl("u", t_f32({2}), b::init_uniform(-0.25, 1e-8)));

  // fn size(t: Tree) -> Int { match t { Leaf(_, _) => 1, Node(l, r) => size(l) + size(r), _ => 0 }
  // }
  out.push_back(b::fn_decl("size", {b::fn_param("t", tree)}, t_int(),
                           b::match(v("t"), {b::arm("Leaf", {"_", "_"}, b::int_lit(1)),
                                             b::arm("Node", {"l", "r"},
                                                    b::binary(BinOp::Add, b::call("size", {v("l")}),
                                                              b::call("size", {v("r")}))),
                                             b::wild_arm(b::int_lit(0))})));

  Type fty = t_func({t_int()}, t_int());
  Expr body = b::let(
      b::pat_name("f"), b::lambda({b::lparam("x", t_int())}, b::binary(BinOp::Mul, v("x"), v("k"))),
      b::let(
          b::pat_tuple({b::pat_name("a"), b::pat_tuple({b::pat_wild(), b::pat_name("c")})}),
          b::tuple({b::int_lit(1), b::tuple({b::bool_lit(true), b::float_lit(-0.5)})}),
          b::let(b::pat_name("g"), v("f"),
                 b::if_(b::binary(BinOp::And, b::binary(BinOp::Le, v("a"), b::int_lit(-3)),
                                  b::unary(UnOp::Not, b::bool_lit(false))),
                        b::call_expr(v("g"), {b::proj(b::tuple({v("a"), v("c")}), 0)}),
                        b::match(b::cons(v("a"), b::list({b::int_lit(2), b::int_lit(3)})),
                                 {b::arm("Nil", {}, b::int_lit(0)),
                                  b::arm("Cons", {"h", "t"},
                                         b::call("fold",
                                                 {b::lambda(std::vector<std::string>{"s", "y"},
                                                            b::binary(BinOp::Mod, v("s"), v("y"))),
                                                  v("h"), v("t")}))})),
                 fty)));
  out.push_back(b::fn_decl("closures",
                           {b::fn_param("k", t_int()), b::fn_param("xs", t_list(t_int()))}, t_int(),
                           body, /*is_entry=*/true));
  return out;
}

std::string print_all(const std::vector<Decl>& ds) {
  Module m;
  for (const auto& d : ds)
    m.put(d);
  return print_module(m);
}

} // namespace

TEST_SUITE("ir") {
  TEST_CASE("builder: built module prints, parses back equal and prints the same") {
    auto decls = built_program();
    std::string p1 = print_all(decls);
    Diagnostics diags;
    auto back = parse::parse_program(p1, "built.pe", diags);
    REQUIRE_MESSAGE(!diags.has_errors(), diags.render() << "\n" << p1);
    std::string d = decls_diff(decls, back);
    CHECK_MESSAGE(d.empty(), d << "\n" << p1);
    CHECK(print_all(back) == p1);
    CHECK(p1.find("param u: f32[2] = uniform(-0.25, 1.0e-08)") != std::string::npos);
    CHECK(p1.find("entry closures(k: Int, xs: List[Int]) -> Int {") != std::string::npos);
    CHECK(p1.find("let g: (Int) -> Int = f;") != std::string::npos);
  }

  TEST_CASE("builder: module bookkeeping sees built declarations") {
    Module m;
    for (const auto& d : built_program())
      m.put(d);
    CHECK(m.entries() == std::vector<std::string>{"closures"});
    CHECK(m.ctor("Node") == std::pair<int, int>{0, 1});
    CHECK(m.dim_index("H") == 1);
    CHECK(m.version("size") == 1);
    CHECK_FALSE(m.put(built_program()[8])); // same printed form: unchanged
  }
}

} // namespace tests_ir_builder_test
