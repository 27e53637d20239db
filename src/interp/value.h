// Runtime values of the generic path and of batches: Int, Bool, tensors (with the tape id
// that the generic path's AD uses), tuples, lists, ADT values and closures. Values are
// immutable and cheap to copy (shared children); a list's tail is a view, not a copy.
// Layout: the tensor, the children and the closure share one union (only the kind's member
// is alive), so a Value is 112 bytes, and copying or destroying a non-tensor Value touches
// one pointer; the hot accessors are inline (the partial evaluator copies Values millions of
// times a second).
#pragma once

#include "src/ir/module.h"
#include "src/tensor/tensor.h"

#include <cstdint>
#include <memory>
#include <new>
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
  /// Kinds from Tuple on hold a shared payload (destroy() relies on the order).
  enum class Kind : uint8_t { None, Int, Bool, Tensor, Tuple, List, Adt, Closure };

  Value() {}
  Value(const Value& o) : kind_(o.kind_), has_t_(o.has_t_), tag_(o.tag_), i_(o.i_) {
    copy_payload(o);
  }
  Value(Value&& o) noexcept : kind_(o.kind_), has_t_(o.has_t_), tag_(o.tag_), i_(o.i_) {
    move_payload(std::move(o));
  }
  Value& operator=(const Value& o) {
    if (this != &o) {
      if (has_t_ && o.has_t_) {
        t_ = o.t_;
        tag_ = o.tag_;
        i_ = o.i_;
      } else {
        Value tmp(o);
        *this = std::move(tmp);
      }
    }
    return *this;
  }
  Value& operator=(Value&& o) noexcept {
    if (this != &o) {
      destroy();
      kind_ = o.kind_;
      has_t_ = o.has_t_;
      tag_ = o.tag_;
      i_ = o.i_;
      move_payload(std::move(o));
    }
    return *this;
  }
  ~Value() { destroy(); }

  static Value integer(int64_t v);
  static Value boolean(bool v);
  /// A tensor; `tape_id` is its node on the AD tape (-1: a constant).
  static Value tensor(Tensor t, int32_t tape_id = -1);
  /// An undefined tensor with a tape id: what Value::tensor(Tensor(), tape_id) gives, without
  /// constructing a Tensor (the partial evaluator's residual references).
  static Value undefined_tensor(int32_t tape_id) {
    Value r;
    r.kind_ = Kind::Tensor;
    r.i_ = tape_id;
    return r;
  }
  /// A tensor holding one row per instance of a batched template call (plan executor).
  static Value batched_tensor(Tensor t, int32_t tape_id = -1);
  bool batched() const { return kind_ == Kind::Tensor && tag_ != 0; }
  static Value tuple(Values elems);
  static Value list(Values elems);
  /// ADT value: constructor `tag` (index in its type) and its fields.
  static Value adt(int32_t tag, Values fields);
  static Value closure(std::shared_ptr<const Closure> c);
  /// A Tuple, List (tag: 0) or Adt value over elements that are shared already: the partial
  /// evaluator rebuilds a batch's structure into vectors it reuses across batches.
  static Value with_items(Kind kind, int32_t tag, std::shared_ptr<const Values> items) {
    Value r;
    if (kind != Kind::Tuple && kind != Kind::List && kind != Kind::Adt) [[unlikely]]
      r.bad("with_items of another kind: ");
    new (&r.items_) std::shared_ptr<const Values>(std::move(items));
    r.kind_ = kind;
    r.tag_ = tag;
    return r;
  }

  Kind kind() const { return kind_; }
  int64_t as_int() const {
    if (kind_ != Kind::Int) [[unlikely]]
      bad("not an Int: ");
    return i_;
  }
  bool as_bool() const {
    if (kind_ != Kind::Bool) [[unlikely]]
      bad("not a Bool: ");
    return i_ != 0;
  }
  const Tensor& as_tensor() const {
    if (kind_ != Kind::Tensor) [[unlikely]]
      bad("not a tensor: ");
    return has_t_ ? t_ : kNoTensor;
  }
  int32_t tape_id() const { return kind_ == Kind::Tensor ? static_cast<int32_t>(i_) : -1; }
  /// ADT constructor index
  int32_t tag() const {
    if (kind_ != Kind::Adt) [[unlikely]]
      bad("not an ADT value: ");
    return tag_;
  }
  /// Tuple elements, ADT fields.
  const Values& items() const {
    if (kind_ != Kind::Tuple && kind_ != Kind::Adt) [[unlikely]]
      bad("no items: ");
    return *items_;
  }
  /// What keeps a Tuple's or ADT's items alive, observed: a cache keyed by the items' address
  /// holds this to know whether that address is still these items (specializer::FragmentMemo).
  std::weak_ptr<const Values> items_owner() const {
    if (kind_ != Kind::Tuple && kind_ != Kind::Adt) [[unlikely]]
      bad("no items: ");
    return items_;
  }
  /// List elements from the list's offset on.
  size_t list_size() const {
    if (kind_ != Kind::List) [[unlikely]]
      bad("not a list: ");
    return items_->size() - static_cast<size_t>(tag_);
  }
  const Value& list_at(size_t i) const {
    if (kind_ != Kind::List || i >= items_->size() - static_cast<size_t>(tag_)) [[unlikely]]
      bad_list();
    return (*items_)[static_cast<size_t>(tag_) + i];
  }
  /// The list without its first element (a view).
  Value list_tail() const;
  const Closure& as_closure() const {
    if (kind_ != Kind::Closure) [[unlikely]]
      bad("not a function: ");
    return *clo_;
  }

  /// A Tuple, List or Adt whose elements are held by other values too.
  bool shares_items() const { return has_items() && items_.use_count() > 1; }

  /// Short description for messages ("Int 3", "f32[2, 3]", "List of 25", "ADT tag 1").
  std::string describe() const;

private:
  /// What an undefined tensor Value (a residual, a placeholder) returns from as_tensor():
  /// such Values hold no Tensor, so copying them costs no more than copying an Int.
  static const Tensor kNoTensor;

  Kind kind_ = Kind::None;
  bool has_t_ = false; ///< Tensor: t_ is alive (a defined tensor)
  int32_t tag_ = 0;    ///< ADT tag; List: offset of the first element; tensor: batched
  int64_t i_ = 0;      ///< Int, Bool, tensor tape id
  union {
    Tensor t_;                            ///< Tensor
    std::shared_ptr<const Values> items_; ///< Tuple, List, Adt
    std::shared_ptr<const Closure> clo_;  ///< Closure
  };

  bool has_items() const {
    return kind_ == Kind::Tuple || kind_ == Kind::List || kind_ == Kind::Adt;
  }
  void copy_payload(const Value& o) {
    if (has_t_)
      new (&t_) Tensor(o.t_);
    else if (has_items())
      new (&items_) std::shared_ptr<const Values>(o.items_);
    else if (kind_ == Kind::Closure)
      new (&clo_) std::shared_ptr<const Closure>(o.clo_);
  }
  // Takes o's payload (kind_ and has_t_ already equal o's); o becomes None.
  void move_payload(Value&& o) noexcept {
    if (has_t_)
      new (&t_) Tensor(std::move(o.t_));
    else if (has_items())
      new (&items_) std::shared_ptr<const Values>(std::move(o.items_));
    else if (kind_ == Kind::Closure)
      new (&clo_) std::shared_ptr<const Closure>(std::move(o.clo_));
    o.destroy();
  }
  // Inline for the common case (a scalar or an undefined tensor: nothing to release).
  void destroy() noexcept {
    if (has_t_ || kind_ >= Kind::Tuple)
      release();
    kind_ = Kind::None;
    has_t_ = false;
  }
  [[gnu::noinline]] void release() noexcept {
    if (has_t_)
      t_.~Tensor();
    else if (has_items())
      release_items();
    else if (kind_ == Kind::Closure)
      clo_.~shared_ptr();
  }
  // Drops items_ without recursing once per level of a deep structure (value.cpp).
  void release_items() noexcept;
  [[noreturn, gnu::cold, gnu::noinline]] void bad(const char* what) const;
  [[noreturn, gnu::cold, gnu::noinline]] void bad_list() const;
};

/// How deep a program that walks `v` recurses at most: one level per ADT or tuple nesting and
/// per list position (a recursion along a list goes one call deeper per element). Computed
/// without recursion, so that any input can be measured before the recursive stages see it.
size_t nesting_depth(const Value& v);

} // namespace pejit::interp
