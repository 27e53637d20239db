// Small tensors written as literals in the kernel tests, and read back as vectors.
#pragma once

#include "src/tensor/tensor.h"

#include <cstdint>
#include <vector>

namespace pejit::test {

inline std::vector<float> vf(const Tensor& t) {
  return {t.f32(), t.f32() + t.numel()};
}
inline std::vector<int32_t> vi(const Tensor& t) {
  return {t.i32(), t.i32() + t.numel()};
}
inline Tensor F(Shape s, std::vector<float> v) {
  return Tensor::from_f32(s, v);
}
inline Tensor I(Shape s, std::vector<int32_t> v) {
  return Tensor::from_i32(s, v);
}

} // namespace pejit::test
