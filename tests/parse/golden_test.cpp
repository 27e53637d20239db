// Golden tests of the printer over the parser: tests/golden/<name>.pe printed must equal
// <name>.pe.golden (PEJIT_UPDATE_GOLDEN=1 rewrites them), and every golden input and example
// program round-trips: print(parse(print(M))) == print(M) with structurally equal trees.
#include "tests/ir/ast_equal.h"
#include "tests/parse/test_util.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace tests_parse_golden_test {

namespace fs = std::filesystem;
using namespace pejit;
using namespace pejit::testing;

namespace {

std::vector<fs::path> pe_files(const std::string& dir, bool recursive) {
  std::vector<fs::path> out;
  fs::path root = source_path(dir);
  if (!fs::exists(root))
    return out;
  auto take = [&](const fs::directory_entry& e) {
    if (e.is_regular_file() && e.path().extension() == ".pe")
      out.push_back(e.path());
  };
  if (recursive)
    for (const auto& e : fs::recursive_directory_iterator(root))
      take(e);
  else
    for (const auto& e : fs::directory_iterator(root))
      take(e);
  std::sort(out.begin(), out.end());
  return out;
}

void check_round_trip(const std::string& name, const std::string& text) {
  Diagnostics d1;
  auto decls = parse::parse_program(text, name, d1);
  REQUIRE_MESSAGE(!d1.has_errors(), d1.render());
  std::string p1 = print_decls(decls);
  Diagnostics d2;
  auto again = parse::parse_program(p1, name + " (printed)", d2);
  REQUIRE_MESSAGE(!d2.has_errors(), d2.render() << "\n" << p1);
  std::string p2 = print_decls(again);
  CHECK_MESSAGE(p1 == p2, first_difference(p1, p2));
  std::string diff = decls_diff(decls, again);
  CHECK_MESSAGE(diff.empty(), diff);
}

} // namespace

TEST_SUITE("parse") {
  TEST_CASE("golden: printed programs match tests/golden/*.pe.golden") {
    const char* env = std::getenv("PEJIT_UPDATE_GOLDEN");
    bool update = env && std::string(env) == "1";
    auto files = pe_files("tests/golden", false);
    REQUIRE(files.size() >= 2);
    for (const auto& f : files) {
      CAPTURE(f.string());
      Diagnostics diags;
      auto decls = parse::parse_program(read_text(f.string()), f.filename().string(), diags);
      REQUIRE_MESSAGE(!diags.has_errors(), diags.render());
      std::string printed = print_decls(decls);
      fs::path golden = f.string() + ".golden";
      if (update) {
        std::ofstream(golden, std::ios::binary) << printed;
        MESSAGE("rewrote " << golden.string());
        continue;
      }
      REQUIRE_MESSAGE(fs::exists(golden), golden.string()
                                              << " is missing; run with PEJIT_UPDATE_GOLDEN=1");
      std::string want = read_text(golden.string());
      CHECK_MESSAGE(want == printed, golden.string() << ": " << first_difference(want, printed));
    }
  }

  TEST_CASE("round trip: golden inputs, golden outputs and examples") {
    std::vector<fs::path> files = pe_files("tests/golden", false);
    const size_t golden_inputs = files.size();
    for (const auto& f : pe_files("examples", true))
      files.push_back(f);
    // Not vacuous: both folders were found (the treelstm, listops and rnn examples at least).
    REQUIRE(golden_inputs >= 2);
    REQUIRE(files.size() >= golden_inputs + 3);
    for (const auto& f : files) {
      CAPTURE(f.string());
      check_round_trip(f.filename().string(), read_text(f.string()));
      fs::path golden = f.string() + ".golden";
      if (fs::exists(golden))
        check_round_trip(golden.filename().string(), read_text(golden));
    }
  }
}

} // namespace tests_parse_golden_test
