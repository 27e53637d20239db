// Host tensors: a small inline Shape, and Tensor, a dense row-major f32/i32 array whose storage
// is ref-counted, 64-byte aligned and drawn from a size-class free-list pool (storage_pool.h),
// so that a hot training loop allocating thousands of small tensors never reaches malloc.
// A Tensor is a cheap handle: copying it shares the storage; clone() copies the data.
#pragma once

#include "src/tensor/storage_pool.h"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace pejit {

/// Element type of a tensor.
enum class DType : uint8_t { F32, I32 };

/// "f32" or "i32".
const char* dtype_name(DType);

/// Size in bytes of one element of `dt`.
inline size_t dtype_size(DType) {
  return 4;
}

/// A tensor shape of at most kMaxRank dimensions, stored inline (no heap).
class Shape {
public:
  static constexpr size_t kMaxRank = 8;

  /// Rank 0 (a scalar).
  Shape() = default;
  /// Throws pejit::Error for a negative dimension or more than kMaxRank dimensions.
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  size_t rank() const { return rank_; }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  /// Product of the dimensions; 1 for rank 0.
  int64_t numel() const {
    int64_t n = 1;
    for (size_t i = 0; i < rank_; ++i)
      n *= dims_[i];
    return n;
  }
  /// Appends a dimension; throws pejit::Error past kMaxRank or for a negative one. Inline: the
  /// executor builds a per-row shape this way for every value of every group.
  void push_back(int64_t d) {
    if (rank_ >= kMaxRank || d < 0) [[unlikely]]
      bad_push(d);
    dims_[rank_++] = d;
  }
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + rank_; }
  std::span<const int64_t> dims() const { return {dims_, rank_}; }

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  /// "[3, 4]", or "[]" for a scalar.
  std::string str() const;

private:
  [[noreturn]] void bad_push(int64_t d) const;

  int64_t dims_[kMaxRank] = {};
  uint8_t rank_ = 0;
};

/// A dense, contiguous, row-major tensor with shared, ref-counted, 64-byte-aligned storage.
/// Copies share storage; write in place only when unique() (or after clone()).
class Tensor {
public:
  /// An undefined tensor (defined() == false).
  Tensor() = default;
  Tensor(const Tensor& o)
      : st_(o.st_), shape_(o.shape_), numel_(o.numel_), offset_(o.offset_), dtype_(o.dtype_) {
    if (st_ != nullptr)
      detail::storage_retain(st_);
  }
  Tensor(Tensor&& o) noexcept
      : st_(o.st_), shape_(o.shape_), numel_(o.numel_), offset_(o.offset_), dtype_(o.dtype_) {
    o.forget();
  }
  Tensor& operator=(const Tensor& o) {
    if (o.st_ != nullptr)
      detail::storage_retain(o.st_);
    if (st_ != nullptr)
      detail::storage_release(st_);
    take_fields(o);
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      if (st_ != nullptr)
        detail::storage_release(st_);
      take_fields(o);
      o.forget();
    }
    return *this;
  }
  ~Tensor() {
    if (st_ != nullptr)
      detail::storage_release(st_);
  }

  /// Uninitialized contents.
  static Tensor empty(DType dt, const Shape& shape);
  static Tensor zeros(DType dt, const Shape& shape);
  /// An f32 tensor filled with v.
  static Tensor full(const Shape& shape, float v);
  /// Copies `data`; throws pejit::Error unless data.size() == shape.numel().
  static Tensor from_f32(const Shape& shape, std::span<const float> data);
  static Tensor from_i32(const Shape& shape, std::span<const int32_t> data);
  static Tensor scalar_f32(float v);
  static Tensor scalar_i32(int32_t v);

  bool defined() const { return st_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t rank() const { return shape_.rank(); }
  /// Dimension i; negative i counts from the end. Throws pejit::Error when out of range.
  int64_t dim(int i) const;
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * 4; }

  /// Typed data pointers; throw pejit::Error on an undefined tensor or the wrong dtype.
  float* f32() { return static_cast<float*>(typed(DType::F32)); }
  const float* f32() const { return static_cast<const float*>(typed(DType::F32)); }
  int32_t* i32() { return static_cast<int32_t*>(typed(DType::I32)); }
  const int32_t* i32() const { return static_cast<const int32_t*>(typed(DType::I32)); }
  /// Untyped data pointer (nullptr when undefined).
  void* raw() { return st_ == nullptr ? nullptr : static_cast<char*>(st_->data()) + offset_ * 4; }
  const void* raw() const { return const_cast<Tensor*>(this)->raw(); }

  /// The single element; throws pejit::Error unless numel() == 1 and the dtype matches.
  float item_f32() const;
  int32_t item_i32() const;

  /// A deep copy with its own storage.
  Tensor clone() const;
  /// Same storage viewed with another shape; throws pejit::Error when numel differs.
  Tensor reshaped(const Shape& shape) const {
    const int64_t n = shape.numel();
    if (st_ == nullptr || n != numel_)
      bad_reshape(shape);
    Tensor t = *this;
    t.shape_ = shape;
    return t;
  }
  /// `shape` elements of type `dt` starting `offset` elements into this tensor's data, sharing
  /// its storage (an arena's slot). Both dtypes are 4 bytes wide. Throws pejit::Error when the
  /// view does not fit inside this tensor.
  Tensor view(int64_t offset, DType dt, const Shape& shape) const {
    const int64_t n = shape.numel();
    if (st_ == nullptr || offset < 0 || offset + n > numel_)
      bad_view(offset, shape);
    Tensor t = *this;
    t.offset_ = offset_ + offset;
    t.shape_ = shape;
    t.numel_ = n;
    t.dtype_ = dt;
    return t;
  }
  /// True when no other Tensor shares this storage (so it is safe to write in place).
  bool unique() const;
  /// True when both tensors view the same storage.
  bool shares_storage(const Tensor& o) const { return st_ != nullptr && st_ == o.st_; }
  /// The storage's header (its refcount), nullptr when undefined: what copying a Tensor
  /// writes, for a caller that prefetches it before copying many.
  const void* storage_header() const { return st_; }
  /// A short debug print: "f32[2, 3]{1, 2, 3, 4, 5, 6}", elided past 16 elements.
  std::string str() const;

private:
  // The checked data pointer; the throws are out of line, off the accessors' fast path.
  void* typed(DType want) const {
    if (st_ == nullptr || dtype_ != want) [[unlikely]]
      bad_access(want);
    return static_cast<char*>(st_->data()) + offset_ * 4;
  }
  [[noreturn, gnu::cold]] void bad_access(DType want) const;
  [[noreturn, gnu::cold]] void bad_reshape(const Shape& shape) const;
  [[noreturn, gnu::cold]] void bad_view(int64_t offset, const Shape& shape) const;
  void take_fields(const Tensor& o) {
    st_ = o.st_;
    shape_ = o.shape_;
    numel_ = o.numel_;
    offset_ = o.offset_;
    dtype_ = o.dtype_;
  }
  void forget() {
    st_ = nullptr;
    shape_ = Shape();
    numel_ = 0;
    offset_ = 0;
  }

  detail::StorageHeader* st_ = nullptr;
  Shape shape_;
  int64_t numel_ = 0;
  int64_t offset_ = 0; ///< elements from the storage's start (views)
  DType dtype_ = DType::F32;
};

/// Counters of the tensor storage pool (process-wide).
struct TensorPoolStats {
  uint64_t system_allocs = 0; ///< blocks obtained from the system allocator
  uint64_t reuses = 0;        ///< allocations served from a free list
  uint64_t cached_bytes = 0;  ///< bytes held in the shared free lists (not thread caches)
};
TensorPoolStats tensor_pool_stats();
/// Returns the calling thread's cached blocks and all shared free blocks to the system.
void tensor_pool_trim();

} // namespace pejit
