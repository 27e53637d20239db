// The partial evaluator's backend for the shared evaluator, and the skeleton hash. See the
// design note in partial_eval.h.
#include "specializer/partial_eval.h"

#include "interp/evaluator.h"
#include "ops/emitter.h"

#include <cmath>
#include <map>
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
  for (char c : s) h = mix(h, static_cast<uint8_t>(c));
  return mix(h, s.size());
}

void hash_value(uint64_t& h, const Value& v, size_t& count) {
  ++count;
  h = mix(h, static_cast<uint64_t>(v.kind()));
  switch (v.kind()) {
  case Value::Kind::Int:
  case Value::Kind::Bool: h = mix(h, static_cast<uint64_t>(v.kind() == Value::Kind::Int ? v.as_int() : v.as_bool())); break;
  case Value::Kind::Tensor: {
    const Tensor& t = v.as_tensor();
    h = mix(h, static_cast<uint64_t>(t.dtype()));
    for (auto d : t.shape().dims()) h = mix(h, static_cast<uint64_t>(d));
    h = mix(h, t.rank());
    break;
  }
  case Value::Kind::Tuple:
  case Value::Kind::Adt:
    if (v.kind() == Value::Kind::Adt) h = mix(h, static_cast<uint64_t>(v.tag()));
    h = mix(h, v.items().size());
    for (const auto& x : v.items()) hash_value(h, x, count);
    break;
  case Value::Kind::List:
    h = mix(h, v.list_size());
    for (size_t i = 0; i < v.list_size(); ++i) hash_value(h, v.list_at(i), count);
    break;
  case Value::Kind::Closure:
  case Value::Kind::None: break;
  }
}

TensorSig sig_of(const Tensor& t) {
  TensorSig s;
  s.dtype = t.dtype();
  auto d = t.shape().dims();
  s.dims.assign(d.begin(), d.end());
  return s;
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
  if (t->kind == ir::TypeKind::Tensor) return true;
  if (t->kind != ir::TypeKind::Tuple) return false;
  for (const auto& e : t->elems)
    if (!tensors_only(e)) return false;
  return true;
}

void flatten_type(const ir::Type& t, std::vector<ir::Type>& out) {
  if (t->kind == ir::TypeKind::Tensor) out.push_back(t);
  else
    for (const auto& e : t->elems) flatten_type(e, out);
}

// The partial evaluator's backend: residual tensors are Value::tensor(undefined, rid), where
// rid indexes rvals_; known constants are ordinary defined tensors.
class PeBackend {
public:
  PeBackend(const ir::Module& m, const interp::DimBindings& dims, TemplateTable& templates,
            Residual& res, size_t fuel)
      : m_(m), dims_(dims), templates_(templates), res_(res), fuel_(fuel) {}

  // A fresh input slot for a payload tensor of the batch.
  Value input(const Tensor& t) {
    int32_t slot = static_cast<int32_t>(res_.inputs.size());
    res_.inputs.push_back(t);
    return residual(Ref{Ref::Kind::Input, slot, 0}, sig_of(t));
  }

  Value param(int i) {
    auto it = param_vals_.find(i);
    if (it != param_vals_.end()) return it->second;
    Value v = residual(Ref{Ref::Kind::Param, i, 0},
                       sig_of(m_.params()[static_cast<size_t>(i)]->type, dims_));
    param_vals_.emplace(i, v);
    return v;
  }

  Value op(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
           Values* multi = nullptr) {
    spend(s);
    bool all_const = true;
    for (size_t i = 0; i < n; ++i) all_const = all_const && is_const(args[i]);
    if (all_const) return fold(id, attr, args, n, s, multi);
    // `a + b` of f32 tensors of one shape, one of them residual, stays a symbolic sum.
    if (id == ops::OpId::Add) {
      TensorSig a = sig(args[0]), b = sig(args[1]);
      if (a == b && a.dtype == DType::F32) {
        std::vector<Ref> terms = terms_of(args[0]);
        auto tb = terms_of(args[1]);
        terms.insert(terms.end(), tb.begin(), tb.end());
        return sum_value(std::move(terms), a);
      }
    }
    Template t;
    t.kind = Template::Kind::Op;
    t.op = id;
    t.attr = attr;
    std::vector<ir::Type> types;
    std::vector<Ref> refs;
    for (size_t i = 0; i < n; ++i) {
      TensorSig sg = sig(args[i]);
      t.args.push_back(sg);
      types.push_back(type_of(sg));
      refs.push_back(materialize(args[i]));
    }
    auto r = ops::op_result_type(id, types, attr);
    PEJIT_CHECK(r.ok()) << "op " << ops::op_name(id) << " failed its shape rule after checking: "
                        << r.error;
    std::vector<ir::Type> outs;
    flatten_type(r.type, outs);
    for (const auto& o : outs) t.results.push_back(sig_of(o, dims_));
    t.name = std::string("op.") + ops::op_name(id);
    Values results = instantiate(std::move(t), std::move(refs));
    if (multi) {
      *multi = std::move(results);
      return Value();
    }
    return results[0];
  }

  std::optional<Value> call(const ir::FnDecl& f, int fn_index, const Values& args, const Span& s) {
    spend(s);
    if (!is_template_eligible(f)) return std::nullopt;
    Template t;
    t.kind = Template::Kind::Function;
    t.fn = fn_index;
    t.name = f.name;
    std::vector<Ref> refs;
    for (size_t i = 0; i < f.params.size(); ++i) {
      const Value& a = args[i];
      switch (f.params[i].type->kind) {
      case ir::TypeKind::Int: t.statics.push_back(a.as_int()); break;
      case ir::TypeKind::Bool: t.statics.push_back(a.as_bool() ? 1 : 0); break;
      default:
        t.args.push_back(sig(a));
        refs.push_back(materialize(a));
      }
    }
    std::vector<ir::Type> outs;
    flatten_type(f.ret, outs);
    for (const auto& o : outs) t.results.push_back(sig_of(o, dims_));
    Values results = instantiate(std::move(t), std::move(refs));
    size_t k = 0;
    return rebuild(f.ret, results, k);
  }

  Value sum_list(const Value& xs, const ir::Type& type, const Span& s) {
    spend(s);
    TensorSig sg = sig_of(type, dims_);
    if (xs.list_size() == 0) return Value::tensor(Tensor::zeros(DType::F32, Shape(std::span<const int64_t>(sg.dims))));
    bool all_const = true;
    for (size_t i = 0; i < xs.list_size(); ++i) all_const = all_const && is_const(xs.list_at(i));
    if (all_const) {
      Value acc = xs.list_at(0);
      for (size_t i = 1; i < xs.list_size(); ++i) {
        Value two[2] = {acc, xs.list_at(i)};
        acc = fold(ops::OpId::Add, {}, two, 2, s, nullptr);
      }
      return acc;
    }
    std::vector<Ref> terms;
    for (size_t i = 0; i < xs.list_size(); ++i) {
      auto t = terms_of(xs.list_at(i));
      terms.insert(terms.end(), t.begin(), t.end());
    }
    return sum_value(std::move(terms), sg);
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
  void collect_outputs(const Value& v) {
    switch (v.kind()) {
    case Value::Kind::Tensor: res_.outputs.push_back(materialize(v)); break;
    case Value::Kind::Tuple:
    case Value::Kind::Adt:
      for (const auto& x : v.items()) collect_outputs(x);
      break;
    case Value::Kind::List:
      for (size_t i = 0; i < v.list_size(); ++i) collect_outputs(v.list_at(i));
      break;
    default: break;
    }
  }

  size_t fuel_used() const { return used_; }

private:
  struct RVal {
    Ref ref;
    TensorSig sig;
    std::vector<Ref> sum_terms; ///< non-empty: a symbolic sum not yet materialized
  };

  const ir::Module& m_;
  const interp::DimBindings& dims_;
  TemplateTable& templates_;
  Residual& res_;
  size_t fuel_;
  size_t used_ = 0;
  std::vector<RVal> rvals_;
  std::map<int, Value> param_vals_;
  std::unordered_map<std::string, int32_t> const_ids_;

  void spend(const Span& s) {
    if (++used_ > fuel_)
      throw Refused{s, "out of fuel (" + std::to_string(fuel_) +
                           " steps): the program's work is not bounded by the batch's structure"};
  }

  static bool is_const(const Value& v) { return v.as_tensor().defined(); }
  const RVal& rv(const Value& v) const { return rvals_[static_cast<size_t>(v.tape_id())]; }

  Value residual(Ref r, TensorSig sg) {
    rvals_.push_back(RVal{r, std::move(sg), {}});
    return Value::tensor(Tensor(), static_cast<int32_t>(rvals_.size() - 1));
  }

  Value sum_value(std::vector<Ref> terms, TensorSig sg) {
    rvals_.push_back(RVal{Ref{}, std::move(sg), std::move(terms)});
    return Value::tensor(Tensor(), static_cast<int32_t>(rvals_.size() - 1));
  }

  TensorSig sig(const Value& v) const { return is_const(v) ? sig_of(v.as_tensor()) : rv(v).sig; }

  // Equal constants share one index, so instances that take them can share a group.
  Ref const_ref(const Tensor& t) {
    std::string key(dtype_name(t.dtype()));
    for (auto d : t.shape().dims()) key += "," + std::to_string(d);
    key += ":";
    key.append(static_cast<const char*>(t.raw()), t.nbytes());
    auto [it, fresh] = const_ids_.emplace(std::move(key), static_cast<int32_t>(res_.consts.size()));
    if (fresh) res_.consts.push_back(t);
    return Ref{Ref::Kind::Const, it->second, 0};
  }

  std::vector<Ref> terms_of(const Value& v) {
    if (is_const(v)) return {const_ref(v.as_tensor())};
    const RVal& r = rv(v);
    if (!r.sum_terms.empty()) return r.sum_terms;
    return {r.ref};
  }

  // A single reference for a value: a pending sum becomes a SumN instance (once).
  Ref materialize(const Value& v) {
    if (is_const(v)) return const_ref(v.as_tensor());
    RVal& r = rvals_[static_cast<size_t>(v.tape_id())];
    if (r.sum_terms.empty()) return r.ref;
    Instance inst;
    inst.tmpl = Instance::kSumN;
    inst.args = std::move(r.sum_terms);
    inst.sum_sig = r.sig;
    res_.instances.push_back(std::move(inst));
    r.sum_terms.clear();
    r.ref = Ref{Ref::Kind::Inst, static_cast<int32_t>(res_.instances.size() - 1), 0};
    return r.ref;
  }

  Values instantiate(Template t, std::vector<Ref> refs) {
    std::vector<TensorSig> results = t.results;
    Instance inst;
    inst.tmpl = templates_.intern(std::move(t));
    inst.args = std::move(refs);
    res_.instances.push_back(std::move(inst));
    int32_t idx = static_cast<int32_t>(res_.instances.size() - 1);
    Values out;
    for (size_t k = 0; k < results.size(); ++k)
      out.push_back(residual(Ref{Ref::Kind::Inst, idx, static_cast<int32_t>(k)}, results[k]));
    return out;
  }

  Value rebuild(const ir::Type& t, const Values& flat, size_t& k) {
    if (t->kind == ir::TypeKind::Tensor) return flat[k++];
    Values elems;
    for (const auto& e : t->elems) elems.push_back(rebuild(e, flat, k));
    return Value::tuple(std::move(elems));
  }

  Value fold(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
             Values* multi) {
    std::vector<Tensor> ins, outs;
    for (size_t i = 0; i < n; ++i) ins.push_back(args[i].as_tensor());
    try {
      ops::op_def(id).eval(ins, attr, outs);
    } catch (const Error& e) {
      throw Error(s.str() + ": error: " + ops::op_name(id) + ": " + e.what());
    }
    if (multi) {
      multi->clear();
      for (auto& o : outs) multi->push_back(Value::tensor(std::move(o)));
      return Value();
    }
    return Value::tensor(std::move(outs[0]));
  }
};

Value residualize_batch(PeBackend& be, const Value& v) {
  switch (v.kind()) {
  case Value::Kind::Tensor: return be.input(v.as_tensor());
  case Value::Kind::Tuple: {
    Values xs;
    for (const auto& x : v.items()) xs.push_back(residualize_batch(be, x));
    return Value::tuple(std::move(xs));
  }
  case Value::Kind::Adt: {
    Values xs;
    for (const auto& x : v.items()) xs.push_back(residualize_batch(be, x));
    return Value::adt(v.tag(), std::move(xs));
  }
  case Value::Kind::List: {
    Values xs;
    for (size_t i = 0; i < v.list_size(); ++i) xs.push_back(residualize_batch(be, v.list_at(i)));
    return Value::list(std::move(xs));
  }
  default: return v;
  }
}

} // namespace

uint64_t skeleton_hash(const Value& batch) {
  uint64_t h = 0x243f6a8885a308d3ull;
  size_t count = 0;
  hash_value(h, batch, count);
  return h;
}

bool is_template_eligible(const ir::FnDecl& f) {
  if (f.is_entry || !tensors_only(f.ret)) return false;
  bool any_tensor = false;
  for (const auto& p : f.params) {
    auto k = p.type->kind;
    if (k == ir::TypeKind::Tensor) any_tensor = true;
    else if (k != ir::TypeKind::Int && k != ir::TypeKind::Bool) return false;
  }
  return any_tensor;
}

PeResult partially_evaluate(const ir::Module& m, const interp::DimBindings& dims,
                            const std::string& entry, const Value& batch, TemplateTable& templates,
                            const PeOptions& opt) {
  ops::register_kernels();
  const ir::FnDecl* f = m.fn(entry);
  if (!f || !f->is_entry) throw Error("no entry named '" + entry + "' in the module");
  if (f->params.size() != 1)
    throw Error("entry '" + entry + "' must take one argument (the batch) to be specialized");
  interp::check_value(batch, f->params[0].type, m, dims, f->params[0].name);

  PeResult out;
  size_t values = 0;
  uint64_t h = skeleton_hash(batch);
  {
    uint64_t tmp = 0;
    hash_value(tmp, batch, values);
  }
  h = hash_str(h, entry);
  h = mix(h, m.cone_version(entry));
  for (const auto& [name, size] : dims) h = mix(hash_str(h, name), static_cast<uint64_t>(size));
  out.residual.key = h;

  PeBackend be(m, dims, templates, out.residual, PeOptions::kFuelBase + opt.fuel_per_value * values);
  try {
    Value arg = residualize_batch(be, batch);
    interp::Evaluator<PeBackend> ev(m, be, opt.max_depth);
    Value result = ev.call_entry(*f, {arg});
    be.collect_outputs(result);
    out.ok = true;
  } catch (const Refused& r) {
    out.ok = false;
    out.where = r.where;
    out.reason = r.reason;
    out.residual.instances.clear();
  }
  out.residual.fuel_used = be.fuel_used();
  return out;
}

} // namespace pejit::spec
