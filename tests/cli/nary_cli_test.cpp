// End-to-end tests of n-ary trees through the pejit command: `gen sst --arity K` (n-ary trees;
// the default output unchanged), the child-sum TreeLSTM (examples/childsum) training on them
// in auto and in strict specialized mode with its loss falling, its checkpoint evaluated, and
// a binary model refusing an n-ary node at the data file's line and column.
#include "tests/cli/cli_util.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tests_cli_nary_cli_test {

using namespace pejit::cli_test;

namespace {

const std::string kChildSum = PEJIT_SOURCE_DIR "/examples/childsum/childsum.pe";

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The largest number of children of a node in bracketed text: counts the '(' directly inside
// each open node.
size_t widest(const std::string& text) {
  std::vector<size_t> open;
  size_t most = 0;
  for (char c : text) {
    if (c == '(') {
      if (!open.empty())
        most = std::max(most, ++open.back());
      open.push_back(0);
    } else if (c == ')') {
      open.pop_back();
    }
  }
  return most;
}

} // namespace

TEST_SUITE("cli") {
  TEST_CASE("gen sst --arity: n-ary trees, --arity 2 is the default output") {
    Run def = run_pejit("gen sst --trees 50 --seed 7");
    Run two = run_pejit("gen sst --trees 50 --seed 7 --arity 2");
    REQUIRE(def.code == 0);
    CHECK(def.out == two.out);
    CHECK(widest(def.out) == 2);
    Run four = run_pejit("gen sst --trees 50 --seed 7 --arity 4");
    REQUIRE(four.code == 0);
    CHECK(widest(four.out) == 4);
    Run bal = run_pejit("gen sst --trees 50 --seed 7 --arity 5 --shape balanced");
    CHECK(widest(bal.out) == 5);
    Run lo = run_pejit("gen listops --trees 5 --arity 3");
    CHECK(lo.code == 1);
    CHECK(lo.err.find("--arity is for sst data") != std::string::npos);
    CHECK(run_pejit("gen sst --trees 5 --arity 1").code == 2);
  }

  TEST_CASE("the child-sum TreeLSTM trains on n-ary trees in auto and specialized mode") {
    std::string train = tmp("nary_train.txt"), dev = tmp("nary_dev.txt");
    REQUIRE(run_pejit("gen sst --arity 4 --trees 300 --seed 1 -o " + train).code == 0);
    REQUIRE(run_pejit("gen sst --arity 4 --trees 100 --seed 2 -o " + dev).code == 0);
    std::string ckpt = tmp("childsum.ckpt");
    const std::string args = "train " + kChildSum + " --data " + train + " --dev " + dev +
                             " --epochs 3 --batch 25 --seed 1 --progress 0 --json";
    for (const char* mode : {"auto", "specialized"}) {
      CAPTURE(mode);
      Run r = run_pejit(args + " --mode " + mode + " --save " + ckpt);
      INFO(r.err);
      REQUIRE(r.code == 0);
      auto js = json_lines(r.out);
      REQUIRE(js.size() == 3);
      double first = js[0]["loss"], last = js[2]["loss"];
      CHECK(last < 0.8 * first);
      CHECK(js[2]["dev_loss"].get<double>() < js[0]["dev_loss"].get<double>());
      // Every node is scored through infer_nodes (children before parents).
      CHECK(js[2]["dev_node_acc"].get<double>() > 0.6);
      for (const auto& j : js)
        CHECK(j["trees"] == 300);
      if (std::string(mode) == "specialized") {
        // Strict: every batch planned, and every one ran on the JIT's kernels.
        for (const auto& j : js) {
          CHECK(j["generic_batches"] == 0);
          CHECK(j["specialized_batches"] == j["batches"]);
          CHECK(j["jit_batches"] == j["batches"]);
        }
      }
    }
    Run e = run_pejit("eval " + kChildSum + " --params " + ckpt + " --data " + dev + " --json");
    INFO(e.err);
    CHECK(e.code == 0);
    CHECK(e.out.find("\"root_acc\"") != std::string::npos);
  }

  TEST_CASE("a binary model refuses n-ary data at the node's line and column") {
    std::string data = tmp("nary_for_binary.txt");
    REQUIRE(run_pejit("gen sst --arity 3 --trees 20 --seed 3 -o " + data).code == 0);
    std::string text = read(data);
    Run r = run_pejit("train " + kModel + " --data " + data + " --epochs 1 --progress 0");
    CHECK(r.code == 1);
    CHECK(r.err.find(data + ":") != std::string::npos);
    CHECK(r.err.find("children, but no constructor of the model's type Tree takes that many; "
                     "its constructors take 0 (Leaf), 2 (Node) children") != std::string::npos);
    CHECK(r.err.find("give a constructor a field `children: List[Tree]`") != std::string::npos);
    // The child-sum model reads binary data as it is.
    std::string bin = tmp("binary_for_childsum.txt");
    REQUIRE(run_pejit("gen sst --trees 30 --seed 3 -o " + bin).code == 0);
    Run ok = run_pejit("train " + kChildSum + " --data " + bin +
                       " --epochs 1 --batch 10 --progress 0 --mode specialized");
    INFO(ok.err);
    CHECK(ok.code == 0);
  }
}

} // namespace tests_cli_nary_cli_test
