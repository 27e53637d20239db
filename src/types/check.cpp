// Type checking and name resolution of function bodies. Bidirectional: an expected type flows
// into lambdas, `[]`/`Nil` and branches; everything else is synthesized bottom-up. Each binder
// gets a slot in its function's (or lambda's) frame; a name used inside a lambda but bound
// outside it becomes a capture. One error per mistake: an ill-typed subexpression has the
// error type, which is equal to everything, so it does not cascade.
#include "types/check.h"

#include "ops/op.h"
#include "parse/parser.h"
#include "types/binding_time.h"
#include "types/builtins.h"
#include "util/check.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace pejit::types {

using namespace ir;

std::optional<Builtin> builtin_by_name(const std::string& name) {
  static const std::map<std::string, Builtin> m = {
      {"map", Builtin::Map},       {"fold", Builtin::Fold},    {"sum_list", Builtin::SumList},
      {"length", Builtin::Length}, {"to_int", Builtin::ToInt}, {"to_bool", Builtin::ToBool},
      {"append", Builtin::Append}};
  auto it = m.find(name);
  if (it == m.end())
    return std::nullopt;
  return it->second;
}

const char* builtin_name(Builtin b) {
  switch (b) {
  case Builtin::Map:
    return "map";
  case Builtin::Fold:
    return "fold";
  case Builtin::SumList:
    return "sum_list";
  case Builtin::Length:
    return "length";
  case Builtin::ToInt:
    return "to_int";
  case Builtin::ToBool:
    return "to_bool";
  case Builtin::Append:
    return "append";
  }
  return "?";
}

namespace {

struct Binding {
  std::string name;
  int slot;
  Type type;
};

struct Frame {
  std::vector<Binding> scope;
  int next_slot = 0;
  std::vector<std::string> capture_names;
  std::vector<Type> capture_types;
  std::vector<VarRef> capture_refs;
};

struct Resolved {
  VarRef ref;
  Type type;
};

bool is_kind(const Type& t, TypeKind k) {
  return !is_error(t) && t->kind == k;
}

class Checker {
public:
  Checker(const Module& m, Diagnostics& d) : m_(m), d_(d) {}

  // Checks a declaration's signature-level well-formedness (types exist, dims declared).
  void check_decl(const Decl& decl) {
    switch (decl.kind) {
    case DeclKind::Type:
      for (const auto& c : decl.type->ctors) {
        std::set<std::string> seen;
        for (const auto& f : c.fields) {
          if (!seen.insert(f.name).second)
            d_.error(f.span, "duplicate field '" + f.name + "' in constructor " + c.name);
          check_type_wf(f.type, f.span);
          if (!is_first_order(f.type))
            d_.error(f.span, "constructor fields must be data, not functions");
        }
        auto [a, ci] = m_.ctor(c.name);
        if (a >= 0 && m_.adts()[a]->name != decl.type->name)
          d_.error(c.span,
                   "constructor " + c.name + " is already defined by type " + m_.adts()[a]->name);
        if (c.name == "Nil" || c.name == "Cons")
          d_.error(c.span, "'" + c.name + "' is the built-in list constructor");
      }
      break;
    case DeclKind::Dim:
      if (decl.dim->default_value && *decl.dim->default_value <= 0)
        d_.error(decl.dim->span, "dimension " + decl.dim->name + " must be positive");
      break;
    case DeclKind::Param: {
      const auto& p = *decl.param;
      check_type_wf(p.type, p.span);
      if (!is_kind(p.type, TypeKind::Tensor) || p.type->elem != Elem::F32)
        d_.error(p.span, "param " + p.name + " must be an f32 tensor, got " + type_str(p.type));
      else if (p.init.kind == Init::Kind::Xavier && p.type->dims.size() < 1)
        d_.error(p.span, "xavier initialization needs a tensor of rank >= 1");
      if (p.init.kind == Init::Kind::Normal && p.init.b < 0)
        d_.error(p.span, "normal(mean, stddev): stddev must be >= 0");
      if (p.init.kind == Init::Kind::Uniform && p.init.b < p.init.a)
        d_.error(p.span, "uniform(low, high): high must be >= low");
      break;
    }
    case DeclKind::Fn: {
      const auto& f = *decl.fn;
      std::set<std::string> seen;
      for (const auto& p : f.params) {
        if (!seen.insert(p.name).second)
          d_.error(p.span, "duplicate parameter '" + p.name + "'");
        check_type_wf(p.type, p.span);
        if (f.is_entry && !is_first_order(p.type))
          d_.error(p.span, "entry arguments must be first-order data, got " + type_str(p.type));
      }
      check_type_wf(f.ret, f.span);
      if (builtin_by_name(f.name) || ops::op_by_name(f.name))
        d_.error(f.span, "'" + f.name + "' is a built-in name and cannot be redefined");
      break;
    }
    }
  }

  // Type checks a function body; fills annotations and returns the names the body uses.
  std::set<std::string> check_fn(const FnDecl& f) {
    uses_.clear();
    frames_.clear();
    frames_.emplace_back();
    f.param_slots.clear();
    for (const auto& p : f.params) {
      f.param_slots.push_back(bind(p.name, p.type));
      note_type_uses(p.type);
    }
    note_type_uses(f.ret);
    check(f.body, f.ret);
    if (!is_error(f.body->type) && !type_equal(f.body->type, f.ret))
      d_.error(f.body->span, "function " + f.name + " returns " + type_str(f.ret) +
                                 " but its body has type " + type_str(f.body->type));
    f.frame_size = frames_.back().next_slot;
    f.checked = true;
    frames_.clear();
    return uses_;
  }

private:
  const Module& m_;
  Diagnostics& d_;
  std::vector<Frame> frames_;
  std::set<std::string> uses_;

  void note_type_uses(const Type& t) {
    if (!t)
      return;
    if (t->kind == TypeKind::Adt)
      uses_.insert(t->name);
    for (const auto& e : t->elems)
      note_type_uses(e);
    note_type_uses(t->result);
  }

  void check_type_wf(const Type& t, const Span& s) {
    if (!t)
      return;
    switch (t->kind) {
    case TypeKind::Adt:
      if (!m_.adt(t->name))
        d_.error(s, "unknown type '" + t->name + "'");
      break;
    case TypeKind::Tensor:
      for (const auto& dim : t->dims) {
        if (dim.is_named() && m_.dim_index(dim.name) < 0)
          d_.error(s,
                   "unknown dimension '" + dim.name + "' (declare it with `dim " + dim.name + "`)");
        if (!dim.is_named() && dim.value < 0)
          d_.error(s, "negative dimension");
      }
      break;
    default:
      for (const auto& e : t->elems)
        check_type_wf(e, s);
      if (t->result)
        check_type_wf(t->result, s);
    }
  }

  int bind(const std::string& name, Type t) {
    Frame& f = frames_.back();
    int slot = f.next_slot++;
    f.scope.push_back({name, slot, std::move(t)});
    return slot;
  }

  void bind_pattern(const Pattern& p, const Type& t) {
    switch (p.kind) {
    case Pattern::Kind::Wild:
      break;
    case Pattern::Kind::Name:
      p.slot = bind(p.name, t);
      break;
    case Pattern::Kind::Tuple:
      if (!is_error(t) && (t->kind != TypeKind::Tuple || t->elems.size() != p.elems.size())) {
        d_.error(p.span, "pattern of " + std::to_string(p.elems.size()) +
                             " elements cannot destructure " + type_str(t));
        for (const auto& e : p.elems)
          bind_pattern(e, t_error());
        return;
      }
      for (size_t i = 0; i < p.elems.size(); ++i)
        bind_pattern(p.elems[i], is_error(t) ? t_error() : t->elems[i]);
      break;
    }
  }

  std::optional<Resolved> lookup(const std::string& name, size_t k) {
    Frame& f = frames_[k];
    for (auto it = f.scope.rbegin(); it != f.scope.rend(); ++it)
      if (it->name == name)
        return Resolved{{VarRef::Kind::Local, it->slot, -1}, it->type};
    for (size_t i = 0; i < f.capture_names.size(); ++i)
      if (f.capture_names[i] == name)
        return Resolved{{VarRef::Kind::Capture, static_cast<int>(i), -1}, f.capture_types[i]};
    if (k == 0)
      return std::nullopt;
    auto outer = lookup(name, k - 1);
    if (!outer)
      return std::nullopt;
    f.capture_names.push_back(name);
    f.capture_types.push_back(outer->type);
    f.capture_refs.push_back(outer->ref);
    return Resolved{{VarRef::Kind::Capture, static_cast<int>(f.capture_names.size() - 1), -1},
                    outer->type};
  }

  Type fn_type(const FnDecl& f) {
    std::vector<Type> ps;
    for (const auto& p : f.params)
      ps.push_back(p.type);
    return t_func(ps, f.ret);
  }

  Type set(const ExprNode& e, Type t) {
    e.type = t;
    return t;
  }

  Type mismatch(const ExprNode& e, const std::string& what, const Type& want, const Type& got) {
    d_.error(e.span, what + ": expected " + type_str(want) + ", got " + type_str(got));
    return t_error();
  }

  // Checks `e`, with `expected` (may be null) as a hint; returns and records its type.
  Type check(const Expr& e, const Type& expected = nullptr) {
    switch (e->kind) {
    case ExprKind::IntLit:
      return set(*e, t_int());
    case ExprKind::BoolLit:
      return set(*e, t_bool());
    case ExprKind::FloatLit:
      return set(*e, t_f32({}));
    case ExprKind::Var:
      return set(*e, check_var(e->cast<Var>()));
    case ExprKind::Call:
      return set(*e, check_call(e->cast<Call>(), expected));
    case ExprKind::Binary:
      return set(*e, check_binary(e->cast<Binary>()));
    case ExprKind::Unary:
      return set(*e, check_unary(e->cast<Unary>()));
    case ExprKind::Tuple: {
      const auto& t = e->cast<ir::Tuple>();
      std::vector<Type> ts;
      for (size_t i = 0; i < t.elems.size(); ++i) {
        Type hint = is_kind(expected, TypeKind::Tuple) && expected->elems.size() == t.elems.size()
                        ? expected->elems[i]
                        : nullptr;
        ts.push_back(check(t.elems[i], hint));
      }
      return set(*e, t_tuple(ts));
    }
    case ExprKind::Proj: {
      const auto& p = e->cast<Proj>();
      Type t = check(p.tuple);
      if (is_error(t))
        return set(*e, t_error());
      if (t->kind != TypeKind::Tuple) {
        d_.error(e->span, "." + std::to_string(p.index) + " needs a tuple, got " + type_str(t));
        return set(*e, t_error());
      }
      if (p.index < 0 || static_cast<size_t>(p.index) >= t->elems.size()) {
        d_.error(e->span,
                 "tuple index " + std::to_string(p.index) + " out of range for " + type_str(t));
        return set(*e, t_error());
      }
      return set(*e, t->elems[p.index]);
    }
    case ExprKind::Let: {
      const auto& l = e->cast<Let>();
      Type want = l.annot ? *l.annot : nullptr;
      if (want)
        check_type_wf(want, l.pattern.span);
      Type vt = check(l.value, want);
      if (want && !type_equal(want, vt)) {
        mismatch(*l.value, "let", want, vt);
        vt = want;
      }
      size_t mark = frames_.back().scope.size();
      bind_pattern(l.pattern, want ? want : vt);
      Type bt = check(l.body, expected);
      frames_.back().scope.resize(mark);
      return set(*e, bt);
    }
    case ExprKind::If: {
      const auto& i = e->cast<If>();
      Type c = check(i.cond, t_bool());
      if (!is_error(c) && c->kind != TypeKind::Bool) {
        if (c->kind == TypeKind::Tensor)
          d_.error(i.cond->span, "condition is a tensor (" + type_str(c) +
                                     "); turn it into a Bool explicitly with to_bool(...)");
        else
          d_.error(i.cond->span, "condition must be Bool, got " + type_str(c));
      }
      Type a = check(i.then_e, expected);
      Type b = check(i.else_e, is_error(a) ? expected : a);
      if (!type_equal(a, b)) {
        d_.error(i.else_e->span, "branches of if differ: " + type_str(a) + " and " + type_str(b));
        return set(*e, t_error());
      }
      return set(*e, is_error(a) ? b : a);
    }
    case ExprKind::Match:
      return set(*e, check_match(e->cast<Match>(), expected));
    case ExprKind::Lambda:
      return set(*e, check_lambda(e->cast<Lambda>(), expected));
    case ExprKind::ListLit: {
      const auto& l = e->cast<ListLit>();
      Type elem = is_kind(expected, TypeKind::List) ? expected->elems[0] : nullptr;
      for (const auto& x : l.elems) {
        Type t = check(x, elem);
        if (!elem || is_error(elem))
          elem = t;
        else if (!type_equal(elem, t))
          mismatch(*x, "list element", elem, t);
      }
      if (!elem) {
        d_.error(e->span,
                 "cannot infer the element type of []; annotate it (let xs: List[T] = [])");
        return set(*e, t_error());
      }
      return set(*e, t_list(elem));
    }
    }
    PEJIT_CHECK(false) << "unknown expression kind";
  }

  Type check_var(const Var& v) {
    if (auto r = lookup(v.name, frames_.size() - 1)) {
      v.ref = r->ref;
      return r->type;
    }
    if (int fi = m_.fn_index(v.name); fi >= 0) {
      v.ref = {VarRef::Kind::Global, fi, -1};
      uses_.insert(v.name);
      const auto& f = *m_.fns()[fi];
      if (f.is_entry) {
        d_.error(v.span, "entry '" + v.name + "' cannot be used as a value or called");
        return t_error();
      }
      return fn_type(f);
    }
    if (int pi = m_.param_index(v.name); pi >= 0) {
      v.ref = {VarRef::Kind::Param, pi, -1};
      uses_.insert(v.name);
      return m_.params()[pi]->type;
    }
    auto [a, c] = m_.ctor(v.name);
    if (a >= 0) {
      const auto& ctor = m_.adts()[a]->ctors[c];
      uses_.insert(m_.adts()[a]->name);
      if (!ctor.fields.empty()) {
        d_.error(v.span, "constructor " + v.name + " takes " + std::to_string(ctor.fields.size()) +
                             " arguments");
        return t_error();
      }
      v.ref = {VarRef::Kind::Ctor, c, a};
      return t_adt(m_.adts()[a]->name);
    }
    if (v.name == "Nil") {
      d_.error(v.span, "cannot infer the element type of Nil here; annotate it");
      return t_error();
    }
    if (builtin_by_name(v.name) || ops::op_by_name(v.name) || v.name == "Cons") {
      d_.error(v.span, "'" + v.name +
                           "' is built in and cannot be used as a value; wrap it in a "
                           "lambda: fn x => " +
                           v.name + "(x)");
      return t_error();
    }
    d_.error(v.span, "unknown name '" + v.name + "'");
    return t_error();
  }

  // Checks an argument list against parameter types.
  void check_args(const Call& c, const std::vector<Type>& params, const std::string& what) {
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

  static std::optional<int64_t> int_literal(const Expr& e) {
    if (auto i = e->as<IntLit>())
      return i->value;
    if (auto u = e->as<Unary>(); u && u->op == UnOp::Neg)
      if (auto i = u->operand->as<IntLit>())
        return -i->value;
    return std::nullopt;
  }

  Type check_call(const Call& c, const Type& expected) {
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

  bool lookup_local_only(const std::string& n) {
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

  Type check_list_ctor(const Call& c, const std::string& n, const Type& expected) {
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

  Type check_builtin(const Call& c, Builtin b) {
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

  Type check_op(const Call& c, ops::OpId id, ops::Attr attr) {
    c.ref = {VarRef::Kind::Op, static_cast<int>(id), -1};
    if (auto v = c.callee->as<Var>())
      v->ref = c.ref;
    // Leading tensor arguments, then Int literals (static attributes).
    std::vector<Type> targs;
    size_t i = 0;
    bool bad = false;
    for (; i < c.args.size(); ++i) {
      if (int_literal(c.args[i]))
        break;
      Type t = check(c.args[i]);
      if (is_kind(t, TypeKind::Int)) {
        d_.error(c.args[i]->span, std::string(ops::op_name(id)) +
                                      ": Int arguments must be literals (they fix shapes)");
        bad = true;
      }
      targs.push_back(t);
    }
    for (; i < c.args.size(); ++i) {
      check(c.args[i]);
      auto v = int_literal(c.args[i]);
      if (!v) {
        d_.error(c.args[i]->span, std::string(ops::op_name(id)) +
                                      ": tensor arguments must come before Int arguments");
        bad = true;
        continue;
      }
      attr.ints.push_back(*v);
    }
    c.attr_ints = attr.ints;
    c.tensor_args = static_cast<int>(targs.size());
    if (bad)
      return t_error();
    auto r = ops::op_result_type(id, targs, attr);
    if (!r.ok()) {
      d_.error(c.span, r.error);
      return t_error();
    }
    return r.type;
  }

  static std::optional<ops::OpId> tensor_binop(BinOp op) {
    switch (op) {
    case BinOp::Add:
      return ops::OpId::Add;
    case BinOp::Sub:
      return ops::OpId::Sub;
    case BinOp::Mul:
      return ops::OpId::Mul;
    case BinOp::Div:
      return ops::OpId::Div;
    case BinOp::MatMul:
      return ops::OpId::MatMul;
    case BinOp::Lt:
      return ops::OpId::Lt;
    case BinOp::Le:
      return ops::OpId::Le;
    case BinOp::Gt:
      return ops::OpId::Gt;
    case BinOp::Ge:
      return ops::OpId::Ge;
    case BinOp::Eq:
      return ops::OpId::Eq;
    case BinOp::Ne:
      return ops::OpId::Ne;
    default:
      return std::nullopt;
    }
  }

  Type check_binary(const Binary& b) {
    Type l = check(b.lhs);
    Type r = check(b.rhs);
    if (is_error(l) || is_error(r))
      return t_error();
    std::string op = binop_str(b.op);
    if (l->kind == TypeKind::Tensor && r->kind == TypeKind::Tensor) {
      auto id = tensor_binop(b.op);
      if (!id) {
        d_.error(b.span, "operator " + op + " is not defined on tensors");
        return t_error();
      }
      b.tensor_op = static_cast<int>(*id);
      Type args[2] = {l, r};
      auto res = ops::op_result_type(*id, args, {});
      if (!res.ok()) {
        d_.error(b.span, "operator " + op + ": " + res.error);
        return t_error();
      }
      return res.type;
    }
    if (l->kind == TypeKind::Int && r->kind == TypeKind::Int) {
      switch (b.op) {
      case BinOp::Add:
      case BinOp::Sub:
      case BinOp::Mul:
      case BinOp::Div:
      case BinOp::Mod:
        return t_int();
      case BinOp::Lt:
      case BinOp::Le:
      case BinOp::Gt:
      case BinOp::Ge:
      case BinOp::Eq:
      case BinOp::Ne:
        return t_bool();
      default:
        break;
      }
    }
    if (l->kind == TypeKind::Bool && r->kind == TypeKind::Bool) {
      switch (b.op) {
      case BinOp::And:
      case BinOp::Or:
      case BinOp::Eq:
      case BinOp::Ne:
        return t_bool();
      default:
        break;
      }
    }
    std::string hint;
    if ((l->kind == TypeKind::Int && r->kind == TypeKind::Tensor) ||
        (l->kind == TypeKind::Tensor && r->kind == TypeKind::Int))
      hint = " (Int and tensors do not mix: write a float literal such as 2.0)";
    d_.error(b.span,
             "operator " + op + " cannot apply to " + type_str(l) + " and " + type_str(r) + hint);
    return t_error();
  }

  Type check_unary(const Unary& u) {
    Type t = check(u.operand);
    if (is_error(t))
      return t_error();
    if (u.op == UnOp::Neg) {
      if (t->kind == TypeKind::Int)
        return t_int();
      if (t->kind == TypeKind::Tensor) {
        u.tensor_op = static_cast<int>(ops::OpId::Neg);
        return t;
      }
      d_.error(u.span, "unary - cannot apply to " + type_str(t));
      return t_error();
    }
    if (t->kind == TypeKind::Bool)
      return t_bool();
    d_.error(u.span, "! needs a Bool, got " + type_str(t));
    return t_error();
  }

  Type check_match(const Match& mt, const Type& expected) {
    Type st = check(mt.scrutinee);
    const TypeDecl* adt = nullptr;
    bool is_list = false;
    if (!is_error(st)) {
      if (st->kind == TypeKind::Adt) {
        adt = m_.adt(st->name);
        uses_.insert(st->name);
      } else if (st->kind == TypeKind::List)
        is_list = true;
      else {
        d_.error(
            mt.scrutinee->span,
            "match needs an ADT or a list, got " + type_str(st) +
                (st->kind == TypeKind::Tensor ? " (turn a tensor into a Bool with to_bool)" : ""));
      }
    }
    size_t nctors = adt ? adt->ctors.size() : (is_list ? 2 : 0);
    std::vector<bool> covered(nctors, false);
    bool wildcard = false;
    Type result = nullptr;
    for (const auto& arm : mt.arms) {
      std::vector<Type> field_types;
      arm.ctor_index = -1;
      if (!arm.ctor.empty() && (adt || is_list)) {
        if (is_list) {
          if (arm.ctor == "Nil")
            arm.ctor_index = 0;
          else if (arm.ctor == "Cons") {
            arm.ctor_index = 1;
            field_types = {st->elems[0], st};
          }
        } else {
          for (size_t c = 0; c < adt->ctors.size(); ++c)
            if (adt->ctors[c].name == arm.ctor) {
              arm.ctor_index = static_cast<int>(c);
              for (const auto& f : adt->ctors[c].fields)
                field_types.push_back(f.type);
            }
        }
        if (arm.ctor_index < 0) {
          d_.error(arm.span, "'" + arm.ctor + "' is not a constructor of " + type_str(st));
        } else {
          if (covered[arm.ctor_index] || wildcard)
            d_.warning(arm.span, "unreachable match arm");
          covered[arm.ctor_index] = true;
          if (arm.binders.size() != field_types.size())
            d_.error(arm.span, "constructor " + arm.ctor + " has " +
                                   std::to_string(field_types.size()) + " field" +
                                   (field_types.size() == 1 ? "" : "s") + ", the pattern binds " +
                                   std::to_string(arm.binders.size()));
        }
      } else if (arm.ctor.empty()) {
        if (wildcard)
          d_.warning(arm.span, "unreachable match arm");
        wildcard = true;
      }
      size_t mark = frames_.back().scope.size();
      arm.slots.clear();
      for (size_t i = 0; i < arm.binders.size(); ++i) {
        if (arm.binders[i] == "_") {
          arm.slots.push_back(-1);
          continue;
        }
        Type ft = i < field_types.size() ? field_types[i] : t_error();
        arm.slots.push_back(bind(arm.binders[i], ft));
      }
      Type bt = check(arm.body, result ? result : expected);
      frames_.back().scope.resize(mark);
      if (!result || is_error(result))
        result = bt;
      else if (!type_equal(result, bt))
        mismatch(*arm.body, "match arm", result, bt);
    }
    if (mt.arms.empty()) {
      d_.error(mt.span, "match has no arms");
      return t_error();
    }
    if (!wildcard && (adt || is_list)) {
      std::string missing;
      for (size_t c = 0; c < nctors; ++c)
        if (!covered[c])
          missing += (missing.empty() ? "" : ", ") +
                     (is_list ? std::string(c == 0 ? "Nil" : "Cons") : adt->ctors[c].name);
      if (!missing.empty())
        d_.error(mt.span, "non-exhaustive match: missing " + missing);
    }
    return result ? result : t_error();
  }

  Type check_lambda(const Lambda& l, const Type& expected) {
    std::vector<Type> ps;
    const bool hint =
        is_kind(expected, TypeKind::Func) && expected->elems.size() == l.params.size();
    for (size_t i = 0; i < l.params.size(); ++i) {
      const auto& p = l.params[i];
      if (p.annot) {
        check_type_wf(*p.annot, p.span);
        ps.push_back(*p.annot);
      } else if (hint && expected->elems[i]) {
        ps.push_back(expected->elems[i]);
      } else {
        d_.error(p.span, "cannot infer the type of lambda parameter '" + p.name +
                             "'; annotate it (fn (" + p.name + ": T) => ...)");
        ps.push_back(t_error());
      }
    }
    frames_.emplace_back();
    l.param_slots.clear();
    for (size_t i = 0; i < l.params.size(); ++i)
      l.param_slots.push_back(bind(l.params[i].name, ps[i]));
    Type r = check(l.body, hint ? expected->result : nullptr);
    l.frame_size = frames_.back().next_slot;
    l.captures = frames_.back().capture_refs;
    frames_.pop_back();
    return t_func(ps, r);
  }
};

std::string read_file(const std::string& path, bool& ok) {
  std::ifstream in(path, std::ios::binary);
  ok = static_cast<bool>(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

AddResult add_definitions(Module& m, const std::vector<Decl>& decls, Diagnostics& diags) {
  AddResult res;
  Diagnostics local;
  // Duplicates within this batch of definitions.
  std::map<std::string, const Decl*> seen;
  for (const auto& d : decls) {
    auto [it, fresh] = seen.emplace(d.name(), &d);
    if (!fresh) {
      local.error(d.span(), "'" + d.name() + "' is defined twice");
      local.note(it->second->span(), "first defined here");
    }
  }
  // A name must keep its kind across additions.
  for (const auto& d : decls) {
    for (const auto& old : m.decls())
      if (old.name() == d.name() && old.kind != d.kind) {
        local.error(d.span(),
                    "'" + d.name() + "' is already defined as another kind of definition");
        local.note(old.span(), "previous definition");
      }
  }
  if (local.has_errors()) {
    diags.merge(local);
    return res;
  }

  Module next = m;
  for (const auto& d : decls)
    if (next.put(d))
      res.changed.push_back(d.name());

  Checker checker(next, local);
  for (const auto& d : decls)
    checker.check_decl(d);

  // Re-check functions that changed, and those that mention a changed name.
  std::set<std::string> changed(res.changed.begin(), res.changed.end());
  std::vector<const FnDecl*> to_check;
  for (const auto& f : next.fns()) {
    bool dep = changed.count(f->name) > 0 || !f->checked;
    for (const auto& u : next.uses(f->name))
      dep = dep || changed.count(u) > 0;
    if (dep)
      to_check.push_back(f.get());
  }
  for (const FnDecl* f : to_check) {
    next.set_uses(f->name, checker.check_fn(*f));
    res.checked.push_back(f->name);
  }
  if (!local.has_errors())
    analyze_binding_times(next, local);
  diags.merge(local);
  if (local.has_errors()) {
    // Restore annotations of shared, previously good functions that were re-checked.
    Diagnostics ignore;
    Checker restore(m, ignore);
    for (const FnDecl* f : to_check)
      if (m.fn(f->name) == f)
        restore.check_fn(*f);
    if (!m.fns().empty())
      analyze_binding_times(m, ignore);
    res.checked.clear();
    return res;
  }
  res.affected_entries = next.affected_entries(res.changed);
  m = std::move(next);
  res.ok = true;
  return res;
}

AddResult add_source(Module& m, std::string_view text, const std::string& name,
                     Diagnostics& diags) {
  Diagnostics pd;
  auto decls = parse::parse_program(text, name, pd);
  diags.merge(pd);
  if (pd.has_errors())
    return {};
  return add_definitions(m, decls, diags);
}

AddResult add_file(Module& m, const std::string& path, Diagnostics& diags) {
  bool ok = false;
  std::string text = read_file(path, ok);
  if (!ok) {
    Span s;
    s.file = std::make_shared<const SourceFile>(SourceFile{path, ""});
    diags.error(s, "cannot read the file");
    return {};
  }
  return add_source(m, text, path, diags);
}

} // namespace pejit::types
