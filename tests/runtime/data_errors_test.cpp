// Data errors located at the data file's line and column, whatever stage finds them: the
// readers' text checks (UTF-8, NUL, a tree file given as sentences), node_error's form, the
// tree encoder's arity, label and structure checks, the label class analysis (label_classes.h)
// on the example models, and the encoder on a tree 1,000,000 levels deep, far deeper than the
// native stack allows a recursive walk.
#include "runtime/data/tree_io.h"
#include "runtime/train/encode.h"
#include "runtime/train/label_classes.h"
#include "src/types/check.h"
#include "src/util/check.h"

#include "tests/support/errors.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

namespace tests_runtime_data_errors_test {

using namespace pejit;

namespace {

using test::error_of;
using test::first_line;

std::shared_ptr<ir::Module> load(const std::string& path, const std::string& extra = "") {
  auto m = std::make_shared<ir::Module>();
  Diagnostics d;
  REQUIRE_MESSAGE(types::add_file(*m, path, d).ok, d.render());
  if (!extra.empty())
    REQUIRE_MESSAGE(types::add_source(*m, extra, "extra.pe", d).ok, d.render());
  return m;
}

const std::string kTreeLstm = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";
const std::string kListOps = PEJIT_SOURCE_DIR "/examples/listops/listops.pe";

/// A model of its own: a unary constructor, and labels that feed no cross_entropy.
const char* kUnary = R"(
type T = L(word: i32[], label: i32[]) | U(child: T, label: i32[]) | B(l: T, r: T, label: i32[])
dim V = 10
param emb : f32[V, 4] = normal(0.0, 0.1)
fn enc(t: T) -> f32[4] {
  match t {
    L(w, y) => take(emb, w)
    U(c, y) => enc(c)
    B(l, r, y) => enc(l) + enc(r)
  }
}
entry loss(batch: List[T]) -> f32[] { sum_list(map(fn t => sum(enc(t)), batch)) }
)";

} // namespace

TEST_SUITE("data errors") {

  TEST_CASE("readers: invalid UTF-8 and NUL bytes are errors at their column") {
    struct Case {
      std::string text, error;
    };
    const Case cases[] = {
        {"(2 caf\xc3\xa9)\n(2 b\xff)", "t.txt:2:5: error: invalid UTF-8 (byte 0xff)"},
        {std::string("(2 a\0b)", 7), "t.txt:1:5: error: a NUL byte"},
        {"(2 \xc0\xaf)", "t.txt:1:4: error: invalid UTF-8 (byte 0xc0)"},         // overlong '/'
        {"(2 \xed\xa0\x80)", "t.txt:1:4: error: invalid UTF-8 (byte 0xed)"},     // a surrogate
        {"(2 \xf4\x90\x80\x80)", "t.txt:1:4: error: invalid UTF-8 (byte 0xf4)"}, // > U+10FFFF
        {"(2 ab\xe2\x82)", "t.txt:1:6: error: invalid UTF-8 (byte 0xe2)"},       // truncated
        {"(2 a)\n\xff\n", "t.txt:2:1: error: invalid UTF-8 (byte 0xff)"}, // even a blank line
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      data::Vocab v;
      CHECK(first_line(error_of([&] {
              data::parse_trees(c.text, "t.txt", v);
            })).starts_with(c.error));
      if (c.text.find('\n') != std::string::npos)
        continue; // its first line is a tree, which the sentence reader refuses first
      data::Vocab sv;
      CHECK(first_line(error_of([&] {
              data::parse_sentences(c.text, "t.txt", sv);
            })).starts_with(c.error));
    }
    // Valid multi-byte text, and a byte order mark at the start, read as text.
    data::Vocab v;
    auto trees = data::parse_trees("\xef\xbb\xbf(2 caf\xc3\xa9 )\n(3 \xf0\x9f\x99\x82)", "t", v);
    REQUIRE(trees.size() == 2);
    CHECK(trees[0].tokens[0] == "caf\xc3\xa9");
    CHECK(data::parse_sentences("\xef\xbb\xbf"
                                "a b",
                                "t", v)[0]
              .size() == 2);
    // The excerpt under the message shows a bad byte as '?', the caret under it.
    CHECK(error_of([&] {
            data::parse_trees("(2 b\xff)", "t.txt", v);
          }).ends_with("\n  (2 b?)\n      ^"));
  }

  TEST_CASE("read_sentences refuses a file of bracketed trees, at the tree's line") {
    data::Vocab v;
    std::string e = error_of([&] {
      data::parse_sentences("a plain sentence\n\n  (3 (2 The) (4 (2 Rock) (2 is)))\n", "s.txt", v);
    });
    CHECK(first_line(e).starts_with("s.txt:3:3: error: this line is a bracketed tree, but plain "
                                    "sentences are read here"));
    // Parentheses in plain text are fine: only a line that is a whole tree is refused.
    for (const char* ok : {"( a smile )", "(3 is a number)", "(1 a) b", "(x y)", "(2 a"}) {
      CAPTURE(ok);
      CHECK(data::parse_sentences(ok, "s.txt", v).size() == 1);
    }
  }

  TEST_CASE("trees remember where each node was, which equality ignores") {
    data::Vocab v;
    auto ts = data::parse_trees("\n(3 (2 a)\t(4 (2 b) (2 c)))\n", "t.txt", v);
    REQUIRE(ts.size() == 1);
    const auto& o = ts[0].origin;
    REQUIRE(o.file);
    CHECK(o.file->name == "t.txt");
    CHECK(o.line == 2);
    CHECK(o.offset == 1);
    CHECK(o.cols == std::vector<uint32_t>{4, 13, 19, 10, 1}); // post-order: a b c (b c) root
    data::ParseTree copy = ts[0];
    copy.origin = {};
    CHECK(copy == ts[0]);
  }

  TEST_CASE("node_error: file:line:col of the node, the node, the line and a caret") {
    data::Vocab v;
    auto ts = data::parse_trees("(2 x)\n(1 (2 a) (7 bad))", "t.txt", v);
    CHECK(std::string(data::node_error(ts[1], 1, "something").what()) ==
          "t.txt:2:10: error: something (node `(7 bad)`)\n"
          "  (1 (2 a) (7 bad))\n"
          "           ^");
    CHECK(first_line(data::node_error(ts[1], 2, "x").what()) ==
          "t.txt:2:1: error: x (node `(1 (...) (...))`)");
    // A long line is shown around the node.
    std::string line = "(1 (2 a) (1";
    for (int i = 0; i < 300; ++i)
      line += " (2 w" + std::to_string(i) + ")";
    line += "))";
    ts = data::parse_trees(line, "long.txt", v);
    std::string e = data::node_error(ts[0], 150, "here").what();
    CHECK(first_line(e) == "long.txt:1:" + std::to_string(line.find("(2 w149)") + 1) +
                               ": error: here (node `(2 w149)`)");
    std::string excerpt = e.substr(e.find('\n') + 3);
    excerpt = excerpt.substr(0, excerpt.find('\n'));
    CHECK(excerpt.size() < 140);
    CHECK(excerpt.find("(2 w149)") != std::string::npos);
    CHECK(e.substr(e.rfind('\n') + 1).size() == 2 + excerpt.find("(2 w149)") + 1);
    // A tree built in memory has no file: the node's index instead.
    data::ParseTree t;
    t.nodes = {{2, 1, {}}};
    t.tokens = {"a"};
    CHECK(std::string(data::node_error(t, 0, "oops").what()) ==
          "tree node 0: error: oops (node `(2 a)`)");
  }

  TEST_CASE("label_classes follows labels to the cross_entropy they feed") {
    auto m = load(kTreeLstm);
    const int tree = m->adt_index("Tree");
    // Leaf(word, label): field 1; Node(left, right, label): field 2.
    auto found = runtime::label_classes(*m, {{tree, 0, 1}, {tree, 1, 2}}, {});
    REQUIRE(found.size() == 2);
    CHECK(found[{tree, 0, 1}].classes == 5);
    CHECK(found[{tree, 1, 2}].classes == 5);
    CHECK(found[{tree, 1, 2}].at.line == 35); // node_loss's cross_entropy

    auto lo = load(kListOps);
    auto ex = runtime::label_classes(*lo, {{lo->adt_index("Example"), 0, 1}}, {});
    REQUIRE(ex.size() == 1);
    CHECK(ex.begin()->second.classes == 10);

    // Labels used for nothing but an embedding lookup feed no cross_entropy.
    auto un = std::make_shared<ir::Module>();
    Diagnostics d;
    REQUIRE_MESSAGE(types::add_source(*un, kUnary, "unary.pe", d).ok, d.render());
    CHECK(runtime::label_classes(*un, {{un->adt_index("T"), 0, 1}}, {}).empty());

    // A class axis of a named dimension needs its binding; a tighter call wins.
    const char* named = R"(
type T = L(word: i32[], label: i32[]) | N(l: T, r: T, label: i32[])
dim V = 10
dim K = 7
param emb : f32[V, 4] = normal(0.0, 0.1)
param W : f32[4, K] = xavier
fn h(t: T) -> f32[4] {
  match t {
    L(w, y) => take(emb, w)
    N(l, r, y) => h(l) + h(r)
  }
}
fn pass(y: i32[]) -> i32[] { y }
fn ce(t: T) -> f32[] {
  match t {
    L(w, y) => cross_entropy(h(t) @ W, pass(y))
    N(l, r, y) => { let z = y; cross_entropy(h(t), z) + ce(l) + ce(r) }
  }
}
entry loss(batch: List[T]) -> f32[] { sum_list(map(ce, batch)) }
)";
    auto nm = std::make_shared<ir::Module>();
    REQUIRE_MESSAGE(types::add_source(*nm, named, "named.pe", d).ok, d.render());
    const int t = nm->adt_index("T");
    auto unbound = runtime::label_classes(*nm, {{t, 0, 1}, {t, 1, 2}}, {});
    CHECK(unbound.count({t, 0, 1}) == 0);
    CHECK(unbound[{t, 1, 2}].classes == 4);
    auto bound = runtime::label_classes(*nm, {{t, 0, 1}, {t, 1, 2}}, {{"K", 3}});
    CHECK(bound[{t, 0, 1}].classes == 3); // through pass()
  }

  TEST_CASE("the encoder reports data errors at the node's file:line:col") {
    auto m = load(kTreeLstm);
    runtime::TreeEncoder enc(*m, "Tree");
    CHECK(enc.classes(0) == 5);
    CHECK(enc.classes(2) == 5);
    data::Vocab v;
    auto ts = data::parse_trees("(3 (2 a) (4 (2 b) (2 c)))\n"
                                "(1 (2 a) (2 b) (2 c))\n"
                                "(1 (2 a) (- b))\n"
                                "(1 (2 a) (7 b))\n"
                                "(1 (2 a))\n",
                                "d.txt", v);
    REQUIRE(ts.size() == 5);
    enc.check(ts[0]);
    CHECK(enc.encode(ts[0]).tag() == 1);
    auto both = [&](const data::ParseTree& t) {
      std::string a = error_of([&] { enc.check(t); });
      std::string b = error_of([&] { (void)enc.encode(t); });
      CHECK(a == b);
      return first_line(a);
    };
    CHECK(both(ts[1]) == "d.txt:2:1: error: a node with 3 children, but no constructor of the "
                         "model's type Tree takes that many; its constructors take 0 (Leaf), "
                         "2 (Node) children (node `(1 (...) (...) (...))`)");
    CHECK(both(ts[2]) == "d.txt:3:10: error: the node has no label ('-'), but constructor Leaf "
                         "of the model's type Tree needs one (node `(- b)`)");
    CHECK(both(ts[4]) == "d.txt:5:1: error: a node with 1 child, but no constructor of the "
                         "model's type Tree takes that many; its constructors take 0 (Leaf), "
                         "2 (Node) children (node `(1 (...))`)");
    // A label outside the classes: check() says where, with the model's call as a note;
    // encode() leaves it to the kernels.
    std::string e = error_of([&] { enc.check(ts[3]); });
    CHECK(first_line(e) == "d.txt:4:10: error: label 7 is outside the model's classes [0, 5) "
                           "(node `(7 b)`)");
    CHECK(e.find(kTreeLstm + ":35:48: note: the label of a Leaf is a class of this "
                             "cross_entropy, over 5 classes") != std::string::npos);
    CHECK_NOTHROW((void)enc.encode(ts[3]));

    // Nodes that are not one tree in post-order (built in memory).
    data::ParseTree bad;
    bad.nodes = {{2, 1, {}}, {2, 1, {}}, {3, -1, {0, 0}}};
    bad.tokens = {"a", "a", ""};
    CHECK(first_line(error_of([&] {
            enc.check(bad);
          })).starts_with("tree node 2: error: child 0 of node 2 is not an earlier node"));
    bad.nodes[2].children = {0, 1};
    bad.nodes.insert(bad.nodes.begin() + 2, {2, 1, {}});
    bad.tokens.insert(bad.tokens.begin() + 2, "a");
    bad.nodes[3].children = {0, 1};
    CHECK(first_line(error_of([&] {
            (void)enc.encode(bad);
          })).starts_with("tree node 2: error: node 2 is not part of the tree of the last node"));
  }

  TEST_CASE("the encoder: a wrapper's root label, and constructors of other arities") {
    auto lo = load(kListOps);
    runtime::TreeEncoder enc(*lo, "Example");
    CHECK(enc.classes(-1) == 10);
    data::Vocab v;
    auto ts = data::parse_trees("(3 (- a) (- b))\n(12 (- a) (- b))\n(- (- a) (- b))", "l.txt", v);
    enc.check(ts[0]);
    CHECK(first_line(error_of([&] { enc.check(ts[1]); })) ==
          "l.txt:2:1: error: label 12 is outside the model's classes [0, 10) (node "
          "`(12 (...) (...))`)");
    CHECK(first_line(error_of([&] { (void)enc.encode(ts[2]); })) ==
          "l.txt:3:1: error: the tree's root has no label ('-'), but constructor Example, "
          "which wraps the tree, needs one (node `(- (...) (...))`)");

    auto un = std::make_shared<ir::Module>();
    Diagnostics d;
    REQUIRE_MESSAGE(types::add_source(*un, kUnary, "unary.pe", d).ok, d.render());
    runtime::TreeEncoder u(*un, "T");
    CHECK(u.classes(0) == -1);
    auto us = data::parse_trees("(1 (2 (3 a)) (9 b))", "u.txt", v);
    u.check(us[0]); // no class count known: any label
    interp::Value val = u.encode(us[0]);
    CHECK(val.tag() == 2);
    CHECK(val.items()[0].tag() == 1);
    CHECK(val.items()[0].items()[0].tag() == 0);
  }

  TEST_CASE("the encoder walks no recursion: a tree 1,000,000 levels deep") {
    const size_t depth = 1000000;
    std::string text;
    text.reserve(depth * 12);
    for (size_t i = 0; i < depth; ++i)
      text += "(1 ";
    text += "(2 a)";
    for (size_t i = 0; i < depth; ++i)
      text += " (3 b))";
    data::Vocab v;
    auto ts = data::parse_trees(text, "deep.txt", v);
    REQUIRE(ts.size() == 1);
    REQUIRE(ts[0].depth() == depth + 1);
    auto m = load(kTreeLstm);
    runtime::TreeEncoder enc(*m, "Tree");
    enc.check(ts[0]);
    interp::Value root = enc.encode(ts[0]);
    // Down the left spine: Node(left, right, label) until the leaf.
    std::vector<interp::Value> spine; // holds each level, so that none is freed recursively
    spine.reserve(depth + 1);
    spine.push_back(root);
    size_t wrong = 0;
    while (spine.back().tag() == 1) {
      const interp::Value& n = spine.back();
      wrong += n.items()[2].as_tensor().item_i32() != 1;
      wrong += n.items()[1].items()[1].as_tensor().item_i32() != 3;
      spine.push_back(n.items()[0]);
    }
    CHECK(wrong == 0);
    CHECK(spine.size() == depth + 1);
    CHECK(spine.back().items()[0].as_tensor().item_i32() == 1); // the word "a"
    // Freed from the root down, one level at a time (each level's child is still held).
    root = interp::Value();
    for (auto& s : spine)
      s = interp::Value();
    // An error deep inside is still located.
    std::string bad = text;
    bad.replace(bad.find("(2 a)"), 5, "(- a)");
    auto bt = data::parse_trees(bad, "deep.txt", v);
    CHECK(first_line(error_of([&] { enc.check(bt[0]); }))
              .starts_with("deep.txt:1:" + std::to_string(depth * 3 + 1) +
                           ": error: the node "
                           "has no label"));
  }

} // TEST_SUITE

} // namespace tests_runtime_data_errors_test
