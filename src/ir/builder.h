// Builder API of the source IR: free functions that make every expression, pattern and
// declaration without program text (docs/language.md: everything a text program can say, the
// C++ API can say too). Spans default to unknown; the parser uses the same functions with
// real spans.
#pragma once

#include "src/ir/module.h"

#include <optional>
#include <string>
#include <vector>

namespace pejit::ir::build {

/// Expressions.
Expr int_lit(int64_t v, Span s = {});
Expr float_lit(double v, Span s = {});
Expr bool_lit(bool v, Span s = {});
Expr var(std::string name, Span s = {});
/// `name(args)`: a call of a function, constructor, op or builtin by name.
Expr call(std::string name, std::vector<Expr> args, Span s = {});
/// `callee(args)` for any callee expression (a closure, a call's result, ...).
Expr call_expr(Expr callee, std::vector<Expr> args, Span s = {});
Expr binary(BinOp op, Expr a, Expr b, Span s = {});
Expr unary(UnOp op, Expr e, Span s = {});
Expr tuple(std::vector<Expr> elems, Span s = {});
/// `t.index`
Expr proj(Expr t, int index, Span s = {});
/// `h :: t`, i.e. `Cons(h, t)`.
Expr cons(Expr head, Expr tail, Span s = {});
/// `[e0, e1, ...]`
Expr list(std::vector<Expr> elems, Span s = {});

/// Let patterns.
Pattern pat_name(std::string name, Span s = {});
Pattern pat_wild(Span s = {});
Pattern pat_tuple(std::vector<Pattern> elems, Span s = {});
/// `let p [: annot] = value; body`
Expr let(Pattern p, Expr value, Expr body, std::optional<Type> annot = std::nullopt, Span s = {});

Expr if_(Expr cond, Expr then_e, Expr else_e, Span s = {});
/// `ctor(b0, b1, ...) => body`; a binder "_" ignores its field. Lists: "Nil", "Cons".
MatchArm arm(std::string ctor, std::vector<std::string> binders, Expr body, Span s = {});
/// `_ => body`
MatchArm wild_arm(Expr body, Span s = {});
Expr match(Expr scrutinee, std::vector<MatchArm> arms, Span s = {});

LambdaParam lparam(std::string name, std::optional<Type> annot = std::nullopt, Span s = {});
/// `fn (p0, p1: T) => body`
Expr lambda(std::vector<LambdaParam> params, Expr body, Span s = {});
/// `fn (a, b) => body` with unannotated parameters.
Expr lambda(std::vector<std::string> params, Expr body, Span s = {});

/// Declarations.
Field field(std::string name, Type type, Span s = {});
CtorDef ctor(std::string name, std::vector<Field> fields = {}, Span s = {});
Decl type_decl(std::string name, std::vector<CtorDef> ctors, Span s = {});
Decl dim_decl(std::string name, std::optional<int64_t> default_value = std::nullopt, Span s = {});
Init init_zeros();
Init init_ones();
Init init_xavier();
Init init_normal(double mean, double stddev);
Init init_uniform(double low, double high);
Decl param_decl(std::string name, Type type, Init init = {}, Span s = {});
FnParam fn_param(std::string name, Type type, Span s = {});
Decl fn_decl(std::string name, std::vector<FnParam> params, Type ret, Expr body,
             bool is_entry = false, Span s = {});

} // namespace pejit::ir::build
