// How the shared evaluator (evaluator.h) evaluates a call: a frame on the value stack per call,
// the backend asked first (Backend::call, call_flat), else the body inlined, through the
// backend's memo of inlined calls where it has one; a tuple returned to `let (a, b) = f(...)`
// is never built (eval_into). Included at the end of evaluator.h, not on its own.
#pragma once

#include "src/interp/evaluator.h"

namespace pejit::interp {

template <EvaluatorBackend Backend>
inline Value Evaluator<Backend>::call_fn_impl(const FnDecl& f, const Values& args, const Span& at) {
  DepthGuard g(*this, at.known() ? at : f.span);
  size_t base = stack_.size();
  stack_.resize(base + static_cast<size_t>(f.frame_size));
  for (size_t i = 0; i < args.size(); ++i)
    stack_[base + f.param_slots[i]] = args[i];
  Frame fr{base, nullptr};
  Value r = eval(f.body, fr);
  stack_.resize(base);
  return r;
}

template <EvaluatorBackend Backend>
inline Value Evaluator<Backend>::call_fn_moving(const FnDecl& f, Values& args, const Span& at) {
  DepthGuard g(*this, at.known() ? at : f.span);
  size_t base = enter_moving(f, args);
  Frame fr{base, nullptr};
  Value r = eval(f.body, fr);
  stack_.resize(base);
  return r;
}

template <EvaluatorBackend Backend>
inline Value Evaluator<Backend>::call_closure(const Closure& c, const Values& args,
                                              const Span& at) {
  if (!c.lambda) {
    const FnDecl& f = *m_.fns()[static_cast<size_t>(c.fn_index)];
    if (auto v = backend_.call(f, c.fn_index, args, at))
      return *v;
    if constexpr (kInlineMemo) {
      Values copy = take_args(args.size());
      copy.insert(copy.end(), args.begin(), args.end());
      Value r = call_global_inline(f, c.fn_index, copy, at);
      give_args(std::move(copy));
      return r;
    }
    return call_fn(f, args, at);
  }
  const Lambda& l = *c.lambda;
  DepthGuard g(*this, at);
  size_t base = stack_.size();
  stack_.resize(base + static_cast<size_t>(l.frame_size));
  for (size_t i = 0; i < args.size(); ++i)
    stack_[base + l.param_slots[i]] = args[i];
  Frame fr{base, &c.captures};
  Value r = eval(l.body, fr);
  stack_.resize(base);
  return r;
}

template <EvaluatorBackend Backend>
inline bool Evaluator<Backend>::let_call_tuple(const Let& l, const Frame& fr) {
  const Call& c = l.value->cast<Call>();
  if (c.ref.kind != VarRef::Kind::Global)
    return false;
  const FnDecl& f = *m_.fns()[static_cast<size_t>(c.ref.index)];
  const auto& ps = l.pattern.elems;
  if (f.ret->kind != ir::TypeKind::Tuple || f.ret->elems.size() != ps.size())
    return false;
  Values args = eval_args_pooled(c, fr);
  Values outs = take_args(ps.size());
  bool asked = false, done = false;
  if constexpr (FlatCallBackend<Backend>) {
    // A flat tuple of tensors bound to names: the backend's call_flat decides.
    bool flat = true;
    for (size_t i = 0; i < ps.size() && flat; ++i)
      flat = f.ret->elems[i]->kind == ir::TypeKind::Tensor && ps[i].kind != Pattern::Kind::Tuple;
    if (flat) {
      asked = true;
      done = backend_.call_flat(f, c.ref.index, args, c.span, outs);
    }
  }
  if (!asked) {
    if (auto v = backend_.call(f, c.ref.index, args, c.span)) {
      bind(l.pattern, *v, fr);
      give_args(std::move(outs));
      give_args(std::move(args));
      return true;
    }
  }
  if (!done)
    call_inline(f, c.ref.index, args, c.span, outs, true);
  for (size_t i = 0; i < ps.size(); ++i) {
    if (ps[i].kind == Pattern::Kind::Name)
      stack_[fr.base + static_cast<size_t>(ps[i].slot)] = std::move(outs[i]);
    else if (ps[i].kind == Pattern::Kind::Tuple)
      bind(ps[i], outs[i], fr);
  }
  give_args(std::move(outs));
  give_args(std::move(args));
  return true;
}

template <EvaluatorBackend Backend>
inline void Evaluator<Backend>::call_inline(const FnDecl& f, int fn_index, Values& args,
                                            const Span& at, Values& out, bool flat) {
  if constexpr (kInlineMemo) {
    int32_t token = backend_.inline_begin(f, fn_index, args, max_depth_ - depth_, out, flat);
    if (token == kInlineReplayed)
      return;
    if (token >= 0) {
      int saved = peak_, at_depth = depth_;
      peak_ = depth_;
      size_t first = out.size();
      inline_body(f, args, at, out, flat);
      backend_.inline_end(token, out.data() + first, out.size() - first, flat, peak_ - at_depth);
      peak_ = std::max(saved, peak_);
      return;
    }
  }
  inline_body(f, args, at, out, flat);
}

template <EvaluatorBackend Backend>
inline void Evaluator<Backend>::inline_body(const FnDecl& f, Values& args, const Span& at,
                                            Values& out, bool flat) {
  if (flat)
    call_fn_into(f, args, at, out);
  else
    out.push_back(call_fn_moving(f, args, at));
}

template <EvaluatorBackend Backend>
inline Value Evaluator<Backend>::call_global_inline(const FnDecl& f, int fn_index, Values& args,
                                                    const Span& at) {
  Values out = take_args(1);
  call_inline(f, fn_index, args, at, out, false);
  Value r = std::move(out[0]);
  give_args(std::move(out));
  return r;
}

template <EvaluatorBackend Backend>
inline void Evaluator<Backend>::call_fn_into(const FnDecl& f, Values& args, const Span& at,
                                             Values& out) {
  DepthGuard g(*this, at.known() ? at : f.span);
  size_t base = enter_moving(f, args);
  Frame fr{base, nullptr};
  eval_into(f.body, fr, out, f.ret->elems.size());
  stack_.resize(base);
}

template <EvaluatorBackend Backend>
inline void Evaluator<Backend>::eval_into(const Expr& e0, const Frame& fr, Values& out, size_t n) {
  const Expr* cur = &e0; // tail positions loop here, as in eval()
  for (;;) {
    const Expr& e = *cur;
    switch (e->kind) {
    case ExprKind::Tuple: {
      const auto& t = e->cast<ir::Tuple>();
      if (t.elems.size() != n)
        break;
      for (const auto& x : t.elems)
        out.push_back(eval(x, fr));
      return;
    }
    case ExprKind::Let:
    case ExprKind::If:
    case ExprKind::Match:
      cur = &tail_of(e, fr);
      continue;
    default:
      break;
    }
    Value v = eval(e, fr);
    for (const auto& x : v.items())
      out.push_back(x);
    return;
  }
}

template <EvaluatorBackend Backend>
inline Value Evaluator<Backend>::eval_call(const Call& c, const Frame& fr) {
  switch (c.ref.kind) {
  case VarRef::Kind::Global: {
    const FnDecl& f = *m_.fns()[static_cast<size_t>(c.ref.index)];
    Values args = eval_args_pooled(c, fr);
    if (auto v = backend_.call(f, c.ref.index, args, c.span)) {
      give_args(std::move(args));
      return std::move(*v);
    }
    Value r = kInlineMemo ? call_global_inline(f, c.ref.index, args, c.span)
                          : call_fn_moving(f, args, c.span);
    give_args(std::move(args));
    return r;
  }
  case VarRef::Kind::Ctor: {
    if (c.ref.adt == types::kListAdt) {
      if (c.ref.index == 0)
        return Value::list({});
      Value h = eval(c.args[0], fr);
      Value t = eval(c.args[1], fr);
      Values xs;
      xs.reserve(t.list_size() + 1);
      xs.push_back(std::move(h));
      for (size_t i = 0; i < t.list_size(); ++i)
        xs.push_back(t.list_at(i));
      return Value::list(std::move(xs));
    }
    return Value::adt(c.ref.index, eval_args(c, fr));
  }
  case VarRef::Kind::Op:
    return eval_op(c, fr);
  case VarRef::Kind::Builtin:
    return eval_builtin(c, static_cast<Builtin>(c.ref.index), fr);
  default: {
    Value f = eval(c.callee, fr);
    Values args = eval_args_pooled(c, fr);
    Value r = apply(f, args, c.span);
    give_args(std::move(args));
    return r;
  }
  }
}

} // namespace pejit::interp
