// Binding-time analysis: a monovariant fixpoint over the call graph. Each function's
// parameters start at their type's default (tensors dynamic, structure static) and are raised
// by the binding times of the arguments at its call sites; a function's result is the
// analysis of its body. The lattice (Const < Static < Dynamic, per tuple element) is finite
// and every step is monotone, so the loop terminates. Lambdas are analyzed where they appear,
// with parameter binding times from map/fold when they are applied there, else by type.
// Imprecision, on purpose: list elements and closure results take their type's default.
#include "src/types/binding_time.h"

#include "src/ops/op.h"
#include "src/types/builtins.h"
#include "src/util/check.h"

#include <map>
#include <set>

namespace pejit::types {

using namespace ir;

namespace {

/// A binding time per tuple element (elems empty for non-tuples).
struct BTV {
  BT bt = BT::Const;
  std::vector<BTV> elems;
  bool operator==(const BTV& o) const { return bt == o.bt && elems == o.elems; }
};

BTV scalar(BT b) {
  return BTV{b, {}};
}

BTV join(const BTV& a, const BTV& b) {
  BTV r{bt_join(a.bt, b.bt), {}};
  if (a.elems.size() == b.elems.size())
    for (size_t i = 0; i < a.elems.size(); ++i)
      r.elems.push_back(join(a.elems[i], b.elems[i]));
  return r;
}

// Raises every component to at least `b`.
BTV raise(const BTV& v, BT b) {
  BTV r{bt_join(v.bt, b), {}};
  for (const auto& e : v.elems)
    r.elems.push_back(raise(e, b));
  return r;
}

BTV by_type(const Type& t) {
  if (is_error(t))
    return scalar(BT::Dynamic);
  switch (t->kind) {
  case TypeKind::Tensor:
    return scalar(BT::Dynamic);
  case TypeKind::Tuple: {
    BTV r{BT::Static, {}};
    for (const auto& e : t->elems) {
      r.elems.push_back(by_type(e));
      r.bt = bt_join(r.bt, r.elems.back().bt);
    }
    return r;
  }
  default:
    return scalar(BT::Static);
  }
}

struct Summary {
  std::vector<BTV> params;
  BTV result;
};

class Analysis {
public:
  explicit Analysis(const Module& m) : m_(m) {
    for (const auto& f : m.fns()) {
      Summary s;
      for (const auto& p : f->params)
        s.params.push_back(by_type(p.type));
      s.result = scalar(BT::Const);
      sums_.push_back(std::move(s));
    }
  }

  void run() {
    for (int iter = 0; iter < 1000; ++iter) {
      changed_ = false;
      dynamic_control_.clear();
      for (size_t i = 0; i < m_.fns().size(); ++i) {
        const FnDecl& f = *m_.fns()[i];
        if (!f.checked || !f.body)
          continue;
        cur_fn_ = f.name;
        std::vector<BTV> frame(static_cast<size_t>(f.frame_size), scalar(BT::Static));
        for (size_t p = 0; p < f.params.size() && p < f.param_slots.size(); ++p)
          frame[f.param_slots[p]] = sums_[i].params[p];
        Env env{&frame, nullptr};
        BTV r = eval(f.body, env);
        BTV j = join(sums_[i].result, r);
        if (!(j == sums_[i].result)) {
          sums_[i].result = j;
          changed_ = true;
        }
      }
      if (!changed_)
        return;
    }
  }

  /// (span, function) of every if/match on a dynamic value, from the last iteration.
  const std::vector<std::pair<Span, std::string>>& dynamic_control() const {
    return dynamic_control_;
  }

private:
  struct Env {
    std::vector<BTV>* slots;
    const std::vector<BTV>* captures;
  };

  const Module& m_;
  std::vector<Summary> sums_;
  bool changed_ = false;
  std::string cur_fn_;
  std::vector<std::pair<Span, std::string>> dynamic_control_;

  BTV mark(const ExprNode& e, BTV v) {
    e.bt = v.bt;
    return v;
  }

  void bind(const Pattern& p, const BTV& v, Env& env) {
    switch (p.kind) {
    case Pattern::Kind::Wild:
      break;
    case Pattern::Kind::Name:
      if (p.slot >= 0 && static_cast<size_t>(p.slot) < env.slots->size())
        (*env.slots)[p.slot] = v;
      break;
    case Pattern::Kind::Tuple:
      for (size_t i = 0; i < p.elems.size(); ++i)
        bind(p.elems[i], i < v.elems.size() ? v.elems[i] : scalar(v.bt), env);
      break;
    }
  }

  BTV lookup(const VarRef& r, const Env& env, const Type& t) {
    switch (r.kind) {
    case VarRef::Kind::Local:
      if (r.index >= 0 && static_cast<size_t>(r.index) < env.slots->size())
        return (*env.slots)[r.index];
      return by_type(t);
    case VarRef::Kind::Capture:
      if (env.captures && r.index >= 0 && static_cast<size_t>(r.index) < env.captures->size())
        return (*env.captures)[r.index];
      return by_type(t);
    case VarRef::Kind::Param:
      return scalar(BT::Dynamic);
    default:
      return scalar(BT::Static);
    }
  }

  // Analyzes a lambda's body with the given parameter binding times; returns its result's.
  BTV eval_lambda(const Lambda& l, const std::vector<BTV>& params, Env& env) {
    std::vector<BTV> caps;
    for (const auto& c : l.captures)
      caps.push_back(lookup(c, env, nullptr));
    std::vector<BTV> frame(static_cast<size_t>(l.frame_size), scalar(BT::Static));
    for (size_t i = 0; i < l.param_slots.size(); ++i)
      frame[l.param_slots[i]] =
          i < params.size() ? params[i] : by_type(l.params[i].annot.value_or(nullptr));
    Env inner{&frame, &caps};
    return eval(l.body, inner);
  }

  // The result of applying function value `f` (an expression) to arguments `args`.
  BTV apply(const Expr& f, const std::vector<BTV>& args, Env& env, const Type& result_type) {
    if (auto l = f->as<Lambda>()) {
      mark(*f, scalar(BT::Static));
      return eval_lambda(*l, args, env);
    }
    BTV fv = eval(f, env);
    if (auto v = f->as<Var>(); v && v->ref.kind == VarRef::Kind::Global) {
      join_params(v->ref.index, args);
      return sums_[v->ref.index].result;
    }
    return raise(by_type(result_type), fv.bt);
  }

  void join_params(int fi, const std::vector<BTV>& args) {
    auto& ps = sums_[fi].params;
    for (size_t i = 0; i < ps.size() && i < args.size(); ++i) {
      BTV j = join(ps[i], args[i]);
      if (!(j == ps[i])) {
        ps[i] = j;
        changed_ = true;
      }
    }
  }

  BTV elem_of_list(const Type& list_t, BT spine) {
    if (is_error(list_t) || list_t->kind != TypeKind::List)
      return scalar(BT::Dynamic);
    return raise(by_type(list_t->elems[0]), spine);
  }

  BTV eval(const Expr& e, Env& env) {
    switch (e->kind) {
    case ExprKind::IntLit:
      // A literal the checker made a tensor operand is a constant, as a float literal is.
      return mark(*e, scalar(e->cast<IntLit>().tensor_elem ? BT::Const : BT::Static));
    case ExprKind::BoolLit:
      return mark(*e, scalar(BT::Static));
    case ExprKind::FloatLit:
      return mark(*e, scalar(BT::Const));
    case ExprKind::Var: {
      const auto& v = e->cast<Var>();
      return mark(*e, lookup(v.ref, env, e->type));
    }
    case ExprKind::Tuple: {
      BTV r{BT::Static, {}};
      for (const auto& x : e->cast<ir::Tuple>().elems) {
        r.elems.push_back(eval(x, env));
        r.bt = bt_join(r.bt, r.elems.back().bt);
      }
      return mark(*e, r);
    }
    case ExprKind::Proj: {
      const auto& p = e->cast<Proj>();
      BTV t = eval(p.tuple, env);
      if (static_cast<size_t>(p.index) < t.elems.size())
        return mark(*e, t.elems[p.index]);
      return mark(*e, scalar(t.bt));
    }
    case ExprKind::Let: {
      const auto& l = e->cast<Let>();
      BTV v = eval(l.value, env);
      bind(l.pattern, v, env);
      return mark(*e, eval(l.body, env));
    }
    case ExprKind::If: {
      const auto& i = e->cast<If>();
      BTV c = eval(i.cond, env);
      if (c.bt == BT::Dynamic)
        dynamic_control_.emplace_back(i.cond->span, cur_fn_);
      BTV r = join(eval(i.then_e, env), eval(i.else_e, env));
      return mark(*e, c.bt == BT::Dynamic ? raise(r, BT::Dynamic) : r);
    }
    case ExprKind::Match: {
      const auto& mt = e->cast<Match>();
      BTV s = eval(mt.scrutinee, env);
      if (s.bt == BT::Dynamic)
        dynamic_control_.emplace_back(mt.scrutinee->span, cur_fn_);
      const Type& st = mt.scrutinee->type;
      BTV r;
      bool first = true;
      for (const auto& arm : mt.arms) {
        std::vector<Type> fts;
        if (!is_error(st) && st->kind == TypeKind::List && arm.ctor_index == 1)
          fts = {st->elems[0], st};
        else if (!is_error(st) && st->kind == TypeKind::Adt && arm.ctor_index >= 0)
          if (const TypeDecl* adt = m_.adt(st->name))
            for (const auto& f : adt->ctors[arm.ctor_index].fields)
              fts.push_back(f.type);
        for (size_t k = 0; k < arm.slots.size(); ++k) {
          if (arm.slots[k] < 0 || static_cast<size_t>(arm.slots[k]) >= env.slots->size())
            continue;
          Type ft = k < fts.size() ? fts[k] : nullptr;
          (*env.slots)[arm.slots[k]] = raise(by_type(ft), s.bt);
        }
        BTV b = eval(arm.body, env);
        r = first ? b : join(r, b);
        first = false;
      }
      return mark(*e, s.bt == BT::Dynamic ? raise(r, BT::Dynamic) : r);
    }
    case ExprKind::Lambda: {
      const auto& l = e->cast<Lambda>();
      eval_lambda(l, {}, env);
      return mark(*e, scalar(BT::Static));
    }
    case ExprKind::ListLit: {
      BT b = BT::Static;
      for (const auto& x : e->cast<ListLit>().elems) {
        BTV v = eval(x, env);
        if (!is_error(x->type) && x->type->kind != TypeKind::Tensor)
          b = bt_join(b, v.bt);
      }
      return mark(*e, scalar(b));
    }
    case ExprKind::Binary: {
      const auto& b = e->cast<Binary>();
      BTV l = eval(b.lhs, env), r = eval(b.rhs, env);
      return mark(*e, scalar(bt_join(l.bt, r.bt)));
    }
    case ExprKind::Unary:
      return mark(*e, scalar(eval(e->cast<Unary>().operand, env).bt));
    case ExprKind::Call:
      return mark(*e, eval_call(e->cast<Call>(), env));
    }
    return scalar(BT::Dynamic);
  }

  BTV eval_call(const Call& c, Env& env) {
    switch (c.ref.kind) {
    case VarRef::Kind::Global: {
      std::vector<BTV> args;
      for (const auto& a : c.args)
        args.push_back(eval(a, env));
      mark(*c.callee, scalar(BT::Static));
      join_params(c.ref.index, args);
      return sums_[c.ref.index].result;
    }
    case VarRef::Kind::Ctor: {
      BT b = BT::Static;
      for (const auto& a : c.args) {
        BTV v = eval(a, env);
        if (!is_error(a->type) && a->type->kind != TypeKind::Tensor)
          b = bt_join(b, v.bt);
      }
      mark(*c.callee, scalar(BT::Static));
      return scalar(b);
    }
    case VarRef::Kind::Op: {
      mark(*c.callee, scalar(BT::Static));
      // A random op's numbers are drawn at run time, whatever its arguments.
      BT b = ops::is_random(static_cast<ops::OpId>(c.ref.index)) ? BT::Dynamic : BT::Const;
      for (int i = 0; i < c.tensor_args && static_cast<size_t>(i) < c.args.size(); ++i)
        b = bt_join(b, eval(c.args[i], env).bt);
      for (size_t i = static_cast<size_t>(std::max(c.tensor_args, 0)); i < c.args.size(); ++i)
        eval(c.args[i], env);
      BTV r = scalar(b);
      if (!is_error(c.type) && c.type->kind == TypeKind::Tuple)
        r.elems.assign(c.type->elems.size(), scalar(b));
      return r;
    }
    case VarRef::Kind::Builtin: {
      mark(*c.callee, scalar(BT::Static));
      switch (static_cast<Builtin>(c.ref.index)) {
      case Builtin::Map: {
        if (c.args.size() != 2)
          break;
        BTV xs = eval(c.args[1], env);
        BTV elem = elem_of_list(c.args[1]->type, xs.bt);
        apply(c.args[0], {elem}, env, nullptr);
        return scalar(xs.bt);
      }
      case Builtin::Fold: {
        if (c.args.size() != 3)
          break;
        BTV init = eval(c.args[1], env);
        BTV xs = eval(c.args[2], env);
        BTV elem = elem_of_list(c.args[2]->type, xs.bt);
        BTV acc = init;
        for (int k = 0; k < 8; ++k) {
          BTV next = join(acc, apply(c.args[0], {acc, elem}, env, c.type));
          if (next == acc)
            break;
          acc = next;
        }
        return raise(acc, xs.bt);
      }
      case Builtin::SumList: {
        if (c.args.size() != 1)
          break;
        BTV xs = eval(c.args[0], env);
        // An empty list sums to known zeros; elements are dynamic tensors otherwise.
        if (auto l = c.args[0]->as<ListLit>()) {
          BT b = BT::Const;
          for (const auto& x : l->elems)
            b = bt_join(b, x->bt);
          return scalar(b);
        }
        return scalar(bt_join(BT::Dynamic, xs.bt));
      }
      case Builtin::Append:
        if (c.args.size() != 2)
          break;
        return scalar(bt_join(eval(c.args[0], env).bt, eval(c.args[1], env).bt));
      case Builtin::Reverse: // the same elements: the list's binding time
        if (c.args.size() != 1)
          break;
        return scalar(eval(c.args[0], env).bt);
      case Builtin::Length:
        if (c.args.size() != 1)
          break;
        return scalar(eval(c.args[0], env).bt);
      case Builtin::ToInt:
      case Builtin::ToBool: {
        if (c.args.size() != 1)
          break;
        BT b = eval(c.args[0], env).bt;
        return scalar(b == BT::Const ? BT::Static : b);
      }
      }
      for (const auto& a : c.args)
        eval(a, env);
      return scalar(BT::Dynamic);
    }
    default: {
      // Closure call: the callee is an expression of function type.
      std::vector<BTV> args;
      for (const auto& a : c.args)
        args.push_back(eval(a, env));
      BTV f = eval(c.callee, env);
      return raise(by_type(c.type), f.bt);
    }
    }
  }
};

} // namespace

void analyze_binding_times(const Module& m, Diagnostics& diags) {
  Analysis a(m);
  a.run();
  // Warn once per location, naming the entries that reach it.
  std::map<std::string, std::set<std::string>> cones;
  for (const auto& e : m.entries())
    cones[e] = m.dependency_cone(e);
  std::set<std::pair<uint32_t, uint32_t>> done;
  for (const auto& [span, fn] : a.dynamic_control()) {
    if (!done.insert({span.line, span.col}).second)
      continue;
    std::vector<std::string> hit;
    for (const auto& [entry, cone] : cones)
      if (cone.count(fn))
        hit.push_back(entry);
    if (hit.empty())
      continue;
    std::string names;
    for (const auto& h : hit)
      names += (names.empty() ? "'" : ", '") + h + "'";
    diags.warning(span, "control flow depends on a dynamic value: entry " + names +
                            " cannot be specialized here and will run on the generic path");
  }
}

} // namespace pejit::types
