// Builder API of the source IR: one small function per construct. The parser builds its
// nodes through these too, so text and API produce identical trees.
#include "src/ir/builder.h"

namespace pejit::ir::build {

namespace {
template <class T> std::shared_ptr<T> node(Span s) {
  return std::make_shared<T>(std::move(s));
}
} // namespace

Expr int_lit(int64_t v, Span s) {
  auto n = node<IntLit>(std::move(s));
  n->value = v;
  return n;
}

Expr float_lit(double v, Span s) {
  auto n = node<FloatLit>(std::move(s));
  n->value = v;
  return n;
}

Expr bool_lit(bool v, Span s) {
  auto n = node<BoolLit>(std::move(s));
  n->value = v;
  return n;
}

Expr var(std::string name, Span s) {
  auto n = node<Var>(std::move(s));
  n->name = std::move(name);
  return n;
}

Expr call(std::string name, std::vector<Expr> args, Span s) {
  return call_expr(var(std::move(name), s), std::move(args), s);
}

Expr call_expr(Expr callee, std::vector<Expr> args, Span s) {
  auto n = node<Call>(std::move(s));
  n->callee = std::move(callee);
  n->args = std::move(args);
  return n;
}

Expr binary(BinOp op, Expr a, Expr b, Span s) {
  auto n = node<Binary>(std::move(s));
  n->op = op;
  n->lhs = std::move(a);
  n->rhs = std::move(b);
  return n;
}

Expr unary(UnOp op, Expr e, Span s) {
  auto n = node<Unary>(std::move(s));
  n->op = op;
  n->operand = std::move(e);
  return n;
}

Expr tuple(std::vector<Expr> elems, Span s) {
  auto n = node<Tuple>(std::move(s));
  n->elems = std::move(elems);
  return n;
}

Expr proj(Expr t, int index, Span s) {
  auto n = node<Proj>(std::move(s));
  n->tuple = std::move(t);
  n->index = index;
  return n;
}

Expr cons(Expr head, Expr tail, Span s) {
  return call("Cons", {std::move(head), std::move(tail)}, std::move(s));
}

Expr list(std::vector<Expr> elems, Span s) {
  auto n = node<ListLit>(std::move(s));
  n->elems = std::move(elems);
  return n;
}

Pattern pat_name(std::string name, Span s) {
  Pattern p;
  p.kind = Pattern::Kind::Name;
  p.name = std::move(name);
  p.span = std::move(s);
  return p;
}

Pattern pat_wild(Span s) {
  Pattern p;
  p.kind = Pattern::Kind::Wild;
  p.span = std::move(s);
  return p;
}

Pattern pat_tuple(std::vector<Pattern> elems, Span s) {
  Pattern p;
  p.kind = Pattern::Kind::Tuple;
  p.elems = std::move(elems);
  p.span = std::move(s);
  return p;
}

Expr let(Pattern p, Expr value, Expr body, std::optional<Type> annot, Span s) {
  auto n = node<Let>(std::move(s));
  n->pattern = std::move(p);
  n->annot = std::move(annot);
  n->value = std::move(value);
  n->body = std::move(body);
  return n;
}

Expr if_(Expr cond, Expr then_e, Expr else_e, Span s) {
  auto n = node<If>(std::move(s));
  n->cond = std::move(cond);
  n->then_e = std::move(then_e);
  n->else_e = std::move(else_e);
  return n;
}

MatchArm arm(std::string ctor, std::vector<std::string> binders, Expr body, Span s) {
  MatchArm a;
  a.ctor = std::move(ctor);
  a.binder_spans.resize(binders.size());
  a.binders = std::move(binders);
  a.body = std::move(body);
  a.span = std::move(s);
  return a;
}

MatchArm wild_arm(Expr body, Span s) {
  return arm("", {}, std::move(body), std::move(s));
}

Expr match(Expr scrutinee, std::vector<MatchArm> arms, Span s) {
  auto n = node<Match>(std::move(s));
  n->scrutinee = std::move(scrutinee);
  n->arms = std::move(arms);
  return n;
}

LambdaParam lparam(std::string name, std::optional<Type> annot, Span s) {
  return LambdaParam{std::move(name), std::move(annot), std::move(s)};
}

Expr lambda(std::vector<LambdaParam> params, Expr body, Span s) {
  auto n = node<Lambda>(std::move(s));
  n->params = std::move(params);
  n->body = std::move(body);
  return n;
}

Expr lambda(std::vector<std::string> params, Expr body, Span s) {
  std::vector<LambdaParam> ps;
  for (auto& p : params)
    ps.push_back(lparam(std::move(p)));
  return lambda(std::move(ps), std::move(body), std::move(s));
}

Field field(std::string name, Type type, Span s) {
  return Field{std::move(name), std::move(type), std::move(s)};
}

CtorDef ctor(std::string name, std::vector<Field> fields, Span s) {
  return CtorDef{std::move(name), std::move(fields), std::move(s)};
}

Decl type_decl(std::string name, std::vector<CtorDef> ctors, Span s) {
  auto d = std::make_shared<TypeDecl>();
  d->name = std::move(name);
  d->ctors = std::move(ctors);
  d->span = std::move(s);
  Decl out;
  out.kind = DeclKind::Type;
  out.type = std::move(d);
  return out;
}

Decl dim_decl(std::string name, std::optional<int64_t> default_value, Span s) {
  auto d = std::make_shared<DimDecl>();
  d->name = std::move(name);
  d->default_value = default_value;
  d->span = std::move(s);
  Decl out;
  out.kind = DeclKind::Dim;
  out.dim = std::move(d);
  return out;
}

Init init_zeros() {
  return Init{Init::Kind::Zeros, 0, 0};
}
Init init_ones() {
  return Init{Init::Kind::Ones, 0, 0};
}
Init init_xavier() {
  return Init{Init::Kind::Xavier, 0, 0};
}
Init init_normal(double mean, double stddev) {
  return Init{Init::Kind::Normal, mean, stddev};
}
Init init_uniform(double low, double high) {
  return Init{Init::Kind::Uniform, low, high};
}

Decl param_decl(std::string name, Type type, Init init, Span s) {
  auto d = std::make_shared<ParamDecl>();
  d->name = std::move(name);
  d->type = std::move(type);
  d->init = init;
  d->span = std::move(s);
  Decl out;
  out.kind = DeclKind::Param;
  out.param = std::move(d);
  return out;
}

FnParam fn_param(std::string name, Type type, Span s) {
  return FnParam{std::move(name), std::move(type), std::move(s)};
}

Decl fn_decl(std::string name, std::vector<FnParam> params, Type ret, Expr body, bool is_entry,
             Span s) {
  auto d = std::make_shared<FnDecl>();
  d->name = std::move(name);
  d->is_entry = is_entry;
  d->params = std::move(params);
  d->ret = std::move(ret);
  d->body = std::move(body);
  d->span = std::move(s);
  Decl out;
  out.kind = DeclKind::Fn;
  out.fn = std::move(d);
  return out;
}

} // namespace pejit::ir::build
