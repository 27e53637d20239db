// The source IR: an immutable tree of shared expression nodes, each with a kind tag and a
// source span.
//
// Semantics, in one place. The language is strict, pure and first-order in its data: an
// expression evaluates to an Int (64-bit), a Bool, a tensor (f32/i32 with a static shape), a
// tuple, a list, an ADT value or a closure. `let` binds a pattern (name, `_` or a tuple of
// patterns); `match` selects the first arm whose constructor equals the value's (`_` matches
// anything); `if` needs a Bool; `Call` applies a global function, a closure, a constructor,
// an op of the registry or a list builtin (map, fold, sum_list, length); `Binary`/`Unary` on
// Int/Bool are scalar arithmetic and logic, on tensors they are registry ops (`@` matmul,
// `+ - * /` with broadcasting, comparisons giving 0/1 tensors).
//
// The parser builds nodes; the checker (src/types) fills each node's annotations (type,
// binding time, name resolution, frame slots) exactly once, before the module is published.
// After that, nodes are shared read-only across threads.
#pragma once

#include "src/ir/type.h"
#include "src/util/diagnostics.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pejit::ir {

enum class ExprKind : uint8_t {
#define PEJIT_EXPR(K) K,
#include "src/ir/expr_kinds.def"
#undef PEJIT_EXPR
};
const char* expr_kind_name(ExprKind k);

/// Binding time (docs/language.md). Const: a known constant (literals, zeros/ones/full tensors);
/// Static: derived only from the entry's input structure, literals and shapes; Dynamic:
/// parameters, tensor payloads and anything computed from them.
enum class BT : uint8_t { Const, Static, Dynamic };
inline BT bt_join(BT a, BT b) {
  return a > b ? a : b;
}
const char* bt_name(BT b);

/// What a name refers to, decided by the checker.
struct VarRef {
  enum class Kind : uint8_t { Unresolved, Local, Capture, Global, Ctor, Param, Builtin, Op, Dim };
  Kind kind = Kind::Unresolved;
  int index = -1; ///< Local: frame slot; Capture: capture index; Global: fn index;
                  ///< Ctor: ctor index in its ADT; Param: param index; Builtin/Op: their id;
                  ///< Dim: the named dimension's index in the module (an Int once bound)
  int adt = -1;   ///< Ctor: ADT index in the module
};

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  ExprKind kind;
  Span span;
  // Annotations, filled once by the checker.
  mutable Type type;
  mutable BT bt = BT::Dynamic;

  explicit ExprNode(ExprKind k, Span s) : kind(k), span(std::move(s)) {}
  virtual ~ExprNode() = default;

  template <class T> const T* as() const {
    return kind == T::kKind ? static_cast<const T*>(this) : nullptr;
  }
  template <class T> const T& cast() const { return *static_cast<const T*>(this); }
};

#define PEJIT_EXPR_NODE(K)                                                                         \
  static constexpr ExprKind kKind = ExprKind::K;                                                   \
  explicit K(Span s) : ExprNode(ExprKind::K, std::move(s)) {}

struct IntLit : ExprNode {
  PEJIT_EXPR_NODE(IntLit)
  int64_t value = 0;
  /// Set by the checker where the literal is an operand of a tensor op beside a tensor
  /// (`gt(y, 2)`, `x * 2`): the literal is then a constant 0-d tensor of that element type.
  mutable std::optional<Elem> tensor_elem;
};
/// A float literal is a constant f32[] tensor.
struct FloatLit : ExprNode {
  PEJIT_EXPR_NODE(FloatLit)
  double value = 0;
};
struct BoolLit : ExprNode {
  PEJIT_EXPR_NODE(BoolLit)
  bool value = false;
};
struct Var : ExprNode {
  PEJIT_EXPR_NODE(Var)
  std::string name;
  mutable VarRef ref;
};

/// Call of a name or of any expression. `callee` is usually a Var; the checker resolves it
/// (global fn, local closure, constructor, registry op, list builtin) into `ref`.
struct Call : ExprNode {
  PEJIT_EXPR_NODE(Call)
  Expr callee;
  std::vector<Expr> args;
  mutable VarRef ref; ///< copy of the callee's resolution when the callee is a name
  /// Registry ops: the static Int arguments (attributes) and the number of tensor arguments.
  mutable std::vector<int64_t> attr_ints;
  mutable int tensor_args = 0;
  /// Empty unless the op's attributes or their range check depend on named dimensions
  /// (`zeros(H)`, `slice(x, 0, 2*H)`, a slice of an `f32[2*H]`): then every attribute as a
  /// dimension expression (attr_ints holds 0 where one is named). The values are known only
  /// when the module is instantiated: interp::bind_dims checks them, and the evaluator
  /// resolves them before its backend sees the op (interp::resolve_attr_dims).
  mutable std::vector<Dim> attr_dims;
};

enum class BinOp : uint8_t { Add, Sub, Mul, Div, Mod, MatMul, Lt, Le, Gt, Ge, Eq, Ne, And, Or };
const char* binop_str(BinOp op); ///< source spelling: "+", "@", "&&", ...
int binop_precedence(BinOp op);  ///< higher binds tighter

struct Binary : ExprNode {
  PEJIT_EXPR_NODE(Binary)
  BinOp op = BinOp::Add;
  Expr lhs, rhs;
  mutable int tensor_op = -1; ///< registry op id when the operands are tensors, else -1
};

enum class UnOp : uint8_t { Neg, Not };
struct Unary : ExprNode {
  PEJIT_EXPR_NODE(Unary)
  UnOp op = UnOp::Neg;
  Expr operand;
  mutable int tensor_op = -1;
};

struct Tuple : ExprNode {
  PEJIT_EXPR_NODE(Tuple)
  std::vector<Expr> elems;
};
/// `e.N`: the N-th element of a tuple.
struct Proj : ExprNode {
  PEJIT_EXPR_NODE(Proj)
  Expr tuple;
  int index = 0;
};

/// Binder of `let`: a name, `_`, or a tuple of patterns.
struct Pattern {
  enum class Kind : uint8_t { Name, Wild, Tuple };
  Kind kind = Kind::Wild;
  std::string name;
  std::vector<Pattern> elems;
  Span span;
  mutable int slot = -1; ///< Name: frame slot
};

struct Let : ExprNode {
  PEJIT_EXPR_NODE(Let)
  Pattern pattern;
  std::optional<Type> annot; ///< `let x: T = ...`
  Expr value, body;
};

struct If : ExprNode {
  PEJIT_EXPR_NODE(If)
  Expr cond, then_e, else_e;
};

/// One arm `Ctor(a, _, c) => body`, or `_ => body` (ctor empty). Lists use the built-in
/// constructors `Nil` and `Cons(head, tail)` (written `[]` and `h :: t` too).
struct MatchArm {
  std::string ctor;                 ///< empty: wildcard
  std::vector<std::string> binders; ///< "_" ignores a field
  std::vector<Span> binder_spans;
  Expr body;
  Span span;
  mutable int ctor_index = -1;    ///< index within the scrutinee's ADT (List: Nil 0, Cons 1)
  mutable std::vector<int> slots; ///< frame slot per binder (-1 for "_")
};

struct Match : ExprNode {
  PEJIT_EXPR_NODE(Match)
  Expr scrutinee;
  std::vector<MatchArm> arms;
};

struct LambdaParam {
  std::string name;
  std::optional<Type> annot;
  Span span;
};

/// `fn (x, y: T) => body` or `fn x => body`: a closure over the variables it mentions.
struct Lambda : ExprNode {
  PEJIT_EXPR_NODE(Lambda)
  std::vector<LambdaParam> params;
  Expr body;
  mutable std::vector<VarRef> captures; ///< where each captured value comes from (outer frame)
  mutable std::vector<int> param_slots;
  mutable int frame_size = 0;
};

/// `[a, b, c]`: a list (the empty list needs an element type from context).
struct ListLit : ExprNode {
  PEJIT_EXPR_NODE(ListLit)
  std::vector<Expr> elems;
};

#undef PEJIT_EXPR_NODE

/// CRTP visitor generated from expr_kinds.def: `R visit(const Expr&)` dispatches to
/// `Derived::visit_Kind(const Kind&)`.
template <class Derived, class R> class Visitor {
public:
  R visit(const ExprNode& e) {
    switch (e.kind) {
#define PEJIT_EXPR(K)                                                                              \
  case ExprKind::K:                                                                                \
    return static_cast<Derived*>(this)->visit_##K(static_cast<const K&>(e));
#include "src/ir/expr_kinds.def"
#undef PEJIT_EXPR
    }
    __builtin_unreachable();
  }
  R visit(const Expr& e) {
    return visit(*e);
  }
};

} // namespace pejit::ir
