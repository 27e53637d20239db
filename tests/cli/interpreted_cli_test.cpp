// End-to-end tests of what `pejit train` reports about the batching interpreter: plan groups
// whose template is not lowered to a kernel program are counted and timed (`--json`:
// interpreted_groups, interpreted_seconds, and their templates with their functions' source
// lines, or an op's with its call's, and why; jit_seconds leaves them out), and the epoch
// lines and the summary give the share of training time on JIT kernels beside the share
// specialized.
#include "tests/cli/cli_util.h"

#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace tests_cli_interpreted_cli_test {

using namespace pejit::cli_test;

namespace {

// A small tree model whose `mix` multiplies a per-row vector by a per-row matrix: not lowered
// ("matmul other than per-row vector @ shared matrix"), so it runs in the batching interpreter
// inside every plan while `cell` and `node_loss` run on JIT kernels.
const char* kPartlyInterpreted = R"(
type Tree = Leaf(word: i32[], label: i32[])
          | Node(left: Tree, right: Tree, label: i32[])
dim V = 100
param emb   : f32[V, 4] = normal(0.0, 0.1)
param W     : f32[8, 4] = xavier
param W_out : f32[4, 5] = xavier
fn cell(hl: f32[4], hr: f32[4]) -> f32[4] { tanh(concat(hl, hr) @ W) }
fn mix(h: f32[4], m: f32[4]) -> f32[4] { h @ reshape(concat(m, m, m, m), 4, 4) }
fn node_loss(h: f32[4], y: i32[]) -> f32[] { cross_entropy(h @ W_out, y) }
fn encode(t: Tree) -> (f32[4], f32[]) {
  match t {
    Leaf(w, y) => { let h = take(emb, w); (h, node_loss(h, y)) }
    Node(l, r, y) => {
      let (hl, ll) = encode(l);
      let (hr, lr) = encode(r);
      let h = mix(cell(hl, hr), hl);
      (h, ll + lr + node_loss(h, y))
    }
  }
}
entry loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => encode(t).1, batch)) }
)";

// The same shape of model with the refused matmul written inline in `encode` (line 15, from
// column 15): an op's template, which has no function of its own to name.
const char* kOpInterpreted = R"(type Tree = Leaf(word: i32[], label: i32[])
          | Node(left: Tree, right: Tree, label: i32[])
dim V = 100
param emb   : f32[V, 4] = normal(0.0, 0.1)
param W     : f32[8, 4] = xavier
param W_out : f32[4, 5] = xavier
fn cell(hl: f32[4], hr: f32[4]) -> f32[4] { tanh(concat(hl, hr) @ W) }
fn node_loss(h: f32[4], y: i32[]) -> f32[] { cross_entropy(h @ W_out, y) }
fn encode(t: Tree) -> (f32[4], f32[]) {
  match t {
    Leaf(w, y) => { let h = take(emb, w); (h, node_loss(h, y)) }
    Node(l, r, y) => {
      let (hl, ll) = encode(l);
      let (hr, lr) = encode(r);
      let h = cell(hl, hr) @ reshape(concat(hl, hl, hl, hl), 4, 4);
      (h, ll + lr + node_loss(h, y))
    }
  }
}
entry loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => encode(t).1, batch)) }
)";

// The templates `pejit dump --emit kernels` says run through the batching interpreter.
std::set<std::string> interpreted_templates(const std::string& model, const std::string& data) {
  Run d = run_pejit("dump " + model + " --data " + data + " --emit kernels");
  REQUIRE(d.code == 0);
  std::set<std::string> out;
  std::istringstream in(d.out);
  std::string line, tmpl;
  while (std::getline(in, line)) {
    if (line.rfind("template ", 0) == 0)
      tmpl = line.substr(9, line.find('#') - 9);
    else if (line.find("runs through the batching interpreter") != std::string::npos)
      out.insert(tmpl);
  }
  return out;
}

// The three shares of the summary line (on JIT kernels, in the batching interpreter,
// specialized), in percent.
struct Shares {
  double jit = -1, interpreted = -1, specialized = -1;
};

Shares summary_shares(const std::string& err) {
  static const std::regex re(R"(summary: .*; ([0-9.]+)% of training time ran on JIT kernels, )"
                             R"(([0-9.]+)% in the batching interpreter, ([0-9.]+)% specialized)");
  std::smatch m;
  Shares s;
  if (std::regex_search(err, m, re)) {
    s.jit = std::stod(m[1]);
    s.interpreted = std::stod(m[2]);
    s.specialized = std::stod(m[3]);
  }
  return s;
}

} // namespace

TEST_SUITE("cli") {
  TEST_CASE("train: groups in the batching interpreter are counted and timed, and the summary "
            "gives the share on JIT kernels") {
    std::string model = tmp("partly_interpreted.pe"), data = tmp("interp_train.txt");
    std::ofstream(model) << kPartlyInterpreted;
    REQUIRE(run_pejit("gen sst --trees 100 --seed 3 -o " + data).code == 0);
    CHECK(interpreted_templates(model, data) == std::set<std::string>{"mix"});

    Run r = run_pejit("train " + model + " --data " + data +
                      " --epochs 2 --batch 25 --json --no-train-eval --mode specialized");
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto js = json_lines(r.out);
    REQUIRE(js.size() == 2);
    for (const auto& j : js) {
      const int64_t batches = j["specialized_batches"].get<int64_t>();
      CHECK(batches == 4);
      CHECK(j["jit_batches"].get<int64_t>() == batches);
      // Per batch one `mix` group per tree level above the leaves (the lookup is lowered).
      CHECK(j["interpreted_groups"].get<int64_t>() > 2 * batches);
      const double interp = j["interpreted_seconds"].get<double>();
      const double jit = j["jit_seconds"].get<double>();
      const double spec = j["specialized_seconds"].get<double>();
      CHECK(interp > 0);
      CHECK(jit > 0);
      // Both are parts of the specialized time, and jit_seconds leaves the interpreter out.
      CHECK(jit + interp <= spec * (1 + 1e-9) + 1e-9);
    }
    // Which templates, where their functions are and why: in --json and under the summary.
    const auto& named = js.back()["interpreted_templates"];
    REQUIRE(named.size() == 1);
    const std::string mix = named[0].get<std::string>();
    CHECK(mix.rfind("mix (" + model + ":9:1): ", 0) == 0);
    CHECK(mix.find("matmul other than per-row vector @ shared matrix") != std::string::npos);
    CHECK(r.err.find("\n  in the batching interpreter: " + mix + "\n") != std::string::npos);
    Shares s = summary_shares(r.err);
    CHECK(s.specialized == doctest::Approx(100.0));
    CHECK(s.interpreted > 0);
    CHECK(s.jit < 100.0);
    CHECK(s.jit + s.interpreted <= 100.05);

    // The generic path is not the batching interpreter: nothing counted there.
    Run g = run_pejit("train " + model + " --data " + data +
                      " --epochs 1 --json --no-train-eval --mode generic");
    REQUIRE(g.code == 0);
    auto gj = json_lines(g.out);
    REQUIRE(gj.size() == 1);
    CHECK(gj[0]["interpreted_groups"].get<int64_t>() == 0);
    CHECK(gj[0]["interpreted_seconds"].get<double>() == 0);
    CHECK(gj[0]["jit_seconds"].get<double>() == 0);
    Shares gs = summary_shares(g.err);
    CHECK(gs.jit == 0);
    CHECK(gs.specialized == 0);
  }

  TEST_CASE("train: an op's template in the batching interpreter is named with the source "
            "line of the call it was made for") {
    std::string model = tmp("op_interpreted.pe"), data = tmp("op_interp_train.txt");
    std::ofstream(model) << kOpInterpreted;
    REQUIRE(run_pejit("gen sst --trees 100 --seed 3 -o " + data).code == 0);
    Run r = run_pejit("train " + model + " --data " + data +
                      " --epochs 1 --batch 25 --json --no-train-eval --mode specialized");
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto js = json_lines(r.out);
    REQUIRE(js.size() == 1);
    const auto& named = js[0]["interpreted_templates"];
    REQUIRE(named.size() == 1);
    const std::string op = named[0].get<std::string>();
    CHECK(op.rfind("op.matmul (" + model + ":15:15): ", 0) == 0);
    CHECK(op.find("matmul other than per-row vector @ shared matrix") != std::string::npos);
    CHECK(r.err.find("\n  in the batching interpreter: " + op + "\n") != std::string::npos);
  }

  TEST_CASE("train: no group of the TreeLSTM runs in the batching interpreter, the embedding "
            "lookup included") {
    std::string data = tmp("interp_treelstm.txt");
    REQUIRE(run_pejit("gen sst --trees 100 --seed 4 -o " + data).code == 0);
    // Every template, the lookup (take from the embedding table) included, is lowered.
    CHECK(interpreted_templates(kModel, data).empty());

    Run r = run_pejit("train " + kModel + " --data " + data +
                      " --epochs 2 --batch 25 --json --no-train-eval --mode specialized");
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto js = json_lines(r.out);
    REQUIRE(js.size() == 2);
    for (const auto& j : js) {
      const int64_t batches = j["specialized_batches"].get<int64_t>();
      CHECK(batches == 4);
      CHECK(j["jit_batches"].get<int64_t>() == batches);
      CHECK(j["interpreted_groups"].get<int64_t>() == 0);
      CHECK(j["interpreted_seconds"].get<double>() == 0);
      CHECK(j["interpreted_templates"].empty());
    }
    Shares s = summary_shares(r.err);
    CHECK(s.specialized == doctest::Approx(100.0));
    CHECK(s.interpreted == 0);
    CHECK(s.jit > 99.0);
  }
}

} // namespace tests_cli_interpreted_cli_test
