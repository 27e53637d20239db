// Expected-error tests: each tests/errors/parse/*.pe opens with `// expect: LINE:COL: text`
// lines; each must match a diagnostic at exactly that location whose message contains text.
#include "tests/parse/test_util.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

namespace tests_parse_errors_test {

namespace fs = std::filesystem;
using namespace pejit;
using namespace pejit::testing;

namespace {

struct Expectation {
  uint32_t line = 0, col = 0;
  std::string text;
};

std::vector<Expectation> expectations(const std::string& src) {
  std::vector<Expectation> out;
  std::istringstream is(src);
  const std::string tag = "// expect: ";
  for (std::string l; std::getline(is, l);) {
    if (l.rfind(tag, 0) != 0)
      continue;
    Expectation e;
    std::string rest = l.substr(tag.size());
    size_t c1 = rest.find(':'), c2 = rest.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos)
      continue;
    e.line = static_cast<uint32_t>(std::stoul(rest.substr(0, c1)));
    e.col = static_cast<uint32_t>(std::stoul(rest.substr(c1 + 1, c2 - c1 - 1)));
    e.text = rest.substr(c2 + 1);
    e.text.erase(0, e.text.find_first_not_of(' '));
    out.push_back(e);
  }
  return out;
}

} // namespace

TEST_SUITE("parse") {
  TEST_CASE("expected errors: tests/errors/parse/*.pe") {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(source_path("tests/errors/parse")))
      if (e.path().extension() == ".pe")
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
    REQUIRE(files.size() >= 10);
    for (const auto& f : files) {
      CAPTURE(f.filename().string());
      std::string src = read_text(f.string());
      auto expected = expectations(src);
      REQUIRE_MESSAGE(!expected.empty(), "no '// expect: LINE:COL: text' line");
      Diagnostics diags;
      (void)parse::parse_program(src, f.filename().string(), diags);
      CHECK(diags.has_errors());
      for (const auto& e : expected) {
        bool found = std::any_of(diags.all().begin(), diags.all().end(), [&](const Diagnostic& d) {
          return d.span.line == e.line && d.span.col == e.col &&
                 d.message.find(e.text) != std::string::npos && d.span.file &&
                 d.span.file->name == f.filename().string();
        });
        CHECK_MESSAGE(found, "expected " << e.line << ":" << e.col << ": " << e.text << "\ngot:\n"
                                         << diags.render());
      }
    }
  }
}

} // namespace tests_parse_errors_test
