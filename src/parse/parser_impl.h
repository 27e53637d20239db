// Internal to the parser (parser.cpp, parser_expr.cpp): the Parser class, its token cursor,
// spans, error reporting and nesting guard. parser.cpp parses declarations and types and
// holds the design note; parser_expr.cpp parses expressions, patterns and match arms.
#pragma once

#include "src/ir/builder.h"
#include "src/parse/lexer.h"
#include "src/parse/parser.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pejit::parse::detail {

namespace b = ir::build;
using ir::Expr;
using ir::Type;

inline constexpr size_t kMaxErrors = 50;

struct SyntaxError {};

inline bool is_upper(const std::string& s) {
  return !s.empty() && s[0] >= 'A' && s[0] <= 'Z';
}

class Parser {
public:
  Parser(std::shared_ptr<const SourceFile> file, Diagnostics& diags)
      : file_(std::move(file)), diags_(diags), errors_at_start_(diags.error_count()) {
    toks_ = lex(file_, diags_);
  }

  std::vector<ir::Decl> program();
  Expr whole_expression();

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
  ir::Decl decl();
  ir::Decl type_decl(const Span& start);
  ir::Decl dim_decl(const Span& start);
  ir::Decl param_decl(const Span& start);
  ir::Init initializer();
  ir::Decl fn_decl(const Span& start);

  // ---- types ------------------------------------------------------------------------------
  Type type();
  /// A dimension in a tensor type: an integer, a name, or an affine expression of them
  /// (`2*H`, `H+K`, `2*(H+1)`); a product of two names is an error.
  ir::Dim dim_expr();
  ir::Dim dim_term();
  ir::Dim dim_factor();

  // ---- expressions ------------------------------------------------------------------------
  Expr expr();
  Expr binary(int min_level);
  Expr unary();
  Expr postfix();

  /// `e, e, ... [,] <close>` after the opening token.
  std::vector<Expr> expr_list(Tok close, const char* context);
  Expr primary();

  /// `{ let p = e; ... e }` as nested Lets (or the tail alone).
  Expr block();
  ir::Pattern pattern();
  Expr lambda();
  Expr if_expr();
  Expr match_expr();

  /// A binder in a constructor pattern: a name or `_`.
  std::pair<std::string, Span> binder();
  ir::MatchArm match_arm();

  std::shared_ptr<const SourceFile> file_;
  Diagnostics& diags_;
  size_t errors_at_start_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  uint32_t prev_end_line_ = 1, prev_end_col_ = 1;
  int depth_ = 0;
};

} // namespace pejit::parse::detail
