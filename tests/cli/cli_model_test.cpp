// End-to-end tests of what the pejit command demands of a model: --mode specialized is strict
// (a batch that cannot be planned stops the run with the reason), and infer_nodes returns a
// tree's predictions children before parents (a pre-order list is an error naming the
// contract, where the model's infer shows it).
#include "tests/cli/cli_util.h"

#include <doctest/doctest.h>

#include <fstream>
#include <string>

using namespace pejit::cli_test;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

} // namespace

TEST_SUITE("cli") {
  TEST_CASE("train --mode specialized stops at a batch that cannot be planned, auto runs it") {
    std::string data = tmp("strict_trees.txt");
    REQUIRE(run_pejit("gen sst --trees 20 --seed 4 -o " + data).code == 0);
    std::string prog = tmp("strict_dynamic.pe");
    std::ofstream(prog)
        << "type T = L(word: i32[], label: i32[]) | N(left: T, right: T, label: i32[])\n"
           "dim V = 100\n"
           "param E : f32[V, 2] = normal(0.0, 1.0)\n"
           "fn f(t: T) -> f32[] { match t { L(w, y) => if to_bool(sum(take(E, w)) > 0.0) "
           "{ sum(take(E, w)) } else { 0.0 - sum(take(E, w)) }, N(l, r, y) => f(l) + f(r) } }\n"
           "entry loss(b: List[T]) -> f32[] { sum_list(map(f, b)) }\n";
    std::string args = "train " + prog + " --data " + data + " --epochs 1 --batch 10 --progress 0";
    Run s = run_pejit(args + " --mode specialized");
    INFO(s.err);
    CHECK(s.code == 1);
    CHECK(s.err.find("--mode specialized: a batch of entry 'loss' cannot be planned") !=
          std::string::npos);
    CHECK(s.err.find(prog + ":4:") != std::string::npos);
    Run a = run_pejit(args + " --mode auto --json");
    INFO(a.err);
    CHECK(a.code == 0);
    auto js = json_lines(a.out);
    REQUIRE(js.size() == 1);
    CHECK(js[0]["generic_batches"] == 2);
  }

  TEST_CASE("infer_nodes in pre-order is an error naming the contract, post-order is scored") {
    std::string train = tmp("order_train.txt");
    REQUIRE(run_pejit("gen sst --trees 200 --seed 3 -o " + train).code == 0);
    std::string src = read(kModel);
    std::string pre = replaced(src, "(h, c, append(append(pl, pr), [argmax(logits(h))]))",
                               "(h, c, append([argmax(logits(h))], append(pl, pr)))");
    std::string prog = tmp("preorder.pe");
    std::ofstream(prog) << pre;
    std::string args = " --data " + train + " --epochs 2 --batch 25 --seed 1 --progress 0";
    Run bad = run_pejit("train " + prog + args);
    INFO(bad.err);
    CHECK(bad.code == 1);
    CHECK(bad.err.find("infer_nodes must return each tree's predictions children before "
                       "parents, the root last") != std::string::npos);
    Run good = run_pejit("train " + kModel + args + " --json");
    INFO(good.err);
    CHECK(good.code == 0);
  }
}
