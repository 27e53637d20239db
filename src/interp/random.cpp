// Which functions draw random numbers (a fixpoint over the module's call graph) and the key
// tensor of a draw. See random.h.
#include "src/interp/random.h"

#include "src/ir/expr.h"
#include "src/kernels/random.h"
#include "src/ops/op.h"

namespace pejit::interp {

Tensor random_key_tensor(uint32_t context, uint32_t index, const RandomState& rs) {
  int32_t k[kernels::kRandomKeyWidth] = {static_cast<int32_t>(context),
                                         static_cast<int32_t>(index),
                                         static_cast<int32_t>(rs.step),
                                         static_cast<int32_t>(static_cast<uint32_t>(rs.seed)),
                                         static_cast<int32_t>(static_cast<uint32_t>(rs.seed >> 32)),
                                         rs.train ? 1 : 0};
  return Tensor::from_i32(Shape{kernels::kRandomKeyWidth}, k);
}

bool template_eligible(const ir::FnDecl& f) {
  auto tensors_only = [](const ir::Type& t, auto& self) -> bool {
    if (t->kind == ir::TypeKind::Tensor)
      return true;
    if (t->kind != ir::TypeKind::Tuple)
      return false;
    for (const auto& e : t->elems)
      if (!self(e, self))
        return false;
    return true;
  };
  if (f.is_entry || !f.ret || !tensors_only(f.ret, tensors_only))
    return false;
  bool any_tensor = false;
  for (const auto& p : f.params) {
    auto k = p.type->kind;
    if (k == ir::TypeKind::Tensor)
      any_tensor = true;
    else if (k != ir::TypeKind::Int && k != ir::TypeKind::Bool)
      return false;
  }
  return any_tensor;
}

namespace {

// Whether e contains a random op, and the global functions it calls or names (into `calls`).
bool scan(const ir::Expr& e, std::vector<int>& calls) {
  using K = ir::ExprKind;
  if (!e)
    return false;
  bool r = false;
  auto sub = [&](const ir::Expr& x) { r = scan(x, calls) || r; };
  switch (e->kind) {
  case K::IntLit:
  case K::FloatLit:
  case K::BoolLit:
    break;
  case K::Var:
    if (e->cast<ir::Var>().ref.kind == ir::VarRef::Kind::Global)
      calls.push_back(e->cast<ir::Var>().ref.index);
    break;
  case K::Call: {
    const auto& c = e->cast<ir::Call>();
    if (c.ref.kind == ir::VarRef::Kind::Op && ops::is_random(static_cast<ops::OpId>(c.ref.index)))
      r = true;
    if (c.ref.kind == ir::VarRef::Kind::Global)
      calls.push_back(c.ref.index);
    sub(c.callee);
    for (const auto& a : c.args)
      sub(a);
    break;
  }
  case K::Binary:
    sub(e->cast<ir::Binary>().lhs);
    sub(e->cast<ir::Binary>().rhs);
    break;
  case K::Unary:
    sub(e->cast<ir::Unary>().operand);
    break;
  case K::Tuple:
    for (const auto& x : e->cast<ir::Tuple>().elems)
      sub(x);
    break;
  case K::Proj:
    sub(e->cast<ir::Proj>().tuple);
    break;
  case K::Let:
    sub(e->cast<ir::Let>().value);
    sub(e->cast<ir::Let>().body);
    break;
  case K::If:
    sub(e->cast<ir::If>().cond);
    sub(e->cast<ir::If>().then_e);
    sub(e->cast<ir::If>().else_e);
    break;
  case K::Match:
    sub(e->cast<ir::Match>().scrutinee);
    for (const auto& a : e->cast<ir::Match>().arms)
      sub(a.body);
    break;
  case K::Lambda:
    sub(e->cast<ir::Lambda>().body);
    break;
  case K::ListLit:
    for (const auto& x : e->cast<ir::ListLit>().elems)
      sub(x);
    break;
  }
  return r;
}

} // namespace

std::vector<bool> random_functions(const ir::Module& m) {
  const auto& fns = m.fns();
  std::vector<bool> rnd(fns.size(), false);
  std::vector<std::vector<int>> calls(fns.size());
  for (size_t i = 0; i < fns.size(); ++i)
    rnd[i] = scan(fns[i]->body, calls[i]);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < fns.size(); ++i)
      if (!rnd[i])
        for (int c : calls[i])
          if (c >= 0 && static_cast<size_t>(c) < fns.size() && rnd[static_cast<size_t>(c)]) {
            rnd[i] = changed = true;
            break;
          }
  }
  return rnd;
}

std::vector<bool> random_context_functions(const ir::Module& m) {
  std::vector<bool> r = random_functions(m);
  for (size_t i = 0; i < r.size(); ++i)
    r[i] = r[i] && template_eligible(*m.fns()[i]);
  return r;
}

} // namespace pejit::interp
