// The partial evaluator's backend for the shared evaluator (interp/evaluator.h). Internal to
// partial_eval.cpp and pe_fragments.cpp; the batch's rebuilt structure it reads is in
// node_pool.h.
//
// The design note of fragments (the memo of inlined calls) is at the top of partial_eval.cpp.
#pragma once

#include "specializer/fragments.h"
#include "specializer/node_pool.h"
#include "specializer/partial_eval.h"
#include "src/interp/evaluator.h"
#include "src/interp/random.h"
#include "src/ops/emitter.h"
#include "src/util/hash_mix.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <unordered_map>

namespace pejit::specializer::pe {

using interp::Value;
using interp::Values;

struct Refused {
  Span where;
  std::string reason;
};

/// Thrown where a call that cannot be replayed is handed a tree that BatchScan took whole
/// (PoolNode::lazy), before anything reads the tree's placeholder items: partial evaluation
/// then starts again with every tree scanned (partial_eval.cpp, "Trees taken whole").
struct LazyTree {};

using util::hash_mix;

/// What a tensor adds to a batch's skeleton hash: its dtype and shape, never its contents
/// (the one rule of skeleton_hash, the fused batch walk and the argument scan).
inline uint64_t mix_tensor_sig(uint64_t h, const Tensor& t) {
  h = hash_mix(h, static_cast<uint64_t>(t.dtype()));
  for (auto d : t.shape().dims())
    h = hash_mix(h, static_cast<uint64_t>(d));
  return hash_mix(h, t.rank());
}

inline TensorSig sig_of(const ir::Type& t, const interp::DimBindings& dims) {
  TensorSig s;
  s.dtype = t->elem == ir::Elem::F32 ? DType::F32 : DType::I32;
  auto sh = interp::concrete_shape(t, dims);
  auto d = sh.dims();
  s.dims = SigDims(d.begin(), d.end());
  return s;
}

inline ir::Type type_of(const TensorSig& s) {
  std::vector<int64_t> d = s.dims.vec();
  return s.dtype == DType::F32 ? ir::t_f32(d) : ir::t_i32(d);
}

inline bool tensors_only(const ir::Type& t) {
  if (t->kind == ir::TypeKind::Tensor)
    return true;
  if (t->kind != ir::TypeKind::Tuple)
    return false;
  for (const auto& e : t->elems)
    if (!tensors_only(e))
      return false;
  return true;
}

inline void flatten_type(const ir::Type& t, std::vector<ir::Type>& out) {
  if (t->kind == ir::TypeKind::Tensor)
    out.push_back(t);
  else
    for (const auto& e : t->elems)
      flatten_type(e, out);
}

// The partial evaluator's backend: residual tensors are Value::tensor(undefined, rid), where
// rid indexes rvals_; known constants are ordinary defined tensors.
//
// Cost model (planning must stay far cheaper than a generic step): signatures are small
// ids interned in the TemplateTable's PeMemo, and a call or op whose (callee, statics,
// argument signatures) was seen before resolves to its template with one hash lookup. Pending
// sums are ropes (SumPart trees in one arena), flattened once into a SumN instance's terms
// when the sum is used, so `ll + lr + loss` up a tree costs O(1) per `+`, not a copy of the
// subtree's terms.
class PeBackend {
public:
  PeBackend(const ir::Module& m, const interp::DimBindings& dims, TemplateTable& templates,
            Residual& res)
      : m_(m), dims_(dims), templates_(templates), memo_(templates.pe_memo()), res_(res),
        param_vals_(m.params().size()), eligible_(m.fns().size(), -1) {
    Scratch& sc = scratch();
    if (!sc.in_use) { // a second backend on this thread (none today) would grow its own
      sc.in_use = owns_scratch_ = true;
      exchange(sc);
    }
  }
  ~PeBackend() {
    if (!owns_scratch_)
      return;
    Scratch& sc = scratch();
    exchange(sc);
    sc.clear();
    sc.in_use = false;
  }
  PeBackend(const PeBackend&) = delete;
  PeBackend& operator=(const PeBackend&) = delete;

  void set_fuel(size_t fuel) { fuel_ = fuel; }

  /// Turns on fragments (see the design note): `frags` keeps them, `pool` is the batch's
  /// rebuilt structure.
  void set_fragments(FragmentMemo* frags, const NodePool* pool) {
    frags_ = frags;
    pool_ = pool;
    memo_fn_.assign(m_.fns().size(), -1);
  }
  size_t num_inputs() const { return static_cast<size_t>(res_.num_inputs); }
  /// Whether input() keeps each payload tensor in Residual::inputs (PeOptions::keep_inputs).
  void set_keep_inputs(bool keep) { keep_inputs_ = keep; }
  /// Numbers the `n` payloads of a tree taken whole (BatchScan), which Residual::inputs does
  /// not hold (keep_inputs off): the next n input slots.
  void skip_inputs(int32_t n) {
    PEJIT_CHECK(!keep_inputs_) << "skip_inputs with keep_inputs on";
    res_.num_inputs += n;
  }
  /// A tree of this batch was taken whole: inline_begin checks its arguments from now on.
  void note_lazy() { ++lazy_nodes_; }
  /// Trees of this batch taken whole so far.
  size_t lazy_nodes() const { return lazy_nodes_; }
  size_t replayed() const { return replayed_; }
  /// Instances appended by the replays of calls (nested calls' included).
  size_t replayed_instances() const { return replayed_instances_; }
  size_t recorded() const { return recorded_; }
  int32_t sig_of_value(const Value& v) { return sig(v); }

  // A fresh input slot for a payload tensor of the batch (of signature sig, if known).
  Value input(const Tensor& t, int32_t sig = -1) {
    int32_t slot = res_.num_inputs++;
    if (keep_inputs_)
      res_.inputs.push_back(t);
    return residual(Ref{Ref::Kind::Input, slot, 0}, sig >= 0 ? sig : sig_id(t));
  }

  // Reserves for a batch like the largest seen so far (PeMemo's hints), so that the residual's
  // vectors do not grow by copying.
  void reserve() {
    res_.instances.reserve(memo_.hint_instances);
    res_.arg_pool.reserve(memo_.hint_args);
    if (keep_inputs_)
      res_.inputs.reserve(memo_.hint_inputs);
    rvals_.reserve(memo_.hint_rvals);
    parts_.reserve(memo_.hint_parts);
  }
  void update_hints() {
    memo_.hint_instances = std::max(memo_.hint_instances, res_.instances.size());
    memo_.hint_args = std::max(memo_.hint_args, res_.arg_pool.size());
    memo_.hint_inputs = std::max(memo_.hint_inputs, num_inputs());
    memo_.hint_rvals = std::max(memo_.hint_rvals, rvals_.size());
    memo_.hint_parts = std::max(memo_.hint_parts, parts_.size());
  }

  // A random op's key: a fresh input slot that a plan's runner fills with the key of
  // (context, index) at this step (Residual::random_slots). The partial evaluator never opens a
  // context itself (a function that opens one is always a template), so every draw here is
  // alone in a fresh context, as on the generic path outside any template.
  const interp::DimBindings& dims() const { return dims_; }

  Value random_key(const Span&, int64_t& j) {
    auto [ctx, index] = cursor_.draw();
    j = 0;
    return random_input(ctx, index);
  }
  Value random_input(uint32_t ctx, uint32_t index) {
    int32_t slot = res_.num_inputs++;
    if (keep_inputs_)
      res_.inputs.push_back(interp::random_key_tensor(ctx, index, {}));
    res_.random_slots.push_back(RandomSlot{slot, ctx, index});
    return residual(Ref{Ref::Kind::Input, slot, 0}, memo_sig(random_key_sig()));
  }
  // Per function: whether it draws random numbers / opens a random context (interp/random.h),
  // kept in the memo for the module state.
  const std::vector<bool>& random_fns() {
    if (memo_.random_fns.size() != m_.fns().size()) {
      memo_.random_fns = interp::random_functions(m_);
      memo_.random_ctx = interp::random_context_functions(m_);
    }
    return memo_.random_fns;
  }
  const std::vector<bool>& random_ctx() {
    random_fns();
    return memo_.random_ctx;
  }

  Value param(int i) {
    Value& v = param_vals_[static_cast<size_t>(i)];
    if (v.kind() == Value::Kind::None)
      v = residual(Ref{Ref::Kind::Param, i, 0},
                   memo_sig(sig_of(m_.params()[static_cast<size_t>(i)]->type, dims_)));
    return v;
  }

  Value op(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
           Values* multi = nullptr);
  std::optional<Value> call(const ir::FnDecl& f, int fn_index, const Values& args, const Span& s);

  // As call, for a function whose result is a flat tuple of tensors: the elements into `out`
  // (the evaluator's `let (a, b) = f(...)`, without building the tuple).
  bool call_flat(const ir::FnDecl& f, int fn_index, const Values& args, const Span& s, Values& out);

  // Appends a template call's instance and returns its memo entry; -1 (and nothing appended)
  // when f is not template-eligible.
  int32_t call_instance(const ir::FnDecl& f, int fn_index, const Values& args, const Span& s);
  Value sum_list(const Value& xs, const ir::Type& type, const Span& s);

  Value to_int(const Value& v, const Span& s) {
    if (!is_const(v))
      throw Refused{s, "to_int of a dynamic tensor: control flow on a dynamic value"};
    const Tensor& t = v.as_tensor();
    return Value::integer(t.dtype() == DType::I32 ? t.item_i32()
                                                  : static_cast<int64_t>(t.item_f32()));
  }

  Value to_bool(const Value& v, const Span& s) {
    if (!is_const(v))
      throw Refused{s, "to_bool of a dynamic tensor: control flow on a dynamic value"};
    const Tensor& t = v.as_tensor();
    return Value::boolean(t.dtype() == DType::I32 ? t.item_i32() != 0 : t.item_f32() != 0.0f);
  }

  /// The entry's result, flattened into refs (sums materialized, constants interned).
  /// Also records the result's structure (Residual::result_shape).
  void collect_outputs(const Value& v);

  size_t fuel_used() const { return used_; }

  int32_t sig_id(const Tensor& t) { return memo_.sig_id(t.dtype(), t.shape().dims()); }

  // Fragments (see the design note): the evaluator's memo of inlined calls.

  /// Replays the call if its fragment is known (kInlineReplayed), else starts recording it
  /// (a token) where it can be (else -1). Throws LazyTree where it does not replay a call
  /// handed a tree taken whole.
  int32_t inline_begin(const ir::FnDecl& f, int fn_index, const Values& args, int depth_left,
                       Values& out, bool flat) {
    const int32_t r = inline_memo(f, fn_index, args, depth_left, out, flat);
    if (lazy_nodes_ > 0 && r != interp::kInlineReplayed && takes_lazy(args))
      throw LazyTree{};
    return r;
  }

  /// Ends the innermost recording: its fragment, or the key marked not memoizable.
  void inline_end(int32_t token, const Value* results, size_t n, bool flat, int depth);

private:
  struct RVal {
    Ref ref;
    int32_t sig;      ///< id in memo_.sigs
    int32_t sum = -1; ///< >= 0: a symbolic sum not yet materialized (its SumPart)
  };
  // A pending sum's terms, in order: a leaf (l == -1: the term `leaf`), a range of terms_
  // (l == -2: terms_[r, r + leaf.index), a replayed fragment's), or the terms of l then r.
  // Parts are immutable, so a sum that used another still pending sum keeps its terms even if
  // that one is materialized later.
  struct SumPart {
    int32_t l = -1, r = -1;
    Ref leaf;
    /// Set when these are the terms of pending sum # `tag` of a fragment's result, that
    /// fragment replayed or recorded as the Call raw step with this uid (see describe_sum).
    int64_t origin = -1;
    int32_t tag = 0;
  };

  const ir::Module& m_;
  const interp::DimBindings& dims_;
  TemplateTable& templates_;
  PeMemo& memo_;
  Residual& res_;
  size_t fuel_ = 0;
  size_t used_ = 0;
  interp::RandomCursor cursor_;
  bool keep_inputs_ = true;
  std::vector<RVal> rvals_;
  std::vector<SumPart> parts_;
  std::vector<Value> param_vals_; ///< None until first used
  std::vector<int8_t> eligible_;  ///< per function: -1 unknown, else is_template_eligible
  std::unordered_map<std::string, int32_t> const_ids_;
  std::vector<int64_t> key_;   ///< scratch: the specialization key being looked up
  std::vector<int32_t> stack_; ///< scratch: flattening a sum

  // Fragments (see the design note); frags_ is null when they are off.
  // A call's argument as a replay or a recording sees it: a tensor argument's reference, or a
  // structured argument's first input slot and number of slots.
  struct FrameArg {
    Ref ref;
    int32_t slots = 0;
    bool structured = false;
  };
  // What a recording saw, in order: an instance appended (id: its index; sig: a SumN's
  // signature), a constant used (id: its index in res_.consts), a nested call replayed or
  // recorded (id: its fragment; sig: its first instance; its arguments are
  // frames_[first, first + count)).
  struct RawStep {
    FragmentMemo::Step::Kind kind;
    int32_t id;
    int32_t sig;
    uint32_t first, count;
    int64_t uid = -1; ///< Call: a number no other Call step of this run has
  };
  struct Rec {
    int32_t frag;
    uint32_t i0;      ///< its first instance
    size_t used0;     ///< fuel used before it
    size_t first_raw; ///< its steps: raw_[first_raw, ...)
    size_t frame;     ///< its arguments: frames_[frame, frame + num_frame)
    uint32_t num_frame;
  };
  FragmentMemo* frags_ = nullptr;
  const NodePool* pool_ = nullptr;
  size_t lazy_nodes_ = 0;       ///< trees of this batch taken whole (note_lazy)
  std::vector<int8_t> memo_fn_; ///< per function: -1 unknown, else memo_candidate
  std::vector<int64_t> fkey_;   ///< scratch: a fragment's key
  std::vector<FrameArg> frames_;
  std::vector<RawStep> raw_;
  std::vector<Rec> recs_;             ///< recordings in progress, innermost last
  std::vector<int32_t> rconsts_;      ///< replay: res_.consts index of each fragment constant
  std::vector<int32_t> local_consts_; ///< recording: the same, by local constant #
  std::vector<std::pair<int32_t, int32_t>> sum_ids_; ///< recording: rval -> distinct sum #
  std::vector<int32_t> sums_built_;                  ///< replay: distinct sum # -> its rval
  std::vector<Ref> terms_; ///< replayed pending sums' terms (SumPart l == -2)
  bool replaying_ = false;
  size_t sums0_ = 0; ///< replay_call: where the replayed fragment's sums are in rsums_
  int64_t call_uids_ = 0;
  size_t replayed_ = 0, recorded_ = 0, replayed_instances_ = 0;
  std::vector<int32_t> rsums_; ///< replay: the result sums' parts of fragments replayed
  std::vector<size_t> rcalls_; ///< replay: per nested call, where its sums are in rsums_
  std::vector<int32_t> sum_tmp_;
  std::vector<int64_t> call_of_; ///< recording: the uids of its Call steps, by call #

  // The working vectors above, kept per thread and reused from batch to batch (as make_plan
  // keeps its own): a batch then allocates only what its residual keeps, and writes to memory
  // that the last batch left in the cache rather than to fresh heap.
  struct Scratch {
    bool in_use = false;
    std::vector<RVal> rvals;
    std::vector<SumPart> parts;
    std::vector<int64_t> key, fkey, call_of;
    std::vector<int32_t> stack, rconsts, local_consts, sums_built, rsums, sum_tmp;
    std::vector<FrameArg> frames;
    std::vector<RawStep> raw;
    std::vector<Rec> recs;
    std::vector<std::pair<int32_t, int32_t>> sum_ids;
    std::vector<Ref> terms;
    std::vector<size_t> rcalls;
    void clear() {
      rvals.clear(), parts.clear(), key.clear(), fkey.clear(), call_of.clear(), stack.clear();
      rconsts.clear(), local_consts.clear(), sums_built.clear(), rsums.clear(), sum_tmp.clear();
      frames.clear(), raw.clear(), recs.clear(), sum_ids.clear(), terms.clear(), rcalls.clear();
    }
  };
  bool owns_scratch_ = false;
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }
  void exchange(Scratch& s) {
    rvals_.swap(s.rvals), parts_.swap(s.parts), key_.swap(s.key), fkey_.swap(s.fkey);
    call_of_.swap(s.call_of), stack_.swap(s.stack), rconsts_.swap(s.rconsts);
    local_consts_.swap(s.local_consts), sums_built_.swap(s.sums_built), rsums_.swap(s.rsums);
    sum_tmp_.swap(s.sum_tmp), frames_.swap(s.frames), raw_.swap(s.raw), recs_.swap(s.recs);
    sum_ids_.swap(s.sum_ids), terms_.swap(s.terms), rcalls_.swap(s.rcalls);
  }

  static bool memo_candidate(const ir::FnDecl& f) {
    if (f.is_entry)
      return false;
    for (const auto& p : f.params) {
      auto k = p.type->kind;
      if (k != ir::TypeKind::Int && k != ir::TypeKind::Bool && k != ir::TypeKind::Tensor &&
          k != ir::TypeKind::Adt && k != ir::TypeKind::Tuple)
        return false;
    }
    return true;
  }

  int32_t inline_memo(const ir::FnDecl& f, int fn_index, const Values& args, int depth_left,
                      Values& out, bool flat);
  bool takes_lazy(const Values& args) const {
    for (const Value& a : args)
      if (a.kind() == Value::Kind::Adt || a.kind() == Value::Kind::Tuple)
        if (const PoolNode* p = pool_->find(&a.items()); p != nullptr && p->lazy)
          return true;
    return false;
  }
  int32_t drop_frame(size_t frame) {
    frames_.resize(frame);
    return -1;
  }

  // Whether every reference the call's evaluation can see names one argument: structured
  // arguments over disjoint slots, tensor arguments distinct instance results or input slots
  // outside them (a parameter or a shared reference could be named two ways).
  bool recordable(size_t frame) const;

  // A reference seen while recording r, relative to r's place and arguments.
  bool local(const Ref& a, const Rec& r, LocalRef& out) const;

  // r's raw steps as fragment steps (appended to the memo); false if a reference names
  // nothing the fragment can be replayed with.
  bool convert_steps(const Rec& r);
  // Instance `index` of the residual as an Inst step of r (its arguments appended to the
  // memo's references); false as convert_steps.
  bool convert_inst(const Rec& r, int32_t index, int32_t sum_sig, FragmentMemo::Step& st);

  // Whether a nested call of fragment `frag` is recorded as the callee's instances rather than
  // as a Call step: a callee of a few instances and nothing else (no nested calls, constants
  // or pending sums in its result, such as a tree encoder on a leaf), which a replay would
  // otherwise reach through its own record, steps and references. Its instances are the same
  // either way; a SumOf counts only the Call steps that remain.
  static constexpr uint32_t kInlineSteps = 8;
  bool inlined(int32_t frag) const;

  static bool within(const FrameArg& outer, const FrameArg& inner) {
    return inner.ref.index >= outer.ref.index &&
           inner.ref.index + inner.slots <= outer.ref.index + outer.slots;
  }

  // Appends the description of a result value to the memo; false for what a fragment cannot
  // rebuild (a closure).
  bool describe(const Value& v, const Rec& r);
  bool describe_sum(int32_t part, const Rec& r);
  void build_sums(const FragmentMemo::Fragment& fr, uint32_t i0, size_t frame, size_t c0,
                  size_t calls0);
  void tag_sums(size_t sums0, uint32_t n, int64_t uid) {
    for (uint32_t k = 0; k < n; ++k) {
      SumPart& p = parts_[static_cast<size_t>(rsums_[sums0 + k])];
      p.origin = uid;
      p.tag = static_cast<int32_t>(k);
    }
  }

  // A fragment's reference where it is replayed (first instance i0, arguments at frames_[frame],
  // constants at rconsts_[c0]). Inline: a replay resolves every argument of every instance.
  Ref resolve(const LocalRef& l, uint32_t i0, size_t frame, size_t c0) const {
    if (l.kind == LocalRef::Kind::Inst)
      return Ref{Ref::Kind::Inst, static_cast<int32_t>(i0) + l.index, l.aux};
    if (l.kind == LocalRef::Kind::Slot)
      return Ref{Ref::Kind::Input,
                 l.aux < 0 ? 0 : frames_[frame + static_cast<size_t>(l.aux)].ref.index + l.index,
                 0};
    if (l.kind == LocalRef::Kind::Param)
      return Ref{Ref::Kind::Param, l.index, 0};
    if (l.kind == LocalRef::Kind::Const)
      return Ref{Ref::Kind::Const, rconsts_[c0 + static_cast<size_t>(l.index)], 0};
    return frames_[frame + static_cast<size_t>(l.index)].ref; // Arg (SumOf: build_sums)
  }

  // Asks for the memo slots of `fn_index` called on each child node of `node`.
  void prefetch_child_keys(int fn_index, const Value& node);

  // Appends fragment id's instances for the arguments frames_[frame, ...); leaves its
  // constants' indices on rconsts_ from c0 (its caller pops them).
  void replay(int32_t id, size_t frame, size_t c0);
  void replay_call(int32_t id, size_t frame, Values& out, bool flat, int64_t uid);
  Value rebuild_result(size_t& node, uint32_t i0, size_t frame, size_t c0);

  void note_instance(int32_t sum_sig) {
    if (!recs_.empty())
      raw_.push_back(RawStep{FragmentMemo::Step::Kind::Inst,
                             static_cast<int32_t>(res_.instances.size() - 1), sum_sig, 0, 0});
  }

  void spend(const Span& s) {
    if (++used_ > fuel_)
      throw Refused{s, "out of fuel (" + std::to_string(fuel_) +
                           " steps): the program's work is not bounded by the batch's structure"};
  }

  static bool is_const(const Value& v) { return v.as_tensor().defined(); }
  const RVal& rv(const Value& v) const { return rvals_[static_cast<size_t>(v.tape_id())]; }

  int32_t memo_sig(const TensorSig& s) { return memo_.sig_id(s.dtype, s.dims); }

  Value residual(Ref r, int32_t sg) {
    rvals_.push_back(RVal{r, sg, -1});
    return Value::undefined_tensor(static_cast<int32_t>(rvals_.size() - 1));
  }

  Value sum_value(int32_t part, int32_t sg) {
    rvals_.push_back(RVal{Ref{}, sg, part});
    return Value::undefined_tensor(static_cast<int32_t>(rvals_.size() - 1));
  }

  int32_t sig(const Value& v) { return is_const(v) ? sig_id(v.as_tensor()) : rv(v).sig; }

  // Interns a template built on a memo miss and remembers it under key_.
  int32_t remember(Template t);

  // Appends an instance of entry e whose arguments are the tensors among args[0, n)
  // (is_tensor(i)), straight into the argument pool. Pending sums among them are materialized
  // first: each appends its own SumN instance and terms, which must come before this instance
  // and its arguments (and may reallocate the instance list).
  template <class IsTensor>
  void push_instance(int32_t e, const Value* args, size_t n, IsTensor is_tensor);

  Value result(int32_t idx, const PeMemo::Entry& en, uint32_t k) {
    return residual(Ref{Ref::Kind::Inst, idx, static_cast<int32_t>(k)},
                    memo_.result_sigs[en.first + k]);
  }

  // Equal constants share one index, so instances that take them can share a group.
  Ref const_ref(const Tensor& t);

  int32_t leaf_part(Ref r) {
    parts_.push_back(SumPart{-1, -1, r});
    return static_cast<int32_t>(parts_.size() - 1);
  }

  int32_t join(int32_t a, int32_t b) {
    parts_.push_back(SumPart{a, b, Ref{}});
    return static_cast<int32_t>(parts_.size() - 1);
  }

  // The terms of a value as a sum part: a constant, a pending sum's terms, or the value.
  int32_t part_of(const Value& v);

  // Appends the terms of sum part `part` to `out`, in order.
  void flatten(int32_t part, std::vector<Ref>& out);

  // A single reference for a value: a pending sum becomes a SumN instance (once).
  Ref materialize(const Value& v);
  Value rebuild(const ir::Type& t, int32_t idx, const PeMemo::Entry& en, uint32_t& k);
  Value fold(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
             Values* multi);
};
static_assert(interp::EvaluatorBackend<PeBackend>);

} // namespace pejit::specializer::pe

#include "specializer/pe_instances.h"
