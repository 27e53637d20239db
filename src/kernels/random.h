// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011, as in Random123) and the
// reference kernels of the random ops. Every number is a pure function of (seed, step,
// context, index within the context, element), so the generic path and plans on any tier
// draw the same bits whatever the batching: a kernel reads its rows' keys, never a global
// state. docs/language.md ("Random ops") defines the key.
#pragma once

#include "src/tensor/tensor.h"

#include <array>
#include <cstdint>

namespace pejit::kernels {

using Philox4x32 = std::array<uint32_t, 4>;

/// Ten Philox rounds of `ctr` under `key` (the published algorithm: Random123's
/// philox4x32_R(10, ctr, key)).
inline Philox4x32 philox4x32_10(Philox4x32 ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

/// A 32-bit draw as a float in [0, 1): its top 24 bits times 2^-24 (exact in f32). The one
/// spelling of this conversion; any other implementation must spell it the same way.
inline float unit_float(uint32_t w) {
  return static_cast<float>(w >> 8) * 0x1p-24f;
}

/// The per-row key operand of a random op: i32[kRandomKeyWidth] = {context, index, step,
/// seed low, seed high, train}. Built by interp::random_key_tensor.
inline constexpr int64_t kRandomKeyWidth = 6;

struct RandomKey {
  uint32_t context = 0, index = 0, step = 0;
  uint64_t seed = 0;
  bool train = true;
};

/// Element e of the stream of (key, j): word (e mod 4) of Philox over the counter
/// {e / 4, key.index + j, key.context, key.step} under the seed. `j` is the op's place in its
/// template (its attribute), added to the key's index.
uint32_t random_word(const RandomKey& key, uint32_t j, uint64_t e);

/// What the random ops compute from one row's key and the op's attribute j.
enum class RandomDist : uint8_t { Bernoulli, Uniform, Normal };
/// `n` draws into out: Bernoulli(p) as 0/1, Uniform [0, 1), Normal(0, 1) (Box-Muller on the
/// words of element pair e / 2).
void random_fill(RandomDist d, const RandomKey& key, uint32_t j, float p, float* out, int64_t n);
/// Inverted dropout of n elements: element e kept when its uniform draw is >= p, and then
/// scaled by 1 / (1 - p); key.train false: y = x.
void dropout_row(const RandomKey& key, uint32_t j, float p, const float* x, float* y, int64_t n);

/// The key of row `row` of a key tensor ([6] or [rows, 6], i32).
RandomKey random_key_at(const Tensor& keys, int64_t row);

/// The random ops' reference kernels. Operands are per instance (the generic path: key
/// [6]) or a group's rows (plans: key [rows, 6], x and the result [rows, ...]); the numbers
/// of a row are the same either way.
Tensor random_op(RandomDist d, const Tensor& keys, uint32_t j, float p, const Shape& per_row);
Tensor dropout(const Tensor& x, const Tensor& keys, uint32_t j, float p);

} // namespace pejit::kernels
