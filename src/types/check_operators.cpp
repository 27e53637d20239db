// The Checker's typing of the infix and prefix operators: arithmetic and comparisons on Ints
// and on tensors (a tensor operator types as its op of the registry; an Int literal operand
// becomes a tensor constant), the Bool operators, and the prefix - and !.
#include "src/ops/op.h"
#include "src/types/checker.h"

#include <optional>
#include <string>

namespace pejit::types::detail {

using namespace ir;

std::optional<ops::OpId> Checker::tensor_binop(BinOp op) {
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

Type Checker::check_binary(const Binary& b) {
  Type l = check(b.lhs);
  Type r = check(b.rhs);
  if (is_error(l) || is_error(r))
    return t_error();
  std::string op = binop_str(b.op);
  if (tensor_binop(b.op) && b.op != BinOp::MatMul) {
    if (Type t = l->kind == TypeKind::Int ? coerce_literal(b.lhs, r) : nullptr)
      l = t;
    else if (Type u = r->kind == TypeKind::Int ? coerce_literal(b.rhs, l) : nullptr)
      r = u;
    if (is_error(l) || is_error(r))
      return t_error();
  }
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
    hint = " (Int values and tensors do not mix; an Int literal such as 2 does)";
  d_.error(b.span,
           "operator " + op + " cannot apply to " + type_str(l) + " and " + type_str(r) + hint);
  return t_error();
}

Type Checker::check_unary(const Unary& u) {
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

} // namespace pejit::types::detail
