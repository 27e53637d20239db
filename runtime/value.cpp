// The public Value (include/pejit/pejit.h): a handle on an interpreter value.
#include "runtime/session_impl.h"

#include <span>

namespace pejit {

using runtime::detail::unwrap;
using runtime::detail::wrap;

namespace {
Shape to_shape(const std::vector<int64_t>& s) {
  for (auto d : s)
    if (d < 0)
      throw Error("negative dimension in a tensor shape");
  return Shape(std::span<const int64_t>(s));
}
} // namespace

Value::Value() : impl_(std::make_shared<const Impl>()) {}
Value::~Value() = default;
Value::Value(const Value&) = default;
Value& Value::operator=(const Value&) = default;
Value::Value(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
const Value::Impl& Value::impl() const {
  return *impl_;
}

Value Value::integer(int64_t v) {
  return wrap(interp::Value::integer(v));
}
Value Value::boolean(bool v) {
  return wrap(interp::Value::boolean(v));
}
Value Value::scalar_i32(int32_t v) {
  return wrap(interp::Value::tensor(Tensor::scalar_i32(v)));
}
Value Value::scalar_f32(float v) {
  return wrap(interp::Value::tensor(Tensor::scalar_f32(v)));
}
Value Value::tensor_f32(const std::vector<int64_t>& shape, const std::vector<float>& data) {
  return wrap(interp::Value::tensor(Tensor::from_f32(to_shape(shape), data)));
}
Value Value::tensor_i32(const std::vector<int64_t>& shape, const std::vector<int32_t>& data) {
  return wrap(interp::Value::tensor(Tensor::from_i32(to_shape(shape), data)));
}
Value Value::list(const std::vector<Value>& items) {
  interp::Values xs;
  for (const auto& i : items)
    xs.push_back(unwrap(i));
  return wrap(interp::Value::list(std::move(xs)));
}
Value Value::tuple(const std::vector<Value>& items) {
  interp::Values xs;
  for (const auto& i : items)
    xs.push_back(unwrap(i));
  return wrap(interp::Value::tuple(std::move(xs)));
}

bool Value::is_list() const {
  return impl_->v.kind() == interp::Value::Kind::List;
}
bool Value::is_tensor() const {
  return impl_->v.kind() == interp::Value::Kind::Tensor;
}

size_t Value::size() const {
  const auto& v = impl_->v;
  if (v.kind() == interp::Value::Kind::List)
    return v.list_size();
  if (v.kind() == interp::Value::Kind::Tuple || v.kind() == interp::Value::Kind::Adt)
    return v.items().size();
  throw Error("size() of " + v.describe());
}

Value Value::at(size_t i) const {
  if (i >= size())
    throw Error("index " + std::to_string(i) + " out of range");
  const auto& v = impl_->v;
  return wrap(v.kind() == interp::Value::Kind::List ? v.list_at(i) : v.items()[i]);
}

int64_t Value::as_int() const {
  if (impl_->v.kind() != interp::Value::Kind::Int)
    throw Error("not an Int: " + describe());
  return impl_->v.as_int();
}
bool Value::as_bool() const {
  if (impl_->v.kind() != interp::Value::Kind::Bool)
    throw Error("not a Bool: " + describe());
  return impl_->v.as_bool();
}
float Value::item_f32() const {
  if (!is_tensor())
    throw Error("not a tensor: " + describe());
  return impl_->v.as_tensor().item_f32();
}
int32_t Value::item_i32() const {
  if (!is_tensor())
    throw Error("not a tensor: " + describe());
  return impl_->v.as_tensor().item_i32();
}
std::vector<int64_t> Value::shape() const {
  if (!is_tensor())
    throw Error("not a tensor: " + describe());
  auto d = impl_->v.as_tensor().shape().dims();
  return {d.begin(), d.end()};
}
std::vector<float> Value::to_f32() const {
  if (!is_tensor())
    throw Error("not a tensor: " + describe());
  const Tensor& t = impl_->v.as_tensor();
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::F32)
    std::copy(t.f32(), t.f32() + t.numel(), out.begin());
  else
    for (int64_t i = 0; i < t.numel(); ++i)
      out[static_cast<size_t>(i)] = static_cast<float>(t.i32()[i]);
  return out;
}
std::string Value::describe() const {
  return impl_->v.describe();
}

} // namespace pejit
