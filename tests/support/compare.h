// Comparisons shared by the tests: bit-for-bit equality of tensors and float buffers, and the
// tolerance a path is held to against the generic one (docs/architecture.md: a loss within a
// relative 1e-5, every result and gradient within max|got - ref| <= 1e-4 * max|ref| + 1e-6),
// written once so that every suite holds the same bound and prints the same figures.
#pragma once

#include "src/interp/params.h"
#include "src/tensor/tensor.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace pejit::test {

/// Both defined, the same dtype and shape, and the same bytes.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

/// The same length and the same bytes.
inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return same_bits(std::span<const float>(a), std::span<const float>(b));
}

/// The same representation: tells 0.0 from -0.0, and NaN equals a NaN of the same payload.
inline bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

/// max |t| over an f32 tensor (0 when empty).
inline double max_abs(const Tensor& t) {
  float m = 0;
  for (int64_t i = 0; i < t.numel(); ++i)
    m = std::max(m, std::fabs(t.f32()[i]));
  return m;
}

/// How far `got` is from `ref`: the largest element difference and the largest |ref|.
struct Diff {
  double max_diff = 0, max_ref = 0;
  /// The differential suites' bound: max_diff <= 1e-4 * max_ref + 1e-6.
  bool close() const { return max_diff <= 1e-4 * max_ref + 1e-6; }
  std::string str() const {
    std::ostringstream s;
    s << "max diff " << max_diff << ", max |ref| " << max_ref << ", bound "
      << 1e-4 * max_ref + 1e-6;
    return s.str();
  }
};

/// Element by element over the shorter of the two (callers check the sizes first).
inline Diff diff(std::span<const float> got, std::span<const float> ref) {
  Diff d;
  size_t n = std::min(got.size(), ref.size());
  for (size_t i = 0; i < n; ++i) {
    d.max_ref = std::max(d.max_ref, static_cast<double>(std::fabs(ref[i])));
    d.max_diff = std::max(d.max_diff, static_cast<double>(std::fabs(got[i] - ref[i])));
  }
  return d;
}
inline Diff diff(const Tensor& got, const Tensor& ref) {
  return diff(std::span<const float>(got.f32(), static_cast<size_t>(got.numel())),
              std::span<const float>(ref.f32(), static_cast<size_t>(ref.numel())));
}

/// A loss against the generic path's: |got - ref| <= rel * |ref|.
inline bool loss_close(double got, double ref, double rel = 1e-5) {
  return std::fabs(got - ref) <= rel * std::fabs(ref);
}

/// CHECKs `got` against `ref`: the same type, then i32 elements equal, f32 within Diff::close.
inline void check_close(const Tensor& got, const Tensor& ref, const std::string& what = {}) {
  REQUIRE_MESSAGE(got.dtype() == ref.dtype(), what << ": dtypes differ");
  REQUIRE_MESSAGE(got.shape() == ref.shape(),
                  what << ": shape " << got.shape().str() << " vs " << ref.shape().str());
  if (ref.dtype() == DType::I32) {
    for (int64_t i = 0; i < ref.numel(); ++i)
      CHECK_MESSAGE(got.i32()[i] == ref.i32()[i], what << ": element " << i);
    return;
  }
  Diff d = diff(got, ref);
  CHECK_MESSAGE(d.close(), what << ": " << d.str());
}

/// Every parameter of `got` against the same one of `ref` (the same names, in order).
inline void check_close(const interp::Params& got, const interp::Params& ref) {
  REQUIRE(got.names == ref.names);
  for (size_t p = 0; p < got.values.size(); ++p)
    check_close(got.values[p], ref.values[p], got.names[p]);
}

/// Element by element: |got - ref| <= tol * max(1, |ref|).
inline void check_elementwise(const Tensor& got, const Tensor& ref, double tol) {
  INFO(got.str() << " vs " << ref.str());
  REQUIRE(got.shape() == ref.shape());
  for (int64_t i = 0; i < got.numel(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(got.f32()[i] - ref.f32()[i]) <= tol * std::max(1.0f, std::fabs(ref.f32()[i])));
  }
}

} // namespace pejit::test
