// Tensors the tests write by hand: f32 and i32 literals, their elements read back as vectors,
// and a fixed non-uniform constant for inputs and weights whose exact values do not matter
// but must differ from element to element.
#pragma once

#include "src/tensor/tensor.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace pejit::test {

inline std::vector<float> vf(const Tensor& t) {
  return {t.f32(), t.f32() + t.numel()};
}
inline std::vector<int32_t> vi(const Tensor& t) {
  return {t.i32(), t.i32() + t.numel()};
}
inline Tensor F(const Shape& s, std::vector<float> v) {
  return Tensor::from_f32(s, v);
}
inline Tensor I(const Shape& s, std::vector<int32_t> v) {
  return Tensor::from_i32(s, v);
}

/// A fixed, non-uniform constant of shape `s` (values in about [-0.6, 1.2], neighbors differ).
inline Tensor weights(const Shape& s, int salt = 0) {
  Tensor t = Tensor::zeros(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = 0.3f + 0.9f * std::sin(1.7f * static_cast<float>(i) + 0.4f + 0.9f * salt);
  return t;
}

} // namespace pejit::test
