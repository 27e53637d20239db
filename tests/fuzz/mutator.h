// Seeded mutations of valid inputs for the readers' fuzz tests (tests/fuzz/targets.h): byte
// flips and random bytes, deletions, duplications, truncation, splices with another seed,
// tokens of the input's own syntax, huge and negative numbers in place of numbers, and deep
// nesting. One seed gives one sequence of mutants on every machine (std::mt19937_64 and no
// std distribution, whose results the standard leaves to the library).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace pejit::fuzz {

/// What a target's syntax looks like to the mutator.
struct Dictionary {
  std::vector<std::string> tokens; ///< inserted, or put in place of a word
  std::vector<std::string> deep;   ///< repeated hundreds or a hundred thousand times
};

class Mutator {
public:
  Mutator(uint64_t seed, const Dictionary& dict) : rng_(seed), dict_(dict) {}

  /// 1 to 4 mutations of `s`; `others` are the splice partners (the target's seeds).
  std::string mutate(std::string s, const std::vector<std::string>& others) {
    for (size_t i = 0, n = 1 + below(4); i < n; ++i)
      s = once(std::move(s), others);
    return s;
  }

  /// A uniform value in [0, n); 0 when n is 0.
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

private:
  static std::string repeat(std::string_view s, size_t n) {
    std::string out;
    out.reserve(s.size() * n);
    for (size_t i = 0; i < n; ++i)
      out += s;
    return out;
  }

  // A run of digits (with a leading '-') around a random position, or an empty range.
  std::pair<size_t, size_t> number(const std::string& s) {
    size_t at = below(s.size() + 1);
    size_t b = s.find_first_of("0123456789", at);
    if (b == std::string::npos)
      b = s.find_first_of("0123456789");
    if (b == std::string::npos)
      return {0, 0};
    size_t e = b;
    while (e < s.size() && s[e] >= '0' && s[e] <= '9')
      ++e;
    if (b > 0 && s[b - 1] == '-')
      --b;
    return {b, e};
  }

  // A whitespace-delimited word around a random position: [b, e).
  std::pair<size_t, size_t> word(const std::string& s) {
    auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t'; };
    size_t b = below(s.size() + 1);
    while (b > 0 && !space(s[b - 1]))
      --b;
    size_t e = b;
    while (e < s.size() && !space(s[e]))
      ++e;
    return {b, e};
  }

  std::string once(std::string s, const std::vector<std::string>& others) {
    static const char* kNumbers[] = {"0",
                                     "-1",
                                     "-0",
                                     "2147483647",
                                     "2147483648",
                                     "4294967296",
                                     "9223372036854775807",
                                     "9223372036854775808",
                                     "-9223372036854775809",
                                     "18446744073709551616",
                                     "99999999999999999999999999999999",
                                     "1e308",
                                     "1e309",
                                     "-1e309",
                                     "1.5",
                                     "0x10",
                                     "NaN"};
    size_t at = below(s.size() + 1);
    switch (below(12)) {
    case 0: // flip one bit
      if (at < s.size())
        s[at] = static_cast<char>(s[at] ^ (1 << below(8)));
      break;
    case 1: { // overwrite bytes with random ones (NUL, '\n', invalid UTF-8 included)
      for (size_t i = 0, n = 1 + below(8); i < n && at + i < s.size(); ++i)
        s[at + i] = static_cast<char>(below(256));
      break;
    }
    case 2: // delete a byte range
      s.erase(at, 1 + below(below(2) ? 4 : 64));
      break;
    case 3: { // insert random bytes
      std::string r;
      for (size_t i = 0, n = 1 + below(6); i < n; ++i)
        r += static_cast<char>(below(256));
      s.insert(at, r);
      break;
    }
    case 4: // duplicate a range
      s.insert(at, s.substr(at, below(64)));
      break;
    case 5: // truncate
      s.resize(at);
      break;
    case 6: { // splice: a prefix of this input, a suffix of another seed
      if (others.empty())
        break;
      const std::string& o = others[below(others.size())];
      s = s.substr(0, at) + o.substr(below(o.size() + 1));
      break;
    }
    case 7: // insert a token of the syntax
      if (!dict_.tokens.empty())
        s.insert(at, dict_.tokens[below(dict_.tokens.size())]);
      break;
    case 8: { // replace a word by a token
      if (dict_.tokens.empty())
        break;
      auto [b, e] = word(s);
      s.replace(b, e - b, dict_.tokens[below(dict_.tokens.size())]);
      break;
    }
    case 9: { // a number becomes huge, negative, fractional or not a number
      auto [b, e] = number(s);
      if (e > b)
        s.replace(b, e - b, kNumbers[below(std::size(kNumbers))]);
      break;
    }
    case 10: // pathological nesting
      if (!dict_.deep.empty())
        s.insert(at, repeat(dict_.deep[below(dict_.deep.size())], below(8) == 0 ? 100000 : 300));
      break;
    default: { // a word repeated, as a long line or a long list would be
      auto [b, e] = word(s);
      if (e > b && e - b < 64)
        s.insert(e, repeat(" " + s.substr(b, e - b), 1 + below(2000)));
      break;
    }
    }
    return s;
  }

  std::mt19937_64 rng_;
  const Dictionary& dict_;
};

} // namespace pejit::fuzz
