// Runtime values of the generic path and of batches: Int, Bool, tensors (with the tape id
// that the generic path's AD uses), tuples, lists, ADT values and closures. Values are
// immutable and cheap to copy (shared children); a list's tail is a view, not a copy.
#pragma once

#include "ir/module.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pejit::interp {

class Value;
using Values = std::vector<Value>;

struct Closure {
  const ir::Lambda* lambda = nullptr; ///< null: a global function (fn_index)
  int fn_index = -1;
  Values captures;
};

class Value {
public:
  enum class Kind : uint8_t { None, Int, Bool, Tensor, Tuple, List, Adt, Closure };

  Value() = default;
  static Value integer(int64_t v);
  static Value boolean(bool v);
  /// A tensor; `tape_id` is its node on the AD tape (-1: a constant).
  static Value tensor(Tensor t, int32_t tape_id = -1);
  /// A tensor holding one row per instance of a batched template call (plan executor).
  static Value batched_tensor(Tensor t, int32_t tape_id = -1);
  bool batched() const { return kind_ == Kind::Tensor && tag_ != 0; }
  static Value tuple(Values elems);
  static Value list(Values elems);
  /// ADT value: constructor `tag` (index in its type) and its fields.
  static Value adt(int32_t tag, Values fields);
  static Value closure(std::shared_ptr<const Closure> c);

  Kind kind() const { return kind_; }
  int64_t as_int() const;
  bool as_bool() const;
  const Tensor& as_tensor() const;
  int32_t tape_id() const { return kind_ == Kind::Tensor ? static_cast<int32_t>(i_) : -1; }
  int32_t tag() const; ///< ADT constructor index
  /// Tuple elements, ADT fields.
  const Values& items() const;
  /// List elements from the list's offset on.
  size_t list_size() const;
  const Value& list_at(size_t i) const;
  /// The list without its first element (a view).
  Value list_tail() const;
  const Closure& as_closure() const;

  /// Short description for messages ("Int 3", "f32[2, 3]", "List of 25", "ADT tag 1").
  std::string describe() const;

private:
  Kind kind_ = Kind::None;
  int32_t tag_ = 0;   ///< ADT tag; List: offset of the first element
  int64_t i_ = 0;     ///< Int, Bool, tensor tape id
  Tensor t_;
  std::shared_ptr<const Values> items_;
  std::shared_ptr<const Closure> clo_;
};

} // namespace pejit::interp
