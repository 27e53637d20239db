// The partial evaluator's entry point (one walk over the batch, then the shared evaluator
// over PeBackend, specializer/pe_backend.h) and the skeleton hash. See the design note in
// partial_eval.h; fragments, the memo of inlined calls, have theirs here.
//
// Design note: fragments (polyvariant specialization of inlined calls; pe_backend.h,
// pe_fragments.cpp, fragments.h).
// - What: a call of a function that is not a template (a tree encoder, a loss over a subtree)
//   is evaluated inline; the instances, constants and nested calls it produced are kept as a
//   fragment (specializer/fragments.h) under the key (function, its Int/Bool arguments, the
//   skeleton of each structured argument, the signature id of each tensor argument).
//   The same call later, on a node of any batch with that key, is replayed: its instances are
//   appended with instance numbers, input slots, constants and tensor arguments renumbered, and
//   its result is rebuilt, without running the evaluator. SST subtrees repeat heavily (every
//   leaf, most small subtrees), so most of a shuffled batch is replayed.
// - Why it is exact: a call's evaluation reads only its arguments and the module (no globals
//   but parameters, no mutation, no closures among the arguments), and of its arguments the
//   partial evaluator inspects only structure (tags, Int/Bool fields, list lengths, payload
//   signatures: the skeleton), never payload contents (they are residual: control flow on
//   them is a refusal). The module state and dimension binding are the memo's stamp (PeMemo),
//   so a changed definition drops every fragment. A replay appends exactly the instances, in
//   the same order, the evaluation would have, spends the same fuel, and is taken only where
//   the evaluation would have stayed within the fuel and depth bounds; otherwise the call is
//   evaluated (and then refuses or fails at the same place as without the memo).
// - When it applies (else the call is evaluated as before): a replay needs every structured
//   argument to be a Tuple or ADT node of the batch itself (a PoolNode: its payloads are the
//   consecutive input slots BatchScan gave them), every tensor argument a residual that is not
//   a pending sum (a constant could steer control flow; a pending sum would be materialized
//   inside). Recording also needs the arguments to be told apart unambiguously: structured
//   arguments over disjoint payloads, tensor arguments that are distinct instance results or
//   input slots outside them. A result holding a closure is not recorded (nor what a refusal or
//   an error interrupted); such a key is remembered as not memoizable.
// - Nested calls: a call met while recording becomes a Call step to its own fragment, and a
//   pending sum in a result names the pending sums of nested calls it contains (SumOf) rather
//   than copying their terms, so a fragment holds only its own work: memory is linear in the
//   distinct subtrees seen, and a replay rebuilds a tree's loss sum in O(1) per node. Terms
//   stay in the order the evaluation gave them, so a SumN made later has the same terms.
//   A flat callee (a few instances and nothing else: the encoder on a leaf) is the exception:
//   its instances are copied in as the caller's own steps, so that a replay does not reach
//   every leaf through its own record (the memory is a few steps per leaf).
// - Skeletons are 128 bits of two independent hashes computed bottom-up as BatchScan walks the
//   batch (no table lookup per node): exact up to a 2^-128-per-pair collision, far below the
//   64-bit skeleton key that already identifies a batch's plan.
// - Bounds: PeOptions::fragment_memo_bytes; past it the memo is full: it records nothing more
//   and replays what it holds, until a window of batches gets less than a quarter of its
//   instances from replays (the data moved on); then it is dropped before the next batch
//   (FragmentMemo::stale).
// - Not handled: List arguments at the top of a call (list tails are views; a recursion over a
//   list is evaluated), Int/Bool-only results are memoized but gain little.
//
// Trees taken whole (BatchScan::take_whole). A training set's examples are encoded once and
// come back batch after batch as the same values, whose calls replay. The scan of such a tree
// would walk every node (scattered on the heap, mostly out of cache) to rebuild what only its
// root's replay reads: the root's skeleton and its range of input slots. So the memo keeps,
// per tree of a batch's list scanned in full, that skeleton, its payload and value counts,
// its constructor and type (FragmentMemo::trees, by the address of its items, with a weak
// reference that tells whether that address is still the tree: values are immutable, so a
// live tree is unchanged). A later batch takes such a tree whole: its payloads are numbered as
// the scan would number them (the same slots, in the same order), its values counted for the
// fuel, and its node gets placeholder items that nothing may read. That holds because:
// - the entry hands each tree only to calls of global functions (trees_taken_whole, checked
//   on the entry's code: `map(g, batch)`, or a lambda passing its tree only as a call's
//   argument), so the only reader of a tree is inline_begin;
// - inline_begin replays the call (a replay reads the skeleton and the slots, never the
//   items) or, where it would not, throws LazyTree before the body runs: the batch is then
//   evaluated again with every tree scanned, and this memo takes no tree whole any more.
// Only for the engine's partial evaluations (the skeleton given, no payload copies kept).
#include "specializer/partial_eval.h"

#include "specializer/pe_backend.h"
#include "src/types/builtins.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

namespace pejit::specializer {

using interp::Value;
using interp::Values;
using pe::flatten_type;
using pe::NodePool;
using pe::PeBackend;
using pe::PoolNode;
using pe::Refused;
using pe::sig_of;
using pe::tensors_only;
using util::hash_mix;

namespace {

uint64_t hash_str(uint64_t h, const std::string& s) {
  for (char c : s)
    h = hash_mix(h, static_cast<uint8_t>(c));
  return hash_mix(h, s.size());
}

void hash_value(uint64_t& h, const Value& v, size_t& count) {
  ++count;
  h = hash_mix(h, static_cast<uint64_t>(v.kind()));
  switch (v.kind()) {
  case Value::Kind::Int:
  case Value::Kind::Bool:
    h = hash_mix(h, static_cast<uint64_t>(v.kind() == Value::Kind::Int ? v.as_int() : v.as_bool()));
    break;
  case Value::Kind::Tensor: {
    h = pe::mix_tensor_sig(h, v.as_tensor());
    break;
  }
  case Value::Kind::Tuple:
  case Value::Kind::Adt:
    if (v.kind() == Value::Kind::Adt)
      h = hash_mix(h, static_cast<uint64_t>(v.tag()));
    h = hash_mix(h, v.items().size());
    for (const auto& x : v.items())
      hash_value(h, x, count);
    break;
  case Value::Kind::List:
    h = hash_mix(h, v.list_size());
    for (size_t i = 0; i < v.list_size(); ++i)
      hash_value(h, v.list_at(i), count);
    break;
  case Value::Kind::Closure:
  case Value::Kind::None:
    break;
  }
}

Value residualize_batch(PeBackend& be, const Value& v) {
  switch (v.kind()) {
  case Value::Kind::Tensor:
    return be.input(v.as_tensor());
  case Value::Kind::Tuple: {
    Values xs;
    for (const auto& x : v.items())
      xs.push_back(residualize_batch(be, x));
    return Value::tuple(std::move(xs));
  }
  case Value::Kind::Adt: {
    Values xs;
    for (const auto& x : v.items())
      xs.push_back(residualize_batch(be, x));
    return Value::adt(v.tag(), std::move(xs));
  }
  case Value::Kind::List: {
    Values xs;
    for (size_t i = 0; i < v.list_size(); ++i)
      xs.push_back(residualize_batch(be, v.list_at(i)));
    return Value::list(std::move(xs));
  }
  default:
    return v;
  }
}

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
  size_t whole_trees = 0; ///< trees taken whole

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
    ++whole_trees;
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

} // namespace

uint64_t skeleton_hash(const Value& batch) {
  uint64_t h = 0x243f6a8885a308d3ull;
  size_t count = 0;
  hash_value(h, batch, count);
  return h;
}

bool is_template_eligible(const ir::FnDecl& f) {
  return interp::template_eligible(f); // the generic path's random contexts use the same rule
}

std::vector<Template> static_templates(const ir::Module& m, const interp::DimBindings& dims) {
  std::vector<Template> out;
  const std::vector<bool> random_ctx = interp::random_context_functions(m);
  for (size_t i = 0; i < m.fns().size(); ++i) {
    const ir::FnDecl& f = *m.fns()[i];
    if (!is_template_eligible(f))
      continue;
    bool all_tensors = true;
    for (const auto& p : f.params)
      all_tensors = all_tensors && p.type->kind == ir::TypeKind::Tensor;
    if (!all_tensors)
      continue;
    Template t; // as PeBackend::call builds it for a call with these argument shapes
    t.kind = Template::Kind::Function;
    t.fn = static_cast<int>(i);
    t.name = f.name;
    for (const auto& p : f.params)
      t.args.push_back(sig_of(p.type, dims));
    std::vector<ir::Type> outs;
    flatten_type(f.ret, outs);
    for (const auto& o : outs)
      t.results.push_back(sig_of(o, dims));
    if (random_ctx[i])
      t.args.push_back(random_key_sig());
    out.push_back(std::move(t));
  }
  return out;
}

namespace {
PeResult partially_evaluate_here(const ir::Module& m, const interp::DimBindings& dims,
                                 const std::string& entry, const Value& batch,
                                 TemplateTable& templates, const PeOptions& opt,
                                 const interp::CallLimit& limit, bool whole);

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
} // namespace

// The batch's depth is measured first (without recursing) unless the caller gives it: the scan, the
// evaluation and the walks after it run where the native stack has room for it
// (interp/call_limit.h).
PeResult partially_evaluate(const ir::Module& m, const interp::DimBindings& dims,
                            const std::string& entry, const Value& batch, TemplateTable& templates,
                            const PeOptions& opt) {
  const size_t depth =
      opt.depth != PeOptions::kUnknownDepth ? opt.depth : interp::nesting_depth(batch);
  interp::CallLimit limit = interp::CallLimit::of(opt.max_depth, depth, opt.calls_per_level);
  return interp::with_call_limit(limit, [&](const interp::CallLimit& l) {
    try {
      return partially_evaluate_here(m, dims, entry, batch, templates, opt, l, true);
    } catch (const pe::LazyTree&) {
      // A tree taken whole met a call that could not replay: evaluated again, every tree
      // scanned, and none taken whole with this memo any more.
      if (FragmentMemo* fm = templates.pe_memo().fragments.p.get()) {
        fm->trees_off = true;
        fm->trees.clear();
      }
      return partially_evaluate_here(m, dims, entry, batch, templates, opt, l, false);
    }
  });
}

namespace {
PeResult partially_evaluate_here(const ir::Module& m, const interp::DimBindings& dims,
                                 const std::string& entry, const Value& batch,
                                 TemplateTable& templates, const PeOptions& opt,
                                 const interp::CallLimit& limit, bool whole) {
  ops::register_kernels();
  const ir::FnDecl* f = m.fn(entry);
  if (!f || !f->is_entry)
    throw Error("no entry named '" + entry + "' in the module");
  if (f->params.size() != 1)
    throw Error("entry '" + entry + "' must take one argument (the batch) to be specialized");

  // The memo is valid for one module state and dimension binding.
  uint64_t dims_h = 0;
  for (const auto& [name, size] : dims)
    dims_h = hash_mix(hash_str(dims_h, name), static_cast<uint64_t>(size));
  uint64_t stamp = hash_mix(
      hash_mix(hash_mix(0x5bd1e995ull, reinterpret_cast<uintptr_t>(&m)), m.generation()), dims_h);
  PeMemo& memo = templates.pe_memo();
  if (!memo.valid || memo.stamp != stamp)
    memo.reset(stamp);
  uint64_t cone = 0;
  bool have_cone = false;
  for (const auto& [e, v] : memo.cones)
    if (e == entry)
      cone = v, have_cone = true;
  if (!have_cone) {
    cone = m.cone_version(entry); // builds the dependency graph: once per module state
    memo.cones.emplace_back(entry, cone);
  }

  // Fragments, within their memory bound: full past it (nothing more recorded), dropped whole
  // before this batch once stale.
  FragmentMemo* frags = nullptr;
  if (opt.fragment_memo_bytes > 0) {
    auto& fp = memo.fragments.p;
    if (!fp || fp->stale)
      fp = std::make_shared<FragmentMemo>();
    if (!fp->full && fp->bytes() > opt.fragment_memo_bytes)
      fp->full = true;
    frags = fp.get();
    ++frags->run;
  }

  PeResult out;
  std::shared_ptr<NodePool> pool = NodePool::of(memo);
  NodePool::Release release{*pool}; // after every Value below
  std::optional<PeBackend> be(std::in_place, m, dims, templates, out.residual);
  be->set_keep_inputs(opt.keep_inputs);
  be->reserve();
  if (frags)
    be->set_fragments(frags, pool.get());
  const auto scan_start = std::chrono::steady_clock::now();
  // Trees met before are taken whole where nothing but a replayed call can read them.
  whole = whole && frags != nullptr && opt.skeleton.has_value() && !opt.keep_inputs &&
          !frags->trees_off && trees_taken_whole(*f);
  BatchScan scan(*be, m, dims, pool, frags, !opt.skeleton.has_value(), whole);
  Value arg = scan.scan(batch, f->params[0].type);
  out.whole_trees = scan.whole_trees;
  out.scan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - scan_start).count();
  uint64_t h = opt.skeleton ? *opt.skeleton : scan.h;
  size_t values = scan.count;
  if (!scan.ok) {
    interp::check_value(batch, f->params[0].type, m, dims, f->params[0].name); // throws
    // The batch is fine after all: the separate walks.
    out.residual = Residual{};
    be.emplace(m, dims, templates, out.residual);
    be->set_keep_inputs(opt.keep_inputs);
    be->reserve();
    if (frags)
      be->set_fragments(frags, pool.get());
    arg = residualize_batch(*be, batch);
    h = skeleton_hash(batch);
    values = 0;
    uint64_t tmp = 0;
    hash_value(tmp, batch, values);
  }
  h = hash_str(h, entry);
  h = hash_mix(h, cone);
  for (const auto& [name, size] : dims)
    h = hash_mix(hash_str(h, name), static_cast<uint64_t>(size));
  out.residual.key = h;

  be->set_fuel(PeOptions::kFuelBase + opt.fuel_per_value * values);
  try {
    interp::Evaluator<PeBackend> ev(m, *be, limit);
    Value result = ev.call_entry(*f, {arg});
    be->collect_outputs(result);
    be->update_hints();
    out.ok = true;
  } catch (const Refused& r) {
    out.ok = false;
    out.where = r.where;
    out.reason = r.reason;
    out.residual.instances.clear();
    out.residual.arg_pool.clear();
    out.residual.sum_sigs.clear();
  }
  out.residual.fuel_used = be->fuel_used();
  out.replayed = be->replayed();
  out.recorded = be->recorded();
  if (frags != nullptr && frags->full)
    frags->count_full_run(out.residual.instances.size(), be->replayed_instances());

  return out;
}
} // namespace

} // namespace pejit::specializer
