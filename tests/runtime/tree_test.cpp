// Tests of ParseTree's queries and of Vocab (ids, <unk>, rebuilding from a checkpoint's words).
#include "runtime/data/tree.h"

#include "src/util/check.h"

#include <doctest/doctest.h>

namespace tests_runtime_tree_test {

using namespace pejit::data;

namespace {

/// (3 (2 a) (4 (2 b) (2 c))) built by hand, in post-order.
ParseTree small_tree() {
  ParseTree t;
  t.nodes = {{2, 1, {}}, {2, 2, {}}, {2, 3, {}}, {4, -1, {1, 2}}, {3, -1, {0, 3}}};
  t.tokens = {"a", "b", "c", "", ""};
  return t;
}

} // namespace

TEST_SUITE("data") {

  TEST_CASE("ParseTree queries") {
    ParseTree t = small_tree();
    CHECK(t.root() == 4);
    CHECK(t.leaves() == 3);
    CHECK(t.depth() == 3);
    CHECK(t.is_binary());
    CHECK(t.sentence() == std::vector<std::string>{"a", "b", "c"});

    ParseTree leaf;
    leaf.nodes = {{1, 1, {}}};
    leaf.tokens = {"x"};
    CHECK(leaf.depth() == 1);
    CHECK(leaf.leaves() == 1);
    CHECK(leaf.is_binary());

    ParseTree nary = small_tree();
    nary.nodes[4].children = {0, 1, 2};
    CHECK_FALSE(nary.is_binary());
    CHECK(ParseTree().depth() == 0);
    CHECK_THROWS_AS((void)ParseTree().root(), pejit::InternalError);
  }

  TEST_CASE("Vocab ids and <unk>") {
    Vocab v;
    CHECK(v.size() == 1);
    CHECK(v.word(0) == "<unk>");
    CHECK(v.lookup("<unk>") == 0);
    CHECK(v.add("the") == 1);
    CHECK(v.add("rock") == 2);
    CHECK(v.add("the") == 1);
    CHECK(v.size() == 3);
    CHECK(v.lookup("rock") == 2);
    CHECK(v.lookup("never-seen") == 0);
    CHECK(v.word(2) == "rock");
    CHECK(v.words() == std::vector<std::string>{"<unk>", "the", "rock"});
    CHECK_THROWS_AS((void)v.word(3), pejit::InternalError);
    CHECK_THROWS_AS((void)v.word(-1), pejit::InternalError);
  }

  TEST_CASE("Vocab::from_words") {
    Vocab v;
    v.add("a");
    v.add("b");
    Vocab w = Vocab::from_words(v.words());
    CHECK(w == v);
    CHECK(w.lookup("b") == 2);
    CHECK(w.add("c") == 3);
    CHECK_THROWS_WITH_AS(Vocab::from_words({"a", "<unk>"}), doctest::Contains("first word"),
                         pejit::Error);
    CHECK_THROWS_AS(Vocab::from_words({}), pejit::Error);
    CHECK_THROWS_WITH_AS(Vocab::from_words({"<unk>", "a", "b", "a"}),
                         doctest::Contains("\"a\" appears twice (ids 1 and 3)"), pejit::Error);
  }

} // TEST_SUITE

} // namespace tests_runtime_tree_test
