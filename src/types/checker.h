// Internal to the checker (check.cpp, check_expr.cpp, check_call.cpp): the Checker class that
// types and resolves one module's declarations and function bodies, and the frames it binds
// names in. check.cpp checks declarations, bodies and scopes; check_expr.cpp expressions;
// check_call.cpp calls (of functions, constructors, builtins and tensor ops) and operators.
#pragma once

#include "src/ir/module.h"
#include "src/ops/op.h"
#include "src/types/builtins.h"
#include "src/util/diagnostics.h"

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace pejit::types::detail {

struct Binding {
  std::string name;
  int slot;
  ir::Type type;
};

struct Frame {
  std::vector<Binding> scope;
  int next_slot = 0;
  std::vector<std::string> capture_names;
  std::vector<ir::Type> capture_types;
  std::vector<ir::VarRef> capture_refs;
};

struct Resolved {
  ir::VarRef ref;
  ir::Type type;
};

inline bool is_kind(const ir::Type& t, ir::TypeKind k) {
  return !ir::is_error(t) && t->kind == k;
}

class Checker {
public:
  Checker(const ir::Module& m, Diagnostics& d) : m_(m), d_(d) {}

  // Checks a declaration's signature-level well-formedness (types exist, dims declared).
  void check_decl(const ir::Decl& decl);

  // Type checks a function body; fills annotations and returns the names the body uses.
  std::set<std::string> check_fn(const ir::FnDecl& f);

private:
  const ir::Module& m_;
  Diagnostics& d_;
  std::vector<Frame> frames_;
  std::set<std::string> uses_;

  // check.cpp: types and scopes.
  void note_type_uses(const ir::Type& t);
  void check_type_wf(const ir::Type& t, const Span& s);
  int bind(const std::string& name, ir::Type t);
  void bind_pattern(const ir::Pattern& p, const ir::Type& t);
  std::optional<Resolved> lookup(const std::string& name, size_t k);
  ir::Type fn_type(const ir::FnDecl& f);
  ir::Type set(const ir::ExprNode& e, ir::Type t);
  ir::Type mismatch(const ir::ExprNode& e, const std::string& what, const ir::Type& want,
                    const ir::Type& got);

  // check_expr.cpp: expressions other than calls and operators.
  // Checks `e`, with `expected` (may be null) as a hint; returns and records its type.
  ir::Type check(const ir::Expr& e, const ir::Type& expected = nullptr);
  ir::Type check_var(const ir::Var& v);
  ir::Type check_match(const ir::Match& mt, const ir::Type& expected);
  ir::Type check_lambda(const ir::Lambda& l, const ir::Type& expected);

  // check_call.cpp: calls, builtins, tensor ops and operators.
  // Checks an argument list against parameter types.
  void check_args(const ir::Call& c, const std::vector<ir::Type>& params, const std::string& what);
  static std::optional<int64_t> int_literal(const ir::Expr& e);
  /// A checked Int expression as a dimension: literals and named dimensions combined by
  /// + and -, by * with a constant and by / of a constant that divides it (`2*H+1`); nullopt
  /// for anything else (a local Int, `H*H`).
  static std::optional<ir::Dim> dim_expr(const ir::Expr& e);
  /// The Int attributes of an op call from argument `from` on, as dimensions; false (with an
  /// error at the argument) where one is not a dimension expression.
  bool attr_dims(const ir::Call& c, size_t from, const std::string& what,
                 std::vector<ir::Dim>& out);
  /// Records the attributes on the call (attr_ints; attr_dims when they need the bindings)
  /// and types it by the op's symbolic shape rule.
  ir::Type finish_op(const ir::Call& c, ops::OpId id, std::span<const ir::Type> targs,
                     const std::vector<ir::Dim>& attrs);
  /// An Int literal beside a tensor operand becomes a constant 0-d tensor of the tensor's
  /// element type (`gt(y, 2)`, `x * 2`); returns its new type, or nullptr when `e` is not such
  /// a literal or `other` is not a tensor. Int variables never convert: data and control stay
  /// apart (to_int / to_bool are the explicit steps).
  ir::Type coerce_literal(const ir::Expr& e, const ir::Type& other);
  ir::Type check_call(const ir::Call& c, const ir::Type& expected);
  bool lookup_local_only(const std::string& n);
  ir::Type check_list_ctor(const ir::Call& c, const std::string& n, const ir::Type& expected);
  ir::Type check_builtin(const ir::Call& c, Builtin b);
  ir::Type check_op(const ir::Call& c, ops::OpId id, ops::Attr attr);
  ir::Type check_random_op(const ir::Call& c, ops::OpId id);
  static std::optional<ops::OpId> tensor_binop(ir::BinOp op);
  ir::Type check_binary(const ir::Binary& b);
  ir::Type check_unary(const ir::Unary& u);
};

} // namespace pejit::types::detail
