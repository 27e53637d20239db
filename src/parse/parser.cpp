// Recursive-descent parser of the pejit language. Design notes:
// - A syntax error is reported once, then an internal SyntaxError unwinds to the enclosing
//   declaration; recovery skips to the next token that can only start a declaration (`type`,
//   `dim`, `param`, `entry`, `fn NAME (`), always consuming at least one token, so the loop
//   terminates on any input. Nothing escapes the public functions.
// - Precedence climbing on doubled levels: binop_precedence(op) * 2, with `::` (cons,
//   right-associative) at 7, between comparisons (6, non-associative) and `+ -` (8).
// - Every recursive rule goes through a nesting guard (kMaxNesting); left-associative chains
//   and let sequences are bounded by kMaxChain, so the IR's depth is bounded too.
// - `-` directly before a numeric literal folds into a negative literal (so -2^63 parses),
//   unless the literal is followed by a postfix `(` or `.`.
#include "src/parse/parser.h"

#include "src/parse/parser_impl.h"

#include <optional>

namespace pejit::parse {
namespace detail {

std::vector<ir::Decl> Parser::program() {
  std::vector<ir::Decl> out;
  while (!at(Tok::Eof)) {
    if (diags_.error_count() - errors_at_start_ >= kMaxErrors) {
      diags_.error(tok_span(cur()), "too many errors; stopping here");
      break;
    }
    size_t start = pos_;
    try {
      out.push_back(decl());
      if (at(Tok::Semi))
        take();
    } catch (const SyntaxError&) {
      depth_ = 0;
      if (pos_ == start)
        take();
      while (!at(Tok::Eof) && !at_decl_start())
        take();
    }
  }
  return out;
}

Expr Parser::whole_expression() {
  try {
    Expr e = expr();
    if (!at(Tok::Eof))
      fail(cur(), "expected end of expression, found " + describe(cur()));
    return diags_.error_count() > errors_at_start_ ? nullptr : e;
  } catch (const SyntaxError&) {
    return nullptr;
  }
}

ir::Decl Parser::decl() {
  Span start = start_span();
  switch (cur().kind) {
  case Tok::KwType:
    return type_decl(start);
  case Tok::KwDim:
    return dim_decl(start);
  case Tok::KwParam:
    return param_decl(start);
  case Tok::KwFn:
  case Tok::KwEntry:
    return fn_decl(start);
  default:
    fail(cur(), "expected a declaration ('type', 'dim', 'param', 'fn' or 'entry'), found " +
                    describe(cur()));
  }
}

ir::Decl Parser::type_decl(const Span& start) {
  take();
  Span name_span = start_span();
  std::string name = expect_name("a type name");
  if (!is_upper(name))
    diags_.error(name_span, "type name '" + name + "' must start with an uppercase letter");
  expect(Tok::Assign, "after the type name");
  std::vector<ir::CtorDef> ctors;
  do {
    Span cs = start_span();
    std::string cname = expect_name("a constructor name");
    if (!is_upper(cname))
      diags_.error(cs, "constructor name '" + cname + "' must start with an uppercase letter");
    std::vector<ir::Field> fields;
    if (accept(Tok::LParen)) {
      while (!at(Tok::RParen)) {
        Span fs = start_span();
        std::string fname = expect_name("a field name");
        expect(Tok::Colon, "after the field name");
        Type t = type();
        fields.push_back(b::field(fname, t, from(fs)));
        if (!accept(Tok::Comma))
          break;
      }
      expect(Tok::RParen, "after the constructor's fields");
    }
    ctors.push_back(b::ctor(cname, std::move(fields), from(cs)));
  } while (accept(Tok::Bar));
  return b::type_decl(name, std::move(ctors), from(start));
}

ir::Decl Parser::dim_decl(const Span& start) {
  take();
  std::string name = expect_name("a dimension name");
  std::optional<int64_t> def;
  if (accept(Tok::Assign)) {
    const Token& t = expect(Tok::Int, "as the dimension's default");
    def = int_value(t, false);
  }
  return b::dim_decl(name, def, from(start));
}

ir::Decl Parser::param_decl(const Span& start) {
  take();
  std::string name = expect_name("a parameter name");
  expect(Tok::Colon, "after the parameter name");
  Type t = type();
  ir::Init init = b::init_zeros();
  if (accept(Tok::Assign))
    init = initializer();
  return b::param_decl(name, t, init, from(start));
}

ir::Init Parser::initializer() {
  const Token& t = cur();
  if (at(Tok::Name)) {
    std::string n(t.text);
    if (n == "zeros" || n == "ones" || n == "xavier") {
      take();
      return n == "zeros" ? b::init_zeros() : n == "ones" ? b::init_ones() : b::init_xavier();
    }
    if (n == "normal" || n == "uniform") {
      take();
      expect(Tok::LParen, ("after '" + n + "'").c_str());
      double a = number(n == "normal" ? "(the mean)" : "(the lower bound)");
      expect(Tok::Comma, "between the initializer's arguments");
      double c = number(n == "normal" ? "(the standard deviation)" : "(the upper bound)");
      expect(Tok::RParen, "after the initializer's arguments");
      return n == "normal" ? b::init_normal(a, c) : b::init_uniform(a, c);
    }
  }
  fail(t, "expected an initializer (zeros, ones, xavier, normal(mean, stddev) or "
          "uniform(low, high)), found " +
              describe(t));
}

ir::Decl Parser::fn_decl(const Span& start) {
  bool entry = take().kind == Tok::KwEntry;
  std::string name = expect_name(entry ? "an entry name" : "a function name");
  expect(Tok::LParen, "after the function name");
  std::vector<ir::FnParam> params;
  while (!at(Tok::RParen)) {
    Span ps = start_span();
    std::string pname = expect_name("a parameter name");
    expect(Tok::Colon, "after the parameter name (parameters need a type)");
    Type t = type();
    params.push_back(b::fn_param(pname, t, from(ps)));
    if (!accept(Tok::Comma))
      break;
  }
  expect(Tok::RParen, "after the parameters");
  expect(Tok::Arrow, "before the result type");
  Type ret = type();
  if (!at(Tok::LBrace))
    fail(cur(), "expected '{' to begin the body, found " + describe(cur()));
  Expr body = block();
  return b::fn_decl(name, std::move(params), ret, body, entry, from(start));
}

ir::Dim Parser::dim_expr() {
  Nest n(*this, "dimension");
  ir::Dim d = accept(Tok::Minus) ? dim_term().scaled(-1) : dim_term();
  for (;;) {
    if (accept(Tok::Plus))
      d = d + dim_term();
    else if (accept(Tok::Minus))
      d = d + dim_term().scaled(-1);
    else
      return d;
  }
}

ir::Dim Parser::dim_term() {
  // Sizes and coefficients stay below 2^40, so that sums and products of two never overflow.
  constexpr int64_t kMax = int64_t{1} << 40;
  auto small = [&](const ir::Dim& d) {
    bool ok = d.value > -kMax && d.value < kMax;
    for (const auto& t : d.terms)
      ok = ok && t.coeff > -kMax && t.coeff < kMax;
    return ok;
  };
  ir::Dim d = dim_factor();
  while (at(Tok::Star)) {
    const Token& star = take();
    ir::Dim f = dim_factor();
    if (d.is_named() && f.is_named())
      fail(star, "a dimension is a sum of integers and integer multiples of names: " + d.str() +
                     " * " + f.str() + " is a product of names");
    if (!small(d) || !small(f))
      fail(star, "dimension expression too large");
    d = d.is_named() ? d.scaled(f.value) : f.scaled(d.value);
    if (!small(d))
      fail(star, "dimension expression too large");
  }
  return d;
}

ir::Dim Parser::dim_factor() {
  if (at(Tok::Int)) {
    const Token& t = take();
    int64_t v = int_value(t, false);
    if (v >= (int64_t{1} << 40))
      fail(t, "dimension " + std::to_string(v) + " is too large");
    return ir::Dim::of(v);
  }
  if (at(Tok::Name))
    return ir::Dim::named(std::string(take().text));
  if (accept(Tok::LParen)) {
    ir::Dim d = dim_expr();
    expect(Tok::RParen, "after a dimension expression");
    return d;
  }
  fail(cur(), "expected a dimension (an integer, a name or an expression such as 2*H), found " +
                  describe(cur()));
}

Type Parser::type() {
  Nest n(*this, "type");
  const Token& t = cur();
  if (at(Tok::Name)) {
    const std::string s(t.text);
    if (s == "f32" || s == "i32") {
      take();
      expect(Tok::LBracket, ("after '" + s + "' (a tensor type needs its dimensions)").c_str());
      std::vector<ir::Dim> dims;
      if (!at(Tok::RBracket)) {
        do {
          dims.push_back(dim_expr());
        } while (accept(Tok::Comma));
      }
      expect(Tok::RBracket, "after the dimensions");
      return ir::t_tensor(s == "f32" ? ir::Elem::F32 : ir::Elem::I32, std::move(dims));
    }
    if (s == "Int")
      return take(), ir::t_int();
    if (s == "Bool")
      return take(), ir::t_bool();
    if (s == "List" && ahead(1).kind == Tok::LBracket) {
      take();
      take();
      Type e = type();
      expect(Tok::RBracket, "after the list's element type");
      return ir::t_list(e);
    }
    if (is_upper(s))
      return take(), ir::t_adt(s);
    fail(t, "expected a type, found " + describe(t));
  }
  if (accept(Tok::LParen)) {
    std::vector<Type> elems;
    bool trailing = false;
    while (!at(Tok::RParen)) {
      elems.push_back(type());
      trailing = accept(Tok::Comma);
      if (!trailing)
        break;
    }
    expect(Tok::RParen, "after the types");
    if (accept(Tok::Arrow))
      return ir::t_func(std::move(elems), type());
    if (elems.size() == 1 && !trailing)
      return elems[0];
    return ir::t_tuple(std::move(elems));
  }
  fail(t, "expected a type, found " + describe(t));
}

} // namespace detail

using detail::Parser;

std::vector<ir::Decl> parse_program(std::shared_ptr<const SourceFile> file, Diagnostics& diags) {
  return Parser(std::move(file), diags).program();
}

std::vector<ir::Decl> parse_program(std::string_view text, const std::string& name,
                                    Diagnostics& diags) {
  return parse_program(std::make_shared<const SourceFile>(SourceFile{name, std::string(text)}),
                       diags);
}

ir::Expr parse_expression(std::string_view text, const std::string& name, Diagnostics& diags) {
  auto file = std::make_shared<const SourceFile>(SourceFile{name, std::string(text)});
  return Parser(file, diags).whole_expression();
}

} // namespace pejit::parse
