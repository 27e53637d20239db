// The parser's expression rules (the Parser class is in parser_impl.h; the design note on
// precedence, negative literals and nesting bounds is at the top of parser.cpp): operators by
// precedence climbing, postfix calls and projections, literals, blocks of lets, lambdas, if,
// match and patterns.
#include "src/parse/parser_impl.h"

#include <optional>

namespace pejit::parse::detail {

namespace {

struct OpInfo {
  int level = -1; ///< doubled precedence; -1: not a binary operator
  bool cons = false;
  ir::BinOp op = ir::BinOp::Add;
};

OpInfo op_info(Tok t) {
  auto bin = [](ir::BinOp op) { return OpInfo{2 * ir::binop_precedence(op), false, op}; };
  switch (t) {
  case Tok::OrOr:
    return bin(ir::BinOp::Or);
  case Tok::AndAnd:
    return bin(ir::BinOp::And);
  case Tok::Lt:
    return bin(ir::BinOp::Lt);
  case Tok::Le:
    return bin(ir::BinOp::Le);
  case Tok::Gt:
    return bin(ir::BinOp::Gt);
  case Tok::Ge:
    return bin(ir::BinOp::Ge);
  case Tok::EqEq:
    return bin(ir::BinOp::Eq);
  case Tok::Ne:
    return bin(ir::BinOp::Ne);
  case Tok::ColonColon:
    return OpInfo{7, true, ir::BinOp::Add};
  case Tok::Plus:
    return bin(ir::BinOp::Add);
  case Tok::Minus:
    return bin(ir::BinOp::Sub);
  case Tok::Star:
    return bin(ir::BinOp::Mul);
  case Tok::Slash:
    return bin(ir::BinOp::Div);
  case Tok::Percent:
    return bin(ir::BinOp::Mod);
  case Tok::At:
    return bin(ir::BinOp::MatMul);
  default:
    return {};
  }
}

bool is_comparison_level(int level) {
  return level == 6;
}

} // namespace

Expr Parser::expr() {
  Nest n(*this, "expression");
  return binary(0);
}

Expr Parser::binary(int min_level) {
  Expr lhs = unary();
  int chain = 0;
  while (true) {
    OpInfo op = op_info(cur().kind);
    if (op.level < 0 || op.level < min_level)
      break;
    const Token& optok = take();
    if (op.cons) {
      Nest n(*this, "expression");
      Expr rhs = binary(op.level); // right-associative
      Span s = lhs->span;
      s.end_line = rhs->span.end_line;
      s.end_col = rhs->span.end_col;
      lhs = b::call_expr(b::var("Cons", tok_span(optok)), {lhs, rhs}, s);
    } else {
      Expr rhs = binary(op.level + 1);
      Span s = lhs->span;
      s.end_line = rhs->span.end_line;
      s.end_col = rhs->span.end_col;
      lhs = b::binary(op.op, lhs, rhs, s);
      if (is_comparison_level(op.level) && is_comparison_level(op_info(cur().kind).level))
        fail(cur(), "comparison operators cannot be chained; add parentheses");
    }
    count_chain(chain, "expression");
  }
  return lhs;
}

Expr Parser::unary() {
  Span start = start_span();
  if (at(Tok::Minus) && (ahead(1).kind == Tok::Int || ahead(1).kind == Tok::Float) &&
      ahead(2).kind != Tok::LParen && ahead(2).kind != Tok::Dot) {
    take();
    const Token& lit = take();
    if (lit.kind == Tok::Int)
      return b::int_lit(int_value(lit, true), from(start));
    return b::float_lit(-lit.float_value, from(start));
  }
  if (at(Tok::Minus) || at(Tok::Bang)) {
    ir::UnOp op = take().kind == Tok::Minus ? ir::UnOp::Neg : ir::UnOp::Not;
    Nest n(*this, "expression");
    Expr e = unary();
    return b::unary(op, e, from(start));
  }
  return postfix();
}

Expr Parser::postfix() {
  Span start = start_span();
  Expr e = primary();
  int chain = 0;
  while (true) {
    if (accept(Tok::LParen)) {
      std::vector<Expr> args = expr_list(Tok::RParen, "after the arguments");
      e = b::call_expr(e, std::move(args), from(start));
    } else if (accept(Tok::Dot)) {
      const Token& t = expect(Tok::Int, "(a tuple index) after '.'");
      if (t.out_of_range || t.int_value > uint64_t(INT_MAX))
        diags_.error(tok_span(t), "tuple index out of range");
      e = b::proj(e, static_cast<int>(std::min<uint64_t>(t.int_value, INT_MAX)), from(start));
    } else {
      break;
    }
    count_chain(chain, "expression");
  }
  return e;
}

std::vector<Expr> Parser::expr_list(Tok close, const char* context) {
  std::vector<Expr> out;
  while (!at(close)) {
    out.push_back(expr());
    if (!accept(Tok::Comma))
      break;
  }
  expect(close, context);
  return out;
}

Expr Parser::primary() {
  Span start = start_span();
  const Token& t = cur();
  switch (t.kind) {
  // Each token is taken before from() reads the end of the last consumed token.
  case Tok::Int: {
    int64_t value = int_value(take(), false);
    return b::int_lit(value, from(start));
  }
  case Tok::Float: {
    double value = take().float_value;
    return b::float_lit(value, from(start));
  }
  case Tok::KwTrue:
  case Tok::KwFalse: {
    bool value = take().kind == Tok::KwTrue;
    return b::bool_lit(value, from(start));
  }
  case Tok::Name: {
    std::string name(take().text);
    return b::var(name, from(start));
  }
  case Tok::LParen: {
    take();
    if (accept(Tok::RParen))
      return b::tuple({}, from(start));
    Expr first = expr();
    if (accept(Tok::RParen))
      return first;
    if (!at(Tok::Comma))
      fail(cur(), "expected ')' or ',' in parentheses, found " + describe(cur()));
    take();
    std::vector<Expr> elems = expr_list(Tok::RParen, "after the tuple's elements");
    elems.insert(elems.begin(), first);
    return b::tuple(std::move(elems), from(start));
  }
  case Tok::LBracket: {
    take();
    std::vector<Expr> elems = expr_list(Tok::RBracket, "after the list's elements");
    return b::list(std::move(elems), from(start));
  }
  case Tok::LBrace:
    return block();
  case Tok::KwFn:
    return lambda();
  case Tok::KwIf:
    return if_expr();
  case Tok::KwMatch:
    return match_expr();
  default:
    fail(t, "expected an expression, found " + describe(t));
  }
}

Expr Parser::block() {
  Nest n(*this, "expression");
  expect(Tok::LBrace, "to begin a block");
  struct Binding {
    Span start;
    ir::Pattern pat;
    std::optional<Type> annot;
    Expr value;
  };
  std::vector<Binding> lets;
  int chain = 0;
  while (at(Tok::KwLet)) {
    Span s = start_span();
    take();
    ir::Pattern p = pattern();
    std::optional<Type> annot;
    if (accept(Tok::Colon))
      annot = type();
    expect(Tok::Assign, "in 'let'");
    Expr v = expr();
    expect(Tok::Semi, "after the let's value");
    lets.push_back({s, std::move(p), std::move(annot), std::move(v)});
    count_chain(chain, "block");
  }
  if (at(Tok::RBrace))
    fail(cur(), "expected an expression at the end of the block");
  Expr body = expr();
  expect(Tok::RBrace, "at the end of the block");
  for (size_t i = lets.size(); i-- > 0;) {
    Span s = lets[i].start;
    s.end_line = body->span.end_line;
    s.end_col = body->span.end_col;
    body = b::let(std::move(lets[i].pat), lets[i].value, body, lets[i].annot, s);
  }
  return body;
}

ir::Pattern Parser::pattern() {
  Nest n(*this, "pattern");
  Span start = start_span();
  if (at(Tok::Name)) {
    std::string name(take().text);
    return b::pat_name(name, from(start));
  }
  if (accept(Tok::Underscore))
    return b::pat_wild(from(start));
  if (accept(Tok::LParen)) {
    std::vector<ir::Pattern> elems;
    bool trailing = false;
    while (!at(Tok::RParen)) {
      elems.push_back(pattern());
      trailing = accept(Tok::Comma);
      if (!trailing)
        break;
    }
    expect(Tok::RParen, "after the tuple pattern");
    if (elems.size() == 1 && !trailing)
      return elems[0];
    return b::pat_tuple(std::move(elems), from(start));
  }
  fail(cur(), "expected a pattern (a name, '_' or a tuple of patterns), found " + describe(cur()));
}

Expr Parser::lambda() {
  Span start = start_span();
  take(); // fn
  std::vector<ir::LambdaParam> params;
  if (at(Tok::Name)) {
    Span ps = start_span();
    std::string name(take().text);
    params.push_back(b::lparam(name, std::nullopt, from(ps)));
  } else if (accept(Tok::LParen)) {
    while (!at(Tok::RParen)) {
      Span ps = start_span();
      std::string name = expect_name("a lambda parameter name");
      std::optional<Type> annot;
      if (accept(Tok::Colon))
        annot = type();
      params.push_back(b::lparam(name, annot, from(ps)));
      if (!accept(Tok::Comma))
        break;
    }
    expect(Tok::RParen, "after the lambda's parameters");
  } else {
    fail(cur(), "expected lambda parameters (a name or '(' ... ')'), found " + describe(cur()));
  }
  expect(Tok::FatArrow, "after the lambda's parameters");
  Expr body = expr();
  return b::lambda(std::move(params), body, from(start));
}

Expr Parser::if_expr() {
  Nest n(*this, "expression");
  Span start = start_span();
  take(); // if
  Expr cond = expr();
  if (!at(Tok::LBrace))
    fail(cur(), "expected '{' after the condition, found " + describe(cur()));
  Expr then_e = block();
  expect(Tok::KwElse, "after the 'if' branch ('if' needs an 'else')");
  Expr else_e = at(Tok::KwIf) ? if_expr() : block();
  return b::if_(cond, then_e, else_e, from(start));
}

Expr Parser::match_expr() {
  Span start = start_span();
  take(); // match
  Expr scrutinee = expr();
  expect(Tok::LBrace, "after the match's scrutinee");
  std::vector<ir::MatchArm> arms;
  while (!at(Tok::RBrace)) {
    arms.push_back(match_arm());
    accept(Tok::Comma);
  }
  if (arms.empty())
    fail(cur(), "a match needs at least one arm");
  take(); // }
  return b::match(scrutinee, std::move(arms), from(start));
}

std::pair<std::string, Span> Parser::binder() {
  Span s = start_span();
  if (at(Tok::Name)) {
    std::string name(take().text);
    return {name, from(s)};
  }
  if (accept(Tok::Underscore))
    return {"_", from(s)};
  fail(cur(), "expected a name or '_' in the pattern, found " + describe(cur()));
}

ir::MatchArm Parser::match_arm() {
  Span start = start_span();
  ir::MatchArm arm;
  bool name_or_wild = at(Tok::Name) || at(Tok::Underscore);
  if (name_or_wild && ahead(1).kind == Tok::ColonColon) {
    auto h = binder();
    take(); // ::
    auto t = binder();
    arm.ctor = "Cons";
    arm.binders = {h.first, t.first};
    arm.binder_spans = {h.second, t.second};
  } else if (accept(Tok::Underscore)) {
    // wildcard arm: ctor stays empty
  } else if (accept(Tok::LBracket)) {
    expect(Tok::RBracket, "in the empty-list pattern '[]'");
    arm.ctor = "Nil";
  } else if (at(Tok::Name)) {
    Span cs = start_span();
    arm.ctor = std::string(take().text);
    if (!is_upper(arm.ctor))
      diags_.error(from(cs), "expected a constructor in the pattern, found '" + arm.ctor +
                                 "' (constructors start with an uppercase letter)");
    if (accept(Tok::LParen)) {
      while (!at(Tok::RParen)) {
        auto [name, s] = binder();
        arm.binders.push_back(name);
        arm.binder_spans.push_back(s);
        if (!accept(Tok::Comma))
          break;
      }
      expect(Tok::RParen, "after the pattern's binders");
    }
  } else {
    fail(cur(),
         "expected a match arm pattern (Ctor(a, b), _, [] or h :: t), found " + describe(cur()));
  }
  expect(Tok::FatArrow, "after the pattern");
  arm.body = expr();
  arm.span = from(start);
  return arm;
}

} // namespace pejit::parse::detail
