// The op table and every op's shape rule. Shape rules work on symbolic dimensions: a named
// dimension equals only itself, so `f32[V, 300]` checks before V is bound.
#include "src/ops/op.h"

#include "src/util/check.h"

#include <algorithm>
#include <bit>
#include <map>

namespace pejit::ops {

namespace {

constexpr OpDef make_def(OpId id, const char* nm, int tmin, int tmax, int imin, int imax,
                         RowRule row, KernelClass kernel, Identity identity, bool linear) {
  return OpDef{
      id, nm, tmin, tmax, imin, imax, row, kernel, identity, linear, row == RowRule::Elementwise};
}

OpDef g_ops[] = {
#define PEJIT_OP(Id, nm, tmin, tmax, imin, imax, row, kernel, identity, linear)                    \
  make_def(OpId::Id, nm, tmin, tmax, imin, imax, RowRule::row, KernelClass::kernel,                \
           Identity::identity, linear),
#include "src/ops/ops.def"
#undef PEJIT_OP
};

using ir::Dim;
using ir::Type;

std::string dims_str(const std::vector<Dim>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i)
    s += (i ? ", " : "") + d[i].str();
  return s + "]";
}

ShapeResult fail(std::string msg) {
  return {ir::t_error(), std::move(msg)};
}

bool want_tensor(const Type& t) {
  return ir::is_error(t) || t->kind == ir::TypeKind::Tensor;
}

// Normalizes a possibly negative axis against a rank; -1 if out of range.
int norm_axis(int64_t axis, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < 0)
    axis += r;
  return axis < 0 || axis >= r ? -1 : static_cast<int>(axis);
}

} // namespace

const OpDef& op_def(OpId id) {
  return g_ops[static_cast<size_t>(id)];
}
OpDef& op_def_mut(OpId id) {
  return g_ops[static_cast<size_t>(id)];
}

std::optional<std::pair<OpId, Attr>> op_by_name(const std::string& name) {
  static const std::map<std::string, OpId> by_name = [] {
    std::map<std::string, OpId> m;
    for (const auto& d : g_ops)
      m[d.name] = d.id;
    return m;
  }();
  auto it = by_name.find(name);
  if (it != by_name.end())
    return std::pair{it->second, Attr{}};
  // splitN(x) is split(x, N).
  if (name.size() > 5 && name.compare(0, 5, "split") == 0) {
    int64_t n = 0;
    for (size_t i = 5; i < name.size(); ++i) {
      if (name[i] < '0' || name[i] > '9' || n > 1000)
        return std::nullopt;
      n = n * 10 + (name[i] - '0');
    }
    if (n >= 1)
      return std::pair{OpId::Split, Attr{{n}}};
  }
  return std::nullopt;
}

std::optional<float> left_identity(OpId id) {
  switch (op_def(id).identity) {
  case Identity::Zero:
    return 0.0f;
  case Identity::One:
    return 1.0f;
  default:
    return std::nullopt;
  }
}

std::optional<float> right_identity(OpId id) {
  switch (op_def(id).identity) {
  case Identity::Zero:
  case Identity::RightZero:
    return 0.0f;
  case Identity::One:
  case Identity::RightOne:
    return 1.0f;
  case Identity::None:
    break;
  }
  return std::nullopt;
}

int op_num_results(OpId id, const Attr& attr) {
  return id == OpId::Split && !attr.ints.empty() ? static_cast<int>(attr.ints[0]) : 1;
}

bool broadcast_dims(const std::vector<Dim>& a, const std::vector<Dim>& b, std::vector<Dim>& out) {
  size_t n = std::max(a.size(), b.size());
  out.assign(n, Dim::of(1));
  for (size_t i = 0; i < n; ++i) {
    const Dim* da = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const Dim* db = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    auto is_one = [](const Dim* d) { return !d || (!d->is_named() && d->value == 1); };
    if (is_one(da))
      out[i] = db ? *db : Dim::of(1);
    else if (is_one(db) || *da == *db)
      out[i] = *da;
    else
      return false;
  }
  return true;
}

ShapeResult op_result_type(OpId id, std::span<const Type> args, const Attr& attr) {
  const OpDef& def = op_def(id);
  const std::string nm = def.name;
  int nt = static_cast<int>(args.size());
  if (nt < def.min_tensors || (def.max_tensors >= 0 && nt > def.max_tensors)) {
    std::string want = def.max_tensors == def.min_tensors
                           ? std::to_string(def.min_tensors)
                           : (def.max_tensors < 0 ? "at least " + std::to_string(def.min_tensors)
                                                  : std::to_string(def.min_tensors) + " to " +
                                                        std::to_string(def.max_tensors));
    return fail(nm + " takes " + want + " tensor argument" + (want == "1" ? "" : "s") + ", got " +
                std::to_string(nt));
  }
  int ni = static_cast<int>(attr.ints.size());
  if (ni < def.min_ints || ni > def.max_ints)
    return fail(nm + " takes " +
                (def.min_ints == def.max_ints
                     ? std::to_string(def.min_ints)
                     : std::to_string(def.min_ints) + " to " + std::to_string(def.max_ints)) +
                " Int argument(s), got " + std::to_string(ni));
  for (int i = 0; i < nt; ++i)
    if (!want_tensor(args[i]))
      return fail(nm + ": argument " + std::to_string(i + 1) + " must be a tensor, got " +
                  ir::type_str(args[i]));
  for (const auto& a : args)
    if (ir::is_error(a))
      return {ir::t_error(), ""};

  auto T = [&](int i) -> const ir::TypeNode& { return *args[i]; };
  auto need_f32 = [&](int i) -> std::string {
    return T(i).elem == ir::Elem::F32 ? ""
                                      : nm + ": argument " + std::to_string(i + 1) +
                                            " must be f32, got " + ir::type_str(args[i]);
  };

  switch (id) {
  case OpId::MatMul: {
    if (auto e = need_f32(0); !e.empty())
      return fail(e);
    if (auto e = need_f32(1); !e.empty())
      return fail(e);
    const auto& a = T(0).dims;
    const auto& b = T(1).dims;
    if (a.empty() || b.empty() || a.size() > 2 || b.size() > 2)
      return fail("matmul needs 1-D or 2-D operands, got " + dims_str(a) + " @ " + dims_str(b));
    const Dim& ka = a.back();
    const Dim& kb = b.size() == 2 ? b[0] : b[0];
    if (!(ka == kb))
      return fail("matmul: inner dimensions differ: " + dims_str(a) + " @ " + dims_str(b));
    std::vector<Dim> out;
    if (a.size() == 2)
      out.push_back(a[0]);
    if (b.size() == 2)
      out.push_back(b[1]);
    if (a.size() == 1 && b.size() == 1)
      out.clear();
    return {ir::t_tensor(ir::Elem::F32, out), ""};
  }
  case OpId::Add:
  case OpId::Sub:
  case OpId::Mul:
  case OpId::Div:
  case OpId::Lt:
  case OpId::Le:
  case OpId::Gt:
  case OpId::Ge:
  case OpId::Eq:
  case OpId::Ne: {
    if (T(0).elem != T(1).elem)
      return fail(nm + ": element types differ: " + ir::type_str(args[0]) + " and " +
                  ir::type_str(args[1]) + " (convert with to_f32 or to_i32)");
    std::vector<Dim> out;
    if (!broadcast_dims(T(0).dims, T(1).dims, out))
      return fail(nm + ": shapes " + dims_str(T(0).dims) + " and " + dims_str(T(1).dims) +
                  " do not broadcast");
    return {ir::t_tensor(T(0).elem, out), ""};
  }
  case OpId::Neg:
    return {args[0], ""};
  case OpId::Exp:
  case OpId::Log:
  case OpId::Tanh:
  case OpId::Sigmoid:
  case OpId::Relu:
  case OpId::Softmax:
  case OpId::LogSoftmax:
    if (auto e = need_f32(0); !e.empty())
      return fail(e);
    if ((id == OpId::Softmax || id == OpId::LogSoftmax) && T(0).dims.empty())
      return fail(nm + " needs at least one dimension");
    return {args[0], ""};
  case OpId::ToF32:
    return {ir::t_tensor(ir::Elem::F32, T(0).dims), ""};
  case OpId::ToI32:
    return {ir::t_tensor(ir::Elem::I32, T(0).dims), ""};
  case OpId::Sum:
  case OpId::Mean: {
    if (id == OpId::Mean)
      if (auto e = need_f32(0); !e.empty())
        return fail(e);
    if (attr.ints.empty())
      return {ir::t_tensor(T(0).elem, {}), ""};
    int ax = norm_axis(attr.ints[0], T(0).dims.size());
    if (ax < 0)
      return fail(nm + ": axis " + std::to_string(attr.ints[0]) + " out of range for " +
                  dims_str(T(0).dims));
    auto d = T(0).dims;
    d.erase(d.begin() + ax);
    return {ir::t_tensor(T(0).elem, d), ""};
  }
  case OpId::Concat: {
    const auto& d0 = T(0).dims;
    if (d0.empty())
      return fail("concat needs tensors of rank >= 1, got " + ir::type_str(args[0]));
    Dim last = Dim::of(0);
    for (int i = 0; i < nt; ++i) {
      const auto& di = T(i).dims;
      if (T(i).elem != T(0).elem || di.size() != d0.size())
        return fail("concat: argument " + std::to_string(i + 1) + " is " + ir::type_str(args[i]) +
                    ", expected the element type and rank of " + ir::type_str(args[0]));
      for (size_t k = 0; k + 1 < d0.size(); ++k)
        if (!(di[k] == d0[k]))
          return fail("concat: leading dimensions differ: " + dims_str(d0) + " and " +
                      dims_str(di));
      last = last + di.back();
    }
    auto d = d0;
    d.back() = last;
    return {ir::t_tensor(T(0).elem, d), ""};
  }
  case OpId::Split: {
    int64_t n = attr.ints[0];
    const auto& d = T(0).dims;
    if (d.empty())
      return fail("split needs a tensor of rank >= 1, got " + ir::type_str(args[0]));
    auto each = n >= 1 ? d.back().divided(n) : std::nullopt;
    if (!each)
      return fail("split: " + d.back().str() + " is not divisible into " + std::to_string(n) +
                  " parts");
    auto part = d;
    part.back() = *each;
    std::vector<Type> elems(static_cast<size_t>(n), ir::t_tensor(T(0).elem, part));
    return {ir::t_tuple(std::move(elems)), ""};
  }
  case OpId::Slice: {
    const auto& d = T(0).dims;
    if (d.empty() || d.back().is_named())
      return fail("slice needs a constant last dimension, got " + ir::type_str(args[0]));
    int64_t s = attr.ints[0], e = attr.ints[1];
    if (s < 0 || e < s || e > d.back().value)
      return fail("slice: range [" + std::to_string(s) + ", " + std::to_string(e) +
                  ") out of bounds for last dimension " + std::to_string(d.back().value));
    auto out = d;
    out.back() = Dim::of(e - s);
    return {ir::t_tensor(T(0).elem, out), ""};
  }
  case OpId::Reshape: {
    int64_t n = 1, m = 1;
    for (const auto& d : T(0).dims) {
      if (d.is_named())
        return fail("reshape needs constant dimensions, got " + ir::type_str(args[0]));
      n *= d.value;
    }
    std::vector<Dim> out;
    for (auto v : attr.ints) {
      if (v < 0)
        return fail("reshape: negative dimension " + std::to_string(v));
      m *= v;
      out.push_back(Dim::of(v));
    }
    if (n != m)
      return fail("reshape: " + ir::type_str(args[0]) + " has " + std::to_string(n) +
                  " elements, the new shape " + dims_str(out) + " has " + std::to_string(m));
    return {ir::t_tensor(T(0).elem, out), ""};
  }
  case OpId::Transpose: {
    const auto& d = T(0).dims;
    if (d.size() != 2)
      return fail("transpose needs a 2-D tensor, got " + ir::type_str(args[0]));
    return {ir::t_tensor(T(0).elem, {d[1], d[0]}), ""};
  }
  case OpId::Take: {
    const auto& t = T(0).dims;
    if (t.empty())
      return fail("take: the table must have rank >= 1, got " + ir::type_str(args[0]));
    if (T(1).elem != ir::Elem::I32)
      return fail("take: indices must be i32, got " + ir::type_str(args[1]));
    auto out = T(1).dims;
    out.insert(out.end(), t.begin() + 1, t.end());
    return {ir::t_tensor(T(0).elem, out), ""};
  }
  case OpId::CrossEntropy: {
    if (auto e = need_f32(0); !e.empty())
      return fail(e);
    if (T(1).elem != ir::Elem::I32)
      return fail("cross_entropy: labels must be i32, got " + ir::type_str(args[1]));
    const auto& l = T(0).dims;
    const auto& y = T(1).dims;
    if (l.size() != y.size() + 1)
      return fail("cross_entropy: logits " + dims_str(l) + " need labels of rank " +
                  std::to_string(l.size() - (l.empty() ? 0 : 1)) + ", got " + dims_str(y));
    for (size_t i = 0; i < y.size(); ++i)
      if (!(l[i] == y[i]))
        return fail("cross_entropy: logits " + dims_str(l) + " and labels " + dims_str(y) +
                    " disagree");
    return {ir::t_tensor(ir::Elem::F32, y), ""};
  }
  case OpId::Argmax: {
    const auto& d = T(0).dims;
    if (d.empty())
      return fail("argmax needs at least one dimension");
    return {ir::t_tensor(ir::Elem::I32, std::vector<Dim>(d.begin(), d.end() - 1)), ""};
  }
  case OpId::Zeros:
  case OpId::Ones:
  case OpId::Full: {
    std::vector<Dim> out;
    for (auto v : attr.ints) {
      if (v < 0)
        return fail(nm + ": negative dimension " + std::to_string(v));
      out.push_back(Dim::of(v));
    }
    if (id == OpId::Full) {
      if (!T(0).dims.empty())
        return fail("full: the value must be a scalar tensor (f32[] or i32[]), got " +
                    ir::type_str(args[0]));
      return {ir::t_tensor(T(0).elem, out), ""};
    }
    return {ir::t_tensor(ir::Elem::F32, out), ""};
  }
  case OpId::Dropout:
    if (auto e = need_f32(0); !e.empty())
      return fail(e);
    return {args[0], ""};
  case OpId::Bernoulli:
  case OpId::Uniform:
  case OpId::Normal: {
    std::vector<Dim> out;
    for (size_t i = id == OpId::Bernoulli ? 2 : 1; i < attr.ints.size(); ++i) {
      if (attr.ints[i] < 0)
        return fail(nm + ": negative dimension " + std::to_string(attr.ints[i]));
      out.push_back(Dim::of(attr.ints[i]));
    }
    return {ir::t_tensor(ir::Elem::F32, out), ""};
  }
  case OpId::Count:
    break;
  }
  PEJIT_CHECK(false) << "no shape rule for op " << nm;
}

ShapeResult op_result_type_dims(OpId id, std::span<const Type> args, std::span<const Dim> attrs,
                                bool& deferred) {
  deferred = false;
  const std::string nm = op_def(id).name;
  Attr consts;
  bool named = false;
  for (const auto& d : attrs) {
    named = named || d.is_named();
    consts.ints.push_back(d.value);
  }
  auto named_operand = [&](bool last_only) {
    if (args.size() != 1 || ir::is_error(args[0]) || !args[0]->is_tensor())
      return false;
    const auto& d = args[0]->dims;
    if (last_only)
      return !d.empty() && d.back().is_named();
    return std::any_of(d.begin(), d.end(), [](const Dim& x) { return x.is_named(); });
  };
  const bool symbolic = named || (id == OpId::Slice && named_operand(true)) ||
                        (id == OpId::Reshape && named_operand(false));
  const OpDef& def = op_def(id);
  const int ni = static_cast<int>(attrs.size());
  // Constant throughout, or a wrong count of arguments: the plain rule says it.
  if (!symbolic || ni < def.min_ints || ni > def.max_ints)
    return op_result_type(id, args, consts);
  // Operands and the attributes that must stay constant first, by the plain rule on a
  // rank-0 result (zeros, random) or on placeholders.
  switch (id) {
  case OpId::Zeros:
  case OpId::Ones:
  case OpId::Full:
  case OpId::Bernoulli:
  case OpId::Uniform:
  case OpId::Normal: {
    const size_t first = id == OpId::Bernoulli ? 2 : (ops::is_random(id) ? 1 : 0);
    Attr head;
    head.ints.assign(consts.ints.begin(), consts.ints.begin() + static_cast<ptrdiff_t>(first));
    ShapeResult r = op_result_type(id, args, head);
    if (!r.ok() || ir::is_error(r.type))
      return r;
    std::vector<Dim> out;
    for (size_t k = first; k < attrs.size(); ++k) {
      if (!attrs[k].is_named() && attrs[k].value < 0)
        return fail(nm + ": negative dimension " + attrs[k].str());
      deferred = deferred || attrs[k].is_named();
      out.push_back(attrs[k]);
    }
    return {ir::t_tensor(r.type->elem, out), ""};
  }
  case OpId::Slice:
  case OpId::Reshape: {
    // The plain rule on a constant stand-in checks the operand count and kinds.
    if (args.size() != 1 || ir::is_error(args[0]) || !args[0]->is_tensor())
      return op_result_type(id, args, consts);
    const auto& d = args[0]->dims;
    if (id == OpId::Reshape) {
      for (const auto& a : attrs)
        if (!a.is_named() && a.value < 0)
          return fail("reshape: negative dimension " + a.str());
      deferred = true;
      return {ir::t_tensor(args[0]->elem, std::vector<Dim>(attrs.begin(), attrs.end())), ""};
    }
    if (d.empty())
      return fail("slice needs a tensor of rank >= 1, got " + ir::type_str(args[0]));
    const Dim& s = attrs[0];
    const Dim& e = attrs[1];
    const Dim len = e + s.scaled(-1);
    const Dim rest = d.back() + e.scaled(-1);
    for (const Dim* x : {&s, &len, &rest})
      if (!x->is_named() && x->value < 0)
        return fail("slice: range [" + s.str() + ", " + e.str() +
                    ") out of bounds for last dimension " + d.back().str());
    deferred = s.is_named() || len.is_named() || rest.is_named();
    auto out = d;
    out.back() = len;
    return {ir::t_tensor(args[0]->elem, out), ""};
  }
  case OpId::Sum:
  case OpId::Mean:
    return fail(nm + ": the axis must be a constant (it fixes the result's rank), got " +
                attrs[0].str());
  case OpId::Split:
    return fail("split: the number of parts must be a constant (it fixes the number of "
                "results), got " +
                attrs[0].str());
  default:
    break;
  }
  return op_result_type(id, args, consts);
}

float random_p(const Attr& attr) {
  PEJIT_CHECK(attr.ints.size() >= 2) << "a random op's attributes: [j, p, ...]";
  return std::bit_cast<float>(static_cast<uint32_t>(attr.ints[1]));
}

int64_t random_p_bits(float p) {
  return static_cast<int64_t>(std::bit_cast<uint32_t>(p));
}

} // namespace pejit::ops
