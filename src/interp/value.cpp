// Construction and accessors of runtime values; misuse is a bug (PEJIT_CHECK), since the
// checker guarantees well-typed programs.
#include "interp/value.h"

#include "util/check.h"

namespace pejit::interp {

Value Value::integer(int64_t v) {
  Value r;
  r.kind_ = Kind::Int;
  r.i_ = v;
  return r;
}

Value Value::boolean(bool v) {
  Value r;
  r.kind_ = Kind::Bool;
  r.i_ = v;
  return r;
}

Value Value::tensor(Tensor t, int32_t tape_id) {
  Value r;
  r.kind_ = Kind::Tensor;
  r.t_ = std::move(t);
  r.i_ = tape_id;
  return r;
}

Value Value::batched_tensor(Tensor t, int32_t tape_id) {
  Value r = tensor(std::move(t), tape_id);
  r.tag_ = 1;
  return r;
}

Value Value::tuple(Values elems) {
  Value r;
  r.kind_ = Kind::Tuple;
  r.items_ = std::make_shared<const Values>(std::move(elems));
  return r;
}

Value Value::list(Values elems) {
  Value r;
  r.kind_ = Kind::List;
  r.items_ = std::make_shared<const Values>(std::move(elems));
  return r;
}

Value Value::adt(int32_t tag, Values fields) {
  Value r;
  r.kind_ = Kind::Adt;
  r.tag_ = tag;
  r.items_ = std::make_shared<const Values>(std::move(fields));
  return r;
}

Value Value::closure(std::shared_ptr<const Closure> c) {
  Value r;
  r.kind_ = Kind::Closure;
  r.clo_ = std::move(c);
  return r;
}

int64_t Value::as_int() const {
  PEJIT_CHECK(kind_ == Kind::Int) << "not an Int: " << describe();
  return i_;
}

bool Value::as_bool() const {
  PEJIT_CHECK(kind_ == Kind::Bool) << "not a Bool: " << describe();
  return i_ != 0;
}

const Tensor& Value::as_tensor() const {
  PEJIT_CHECK(kind_ == Kind::Tensor) << "not a tensor: " << describe();
  return t_;
}

int32_t Value::tag() const {
  PEJIT_CHECK(kind_ == Kind::Adt) << "not an ADT value: " << describe();
  return tag_;
}

const Values& Value::items() const {
  PEJIT_CHECK(kind_ == Kind::Tuple || kind_ == Kind::Adt) << "no items: " << describe();
  return *items_;
}

size_t Value::list_size() const {
  PEJIT_CHECK(kind_ == Kind::List) << "not a list: " << describe();
  return items_->size() - static_cast<size_t>(tag_);
}

const Value& Value::list_at(size_t i) const {
  PEJIT_CHECK(kind_ == Kind::List && i < list_size()) << "bad list access";
  return (*items_)[static_cast<size_t>(tag_) + i];
}

Value Value::list_tail() const {
  PEJIT_CHECK(kind_ == Kind::List && list_size() > 0) << "tail of an empty list";
  Value r = *this;
  r.tag_ += 1;
  return r;
}

const Closure& Value::as_closure() const {
  PEJIT_CHECK(kind_ == Kind::Closure) << "not a function: " << describe();
  return *clo_;
}

std::string Value::describe() const {
  switch (kind_) {
  case Kind::None: return "<none>";
  case Kind::Int: return "Int " + std::to_string(i_);
  case Kind::Bool: return i_ ? "true" : "false";
  case Kind::Tensor:
    return t_.defined() ? std::string(dtype_name(t_.dtype())) + t_.shape().str() : "<undefined tensor>";
  case Kind::Tuple: return "tuple of " + std::to_string(items_->size());
  case Kind::List: return "list of " + std::to_string(list_size());
  case Kind::Adt: return "constructor #" + std::to_string(tag_);
  case Kind::Closure: return "function";
  }
  return "?";
}

} // namespace pejit::interp
