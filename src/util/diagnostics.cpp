// Rendering of diagnostics in the compiler-standard format with a source excerpt.
#include "src/util/diagnostics.h"

#include <sstream>

namespace pejit {

std::string Span::str() const {
  if (!known())
    return file ? file->name : std::string("<unknown>");
  std::ostringstream os;
  os << (file ? file->name : std::string("<input>")) << ":" << line << ":" << col;
  return os.str();
}

void Diagnostics::error(const Span& s, std::string msg) {
  diags_.push_back({Severity::Error, s, std::move(msg), {}});
  ++errors_;
}

void Diagnostics::warning(const Span& s, std::string msg) {
  diags_.push_back({Severity::Warning, s, std::move(msg), {}});
}

void Diagnostics::note(const Span& s, std::string msg) {
  if (diags_.empty())
    return;
  diags_.back().notes.emplace_back(s, std::move(msg));
}

void Diagnostics::merge(const Diagnostics& other) {
  for (const auto& d : other.diags_) {
    diags_.push_back(d);
    if (d.severity == Severity::Error)
      ++errors_;
  }
}

namespace {

std::string source_line(const Span& s) {
  if (!s.known() || !s.file)
    return {};
  const std::string& t = s.file->text;
  size_t pos = 0;
  for (uint32_t l = 1; l < s.line && pos != std::string::npos; ++l) {
    pos = t.find('\n', pos);
    if (pos != std::string::npos)
      ++pos;
  }
  if (pos == std::string::npos || pos > t.size())
    return {};
  size_t end = t.find('\n', pos);
  return t.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

void render_one(std::ostringstream& os, const Span& s, const char* kind, const std::string& msg) {
  os << s.str() << ": " << kind << ": " << msg << "\n";
  std::string line = source_line(s);
  if (line.empty())
    return;
  os << "  " << line << "\n  ";
  for (uint32_t c = 1; c < s.col && c <= line.size(); ++c)
    os << (line[c - 1] == '\t' ? '\t' : ' ');
  os << "^";
  if (s.end_line == s.line && s.end_col > s.col + 1) {
    for (uint32_t c = s.col + 1; c < s.end_col && c <= line.size(); ++c)
      os << "~";
  }
  os << "\n";
}

} // namespace

std::string render_diagnostic(const Diagnostic& d) {
  std::ostringstream os;
  const char* kind = d.severity == Severity::Error     ? "error"
                     : d.severity == Severity::Warning ? "warning"
                                                       : "note";
  render_one(os, d.span, kind, d.message);
  for (const auto& [s, m] : d.notes)
    render_one(os, s, "note", m);
  return os.str();
}

std::string Diagnostics::render() const {
  std::string out;
  for (const auto& d : diags_)
    out += render_diagnostic(d);
  return out;
}

} // namespace pejit
