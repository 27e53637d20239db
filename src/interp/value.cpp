// Construction and accessors of runtime values; misuse is a bug (PEJIT_CHECK), since the
// checker guarantees well-typed programs.
#include "src/interp/value.h"

#include "src/util/check.h"

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

const Tensor Value::kNoTensor;

Value Value::tensor(Tensor t, int32_t tape_id) {
  Value r;
  if (t.defined()) {
    new (&r.t_) Tensor(std::move(t));
    r.has_t_ = true;
  }
  r.kind_ = Kind::Tensor;
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
  new (&r.items_) std::shared_ptr<const Values>(std::make_shared<const Values>(std::move(elems)));
  r.kind_ = Kind::Tuple;
  return r;
}

Value Value::list(Values elems) {
  Value r;
  new (&r.items_) std::shared_ptr<const Values>(std::make_shared<const Values>(std::move(elems)));
  r.kind_ = Kind::List;
  return r;
}

Value Value::adt(int32_t tag, Values fields) {
  Value r;
  new (&r.items_) std::shared_ptr<const Values>(std::make_shared<const Values>(std::move(fields)));
  r.kind_ = Kind::Adt;
  r.tag_ = tag;
  return r;
}

Value Value::closure(std::shared_ptr<const Closure> c) {
  Value r;
  new (&r.clo_) std::shared_ptr<const Closure>(std::move(c));
  r.kind_ = Kind::Closure;
  return r;
}

void Value::bad(const char* what) const {
  PEJIT_CHECK(false) << what << describe();
  __builtin_unreachable();
}

void Value::bad_list() const {
  PEJIT_CHECK(false) << "bad list access";
  __builtin_unreachable();
}

Value Value::list_tail() const {
  PEJIT_CHECK(kind_ == Kind::List && list_size() > 0) << "tail of an empty list";
  Value r = *this;
  r.tag_ += 1;
  return r;
}

std::string Value::describe() const {
  switch (kind_) {
  case Kind::None:
    return "<none>";
  case Kind::Int:
    return "Int " + std::to_string(i_);
  case Kind::Bool:
    return i_ ? "true" : "false";
  case Kind::Tensor:
    return has_t_ ? std::string(dtype_name(t_.dtype())) + t_.shape().str() : "<undefined tensor>";
  case Kind::Tuple:
    return "tuple of " + std::to_string(items_->size());
  case Kind::List:
    return "list of " + std::to_string(list_size());
  case Kind::Adt:
    return "constructor #" + std::to_string(tag_);
  case Kind::Closure:
    return "function";
  }
  return "?";
}

} // namespace pejit::interp
