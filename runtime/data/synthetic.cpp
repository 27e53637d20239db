// The synthetic SST and ListOps generators. Every random draw goes through Rng below, which
// uses only mt19937_64's standard-specified output and integer arithmetic, so a seed gives the
// same trees everywhere. Draws happen in a fixed order (SST: one stream for lengths and words,
// another for splits and label noise in post-order), which the determinism tests pin down.
#include "runtime/data/synthetic.h"

#include "src/util/check.h"

#include <algorithm>
#include <array>
#include <random>

namespace pejit::data {

namespace {

class Rng {
public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  /// Uniform in [0, n), by rejection (no modulo bias).
  uint64_t below(uint64_t n) {
    PEJIT_CHECK(n > 0);
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
      uint64_t x = gen_();
      if (x < limit)
        return x % n;
    }
  }
  /// True with probability num / den.
  bool chance(uint64_t num, uint64_t den) { return below(den) < num; }

private:
  std::mt19937_64 gen_;
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// ---- SST ----

constexpr int kContentWords = 3000;
constexpr int kFrequentWords = 300; // half the content draws come from these
constexpr size_t kMaxLength = 56;
constexpr std::array<const char*, 3> kNegators = {"not", "never", "n't"};
constexpr std::array<const char*, 3> kIntensifiers = {"very", "really", "extremely"};

enum class Role { Content, Negator, Intensifier };

struct Word {
  std::string text;
  Role role = Role::Content;
  int32_t polarity = 0;
};

/// The fixed lexicon: the same words and polarities for every seed, so that data generated
/// with different seeds (train, dev) speaks one language.
const std::vector<Word>& lexicon() {
  static const std::vector<Word> words = [] {
    std::vector<Word> w;
    for (const char* s : kNegators)
      w.push_back({s, Role::Negator, 0});
    for (const char* s : kIntensifiers)
      w.push_back({s, Role::Intensifier, 0});
    for (int i = 0; i < kContentWords; ++i) {
      uint64_t h = splitmix64(static_cast<uint64_t>(i) ^ 0x5e17ULL) % 100;
      int32_t pol = h < 4 ? 3 : h < 16 ? 1 : h < 28 ? -1 : h < 32 ? -3 : 0;
      w.push_back({"w" + std::to_string(i), Role::Content, pol});
    }
    return w;
  }();
  return words;
}

int32_t sentiment_class(int64_t score) {
  if (score <= -3)
    return 0;
  if (score <= -1)
    return 1;
  if (score == 0)
    return 2;
  if (score <= 2)
    return 3;
  return 4;
}

class SstBuilder {
public:
  SstBuilder(Rng& rng, Shape shape, size_t arity, const std::vector<int32_t>& ids)
      : rng_(rng), shape_(shape), arity_(arity), ids_(ids) {}

  ParseTree build(const std::vector<size_t>& words) {
    words_ = &words;
    tree_ = ParseTree();
    tree_.nodes.reserve(2 * words.size() - 1);
    tree_.tokens.reserve(2 * words.size() - 1);
    span(0, words.size());
    return std::move(tree_);
  }

private:
  struct Built {
    int32_t node;
    int64_t score;
    Role role; // a leaf's word role; Content for phrases
  };

  size_t split(size_t len) {
    switch (shape_) {
    case Shape::Sst: {
      uint64_t r = rng_.below(10);
      if (r < 4)
        return 1; // head word + rest: right-branching
      if (r < 6)
        return len - 1; // rest + final word (punctuation): left-branching
      return 1 + rng_.below(len - 1);
    }
    case Shape::Deep:
      return rng_.chance(1, 2) ? 1 : len - 1;
    case Shape::Balanced:
      return (len + 1) / 2;
    }
    PEJIT_CHECK(false) << "bad shape";
    return 1;
  }

  /// The lengths of the children of a span of `len` >= 2 words, for arity_ > 2: 2..arity_
  /// children (as many as the span allows), cut at random (Sst), as a caterpillar with the
  /// single words on one side of the rest (Deep), or as even parts, as many as allowed
  /// (Balanced).
  std::vector<size_t> parts(size_t len) {
    const size_t most = std::min(arity_, len);
    std::vector<size_t> out;
    switch (shape_) {
    case Shape::Sst: {
      const size_t k = 2 + rng_.below(most - 1);
      // k - 1 distinct cuts among 1..len-1: a partial Fisher-Yates shuffle.
      std::vector<size_t> cuts(len - 1);
      for (size_t i = 0; i < cuts.size(); ++i)
        cuts[i] = i + 1;
      for (size_t i = 0; i + 1 < k; ++i)
        std::swap(cuts[i], cuts[i + rng_.below(cuts.size() - i)]);
      cuts.resize(k - 1);
      std::sort(cuts.begin(), cuts.end());
      size_t prev = 0;
      for (size_t c : cuts) {
        out.push_back(c - prev);
        prev = c;
      }
      out.push_back(len - prev);
      return out;
    }
    case Shape::Deep: {
      const size_t k = 2 + rng_.below(most - 1);
      out.assign(k - 1, 1);
      if (rng_.chance(1, 2))
        out.push_back(len - (k - 1));
      else
        out.insert(out.begin(), len - (k - 1));
      return out;
    }
    case Shape::Balanced:
      for (size_t i = 0; i < most; ++i)
        out.push_back(len * (i + 1) / most - len * i / most);
      return out;
    }
    PEJIT_CHECK(false) << "bad shape";
    return out;
  }

  int32_t emit(int64_t score, int32_t word, std::string token, std::vector<int32_t> children) {
    int32_t label = sentiment_class(score);
    if (rng_.chance(5, 100))
      label = static_cast<int32_t>(rng_.below(5));
    tree_.nodes.push_back({label, word, std::move(children)});
    tree_.tokens.push_back(std::move(token));
    return static_cast<int32_t>(tree_.nodes.size()) - 1;
  }

  Built span(size_t lo, size_t hi) {
    const auto& lex = lexicon();
    if (hi - lo == 1) {
      size_t w = (*words_)[lo];
      int64_t s = lex[w].polarity;
      return {emit(s, ids_[w], lex[w].text, {}), s, lex[w].role};
    }
    if (arity_ > 2)
      return nary(lo, hi);
    size_t left = split(hi - lo);
    Built a = span(lo, lo + left);
    Built b = span(lo + left, hi);
    Role ra = a.role, rb = b.role;
    int64_t s = a.score + b.score;
    if (ra == Role::Negator && rb != Role::Negator)
      s = -b.score;
    if (rb == Role::Negator && ra != Role::Negator)
      s = -a.score;
    if (ra == Role::Intensifier && rb == Role::Content)
      s = 2 * b.score;
    if (rb == Role::Intensifier && ra == Role::Content)
      s = 2 * a.score;
    return {emit(s, -1, "", {a.node, b.node}), s, Role::Content};
  }

  /// A phrase of 2..arity_ children. Its score extends the binary rule: the sum of its
  /// content children's scores, doubled when an intensifier is among the children, negated
  /// for an odd number of negators; 0 when no child is content.
  Built nary(size_t lo, size_t hi) {
    std::vector<int32_t> children;
    int64_t content = 0;
    bool any_content = false, intensified = false, negated = false;
    size_t at = lo;
    for (size_t len : parts(hi - lo)) {
      Built b = span(at, at + len);
      at += len;
      children.push_back(b.node);
      if (b.role == Role::Negator) {
        negated = !negated;
      } else if (b.role == Role::Intensifier) {
        intensified = true;
      } else {
        content += b.score;
        any_content = true;
      }
    }
    int64_t s = !any_content ? 0 : (intensified ? 2 : 1) * (negated ? -content : content);
    return {emit(s, -1, "", std::move(children)), s, Role::Content};
  }

  Rng& rng_;
  Shape shape_;
  size_t arity_;
  const std::vector<int32_t>& ids_;
  const std::vector<size_t>* words_ = nullptr;
  ParseTree tree_;
};

size_t sst_length(Rng& rng) {
  for (;;) {
    // 1 + NegativeBinomial(4 successes, p = 2/11): mean 19, right-skewed like SST.
    size_t failures = 0;
    for (int successes = 0; successes < 4;) {
      if (rng.chance(2, 11))
        ++successes;
      else
        ++failures;
    }
    if (failures + 1 <= kMaxLength)
      return failures + 1;
  }
}

size_t sst_word(Rng& rng) {
  uint64_t r = rng.below(100);
  if (r < 5)
    return rng.below(kNegators.size());
  if (r < 9)
    return kNegators.size() + rng.below(kIntensifiers.size());
  size_t base = kNegators.size() + kIntensifiers.size();
  return base + rng.below(rng.chance(1, 2) ? kFrequentWords : kContentWords);
}

// ---- ListOps ----

constexpr int kListOpsMaxDepth = 6;
constexpr size_t kListOpsMaxTokens = 200;
constexpr std::array<const char*, 4> kOps = {"[MAX", "[MIN", "[MED", "[SM"};

int32_t apply_op(size_t op, std::vector<int32_t> v) {
  switch (op) {
  case 0:
    return *std::max_element(v.begin(), v.end());
  case 1:
    return *std::min_element(v.begin(), v.end());
  case 2: {
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
  }
  default: {
    int32_t s = 0;
    for (int32_t x : v)
      s += x;
    return s % 10;
  }
  }
}

class ListOpsBuilder {
public:
  ListOpsBuilder(Rng& rng, Vocab& vocab) : rng_(rng), vocab_(vocab) {}

  /// One expression, or false if it grew past kListOpsMaxTokens (the caller draws again).
  bool build(ParseTree& t) {
    tree_ = &t;
    t = ParseTree();
    leaves_ = 0;
    bool ok = true;
    int32_t value = list(1, ok);
    if (!ok)
      return false;
    t.nodes.back().label = value;
    return true;
  }

private:
  int32_t leaf(const std::string& tok) {
    ++leaves_;
    tree_->nodes.push_back({-1, vocab_.add(tok), {}});
    tree_->tokens.push_back(tok);
    return static_cast<int32_t>(tree_->nodes.size()) - 1;
  }
  int32_t join(int32_t a, int32_t b) {
    tree_->nodes.push_back({-1, -1, {a, b}});
    tree_->tokens.emplace_back();
    return static_cast<int32_t>(tree_->nodes.size()) - 1;
  }

  /// Emits a list's tree in post-order and returns its value.
  int32_t list(int depth, bool& ok) {
    size_t op = rng_.below(kOps.size());
    size_t nargs = 2 + rng_.below(4);
    int32_t cur = leaf(kOps[op]);
    std::vector<int32_t> values;
    for (size_t i = 0; i < nargs && ok; ++i) {
      int32_t arg;
      if (depth < kListOpsMaxDepth && rng_.chance(3, 10)) {
        values.push_back(list(depth + 1, ok));
        arg = static_cast<int32_t>(tree_->nodes.size()) - 1;
      } else {
        values.push_back(static_cast<int32_t>(rng_.below(10)));
        arg = leaf(std::to_string(values.back()));
      }
      cur = join(cur, arg);
      if (leaves_ > kListOpsMaxTokens)
        ok = false;
    }
    if (!ok)
      return 0;
    join(cur, leaf("]"));
    return apply_op(op, std::move(values));
  }

  Rng& rng_;
  Vocab& vocab_;
  ParseTree* tree_ = nullptr;
  size_t leaves_ = 0;
};

} // namespace

std::string shape_name(Shape s) {
  switch (s) {
  case Shape::Sst:
    return "sst";
  case Shape::Deep:
    return "deep";
  case Shape::Balanced:
    return "balanced";
  }
  PEJIT_CHECK(false) << "bad Shape " << static_cast<int>(s);
  return "";
}

Shape parse_shape(std::string_view name) {
  for (Shape s : {Shape::Sst, Shape::Deep, Shape::Balanced})
    if (name == shape_name(s))
      return s;
  throw Error("unknown tree shape '" + std::string(name) + "' (expected sst, deep or balanced)");
}

std::vector<ParseTree> gen_sst(size_t n, uint64_t seed, Shape shape, Vocab& vocab, size_t arity) {
  if (arity < 2)
    throw Error("an arity of " + std::to_string(arity) +
                ": an internal node of a tree has at least 2 children");
  const auto& lex = lexicon();
  std::vector<int32_t> ids;
  ids.reserve(lex.size());
  for (const Word& w : lex)
    ids.push_back(vocab.add(w.text));
  // Words and shapes draw from separate streams, so a seed gives the same sentences in every
  // shape.
  Rng words_rng(seed);
  Rng tree_rng(splitmix64(seed ^ 0x7ee5ULL));
  SstBuilder builder(tree_rng, shape, arity, ids);
  std::vector<ParseTree> trees;
  trees.reserve(n);
  std::vector<size_t> words;
  for (size_t i = 0; i < n; ++i) {
    words.resize(sst_length(words_rng));
    for (size_t& w : words)
      w = sst_word(words_rng);
    trees.push_back(builder.build(words));
  }
  return trees;
}

std::vector<ParseTree> gen_listops(size_t n, uint64_t seed, Vocab& vocab) {
  for (const char* op : kOps)
    vocab.add(op);
  vocab.add("]");
  for (int d = 0; d < 10; ++d)
    vocab.add(std::to_string(d));
  Rng rng(seed);
  ListOpsBuilder builder(rng, vocab);
  std::vector<ParseTree> trees(n);
  for (ParseTree& t : trees)
    while (!builder.build(t)) {
    }
  return trees;
}

} // namespace pejit::data
