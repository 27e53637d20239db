// Structural equality of source-IR trees for the parser and printer tests (spans and checker
// annotations ignored; floats compared bit for bit; types compared by their printed form).
#include "tests/ir/ast_equal.h"
#include "tests/support/compare.h"

namespace pejit::testing {

using namespace ir;

namespace {

std::string type_diff(const Type& a, const Type& b, const std::string& where) {
  if (!a || !b)
    return (!a && !b) ? "" : where + ": one type is missing";
  std::string sa = type_str(a), sb = type_str(b);
  return sa == sb ? "" : where + ": type " + sa + " vs " + sb;
}

std::string opt_type_diff(const std::optional<Type>& a, const std::optional<Type>& b,
                          const std::string& where) {
  if (a.has_value() != b.has_value())
    return where + ": annotation present in one only";
  return a ? type_diff(*a, *b, where) : "";
}

std::string pattern_diff(const Pattern& a, const Pattern& b, const std::string& where) {
  if (a.kind != b.kind)
    return where + ": pattern kinds differ";
  if (a.name != b.name)
    return where + ": pattern names " + a.name + " vs " + b.name;
  if (a.elems.size() != b.elems.size())
    return where + ": tuple pattern sizes differ";
  for (size_t i = 0; i < a.elems.size(); ++i)
    if (auto d = pattern_diff(a.elems[i], b.elems[i], where + "." + std::to_string(i)); !d.empty())
      return d;
  return "";
}

std::string diff(const Expr& a, const Expr& b, const std::string& where);

std::string diffs(const std::vector<Expr>& a, const std::vector<Expr>& b,
                  const std::string& where) {
  if (a.size() != b.size())
    return where + ": " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) +
           " elements";
  for (size_t i = 0; i < a.size(); ++i)
    if (auto d = diff(a[i], b[i], where + "[" + std::to_string(i) + "]"); !d.empty())
      return d;
  return "";
}

std::string diff(const Expr& a, const Expr& b, const std::string& where) {
  if (!a || !b)
    return (!a && !b) ? "" : where + ": one expression is null";
  if (a->kind != b->kind)
    return where + ": " + expr_kind_name(a->kind) + " vs " + expr_kind_name(b->kind);
  std::string w = where + "/" + expr_kind_name(a->kind);
  switch (a->kind) {
  case ExprKind::IntLit:
    return a->cast<IntLit>().value == b->cast<IntLit>().value ? "" : w + ": values differ";
  case ExprKind::FloatLit:
    return test::same_bits(a->cast<FloatLit>().value, b->cast<FloatLit>().value)
               ? ""
               : w + ": values differ";
  case ExprKind::BoolLit:
    return a->cast<BoolLit>().value == b->cast<BoolLit>().value ? "" : w + ": values differ";
  case ExprKind::Var:
    return a->cast<Var>().name == b->cast<Var>().name
               ? ""
               : w + ": " + a->cast<Var>().name + " vs " + b->cast<Var>().name;
  case ExprKind::Call: {
    const auto &x = a->cast<Call>(), &y = b->cast<Call>();
    if (auto d = diff(x.callee, y.callee, w + ".callee"); !d.empty())
      return d;
    return diffs(x.args, y.args, w + ".args");
  }
  case ExprKind::Binary: {
    const auto &x = a->cast<Binary>(), &y = b->cast<Binary>();
    if (x.op != y.op)
      return w + ": " + binop_str(x.op) + " vs " + binop_str(y.op);
    if (auto d = diff(x.lhs, y.lhs, w + ".lhs"); !d.empty())
      return d;
    return diff(x.rhs, y.rhs, w + ".rhs");
  }
  case ExprKind::Unary: {
    const auto &x = a->cast<Unary>(), &y = b->cast<Unary>();
    if (x.op != y.op)
      return w + ": operators differ";
    return diff(x.operand, y.operand, w);
  }
  case ExprKind::Tuple:
    return diffs(a->cast<Tuple>().elems, b->cast<Tuple>().elems, w);
  case ExprKind::ListLit:
    return diffs(a->cast<ListLit>().elems, b->cast<ListLit>().elems, w);
  case ExprKind::Proj: {
    const auto &x = a->cast<Proj>(), &y = b->cast<Proj>();
    if (x.index != y.index)
      return w + ": indices differ";
    return diff(x.tuple, y.tuple, w);
  }
  case ExprKind::Let: {
    const auto &x = a->cast<Let>(), &y = b->cast<Let>();
    if (auto d = pattern_diff(x.pattern, y.pattern, w + ".pattern"); !d.empty())
      return d;
    if (auto d = opt_type_diff(x.annot, y.annot, w + ".annot"); !d.empty())
      return d;
    if (auto d = diff(x.value, y.value, w + ".value"); !d.empty())
      return d;
    return diff(x.body, y.body, w + ".body");
  }
  case ExprKind::If: {
    const auto &x = a->cast<If>(), &y = b->cast<If>();
    if (auto d = diff(x.cond, y.cond, w + ".cond"); !d.empty())
      return d;
    if (auto d = diff(x.then_e, y.then_e, w + ".then"); !d.empty())
      return d;
    return diff(x.else_e, y.else_e, w + ".else");
  }
  case ExprKind::Match: {
    const auto &x = a->cast<Match>(), &y = b->cast<Match>();
    if (auto d = diff(x.scrutinee, y.scrutinee, w + ".scrutinee"); !d.empty())
      return d;
    if (x.arms.size() != y.arms.size())
      return w + ": arm counts differ";
    for (size_t i = 0; i < x.arms.size(); ++i) {
      std::string aw = w + ".arm" + std::to_string(i);
      if (x.arms[i].ctor != y.arms[i].ctor)
        return aw + ": constructors differ";
      if (x.arms[i].binders != y.arms[i].binders)
        return aw + ": binders differ";
      if (auto d = diff(x.arms[i].body, y.arms[i].body, aw); !d.empty())
        return d;
    }
    return "";
  }
  case ExprKind::Lambda: {
    const auto &x = a->cast<Lambda>(), &y = b->cast<Lambda>();
    if (x.params.size() != y.params.size())
      return w + ": parameter counts differ";
    for (size_t i = 0; i < x.params.size(); ++i) {
      if (x.params[i].name != y.params[i].name)
        return w + ": parameter names differ";
      if (auto d = opt_type_diff(x.params[i].annot, y.params[i].annot, w); !d.empty())
        return d;
    }
    return diff(x.body, y.body, w + ".body");
  }
  }
  return w + ": unknown kind";
}

} // namespace

std::string expr_diff(const Expr& a, const Expr& b) {
  return diff(a, b, "");
}

std::string decl_diff(const Decl& a, const Decl& b) {
  if (a.kind != b.kind)
    return "declaration kinds differ";
  std::string w = a.name();
  if (a.name() != b.name())
    return "names " + a.name() + " vs " + b.name();
  switch (a.kind) {
  case DeclKind::Type: {
    const auto &x = *a.type, &y = *b.type;
    if (x.ctors.size() != y.ctors.size())
      return w + ": constructor counts differ";
    for (size_t c = 0; c < x.ctors.size(); ++c) {
      if (x.ctors[c].name != y.ctors[c].name)
        return w + ": constructor names differ";
      if (x.ctors[c].fields.size() != y.ctors[c].fields.size())
        return w + ": field counts differ";
      for (size_t f = 0; f < x.ctors[c].fields.size(); ++f) {
        if (x.ctors[c].fields[f].name != y.ctors[c].fields[f].name)
          return w + ": fields differ";
        if (auto d = type_diff(x.ctors[c].fields[f].type, y.ctors[c].fields[f].type, w); !d.empty())
          return d;
      }
    }
    return "";
  }
  case DeclKind::Dim:
    return a.dim->default_value == b.dim->default_value ? "" : w + ": defaults differ";
  case DeclKind::Param: {
    const auto &x = *a.param, &y = *b.param;
    if (auto d = type_diff(x.type, y.type, w); !d.empty())
      return d;
    if (x.init.kind != y.init.kind)
      return w + ": initializers differ";
    bool args = x.init.kind == Init::Kind::Normal || x.init.kind == Init::Kind::Uniform;
    if (args && (!test::same_bits(x.init.a, y.init.a) || !test::same_bits(x.init.b, y.init.b)))
      return w + ": initializer arguments differ";
    return "";
  }
  case DeclKind::Fn: {
    const auto &x = *a.fn, &y = *b.fn;
    if (x.is_entry != y.is_entry)
      return w + ": entry flags differ";
    if (x.params.size() != y.params.size())
      return w + ": parameter counts differ";
    for (size_t i = 0; i < x.params.size(); ++i) {
      if (x.params[i].name != y.params[i].name)
        return w + ": parameter names differ";
      if (auto d = type_diff(x.params[i].type, y.params[i].type, w); !d.empty())
        return d;
    }
    if (auto d = type_diff(x.ret, y.ret, w + " result"); !d.empty())
      return d;
    return diff(x.body, y.body, w);
  }
  }
  return "unknown declaration kind";
}

std::string decls_diff(const std::vector<Decl>& a, const std::vector<Decl>& b) {
  if (a.size() != b.size())
    return std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " declarations";
  for (size_t i = 0; i < a.size(); ++i)
    if (auto d = decl_diff(a[i], b[i]); !d.empty())
      return d;
  return "";
}

} // namespace pejit::testing
