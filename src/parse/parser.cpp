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

#include "src/ir/builder.h"
#include "src/parse/lexer.h"

#include <climits>
#include <optional>

namespace pejit::parse {

namespace b = ir::build;
using ir::Expr;
using ir::Type;

namespace {

constexpr size_t kMaxErrors = 50;

struct SyntaxError {};

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
bool is_upper(const std::string& s) {
  return !s.empty() && s[0] >= 'A' && s[0] <= 'Z';
}

class Parser {
public:
  Parser(std::shared_ptr<const SourceFile> file, Diagnostics& diags)
      : file_(std::move(file)), diags_(diags), errors_at_start_(diags.error_count()) {
    toks_ = lex(file_, diags_);
  }

  std::vector<ir::Decl> program() {
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

  Expr whole_expression() {
    try {
      Expr e = expr();
      if (!at(Tok::Eof))
        fail(cur(), "expected end of expression, found " + describe(cur()));
      return diags_.error_count() > errors_at_start_ ? nullptr : e;
    } catch (const SyntaxError&) {
      return nullptr;
    }
  }

private:
  // ---- tokens and spans -------------------------------------------------------------------
  const Token& cur() const { return toks_[pos_]; }
  const Token& ahead(size_t k) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  bool at(Tok k) const { return cur().kind == k; }
  const Token& take() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size())
      ++pos_;
    prev_end_line_ = t.end_line;
    prev_end_col_ = t.end_col;
    return t;
  }
  bool accept(Tok k) {
    if (!at(k))
      return false;
    take();
    return true;
  }

  Span tok_span(const Token& t) const {
    Span s;
    s.file = file_;
    s.line = t.line;
    s.col = t.col;
    s.end_line = t.end_line;
    s.end_col = t.end_col;
    return s;
  }
  /// From the start of `start` to the end of the last consumed token.
  Span from(const Span& start) const {
    Span s = start;
    s.end_line = prev_end_line_;
    s.end_col = prev_end_col_;
    return s;
  }
  Span start_span() const { return tok_span(cur()); }

  static std::string describe(const Token& t) {
    switch (t.kind) {
    case Tok::Name:
      return "identifier '" + std::string(t.text) + "'";
    case Tok::Int:
    case Tok::Float:
      return std::string(tok_name(t.kind)) + " '" + std::string(t.text) + "'";
    default:
      return tok_name(t.kind);
    }
  }

  [[noreturn]] void fail(const Token& t, std::string msg) {
    diags_.error(tok_span(t), std::move(msg));
    throw SyntaxError{};
  }
  const Token& expect(Tok k, const char* context) {
    if (!at(k)) {
      fail(cur(),
           std::string("expected ") + tok_name(k) + " " + context + ", found " + describe(cur()));
    }
    return take();
  }
  std::string expect_name(const char* what) {
    if (!at(Tok::Name))
      fail(cur(), std::string("expected ") + what + ", found " + describe(cur()));
    return std::string(take().text);
  }

  bool at_decl_start() const {
    switch (cur().kind) {
    case Tok::KwType:
    case Tok::KwDim:
    case Tok::KwParam:
    case Tok::KwEntry:
      return true;
    case Tok::KwFn:
      return ahead(1).kind == Tok::Name && ahead(2).kind == Tok::LParen;
    default:
      return false;
    }
  }

  /// Bounds the recursion depth of every recursive rule.
  class Nest {
  public:
    Nest(Parser& p, const char* what) : p_(p) {
      if (++p_.depth_ > kMaxNesting) {
        --p_.depth_;
        p_.fail(p_.cur(), std::string(what) + " nested too deeply");
      }
    }
    ~Nest() { --p_.depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

  private:
    Parser& p_;
  };

  void count_chain(int& n, const char* what) {
    if (++n > kMaxChain)
      fail(cur(), std::string(what) + " nested too deeply");
  }

  // ---- literals ---------------------------------------------------------------------------
  int64_t int_value(const Token& t, bool negated) {
    const uint64_t limit = negated ? (uint64_t{1} << 63) : uint64_t(INT64_MAX);
    if (t.out_of_range || t.int_value > limit) {
      diags_.error(tok_span(t), "integer literal out of range");
      return 0;
    }
    if (negated)
      return t.int_value == limit ? INT64_MIN : -static_cast<int64_t>(t.int_value);
    return static_cast<int64_t>(t.int_value);
  }

  /// A (possibly negative) number in an initializer.
  double number(const char* context) {
    bool neg = accept(Tok::Minus);
    if (at(Tok::Int)) {
      const Token& t = take();
      double v = t.out_of_range ? 0.0 : static_cast<double>(t.int_value);
      if (t.out_of_range)
        diags_.error(tok_span(t), "integer literal out of range");
      return neg ? -v : v;
    }
    if (at(Tok::Float)) {
      double v = take().float_value;
      return neg ? -v : v;
    }
    fail(cur(), std::string("expected a number ") + context + ", found " + describe(cur()));
  }

  // ---- declarations -----------------------------------------------------------------------
  ir::Decl decl() {
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

  ir::Decl type_decl(const Span& start) {
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

  ir::Decl dim_decl(const Span& start) {
    take();
    std::string name = expect_name("a dimension name");
    std::optional<int64_t> def;
    if (accept(Tok::Assign)) {
      const Token& t = expect(Tok::Int, "as the dimension's default");
      def = int_value(t, false);
    }
    return b::dim_decl(name, def, from(start));
  }

  ir::Decl param_decl(const Span& start) {
    take();
    std::string name = expect_name("a parameter name");
    expect(Tok::Colon, "after the parameter name");
    Type t = type();
    ir::Init init = b::init_zeros();
    if (accept(Tok::Assign))
      init = initializer();
    return b::param_decl(name, t, init, from(start));
  }

  ir::Init initializer() {
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

  ir::Decl fn_decl(const Span& start) {
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

  // ---- types ------------------------------------------------------------------------------
  Type type() {
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
            if (at(Tok::Int)) {
              dims.push_back(ir::Dim::of(int_value(take(), false)));
            } else if (at(Tok::Name)) {
              dims.push_back(ir::Dim::named(std::string(take().text)));
            } else {
              fail(cur(), "expected a dimension (an integer or a name), found " + describe(cur()));
            }
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

  // ---- expressions ------------------------------------------------------------------------
  Expr expr() {
    Nest n(*this, "expression");
    return binary(0);
  }

  Expr binary(int min_level) {
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

  Expr unary() {
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

  Expr postfix() {
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

  /// `e, e, ... [,] <close>` after the opening token.
  std::vector<Expr> expr_list(Tok close, const char* context) {
    std::vector<Expr> out;
    while (!at(close)) {
      out.push_back(expr());
      if (!accept(Tok::Comma))
        break;
    }
    expect(close, context);
    return out;
  }

  Expr primary() {
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

  /// `{ let p = e; ... e }` as nested Lets (or the tail alone).
  Expr block() {
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

  ir::Pattern pattern() {
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
    fail(cur(),
         "expected a pattern (a name, '_' or a tuple of patterns), found " + describe(cur()));
  }

  Expr lambda() {
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

  Expr if_expr() {
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

  Expr match_expr() {
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

  /// A binder in a constructor pattern: a name or `_`.
  std::pair<std::string, Span> binder() {
    Span s = start_span();
    if (at(Tok::Name)) {
      std::string name(take().text);
      return {name, from(s)};
    }
    if (accept(Tok::Underscore))
      return {"_", from(s)};
    fail(cur(), "expected a name or '_' in the pattern, found " + describe(cur()));
  }

  ir::MatchArm match_arm() {
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

  std::shared_ptr<const SourceFile> file_;
  Diagnostics& diags_;
  size_t errors_at_start_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  uint32_t prev_end_line_ = 1, prev_end_col_ = 1;
  int depth_ = 0;
};

} // namespace

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
