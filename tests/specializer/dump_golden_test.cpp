// Golden files of `pejit dump` (runtime::dump, over specializer/dump.h) on a small fixed batch:
// three hand-written trees (tests/golden/dump_trees.txt) through examples/treelstm/treelstm.pe,
// each --emit form compared with tests/golden/dump_treelstm.<emit>.golden after the timing
// figures are masked; and the lowered kernel programs (--emit kernel-program) of the treelstm,
// listops, rnn and treelstm_dropout examples on three examples each
// (tests/golden/dump_<example>.kernel_program .golden); and the TreeLSTM cell's template graph
// after every pass of the template pipeline, lowering included
// (tests/golden/passes_treelstm_cell.golden, --dump-after all). To regenerate after an intended
// change, then review the diff:
//   PEJIT_UPDATE_GOLDEN=1 ./build/tests/pejit_specializer_tests -tc="golden*"
#include "runtime/train/trainer.h"
#include "specializer/template_graph.h"
#include "src/types/check.h"
#include "tests/parse/test_util.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

namespace tests_specializer_dump_golden_test {

namespace fs = std::filesystem;
using namespace pejit;
using namespace pejit::testing;

namespace {

/// `pejit dump` on a golden batch, its microsecond figures replaced by `<us>`.
std::string dump_golden_batch(const std::string& emit,
                              const std::string& model = "examples/treelstm/treelstm.pe",
                              const std::string& data = "tests/golden/dump_trees.txt") {
  runtime::DumpOptions opt;
  opt.model = source_path(model);
  opt.data = source_path(data);
  opt.batch = 3;
  opt.emit = emit;
  std::ostringstream os;
  runtime::dump(opt, os);
  static const std::regex us("[0-9]+ us");
  return std::regex_replace(os.str(), us, "<us>");
}

/// `got` against the golden file `golden`; with PEJIT_UPDATE_GOLDEN=1, rewrites the file instead.
void check_golden(const fs::path& golden, const std::string& got) {
  const char* env = std::getenv("PEJIT_UPDATE_GOLDEN");
  if (env && std::string(env) == "1") {
    std::ofstream(golden, std::ios::binary) << got;
    MESSAGE("rewrote " << golden.string());
    return;
  }
  REQUIRE_MESSAGE(fs::exists(golden), golden.string()
                                          << " is missing; run with PEJIT_UPDATE_GOLDEN=1");
  std::string want = read_text(golden.string());
  CHECK_MESSAGE(want == got, golden.string() << ": " << first_difference(want, got));
}

} // namespace

TEST_SUITE("specializer") {
  TEST_CASE("golden: pejit dump of three trees matches tests/golden/dump_treelstm.*.golden") {
    for (std::string emit : {"templates", "instances", "plan", "dot"}) {
      CAPTURE(emit);
      std::string got = dump_golden_batch(emit);
      CHECK(got.find("partial evaluation <us>, planning <us>") != std::string::npos);
      CHECK(dump_golden_batch(emit) == got); // deterministic
      fs::path golden = source_path("tests/golden/dump_treelstm." + emit + ".golden");
      check_golden(golden, got);
    }
  }

  TEST_CASE(
      "golden: the kernel programs of the examples match tests/golden/*.kernel_program.golden") {
    struct Example {
      const char *name, *model, *data;
    };
    for (const Example& e :
         {Example{"treelstm", "examples/treelstm/treelstm.pe", "tests/golden/dump_trees.txt"},
          Example{"listops", "examples/listops/listops.pe", "tests/golden/dump_listops.txt"},
          Example{"rnn", "examples/rnn/rnn.pe", "tests/golden/dump_sentences.txt"},
          Example{"treelstm_dropout", "examples/treelstm/treelstm_dropout.pe",
                  "tests/golden/dump_trees.txt"}}) {
      CAPTURE(e.name);
      std::string got = dump_golden_batch("kernel-program", e.model, e.data);
      // Every example has a template whose GEMM is the core of a panel kernel.
      CHECK(got.find("core of run") != std::string::npos);
      fs::path golden =
          source_path(std::string("tests/golden/dump_") + e.name + ".kernel_program.golden");
      check_golden(golden, got);
    }
  }

  TEST_CASE("golden: the TreeLSTM cell after each template pass matches passes_treelstm_cell") {
    auto m = std::make_shared<ir::Module>();
    Diagnostics d;
    auto r = types::add_source(*m, read_text(source_path("examples/treelstm/treelstm.pe")),
                               "treelstm.pe", d);
    REQUIRE_MESSAGE(r.ok, d.render());
    interp::DimBindings dims = interp::bind_dims(*m, {{"V", 10}});
    specializer::Template t;
    t.fn = m->fn_index("cell");
    t.name = "cell";
    const specializer::TensorSig h{DType::F32, {150}};
    t.args = {h, h, h, h};
    t.results = {h, h};
    std::ostringstream os;
    specializer::TemplateOptions opt;
    opt.dump_after = {"all"};
    opt.dump = &os;
    specializer::compile_template(*m, dims, t, opt);
    std::string got = os.str();
    for (const auto& pass : specializer::template_pass_names()) // every pass, lower included
      CHECK_MESSAGE(got.find("// cell after " + pass + "\n") != std::string::npos, pass);
    fs::path golden = source_path("tests/golden/passes_treelstm_cell.golden");
    check_golden(golden, got);
  }
}

} // namespace tests_specializer_dump_golden_test
