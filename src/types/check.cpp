// Type checking and name resolution of function bodies. Bidirectional: an expected type flows
// into lambdas, `[]`/`Nil` and branches; everything else is synthesized bottom-up. Each binder
// gets a slot in its function's (or lambda's) frame; a name used inside a lambda but bound
// outside it becomes a capture. One error per mistake: an ill-typed subexpression has the
// error type, which is equal to everything, so it does not cascade. The Checker is declared in
// checker.h; its typing of expressions is in check_expr.cpp, of calls and operators in
// check_call.cpp.
#include "src/types/check.h"

#include "src/ops/op.h"
#include "src/parse/parser.h"
#include "src/types/binding_time.h"
#include "src/types/builtins.h"
#include "src/types/checker.h"
#include "src/util/check.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace pejit::types {

using namespace ir;

std::optional<Builtin> builtin_by_name(const std::string& name) {
  static const std::map<std::string, Builtin> m = {
      {"map", Builtin::Map},       {"fold", Builtin::Fold},      {"sum_list", Builtin::SumList},
      {"length", Builtin::Length}, {"to_int", Builtin::ToInt},   {"to_bool", Builtin::ToBool},
      {"append", Builtin::Append}, {"reverse", Builtin::Reverse}};
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
  case Builtin::Reverse:
    return "reverse";
  }
  return "?";
}

namespace detail {

void Checker::check_decl(const Decl& decl) {
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

std::set<std::string> Checker::check_fn(const FnDecl& f) {
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

void Checker::note_type_uses(const Type& t) {
  if (!t)
    return;
  if (t->kind == TypeKind::Adt)
    uses_.insert(t->name);
  for (const auto& e : t->elems)
    note_type_uses(e);
  note_type_uses(t->result);
}

void Checker::check_type_wf(const Type& t, const Span& s) {
  if (!t)
    return;
  switch (t->kind) {
  case TypeKind::Adt:
    if (!m_.adt(t->name))
      d_.error(s, "unknown type '" + t->name + "'");
    break;
  case TypeKind::Tensor:
    for (const auto& dim : t->dims) {
      for (const auto& term : dim.terms)
        if (m_.dim_index(term.name) < 0)
          d_.error(s, "unknown dimension '" + term.name + "' (declare it with `dim " + term.name +
                          "`)");
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

int Checker::bind(const std::string& name, Type t) {
  Frame& f = frames_.back();
  int slot = f.next_slot++;
  f.scope.push_back({name, slot, std::move(t)});
  return slot;
}

void Checker::bind_pattern(const Pattern& p, const Type& t) {
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

std::optional<Resolved> Checker::lookup(const std::string& name, size_t k) {
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

Type Checker::fn_type(const FnDecl& f) {
  std::vector<Type> ps;
  for (const auto& p : f.params)
    ps.push_back(p.type);
  return t_func(ps, f.ret);
}

Type Checker::set(const ExprNode& e, Type t) {
  e.type = t;
  return t;
}

Type Checker::mismatch(const ExprNode& e, const std::string& what, const Type& want,
                       const Type& got) {
  d_.error(e.span, what + ": expected " + type_str(want) + ", got " + type_str(got));
  return t_error();
}

} // namespace detail

namespace {

std::string read_file(const std::string& path, bool& ok) {
  std::ifstream in(path, std::ios::binary);
  ok = static_cast<bool>(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

using detail::Checker;

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
