// Tests of the printer on trees the parser cannot produce directly (builder-made): minimal
// parentheses, negative literals, the list sugar, and floats that read back bit-exactly.
#include "tests/ir/ast_equal.h"
#include "src/ir/builder.h"
#include "src/parse/parser.h"

#include <doctest/doctest.h>

#include <cfloat>
#include <climits>
#include <cmath>

namespace tests_ir_printer_test {

using namespace pejit;
using namespace pejit::ir;
using namespace pejit::testing;
namespace b = pejit::ir::build;

namespace {

Expr v(const char* n) {
  return b::var(n);
}

/// Prints `e`, checks the text, parses it back and checks the trees are equal.
void prints_as(const Expr& e, const std::string& want) {
  std::string got = print_expr(e);
  CHECK(got == want);
  Diagnostics diags;
  Expr back = parse::parse_expression(got, "p", diags);
  REQUIRE_MESSAGE(back, diags.render());
  std::string d = expr_diff(e, back);
  CHECK_MESSAGE(d.empty(), got << ": " << d);
}

} // namespace

TEST_SUITE("ir") {
  TEST_CASE("printer: minimal parentheses") {
    prints_as(b::binary(BinOp::Sub, v("a"), b::binary(BinOp::Sub, v("b"), v("c"))), "a - (b - c)");
    prints_as(b::binary(BinOp::Sub, b::binary(BinOp::Sub, v("a"), v("b")), v("c")), "a - b - c");
    prints_as(b::binary(BinOp::Mul, b::binary(BinOp::Add, v("a"), v("b")), v("c")), "(a + b) * c");
    prints_as(b::binary(BinOp::Lt, b::binary(BinOp::Lt, v("a"), v("b")), v("c")), "(a < b) < c");
    prints_as(b::binary(BinOp::Eq, v("a"), b::binary(BinOp::Ne, v("b"), v("c"))), "a == (b != c)");
    prints_as(b::cons(b::cons(v("a"), v("b")), v("c")), "(a :: b) :: c");
    prints_as(b::cons(v("a"), b::cons(v("b"), b::list({}))), "a :: b :: []");
    prints_as(b::binary(BinOp::Add, b::cons(v("a"), v("b")), v("c")), "(a :: b) + c");
    prints_as(b::unary(UnOp::Neg, b::binary(BinOp::Add, v("a"), v("b"))), "-(a + b)");
    prints_as(b::unary(UnOp::Not, b::unary(UnOp::Neg, v("a"))), "!-a");
    prints_as(b::proj(b::unary(UnOp::Neg, v("a")), 0), "(-a).0");
    prints_as(b::call_expr(b::lambda(std::vector<std::string>{"x"}, v("x")), {b::int_lit(1)}),
              "(fn x => x)(1)");
    prints_as(b::binary(BinOp::Add, b::lambda(std::vector<std::string>{"x"}, v("x")), v("y")),
              "(fn x => x) + y");
    prints_as(b::binary(BinOp::Add, v("y"), b::if_(v("c"), v("a"), v("b"))),
              "y + (if c {\n  a\n} else {\n  b\n})");
    prints_as(b::call("f", {b::lambda(std::vector<std::string>{"x"}, v("x")), v("xs")}),
              "f(fn x => x, xs)");
    prints_as(b::tuple({v("a")}), "(a,)");
    prints_as(b::tuple({}), "()");
    prints_as(b::call("Cons", {v("a")}), "Cons(a)");
  }

  TEST_CASE("printer: negative literals and literal operands") {
    prints_as(b::int_lit(-1), "-1");
    prints_as(b::int_lit(INT64_MIN), "-9223372036854775808");
    prints_as(b::unary(UnOp::Neg, b::int_lit(1)), "-(1)");
    prints_as(b::unary(UnOp::Neg, b::int_lit(-1)), "- -1");
    prints_as(b::unary(UnOp::Neg, b::float_lit(2.5)), "-(2.5)");
    prints_as(b::binary(BinOp::Sub, v("a"), b::int_lit(-1)), "a - -1");
    prints_as(b::proj(b::int_lit(1), 0), "(1).0");
    prints_as(b::proj(b::int_lit(-1), 0), "(-1).0");
    prints_as(b::call_expr(b::int_lit(-1), {}), "(-1)()");
    prints_as(b::unary(UnOp::Neg, b::proj(b::int_lit(1), 0)), "-(1).0");
  }

  TEST_CASE("printer: floats read back bit-exactly") {
    for (double x : {0.0, -0.0, 0.1, 1.0, -2.5, 1e300, 1e-300, 123456789.125, 5e-324, DBL_MAX,
                     DBL_MIN, 1.0 / 3.0, 3.14159, 1e21, 1e22, 100.0}) {
      CAPTURE(x);
      std::string s = print_expr(b::float_lit(x));
      CHECK(s.find('.') != std::string::npos);
      prints_as(b::float_lit(x), s);
    }
    CHECK(print_expr(b::float_lit(1e300)) == "1.0e+300");
    CHECK(print_expr(b::float_lit(0.1)) == "0.1");
    CHECK(print_expr(b::float_lit(100.0)) == "100.0");
  }

  TEST_CASE("printer: blocks, match and if layout") {
    Expr e = b::let(
        b::pat_tuple({b::pat_name("a"), b::pat_wild()}), v("p"),
        b::match(v("a"), {b::arm("Cons", {"h", "_"}, v("h")), b::arm("Nil", {}, b::int_lit(0)),
                          b::arm("Leaf", {}, b::int_lit(1)),
                          b::wild_arm(b::let(b::pat_name("z"), b::int_lit(2), v("z")))}));
    prints_as(e, "{\n"
                 "  let (a, _) = p;\n"
                 "  match a {\n"
                 "    h :: _ => h\n"
                 "    [] => 0\n"
                 "    Leaf => 1\n"
                 "    _ => {\n"
                 "      let z = 2;\n"
                 "      z\n"
                 "    }\n"
                 "  }\n"
                 "}");
  }
}

} // namespace tests_ir_printer_test
