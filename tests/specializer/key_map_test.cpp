// KeyMap (specializer/key_map.h), the specializer's memo tables: keys of every length map to
// their values as in std::map, through growth, collisions of the slot index, keys that are
// prefixes of others and reset().
#include "specializer/key_map.h"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <vector>

namespace tests_specializer_key_map_test {

using namespace pejit::specializer;

namespace {

// A key of `len` words drawn from a small alphabet, so that keys share prefixes and words.
std::vector<int64_t> random_key(std::mt19937_64& rng, size_t len) {
  std::vector<int64_t> k(len);
  for (auto& x : k)
    x = static_cast<int64_t>(rng() % 5) - 2;
  return k;
}

} // namespace

TEST_CASE("KeyMap: keys of every length agree with std::map") {
  std::mt19937_64 rng(7);
  KeyMap km;
  std::map<std::vector<int64_t>, int32_t> ref;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4000; ++i) {
      auto k = random_key(rng, rng() % 8); // 0 .. 7 words
      auto [v, fresh] = km.emplace(k, i);
      auto [it, ref_fresh] = ref.emplace(k, i);
      REQUIRE(fresh == ref_fresh);
      REQUIRE(v == it->second);
    }
    CHECK(km.size() == ref.size());
    for (const auto& [k, v] : ref)
      REQUIRE(km.find(k) == v);
    // Keys never inserted: one word more or less than a stored key, or a changed word.
    for (const auto& [k, v] : ref) {
      auto longer = k;
      longer.push_back(99);
      CHECK(km.find(longer) == -1);
      if (!k.empty()) {
        auto changed = k;
        changed.back() = 99;
        CHECK(km.find(changed) == -1);
      }
    }
    km.reset();
    ref.clear();
    CHECK(km.size() == 0);
    CHECK(km.find(std::vector<int64_t>{0, 1, 2}) == -1);
  }
}

TEST_CASE("KeyMap: fragment keys (function, 128-bit skeleton) one word apart") {
  KeyMap km;
  const int64_t a[3] = {4, -1234567890123, 987654321};
  const int64_t b[3] = {4, -1234567890123, 987654322};
  CHECK(km.emplace(a, 10).second);
  CHECK(km.emplace(b, 11).second);
  CHECK_FALSE(km.emplace(a, 12).second);
  CHECK(km.find(a) == 10);
  CHECK(km.find(b) == 11);
  CHECK(km.find(std::span<const int64_t>(a, 2)) == -1);
  km.prefetch(a); // a hint only
  CHECK(km.find(a) == 10);
}

} // namespace tests_specializer_key_map_test
