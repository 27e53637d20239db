// Tests of the synthetic SST and ListOps generators: determinism (pinned by a hash of the
// text), SST-like length statistics, the depth of each shape, labels a model can learn from
// (root majority below 50%), and ListOps root values checked by an independent evaluator.
#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"

#include "src/util/check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <map>

namespace tests_runtime_synthetic_test {

using namespace pejit::data;

namespace {

std::string all_text(const std::vector<ParseTree>& trees) {
  std::string s;
  for (const auto& t : trees)
    s += write_tree(t) + "\n";
  return s;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ULL;
  return h;
}

size_t ceil_log2(size_t n) {
  size_t k = 0;
  while ((size_t{1} << k) < n)
    ++k;
  return k;
}

/// Evaluates a ListOps token sequence with a stack, independently of the generator.
int evaluate_listops(const std::vector<std::string>& toks) {
  std::vector<std::pair<std::string, std::vector<int>>> stack;
  int result = -1;
  for (const auto& tok : toks) {
    if (tok[0] == '[') {
      stack.push_back({tok, {}});
    } else if (tok == "]") {
      REQUIRE(!stack.empty());
      auto [op, v] = stack.back();
      stack.pop_back();
      REQUIRE(v.size() >= 2);
      int r;
      std::sort(v.begin(), v.end());
      if (op == "[MAX")
        r = v.back();
      else if (op == "[MIN")
        r = v.front();
      else if (op == "[MED")
        r = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
      else if (op == "[SM") {
        r = 0;
        for (int x : v)
          r += x;
        r %= 10;
      } else {
        FAIL("bad operator " << op);
        return -1;
      }
      if (stack.empty())
        result = r;
      else
        stack.back().second.push_back(r);
    } else {
      REQUIRE(tok.size() == 1);
      REQUIRE(!stack.empty());
      stack.back().second.push_back(tok[0] - '0');
    }
  }
  REQUIRE(stack.empty());
  return result;
}

} // namespace

TEST_SUITE("data") {

  TEST_CASE("shape names") {
    for (Shape s : {Shape::Sst, Shape::Deep, Shape::Balanced})
      CHECK(parse_shape(shape_name(s)) == s);
    CHECK(shape_name(Shape::Balanced) == "balanced");
    CHECK_THROWS_WITH_AS(parse_shape("bushy"),
                         "unknown tree shape 'bushy' (expected sst, deep or "
                         "balanced)",
                         pejit::Error);
  }

  TEST_CASE("gen_sst and gen_listops are deterministic for a seed") {
    for (Shape s : {Shape::Sst, Shape::Deep, Shape::Balanced}) {
      Vocab a, b, c;
      std::string ta = all_text(gen_sst(40, 5, s, a));
      CHECK(ta == all_text(gen_sst(40, 5, s, b)));
      CHECK(ta != all_text(gen_sst(40, 6, s, c)));
      CHECK(a == b);
    }
    Vocab a, b, c;
    std::string la = all_text(gen_listops(40, 5, a));
    CHECK(la == all_text(gen_listops(40, 5, b)));
    CHECK(la != all_text(gen_listops(40, 6, c)));

    // Pinned: the same on every machine and standard library; a change here is a data change.
    Vocab v;
    CHECK(fnv1a(all_text(gen_sst(20, 1, Shape::Sst, v))) == 7930685849387746577ULL);
    CHECK(fnv1a(all_text(gen_listops(20, 1, v))) == 13078599502223302821ULL);
  }

  TEST_CASE("gen_sst: SST-like lengths, binary trees, labels 0..4 everywhere") {
    Vocab v;
    auto trees = gen_sst(2000, 1, Shape::Sst, v);
    REQUIRE(trees.size() == 2000);
    size_t total = 0, min_len = 1000, max_len = 0;
    std::array<size_t, 5> roots{};
    for (const auto& t : trees) {
      size_t n = t.leaves();
      total += n;
      min_len = std::min(min_len, n);
      max_len = std::max(max_len, n);
      REQUIRE(t.is_binary());
      REQUIRE(t.nodes.size() == 2 * n - 1);
      for (const auto& node : t.nodes) {
        REQUIRE(node.label >= 0);
        REQUIRE(node.label <= 4);
        REQUIRE((node.word >= 0) == node.children.empty());
      }
      ++roots[t.nodes.back().label];
    }
    double mean = static_cast<double>(total) / trees.size();
    CHECK(mean >= 15);
    CHECK(mean <= 23);
    CHECK(min_len >= 1);
    CHECK(max_len <= 56);
    CHECK(max_len >= 40);
    // No class dominates the roots, so beating the majority class means something.
    size_t majority = *std::max_element(roots.begin(), roots.end());
    CHECK(majority < trees.size() / 2);
    for (size_t r : roots)
      CHECK(r > trees.size() / 20);
    // Round trip through text with the same vocabulary.
    Vocab v2 = Vocab::from_words(v.words());
    CHECK(parse_trees(all_text(trees), "gen", v2) == trees);
  }

  TEST_CASE("gen_sst: negators flip and intensifiers scale their sibling") {
    // With 5% label noise, "not X" has the mirrored class of X most of the time.
    Vocab v;
    auto trees = gen_sst(2000, 2, Shape::Sst, v);
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
    REQUIRE(negated > 100);
    CHECK(mirrored > negated * 8 / 10);
  }

  TEST_CASE("gen_sst: Deep is linear in length, Balanced logarithmic") {
    Vocab v;
    auto deep = gen_sst(300, 4, Shape::Deep, v);
    auto bal = gen_sst(300, 4, Shape::Balanced, v);
    auto sst = gen_sst(300, 4, Shape::Sst, v);
    double sst_depth = 0, sst_leaves = 0;
    for (size_t i = 0; i < 300; ++i) {
      CHECK(deep[i].depth() == deep[i].leaves());
      CHECK(bal[i].depth() == ceil_log2(bal[i].leaves()) + 1);
      CHECK(deep[i].is_binary());
      CHECK(bal[i].is_binary());
      // The words come from their own stream: the same sentences in every shape.
      CHECK(deep[i].sentence() == bal[i].sentence());
      CHECK(sst[i].sentence() == bal[i].sentence());
      sst_depth += sst[i].depth();
      sst_leaves += sst[i].leaves();
    }
    // Real parses lie in between: deeper than balanced, much shallower than a chain.
    CHECK(sst_depth < 0.8 * sst_leaves);
    CHECK(sst_depth > 0.3 * sst_leaves);
  }

  TEST_CASE("gen_listops: root values match an independent evaluator") {
    Vocab v;
    auto trees = gen_listops(1000, 1, v);
    std::array<size_t, 10> values{};
    size_t max_nesting = 0, max_tokens = 0;
    for (const auto& t : trees) {
      REQUIRE(t.is_binary());
      auto toks = t.sentence();
      int expect = evaluate_listops(toks);
      REQUIRE(t.nodes.back().label == expect);
      ++values[expect];
      for (size_t i = 0; i + 1 < t.nodes.size(); ++i)
        REQUIRE(t.nodes[i].label == -1);
      size_t nest = 0, cur = 0;
      for (const auto& tok : toks) {
        if (tok[0] == '[')
          nest = std::max(nest, ++cur);
        if (tok == "]")
          --cur;
      }
      max_nesting = std::max(max_nesting, nest);
      max_tokens = std::max(max_tokens, toks.size());
    }
    CHECK(max_nesting == 6);
    CHECK(max_tokens <= 200);
    for (size_t c : values)
      CHECK(c > 10); // every value occurs

    // The binarization, exactly: [OP a [OP' b c ] ] is ((([OP a) (([OP' b) c) ])) ]).
    Vocab w;
    for (const auto& t : gen_listops(3000, 9, w)) {
      auto toks = t.sentence();
      if (toks.size() != 7 || toks[2][0] != '[')
        continue;
      auto kids = [&](int32_t i) {
        REQUIRE(t.nodes[i].children.size() == 2);
        return std::pair{t.nodes[i].children[0], t.nodes[i].children[1]};
      };
      auto [left, close] = kids(t.root());
      CHECK(t.tokens[close] == "]");
      auto [op_a, sub] = kids(left);
      auto [op, a] = kids(op_a);
      CHECK(t.tokens[op] == toks[0]);
      CHECK(t.tokens[a] == toks[1]);
      auto [sub_left, sub_close] = kids(sub);
      CHECK(t.tokens[sub_close] == "]");
      auto [sub_op_b, c] = kids(sub_left);
      CHECK(t.tokens[c] == toks[4]);
      auto [sub_op, b] = kids(sub_op_b);
      CHECK(t.tokens[sub_op] == toks[2]);
      CHECK(t.tokens[b] == toks[3]);
      return;
    }
    FAIL("no expression of the form [OP a [OP b c ] ] among 3000");
  }

} // TEST_SUITE

} // namespace tests_runtime_synthetic_test
