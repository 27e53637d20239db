// N-ary trees in data: the reader and writer on nodes of any number of children, the encoder's
// `children: List[Tree]` field (children in order, leaves matched by their fixed-arity
// constructor first), its refusals and its arity errors at the node's file:line:col naming the
// model's type, and `gen_sst` with an arity above 2 (2..K children per internal node,
// deterministic, the same sentences as the binary trees, binary output unchanged at arity 2).
#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"
#include "runtime/train/encode.h"
#include "src/types/check.h"

#include "tests/support/errors.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

namespace tests_runtime_nary_data_test {

using namespace pejit;

namespace {

using test::error_of;
using test::first_line;

std::shared_ptr<ir::Module> module_of(const std::string& src, const std::string& name) {
  auto m = std::make_shared<ir::Module>();
  Diagnostics d;
  REQUIRE_MESSAGE(types::add_source(*m, src, name, d).ok, d.render());
  return m;
}

std::shared_ptr<ir::Module> load(const std::string& path) {
  auto m = std::make_shared<ir::Module>();
  Diagnostics d;
  REQUIRE_MESSAGE(types::add_file(*m, path, d).ok, d.render());
  return m;
}

const std::string kChildSum = PEJIT_SOURCE_DIR "/examples/childsum/childsum.pe";
const std::string kTreeLstm = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

// A list-only model: every node, leaves included, is an N; a leaf's list is empty.
const char* kListOnly = R"(
type T = N(word: i32[], children: List[T], label: i32[])
dim V = 10
param emb : f32[V, 4] = normal(0.0, 0.1)
fn enc(t: T) -> f32[4] { match t { N(w, ks, y) => take(emb, w) } }
entry loss(batch: List[T]) -> f32[] { sum_list(map(fn t => sum(enc(t)), batch)) }
)";

// A binary constructor beside the list: two children go to B, other counts to the list.
const char* kMixed = R"(
type T = L(word: i32[]) | B(l: T, r: T) | N(children: List[T])
dim V = 10
param emb : f32[V, 4] = normal(0.0, 0.1)
fn enc(t: T) -> f32[4] {
  match t {
    L(w) => take(emb, w)
    B(l, r) => enc(l) + enc(r)
    N(ks) => sum_list(map(enc, ks))
  }
}
entry loss(batch: List[T]) -> f32[] { sum_list(map(fn t => sum(enc(t)), batch)) }
)";

/// The words of a subtree's leaves, left to right, read back from the encoded value of the
/// child-sum model's Tree (Leaf(word, label) | Node(children, label)).
void leaf_words(const interp::Value& v, std::vector<int32_t>& out) {
  if (v.tag() == 0) {
    out.push_back(v.items()[0].as_tensor().item_i32());
    return;
  }
  const interp::Value& kids = v.items()[0];
  for (size_t i = 0; i < kids.list_size(); ++i)
    leaf_words(kids.list_at(i), out);
}

} // namespace

TEST_SUITE("data") {
  TEST_CASE("n-ary bracketed trees read and write back") {
    data::Vocab v;
    auto ts = data::parse_trees("(3 (2 a) (2 b) (2 c))\n"
                                "(1 (0 x) (4 (1 y) (2 z) (3 w) (2 v)) (- (2 u)))\n",
                                "n.txt", v);
    REQUIRE(ts.size() == 2);
    CHECK(ts[0].nodes.back().children == std::vector<int32_t>{0, 1, 2});
    CHECK_FALSE(ts[0].is_binary());
    CHECK(ts[1].nodes[5].children.size() == 4);
    CHECK(ts[1].nodes[7].children.size() == 1);
    CHECK(ts[1].sentence() == std::vector<std::string>{"x", "y", "z", "w", "v", "u"});
    CHECK(data::write_tree(ts[1]) == "(1 (0 x) (4 (1 y) (2 z) (3 w) (2 v)) (- (2 u)))");
    CHECK(data::node_text(ts[1], 5) == "(4 (...) (...) (...) ...)");
  }

  TEST_CASE("a children list receives a node's children in order, leaves go to Leaf") {
    auto m = load(kChildSum);
    runtime::TreeEncoder enc(*m, "Tree");
    CHECK(enc.classes(0) == 5);
    CHECK(enc.classes(3) == 5); // any count goes to Node(children: List[Tree], label)
    data::Vocab v;
    auto ts = data::parse_trees("(3 (2 a) (1 (2 b) (4 c) (0 d) (2 e)) (2 f))\n(4 g)\n"
                                "(2 (1 (3 h)))\n",
                                "c.txt", v);
    for (const auto& t : ts)
      enc.check(t);
    interp::Value root = enc.encode(ts[0]);
    REQUIRE(root.tag() == 1);
    CHECK(root.items()[1].as_tensor().item_i32() == 3);
    const interp::Value& kids = root.items()[0];
    REQUIRE(kids.list_size() == 3);
    CHECK(kids.list_at(0).tag() == 0);
    const interp::Value& mid = kids.list_at(1);
    CHECK(mid.tag() == 1);
    CHECK(mid.items()[0].list_size() == 4);
    CHECK(mid.items()[1].as_tensor().item_i32() == 1);
    CHECK(mid.items()[0].list_at(1).items()[1].as_tensor().item_i32() == 4); // (4 c)
    std::vector<int32_t> words;
    leaf_words(root, words);
    CHECK(words == std::vector<int32_t>{v.lookup("a"), v.lookup("b"), v.lookup("c"), v.lookup("d"),
                                        v.lookup("e"), v.lookup("f")});
    CHECK(enc.encode(ts[1]).tag() == 0); // a one-word sentence is a Leaf
    interp::Value unary = enc.encode(ts[2]);
    REQUIRE(unary.tag() == 1);
    REQUIRE(unary.items()[0].list_size() == 1);
    const interp::Value& only = unary.items()[0].list_at(0);
    CHECK(only.tag() == 1);
    CHECK(only.items()[0].list_at(0).tag() == 0);
  }

  TEST_CASE("fixed arities first, the list for the rest, a list-only type takes leaves too") {
    data::Vocab v;
    auto ts = data::parse_trees("(- (- a) (- (- b) (- c) (- d)) (- (- e)))", "m.txt", v);
    auto mixed = module_of(kMixed, "mixed.pe");
    runtime::TreeEncoder me(*mixed, "T");
    interp::Value r = me.encode(ts[0]);
    CHECK(r.tag() == 2); // three children: N
    REQUIRE(r.items()[0].list_size() == 3);
    CHECK(r.items()[0].list_at(0).tag() == 0);
    CHECK(r.items()[0].list_at(1).tag() == 2);
    CHECK(r.items()[0].list_at(2).tag() == 2); // one child: N (no unary constructor)
    auto two = data::parse_trees("(- (- a) (- b))", "m2.txt", v);
    CHECK(me.encode(two[0]).tag() == 1); // two children: B

    auto lo = module_of(kListOnly, "list.pe");
    runtime::TreeEncoder le(*lo, "T");
    auto leaf = data::parse_trees("(1 a)", "l.txt", v);
    interp::Value l = le.encode(leaf[0]);
    CHECK(l.tag() == 0);
    CHECK(l.items()[1].list_size() == 0);
    // An inner node has no word to give N's word field.
    auto inner = data::parse_trees("(1 (2 a) (3 b) (4 c))", "l.txt", v);
    CHECK(first_line(error_of([&] { le.check(inner[0]); })) ==
          "l.txt:1:1: error: the node has children, so no word (a node of the data holds a word "
          "or children, never both), but constructor N of the model's type T needs a word "
          "(node `(1 (...) (...) (...))`)");
  }

  TEST_CASE("a binary model refuses an n-ary node at its line and column, naming its type") {
    auto m = load(kTreeLstm);
    runtime::TreeEncoder enc(*m, "Tree");
    data::Vocab v;
    auto ts = data::parse_trees("(3 (2 a) (2 b))\n(3 (2 a) (1 (2 b) (2 c) (2 d)))\n", "b.txt", v);
    enc.check(ts[0]);
    std::string e = error_of([&] { enc.check(ts[1]); });
    CHECK(first_line(e) == "b.txt:2:10: error: a node with 3 children, but no constructor of the "
                           "model's type Tree takes that many; its constructors take 0 (Leaf), "
                           "2 (Node) children (node `(1 (...) (...) (...))`)");
    CHECK(e.find(kTreeLstm + ":5:1: note: type Tree is declared here: to take trees with any "
                             "number of children per node, give a constructor a field "
                             "`children: List[Tree]`") != std::string::npos);
    CHECK(error_of([&] { (void)enc.encode(ts[1]); }) == e);
  }

  TEST_CASE("types a children list cannot fill are refused when the encoder is made") {
    auto both = module_of(R"(
type T = L(word: i32[]) | N(first: T, rest: List[T])
entry loss(batch: List[T]) -> f32[] { 0.0 }
)",
                          "both.pe");
    CHECK(error_of([&] { runtime::TreeEncoder e(*both, "T"); })
              .starts_with("constructor N of type T takes a node's children both as fields of "
                           "type T and as a List[T]"));
    auto noleaf = module_of(R"(
type T = N(children: List[T], label: i32[])
entry loss(batch: List[T]) -> f32[] { 0.0 }
)",
                            "noleaf.pe");
    CHECK(error_of([&] {
            runtime::TreeEncoder e(*noleaf, "T");
          }).starts_with("type T has no constructor for leaves"));
    auto other = module_of(R"(
type T = L(word: i32[]) | N(children: List[i32[]])
entry loss(batch: List[T]) -> f32[] { 0.0 }
)",
                           "other.pe");
    CHECK(error_of([&] {
            runtime::TreeEncoder e(*other, "T");
          }).starts_with("cannot fill field 'children: List[i32[]]' of constructor N"));
  }

  TEST_CASE("gen_sst --arity: 2..K children per internal node, the same sentences") {
    for (data::Shape s : {data::Shape::Sst, data::Shape::Deep, data::Shape::Balanced}) {
      CAPTURE(data::shape_name(s));
      data::Vocab a, b, c;
      auto bin = data::gen_sst(200, 3, s, a);
      auto nary = data::gen_sst(200, 3, s, b, 4);
      std::string text;
      for (const auto& t : nary)
        text += data::write_tree(t) + "\n";
      std::string again;
      for (const auto& t : data::gen_sst(200, 3, s, c, 4))
        again += data::write_tree(t) + "\n";
      CHECK(text == again);
      CHECK(a == b); // the lexicon first, whatever the arity
      std::vector<size_t> per_count(5, 0);
      size_t not_binary = 0;
      for (size_t i = 0; i < nary.size(); ++i) {
        const auto& t = nary[i];
        CHECK(t.sentence() == bin[i].sentence());
        not_binary += !t.is_binary();
        for (const auto& n : t.nodes) {
          REQUIRE((n.word >= 0) == n.children.empty());
          REQUIRE(n.label >= 0);
          REQUIRE(n.label <= 4);
          REQUIRE(n.children.size() != 1);
          REQUIRE(n.children.size() <= 4);
          ++per_count[n.children.size()];
        }
      }
      CHECK(not_binary > 100);
      CHECK(per_count[4] > 0);
      if (s != data::Shape::Balanced) {
        CHECK(per_count[2] > 0);
        CHECK(per_count[3] > 0);
      }
      // Round trip through text.
      data::Vocab v2 = data::Vocab::from_words(b.words());
      CHECK(data::parse_trees(text, "gen", v2) == nary);
    }
    // Arity 2 is the binary generator, draw for draw.
    data::Vocab x, y;
    CHECK(data::gen_sst(30, 8, data::Shape::Sst, x) ==
          data::gen_sst(30, 8, data::Shape::Sst, y, 2));
    data::Vocab z;
    CHECK(error_of([&] {
            (void)data::gen_sst(3, 1, data::Shape::Sst, z, 1);
          }).starts_with("an arity of 1"));
  }

  TEST_CASE("gen_sst --arity: negators still flip their siblings' class") {
    data::Vocab v;
    auto trees = data::gen_sst(2000, 2, data::Shape::Sst, v, 3);
    size_t negated = 0, mirrored = 0;
    for (const auto& t : trees) {
      for (const auto& n : t.nodes) {
        if (n.children.size() != 2)
          continue;
        const auto& a = t.nodes[n.children[0]];
        const auto& b = t.nodes[n.children[1]];
        bool a_neg = a.children.empty() &&
                     (t.tokens[n.children[0]] == "not" || t.tokens[n.children[0]] == "never");
        if (!a_neg || b.children.empty() || b.label == 2)
          continue;
        ++negated;
        mirrored += n.label == 4 - b.label;
      }
    }
    REQUIRE(negated > 50);
    CHECK(mirrored > negated * 8 / 10);
  }
}

} // namespace tests_runtime_nary_data_test
