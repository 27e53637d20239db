// The partial evaluator's backend for the shared evaluator, and the skeleton hash. See the
// design note in partial_eval.h.
#include "specializer/partial_eval.h"

#include "interp/evaluator.h"
#include "ops/emitter.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <unordered_map>

namespace pejit::spec {

using interp::Value;
using interp::Values;

namespace {

struct Refused {
  Span where;
  std::string reason;
};

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

uint64_t hash_str(uint64_t h, const std::string& s) {
  for (char c : s)
    h = mix(h, static_cast<uint8_t>(c));
  return mix(h, s.size());
}

void hash_value(uint64_t& h, const Value& v, size_t& count) {
  ++count;
  h = mix(h, static_cast<uint64_t>(v.kind()));
  switch (v.kind()) {
  case Value::Kind::Int:
  case Value::Kind::Bool:
    h = mix(h, static_cast<uint64_t>(v.kind() == Value::Kind::Int ? v.as_int() : v.as_bool()));
    break;
  case Value::Kind::Tensor: {
    const Tensor& t = v.as_tensor();
    h = mix(h, static_cast<uint64_t>(t.dtype()));
    for (auto d : t.shape().dims())
      h = mix(h, static_cast<uint64_t>(d));
    h = mix(h, t.rank());
    break;
  }
  case Value::Kind::Tuple:
  case Value::Kind::Adt:
    if (v.kind() == Value::Kind::Adt)
      h = mix(h, static_cast<uint64_t>(v.tag()));
    h = mix(h, v.items().size());
    for (const auto& x : v.items())
      hash_value(h, x, count);
    break;
  case Value::Kind::List:
    h = mix(h, v.list_size());
    for (size_t i = 0; i < v.list_size(); ++i)
      hash_value(h, v.list_at(i), count);
    break;
  case Value::Kind::Closure:
  case Value::Kind::None:
    break;
  }
}

TensorSig sig_of(const ir::Type& t, const interp::DimBindings& dims) {
  TensorSig s;
  s.dtype = t->elem == ir::Elem::F32 ? DType::F32 : DType::I32;
  auto sh = interp::concrete_shape(t, dims);
  auto d = sh.dims();
  s.dims.assign(d.begin(), d.end());
  return s;
}

ir::Type type_of(const TensorSig& s) {
  std::vector<int64_t> d = s.dims;
  return s.dtype == DType::F32 ? ir::t_f32(d) : ir::t_i32(d);
}

bool tensors_only(const ir::Type& t) {
  if (t->kind == ir::TypeKind::Tensor)
    return true;
  if (t->kind != ir::TypeKind::Tuple)
    return false;
  for (const auto& e : t->elems)
    if (!tensors_only(e))
      return false;
  return true;
}

void flatten_type(const ir::Type& t, std::vector<ir::Type>& out) {
  if (t->kind == ir::TypeKind::Tensor)
    out.push_back(t);
  else
    for (const auto& e : t->elems)
      flatten_type(e, out);
}

// The partial evaluator's backend: residual tensors are Value::tensor(undefined, rid), where
// rid indexes rvals_; known constants are ordinary defined tensors.
//
// Cost model (DESIGN.md §5: well under a millisecond per 25-tree batch): signatures are small
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
        param_vals_(m.params().size()), eligible_(m.fns().size(), -1) {}

  void set_fuel(size_t fuel) { fuel_ = fuel; }

  // A fresh input slot for a payload tensor of the batch (of signature sig, if known).
  Value input(const Tensor& t, int32_t sig = -1) {
    int32_t slot = static_cast<int32_t>(res_.inputs.size());
    res_.inputs.push_back(t);
    return residual(Ref{Ref::Kind::Input, slot, 0}, sig >= 0 ? sig : sig_id(t));
  }

  // Reserves for a batch like the largest seen so far (PeMemo's hints), so that the residual's
  // vectors do not grow by copying.
  void reserve() {
    res_.instances.reserve(memo_.hint_instances);
    res_.arg_pool.reserve(memo_.hint_args);
    res_.inputs.reserve(memo_.hint_inputs);
    rvals_.reserve(memo_.hint_rvals);
    parts_.reserve(memo_.hint_parts);
  }
  void update_hints() {
    memo_.hint_instances = std::max(memo_.hint_instances, res_.instances.size());
    memo_.hint_args = std::max(memo_.hint_args, res_.arg_pool.size());
    memo_.hint_inputs = std::max(memo_.hint_inputs, res_.inputs.size());
    memo_.hint_rvals = std::max(memo_.hint_rvals, rvals_.size());
    memo_.hint_parts = std::max(memo_.hint_parts, parts_.size());
  }

  Value param(int i) {
    Value& v = param_vals_[static_cast<size_t>(i)];
    if (v.kind() == Value::Kind::None)
      v = residual(Ref{Ref::Kind::Param, i, 0},
                   memo_sig(sig_of(m_.params()[static_cast<size_t>(i)]->type, dims_)));
    return v;
  }

  Value op(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
           Values* multi = nullptr) {
    spend(s);
    bool all_const = true;
    for (size_t i = 0; i < n; ++i)
      all_const = all_const && is_const(args[i]);
    if (all_const)
      return fold(id, attr, args, n, s, multi);
    // `a + b` of f32 tensors of one shape, one of them residual, stays a symbolic sum.
    if (id == ops::OpId::Add) {
      int32_t a = sig(args[0]), b = sig(args[1]);
      if (a == b && memo_.sigs[static_cast<size_t>(a)].dtype == DType::F32) {
        int32_t pa = part_of(args[0]);
        int32_t pb = part_of(args[1]);
        return sum_value(join(pa, pb), a);
      }
    }
    key_.clear();
    key_.push_back(2);
    key_.push_back(static_cast<int64_t>(id));
    key_.push_back(static_cast<int64_t>(attr.ints.size()));
    key_.insert(key_.end(), attr.ints.begin(), attr.ints.end());
    for (size_t i = 0; i < n; ++i)
      key_.push_back(sig(args[i]));
    int32_t e = memo_.keys.find(key_);
    if (e < 0) {
      Template t;
      t.kind = Template::Kind::Op;
      t.op = id;
      t.attr = attr;
      std::vector<ir::Type> types;
      for (size_t i = 0; i < n; ++i) {
        t.args.push_back(memo_.sigs[static_cast<size_t>(sig(args[i]))]);
        types.push_back(type_of(t.args.back()));
      }
      auto r = ops::op_result_type(id, types, attr);
      PEJIT_CHECK(r.ok()) << "op " << ops::op_name(id)
                          << " failed its shape rule after checking: " << r.error;
      std::vector<ir::Type> outs;
      flatten_type(r.type, outs);
      for (const auto& o : outs)
        t.results.push_back(sig_of(o, dims_));
      t.name = std::string("op.") + ops::op_name(id);
      e = remember(std::move(t));
    }
    push_instance(e, args, n, [](size_t) { return true; });
    const PeMemo::Entry& en = memo_.entries[static_cast<size_t>(e)];
    int32_t idx = static_cast<int32_t>(res_.instances.size() - 1);
    if (multi) {
      multi->clear();
      for (uint32_t k = 0; k < en.count; ++k)
        multi->push_back(result(idx, en, k));
      return Value();
    }
    return result(idx, en, 0);
  }

  std::optional<Value> call(const ir::FnDecl& f, int fn_index, const Values& args, const Span& s) {
    int32_t e = call_instance(f, fn_index, args, s);
    if (e < 0)
      return std::nullopt;
    const PeMemo::Entry& en = memo_.entries[static_cast<size_t>(e)];
    int32_t idx = static_cast<int32_t>(res_.instances.size() - 1);
    uint32_t k = 0;
    return rebuild(f.ret, idx, en, k);
  }

  // As call, for a function whose result is a flat tuple of tensors: the elements into `out`
  // (the evaluator's `let (a, b) = f(...)`, without building the tuple).
  bool call_flat(const ir::FnDecl& f, int fn_index, const Values& args, const Span& s,
                 Values& out) {
    int32_t e = call_instance(f, fn_index, args, s);
    if (e < 0)
      return false;
    const PeMemo::Entry& en = memo_.entries[static_cast<size_t>(e)];
    int32_t idx = static_cast<int32_t>(res_.instances.size() - 1);
    for (uint32_t k = 0; k < en.count; ++k)
      out.push_back(result(idx, en, k));
    return true;
  }

  // Appends a template call's instance and returns its memo entry; -1 (and nothing appended)
  // when f is not template-eligible.
  int32_t call_instance(const ir::FnDecl& f, int fn_index, const Values& args, const Span& s) {
    spend(s);
    int8_t& el = eligible_[static_cast<size_t>(fn_index)];
    if (el < 0)
      el = is_template_eligible(f) ? 1 : 0;
    if (!el)
      return -1;
    key_.resize(2 + f.params.size());
    int64_t* key = key_.data();
    key[0] = 1;
    key[1] = fn_index;
    for (size_t i = 0; i < f.params.size(); ++i) {
      const Value& a = args[i];
      switch (f.params[i].type->kind) {
      case ir::TypeKind::Int:
        key[2 + i] = a.as_int();
        break;
      case ir::TypeKind::Bool:
        key[2 + i] = a.as_bool() ? 1 : 0;
        break;
      default:
        key[2 + i] = sig(a);
      }
    }
    int32_t e = memo_.keys.find(key_);
    if (e < 0) {
      Template t;
      t.kind = Template::Kind::Function;
      t.fn = fn_index;
      t.name = f.name;
      for (size_t i = 0; i < f.params.size(); ++i) {
        auto k = f.params[i].type->kind;
        if (k == ir::TypeKind::Int || k == ir::TypeKind::Bool)
          t.statics.push_back(key_[2 + i]);
        else
          t.args.push_back(memo_.sigs[static_cast<size_t>(key_[2 + i])]);
      }
      std::vector<ir::Type> outs;
      flatten_type(f.ret, outs);
      for (const auto& o : outs)
        t.results.push_back(sig_of(o, dims_));
      e = remember(std::move(t));
    }
    push_instance(e, args.data(), f.params.size(), [&](size_t i) {
      auto k = f.params[i].type->kind;
      return k != ir::TypeKind::Int && k != ir::TypeKind::Bool;
    });
    return e;
  }

  Value sum_list(const Value& xs, const ir::Type& type, const Span& s) {
    spend(s);
    if (xs.list_size() == 0) {
      TensorSig sg = sig_of(type, dims_);
      return Value::tensor(Tensor::zeros(DType::F32, Shape(std::span<const int64_t>(sg.dims))));
    }
    bool all_const = true;
    for (size_t i = 0; i < xs.list_size(); ++i)
      all_const = all_const && is_const(xs.list_at(i));
    if (all_const) {
      Value acc = xs.list_at(0);
      for (size_t i = 1; i < xs.list_size(); ++i) {
        Value two[2] = {acc, xs.list_at(i)};
        acc = fold(ops::OpId::Add, {}, two, 2, s, nullptr);
      }
      return acc;
    }
    int32_t p = part_of(xs.list_at(0));
    for (size_t i = 1; i < xs.list_size(); ++i) {
      int32_t q = part_of(xs.list_at(i));
      p = join(p, q);
    }
    return sum_value(p, memo_sig(sig_of(type, dims_)));
  }

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
  void collect_outputs(const Value& v) {
    auto& shape = res_.result_shape;
    switch (v.kind()) {
    case Value::Kind::Tensor:
      shape.push_back(kResultTensor);
      res_.outputs.push_back(materialize(v));
      break;
    case Value::Kind::Tuple:
    case Value::Kind::Adt:
      if (v.kind() == Value::Kind::Adt) {
        shape.push_back(kResultAdt);
        shape.push_back(v.tag());
      } else {
        shape.push_back(kResultTuple);
      }
      shape.push_back(static_cast<int64_t>(v.items().size()));
      for (const auto& x : v.items())
        collect_outputs(x);
      break;
    case Value::Kind::List:
      shape.push_back(kResultList);
      shape.push_back(static_cast<int64_t>(v.list_size()));
      for (size_t i = 0; i < v.list_size(); ++i)
        collect_outputs(v.list_at(i));
      break;
    case Value::Kind::Int:
      shape.push_back(kResultInt);
      shape.push_back(v.as_int());
      break;
    case Value::Kind::Bool:
      shape.push_back(kResultBool);
      shape.push_back(v.as_bool() ? 1 : 0);
      break;
    default:
      throw Refused{Span{}, "the entry returns a function"};
    }
  }

  size_t fuel_used() const { return used_; }

  int32_t sig_id(const Tensor& t) { return memo_.sig_id(t.dtype(), t.shape().dims()); }

private:
  struct RVal {
    Ref ref;
    int32_t sig;      ///< id in memo_.sigs
    int32_t sum = -1; ///< >= 0: a symbolic sum not yet materialized (its SumPart)
  };
  // A pending sum's terms, in order: a leaf (l < 0: the term `leaf`) or the terms of l then r.
  // Parts are immutable, so a sum that used another still pending sum keeps its terms even if
  // that one is materialized later.
  struct SumPart {
    int32_t l = -1, r = -1;
    Ref leaf;
  };

  const ir::Module& m_;
  const interp::DimBindings& dims_;
  TemplateTable& templates_;
  PeMemo& memo_;
  Residual& res_;
  size_t fuel_ = 0;
  size_t used_ = 0;
  std::vector<RVal> rvals_;
  std::vector<SumPart> parts_;
  std::vector<Value> param_vals_; ///< None until first used
  std::vector<int8_t> eligible_;  ///< per function: -1 unknown, else is_template_eligible
  std::unordered_map<std::string, int32_t> const_ids_;
  std::vector<int64_t> key_;   ///< scratch: the specialization key being looked up
  std::vector<int32_t> stack_; ///< scratch: flattening a sum

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
  int32_t remember(Template t) {
    PeMemo::Entry en;
    en.first = static_cast<uint32_t>(memo_.result_sigs.size());
    en.count = static_cast<uint32_t>(t.results.size());
    for (const auto& r : t.results)
      memo_.result_sigs.push_back(memo_sig(r));
    en.tmpl = templates_.intern(std::move(t));
    int32_t e = static_cast<int32_t>(memo_.entries.size());
    memo_.entries.push_back(en);
    memo_.keys.emplace(key_, e);
    return e;
  }

  // Appends an instance of entry e whose arguments are the tensors among args[0, n)
  // (is_tensor(i)), straight into the argument pool. Pending sums among them are materialized
  // first: each appends its own SumN instance and terms, which must come before this instance
  // and its arguments (and may reallocate the instance list).
  template <class IsTensor>
  void push_instance(int32_t e, const Value* args, size_t n, IsTensor is_tensor) {
    for (size_t i = 0; i < n; ++i)
      if (is_tensor(i) && !is_const(args[i]) && rv(args[i]).sum >= 0)
        materialize(args[i]);
    Instance& inst = res_.instances.emplace_back();
    inst.tmpl = memo_.entries[static_cast<size_t>(e)].tmpl;
    inst.first_arg = static_cast<uint32_t>(res_.arg_pool.size());
    for (size_t i = 0; i < n; ++i)
      if (is_tensor(i))
        res_.arg_pool.push_back(materialize(args[i]));
    inst.num_args = static_cast<uint32_t>(res_.arg_pool.size() - inst.first_arg);
  }

  Value result(int32_t idx, const PeMemo::Entry& en, uint32_t k) {
    return residual(Ref{Ref::Kind::Inst, idx, static_cast<int32_t>(k)},
                    memo_.result_sigs[en.first + k]);
  }

  // Equal constants share one index, so instances that take them can share a group.
  Ref const_ref(const Tensor& t) {
    std::string key(dtype_name(t.dtype()));
    for (auto d : t.shape().dims())
      key += "," + std::to_string(d);
    key += ":";
    key.append(static_cast<const char*>(t.raw()), t.nbytes());
    auto [it, fresh] = const_ids_.emplace(std::move(key), static_cast<int32_t>(res_.consts.size()));
    if (fresh)
      res_.consts.push_back(t);
    return Ref{Ref::Kind::Const, it->second, 0};
  }

  int32_t leaf_part(Ref r) {
    parts_.push_back(SumPart{-1, -1, r});
    return static_cast<int32_t>(parts_.size() - 1);
  }

  int32_t join(int32_t a, int32_t b) {
    parts_.push_back(SumPart{a, b, Ref{}});
    return static_cast<int32_t>(parts_.size() - 1);
  }

  // The terms of a value as a sum part: a constant, a pending sum's terms, or the value.
  int32_t part_of(const Value& v) {
    if (is_const(v))
      return leaf_part(const_ref(v.as_tensor()));
    const RVal& r = rv(v);
    if (r.sum >= 0)
      return r.sum;
    return leaf_part(r.ref);
  }

  // A single reference for a value: a pending sum becomes a SumN instance (once).
  Ref materialize(const Value& v) {
    if (is_const(v))
      return const_ref(v.as_tensor());
    size_t id = static_cast<size_t>(v.tape_id());
    if (rvals_[id].sum < 0)
      return rvals_[id].ref;
    Instance inst;
    inst.tmpl = Instance::kSumN;
    inst.first_arg = static_cast<uint32_t>(res_.arg_pool.size());
    stack_.clear();
    stack_.push_back(rvals_[id].sum);
    while (!stack_.empty()) {
      const SumPart& p = parts_[static_cast<size_t>(stack_.back())];
      stack_.pop_back();
      if (p.l < 0) {
        res_.arg_pool.push_back(p.leaf);
      } else {
        stack_.push_back(p.r);
        stack_.push_back(p.l);
      }
    }
    inst.num_args = static_cast<uint32_t>(res_.arg_pool.size() - inst.first_arg);
    inst.sum_sig = static_cast<int32_t>(res_.sum_sigs.size());
    res_.sum_sigs.push_back(memo_.sigs[static_cast<size_t>(rvals_[id].sig)]);
    res_.instances.push_back(std::move(inst));
    RVal& r = rvals_[id];
    r.sum = -1;
    r.ref = Ref{Ref::Kind::Inst, static_cast<int32_t>(res_.instances.size() - 1), 0};
    return r.ref;
  }

  Value rebuild(const ir::Type& t, int32_t idx, const PeMemo::Entry& en, uint32_t& k) {
    if (t->kind == ir::TypeKind::Tensor)
      return result(idx, en, k++);
    Values elems;
    elems.reserve(t->elems.size());
    for (const auto& e : t->elems)
      elems.push_back(rebuild(e, idx, en, k));
    return Value::tuple(std::move(elems));
  }

  Value fold(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
             Values* multi) {
    std::vector<Tensor> ins, outs;
    for (size_t i = 0; i < n; ++i)
      ins.push_back(args[i].as_tensor());
    try {
      ops::op_def(id).eval(ins, attr, outs);
    } catch (const Error& e) {
      throw Error(s.str() + ": error: " + ops::op_name(id) + ": " + e.what());
    }
    if (multi) {
      multi->clear();
      for (auto& o : outs)
        multi->push_back(Value::tensor(std::move(o)));
      return Value();
    }
    return Value::tensor(std::move(outs[0]));
  }
};

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

// The vectors of a batch's rebuilt structure (BatchScan), kept in the TemplateTable's memo
// and reused from batch to batch, so that rebuilding a batch allocates nothing in steady
// state. A rebuilt node shares the pool's ownership (shared_ptr's aliasing constructor) and
// points to one of its vectors; partial evaluation clears the vectors it used when it ends,
// when no Value of the batch is left (Release), which also breaks the cycle of vectors
// holding Values that share the pool.
struct NodePool {
  std::deque<Values> nodes; ///< stable addresses; [0, used) belong to the current batch
  size_t used = 0;

  /// An empty vector for a node of `n` items.
  Values& take(size_t n) {
    if (used == nodes.size())
      nodes.emplace_back();
    Values& v = nodes[used++];
    v.reserve(n);
    return v;
  }

  /// The pool of a memo: its own, unless a Value of an earlier batch still holds that one.
  static std::shared_ptr<NodePool> of(PeMemo& memo) {
    if (!memo.scratch.p || memo.scratch.p.use_count() != 1)
      memo.scratch.p = std::make_shared<NodePool>();
    return std::static_pointer_cast<NodePool>(memo.scratch.p);
  }

  /// Clears the vectors the batch used (at scope exit, after every Value of the batch).
  struct Release {
    NodePool& pool;
    ~Release() {
      for (size_t i = 0; i < pool.used; ++i)
        pool.nodes[i].clear();
      pool.used = 0;
    }
  };
};

// One walk over the batch that does what check_value, skeleton_hash (with its value count)
// and residualize_batch would do in three: checks the batch against the entry's parameter
// type, hashes its static structure (exactly as hash_value does) and replaces its payload
// tensors by input slots. It reports a mismatch without a message; the caller then runs
// interp::check_value for the diagnostic (or, should that pass, the three walks).
class BatchScan {
public:
  BatchScan(PeBackend& be, const ir::Module& m, const interp::DimBindings& dims,
            std::shared_ptr<NodePool> pool)
      : be_(be), m_(m), dims_(dims), pool_(std::move(pool)) {}

  uint64_t h = 0x243f6a8885a308d3ull;
  size_t count = 0;
  bool ok = true;

  Value scan(const Value& v, const ir::Type& t) {
    ++count;
    h = mix(h, static_cast<uint64_t>(v.kind()));
    switch (t->kind) {
    case ir::TypeKind::Int:
      if (v.kind() != Value::Kind::Int)
        return fail();
      h = mix(h, static_cast<uint64_t>(v.as_int()));
      return v;
    case ir::TypeKind::Bool:
      if (v.kind() != Value::Kind::Bool)
        return fail();
      h = mix(h, static_cast<uint64_t>(v.as_bool()));
      return v;
    case ir::TypeKind::Tensor: {
      if (v.kind() != Value::Kind::Tensor || !v.as_tensor().defined())
        return fail();
      const Tensor& x = v.as_tensor();
      TypeInfo& ti = info(t);
      if (x.dtype() != ti.dtype || x.shape() != ti.shape)
        return fail();
      h = mix(h, static_cast<uint64_t>(x.dtype()));
      for (auto d : x.shape().dims())
        h = mix(h, static_cast<uint64_t>(d));
      h = mix(h, x.rank());
      if (ti.sig < 0)
        ti.sig = be_.sig_id(x);
      return be_.input(x, ti.sig);
    }
    case ir::TypeKind::Tuple: {
      if (v.kind() != Value::Kind::Tuple || v.items().size() != t->elems.size())
        return fail();
      h = mix(h, v.items().size());
      Values& xs = pool_->take(t->elems.size());
      for (size_t i = 0; i < t->elems.size() && ok; ++i)
        xs.push_back(scan(v.items()[i], t->elems[i]));
      return node(Value::Kind::Tuple, 0, xs);
    }
    case ir::TypeKind::List: {
      if (v.kind() != Value::Kind::List)
        return fail();
      h = mix(h, v.list_size());
      Values& xs = pool_->take(v.list_size());
      for (size_t i = 0; i < v.list_size() && ok; ++i)
        xs.push_back(scan(v.list_at(i), t->elems[0]));
      return node(Value::Kind::List, 0, xs);
    }
    case ir::TypeKind::Adt: {
      const ir::TypeDecl* adt = info(t).adt;
      if (!adt || v.kind() != Value::Kind::Adt || v.tag() < 0 ||
          static_cast<size_t>(v.tag()) >= adt->ctors.size())
        return fail();
      const auto& c = adt->ctors[static_cast<size_t>(v.tag())];
      if (v.items().size() != c.fields.size())
        return fail();
      h = mix(h, static_cast<uint64_t>(v.tag()));
      h = mix(h, v.items().size());
      Values& xs = pool_->take(c.fields.size());
      for (size_t i = 0; i < c.fields.size() && ok; ++i)
        xs.push_back(scan(v.items()[i], c.fields[i].type));
      return node(Value::Kind::Adt, v.tag(), xs);
    }
    case ir::TypeKind::Func:
      if (v.kind() != Value::Kind::Closure)
        return fail();
      return v;
    default:
      return fail();
    }
  }

private:
  struct TypeInfo {
    const void* type = nullptr;
    const ir::TypeDecl* adt = nullptr; ///< Adt
    DType dtype = DType::F32;          ///< Tensor
    Shape shape;                       ///< Tensor
    int32_t sig = -1;                  ///< Tensor: its signature id, once seen
  };
  PeBackend& be_;
  const ir::Module& m_;
  const interp::DimBindings& dims_;
  std::shared_ptr<NodePool> pool_;
  std::vector<TypeInfo> infos_; ///< the few type nodes a batch's type is made of

  Value node(Value::Kind kind, int32_t tag, const Values& items) {
    return Value::with_items(kind, tag, std::shared_ptr<const Values>(pool_, &items));
  }

  Value fail() {
    ok = false;
    return Value();
  }

  TypeInfo& info(const ir::Type& t) {
    for (auto& i : infos_)
      if (i.type == t.get())
        return i;
    TypeInfo i;
    i.type = t.get();
    if (t->kind == ir::TypeKind::Adt)
      i.adt = m_.adt(t->name);
    if (t->kind == ir::TypeKind::Tensor) {
      i.dtype = t->elem == ir::Elem::F32 ? DType::F32 : DType::I32;
      i.shape = interp::concrete_shape(t, dims_);
    }
    infos_.push_back(i);
    return infos_.back();
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
  if (f.is_entry || !tensors_only(f.ret))
    return false;
  bool any_tensor = false;
  for (const auto& p : f.params) {
    auto k = p.type->kind;
    if (k == ir::TypeKind::Tensor)
      any_tensor = true;
    else if (k != ir::TypeKind::Int && k != ir::TypeKind::Bool)
      return false;
  }
  return any_tensor;
}

std::vector<Template> static_templates(const ir::Module& m, const interp::DimBindings& dims) {
  std::vector<Template> out;
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
    out.push_back(std::move(t));
  }
  return out;
}

PeResult partially_evaluate(const ir::Module& m, const interp::DimBindings& dims,
                            const std::string& entry, const Value& batch, TemplateTable& templates,
                            const PeOptions& opt) {
  ops::register_kernels();
  const ir::FnDecl* f = m.fn(entry);
  if (!f || !f->is_entry)
    throw Error("no entry named '" + entry + "' in the module");
  if (f->params.size() != 1)
    throw Error("entry '" + entry + "' must take one argument (the batch) to be specialized");

  // The memo is valid for one module state and dimension binding.
  uint64_t dims_h = 0;
  for (const auto& [name, size] : dims)
    dims_h = mix(hash_str(dims_h, name), static_cast<uint64_t>(size));
  uint64_t stamp =
      mix(mix(mix(0x5bd1e995ull, reinterpret_cast<uintptr_t>(&m)), m.generation()), dims_h);
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

  PeResult out;
  std::shared_ptr<NodePool> pool = NodePool::of(memo);
  NodePool::Release release{*pool}; // after every Value below
  std::optional<PeBackend> be(std::in_place, m, dims, templates, out.residual);
  be->reserve();
  BatchScan scan(*be, m, dims, pool);
  Value arg = scan.scan(batch, f->params[0].type);
  uint64_t h = scan.h;
  size_t values = scan.count;
  if (!scan.ok) {
    interp::check_value(batch, f->params[0].type, m, dims, f->params[0].name); // throws
    // The batch is fine after all: the separate walks.
    out.residual = Residual{};
    be.emplace(m, dims, templates, out.residual);
    be->reserve();
    arg = residualize_batch(*be, batch);
    h = skeleton_hash(batch);
    values = 0;
    uint64_t tmp = 0;
    hash_value(tmp, batch, values);
  }
  h = hash_str(h, entry);
  h = mix(h, cone);
  for (const auto& [name, size] : dims)
    h = mix(hash_str(h, name), static_cast<uint64_t>(size));
  out.residual.key = h;

  be->set_fuel(PeOptions::kFuelBase + opt.fuel_per_value * values);
  try {
    interp::Evaluator<PeBackend> ev(m, *be, opt.max_depth);
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

  return out;
}

} // namespace pejit::spec
