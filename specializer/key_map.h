// A small open-addressing map from short integer keys (a span of int64) to int32 values, with
// every key stored in one flat arena: lookups and inserts allocate nothing in steady state.
// The specializer's memo tables (partial_eval.cpp) and the planner's group keys (plan.cpp)
// use it on every instance, where std::map of vectors cost an allocation per lookup.
#pragma once

#include "specializer/huge_pages.h"

#include <cstdint>
#include <span>
#include <vector>

namespace pejit::specializer {

class KeyMap {
public:
  static uint64_t hash(std::span<const int64_t> k) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ k.size();
    for (int64_t x : k) {
      h ^= static_cast<uint64_t>(x);
      h *= 0xff51afd7ed558ccdull;
      h ^= h >> 32;
    }
    return h;
  }

  /// The value of `k`, or -1.
  int32_t find(std::span<const int64_t> k) const { return find(k, hash(k)); }
  int32_t find(std::span<const int64_t> k, uint64_t h) const {
    if (slots_.empty())
      return -1;
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.value < 0)
        return -1;
      if (s.hash == h && equal(s, k))
        return s.value;
    }
  }

  /// Asks the cache for the slot where a lookup of `k` starts (a hint: no effect on results).
  void prefetch(std::span<const int64_t> k) const {
    if (!slots_.empty())
      __builtin_prefetch(slots_.data() + (hash(k) & (slots_.size() - 1)));
  }

  /// Inserts `k` -> `v` unless present; returns the value now stored and whether it was new.
  std::pair<int32_t, bool> emplace(std::span<const int64_t> k, int32_t v) {
    uint64_t h = hash(k);
    if ((size_ + 1) * 4 > slots_.size() * 3)
      grow();
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.value < 0) {
        s.hash = h;
        s.value = v;
        s.offset = static_cast<uint32_t>(keys_.size());
        s.len = static_cast<uint32_t>(k.size());
        keys_.insert(keys_.end(), k.begin(), k.end());
        ++size_;
        return {v, true};
      }
      if (s.hash == h && equal(s, k))
        return {s.value, false};
    }
  }

  size_t size() const { return size_; }
  void clear() {
    slots_.clear();
    keys_.clear();
    size_ = 0;
  }
  /// Forgets every key but keeps the memory (for per-call tables).
  void reset() {
    for (auto& s : slots_)
      s.value = -1;
    keys_.clear();
    size_ = 0;
  }

private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, len = 0;
    int32_t value = -1; ///< -1: empty
  };
  // The fragment memo's map holds hundreds of thousands of keys: large tables on huge pages.
  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  std::vector<int64_t, HugePageAllocator<int64_t>> keys_;
  size_t size_ = 0;

  // A loop, not memcmp: keys are a few words, shorter than a library call.
  bool equal(const Slot& s, std::span<const int64_t> k) const {
    if (s.len != k.size())
      return false;
    const int64_t* a = keys_.data() + s.offset;
    for (size_t i = 0; i < k.size(); ++i)
      if (a[i] != k[i])
        return false;
    return true;
  }

  void grow() {
    std::vector<Slot, HugePageAllocator<Slot>> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.value < 0)
        continue;
      size_t i = s.hash & mask;
      while (slots_[i].value >= 0)
        i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
};

} // namespace pejit::specializer
