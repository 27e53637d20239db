// Fuzz-style robustness test of the parser and the checker: seeded random mutations of the
// golden inputs (byte and token edits, truncation, random bytes, pathological nesting and
// chains). Every input must give diagnostics or a program, never a crash or hang; a mutant
// that parses cleanly must round-trip through the printer and then go through the checker
// (types, shapes, binding times), which must answer with diagnostics or success.
#include "src/types/check.h"
#include "tests/ir/ast_equal.h"
#include "tests/parse/test_util.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <random>

namespace tests_parse_fuzz_test {

namespace fs = std::filesystem;
using namespace pejit;
using namespace pejit::testing;

namespace {

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i)
    out += s;
  return out;
}

class Mutator {
public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string mutate(std::string s) {
    int n = 1 + pick(4);
    for (int i = 0; i < n; ++i)
      s = once(std::move(s));
    return s;
  }

private:
  size_t pick(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }

  // A whitespace-delimited word: [b, e).
  std::pair<size_t, size_t> word(const std::string& s) {
    size_t b = pick(s.size() + 1);
    while (b > 0 && !std::isspace(static_cast<unsigned char>(s[b - 1])))
      --b;
    size_t e = b;
    while (e < s.size() && !std::isspace(static_cast<unsigned char>(s[e])))
      ++e;
    return {b, e};
  }

  std::string once(std::string s) {
    static const char* kTokens[] = {"(",     ")",     "[",     "]",
                                    "{",     "}",     ",",     ";",
                                    ":",     "::",    ".",     "->",
                                    "=>",    "=",     "|",     "_",
                                    "+",     "-",     "*",     "/",
                                    "@",     "<",     "==",    "&&",
                                    "||",    "!",     "fn",    "let",
                                    "if",    "else",  "match", "type",
                                    "entry", "param", "dim",   "x",
                                    "Leaf",  "0",     "1.5",   "/*",
                                    "*/",    "//",    "\n",    "99999999999999999999",
                                    ".0"};
    static const char* kDeep[] = {
        "(",     "[",  "{",      "-",    "!",           "fn x => ", "a :: ",
        "+ 1 ",  "f(", ".0",     "(1, ", "let x = 1; ", "if a { ",  "match x { A => ",
        "List[", "((", "f32[1, "};
    size_t at = pick(s.size() + 1);
    switch (pick(9)) {
    case 0: // delete a byte range
      s.erase(at, 1 + pick(8));
      break;
    case 1: { // insert random bytes, NUL and invalid UTF-8 included
      std::string r;
      for (size_t i = 0, n = 1 + pick(6); i < n; ++i)
        r += static_cast<char>(pick(256));
      s.insert(at, r);
      break;
    }
    case 2: { // duplicate a range
      size_t len = pick(40);
      s.insert(at, s.substr(at, len));
      break;
    }
    case 3: { // swap two words
      auto [b1, e1] = word(s);
      auto [b2, e2] = word(s);
      if (b1 > b2)
        std::swap(b1, b2), std::swap(e1, e2);
      if (e1 <= b2) {
        std::string w1 = s.substr(b1, e1 - b1), w2 = s.substr(b2, e2 - b2);
        s.replace(b2, e2 - b2, w1);
        s.replace(b1, e1 - b1, w2);
      }
      break;
    }
    case 4: // truncate
      s.resize(at);
      break;
    case 5: // insert a token
      s.insert(at, std::string(" ") + kTokens[pick(std::size(kTokens))] + " ");
      break;
    case 6: { // delete a word
      auto [b, e] = word(s);
      s.erase(b, e - b);
      break;
    }
    case 7: // pathological nesting or chains
      s.insert(at, repeat(kDeep[pick(std::size(kDeep))], pick(8) == 0 ? 10000 : 300));
      break;
    default: { // replace a word by a token
      auto [b, e] = word(s);
      s.replace(b, e - b, kTokens[pick(std::size(kTokens))]);
      break;
    }
    }
    return s;
  }

  std::mt19937_64 rng_;
};

} // namespace

TEST_SUITE("parse") {
  TEST_CASE("fuzz: mutated programs give diagnostics or round-trip, never crash or hang") {
    std::vector<std::string> inputs;
    for (const auto& e : fs::directory_iterator(source_path("tests/golden")))
      if (e.path().extension() == ".pe")
        inputs.push_back(read_text(e.path().string()));
    REQUIRE(!inputs.empty());
    int clean = 0, failed = 0, checked_ok = 0, checked_bad = 0;
    constexpr int kCases = 2500;
    for (int i = 0; i < kCases; ++i) {
      Mutator m(0x5eed0000 + i);
      std::string text = m.mutate(inputs[i % inputs.size()]);
      Diagnostics diags;
      auto decls = parse::parse_program(text, "fuzz.pe", diags);
      (void)diags.render(); // rendering any span must be safe too
      if (diags.has_errors()) {
        ++failed;
        continue;
      }
      ++clean;
      std::string p1 = print_decls(decls);
      Diagnostics d2;
      auto again = parse::parse_program(p1, "fuzz-printed.pe", d2);
      REQUIRE_MESSAGE(!d2.has_errors(), "case " << i << ": printed form does not parse:\n"
                                                << d2.render() << "\n"
                                                << p1);
      REQUIRE_MESSAGE(print_decls(again) == p1, "case " << i);
      std::string diff = decls_diff(module_decls(decls), again);
      REQUIRE_MESSAGE(diff.empty(), "case " << i << ": " << diff);
      ir::Module mod;
      Diagnostics cd;
      auto r = types::add_definitions(mod, decls, cd);
      (void)cd.render();
      checked_ok += r.ok;
      checked_bad += !r.ok;
      CHECK_MESSAGE(r.ok == !cd.has_errors(), "case " << i);
    }
    // Expressions alone, including pathological ones.
    for (const char* deep : {"(", "-", "!", "[", "{ let a = ", "fn x => ", "1 :: "}) {
      Diagnostics diags;
      CHECK(parse::parse_expression(repeat(deep, 100000), "deep", diags) == nullptr);
      CHECK(diags.has_errors());
    }
    MESSAGE(clean << " clean (" << checked_ok << " well-typed, " << checked_bad
                  << " rejected by the checker) and " << failed << " failing mutants");
    CHECK(failed > kCases / 2); // the mutations do break programs
    CHECK(checked_ok > 0);      // and some still reach the checker whole
  }
}

} // namespace tests_parse_fuzz_test
