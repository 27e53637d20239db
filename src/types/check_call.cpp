// The Checker's typing of calls: of functions, constructors (and the list constructors Nil
// and Cons), closures, the list builtins and the tensor ops (leading tensor arguments, then Int
// arguments that fix shapes: literals, named dimensions and their sums and multiples). The
// operators are in check_operators.cpp.
#include "src/kernels/random.h"
#include "src/ops/op.h"
#include "src/types/builtins.h"
#include "src/types/checker.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace pejit::types::detail {

using namespace ir;

void Checker::check_args(const Call& c, const std::vector<Type>& params, const std::string& what) {
  if (c.args.size() != params.size()) {
    d_.error(c.span, what + " takes " + std::to_string(params.size()) + " argument" +
                         (params.size() == 1 ? "" : "s") + ", got " +
                         std::to_string(c.args.size()));
    for (const auto& a : c.args)
      check(a);
    return;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    Type t = check(c.args[i], params[i]);
    if (!type_equal(params[i], t))
      mismatch(*c.args[i], what + ", argument " + std::to_string(i + 1), params[i], t);
  }
}

std::optional<int64_t> Checker::int_literal(const Expr& e) {
  if (auto i = e->as<IntLit>())
    return i->value;
  if (auto u = e->as<Unary>(); u && u->op == UnOp::Neg)
    if (auto i = u->operand->as<IntLit>())
      return -i->value;
  return std::nullopt;
}

Type Checker::coerce_literal(const Expr& e, const Type& other) {
  auto lit = e->as<IntLit>();
  if (!lit || !other || other->kind != TypeKind::Tensor)
    return nullptr;
  if (other->elem == Elem::I32 && (lit->value < INT32_MIN || lit->value > INT32_MAX)) {
    d_.error(e->span, std::to_string(lit->value) + " does not fit an i32 tensor");
    return t_error();
  }
  lit->tensor_elem = other->elem;
  return set(*e, t_tensor(other->elem, {}));
}

Type Checker::check_call(const Call& c, const Type& expected) {
  const Var* name = c.callee->as<Var>();
  if (name && !lookup_local_only(name->name)) {
    const std::string& n = name->name;
    if (int fi = m_.fn_index(n); fi >= 0) {
      const auto& f = *m_.fns()[fi];
      c.ref = name->ref = {VarRef::Kind::Global, fi, -1};
      name->type = fn_type(f);
      uses_.insert(n);
      if (f.is_entry) {
        d_.error(c.callee->span, "entry '" + n + "' cannot be called from the program");
        return t_error();
      }
      std::vector<Type> ps;
      for (const auto& p : f.params)
        ps.push_back(p.type);
      check_args(c, ps, "function " + n);
      return f.ret;
    }
    auto [a, ci] = m_.ctor(n);
    if (a >= 0) {
      const auto& ctor = m_.adts()[a]->ctors[ci];
      c.ref = name->ref = {VarRef::Kind::Ctor, ci, a};
      uses_.insert(m_.adts()[a]->name);
      std::vector<Type> ps;
      for (const auto& f : ctor.fields)
        ps.push_back(f.type);
      check_args(c, ps, "constructor " + n);
      return t_adt(m_.adts()[a]->name);
    }
    if (n == "Nil" || n == "Cons")
      return check_list_ctor(c, n, expected);
    if (auto b = builtin_by_name(n))
      return check_builtin(c, *b);
    if (auto op = ops::op_by_name(n))
      return check_op(c, op->first, op->second);
    if (m_.param_index(n) >= 0) {
      d_.error(c.callee->span, "param '" + n + "' is a tensor, not a function");
      for (const auto& a : c.args)
        check(a);
      return t_error();
    }
    d_.error(c.callee->span, "unknown function '" + n + "'");
    for (const auto& a : c.args)
      check(a);
    return t_error();
  }
  // A closure call: the callee is a local variable or any expression of function type.
  Type ft = check(c.callee);
  if (name)
    c.ref = name->ref;
  if (is_error(ft)) {
    for (const auto& a : c.args)
      check(a);
    return t_error();
  }
  if (ft->kind != TypeKind::Func) {
    d_.error(c.callee->span, "called value has type " + type_str(ft) + ", not a function");
    for (const auto& a : c.args)
      check(a);
    return t_error();
  }
  check_args(c, ft->elems, "function value");
  return ft->result;
}

bool Checker::lookup_local_only(const std::string& n) {
  for (size_t k = frames_.size(); k-- > 0;) {
    for (const auto& b : frames_[k].scope)
      if (b.name == n)
        return true;
    for (const auto& cn : frames_[k].capture_names)
      if (cn == n)
        return true;
  }
  return false;
}

Type Checker::check_list_ctor(const Call& c, const std::string& n, const Type& expected) {
  c.ref = {VarRef::Kind::Ctor, n == "Nil" ? 0 : 1, kListAdt};
  if (auto v = c.callee->as<Var>())
    v->ref = c.ref;
  if (n == "Nil") {
    if (!c.args.empty())
      d_.error(c.span, "Nil takes no arguments");
    if (!is_kind(expected, TypeKind::List)) {
      d_.error(c.span, "cannot infer the element type of Nil here; annotate it");
      return t_error();
    }
    return expected;
  }
  if (c.args.size() != 2) {
    d_.error(c.span, "Cons takes 2 arguments (head, tail), got " + std::to_string(c.args.size()));
    for (const auto& a : c.args)
      check(a);
    return t_error();
  }
  Type elem_hint = is_kind(expected, TypeKind::List) ? expected->elems[0] : nullptr;
  Type h = check(c.args[0], elem_hint);
  Type lt = is_error(h) ? expected : t_list(h);
  Type t = check(c.args[1], lt);
  if (is_error(h) || is_error(t))
    return is_error(t) ? (is_error(h) ? t_error() : t_list(h)) : t;
  if (!type_equal(t, t_list(h)))
    return mismatch(*c.args[1], "Cons tail", t_list(h), t);
  return t_list(h);
}

Type Checker::check_builtin(const Call& c, Builtin b) {
  c.ref = {VarRef::Kind::Builtin, static_cast<int>(b), -1};
  if (auto v = c.callee->as<Var>())
    v->ref = c.ref;
  auto arity = [&](size_t n) {
    if (c.args.size() == n)
      return true;
    d_.error(c.span, std::string(builtin_name(b)) + " takes " + std::to_string(n) + " argument" +
                         (n == 1 ? "" : "s") + ", got " + std::to_string(c.args.size()));
    for (const auto& a : c.args)
      check(a);
    return false;
  };
  switch (b) {
  case Builtin::Map: {
    if (!arity(2))
      return t_error();
    Type xs = check(c.args[1]);
    if (is_error(xs)) {
      check(c.args[0]);
      return t_error();
    }
    if (xs->kind != TypeKind::List) {
      d_.error(c.args[1]->span, "map needs a list, got " + type_str(xs));
      check(c.args[0]);
      return t_error();
    }
    Type f = check(c.args[0], t_func({xs->elems[0]}, nullptr));
    if (is_error(f))
      return t_error();
    if (f->kind != TypeKind::Func || f->elems.size() != 1 ||
        !type_equal(f->elems[0], xs->elems[0])) {
      d_.error(c.args[0]->span,
               "map needs a function of one " + type_str(xs->elems[0]) + ", got " + type_str(f));
      return t_error();
    }
    return t_list(f->result);
  }
  case Builtin::Fold: {
    if (!arity(3))
      return t_error();
    Type init = check(c.args[1]);
    Type xs = check(c.args[2]);
    if (is_error(xs) || is_error(init)) {
      check(c.args[0]);
      return t_error();
    }
    if (xs->kind != TypeKind::List) {
      d_.error(c.args[2]->span, "fold needs a list, got " + type_str(xs));
      check(c.args[0]);
      return t_error();
    }
    Type want = t_func({init, xs->elems[0]}, init);
    Type f = check(c.args[0], want);
    if (is_error(f))
      return init;
    if (!type_equal(f, want))
      return mismatch(*c.args[0], "fold function", want, f);
    return init;
  }
  case Builtin::SumList: {
    if (!arity(1))
      return t_error();
    Type xs = check(c.args[0]);
    if (is_error(xs))
      return t_error();
    if (xs->kind != TypeKind::List || !is_kind(xs->elems[0], TypeKind::Tensor) ||
        xs->elems[0]->elem != Elem::F32) {
      d_.error(c.args[0]->span, "sum_list needs a List of f32 tensors, got " + type_str(xs));
      return t_error();
    }
    return xs->elems[0];
  }
  case Builtin::Length: {
    if (!arity(1))
      return t_error();
    Type xs = check(c.args[0]);
    if (!is_error(xs) && xs->kind != TypeKind::List) {
      d_.error(c.args[0]->span, "length needs a list, got " + type_str(xs));
      return t_error();
    }
    return t_int();
  }
  case Builtin::Append: {
    if (!arity(2))
      return t_error();
    Type a = check(c.args[0]);
    Type b = check(c.args[1], a);
    if (is_error(a) || is_error(b))
      return t_error();
    if (a->kind != TypeKind::List) {
      d_.error(c.args[0]->span, "append needs lists, got " + type_str(a));
      return t_error();
    }
    if (!type_equal(a, b))
      return mismatch(*c.args[1], "append", a, b);
    return a;
  }
  case Builtin::Reverse: {
    if (!arity(1))
      return t_error();
    Type xs = check(c.args[0]);
    if (is_error(xs))
      return t_error();
    if (xs->kind != TypeKind::List) {
      d_.error(c.args[0]->span, "reverse needs a list, got " + type_str(xs));
      return t_error();
    }
    return xs;
  }
  case Builtin::ToInt:
  case Builtin::ToBool: {
    if (!arity(1))
      return t_error();
    Type t = check(c.args[0]);
    if (!is_error(t) && !(t->kind == TypeKind::Tensor && t->dims.empty())) {
      d_.error(c.args[0]->span, std::string(builtin_name(b)) +
                                    " needs a 0-d tensor (f32[] or i32[]), got " + type_str(t));
      return t_error();
    }
    return b == Builtin::ToInt ? t_int() : t_bool();
  }
  }
  return t_error();
}

Type Checker::check_op(const Call& c, ops::OpId id, ops::Attr attr) {
  c.ref = {VarRef::Kind::Op, static_cast<int>(id), -1};
  if (auto v = c.callee->as<Var>())
    v->ref = c.ref;
  if (ops::is_random(id))
    return check_random_op(c, id);
  // A binary elementwise op (add ... ne) may take an Int literal for one operand: it becomes a
  // 0-d tensor of the other operand's element type. Types found here are not checked twice.
  std::vector<Type> pre(c.args.size());
  const ops::OpDef& def = ops::op_def(id);
  if (def.elementwise && def.min_tensors == 2 && def.max_tensors == 2 && def.max_ints == 0 &&
      c.args.size() == 2) {
    for (size_t k = 0; k < 2; ++k) {
      const Expr& lit = c.args[k];
      const Expr& other = c.args[1 - k];
      if (lit->as<IntLit>() && !other->as<IntLit>()) {
        pre[1 - k] = check(other);
        if (Type t = coerce_literal(lit, pre[1 - k]))
          pre[k] = t;
        break;
      }
    }
  }
  // Leading tensor arguments, then Int arguments (static attributes): literals, named
  // dimensions and their sums and multiples, which fix shapes.
  std::vector<Type> targs;
  std::vector<Dim> attrs;
  for (auto v : attr.ints) // splitN's N
    attrs.push_back(Dim::of(v));
  bool bad = false;
  bool in_attrs = false;
  for (size_t k = 0; k < pre.size(); ++k)
    if (pre[k] && is_error(pre[k]))
      return t_error();
  for (size_t i = 0; i < c.args.size(); ++i) {
    Type t = pre[i] ? pre[i] : check(c.args[i]);
    if (is_error(t)) { // said already; its kind is unknown, so the op's arity is not checked
      bad = true;
    } else if (is_kind(t, TypeKind::Int)) {
      in_attrs = true;
      auto d = dim_expr(c.args[i]);
      if (!d) {
        d_.error(c.args[i]->span, std::string(ops::op_name(id)) +
                                      ": an Int argument fixes a shape: it must be a literal, a "
                                      "dimension or their sums and multiples (such as 2*H+1)");
        bad = true;
      } else {
        attrs.push_back(*d);
      }
    } else if (in_attrs) {
      d_.error(c.args[i]->span,
               std::string(ops::op_name(id)) + ": tensor arguments must come before Int arguments");
      bad = true;
    } else {
      targs.push_back(t);
    }
  }
  c.tensor_args = static_cast<int>(targs.size());
  if (bad) {
    c.attr_ints.clear();
    return t_error();
  }
  return finish_op(c, id, targs, attrs);
}

std::optional<Dim> Checker::dim_expr(const Expr& e) {
  if (auto i = e->as<IntLit>())
    return Dim::of(i->value);
  if (auto v = e->as<Var>())
    return v->ref.kind == VarRef::Kind::Dim ? std::optional(Dim::named(v->name)) : std::nullopt;
  if (auto u = e->as<Unary>()) {
    auto x = u->op == UnOp::Neg ? dim_expr(u->operand) : std::nullopt;
    return x ? std::optional(x->scaled(-1)) : std::nullopt;
  }
  auto b = e->as<Binary>();
  if (!b)
    return std::nullopt;
  auto l = dim_expr(b->lhs);
  auto r = dim_expr(b->rhs);
  if (!l || !r)
    return std::nullopt;
  // Sizes far beyond any tensor's are refused rather than let the arithmetic overflow: sums
  // of terms below 2^62 and products of terms below 2^31 stay within 64 bits.
  auto below = [](const Dim& d, int64_t bound) {
    auto ok = [&](int64_t v) { return v > -bound && v < bound; };
    return ok(d.value) && std::all_of(d.terms.begin(), d.terms.end(),
                                      [&](const Dim::Term& t) { return ok(t.coeff); });
  };
  const bool product = b->op == BinOp::Mul;
  const int64_t bound = product ? int64_t{1} << 31 : int64_t{1} << 62;
  if (!below(*l, bound) || !below(*r, bound))
    return std::nullopt;
  switch (b->op) {
  case BinOp::Add:
    return *l + *r;
  case BinOp::Sub:
    return *l + r->scaled(-1);
  case BinOp::Mul:
    if (!l->is_named())
      return r->scaled(l->value);
    if (!r->is_named())
      return l->scaled(r->value);
    return std::nullopt;
  case BinOp::Div:
    if (r->is_named() || r->value <= 0)
      return std::nullopt;
    if (!l->is_named()) // Int division of constants, as the evaluator computes it
      return Dim::of(l->value / r->value);
    return l->divided(r->value);
  default:
    return std::nullopt;
  }
}

bool Checker::attr_dims(const Call& c, size_t from, const std::string& what,
                        std::vector<Dim>& out) {
  bool ok = true;
  for (size_t i = from; i < c.args.size(); ++i) {
    Type t = check(c.args[i]);
    if (is_error(t)) {
      ok = false;
      continue;
    }
    auto d = is_kind(t, TypeKind::Int) ? dim_expr(c.args[i]) : std::nullopt;
    if (!d) {
      d_.error(c.args[i]->span, what);
      ok = false;
      continue;
    }
    out.push_back(*d);
  }
  return ok;
}

Type Checker::finish_op(const Call& c, ops::OpId id, std::span<const Type> targs,
                        const std::vector<Dim>& attrs) {
  bool deferred = false;
  auto r = ops::op_result_type_dims(id, targs, attrs, deferred);
  c.attr_ints.clear();
  c.attr_dims.clear();
  for (const auto& d : attrs)
    c.attr_ints.push_back(d.is_named() ? 0 : d.value);
  if (deferred)
    c.attr_dims = attrs;
  if (!r.ok()) {
    d_.error(c.span, r.error);
    return t_error();
  }
  return r.type;
}

// A random op as written: dropout(x, P), bernoulli(P, d...), uniform(d...), normal(d...), with
// P a float literal. Its attributes get the registry's layout [j, p bits, dims...] (j is set by
// the evaluator) and its operands the key the evaluator adds (i32[6]), so that the shape rule
// is the graph's.
Type Checker::check_random_op(const Call& c, ops::OpId id) {
  const std::string nm = ops::op_name(id);
  const bool takes_x = id == ops::OpId::Dropout;
  const bool takes_p = id == ops::OpId::Dropout || id == ops::OpId::Bernoulli;
  std::vector<Type> targs;
  ops::Attr attr{{0}};
  size_t i = 0;
  bool bad = false;
  if (takes_x) {
    if (c.args.empty()) {
      d_.error(c.span, nm + " takes a tensor and a probability: dropout(x, 0.5)");
      return t_error();
    }
    targs.push_back(check(c.args[0]));
    i = 1;
  }
  if (takes_p) {
    const FloatLit* p = i < c.args.size() ? c.args[i]->as<FloatLit>() : nullptr;
    if (i < c.args.size())
      check(c.args[i]);
    double hi = id == ops::OpId::Dropout ? 1.0 : 1.0 + 1e-9;
    if (!p || !(p->value >= 0.0 && p->value < hi)) {
      d_.error(i < c.args.size() ? c.args[i]->span : c.span,
               nm + ": the probability must be a float literal in [0, 1" +
                   (id == ops::OpId::Dropout ? ")" : "]") + " (such as 0.5)");
      return t_error();
    }
    attr.ints.push_back(ops::random_p_bits(static_cast<float>(p->value)));
    ++i;
  }
  std::vector<Dim> attrs;
  for (auto v : attr.ints)
    attrs.push_back(Dim::of(v));
  bad = !attr_dims(c, i,
                   nm + ": dimensions must be Int literals, dimensions or their sums and "
                        "multiples (such as 2*H+1)",
                   attrs);
  c.tensor_args = static_cast<int>(targs.size());
  if (bad)
    return t_error();
  targs.push_back(ir::t_i32({kernels::kRandomKeyWidth}));
  return finish_op(c, id, targs, attrs);
}

} // namespace pejit::types::detail
