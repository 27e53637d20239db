// The partial evaluator's backend (pe_backend.h) building the residual: an op or a template
// call on residual values becomes an instance of its template, found by one hash lookup of its
// key (callee, statics, argument signatures) in the PeMemo and interned on a miss; an op on
// constants folds; `a + b` and sum_list stay pending sums (ropes of SumParts) until a use
// materializes them as one SumN instance. Included at the end of pe_backend.h, not on its own.
#pragma once

#include "specializer/pe_backend.h"

namespace pejit::specializer::pe {

inline Value PeBackend::op(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n,
                           const Span& s, Values* multi) {
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
  // A parameter operand beside per-row ones is read by the template itself (Template::
  // param_args): keyed by the parameter, -1 - its index (a signature id is never negative).
  auto param_of = [&](size_t i) {
    if (is_const(args[i]))
      return -1;
    const RVal& v = rv(args[i]);
    return v.sum < 0 && v.ref.kind == Ref::Kind::Param ? v.ref.index : -1;
  };
  // A small constant operand is keyed as itself (Template::const_args): INT64_MIN, its id.
  auto const_of = [&](size_t i) {
    return is_const(args[i]) ? memo_.const_id(args[i].as_tensor()) : -1;
  };
  bool per_row = false;
  for (size_t i = 0; i < n && !per_row; ++i)
    per_row = param_of(i) < 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t p = per_row ? param_of(i) : -1;
    const int32_t c = per_row ? const_of(i) : -1;
    if (c >= 0) {
      key_.push_back(INT64_MIN);
      key_.push_back(c);
    } else {
      key_.push_back(p >= 0 ? -1 - p : sig(args[i]));
    }
  }
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
      if (const int32_t p = per_row ? param_of(i) : -1; p >= 0) {
        t.param_args.resize(n, -1);
        t.param_args[i] = p;
      }
      if (const int32_t c = per_row ? const_of(i) : -1; c >= 0) {
        t.const_args.resize(n);
        t.const_args[i] = memo_.const_vals[static_cast<size_t>(c)];
      }
    }
    auto r = ops::op_result_type(id, types, attr);
    PEJIT_CHECK(r.ok()) << "op " << ops::op_name(id)
                        << " failed its shape rule after checking: " << r.error;
    std::vector<ir::Type> outs;
    flatten_type(r.type, outs);
    for (const auto& o : outs)
      t.results.push_back(sig_of(o, dims_));
    t.name = std::string("op.") + ops::op_name(id);
    t.where = s;
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

inline std::optional<Value> PeBackend::call(const ir::FnDecl& f, int fn_index, const Values& args,
                                            const Span& s) {
  int32_t e = call_instance(f, fn_index, args, s);
  if (e < 0)
    return std::nullopt;
  const PeMemo::Entry& en = memo_.entries[static_cast<size_t>(e)];
  int32_t idx = static_cast<int32_t>(res_.instances.size() - 1);
  uint32_t k = 0;
  return rebuild(f.ret, idx, en, k);
}

inline bool PeBackend::call_flat(const ir::FnDecl& f, int fn_index, const Values& args,
                                 const Span& s, Values& out) {
  int32_t e = call_instance(f, fn_index, args, s);
  if (e < 0)
    return false;
  const PeMemo::Entry& en = memo_.entries[static_cast<size_t>(e)];
  int32_t idx = static_cast<int32_t>(res_.instances.size() - 1);
  for (uint32_t k = 0; k < en.count; ++k)
    out.push_back(result(idx, en, k));
  return true;
}

inline int32_t PeBackend::call_instance(const ir::FnDecl& f, int fn_index, const Values& args,
                                        const Span& s) {
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
    default: {
      // A small constant is keyed as itself (Template::const_args): -1 - its id.
      const int32_t c = is_const(a) ? memo_.const_id(a.as_tensor()) : -1;
      key[2 + i] = c >= 0 ? -1 - int64_t{c} : sig(a);
    }
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
      if (k == ir::TypeKind::Int || k == ir::TypeKind::Bool) {
        t.statics.push_back(key_[2 + i]);
      } else if (key_[2 + i] < 0) {
        const Tensor& c = memo_.const_vals[static_cast<size_t>(-1 - key_[2 + i])];
        t.const_args.resize(t.args.size() + 1);
        t.const_args.back() = c;
        t.args.push_back(memo_.sigs[static_cast<size_t>(sig_id(c))]);
      } else {
        t.args.push_back(memo_.sigs[static_cast<size_t>(key_[2 + i])]);
      }
    }
    std::vector<ir::Type> outs;
    flatten_type(f.ret, outs);
    for (const auto& o : outs)
      t.results.push_back(sig_of(o, dims_));
    if (random_ctx()[static_cast<size_t>(fn_index)])
      t.args.push_back(random_key_sig()); // the context's key, the last argument
    if (!t.const_args.empty())
      t.const_args.resize(t.args.size());
    e = remember(std::move(t));
  }
  push_instance(e, args.data(), f.params.size(), [&](size_t i) {
    auto k = f.params[i].type->kind;
    return k != ir::TypeKind::Int && k != ir::TypeKind::Bool;
  });
  if (random_ctx()[static_cast<size_t>(fn_index)]) {
    // A call that opens a random context (interp/random.h): its key is one more argument.
    if (cursor_.open >= 0)
      throw Refused{s, "a random template called inside another's random context"};
    auto [ctx, index] = cursor_.draw();
    Ref key = materialize(random_input(ctx, index));
    res_.arg_pool.push_back(key);
    res_.instances.back().num_args++;
  }
  return e;
}

inline int32_t PeBackend::remember(Template t) {
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

template <class IsTensor>
inline void PeBackend::push_instance(int32_t e, const Value* args, size_t n, IsTensor is_tensor) {
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
  note_instance(-1);
}

inline Ref PeBackend::const_ref(const Tensor& t) {
  std::string key(dtype_name(t.dtype()));
  for (auto d : t.shape().dims())
    key += "," + std::to_string(d);
  key += ":";
  key.append(static_cast<const char*>(t.raw()), t.nbytes());
  auto [it, fresh] = const_ids_.emplace(std::move(key), static_cast<int32_t>(res_.consts.size()));
  if (fresh)
    res_.consts.push_back(t);
  if (!recs_.empty() && !replaying_)
    raw_.push_back(RawStep{FragmentMemo::Step::Kind::Const, it->second, -1, 0, 0});
  return Ref{Ref::Kind::Const, it->second, 0};
}

inline Value PeBackend::rebuild(const ir::Type& t, int32_t idx, const PeMemo::Entry& en,
                                uint32_t& k) {
  if (t->kind == ir::TypeKind::Tensor)
    return result(idx, en, k++);
  Values elems;
  elems.reserve(t->elems.size());
  for (const auto& e : t->elems)
    elems.push_back(rebuild(e, idx, en, k));
  return Value::tuple(std::move(elems));
}

inline Value PeBackend::fold(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n,
                             const Span& s, Values* multi) {
  std::vector<Tensor> ins, outs;
  for (size_t i = 0; i < n; ++i)
    ins.push_back(args[i].as_tensor());
  try {
    ops::op_def(id).eval(ins, attr, outs);
  } catch (const Error& e) {
    throw Error(s.str() + ": error: " + ops::op_error_text(id, e.what()));
  }
  if (multi) {
    multi->clear();
    for (auto& o : outs)
      multi->push_back(Value::tensor(std::move(o)));
    return Value();
  }
  return Value::tensor(std::move(outs[0]));
}

inline Value PeBackend::sum_list(const Value& xs, const ir::Type& type, const Span& s) {
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

inline int32_t PeBackend::part_of(const Value& v) {
  if (is_const(v))
    return leaf_part(const_ref(v.as_tensor()));
  const RVal& r = rv(v);
  if (r.sum >= 0)
    return r.sum;
  return leaf_part(r.ref);
}

inline void PeBackend::flatten(int32_t part, std::vector<Ref>& out) {
  stack_.clear();
  stack_.push_back(part);
  while (!stack_.empty()) {
    const SumPart& p = parts_[static_cast<size_t>(stack_.back())];
    stack_.pop_back();
    if (p.l == -1) {
      out.push_back(p.leaf);
    } else if (p.l == -2) {
      auto first = terms_.begin() + p.r;
      out.insert(out.end(), first, first + p.leaf.index);
    } else {
      stack_.push_back(p.r);
      stack_.push_back(p.l);
    }
  }
}

inline Ref PeBackend::materialize(const Value& v) {
  if (is_const(v))
    return const_ref(v.as_tensor());
  size_t id = static_cast<size_t>(v.tape_id());
  if (rvals_[id].sum < 0)
    return rvals_[id].ref;
  Instance inst;
  inst.tmpl = Instance::kSumN;
  inst.first_arg = static_cast<uint32_t>(res_.arg_pool.size());
  flatten(rvals_[id].sum, res_.arg_pool);
  inst.num_args = static_cast<uint32_t>(res_.arg_pool.size() - inst.first_arg);
  inst.sum_sig = static_cast<int32_t>(res_.sum_sigs.size());
  res_.sum_sigs.push_back(memo_.sigs[static_cast<size_t>(rvals_[id].sig)]);
  res_.instances.push_back(std::move(inst));
  note_instance(rvals_[id].sig);
  RVal& r = rvals_[id];
  r.sum = -1;
  r.ref = Ref{Ref::Kind::Inst, static_cast<int32_t>(res_.instances.size() - 1), 0};
  return r.ref;
}

inline void PeBackend::collect_outputs(const Value& v) {
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

} // namespace pejit::specializer::pe
