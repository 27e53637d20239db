// Shape and Tensor: construction, the errors of the inline accessors (tensor.h) and the debug
// printer. Storage comes from the pool in storage_pool.cpp.
#include "src/tensor/tensor.h"

#include "src/tensor/storage_pool.h"
#include "src/util/check.h"

#include <cstring>
#include <sstream>

namespace pejit {

const char* dtype_name(DType dt) {
  switch (dt) {
  case DType::F32:
    return "f32";
  case DType::I32:
    return "i32";
  }
  return "?";
}

// ---- Shape -------------------------------------------------------------------------------

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  for (int64_t d : dims)
    push_back(d);
}

void Shape::bad_push(int64_t d) const {
  if (rank_ >= kMaxRank)
    throw Error("shape: more than " + std::to_string(kMaxRank) + " dimensions");
  throw Error("shape: negative dimension " + std::to_string(d));
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_)
    return false;
  for (size_t i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i])
      return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < rank_; ++i) {
    if (i > 0)
      s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

// ---- Tensor ------------------------------------------------------------------------------

Tensor Tensor::empty(DType dt, const Shape& shape) {
  Tensor t;
  t.numel_ = shape.numel();
  t.shape_ = shape;
  t.dtype_ = dt;
  t.st_ = detail::storage_alloc(static_cast<size_t>(t.numel_) * dtype_size(dt));
  return t;
}

Tensor Tensor::zeros(DType dt, const Shape& shape) {
  Tensor t = empty(dt, shape);
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::full(const Shape& shape, float v) {
  Tensor t = empty(DType::F32, shape);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel_; ++i)
    p[i] = v;
  return t;
}

template <class T> static Tensor from_span(DType dt, const Shape& shape, std::span<const T> data) {
  if (static_cast<int64_t>(data.size()) != shape.numel())
    throw Error("tensor: " + std::to_string(data.size()) + " values given for shape " +
                shape.str() + " (" + std::to_string(shape.numel()) + " elements)");
  Tensor t = Tensor::empty(dt, shape);
  if (!data.empty())
    std::memcpy(t.raw(), data.data(), data.size() * sizeof(T));
  return t;
}

Tensor Tensor::from_f32(const Shape& shape, std::span<const float> data) {
  return from_span(DType::F32, shape, data);
}
Tensor Tensor::from_i32(const Shape& shape, std::span<const int32_t> data) {
  return from_span(DType::I32, shape, data);
}
Tensor Tensor::scalar_f32(float v) {
  Tensor t = empty(DType::F32, Shape());
  *t.f32() = v;
  return t;
}
Tensor Tensor::scalar_i32(int32_t v) {
  Tensor t = empty(DType::I32, Shape());
  *t.i32() = v;
  return t;
}

int64_t Tensor::dim(int i) const {
  int r = static_cast<int>(rank());
  int j = i < 0 ? i + r : i;
  if (j < 0 || j >= r)
    throw Error("tensor: dimension " + std::to_string(i) + " out of range for shape " +
                shape_.str());
  return shape_[static_cast<size_t>(j)];
}

void Tensor::bad_access(DType want) const {
  if (st_ == nullptr)
    throw Error(std::string("tensor: ") + dtype_name(want) + " access to an undefined tensor");
  throw Error(std::string("tensor: ") + dtype_name(want) + " access to a " + dtype_name(dtype_) +
              " tensor");
}

float Tensor::item_f32() const {
  if (numel_ != 1)
    throw Error("tensor: item_f32() on shape " + shape_.str() + " (needs exactly one element)");
  return *f32();
}
int32_t Tensor::item_i32() const {
  if (numel_ != 1)
    throw Error("tensor: item_i32() on shape " + shape_.str() + " (needs exactly one element)");
  return *i32();
}

Tensor Tensor::clone() const {
  if (!defined())
    return Tensor();
  Tensor t = empty(dtype_, shape_);
  if (numel_ > 0)
    std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

void Tensor::bad_reshape(const Shape& shape) const {
  if (!defined())
    throw Error("tensor: reshape of an undefined tensor");
  throw Error("tensor: cannot reshape " + shape_.str() + " to " + shape.str() +
              " (element counts differ)");
}

void Tensor::bad_view(int64_t offset, const Shape& shape) const {
  if (!defined())
    throw Error("tensor: view of an undefined tensor");
  throw Error("tensor: view of " + std::to_string(shape.numel()) + " elements at " +
              std::to_string(offset) + " out of range of " + shape_.str());
}

bool Tensor::unique() const {
  return st_ != nullptr && st_->refs.load(std::memory_order_acquire) == 1;
}

std::string Tensor::str() const {
  if (!defined())
    return "undefined";
  std::ostringstream os;
  os << dtype_name(dtype_) << shape_.str() << "{";
  int64_t shown = numel_ < 16 ? numel_ : 16;
  for (int64_t i = 0; i < shown; ++i) {
    if (i > 0)
      os << ", ";
    if (dtype_ == DType::F32)
      os << f32()[i];
    else
      os << i32()[i];
  }
  if (shown < numel_)
    os << ", ... (" << numel_ << " total)";
  os << "}";
  return os.str();
}

} // namespace pejit
