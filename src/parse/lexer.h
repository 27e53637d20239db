// Lexer of the pejit language: turns a SourceFile into a token vector (ending with Eof).
// Bad bytes (NUL, invalid UTF-8, stray characters), unterminated block comments and
// out-of-range literals become diagnostics; the lexer always makes progress and never throws.
#pragma once

#include "src/util/diagnostics.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pejit::parse {

enum class Tok : uint8_t {
  Eof,
  Name,  ///< identifier: [A-Za-z_][A-Za-z0-9_]* except `_` alone
  Int,   ///< decimal integer (magnitude in `int_value`, may be 2^63 for a negated literal)
  Float, ///< digits '.' digits [exponent], or digits exponent
  // Keywords.
  KwType,
  KwDim,
  KwParam,
  KwFn,
  KwEntry,
  KwLet,
  KwIf,
  KwElse,
  KwMatch,
  KwTrue,
  KwFalse,
  // Punctuation and operators.
  LParen,
  RParen,
  LBracket,
  RBracket,
  LBrace,
  RBrace,
  Comma,
  Semi,
  Colon,
  ColonColon,
  Dot,
  Arrow,    ///< ->
  FatArrow, ///< =>
  Assign,   ///< =
  Bar,      ///< |
  Underscore,
  Plus,
  Minus,
  Star,
  Slash,
  Percent,
  At,
  Lt,
  Le,
  Gt,
  Ge,
  EqEq,
  Ne,
  AndAnd,
  OrOr,
  Bang,
};

/// Spelling of a token kind for messages: "'('", "identifier", "end of file".
const char* tok_name(Tok t);

struct Token {
  Tok kind = Tok::Eof;
  std::string_view text; ///< the token's text, inside the SourceFile (which must outlive it)
  uint32_t line = 1, col = 1, end_line = 1, end_col = 1;
  uint64_t int_value = 0;    ///< Int: the magnitude (valid when !out_of_range)
  double float_value = 0;    ///< Float
  bool out_of_range = false; ///< Int above 2^63 or Float overflowing a double
};

/// Tokenizes the whole file. Lexical errors go to `diags`; the offending bytes are skipped.
std::vector<Token> lex(const std::shared_ptr<const SourceFile>& file, Diagnostics& diags);

} // namespace pejit::parse
