// The random ops' reference kernels over Philox4x32-10 (random.h): one row's numbers depend
// only on its key, the op's index j and the element, never on the row's place in a group.
#include "src/kernels/random.h"

#include "src/util/check.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace pejit::kernels {

uint32_t random_word(const RandomKey& key, uint32_t j, uint64_t e) {
  Philox4x32 w =
      philox4x32_10({static_cast<uint32_t>(e >> 2), key.index + j, key.context, key.step},
                    {static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32)});
  return w[e & 3];
}

void random_fill(RandomDist d, const RandomKey& key, uint32_t j, float p, float* out, int64_t n) {
  const std::array<uint32_t, 2> k{static_cast<uint32_t>(key.seed),
                                  static_cast<uint32_t>(key.seed >> 32)};
  if (d == RandomDist::Normal) {
    // Element e: words 2(e mod 2) and 2(e mod 2) + 1 of the block e / 2.
    for (int64_t e = 0; e < n; ++e) {
      auto ue = static_cast<uint64_t>(e);
      Philox4x32 w =
          philox4x32_10({static_cast<uint32_t>(ue >> 1), key.index + j, key.context, key.step}, k);
      size_t o = (ue & 1) * 2;
      float u1 = unit_float(w[o]) + 0x1p-24f; // (0, 1]: log is finite
      float u2 = unit_float(w[o + 1]);
      out[e] = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    }
    return;
  }
  for (int64_t e0 = 0; e0 < n; e0 += 4) {
    auto b = static_cast<uint64_t>(e0);
    Philox4x32 w =
        philox4x32_10({static_cast<uint32_t>(b >> 2), key.index + j, key.context, key.step}, k);
    for (int64_t e = e0; e < std::min(n, e0 + 4); ++e) {
      float u = unit_float(w[static_cast<size_t>(e - e0)]);
      out[e] = d == RandomDist::Uniform ? u : (u < p ? 1.0f : 0.0f);
    }
  }
}

void dropout_row(const RandomKey& key, uint32_t j, float p, const float* x, float* y, int64_t n) {
  if (!key.train) {
    for (int64_t e = 0; e < n; ++e)
      y[e] = x[e];
    return;
  }
  const float scale = 1.0f / (1.0f - p);
  const std::array<uint32_t, 2> k{static_cast<uint32_t>(key.seed),
                                  static_cast<uint32_t>(key.seed >> 32)};
  for (int64_t e0 = 0; e0 < n; e0 += 4) {
    auto b = static_cast<uint64_t>(e0);
    Philox4x32 w =
        philox4x32_10({static_cast<uint32_t>(b >> 2), key.index + j, key.context, key.step}, k);
    for (int64_t e = e0; e < std::min(n, e0 + 4); ++e)
      y[e] = unit_float(w[static_cast<size_t>(e - e0)]) >= p ? x[e] * scale : 0.0f;
  }
}

RandomKey random_key_at(const Tensor& keys, int64_t row) {
  const int32_t* k = keys.i32() + row * kRandomKeyWidth;
  RandomKey r;
  r.context = static_cast<uint32_t>(k[0]);
  r.index = static_cast<uint32_t>(k[1]);
  r.step = static_cast<uint32_t>(k[2]);
  r.seed = static_cast<uint64_t>(static_cast<uint32_t>(k[3])) |
           (static_cast<uint64_t>(static_cast<uint32_t>(k[4])) << 32);
  r.train = k[5] != 0;
  return r;
}

namespace {

// The rows of a key operand: 1 for a single key [6], else its leading dimension.
int64_t key_rows(const Tensor& keys) {
  if (keys.dtype() != DType::I32 || keys.shape().dims().empty() ||
      keys.shape().dims().back() != kRandomKeyWidth || keys.numel() % kRandomKeyWidth != 0)
    throw Error("random op: the key must be i32[..., " + std::to_string(kRandomKeyWidth) +
                "], got " + keys.shape().str());
  return keys.numel() / kRandomKeyWidth;
}

} // namespace

Tensor random_op(RandomDist d, const Tensor& keys, uint32_t j, float p, const Shape& per_row) {
  int64_t rows = key_rows(keys);
  Shape out_shape = per_row;
  if (keys.rank() == 2) {
    std::vector<int64_t> dims{rows};
    for (auto x : per_row.dims())
      dims.push_back(x);
    out_shape = Shape(std::span<const int64_t>(dims));
  }
  Tensor y = Tensor::empty(DType::F32, out_shape);
  int64_t n = per_row.numel();
  for (int64_t r = 0; r < rows; ++r)
    random_fill(d, random_key_at(keys, r), j, p, y.f32() + r * n, n);
  return y;
}

Tensor dropout(const Tensor& x, const Tensor& keys, uint32_t j, float p) {
  int64_t rows = key_rows(keys);
  if (x.dtype() != DType::F32 || (rows > 1 && x.numel() % rows != 0))
    throw Error("dropout: " + x.shape().str() + " does not split into " + std::to_string(rows) +
                " rows");
  Tensor y = Tensor::empty(DType::F32, x.shape());
  int64_t n = rows > 0 ? x.numel() / rows : 0;
  for (int64_t r = 0; r < rows; ++r)
    dropout_row(random_key_at(keys, r), j, p, x.f32() + r * n, y.f32() + r * n, n);
  return y;
}

} // namespace pejit::kernels
