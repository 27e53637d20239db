// Construction and accessors of runtime values; misuse is a bug (PEJIT_CHECK), since the
// checker guarantees well-typed programs.
#include "src/interp/value.h"

#include "src/util/check.h"

#include <unordered_map>

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

namespace {
// Releasing a structure's last reference destroys its children, which release theirs: one
// native frame chain per level. Past kReleaseDepth nested releases, the children still owned
// only by the structure being released are handed to the outermost release instead, which
// drops them one by one from its own frame.
constexpr int kReleaseDepth = 64;
thread_local int t_release_depth = 0;
thread_local std::vector<std::shared_ptr<const Values>>* t_release_pending = nullptr;
} // namespace

void Value::release_items() noexcept {
  if (items_.use_count() != 1) { // not the last owner: nothing is freed
    items_.~shared_ptr();
    return;
  }
  int& depth = t_release_depth;
  if (depth == 0) {
    std::vector<std::shared_ptr<const Values>> pending;
    t_release_pending = &pending;
    depth = 1;
    items_.~shared_ptr();
    while (!pending.empty()) {
      std::shared_ptr<const Values> p = std::move(pending.back());
      pending.pop_back();
      p.reset();
    }
    depth = 0;
    t_release_pending = nullptr;
    return;
  }
  if (depth >= kReleaseDepth) {
    t_release_pending->push_back(std::move(items_));
    items_.~shared_ptr();
    return;
  }
  ++depth;
  items_.~shared_ptr();
  --depth;
}

size_t nesting_depth(const Value& v) {
  // An explicit stack of (value, depth at which the program meets it). A payload shared by
  // several parents (a DAG) is walked again only when met deeper than before.
  struct Item {
    const Value* v;
    size_t depth;
  };
  std::vector<Item> todo{{&v, 0}};
  std::unordered_map<const void*, size_t> shared;
  size_t deepest = 0;
  while (!todo.empty()) {
    Item it = todo.back();
    todo.pop_back();
    deepest = std::max(deepest, it.depth);
    const Value& x = *it.v;
    Value::Kind k = x.kind();
    if (k != Value::Kind::Tuple && k != Value::Kind::Adt && k != Value::Kind::List)
      continue;
    bool list = k == Value::Kind::List;
    size_t n = list ? x.list_size() : x.items().size();
    if (n == 0)
      continue;
    const Value* first = list ? &x.list_at(0) : x.items().data();
    if (x.shares_items()) {
      auto [at, fresh] = shared.try_emplace(first, it.depth);
      if (!fresh && at->second >= it.depth)
        continue;
      at->second = it.depth;
    }
    for (size_t i = 0; i < n; ++i)
      todo.push_back({first + i, it.depth + (list ? i + 1 : 1)});
  }
  return deepest;
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
