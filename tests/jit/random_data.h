// Seeded random operands shared by the JIT's GEMM tests.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

namespace pejit::jit::test {

/// n floats uniform in [-1, 1).
inline std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v)
    x = dist(rng);
  return v;
}

} // namespace pejit::jit::test
