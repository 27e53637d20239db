// The protocol between the shared evaluator (evaluator.h) and its backends, written as C++20
// concepts: a backend decides what a tensor is (computed eagerly, batched over a group's rows,
// residualized by the partial evaluator, traced into graph nodes), and the evaluator does the
// rest. A backend that misses an operation, or gets its signature wrong, fails to compile with
// EvaluatorBackend named in the error rather than deep inside the evaluator's body.
#pragma once

#include "src/interp/params.h"
#include "src/interp/value.h"
#include "src/ops/op.h"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace pejit::interp {

/// What Backend::inline_begin returns when it replayed the call.
inline constexpr int32_t kInlineReplayed = -2;

/// The optional memo of inlined calls (the partial evaluator's residual fragments).
/// inline_begin runs before a global function's body is evaluated inline: it returns
/// kInlineReplayed when the backend produced the call's result itself (in `out`: the elements
/// of the tuple f returns if `flat`, else the value), else a token (-1: nothing to tell at the
/// end); `depth_left` is the calls the depth bound still allows, this one included.
/// inline_end runs after it, for a token >= 0, with its result (as in `out`) and the deepest
/// nesting of calls it reached, itself included. A call that throws never ends.
template <class B>
concept InlineMemoBackend =
    requires(B& b, const ir::FnDecl& f, int fn_index, const Values& args, int depth_left,
             Values& out, bool flat, int32_t token, const Value* results, size_t n, int depth) {
      { b.inline_begin(f, fn_index, args, depth_left, out, flat) } -> std::same_as<int32_t>;
      { b.inline_end(token, results, n, flat, depth) } -> std::same_as<void>;
    };

/// The optional call of a global function whose result is a flat tuple of tensors bound by
/// `let (a, b) = f(...)`: as Backend::call, the tuple's elements appended to `out` (the tuple
/// is never built); false: the evaluator inlines the body.
template <class B>
concept FlatCallBackend = requires(B& b, const ir::FnDecl& f, int fn_index, const Values& args,
                                   const Span& at, Values& out) {
  { b.call_flat(f, fn_index, args, at, out) } -> std::same_as<bool>;
};

/// What the evaluator asks of a backend. `op` gives every result of a multi-result op (split)
/// in `multi` when it is not null; `call` returns nullopt when the evaluator is to evaluate
/// the body inline; `random_key` gives a random op's key operand and its index j in the
/// random context (interp/random.h), which the evaluator adds to the op; `dims` the sizes the
/// module was instantiated with (named dimensions in expressions: dim_attrs.h). A backend that
/// declares call_flat, inline_begin or inline_end must declare them as the optional protocols above
/// say: a near miss would silently be ignored otherwise.
template <class B>
concept EvaluatorBackend =
    requires(B& b, int index, ops::OpId id, const ops::Attr& attr, const Value* args, size_t n,
             const Span& at, Values* multi, const ir::FnDecl& f, const Values& call_args,
             const Value& v, const ir::Type& type, int64_t& j) {
      { b.param(index) } -> std::convertible_to<Value>;
      { b.op(id, attr, args, n, at) } -> std::convertible_to<Value>;
      { b.op(id, attr, args, n, at, multi) } -> std::convertible_to<Value>;
      { b.call(f, index, call_args, at) } -> std::same_as<std::optional<Value>>;
      { b.sum_list(v, type, at) } -> std::convertible_to<Value>;
      { b.to_int(v, at) } -> std::convertible_to<Value>;
      { b.to_bool(v, at) } -> std::convertible_to<Value>;
      { b.random_key(at, j) } -> std::convertible_to<Value>;
      { b.dims() } -> std::same_as<const DimBindings&>;
    } &&
    (!requires { &B::call_flat; } || FlatCallBackend<B>) &&
    (!(requires { &B::inline_begin; } || requires { &B::inline_end; }) || InlineMemoBackend<B>);

/// Backend::sum_list as the eager backends compute it: zeros of `result_type` for an empty
/// list, else the elements added left to right with the backend's own Add.
template <class Backend>
Value sum_left_to_right(Backend& be, const Value& xs, const ir::Type& result_type,
                        const DimBindings& dims, const Span& s) {
  if (xs.list_size() == 0)
    return Value::tensor(Tensor::zeros(DType::F32, concrete_shape(result_type, dims)));
  Value acc = xs.list_at(0);
  for (size_t i = 1; i < xs.list_size(); ++i) {
    Value two[2] = {acc, xs.list_at(i)};
    acc = be.op(ops::OpId::Add, {}, two, 2, s);
  }
  return acc;
}

} // namespace pejit::interp
