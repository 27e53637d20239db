// The fused walk over a batch (batch_walk.h). Its hash is skeleton_hash's (partial_eval.cpp:
// the same values mixed in the same preorder), its depths nesting_depth's rule (a constructor
// or tuple field one level below its node, a list's i-th element i + 1 levels below the
// list), its sites equal_payload_slots' (merge_instances.cpp). Before it, a breadth-first pass
// only prefetches the batch (warm).
#include "specializer/batch_walk.h"

#include "specializer/pe_backend.h"

#include <algorithm>
#include <memory>

namespace pejit::specializer {

using interp::Value;

namespace {

// A value still to visit: where the program meets it, and the site a payload in it has.
struct Item {
  const Value* v;
  size_t depth;
  uint64_t site;
};

// The nodes are scattered on the heap and reached through two dependent pointers (a node's
// items vector, then its elements), as in the partial evaluator's BatchScan: a child's
// vector is asked for when the child is pushed (its address is in the parent, already
// read), and the elements of the next value to visit when the one before it is popped, so
// that those misses overlap with the work in between.
inline bool has_items(const Value& x) {
  return x.kind() == Value::Kind::Adt || x.kind() == Value::Kind::Tuple;
}
// A payload's storage: its header (the refcount that copying the payload into `payloads`
// writes) and its first data line (which equal_payload_slots hashes next). Asked for when the
// payload is pushed, so that these misses overlap instead of each stalling the locked
// increment of the copy.
inline void prefetch_payload(const Value& x) {
  const Tensor& t = x.as_tensor();
  if (!t.defined())
    return;
  __builtin_prefetch(t.storage_header(), 1);
  __builtin_prefetch(t.raw());
}
inline void prefetch_vector(const Value& x) {
  if (has_items(x))
    __builtin_prefetch(&x.items());
  else if (x.kind() == Value::Kind::Tensor)
    prefetch_payload(x);
}
constexpr size_t kPrefetchedBytes = 512; // a node's elements asked for at once, at most
// Every line of the elements, not only the first: a Value spans about two lines, and the
// children are pushed last first, so the first element read is in the elements' last line.
inline void prefetch_elements(const Value& x) {
  if (!has_items(x))
    return;
  const auto& xs = x.items();
  const auto* p = reinterpret_cast<const char*>(xs.data());
  const auto* end = p + std::min<size_t>(xs.size() * sizeof(Value), kPrefetchedBytes);
  for (; p < end; p += 64)
    __builtin_prefetch(p);
}

// The batch was built long before it is planned, so the walk below finds it out of cache,
// and in preorder each node's misses wait for its parent's. This pass asks for the whole
// batch first, breadth first: the nodes of one level are independent, so their misses
// overlap, and the batch costs about two memory latencies per level (a level's items
// vectors, then their elements) instead of several per node. It only prefetches: what the
// walk computes does not depend on it.
void warm(const Value& batch) {
  thread_local std::vector<const Value*> level, next; // kept per thread
  level.assign(1, &batch);
  while (!level.empty()) {
    for (const Value* v : level) // the level's items vectors, all at once
      if (has_items(*v))
        __builtin_prefetch(&v->items());
    next.clear();
    for (const Value* v : level) {
      switch (v->kind()) {
      case Value::Kind::Tuple:
      case Value::Kind::Adt: {
        prefetch_elements(*v);
        const auto& xs = v->items();
        for (const Value& x : xs)
          next.push_back(&x);
        break;
      }
      case Value::Kind::List:
        for (size_t i = 0, n = v->list_size(); i < n; ++i)
          next.push_back(&v->list_at(i));
        break;
      case Value::Kind::Tensor:
        prefetch_payload(*v);
        break;
      default:
        break;
      }
    }
    level.swap(next);
  }
  if (level.capacity() > (size_t{1} << 16) || next.capacity() > (size_t{1} << 16)) {
    std::vector<const Value*>().swap(level); // an unusually wide batch: not kept
    std::vector<const Value*>().swap(next);
  }
}

// The walk's stack: a node's children are pushed all at once, into room made for them first,
// so that pushing one is two stores (a vector's push_back, not inlined here, was a call per
// child).
class WalkStack {
public:
  bool empty() const { return n_ == 0; }
  const Item& back() const { return buf_[n_ - 1]; }
  Item pop() { return buf_[--n_]; }
  /// Room for k more items; push them with push_unchecked.
  void make_room(size_t k) {
    if (n_ + k <= cap_)
      return;
    size_t cap = std::max<size_t>(cap_ * 2, 256);
    while (cap < n_ + k)
      cap *= 2;
    auto b = std::make_unique<Item[]>(cap);
    std::copy(buf_.get(), buf_.get() + n_, b.get());
    buf_ = std::move(b);
    cap_ = cap;
  }
  void push_unchecked(const Item& it) { buf_[n_++] = it; }
  /// Empty, giving back the storage of an unusually deep or wide batch.
  void reset() {
    n_ = 0;
    if (cap_ > (size_t{1} << 16)) {
      buf_.reset();
      cap_ = 0;
    }
  }

private:
  std::unique_ptr<Item[]> buf_;
  size_t cap_ = 0, n_ = 0;
};

} // namespace

void walk_batch(const Value& batch, BatchWalk& out) {
  using util::hash_mix;
  out.payloads.clear();
  out.sites.clear();
  warm(batch);
  thread_local WalkStack stack; // kept per thread: no allocation per batch
  stack.reset();
  stack.make_room(1);
  stack.push_unchecked({&batch, 0, 0});
  uint64_t h = 0x243f6a8885a308d3ull;
  size_t deepest = 0;
  while (!stack.empty()) {
    const Item it = stack.pop();
    if (!stack.empty())
      prefetch_elements(*stack.back().v);
    deepest = std::max(deepest, it.depth);
    const Value& v = *it.v;
    h = hash_mix(h, static_cast<uint64_t>(v.kind()));
    switch (v.kind()) {
    case Value::Kind::Int:
      h = hash_mix(h, static_cast<uint64_t>(v.as_int()));
      break;
    case Value::Kind::Bool:
      h = hash_mix(h, static_cast<uint64_t>(v.as_bool()));
      break;
    case Value::Kind::Tensor: {
      const Tensor& t = v.as_tensor();
      h = pe::mix_tensor_sig(h, t);
      out.payloads.push_back(t);
      out.sites.push_back(it.site);
      break;
    }
    case Value::Kind::Tuple:
    case Value::Kind::Adt: {
      const bool adt = v.kind() == Value::Kind::Adt;
      if (adt)
        h = hash_mix(h, static_cast<uint64_t>(v.tag()));
      const auto& xs = v.items();
      h = hash_mix(h, xs.size());
      const uint64_t outer =
          adt ? (uint64_t{2} << 60) | (static_cast<uint64_t>(v.tag()) << 32) : uint64_t{1} << 60;
      stack.make_room(xs.size());
      for (size_t i = xs.size(); i-- > 0;) { // reversed: popped in order (preorder)
        stack.push_unchecked({&xs[i], it.depth + 1, outer | i});
        prefetch_vector(xs[i]);
      }
      break;
    }
    case Value::Kind::List: {
      const size_t n = v.list_size();
      h = hash_mix(h, n);
      stack.make_room(n);
      for (size_t i = n; i > 0; --i) {
        stack.push_unchecked({&v.list_at(i - 1), it.depth + i, it.site});
        prefetch_vector(v.list_at(i - 1));
      }
      break;
    }
    case Value::Kind::Closure:
    case Value::Kind::None:
      break;
    }
  }
  out.depth = deepest;
  out.skeleton = h;
  stack.reset();
}

} // namespace pejit::specializer
