// End-to-end tests of what the pejit command demands of a model: --mode specialized is strict
// (a batch that cannot be planned stops the run with the reason), and infer_nodes returns a
// tree's predictions children before parents (a pre-order list is an error naming the
// contract, where the model's infer shows it).
#include "tests/cli/cli_util.h"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>

namespace tests_cli_cli_model_test {

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

  TEST_CASE("a tree 20000 levels deep trains through pejit train, generic and specialized agree") {
    // A caterpillar: every inner node has a leaf on the left and the rest of the tree on the
    // right. Reading, encoding, checking, the interpreter, planning and the plan's run all
    // handle it without the native stack's depth (docs/architecture.md, "Deep inputs").
    const int depth = 20000;
    std::string line;
    line.reserve(static_cast<size_t>(depth) * 12);
    for (int i = 0; i < depth; ++i)
      line += "(1 (2 w" + std::to_string(i % 7) + ") ";
    line += "(3 end)";
    line.append(static_cast<size_t>(depth), ')');
    std::string data = tmp("caterpillar.txt");
    std::ofstream(data) << line << "\n";
    std::string args = "train " + kModel + " --data " + data +
                       " --batch 1 --epochs 1 --json --no-train-eval --progress 0 --mode ";
    Run g = run_pejit(args + "generic");
    INFO(g.err);
    REQUIRE(g.code == 0);
    Run p = run_pejit(args + "specialized");
    INFO(p.err);
    REQUIRE(p.code == 0);
    auto jg = json_lines(g.out), jp = json_lines(p.out);
    REQUIRE(jg.size() == 1);
    REQUIRE(jp.size() == 1);
    double lg = jg[0]["loss"].get<double>(), lp = jp[0]["loss"].get<double>();
    CHECK(std::isfinite(lg));
    CHECK(std::fabs(lg - lp) <= 1e-4 * std::fabs(lg));
    CHECK(jp[0]["specialized_batches"] == 1);
  }
}

} // namespace tests_cli_cli_model_test
