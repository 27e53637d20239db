// Printer of the source IR: canonical program text that parses back to an equal tree.
// Layout: 2-space indentation, one `let` per line in blocks, match arms one per line without
// commas, minimal parentheses from the parser's levels (doubled binop precedence, `::` at 7,
// unary 12, postfix 14). List constructors print as sugar: `h :: t` and `[]` in patterns,
// `h :: t` for a two-argument call of `Cons`. Floats print shortest-round-trip with a '.'.
#include "src/ir/module.h"

#include <charconv>
#include <cmath>
#include <sstream>

namespace pejit::ir {

namespace {

constexpr int kLevelLowest = 0; // lambda, if, match: open-ended or statement-like
constexpr int kLevelCons = 7;
constexpr int kLevelUnary = 12;
constexpr int kLevelPostfix = 14;
constexpr int kLevelAtom = 16;

bool is_cons_call(const ExprNode& e) {
  const auto* c = e.as<Call>();
  if (!c || c->args.size() != 2)
    return false;
  const auto* v = c->callee->as<Var>();
  return v && v->name == "Cons";
}

bool is_numeric_lit(const ExprNode& e) {
  return e.kind == ExprKind::IntLit || e.kind == ExprKind::FloatLit;
}
bool is_negative_lit(const ExprNode& e) {
  if (const auto* i = e.as<IntLit>())
    return i->value < 0;
  if (const auto* f = e.as<FloatLit>())
    return std::signbit(f->value);
  return false;
}

int level_of(const ExprNode& e) {
  switch (e.kind) {
  case ExprKind::Lambda:
  case ExprKind::If:
  case ExprKind::Match:
    return kLevelLowest;
  case ExprKind::Binary:
    return 2 * binop_precedence(e.cast<Binary>().op);
  case ExprKind::Call:
    return is_cons_call(e) ? kLevelCons : kLevelPostfix;
  case ExprKind::Unary:
    return kLevelUnary;
  case ExprKind::Proj:
    return kLevelPostfix;
  case ExprKind::IntLit:
  case ExprKind::FloatLit:
    return is_negative_lit(e) ? kLevelUnary : kLevelAtom;
  default:
    return kLevelAtom;
  }
}

std::string float_str(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  std::string exp = e == std::string::npos ? "" : s.substr(e);
  if (mant.find('.') == std::string::npos)
    mant += ".0";
  return mant + exp;
}

std::string pattern_str(const Pattern& p) {
  switch (p.kind) {
  case Pattern::Kind::Name:
    return p.name;
  case Pattern::Kind::Wild:
    return "_";
  case Pattern::Kind::Tuple: {
    std::string s = "(";
    for (size_t i = 0; i < p.elems.size(); ++i)
      s += (i ? ", " : "") + pattern_str(p.elems[i]);
    if (p.elems.size() == 1)
      s += ",";
    return s + ")";
  }
  }
  return "?";
}

std::string arm_pattern_str(const MatchArm& a) {
  if (a.ctor.empty())
    return "_";
  if (a.ctor == "Nil" && a.binders.empty())
    return "[]";
  if (a.ctor == "Cons" && a.binders.size() == 2)
    return a.binders[0] + " :: " + a.binders[1];
  std::string s = a.ctor;
  if (a.binders.empty())
    return s;
  s += "(";
  for (size_t i = 0; i < a.binders.size(); ++i)
    s += (i ? ", " : "") + a.binders[i];
  return s + ")";
}

class Printer {
public:
  std::string take() { return os_.str(); }

  /// Prints `e` where the context accepts expressions of level >= `min_level`.
  void expr(const Expr& e, int min_level) {
    if (level_of(*e) < min_level) {
      os_ << "(";
      expr(e, kLevelLowest);
      os_ << ")";
      return;
    }
    switch (e->kind) {
    case ExprKind::IntLit:
      os_ << e->cast<IntLit>().value;
      break;
    case ExprKind::FloatLit:
      os_ << float_str(e->cast<FloatLit>().value);
      break;
    case ExprKind::BoolLit:
      os_ << (e->cast<BoolLit>().value ? "true" : "false");
      break;
    case ExprKind::Var:
      os_ << e->cast<Var>().name;
      break;
    case ExprKind::Call: {
      const auto& c = e->cast<Call>();
      if (is_cons_call(*e)) {
        expr(c.args[0], kLevelCons + 1);
        os_ << " :: ";
        expr(c.args[1], kLevelCons);
        break;
      }
      postfix_operand(c.callee);
      os_ << "(";
      list(c.args);
      os_ << ")";
      break;
    }
    case ExprKind::Binary: {
      const auto& b = e->cast<Binary>();
      int level = 2 * binop_precedence(b.op);
      bool non_assoc = binop_precedence(b.op) == binop_precedence(BinOp::Lt);
      expr(b.lhs, non_assoc ? level + 1 : level);
      os_ << " " << binop_str(b.op) << " ";
      expr(b.rhs, level + 1);
      break;
    }
    case ExprKind::Unary: {
      const auto& u = e->cast<Unary>();
      os_ << (u.op == UnOp::Neg ? "-" : "!");
      // `- -x` rather than `--x`, which reads like a decrement.
      const auto* inner = u.operand->as<Unary>();
      if (u.op == UnOp::Neg && ((inner && inner->op == UnOp::Neg) || is_negative_lit(*u.operand)))
        os_ << " ";
      // `-1` would read back as a negative literal, not a negation.
      if (u.op == UnOp::Neg && is_numeric_lit(*u.operand) && !is_negative_lit(*u.operand)) {
        os_ << "(";
        expr(u.operand, kLevelLowest);
        os_ << ")";
      } else {
        expr(u.operand, kLevelUnary);
      }
      break;
    }
    case ExprKind::Tuple: {
      const auto& t = e->cast<Tuple>();
      os_ << "(";
      list(t.elems);
      if (t.elems.size() == 1)
        os_ << ",";
      os_ << ")";
      break;
    }
    case ExprKind::Proj: {
      const auto& p = e->cast<Proj>();
      postfix_operand(p.tuple);
      os_ << "." << p.index;
      break;
    }
    case ExprKind::ListLit:
      os_ << "[";
      list(e->cast<ListLit>().elems);
      os_ << "]";
      break;
    case ExprKind::Let:
      block(e);
      break;
    case ExprKind::If: {
      const auto* i = &e->cast<If>();
      while (true) {
        os_ << "if ";
        expr(i->cond, kLevelLowest);
        os_ << " ";
        block(i->then_e);
        os_ << " else ";
        if (const auto* next = i->else_e->as<If>()) {
          i = next;
          continue;
        }
        block(i->else_e);
        break;
      }
      break;
    }
    case ExprKind::Match: {
      const auto& m = e->cast<Match>();
      os_ << "match ";
      expr(m.scrutinee, kLevelLowest);
      os_ << " {\n";
      ++indent_;
      for (const auto& a : m.arms) {
        pad();
        os_ << arm_pattern_str(a) << " => ";
        expr(a.body, kLevelLowest);
        os_ << "\n";
      }
      --indent_;
      pad();
      os_ << "}";
      break;
    }
    case ExprKind::Lambda: {
      const auto& l = e->cast<Lambda>();
      os_ << "fn ";
      if (l.params.size() == 1 && !l.params[0].annot) {
        os_ << l.params[0].name;
      } else {
        os_ << "(";
        for (size_t i = 0; i < l.params.size(); ++i) {
          os_ << (i ? ", " : "") << l.params[i].name;
          if (l.params[i].annot)
            os_ << ": " << type_str(*l.params[i].annot);
        }
        os_ << ")";
      }
      os_ << " => ";
      expr(l.body, kLevelLowest);
      break;
    }
    }
  }

  /// `{`, the lets one per line, the result, `}` at the current indentation.
  void block(const Expr& e) {
    os_ << "{\n";
    ++indent_;
    const ExprNode* cur = e.get();
    Expr tail = e;
    while (const auto* l = cur->as<Let>()) {
      pad();
      os_ << "let " << pattern_str(l->pattern);
      if (l->annot)
        os_ << ": " << type_str(*l->annot);
      os_ << " = ";
      expr(l->value, kLevelLowest);
      os_ << ";\n";
      tail = l->body;
      cur = tail.get();
    }
    pad();
    expr(tail, kLevelLowest);
    os_ << "\n";
    --indent_;
    pad();
    os_ << "}";
  }

  void decl(const Decl& d) {
    switch (d.kind) {
    case DeclKind::Type:
      os_ << print_type_decl(*d.type);
      break;
    case DeclKind::Dim:
      os_ << "dim " << d.dim->name;
      if (d.dim->default_value)
        os_ << " = " << *d.dim->default_value;
      break;
    case DeclKind::Param: {
      const auto& p = *d.param;
      os_ << "param " << p.name << ": " << type_str(p.type) << " = " << init_name(p.init.kind);
      if (p.init.kind == Init::Kind::Normal || p.init.kind == Init::Kind::Uniform)
        os_ << "(" << float_str(p.init.a) << ", " << float_str(p.init.b) << ")";
      break;
    }
    case DeclKind::Fn: {
      const auto& f = *d.fn;
      os_ << (f.is_entry ? "entry " : "fn ") << f.name << "(";
      for (size_t i = 0; i < f.params.size(); ++i)
        os_ << (i ? ", " : "") << f.params[i].name << ": " << type_str(f.params[i].type);
      os_ << ") -> " << type_str(f.ret) << " ";
      block(f.body);
      break;
    }
    }
  }

private:
  void pad() {
    for (int i = 0; i < indent_; ++i)
      os_ << "  ";
  }
  void list(const std::vector<Expr>& es) {
    for (size_t i = 0; i < es.size(); ++i) {
      if (i)
        os_ << ", ";
      expr(es[i], kLevelLowest);
    }
  }
  /// The operand of a call or projection; a numeric literal needs parentheses there
  /// (`(1).0`, not the float `1.0`; `(-1)(x)`, not a negation).
  void postfix_operand(const Expr& e) {
    if (is_numeric_lit(*e)) {
      os_ << "(";
      expr(e, kLevelLowest);
      os_ << ")";
    } else {
      expr(e, kLevelPostfix);
    }
  }

  std::ostringstream os_;
  int indent_ = 0;
};

} // namespace

std::string print_type_decl(const TypeDecl& d) {
  std::string s = "type " + d.name + " =";
  for (size_t c = 0; c < d.ctors.size(); ++c) {
    const auto& k = d.ctors[c];
    s += (c ? " | " : " ") + k.name;
    if (k.fields.empty())
      continue;
    s += "(";
    for (size_t i = 0; i < k.fields.size(); ++i)
      s += (i ? ", " : "") + k.fields[i].name + ": " + type_str(k.fields[i].type);
    s += ")";
  }
  return s;
}

std::string print_decl(const Decl& d) {
  Printer p;
  p.decl(d);
  return p.take();
}

std::string print_module(const Module& m) {
  // Declarations one after another; a blank line where the kind changes and around functions.
  std::string out;
  const Decl* prev = nullptr;
  for (const auto& d : m.decls()) {
    if (prev && (prev->kind != d.kind || d.kind == DeclKind::Fn))
      out += "\n";
    out += print_decl(d);
    out += "\n";
    prev = &d;
  }
  return out;
}

std::string print_expr(const Expr& e) {
  Printer p;
  p.expr(e, kLevelLowest);
  return p.take();
}

} // namespace pejit::ir
