// CLI tests of what a TreeLSTM paper run needs (issue 23): `--labels binary` on train and eval,
// `pejit predict`, `--freeze` and `--embeddings`, learning-rate schedules and per-parameter
// options.
#include "tests/cli/cli_util.h"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>

using namespace pejit::cli_test;

namespace {

const std::string kBinary = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm_binary.pe";

std::string write_file(const std::string& name, const std::string& text) {
  std::string p = tmp(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

const char* kSst = "(3 (2 a) (4 (2 b) (1 c)))\n"
                   "(2 (3 a) (1 b))\n"
                   "(0 (2 c) (2 d))\n"
                   "(4 (3 a) (2 (1 b) (0 c)))\n"
                   "(1 (0 d) (2 a))\n";

} // namespace

TEST_CASE("cli labels binary: train and eval count the trees kept and their labeled nodes") {
  std::string data = write_file("paper_sst.txt", kSst);
  std::string ck = tmp("paper_bin.ckpt");
  Run t = run_pejit("train " + kBinary + " --data " + data + " --dev " + data +
                    " --labels binary --epochs 1 --batch 2 --mode generic --json --save " + ck);
  REQUIRE_MESSAGE(t.code == 0, t.err);
  CHECK(t.err.find("binary labels: " + data +
                   ": kept 4 of 5 trees (1 with a neutral root dropped), 6 neutral inner nodes "
                   "unlabeled") != std::string::npos);
  auto js = json_lines(t.out);
  REQUIRE(js.size() == 1);
  CHECK(js[0]["trees"] == 4);
  CHECK(js[0]["nodes"] == 10);
  Run e = run_pejit("eval " + kBinary + " --params " + ck + " --data " + data +
                    " --labels binary --json --mode generic");
  REQUIRE_MESSAGE(e.code == 0, e.err);
  auto ej = json_lines(e.out);
  REQUIRE(ej.size() == 1);
  CHECK(ej[0]["trees"] == 4);
  CHECK(ej[0]["nodes"] == 10);
  double root = ej[0]["root_acc"], node = ej[0]["node_acc"];
  CHECK(root * 4 == doctest::Approx(std::round(root * 4)));
  CHECK(node * 10 == doctest::Approx(std::round(node * 10)));
  CHECK(root == doctest::Approx(js[0]["dev_root_acc"].get<double>()));
  // Without --labels binary the same checkpoint reads 5 trees of labels up to 4: outside the
  // model's 2 classes, at the first such node.
  Run f = run_pejit("eval " + kBinary + " --params " + ck + " --data " + data + " --mode generic");
  CHECK(f.code == 1);
  CHECK(f.err.find(":1:4: error: label 2 is outside the model's classes [0, 2)") !=
        std::string::npos);
  // A 5-class model whose loss takes every node's label stops at the first unlabeled node.
  Run u = run_pejit("train " + kModel + " --data " + data + " --labels binary --mode generic");
  CHECK(u.code == 1);
  CHECK(u.err.find(":3:4: error: the node has no label") != std::string::npos);
  Run bad = run_pejit("train " + kBinary + " --data " + data + " --labels ternary");
  CHECK(bad.code == 2);
}
