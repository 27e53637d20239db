// Unit tests of the lexer and parser: tree shapes for precedence and associativity, literal
// edge cases, the list sugar, spans, and diagnostics for malformed input.
#include "tests/ir/ast_equal.h"
#include "src/ir/builder.h"
#include "src/parse/lexer.h"
#include "tests/parse/test_util.h"

#include <doctest/doctest.h>

#include <climits>

namespace tests_parse_parser_test {

using namespace pejit;
using namespace pejit::ir;
using namespace pejit::testing;
namespace b = pejit::ir::build;

namespace {

Expr parse_ok(const std::string& text) {
  Diagnostics diags;
  Expr e = parse::parse_expression(text, "t", diags);
  REQUIRE_MESSAGE(e, diags.render());
  REQUIRE_MESSAGE(!diags.has_errors(), diags.render());
  return e;
}

std::string parse_err(const std::string& text) {
  Diagnostics diags;
  Expr e = parse::parse_expression(text, "t", diags);
  CHECK(e == nullptr);
  REQUIRE(diags.has_errors());
  return diags.all().front().span.str() + ": " + diags.all().front().message;
}

void same(const Expr& got, const Expr& want) {
  std::string d = expr_diff(got, want);
  CHECK_MESSAGE(d.empty(), d << "\n got: " << print_expr(got) << "\nwant: " << print_expr(want));
}

Expr v(const char* n) {
  return b::var(n);
}

} // namespace

TEST_SUITE("parse") {
  TEST_CASE("lexer: tokens, projections vs floats, comments") {
    Diagnostics diags;
    auto file = std::make_shared<const SourceFile>(
        SourceFile{"t", "t.0.1 1.5 2e3 x::y /* c */ // d\n->=>==!=<=&&||"});
    auto toks = parse::lex(file, diags);
    CHECK(!diags.has_errors());
    std::vector<parse::Tok> kinds;
    for (const auto& t : toks)
      kinds.push_back(t.kind);
    using parse::Tok;
    std::vector<Tok> want = {Tok::Name,   Tok::Dot,      Tok::Int,  Tok::Dot,        Tok::Int,
                             Tok::Float,  Tok::Float,    Tok::Name, Tok::ColonColon, Tok::Name,
                             Tok::Arrow,  Tok::FatArrow, Tok::EqEq, Tok::Ne,         Tok::Le,
                             Tok::AndAnd, Tok::OrOr,     Tok::Eof};
    CHECK(kinds == want);
    CHECK(toks[5].float_value == 1.5);
    CHECK(toks[6].float_value == 2000.0);
    CHECK(toks[10].line == 2);
    CHECK(toks[10].col == 1);
  }

  TEST_CASE("precedence and associativity") {
    same(parse_ok("a + b * c"),
         b::binary(BinOp::Add, v("a"), b::binary(BinOp::Mul, v("b"), v("c"))));
    same(parse_ok("a - b - c"),
         b::binary(BinOp::Sub, b::binary(BinOp::Sub, v("a"), v("b")), v("c")));
    same(parse_ok("a @ b + c"),
         b::binary(BinOp::Add, b::binary(BinOp::MatMul, v("a"), v("b")), v("c")));
    same(parse_ok("a || b && c == d"),
         b::binary(BinOp::Or, v("a"),
                   b::binary(BinOp::And, v("b"), b::binary(BinOp::Eq, v("c"), v("d")))));
    same(parse_ok("a :: b :: c"), b::cons(v("a"), b::cons(v("b"), v("c"))));
    same(parse_ok("a + 1 :: b < c"),
         b::binary(BinOp::Lt, b::cons(b::binary(BinOp::Add, v("a"), b::int_lit(1)), v("b")),
                   v("c")));
    same(parse_ok("-a.0 * !f(x)"), b::binary(BinOp::Mul, b::unary(UnOp::Neg, b::proj(v("a"), 0)),
                                             b::unary(UnOp::Not, b::call("f", {v("x")}))));
    same(parse_ok("t.0.1"), b::proj(b::proj(v("t"), 0), 1));
    same(parse_ok("f(x)(y).2"), b::proj(b::call_expr(b::call("f", {v("x")}), {v("y")}), 2));
    CHECK(parse_err("a < b < c").find("cannot be chained") != std::string::npos);
    CHECK(parse_err("a == b != c").find("t:1:8:") == 0);
  }

  TEST_CASE("literals") {
    same(parse_ok("-1"), b::int_lit(-1));
    same(parse_ok("-9223372036854775808"), b::int_lit(INT64_MIN));
    same(parse_ok("9223372036854775807"), b::int_lit(INT64_MAX));
    same(parse_ok("-(1)"), b::unary(UnOp::Neg, b::int_lit(1)));
    same(parse_ok("- -1"), b::unary(UnOp::Neg, b::int_lit(-1)));
    same(parse_ok("-1(x)"), b::unary(UnOp::Neg, b::call_expr(b::int_lit(1), {v("x")})));
    same(parse_ok("a - 1"), b::binary(BinOp::Sub, v("a"), b::int_lit(1)));
    same(parse_ok("0.1 + 2.5e-3"), b::binary(BinOp::Add, b::float_lit(0.1), b::float_lit(2.5e-3)));
    same(parse_ok("true && !false"),
         b::binary(BinOp::And, b::bool_lit(true), b::unary(UnOp::Not, b::bool_lit(false))));
    CHECK(parse_err("9223372036854775808") == "t:1:1: integer literal out of range");
    CHECK(parse_err("1 + 1e999") == "t:1:5: float literal out of range");
    same(parse_ok("1e-999"), b::float_lit(0.0));
  }

  TEST_CASE("compound expressions") {
    same(parse_ok("()"), b::tuple({}));
    same(parse_ok("(a,)"), b::tuple({v("a")}));
    same(parse_ok("(a)"), v("a"));
    same(parse_ok("[]"), b::list({}));
    same(parse_ok("[a, b]"), b::list({v("a"), v("b")}));
    same(parse_ok("fn x => x + 1"),
         b::lambda(std::vector<std::string>{"x"}, b::binary(BinOp::Add, v("x"), b::int_lit(1))));
    same(parse_ok("fn (x: Int, y) => y"),
         b::lambda({b::lparam("x", t_int()), b::lparam("y")}, v("y")));
    same(parse_ok("{ let (a, _) = p; let c: Int = a; c }"),
         b::let(b::pat_tuple({b::pat_name("a"), b::pat_wild()}), v("p"),
                b::let(b::pat_name("c"), v("a"), v("c"), t_int())));
    same(parse_ok("if a { 1 } else if b { 2 } else { 3 }"),
         b::if_(v("a"), b::int_lit(1), b::if_(v("b"), b::int_lit(2), b::int_lit(3))));
    same(parse_ok("match xs { [] => 0, h :: _ => h, Leaf(w, _) => w _ => 1 }"),
         b::match(v("xs"), {b::arm("Nil", {}, b::int_lit(0)), b::arm("Cons", {"h", "_"}, v("h")),
                            b::arm("Leaf", {"w", "_"}, v("w")), b::wild_arm(b::int_lit(1))}));
    same(parse_ok("(if a { 1 } else { 2 }) + 3"),
         b::binary(BinOp::Add, b::if_(v("a"), b::int_lit(1), b::int_lit(2)), b::int_lit(3)));
  }

  TEST_CASE("types") {
    Diagnostics diags;
    auto decls = parse::parse_program(
        "param p: (f32[V, 3], (Int), (Bool,), List[i32[]], ()) = zeros\n"
        "fn f(g: (Int) -> (Int) -> Bool, h: ((Int, Int)) -> Int) -> () -> Int { g }\n",
        "t", diags);
    REQUIRE_MESSAGE(!diags.has_errors(), diags.render());
    REQUIRE(decls.size() == 2);
    CHECK(type_str(decls[0].param->type) == "(f32[V, 3], Int, (Bool,), List[i32[]], ())");
    CHECK(type_str(decls[1].fn->params[0].type) == "(Int) -> (Int) -> Bool");
    CHECK(type_str(decls[1].fn->params[1].type) == "((Int, Int)) -> Int");
    CHECK(type_str(decls[1].fn->ret) == "() -> Int");
  }

  TEST_CASE("dimension expressions: affine in names, kept in a normal form, printed back") {
    Diagnostics diags;
    auto decls = parse::parse_program("param p: f32[2*H, H+H, 5*(H+1)-5, K+2*H-1, -H+300, 4*3] "
                                      "= zeros\n",
                                      "t", diags);
    REQUIRE_MESSAGE(!diags.has_errors(), diags.render());
    const auto& t = decls[0].param->type;
    CHECK(type_str(t) == "f32[2*H, 2*H, 5*H, 2*H+K-1, -H+300, 12]");
    CHECK(t->dims[0] == t->dims[1]);
    CHECK(t->dims[5] == Dim::of(12));
    // What it prints parses back to the same dimensions.
    Diagnostics again;
    auto back = parse::parse_program("param q: " + type_str(t) + " = zeros\n", "t", again);
    REQUIRE_MESSAGE(!again.has_errors(), again.render());
    CHECK(type_equal(back[0].param->type, t));
    auto d = t->dims[3];
    CHECK(d.eval([](const std::string& n) { return std::optional<int64_t>(n == "H" ? 150 : 7); }) ==
          306);
    CHECK(Dim::named("H").scaled(5).divided(5) == Dim::named("H"));
    CHECK_FALSE((Dim::named("H") + Dim::of(1)).divided(5).has_value());

    auto err = [](const std::string& text) {
      Diagnostics dd;
      parse::parse_program(text, "t", dd);
      REQUIRE(dd.has_errors());
      return dd.all().front().span.str() + ": " + dd.all().front().message;
    };
    CHECK(err("param p: f32[H*K] = zeros\n") ==
          "t:1:15: a dimension is a sum of integers and integer multiples of names: H * K is a "
          "product of names");
    CHECK(err("param p: f32[2*] = zeros\n").find("expected a dimension") != std::string::npos);
    CHECK(err("param p: f32[1099511627776] = zeros\n").find("too large") != std::string::npos);
  }

  TEST_CASE("declarations and initializers") {
    Diagnostics diags;
    auto decls = parse::parse_program("dim V; dim H = 64\n param a: f32[] param b: f32[2] = "
                                      "normal(-1, 0.5) param c: f32[2] = uniform(-2.5, 3)",
                                      "t", diags);
    REQUIRE_MESSAGE(!diags.has_errors(), diags.render());
    REQUIRE(decls.size() == 5);
    CHECK(!decls[0].dim->default_value);
    CHECK(decls[1].dim->default_value == 64);
    CHECK(decls[2].param->init.kind == Init::Kind::Zeros);
    CHECK(decls[3].param->init.kind == Init::Kind::Normal);
    CHECK(decls[3].param->init.a == -1.0);
    CHECK(decls[3].param->init.b == 0.5);
    CHECK(decls[4].param->init.kind == Init::Kind::Uniform);
    CHECK(decls[4].param->init.a == -2.5);
  }

  TEST_CASE("spans cover each node's text") {
    Diagnostics diags;
    auto decls = parse::parse_program("fn f(x: Int) -> Int {\n  let y = g(x, 12);\n  y.0 + -3\n}",
                                      "s.pe", diags);
    REQUIRE_MESSAGE(!diags.has_errors(), diags.render());
    const FnDecl& f = *decls.at(0).fn;
    auto at = [](const Span& s) {
      return std::to_string(s.line) + ":" + std::to_string(s.col) + "-" +
             std::to_string(s.end_line) + ":" + std::to_string(s.end_col);
    };
    CHECK(at(f.span) == "1:1-4:2");
    CHECK(f.span.file->name == "s.pe");
    CHECK(at(f.params[0].span) == "1:6-1:12");
    const Let& l = f.body->cast<Let>();
    CHECK(at(l.span) == "2:3-3:11");
    CHECK(at(l.pattern.span) == "2:7-2:8");
    const Call& c = l.value->cast<Call>();
    CHECK(at(c.span) == "2:11-2:19");
    CHECK(at(c.callee->span) == "2:11-2:12");
    CHECK(at(c.args[1]->span) == "2:16-2:18");
    const Binary& sum = l.body->cast<Binary>();
    CHECK(at(sum.span) == "3:3-3:11");
    CHECK(at(sum.lhs->span) == "3:3-3:6");
    CHECK(at(sum.rhs->span) == "3:9-3:11");
  }

  TEST_CASE("recovery reports several errors and keeps the good declarations") {
    Diagnostics diags;
    auto decls = parse::parse_program("fn a() -> Int { 1 + }\nfn b() -> Int { 2 }\n"
                                      "fn c( -> Int { 3 }\nentry d() -> Int { b() }\n",
                                      "r.pe", diags);
    CHECK(diags.error_count() == 2);
    REQUIRE(decls.size() == 2);
    CHECK(decls[0].name() == "b");
    CHECK(decls[1].name() == "d");
    CHECK(diags.render().find("r.pe:1:21: error: expected an expression, found '}'") !=
          std::string::npos);
  }

  TEST_CASE("nesting limits give a diagnostic, not a stack overflow") {
    std::string deep(100000, '(');
    CHECK(parse_err(deep).find("nested too deeply") != std::string::npos);
    std::string chain = "1";
    for (int i = 0; i < 10000; ++i)
      chain += " + 1";
    CHECK(parse_err(chain).find("nested too deeply") != std::string::npos);
    std::string ok = "1";
    for (int i = 0; i < 1000; ++i)
      ok += " + 1";
    parse_ok(ok);
    std::string nest = std::string(100, '(') + "1" + std::string(100, ')');
    parse_ok(nest);
  }
}

TEST_SUITE("parse") {
  TEST_CASE("bad bytes: coalesced, capped, and never fatal") {
    Diagnostics diags;
    std::string junk;
    for (int i = 0; i < 5000; ++i)
      junk += "a$";
    auto decls = parse::parse_program(junk + "\x01\xff\xfe", "junk.pe", diags);
    CHECK(decls.empty());
    CHECK(diags.error_count() <= 60);
    CHECK(diags.render().find("too many invalid characters") != std::string::npos);
    Diagnostics d2;
    std::string nul("fn f() -> Int { 1 }\0\0\0fn g() -> Int { 2 }", 41);
    auto two = parse::parse_program(nul, "nul.pe", d2);
    CHECK(d2.error_count() == 1);
    CHECK(two.size() == 2);
  }
}

} // namespace tests_parse_parser_test
