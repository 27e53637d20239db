// Names and spellings of expression kinds, operators and binding times.
#include "src/ir/expr.h"

namespace pejit::ir {

const char* expr_kind_name(ExprKind k) {
  switch (k) {
#define PEJIT_EXPR(K)                                                                              \
  case ExprKind::K:                                                                                \
    return #K;
#include "src/ir/expr_kinds.def"
#undef PEJIT_EXPR
  }
  return "?";
}

const char* bt_name(BT b) {
  switch (b) {
  case BT::Const:
    return "const";
  case BT::Static:
    return "static";
  case BT::Dynamic:
    return "dynamic";
  }
  return "?";
}

const char* binop_str(BinOp op) {
  switch (op) {
  case BinOp::Add:
    return "+";
  case BinOp::Sub:
    return "-";
  case BinOp::Mul:
    return "*";
  case BinOp::Div:
    return "/";
  case BinOp::Mod:
    return "%";
  case BinOp::MatMul:
    return "@";
  case BinOp::Lt:
    return "<";
  case BinOp::Le:
    return "<=";
  case BinOp::Gt:
    return ">";
  case BinOp::Ge:
    return ">=";
  case BinOp::Eq:
    return "==";
  case BinOp::Ne:
    return "!=";
  case BinOp::And:
    return "&&";
  case BinOp::Or:
    return "||";
  }
  return "?";
}

int binop_precedence(BinOp op) {
  switch (op) {
  case BinOp::Or:
    return 1;
  case BinOp::And:
    return 2;
  case BinOp::Lt:
  case BinOp::Le:
  case BinOp::Gt:
  case BinOp::Ge:
  case BinOp::Eq:
  case BinOp::Ne:
    return 3;
  case BinOp::Add:
  case BinOp::Sub:
    return 4;
  case BinOp::Mul:
  case BinOp::Div:
  case BinOp::Mod:
  case BinOp::MatMul:
    return 5;
  }
  return 0;
}

} // namespace pejit::ir
