// The checker's typing of expressions other than calls and operators (those are in
// check_call.cpp): literals, names (locals, captures, functions, parameters, constructors),
// tuples, let, if, match with its exhaustiveness, lists and lambdas. The Checker is declared in
// checker.h; the design note (bidirectional checking, slots, captures) is at the top of check.cpp.
#include "src/types/checker.h"

#include "src/types/builtins.h"
#include "src/util/check.h"

#include <string>
#include <vector>

namespace pejit::types::detail {

using namespace ir;

Type Checker::check(const Expr& e, const Type& expected) {
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
      d_.error(e->span, "cannot infer the element type of []; annotate it (let xs: List[T] = [])");
      return set(*e, t_error());
    }
    return set(*e, t_list(elem));
  }
  }
  PEJIT_CHECK(false) << "unknown expression kind";
}

Type Checker::check_var(const Var& v) {
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
  // A named dimension is an Int wherever a constant is; its value is bound when the module is
  // instantiated (Int attributes of ops keep it symbolic: check_call.cpp).
  if (int di = m_.dim_index(v.name); di >= 0) {
    v.ref = {VarRef::Kind::Dim, di, -1};
    uses_.insert(v.name);
    return t_int();
  }
  d_.error(v.span, "unknown name '" + v.name + "'");
  return t_error();
}

Type Checker::check_match(const Match& mt, const Type& expected) {
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

Type Checker::check_lambda(const Lambda& l, const Type& expected) {
  std::vector<Type> ps;
  const bool hint = is_kind(expected, TypeKind::Func) && expected->elems.size() == l.params.size();
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

} // namespace pejit::types::detail
