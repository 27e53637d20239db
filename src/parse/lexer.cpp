// Lexer of the pejit language. One pass over the bytes with line/column tracking (columns
// count bytes, 1-based). Every loop iteration consumes at least one byte, so any input,
// including NUL and invalid UTF-8, terminates; runs of bad bytes give a single diagnostic.
#include "src/parse/lexer.h"

#include <charconv>
#include <cstdio>

namespace pejit::parse {

const char* tok_name(Tok t) {
  switch (t) {
  case Tok::Eof:
    return "end of file";
  case Tok::Name:
    return "identifier";
  case Tok::Int:
    return "integer literal";
  case Tok::Float:
    return "float literal";
  case Tok::KwType:
    return "'type'";
  case Tok::KwDim:
    return "'dim'";
  case Tok::KwParam:
    return "'param'";
  case Tok::KwFn:
    return "'fn'";
  case Tok::KwEntry:
    return "'entry'";
  case Tok::KwLet:
    return "'let'";
  case Tok::KwIf:
    return "'if'";
  case Tok::KwElse:
    return "'else'";
  case Tok::KwMatch:
    return "'match'";
  case Tok::KwTrue:
    return "'true'";
  case Tok::KwFalse:
    return "'false'";
  case Tok::LParen:
    return "'('";
  case Tok::RParen:
    return "')'";
  case Tok::LBracket:
    return "'['";
  case Tok::RBracket:
    return "']'";
  case Tok::LBrace:
    return "'{'";
  case Tok::RBrace:
    return "'}'";
  case Tok::Comma:
    return "','";
  case Tok::Semi:
    return "';'";
  case Tok::Colon:
    return "':'";
  case Tok::ColonColon:
    return "'::'";
  case Tok::Dot:
    return "'.'";
  case Tok::Arrow:
    return "'->'";
  case Tok::FatArrow:
    return "'=>'";
  case Tok::Assign:
    return "'='";
  case Tok::Bar:
    return "'|'";
  case Tok::Underscore:
    return "'_'";
  case Tok::Plus:
    return "'+'";
  case Tok::Minus:
    return "'-'";
  case Tok::Star:
    return "'*'";
  case Tok::Slash:
    return "'/'";
  case Tok::Percent:
    return "'%'";
  case Tok::At:
    return "'@'";
  case Tok::Lt:
    return "'<'";
  case Tok::Le:
    return "'<='";
  case Tok::Gt:
    return "'>'";
  case Tok::Ge:
    return "'>='";
  case Tok::EqEq:
    return "'=='";
  case Tok::Ne:
    return "'!='";
  case Tok::AndAnd:
    return "'&&'";
  case Tok::OrOr:
    return "'||'";
  case Tok::Bang:
    return "'!'";
  }
  return "token";
}

namespace {

/// Runs of bad bytes reported per file; past this, one summary diagnostic.
constexpr int kMaxLexErrors = 50;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

Tok keyword(std::string_view s) {
  static const std::pair<std::string_view, Tok> kKeywords[] = {
      {"type", Tok::KwType}, {"dim", Tok::KwDim},     {"param", Tok::KwParam},
      {"fn", Tok::KwFn},     {"entry", Tok::KwEntry}, {"let", Tok::KwLet},
      {"if", Tok::KwIf},     {"else", Tok::KwElse},   {"match", Tok::KwMatch},
      {"true", Tok::KwTrue}, {"false", Tok::KwFalse}, {"_", Tok::Underscore},
  };
  for (const auto& [k, t] : kKeywords)
    if (k == s)
      return t;
  return Tok::Name;
}

class Lexer {
public:
  Lexer(const std::shared_ptr<const SourceFile>& file, Diagnostics& diags)
      : file_(file), src_(file->text), diags_(diags) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    while (true) {
      skip_trivia();
      if (pos_ >= src_.size())
        break;
      size_t before = pos_;
      Token t;
      t.line = line_;
      t.col = col_;
      if (lex_one(t, out.empty() ? Tok::Eof : out.back().kind)) {
        t.text = src_.substr(before, pos_ - before);
        t.end_line = line_;
        t.end_col = col_;
        out.push_back(std::move(t));
      }
    }
    Token eof;
    eof.line = eof.end_line = line_;
    eof.col = col_;
    eof.end_col = col_ + 1;
    out.push_back(eof);
    return out;
  }

private:
  char peek(size_t k = 0) const { return pos_ + k < src_.size() ? src_[pos_ + k] : '\0'; }
  bool at_end(size_t k = 0) const { return pos_ + k >= src_.size(); }

  void advance() {
    if (src_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }

  Span span_here(uint32_t line, uint32_t col, uint32_t len = 1) const {
    Span s;
    s.file = file_;
    s.line = s.end_line = line;
    s.col = col;
    s.end_col = col + len;
    return s;
  }

  void skip_trivia() {
    while (!at_end()) {
      char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
        advance();
      } else if (c == '/' && peek(1) == '/') {
        while (!at_end() && peek() != '\n')
          advance();
      } else if (c == '/' && peek(1) == '*') {
        uint32_t l = line_, co = col_;
        advance();
        advance();
        bool closed = false;
        while (!at_end()) {
          if (peek() == '*' && peek(1) == '/') {
            advance();
            advance();
            closed = true;
            break;
          }
          advance();
        }
        if (!closed)
          diags_.error(span_here(l, co, 2), "unterminated block comment");
      } else {
        return;
      }
    }
  }

  // Lexes one token into `t`; returns false when the bytes were bad (already reported).
  bool lex_one(Token& t, Tok prev) {
    char c = peek();
    if (is_name_start(c)) {
      size_t b = pos_;
      while (!at_end() && is_name_char(peek()))
        advance();
      t.kind = keyword(src_.substr(b, pos_ - b));
      return true;
    }
    if (is_digit(c))
      return lex_number(t, prev == Tok::Dot);
    auto two = [&](char second, Tok yes, Tok no) {
      advance();
      if (peek() == second && !at_end()) {
        advance();
        t.kind = yes;
      } else {
        t.kind = no;
      }
      return true;
    };
    auto one = [&](Tok k) {
      advance();
      t.kind = k;
      return true;
    };
    switch (c) {
    case '(':
      return one(Tok::LParen);
    case ')':
      return one(Tok::RParen);
    case '[':
      return one(Tok::LBracket);
    case ']':
      return one(Tok::RBracket);
    case '{':
      return one(Tok::LBrace);
    case '}':
      return one(Tok::RBrace);
    case ',':
      return one(Tok::Comma);
    case ';':
      return one(Tok::Semi);
    case '.':
      return one(Tok::Dot);
    case '+':
      return one(Tok::Plus);
    case '*':
      return one(Tok::Star);
    case '/':
      return one(Tok::Slash);
    case '%':
      return one(Tok::Percent);
    case '@':
      return one(Tok::At);
    case ':':
      return two(':', Tok::ColonColon, Tok::Colon);
    case '-':
      return two('>', Tok::Arrow, Tok::Minus);
    case '<':
      return two('=', Tok::Le, Tok::Lt);
    case '>':
      return two('=', Tok::Ge, Tok::Gt);
    case '!':
      return two('=', Tok::Ne, Tok::Bang);
    case '=':
      advance();
      if (!at_end() && peek() == '=') {
        advance();
        t.kind = Tok::EqEq;
      } else if (!at_end() && peek() == '>') {
        advance();
        t.kind = Tok::FatArrow;
      } else {
        t.kind = Tok::Assign;
      }
      return true;
    case '&':
      if (peek(1) == '&' && !at_end(1))
        return two('&', Tok::AndAnd, Tok::AndAnd);
      break;
    case '|':
      return two('|', Tok::OrOr, Tok::Bar);
    default:
      break;
    }
    bad_run();
    return false;
  }

  // A run of bytes that start no token: one diagnostic for the whole run.
  void bad_run() {
    uint32_t l = line_, co = col_;
    unsigned char first = static_cast<unsigned char>(peek());
    uint32_t n = 0;
    auto starts_token = [&](char c) {
      return is_name_start(c) || is_digit(c) || c == ' ' || c == '\t' || c == '\r' || c == '\n' ||
             std::string_view("()[]{},;.:+-*/%@<>=!|").find(c) != std::string_view::npos;
    };
    do {
      advance();
      ++n;
    } while (!at_end() && !starts_token(peek()) && !(peek() == '&' && peek(1) == '&'));
    if (++errors_ > kMaxLexErrors)
      return;
    if (errors_ == kMaxLexErrors) {
      diags_.error(span_here(l, co, n), "too many invalid characters; not reporting more");
      return;
    }
    char buf[64];
    if (first >= 0x20 && first < 0x7f)
      std::snprintf(buf, sizeof buf, "unexpected character '%c'", first);
    else if (first >= 0x80)
      std::snprintf(buf, sizeof buf, "unexpected byte 0x%02X (non-ASCII text is not allowed)",
                    first);
    else
      std::snprintf(buf, sizeof buf, "unexpected byte 0x%02X", first);
    diags_.error(span_here(l, co, n), buf);
  }

  bool lex_number(Token& t, bool after_dot) {
    size_t b = pos_;
    uint32_t l = line_, co = col_;
    while (!at_end() && is_digit(peek()))
      advance();
    bool is_float = false;
    // After '.', digits are a tuple index: `t.0.1` is two projections.
    if (!after_dot) {
      if (peek() == '.' && is_digit(peek(1)) && !at_end(1)) {
        is_float = true;
        advance();
        while (!at_end() && is_digit(peek()))
          advance();
      }
      if ((peek() == 'e' || peek() == 'E') && !at_end()) {
        size_t k = 1;
        if (peek(1) == '+' || peek(1) == '-')
          k = 2;
        if (!at_end(k) && is_digit(peek(k))) {
          is_float = true;
          for (size_t i = 0; i < k; ++i)
            advance();
          while (!at_end() && is_digit(peek()))
            advance();
        }
      }
    }
    std::string_view s = src_.substr(b, pos_ - b);
    if (is_float) {
      t.kind = Tok::Float;
      auto r = std::from_chars(s.data(), s.data() + s.size(), t.float_value);
      if (r.ec == std::errc::result_out_of_range) {
        // Underflow rounds to zero; overflow is an error.
        size_t e = s.find_first_of("eE");
        bool tiny = e != std::string_view::npos && s[e + 1] == '-';
        t.float_value = 0;
        if (!tiny) {
          t.out_of_range = true;
          diags_.error(span_here(l, co, static_cast<uint32_t>(s.size())),
                       "float literal out of range");
        }
      }
      return true;
    }
    t.kind = Tok::Int;
    auto r = std::from_chars(s.data(), s.data() + s.size(), t.int_value);
    // The parser reports magnitudes above 2^63 - 1 (it knows whether the literal is negated).
    if (r.ec == std::errc::result_out_of_range)
      t.out_of_range = true;
    return true;
  }

  std::shared_ptr<const SourceFile> file_;
  std::string_view src_;
  Diagnostics& diags_;
  size_t pos_ = 0;
  int errors_ = 0;
  uint32_t line_ = 1, col_ = 1;
};

} // namespace

std::vector<Token> lex(const std::shared_ptr<const SourceFile>& file, Diagnostics& diags) {
  return Lexer(file, diags).run();
}

} // namespace pejit::parse
