// Expected-error tests for the checker: each tests/errors/types/*.pe opens with one or more
// `// expect: LINE:COL: text` lines (the file's own line numbers), and checking it must
// report each of them at that location.
#include "src/types/check.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace tests_types_errors_test {

using namespace pejit;

TEST_SUITE("types") {
  TEST_CASE("expected errors: tests/errors/types/*.pe") {
    namespace fs = std::filesystem;
    int files = 0;
    for (const auto& ent : fs::directory_iterator(PEJIT_SOURCE_DIR "/tests/errors/types")) {
      if (ent.path().extension() != ".pe")
        continue;
      ++files;
      std::ifstream in(ent.path());
      std::stringstream ss;
      ss << in.rdbuf();
      std::string src = ss.str();
      CAPTURE(ent.path().filename().string());
      ir::Module m;
      Diagnostics d;
      auto r = types::add_source(m, src, ent.path().filename().string(), d);
      CHECK_FALSE(r.ok);
      std::istringstream lines(src);
      std::string line;
      int expectations = 0;
      while (std::getline(lines, line)) {
        const std::string tag = "// expect: ";
        if (line.rfind(tag, 0) != 0)
          continue;
        ++expectations;
        std::string rest = line.substr(tag.size());
        unsigned l = 0, c = 0;
        REQUIRE(std::sscanf(rest.c_str(), "%u:%u:", &l, &c) == 2);
        std::string text = rest.substr(rest.find(": ") + 2);
        bool found = false;
        for (const auto& diag : d.all())
          found = found || (diag.span.line == l && diag.span.col == c &&
                            diag.message.find(text) != std::string::npos);
        CHECK_MESSAGE(found, "expected " << l << ":" << c << ": " << text << "\ngot:\n"
                                         << d.render());
      }
      CHECK(expectations > 0);
    }
    CHECK(files >= 10);
  }
}

} // namespace tests_types_errors_test
