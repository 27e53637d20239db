// BatchScan: the partial evaluator's one walk over a batch before its evaluation (checked
// against the entry's type, payloads numbered, structure rebuilt into the NodePool with every
// node's skeleton), and trees_taken_whole, the check on an entry that lets the scan take a
// tree met in an earlier batch whole (the design note at the top of partial_eval.cpp).
// Internal to the partial evaluator: included by partial_eval.cpp only.
#pragma once

#include "specializer/fragments.h"
#include "specializer/node_pool.h"
#include "specializer/pe_backend.h"
#include "src/ir/module.h"
#include "src/types/builtins.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace pejit::specializer::pe {

using util::hash_mix;

// One walk over the batch that does what check_value, skeleton_hash (with its value count)
// and residualize_batch would do in three: checks the batch against the entry's parameter
// type, hashes its static structure (exactly as hash_value does) and replaces its payload
// tensors by input slots. It reports a mismatch without a message; the caller then runs
// interp::check_value for the diagnostic (or, should that pass, the three walks). With
// fragments on, it also gives every Tuple, List and ADT node its skeleton and its range of
// input slots (PoolNode).
class BatchScan {
public:
  /// `hash`: whether to hash the skeleton (`h`); not when the caller has it already.
  /// `whole`: the batch's trees may be taken whole from frags->trees (the caller has checked
  /// that the entry hands them only to calls; needs `frags`, no hashing, no kept inputs).
  BatchScan(PeBackend& be, const ir::Module& m, const interp::DimBindings& dims,
            std::shared_ptr<NodePool> pool, FragmentMemo* frags, bool hash, bool whole = false)
      : be_(be), m_(m), dims_(dims), pool_(std::move(pool)), frags_(frags), hash_(hash),
        whole_(whole && frags != nullptr && !hash) {}

  uint64_t h = 0x243f6a8885a308d3ull;
  size_t count = 0;
  bool ok = true;

  /// The batch rebuilt (payloads replaced by input slots), or None after a mismatch.
  Value scan(const Value& v, const ir::Type& t) {
    Values top;
    top.reserve(1);
    scan(v, info(t.get()), top);
    return ok ? std::move(top[0]) : Value();
  }

private:
  // What the scan needs of one type node, the nodes it is made of linked in: found once per
  // node, not per value.
  struct TypeInfo {
    const ir::TypeNode* type = nullptr;
    ir::TypeKind kind = ir::TypeKind::Error;
    const ir::TypeDecl* adt = nullptr;         ///< Adt
    std::vector<std::vector<TypeInfo*>> ctors; ///< Adt: each constructor's field types
    std::vector<TypeInfo*> elems;              ///< Tuple: its elements; List: its element
    DType dtype = DType::F32;                  ///< Tensor
    Shape shape;                               ///< Tensor
    int32_t sig = -1;                          ///< Tensor: its signature id, once seen
  };
  PeBackend& be_;
  const ir::Module& m_;
  const interp::DimBindings& dims_;
  std::shared_ptr<NodePool> pool_;
  FragmentMemo* frags_;
  const bool hash_;
  bool whole_; ///< the top list's trees may be taken whole (cleared past the top list)
  std::vector<std::unique_ptr<TypeInfo>> infos_; ///< the few type nodes of the batch's type
  // What the value scanned last adds to its parent's skeleton (fold): its code (see mix2;
  // 0 for none), and its value or its skeleton.
  int last_code_ = 0;
  uint64_t last_v_ = 0;
  uint64_t last_h1_ = 0, last_h2_ = 0;
  bool last_known_ = false;

  void hmix(uint64_t v) {
    if (hash_)
      h = hash_mix(h, v);
  }

  // Checks v against the type, hashes it, and appends its rebuilt value to `out`.
  [[gnu::flatten]] void scan(const Value& v, TypeInfo& ti, Values& out) {
    ++count;
    hmix(static_cast<uint64_t>(v.kind()));
    switch (ti.kind) {
    case ir::TypeKind::Int:
      if (v.kind() != Value::Kind::Int)
        return fail();
      hmix(static_cast<uint64_t>(v.as_int()));
      last_code_ = 3, last_v_ = static_cast<uint64_t>(v.as_int());
      out.push_back(v);
      return;
    case ir::TypeKind::Bool:
      if (v.kind() != Value::Kind::Bool)
        return fail();
      hmix(static_cast<uint64_t>(v.as_bool()));
      last_code_ = 4, last_v_ = v.as_bool() ? 1 : 0;
      out.push_back(v);
      return;
    case ir::TypeKind::Tensor: {
      if (v.kind() != Value::Kind::Tensor || !v.as_tensor().defined())
        return fail();
      const Tensor& x = v.as_tensor();
      if (x.dtype() != ti.dtype || x.shape() != ti.shape)
        return fail();
      if (hash_)
        h = pe::mix_tensor_sig(h, x);
      if (ti.sig < 0)
        ti.sig = be_.sig_id(x);
      last_code_ = 2, last_v_ = static_cast<uint64_t>(ti.sig);
      out.push_back(be_.input(x, ti.sig));
      return;
    }
    case ir::TypeKind::Tuple: {
      if (v.kind() != Value::Kind::Tuple || v.items().size() != ti.elems.size())
        return fail();
      hmix(v.items().size());
      return node(v.items().data(), ti.elems.size(), ti.elems.data(), Value::Kind::Tuple, 0, out);
    }
    case ir::TypeKind::List: {
      if (v.kind() != Value::Kind::List)
        return fail();
      size_t n = v.list_size();
      hmix(n);
      return node(n ? &v.list_at(0) : nullptr, n, nullptr, Value::Kind::List, 0, out, ti.elems[0]);
    }
    case ir::TypeKind::Adt: {
      if (!ti.adt || v.kind() != Value::Kind::Adt || v.tag() < 0 ||
          static_cast<size_t>(v.tag()) >= ti.ctors.size())
        return fail();
      const auto& fields = ti.ctors[static_cast<size_t>(v.tag())];
      if (v.items().size() != fields.size())
        return fail();
      hmix(static_cast<uint64_t>(v.tag()));
      hmix(v.items().size());
      return node(v.items().data(), fields.size(), fields.data(), Value::Kind::Adt, v.tag(), out);
    }
    case ir::TypeKind::Func:
      if (v.kind() != Value::Kind::Closure)
        return fail();
      last_code_ = 0;
      out.push_back(v);
      return;
    default:
      return fail();
    }
  }

  // A Tuple, List or ADT node: its items xs[0, n) of types types[0, n) (a list's: all `same`),
  // rebuilt into a pool node.
  void node(const Value* xs, size_t n, TypeInfo* const* types, Value::Kind kind, int32_t tag,
            Values& out, TypeInfo* same = nullptr) {
    // Only the batch's own list (the first node scanned) holds trees that may be taken whole.
    const bool whole =
        whole_ && kind == Value::Kind::List && same != nullptr && same->kind == ir::TypeKind::Adt;
    whole_ = false;
    PoolNode& pn = pool_->take(n);
    pn.first_slot = static_cast<int32_t>(be_.num_inputs());
    Skeleton sk = open(kind, tag, n);
    if (n > 0 && !whole)
      prefetch_children(xs, n);
    for (size_t i = 0; i < n && ok; ++i) {
      if (whole) {
        if (!take_whole(xs[i], *same, pn.items))
          scan_and_keep(xs[i], *same, pn.items);
      } else {
        if (i + 1 < n)
          prefetch_items(xs[i + 1]);
        scan(xs[i], same ? *same : *types[i], pn.items);
      }
      if (ok)
        fold(sk);
    }
    close(pn, sk, kind, tag, out);
  }

  // A tree of the batch met before (FragmentMemo::trees), unchanged since (its items are the
  // same ones, still alive: values are immutable), of the same type: its payloads numbered as a
  // scan would number them, its skeleton, and placeholder items that nothing reads (only a
  // replayed call may take the tree: PeBackend::inline_begin). Without walking it.
  bool take_whole(const Value& v, TypeInfo& ti, Values& out) {
    if (v.kind() != Value::Kind::Adt)
      return false;
    auto it = frags_->trees.find(&v.items());
    if (it == frags_->trees.end())
      return false;
    const FragmentMemo::TreeFacts& t = it->second;
    if (t.alive.expired()) { // another tree now lives at that address
      frags_->trees.erase(it);
      return false;
    }
    if (t.type != ti.type || t.tag != v.tag())
      return false;
    PoolNode& pn = pool_->take(t.fields);
    pn.first_slot = static_cast<int32_t>(be_.num_inputs());
    be_.skip_inputs(t.slots);
    pn.slots = t.slots;
    pn.h1 = t.h1, pn.h2 = t.h2, pn.known = true, pn.lazy = true;
    pn.items.resize(t.fields);
    count += t.values;
    last_code_ = 1, last_h1_ = t.h1, last_h2_ = t.h2, last_known_ = true;
    out.push_back(Value::with_items(
        Value::Kind::Adt, t.tag,
        std::shared_ptr<const Values>(std::shared_ptr<const Values>(), &pn.items)));
    be_.note_lazy();
    return true;
  }

  // A tree scanned in full, and what a later batch needs to take it whole kept, while the
  // memo has room (past its bound it keeps nothing new, as for fragments).
  void scan_and_keep(const Value& v, TypeInfo& ti, Values& out) {
    const int32_t slot0 = static_cast<int32_t>(be_.num_inputs());
    const size_t count0 = count;
    scan(v, ti, out);
    if (!ok || v.kind() != Value::Kind::Adt || last_code_ != 1 || !last_known_ || frags_->full ||
        frags_->trees_off)
      return;
    // Batches of new trees (not a training set's kept examples) leave facts of trees that are
    // gone: swept whenever the table has doubled since the last sweep.
    if (frags_->trees.size() >= frags_->trees_swept_at) {
      std::erase_if(frags_->trees, [](const auto& e) { return e.second.alive.expired(); });
      frags_->trees_swept_at = std::max<size_t>(1024, 2 * frags_->trees.size());
    }
    frags_->trees.insert_or_assign(
        &v.items(),
        FragmentMemo::TreeFacts{v.items_owner(), ti.type, last_h1_, last_h2_, v.tag(),
                                static_cast<uint32_t>(v.items().size()),
                                static_cast<int32_t>(be_.num_inputs()) - slot0, count - count0});
  }

  // Skeletons are two independent 64-bit hashes of (kind, tag, items) with each item as
  // (code, value): code 1 a node's skeleton, 2 a payload's signature id, 3 Int, 4 Bool; a
  // closure leaves the node without one. Computed as the scan goes: no table to look up.
  // Kept in registers while a node's items are scanned, and stored once into its PoolNode:
  // reading back hashes just stored piecewise made the CPU wait for its store buffer to drain.
  struct Skeleton {
    uint64_t h1, h2;
    bool known;
  };
  static void mix2(Skeleton& s, uint64_t v) {
    s.h1 = hash_mix(s.h1, v);
    s.h2 = (s.h2 ^ v) * 0x9fb21c651e98df25ull;
    s.h2 ^= s.h2 >> 29;
  }

  Skeleton open(Value::Kind kind, int32_t tag, size_t n) const {
    Skeleton sk{0x6a09e667f3bcc909ull, 0xbb67ae8584caa73bull, frags_ != nullptr};
    if (frags_) {
      mix2(sk, static_cast<uint64_t>(kind));
      mix2(sk, static_cast<uint64_t>(tag));
      mix2(sk, n);
    }
    return sk;
  }

  // Folds the item scanned last into its node's skeleton.
  void fold(Skeleton& sk) const {
    if (!frags_)
      return;
    if (last_code_ == 1) {
      mix2(sk, 1);
      mix2(sk, last_h1_);
      mix2(sk, last_h2_);
      sk.known = sk.known && last_known_;
    } else if (last_code_ >= 2) {
      mix2(sk, static_cast<uint64_t>(last_code_));
      mix2(sk, last_v_);
    } else {
      sk.known = false;
    }
  }

  void close(PoolNode& pn, const Skeleton& sk, Value::Kind kind, int32_t tag, Values& out) {
    pn.slots = static_cast<int32_t>(be_.num_inputs()) - pn.first_slot;
    pn.h1 = sk.h1, pn.h2 = sk.h2, pn.known = sk.known;
    last_code_ = 1, last_h1_ = sk.h1, last_h2_ = sk.h2, last_known_ = sk.known;
    // Borrowed, not owned (NodePool): the pool outlives every Value of the batch.
    out.push_back(Value::with_items(
        kind, tag, std::shared_ptr<const Values>(std::shared_ptr<const Values>(), &pn.items)));
  }

  // The batch's nodes are scattered on the heap and reached through two dependent pointers
  // (a node's items vector, then its elements): asking for the children's vectors (and the
  // second cache line of each child, where a tensor's dtype is) before walking the first
  // child overlaps those misses with the work on the siblings; prefetch_items asks, one
  // sibling ahead, for the elements the next child's walk reads first.
  static void prefetch_children(const Value* xs, size_t n) {
    const char* p = reinterpret_cast<const char*>(xs);
    for (size_t o = 64; o < n * sizeof(Value); o += 64)
      __builtin_prefetch(p + o);
    for (size_t i = 0; i < n; ++i)
      if (xs[i].kind() == Value::Kind::Adt || xs[i].kind() == Value::Kind::Tuple)
        __builtin_prefetch(&xs[i].items());
  }
  static void prefetch_items(const Value& x) {
    if (x.kind() != Value::Kind::Adt && x.kind() != Value::Kind::Tuple)
      return;
    const Values& xs = x.items();
    const char* p = reinterpret_cast<const char*>(xs.data());
    for (size_t o = 0; o < xs.size() * sizeof(Value); o += 64)
      __builtin_prefetch(p + o);
  }

  void fail() { ok = false; }

  // The info of a type node, made (with the nodes it is made of) on first use.
  TypeInfo& info(const ir::TypeNode* t) {
    for (auto& i : infos_)
      if (i->type == t)
        return *i;
    TypeInfo& i = *infos_.emplace_back(std::make_unique<TypeInfo>());
    i.type = t;
    i.kind = t->kind;
    if (t->kind == ir::TypeKind::Adt) {
      i.adt = m_.adt(t->name);
      if (i.adt) {
        i.ctors.resize(i.adt->ctors.size());
        for (size_t c = 0; c < i.adt->ctors.size(); ++c)
          for (const auto& f : i.adt->ctors[c].fields)
            i.ctors[c].push_back(&info(f.type.get()));
      }
    } else if (t->kind == ir::TypeKind::Tuple || t->kind == ir::TypeKind::List) {
      for (const auto& e : t->elems)
        i.elems.push_back(&info(e.get()));
    } else if (t->kind == ir::TypeKind::Tensor) {
      i.dtype = t->elem == ir::Elem::F32 ? DType::F32 : DType::I32;
      i.shape = interp::concrete_shape(ir::Type(std::shared_ptr<const ir::TypeNode>(), t), dims_);
    }
    return i;
  }
};

// Whether `e` (in one function's frame) reads local `slot` only as an argument of a call that
// `ok(call, i)` accepts. A lambda inside is another frame: only its captures count.
template <class Ok> bool uses_only(const ir::Expr& e, int slot, const Ok& ok) {
  using ir::ExprKind;
  auto is_slot = [slot](const ir::Expr& x) {
    const auto* v = x->as<ir::Var>();
    return v != nullptr && v->ref.kind == ir::VarRef::Kind::Local && v->ref.index == slot;
  };
  auto all = [&](const std::vector<ir::Expr>& xs) {
    return std::all_of(xs.begin(), xs.end(),
                       [&](const ir::Expr& x) { return uses_only(x, slot, ok); });
  };
  switch (e->kind) {
  case ExprKind::IntLit:
  case ExprKind::FloatLit:
  case ExprKind::BoolLit:
    return true;
  case ExprKind::Var:
    return !is_slot(e);
  case ExprKind::Call: {
    const auto& c = e->cast<ir::Call>();
    if (!uses_only(c.callee, slot, ok))
      return false;
    for (size_t i = 0; i < c.args.size(); ++i)
      if (is_slot(c.args[i]) ? !ok(c, i) : !uses_only(c.args[i], slot, ok))
        return false;
    return true;
  }
  case ExprKind::Binary: {
    const auto& b = e->cast<ir::Binary>();
    return uses_only(b.lhs, slot, ok) && uses_only(b.rhs, slot, ok);
  }
  case ExprKind::Unary:
    return uses_only(e->cast<ir::Unary>().operand, slot, ok);
  case ExprKind::Tuple:
    return all(e->cast<ir::Tuple>().elems);
  case ExprKind::ListLit:
    return all(e->cast<ir::ListLit>().elems);
  case ExprKind::Proj:
    return uses_only(e->cast<ir::Proj>().tuple, slot, ok);
  case ExprKind::Let: {
    const auto& l = e->cast<ir::Let>();
    return uses_only(l.value, slot, ok) && uses_only(l.body, slot, ok);
  }
  case ExprKind::If: {
    const auto& i = e->cast<ir::If>();
    return uses_only(i.cond, slot, ok) && uses_only(i.then_e, slot, ok) &&
           uses_only(i.else_e, slot, ok);
  }
  case ExprKind::Match: {
    const auto& mt = e->cast<ir::Match>();
    if (!uses_only(mt.scrutinee, slot, ok))
      return false;
    return std::all_of(mt.arms.begin(), mt.arms.end(),
                       [&](const ir::MatchArm& a) { return uses_only(a.body, slot, ok); });
  }
  case ExprKind::Lambda: {
    const auto& l = e->cast<ir::Lambda>();
    return std::none_of(l.captures.begin(), l.captures.end(), [slot](const ir::VarRef& r) {
      return r.kind == ir::VarRef::Kind::Local && r.index == slot;
    });
  }
  }
  return false;
}

// Whether the entry hands the trees of its batch only to calls of global functions, so that a
// tree taken whole (BatchScan) is read by nothing but inline_begin, which replays the call or
// throws LazyTree before its body runs. Conservative: the batch must be used only as the list
// of `map(g, batch)` with g a global function, or a lambda of one parameter that passes it
// only as an argument of global functions' calls.
bool trees_taken_whole(const ir::FnDecl& entry) {
  if (entry.params.size() != 1 || entry.param_slots.size() != 1)
    return false;
  auto global_call = [](const ir::Call& c, size_t) {
    return c.ref.kind == ir::VarRef::Kind::Global;
  };
  auto each_tree_to_calls = [&](const ir::Expr& f) {
    if (const auto* v = f->as<ir::Var>())
      return v->ref.kind == ir::VarRef::Kind::Global;
    const auto* l = f->as<ir::Lambda>();
    return l != nullptr && l->param_slots.size() == 1 &&
           uses_only(l->body, l->param_slots[0], global_call);
  };
  return uses_only(entry.body, entry.param_slots[0], [&](const ir::Call& c, size_t i) {
    return c.ref.kind == ir::VarRef::Kind::Builtin &&
           c.ref.index == static_cast<int>(types::Builtin::Map) && i == 1 && c.args.size() == 2 &&
           each_tree_to_calls(c.args[0]);
  });
}

} // namespace pejit::specializer::pe
