// End-to-end data errors of the `pejit` command: every malformed data case (labels outside the
// model's classes, arity, a missing label, encodings) is an error naming the data file's
// line and column, in --data and --dev, before any training step; a data file in the format
// of the other kind of model is refused; `--init` from a checkpoint with another vocabulary
// says so and keeps the checkpoint's words' rows.
#include "runtime/checkpoint/checkpoint.h"
#include "tests/cli/cli_util.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <string>

namespace tests_cli_data_cli_test {

namespace {

using pejit::cli_test::Run;
using pejit::cli_test::run_pejit;
using pejit::cli_test::tmp;

std::string write(const std::string& name, const std::string& text) {
  std::string path = tmp(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

const std::string kTreeLstm = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";
const std::string kRnn = PEJIT_SOURCE_DIR "/examples/rnn/rnn.pe";
const std::string kListOps = PEJIT_SOURCE_DIR "/examples/listops/listops.pe";
const std::string kGood = "(3 (2 The) (4 (2 Rock) (2 rocks)))\n(1 (2 a) (0 bad))\n";

} // namespace

TEST_SUITE("cli data") {

  TEST_CASE("train: malformed data is an error at the data file's line and column") {
    struct Case {
      const char* name;
      std::string text;
      std::string error; // after "PATH:"
    };
    const Case cases[] = {
        {"label.txt", kGood + "(1 (7 a) (2 b))\n",
         "3:4: error: label 7 is outside the model's classes [0, 5) (node `(7 a)`)"},
        {"root_label.txt", kGood + "\n(5 (2 a) (2 b))\n",
         "4:1: error: label 5 is outside the model's classes [0, 5) (node `(5 (...) (...))`)"},
        {"arity.txt", kGood + "(1 (2 a) (2 b) (2 c))\n",
         "3:1: error: a node with 3 children, but no constructor of the model's type Tree takes "
         "that many"},
        {"unary.txt", "(1 (2 (2 a)))\n",
         "1:4: error: a node with 1 child, but no constructor of the model's type Tree"},
        {"nolabel.txt", kGood + "(1 (2 a) (- b))\n",
         "3:10: error: the node has no label ('-'), but constructor Leaf of the model's type Tree "
         "needs one (node `(- b)`)"},
        {"utf8.txt", kGood + "(1 (2 a) (2 b\xe9))\n", "3:14: error: invalid UTF-8 (byte 0xe9)"},
        {"nul.txt", kGood + std::string("(1 (2 a) (2 b\0))\n", 17), "3:14: error: a NUL byte"},
        {"syntax.txt", kGood + "(1 (2 a) (2 b)\n", "3:15: error: missing ')'"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      std::string bad = write(c.name, c.text);
      Run r = run_pejit("train " + kTreeLstm + " --data " + bad + " --epochs 1 --mode generic");
      CHECK(r.code == 1);
      CHECK_MESSAGE(r.err.starts_with("pejit: " + bad + ":" + c.error), r.err);
      CHECK(r.out.find("epoch 1") == std::string::npos); // refused before any training
      // The same file as --dev: refused before the first epoch, at the same place.
      Run d = run_pejit("train " + kTreeLstm + " --data " + write("good.txt", kGood) + " --dev " +
                        bad + " --epochs 1 --mode generic");
      CHECK(d.code == 1);
      CHECK_MESSAGE(d.err.starts_with("pejit: " + bad + ":" + c.error), d.err);
      CHECK(d.out.find("epoch 1") == std::string::npos);
    }
    // The label's error says where the model makes it a class.
    Run r = run_pejit("train " + kTreeLstm + " --data " + tmp("label.txt") + " --epochs 1");
    CHECK(r.err.find(kTreeLstm + ":35:48: note: the label of a Leaf is a class of this "
                                 "cross_entropy, over 5 classes") != std::string::npos);
    CHECK(r.err.find("  (1 (7 a) (2 b))\n     ^\n") != std::string::npos);
  }

  TEST_CASE("eval, dump and a root-labelled model check labels at the data's line and column") {
    std::string good = write("good.txt", kGood), ck = tmp("good.ckpt");
    REQUIRE(run_pejit("train " + kTreeLstm + " --data " + good + " --epochs 1 --save " + ck).code ==
            0);
    std::string bad = write("eval_label.txt", "(1 (2 a) (9 b))\n");
    Run e = run_pejit("eval " + kTreeLstm + " --params " + ck + " --data " + bad);
    CHECK(e.code == 1);
    CHECK_MESSAGE(e.err.starts_with("pejit: " + bad +
                                    ":1:10: error: label 9 is outside the "
                                    "model's classes [0, 5)"),
                  e.err);
    Run d = run_pejit("dump " + kTreeLstm + " --data " + bad);
    CHECK(d.code == 1);
    CHECK(d.err.starts_with("pejit: " + bad + ":1:10: error: label 9"));

    // ListOps: labelled at the root only, 10 classes; inner nodes carry '-'.
    std::string lo = write("listops_bad.txt", "(3 (- (- [MAX) (- 3)) (- ]))\n"
                                              "(10 (- (- [MIN) (- 4)) (- ]))\n");
    Run l = run_pejit("train " + kListOps + " --data " + lo + " --epochs 1 --mode generic");
    CHECK(l.code == 1);
    CHECK_MESSAGE(l.err.starts_with("pejit: " + lo +
                                    ":2:1: error: label 10 is outside the "
                                    "model's classes [0, 10)"),
                  l.err);
  }

  TEST_CASE("a label the check cannot follow is located when the kernel finds it") {
    // The label reaches cross_entropy through a tuple, which the flow analysis does not
    // follow: the kernel's error is mapped back to the node.
    std::string model = write("tuple.pe", R"(
type Tree = Leaf(word: i32[], label: i32[]) | Node(left: Tree, right: Tree, label: i32[])
dim V = 100
param emb : f32[V, 4] = normal(0.0, 0.1)
param W : f32[4, 3] = xavier
fn enc(t: Tree) -> (f32[4], f32[]) {
  match t {
    Leaf(w, y) => {
      let h = take(emb, w);
      let p = (h @ W, y);
      (h, cross_entropy(p.0, p.1))
    }
    Node(l, r, y) => {
      let a = enc(l);
      let b = enc(r);
      let h = tanh(a.0 + b.0);
      let p = (h @ W, y);
      (h, a.1 + b.1 + cross_entropy(p.0, p.1))
    }
  }
}
entry loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => enc(t).1, batch)) }
)");
    std::string good = write("tuple_good.txt", "(1 (2 a) (0 b))\n(0 (1 a) (2 b))\n");
    std::string bad = write("tuple_bad.txt", "(1 (2 a) (0 b))\n(1 (2 a) (4 b))\n");
    const std::string error = "pejit: " + bad +
                              ":2:10: error: label 4 is outside the model's classes [0, 3) "
                              "(node `(4 b)`)\n  (1 (2 a) (4 b))\n           ^\n";
    for (const char* mode : {"generic", "specialized"}) {
      CAPTURE(mode);
      Run r = run_pejit("train " + model + " --data " + bad + " --epochs 1 --mode " + mode);
      CHECK(r.code == 1);
      CHECK_MESSAGE(r.err.starts_with(error), r.err);
      CHECK(r.err.find("note: the kernel's error: ") != std::string::npos);
    }
    std::string ck = tmp("tuple.ckpt");
    REQUIRE(run_pejit("train " + model + " --data " + good + " --epochs 1 --save " + ck).code ==
            0);
    Run e = run_pejit("eval " + model + " --params " + ck + " --data " + bad);
    CHECK(e.code == 1);
    CHECK_MESSAGE(e.err.starts_with(error), e.err);
  }

  TEST_CASE("a data file in the other model's format is refused") {
    std::string trees = write("trees.txt", kGood);
    Run r = run_pejit("train " + kRnn + " --data " + trees + " --epochs 1");
    CHECK(r.code == 1);
    CHECK_MESSAGE(r.err.starts_with("pejit: " + trees +
                                    ":1:1: error: this line is a bracketed tree, but plain "
                                    "sentences are read here"),
                  r.err);
    std::string sents = write("sents.txt", "\n  the cat sat\nthe dog\n");
    Run t = run_pejit("train " + kTreeLstm + " --data " + sents + " --epochs 1");
    CHECK(t.code == 1);
    CHECK_MESSAGE(t.err.starts_with("pejit: " + sents +
                                    ":2:3: error: the model reads bracketed trees (its batch "
                                    "element is Tree)"),
                  t.err);
    // As --dev too, before training.
    Run dv = run_pejit("train " + kRnn + " --data " + sents + " --dev " + trees + " --epochs 1");
    CHECK(dv.code == 1);
    CHECK(dv.err.starts_with("pejit: " + trees + ":1:1: error: this line is a bracketed tree"));
    CHECK(dv.out.find("epoch 1") == std::string::npos);
    // Each model trains on its own format.
    CHECK(run_pejit("train " + kRnn + " --data " + sents + " --epochs 1").code == 0);
  }

  TEST_CASE("--init with another vocabulary: reported, the new words added, old rows kept") {
    std::string a = tmp("va.txt"), ck = tmp("va.ckpt"), out = tmp("vb.ckpt");
    REQUIRE(run_pejit("gen sst --trees 40 --seed 3 -o " + a).code == 0);
    REQUIRE(run_pejit("train " + kTreeLstm + " --data " + a + " --epochs 1 --save " + ck).code ==
            0);
    // The same trees with two new words.
    std::ifstream in(a);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    for (const char* w : {"(2 never)", "(2 not)"}) {
      size_t at = text.find(w);
      REQUIRE(at != std::string::npos);
      text.replace(at, std::string(w).size(),
                   std::string(w).insert(std::string(w).size() - 1, "zz"));
    }
    std::string b = write("vb.txt", text);
    Run r = run_pejit("train " + kTreeLstm + " --data " + b + " --init " + ck +
                      " --epochs 1 --lr 0 --mode generic --save " + out);
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.err.find("note: 2 words of '" + b + "' (2 of its ") != std::string::npos);
    CHECK(r.err.find(") are not in the vocabulary of '" + ck + "'") != std::string::npos);
    CHECK(r.err.find("they are added to it, with new embedding rows") != std::string::npos);

    auto before = pejit::checkpoint::load(ck);
    auto after = pejit::checkpoint::load(out);
    REQUIRE(after.vocab.size() == before.vocab.size() + 2);
    CHECK(std::equal(before.vocab.begin(), before.vocab.end(), after.vocab.begin()));
    std::set<std::string> added(after.vocab.begin() + static_cast<long>(before.vocab.size()),
                                after.vocab.end());
    CHECK(added == std::set<std::string>{"neverzz", "notzz"});
    const auto& e0 = before.params.values[static_cast<size_t>(before.params.index("emb"))];
    const auto& e1 = after.params.values[static_cast<size_t>(after.params.index("emb"))];
    REQUIRE(e1.shape()[0] == e0.shape()[0] + 2);
    // lr 0: the checkpoint's rows come back unchanged, by word; the new rows are initialized.
    CHECK(std::equal(e0.f32(), e0.f32() + e0.numel(), e1.f32()));
    double fresh = 0;
    for (int64_t i = e0.numel(); i < e1.numel(); ++i)
      fresh += std::abs(e1.f32()[i]);
    CHECK(fresh > 0);
    // The same data: nothing to report.
    Run same = run_pejit("train " + kTreeLstm + " --data " + a + " --init " + ck +
                         " --epochs 1 --mode generic");
    CHECK(same.code == 0);
    CHECK(same.err.find("not in the vocabulary") == std::string::npos);
  }

} // TEST_SUITE

} // namespace tests_cli_data_cli_test
