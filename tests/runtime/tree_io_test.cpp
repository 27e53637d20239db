// Tests of the bracketed-tree reader/writer and the sentence reader: exact structure, round
// trips, every malformed-input message with its line and column, and a mutation fuzz test
// (each input either parses or throws pejit::Error, nothing else).
#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"

#include "src/util/check.h"
#include "tests/support/skip.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

namespace tests_runtime_tree_io_test {

using namespace pejit::data;
namespace fs = std::filesystem;

namespace {

/// The first line of the Error thrown by parsing `text` (named "t.txt"), or "" if none.
std::string first_error_line(std::string_view text) {
  Vocab v;
  try {
    parse_trees(text, "t.txt", v);
  } catch (const pejit::Error& e) {
    std::string m = e.what();
    return m.substr(0, m.find('\n'));
  }
  return "";
}

std::vector<ParseTree> parse(std::string_view text, Vocab& v, ReadOptions opts = {}) {
  return parse_trees(text, "t.txt", v, opts);
}

/// A scratch directory removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("pejit_data_test." + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

} // namespace

TEST_SUITE("data") {

  TEST_CASE("parse_trees: structure of a hand example") {
    Vocab v;
    auto trees = parse("(3 (2 The) (4 (2 Rock) (- is)))", v);
    REQUIRE(trees.size() == 1);
    const ParseTree& t = trees[0];
    REQUIRE(t.nodes.size() == 5);
    // Post-order: The, Rock, is, (Rock is), root.
    CHECK(t.tokens == std::vector<std::string>{"The", "Rock", "is", "", ""});
    CHECK(t.nodes[0] == ParseTree::Node{2, 1, {}});
    CHECK(t.nodes[1] == ParseTree::Node{2, 2, {}});
    CHECK(t.nodes[2] == ParseTree::Node{-1, 3, {}});
    CHECK(t.nodes[3] == ParseTree::Node{4, -1, {1, 2}});
    CHECK(t.nodes[4] == ParseTree::Node{3, -1, {0, 3}});
    CHECK(t.root() == 4);
    CHECK(v.size() == 4);
    CHECK(write_tree(t) == "(3 (2 The) (4 (2 Rock) (- is)))");
  }

  TEST_CASE("parse_trees: round trips, whitespace, blank lines") {
    const std::vector<std::string> lines = {
        "(3 (2 The) (4 (2 Rock) (2 is)))",
        "(2 x)",
        "(- (- a) (- b))",
        "(1 (2 -LRB-) (3 ``) (4 's) (0 <unk>))",
        "(0 (1 (2 (3 (4 deep)))))",
        "(17 (2147483647 big))",
    };
    std::string text;
    for (const auto& l : lines)
      text += l + "\n\n";
    Vocab v;
    auto trees = parse(text, v);
    REQUIRE(trees.size() == lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      CHECK(write_tree(trees[i]) == lines[i]);
      CHECK(parse(write_tree(trees[i]), v)[0] == trees[i]);
    }
    CHECK(trees[3].nodes[3].word == 0); // "<unk>" is id 0
    CHECK_FALSE(trees[3].is_binary());
    CHECK(trees[4].depth() == 5);
    CHECK(trees[5].nodes[0].label == 2147483647);

    // Odd but valid spacing: tabs, CRLF, no space before '(' and around ')', leading blanks.
    auto odd = parse(" \t\r\n  (3(2 The)\t(4 (2 Rock)(2 is) ) ) \r\n   \n", v);
    REQUIRE(odd.size() == 1);
    CHECK(odd[0] == trees[0]);
    CHECK(parse("", v).empty());
    CHECK(parse("\n \n\t\n", v).empty());
  }

  TEST_CASE("parse_trees: grow_vocab = false maps unknown words to <unk>") {
    Vocab v;
    v.add("known");
    auto trees = parse("(1 (2 known) (3 stranger))", v, ReadOptions{.grow_vocab = false});
    CHECK(v.size() == 2);
    CHECK(trees[0].nodes[0].word == 1);
    CHECK(trees[0].nodes[1].word == 0);
    CHECK(trees[0].tokens[1] == "stranger"); // the text is kept
  }

  TEST_CASE("parse_trees: malformed input names file, line and column") {
    struct Case {
      const char* text;
      const char* error;
    };
    const Case cases[] = {
        {"(2 a", "t.txt:1:5: error: missing ')' to close the '(' at column 1 (unbalanced "
                 "parentheses)"},
        {"(3 (2 a) (2 b)", "t.txt:1:15: error: missing ')' to close the '(' at column 1 "
                           "(unbalanced parentheses)"},
        {"(3 (2 a", "t.txt:1:8: error: missing ')' to close the '(' at column 4 (unbalanced "
                    "parentheses)"},
        {"(2 a))", "t.txt:1:6: error: unbalanced ')' with no matching '('"},
        {") (2 a)", "t.txt:1:1: error: unbalanced ')' with no matching '('"},
        {"(2 a) b", "t.txt:1:7: error: unexpected text after the tree (one tree per line)"},
        {"(2 a) (2 b)", "t.txt:1:7: error: unexpected text after the tree (one tree per line)"},
        {"2 a", "t.txt:1:1: error: expected '(' to start a tree"},
        {"  x", "t.txt:1:3: error: expected '(' to start a tree"},
        {"()", "t.txt:1:2: error: missing label after '('"},
        {"( (2 a))", "t.txt:1:2: error: missing label after '('"},
        {"(3 ((2 a))", "t.txt:1:5: error: missing label after '('"},
        {"(", "t.txt:1:2: error: missing label after '('"},
        {"(x a)", "t.txt:1:2: error: bad label 'x': expected a non-negative integer or '-'"},
        {"(2 (-1 a))", "t.txt:1:5: error: bad label '-1': expected a non-negative integer or '-'"},
        {"(2147483648 a)",
         "t.txt:1:2: error: bad label '2147483648': expected a non-negative integer or '-'"},
        {"(2 )", "t.txt:1:1: error: empty node: a label needs a token or children"},
        {"(1 (2 a) (3))", "t.txt:1:10: error: empty node: a label needs a token or children"},
        {"(2 a (2 b))", "t.txt:1:6: error: a node has both a token (column 4) and children"},
        {"(2 (2 b) a)", "t.txt:1:10: error: a node has both children and a token"},
        {"(2 a b)", "t.txt:1:6: error: a leaf has more than one token (the first at column 4)"},
        {"(2 a)\n\n\n  (3 (2 b)\n(2 c)",
         "t.txt:4:11: error: missing ')' to close the '(' at column 3 (unbalanced parentheses)"},
        {"(2 a)\r\n(2 b)\r\n(\x01 b)",
         "t.txt:3:2: error: bad label '\\x01': expected a non-negative integer or '-'"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      CHECK(first_error_line(c.text) == c.error);
    }
  }

  TEST_CASE("parse_trees: the message shows the source line and a caret") {
    Vocab v;
    try {
      parse("(2 a)\n(3 (2 b) (x c))\n", v);
      FAIL("no error");
    } catch (const pejit::Error& e) {
      CHECK(std::string(e.what()) ==
            "t.txt:2:11: error: bad label 'x': expected a non-negative integer or '-'\n"
            "  (3 (2 b) (x c))\n"
            "            ^");
    }
  }

  TEST_CASE("parse_trees: deep nesting needs no recursion") {
    const size_t depth = 200000;
    std::string text;
    for (size_t i = 0; i < depth; ++i)
      text += "(1 ";
    text += "(2 leaf)";
    text += std::string(depth, ')');
    Vocab v;
    auto trees = parse(text, v);
    REQUIRE(trees.size() == 1);
    CHECK(trees[0].depth() == depth + 1);
    CHECK(write_tree(trees[0]) == text);
    CHECK(first_error_line(text.substr(0, text.size() - 1)).starts_with("t.txt:1:"));
  }

  TEST_CASE("write_tree rejects trees it cannot write") {
    ParseTree t;
    CHECK_THROWS_AS(write_tree(t), pejit::Error);
    t.nodes = {{2, 1, {}}};
    t.tokens = {""};
    CHECK_THROWS_WITH_AS(write_tree(t), doctest::Contains("has no token"), pejit::Error);
    t.tokens = {"a b"};
    CHECK_THROWS_WITH_AS(write_tree(t), doctest::Contains("whitespace or a parenthesis"),
                         pejit::Error);
    t.tokens = {"f(x)"};
    CHECK_THROWS_AS(write_tree(t), pejit::Error);
  }

  TEST_CASE("read_trees / write_trees / read_sentences on files") {
    TempDir dir;
    Vocab v;
    auto trees = gen_sst(30, 3, Shape::Sst, v);
    std::string path = (dir.path / "trees.txt").string();
    write_trees(path, trees);
    write_trees(path, trees); // overwrites in place
    Vocab v2 = Vocab::from_words(v.words());
    CHECK(read_trees(path, v2) == trees);
    CHECK(v2 == v);
    size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path))
      ++files;
    CHECK(files == 1); // no temporary left behind

    CHECK_THROWS_WITH_AS(read_trees((dir.path / "missing.txt").string(), v),
                         doctest::Contains("missing.txt: error: cannot open file"), pejit::Error);
    CHECK_THROWS_WITH_AS(write_trees((dir.path / "no/such/dir.txt").string(), trees),
                         doctest::Contains("dir.txt: error: cannot write file"), pejit::Error);

    std::string spath = (dir.path / "sents.txt").string();
    std::ofstream(spath) << " the cat <unk> sat \n\n  \nthe  dog\tsat\n";
    Vocab sv;
    auto sents = read_sentences(spath, sv);
    REQUIRE(sents.size() == 2);
    CHECK(sents[0] == std::vector<int32_t>{1, 2, 0, 3});
    CHECK(sents[1] == std::vector<int32_t>{1, 4, 3});
    Vocab frozen = Vocab::from_words({"<unk>", "sat"});
    CHECK(parse_sentences("cat sat", frozen, {.grow_vocab = false})[0] ==
          std::vector<int32_t>{0, 1});
    CHECK_THROWS_AS(read_sentences((dir.path / "missing.txt").string(), sv), pejit::Error);
  }

  TEST_CASE("parse_trees: fuzzed lines parse or throw pejit::Error") {
    Vocab gv;
    std::vector<std::string> seeds = {"(3 (2 The) (4 (2 Rock) (2 is)))",
                                      "(- (2 a) (- (1 b) (0 c)))",
                                      "(1 (2 -LRB-) (3 ``) (4 's) (0 <unk>))", "(2 x)"};
    for (const auto& t : gen_sst(8, 11, Shape::Sst, gv))
      seeds.push_back(write_tree(t));
    for (const auto& t : gen_listops(8, 11, gv))
      seeds.push_back(write_tree(t));

    std::mt19937_64 rng(1234);
    auto below = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    size_t parsed = 0, rejected = 0;
    for (int iter = 0; iter < 5500; ++iter) {
      std::string s;
      if (iter < 500) { // pure garbage
        s.resize(below(60));
        for (char& c : s)
          c = static_cast<char>(below(256));
      } else {
        s = seeds[below(seeds.size())];
        for (size_t m = 0, nm = 1 + below(3); m < nm; ++m) {
          size_t pos = below(s.size() + 1);
          switch (below(6)) {
          case 0: // truncate
            s.resize(pos);
            break;
          case 1: // flip a byte
            if (pos < s.size())
              s[pos] = static_cast<char>(below(256));
            break;
          case 2: // insert a parenthesis
            s.insert(pos, 1, "()"[below(2)]);
            break;
          case 3: // delete a byte
            if (pos < s.size())
              s.erase(pos, 1);
            break;
          case 4: // insert whitespace, a newline, a label or token byte, or NUL
            s.insert(pos, 1, " \t\n-9x"[below(7)]);
            break;
          default: // splice the line with a later part of itself
            s = s.substr(0, pos) + s.substr(below(s.size() + 1));
          }
        }
      }
      CAPTURE(s);
      Vocab v;
      try {
        auto trees = parse_trees(s, "fuzz", v);
        ++parsed;
        for (const auto& t : trees) {
          REQUIRE(t.nodes.size() == t.tokens.size());
          REQUIRE(parse_trees(write_tree(t), "fuzz", v)[0] == t);
        }
      } catch (const pejit::Error& e) {
        ++rejected;
        std::string m = e.what();
        REQUIRE(m.starts_with("fuzz:"));
        REQUIRE(m.find(": error: ") != std::string::npos);
      }
    }
    CHECK(parsed > 100);
    CHECK(rejected > 1000);
  }

  TEST_CASE("read_trees: the real SST training set, if present") {
    const std::string path = "/work/shared/data/sst/train.txt";
    if (!fs::exists(path)) {
      pejit::test::skip(path + " is absent");
      return;
    }
    Vocab v;
    auto trees = read_trees(path, v);
    CHECK(trees.size() == 8544);
    size_t binary = 0;
    for (const auto& t : trees)
      binary += t.is_binary();
    CHECK(binary == trees.size());
    for (const auto& t : trees) {
      for (const auto& n : t.nodes) {
        REQUIRE(n.label >= 0);
        REQUIRE(n.label <= 4);
      }
    }
  }

} // TEST_SUITE

} // namespace tests_runtime_tree_io_test
