// `--labels binary` (runtime/train/labels.h): the SST 5-class labels mapped as Tai et al. do
// (0-1 -> 0, 3-4 -> 1, a neutral root drops its tree, a neutral inner node is unlabeled), and
// the scoring pass counting only the labeled nodes of the trees kept.
#include "runtime/data/tree_io.h"
#include "runtime/session_access.h"
#include "runtime/train/common.h"
#include "runtime/train/labels.h"

#include <doctest/doctest.h>

#include <numeric>
#include <string>
#include <vector>

namespace tests_runtime_labels_test {

using namespace pejit;
using namespace pejit::runtime;

namespace {

const char* kTrees = "(3 (2 a) (4 (2 b) (1 c)))\n"
                     "(2 (3 a) (1 b))\n"
                     "(0 (2 c) (2 d))\n"
                     "(4 (3 a) (2 (1 b) (0 c)))\n"
                     "(1 (0 d) (- a))\n";

Dataset parse(const std::string& text, data::Vocab& vocab) {
  Dataset ds;
  ds.trees = data::parse_trees(text, "hand.txt", vocab);
  return ds;
}

std::vector<int32_t> labels_of(const data::ParseTree& t) {
  std::vector<int32_t> ys;
  for (const auto& n : t.nodes)
    ys.push_back(n.label);
  return ys;
}

} // namespace

TEST_CASE("labels binary: the mapping, the trees dropped and the nodes unlabeled") {
  data::Vocab vocab;
  Dataset ds = parse(kTrees, vocab);
  LabelReport r = apply_labels(ds, LabelScheme::Binary, "hand.txt");
  CHECK(r.trees_read == 5);
  CHECK(r.trees_dropped == 1); // (2 (3 a) (1 b))
  CHECK(r.nodes_unlabeled == 5);
  REQUIRE(ds.trees.size() == 4);
  // Post-order: leaves and inner nodes children first, the root last.
  CHECK(labels_of(ds.trees[0]) == std::vector<int32_t>{-1, -1, 0, 1, 1});
  CHECK(labels_of(ds.trees[1]) == std::vector<int32_t>{-1, -1, 0});
  CHECK(labels_of(ds.trees[2]) == std::vector<int32_t>{1, 0, 0, -1, 1});
  CHECK(labels_of(ds.trees[3]) == std::vector<int32_t>{0, -1, 0}); // `-` stays unlabeled
  int64_t nodes = 0;
  for (size_t i = 0; i < ds.size(); ++i)
    nodes += ds.nodes(i);
  CHECK(nodes == 3 + 1 + 4 + 2);
  CHECK(describe(r, "hand.txt") == "binary labels: hand.txt: kept 4 of 5 trees (1 with a neutral "
                                   "root dropped), 5 neutral inner nodes unlabeled");

  // fine keeps everything as read.
  data::Vocab v2;
  Dataset fine = parse(kTrees, v2);
  CHECK(apply_labels(fine, LabelScheme::Fine, "hand.txt").trees_dropped == 0);
  CHECK(fine.trees.size() == 5);
  CHECK(labels_of(fine.trees[0]) == std::vector<int32_t>{2, 2, 1, 4, 3});
}

TEST_CASE("labels binary: bad input") {
  data::Vocab vocab;
  Dataset big = parse("(3 (7 a) (1 b))\n", vocab);
  try {
    apply_labels(big, LabelScheme::Binary, "hand.txt");
    FAIL("no error");
  } catch (const Error& e) {
    std::string w = e.what();
    CHECK(w.find("hand.txt:1:4: error: label 7 is not an SST sentiment (0-4)") == 0);
  }
  Dataset neutral = parse("(2 (3 a) (1 b))\n(2 c)\n", vocab);
  CHECK_THROWS_WITH_AS(apply_labels(neutral, LabelScheme::Binary, "n.txt"),
                       doctest::Contains("every tree of 'n.txt' has a neutral root"), Error);
  Dataset sents;
  sents.is_trees = false;
  sents.sents = {{1, 2}};
  CHECK_THROWS_WITH_AS(apply_labels(sents, LabelScheme::Binary, "s.txt"),
                       doctest::Contains("'s.txt' holds sentences"), Error);
  CHECK_THROWS_WITH_AS(parse_labels("ternary"), doctest::Contains("expected fine or binary"),
                       Error);
}

TEST_CASE("labels binary: scoring counts the labeled nodes of the trees kept") {
  auto m = load_model(PEJIT_SOURCE_DIR "/examples/treelstm/treelstm_binary.pe");
  ir::Type elem = batch_element_type(*m, "loss");
  data::Vocab vocab;
  Dataset ds = parse(kTrees, vocab);
  apply_labels(ds, LabelScheme::Binary, "hand.txt");
  SessionOptions so;
  so.mode = "generic";
  so.dims["V"] = static_cast<int64_t>(vocab.size());
  // Without allow_unlabeled, an unlabeled node is an error at its line and column.
  CHECK_THROWS_WITH_AS(Encoder(*m, ds, elem, interp::bind_dims(*m, so.dims)),
                       doctest::Contains("hand.txt:1:4: error: the node has no label"), Error);
  const Encoder enc(*m, ds, elem, interp::bind_dims(*m, so.dims), true);
  Session s = SessionAccess::from_module(m, so);
  for (int round = 0; round < 3; ++round) {
    Scores sc = score(s, ds, enc, 3);
    // The expected counts from infer_nodes' predictions and the mapped labels by hand.
    std::vector<size_t> idx(ds.size());
    std::iota(idx.begin(), idx.end(), 0);
    Value preds = s.run("infer_nodes", SessionAccess::wrap(enc.batch(ds, idx, 0, ds.size())));
    int64_t root_ok = 0, node_ok = 0, labeled = 0;
    for (size_t i = 0; i < ds.size(); ++i) {
      const auto& t = ds.trees[i];
      for (size_t n = 0; n < t.nodes.size(); ++n) {
        if (t.nodes[n].label < 0)
          continue;
        bool ok = preds.at(i).at(n).item_i32() == t.nodes[n].label;
        node_ok += ok;
        labeled += 1;
        if (n + 1 == t.nodes.size())
          root_ok += ok;
      }
    }
    CHECK(sc.roots == 4);
    CHECK(sc.labeled == 10);
    CHECK(sc.nodes == 10);
    CHECK(sc.root_ok == root_ok);
    CHECK(sc.node_ok == node_ok);
    // The loss counts only the labeled nodes: a step on the unlabeled ones alone adds nothing.
    Dataset only_unlabeled;
    only_unlabeled.trees = data::parse_trees("(- (- a) (- b))\n", "u.txt", vocab);
    std::vector<size_t> one{0};
    CHECK(s.run("loss", SessionAccess::wrap(enc.batch(only_unlabeled, one, 0, 1))).item_f32() ==
          0.0f);
    s.step("loss", SessionAccess::wrap(enc.batch(ds, idx, 0, ds.size())));
  }
}

} // namespace tests_runtime_labels_test
