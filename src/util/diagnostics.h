// Source locations and user-facing diagnostics: `file:line:col: error: message`, the source
// line and a caret, then notes. A user's mistake is always a Diagnostic, never an exception
// that escapes or an abort.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pejit {

/// A source file's name and text, shared by every span that points into it.
struct SourceFile {
  std::string name;
  std::string text;
};

/// A half-open range in a source file; line and col are 1-based. A default span is "unknown".
struct Span {
  std::shared_ptr<const SourceFile> file;
  uint32_t line = 0, col = 0;
  uint32_t end_line = 0, end_col = 0;

  bool known() const { return line != 0; }
  /// "file:line:col", or "<unknown>".
  std::string str() const;
};

enum class Severity { Error, Warning, Note };

struct Diagnostic {
  Severity severity = Severity::Error;
  Span span;
  std::string message;
  std::vector<std::pair<Span, std::string>> notes;
};

/// Collects diagnostics for one run (parse + check), renders them as text.
class Diagnostics {
public:
  void error(const Span& s, std::string msg);
  void warning(const Span& s, std::string msg);
  /// Adds a note to the most recent diagnostic.
  void note(const Span& s, std::string msg);
  void add(Diagnostic d) { diags_.push_back(std::move(d)); }

  bool has_errors() const { return errors_ > 0; }
  size_t error_count() const { return errors_; }
  const std::vector<Diagnostic>& all() const { return diags_; }
  void clear() {
    diags_.clear();
    errors_ = 0;
  }
  /// Appends every diagnostic of `other`.
  void merge(const Diagnostics& other);

  /// Every diagnostic rendered, each with its source line and caret.
  std::string render() const;

private:
  std::vector<Diagnostic> diags_;
  size_t errors_ = 0;
};

/// One diagnostic as `file:line:col: error: msg`, the source line, a caret, its notes.
std::string render_diagnostic(const Diagnostic& d);

} // namespace pejit
