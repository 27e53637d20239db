// Golden files of `pejit dump` (runtime::dump, over specializer/dump.h) on a small fixed batch:
// three hand-written trees (tests/golden/dump_trees.txt) through examples/treelstm/treelstm.pe,
// each --emit form compared with tests/golden/dump_treelstm.<emit>.golden after the timing
// figures are masked. To regenerate after an intended change, then review the diff:
//   PEJIT_UPDATE_GOLDEN=1 ./build/tests/pejit_specializer_tests -tc="golden*"
#include "tests/parse/test_util.h"
#include "runtime/train/trainer.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

namespace fs = std::filesystem;
using namespace pejit;
using namespace pejit::testing;

namespace {

/// `pejit dump` on the golden batch, its microsecond figures replaced by `<us>`.
std::string dump_golden_batch(const std::string& emit) {
  runtime::DumpOptions opt;
  opt.model = source_path("examples/treelstm/treelstm.pe");
  opt.data = source_path("tests/golden/dump_trees.txt");
  opt.batch = 3;
  opt.emit = emit;
  std::ostringstream os;
  runtime::dump(opt, os);
  static const std::regex us("[0-9]+ us");
  return std::regex_replace(os.str(), us, "<us>");
}

} // namespace

TEST_SUITE("specializer") {
  TEST_CASE("golden: pejit dump of three trees matches tests/golden/dump_treelstm.*.golden") {
    const char* env = std::getenv("PEJIT_UPDATE_GOLDEN");
    bool update = env && std::string(env) == "1";
    for (std::string emit : {"templates", "instances", "plan", "dot"}) {
      CAPTURE(emit);
      std::string got = dump_golden_batch(emit);
      CHECK(got.find("partial evaluation <us>, planning <us>") != std::string::npos);
      CHECK(dump_golden_batch(emit) == got); // deterministic
      fs::path golden = source_path("tests/golden/dump_treelstm." + emit + ".golden");
      if (update) {
        std::ofstream(golden, std::ios::binary) << got;
        MESSAGE("rewrote " << golden.string());
        continue;
      }
      REQUIRE_MESSAGE(fs::exists(golden), golden.string()
                                              << " is missing; run with PEJIT_UPDATE_GOLDEN=1");
      std::string want = read_text(golden.string());
      CHECK_MESSAGE(want == got, golden.string() << ": " << first_difference(want, got));
    }
  }
}
