// The evaluator of the checked IR, written once and parameterized by a backend that decides
// what tensors are: the generic path's backend computes them eagerly (and records a tape),
// the partial evaluator's backend residualizes them into template instances, the template
// tracer's backend builds graph nodes. Everything else (frames, closures, match, lists,
// Int/Bool arithmetic, recursion bounds) is shared. Frames live on one value stack addressed
// by base + slot (the checker numbered every binder); closures copy their captured values.
// Argument vectors are recycled through a small pool (a call takes one, fills it, and gives it
// back when the call returns), so that a call allocates nothing for its arguments: the
// partial evaluator runs thousands of calls per batch. For the same reason
// `let (a, b) = f(...)` never builds the tuple f returns (eval_into).
//
// A Backend provides:
//   Value param(int index);
//   Value op(ops::OpId, const ops::Attr&, const Value* args, size_t n, const Span&,
//            Values* multi = nullptr);   // multi: every result of a multi-result op (split)
//   std::optional<Value> call(const ir::FnDecl&, int fn_index, const Values& args, const Span&);
//                                        // nullopt: evaluate the body inline
//   optionally: bool call_flat(const ir::FnDecl&, int fn_index, const Values& args, const Span&,
//                              Values& out); // as call, for a function returning a flat tuple of
//                                        // tensors: its elements in `out`; false: inline it
//   Value sum_list(const Value& list, const ir::Type& result_type, const Span&);
//   Value to_int(const Value& tensor, const Span&);
//   Value to_bool(const Value& tensor, const Span&);
//   optionally, a memo of inlined calls (the partial evaluator's residual fragments):
//     int32_t inline_begin(const ir::FnDecl&, int fn_index, const Values& args, int depth_left,
//                          Values& out, bool flat);
//       before a global function's body is evaluated inline: kInlineReplayed when the backend
//       produced the call's result itself (in `out`: the elements of the tuple f returns if
//       `flat`, else the value), else a token (-1: nothing to tell at the end). depth_left:
//       the calls the depth bound still allows, this one included.
//     void inline_end(int32_t token, const Value* results, size_t n, bool flat, int depth);
//       after it, for a token >= 0: its result (as in `out`) and the deepest nesting of calls
//       it reached, itself included. A call that throws never ends.
#pragma once

#include "src/interp/params.h"
#include "src/interp/value.h"
#include "src/ops/op.h"
#include "src/types/builtins.h"
#include "src/util/check.h"

#include <algorithm>
#include <optional>
#include <pthread.h>

namespace pejit::interp {

using ir::Binary;
using ir::BinOp;
using ir::BoolLit;
using ir::Call;
using ir::Expr;
using ir::ExprKind;
using ir::FloatLit;
using ir::FnDecl;
using ir::If;
using ir::IntLit;
using ir::Lambda;
using ir::Let;
using ir::ListLit;
using ir::Match;
using ir::Module;
using ir::Pattern;
using ir::Proj;
using ir::Unary;
using ir::UnOp;
using ir::Var;
using ir::VarRef;
using types::Builtin;

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

/// What Backend::inline_begin returns when it replayed the call.
inline constexpr int32_t kInlineReplayed = -2;

template <class Backend> class Evaluator {
  static constexpr bool kInlineMemo =
      requires(Backend & b, const FnDecl& f, const Values& a, Values& o) {
    b.inline_begin(f, 0, a, 0, o, false);
    b.inline_end(0, a.data(), a.size(), false, 0);
  };

public:
  Evaluator(const Module& m, Backend& backend, int max_depth)
      : m_(m), backend_(backend), max_depth_(max_depth) {
    Spare& sp = spare();
    if (!sp.in_use) { // the value stack and argument vectors of the last evaluation here
      sp.in_use = owns_spare_ = true;
      stack_.swap(sp.stack);
      args_pool_.swap(sp.args);
    }
    stack_.reserve(1024);
    // Native stack left to this evaluation: recursion stops with an error well before it
    // runs out, whatever the thread's stack size.
    stack_top_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    size_t size = 8u << 20;
    uintptr_t lo = thread_stack_low();
    if (lo && stack_top_ > lo)
      size = stack_top_ - lo;
    stack_budget_ = size > (256u << 10) ? size - (192u << 10) : size / 2;
  }

  /// The lowest address of this thread's stack (0: unknown), asked once per thread: on the
  /// main thread pthread_getattr_np reads /proc/self/maps, which cost more than partially
  /// evaluating a small batch.
  static uintptr_t thread_stack_low() {
    thread_local uintptr_t low = [] {
      uintptr_t lo = 0;
      pthread_attr_t attr;
      if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void* addr = nullptr;
        size_t sz = 0;
        if (pthread_attr_getstack(&attr, &addr, &sz) == 0 && sz > 0)
          lo = reinterpret_cast<uintptr_t>(addr);
        pthread_attr_destroy(&attr);
      }
      return lo;
    }();
    return low;
  }

  ~Evaluator() {
    if (!owns_spare_)
      return;
    Spare& sp = spare();
    stack_.clear();
    if (args_pool_.size() > 64)
      args_pool_.resize(64);
    stack_.swap(sp.stack);
    args_pool_.swap(sp.args);
    sp.in_use = false;
  }
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  Value call_entry(const FnDecl& f, const Values& args) { return call_fn(f, args, Span{}); }

  /// Evaluates a function body on `args` (what a backend calls to inline a call).
  Value call_fn(const FnDecl& f, const Values& args, const Span& at) {
    return call_fn_impl(f, args, at);
  }

private:
  const Module& m_;
  Backend& backend_;
  int max_depth_;
  int depth_ = 0;
  int peak_ = 0; ///< the deepest depth_ since the innermost inline_begin that records
  uintptr_t stack_top_ = 0;
  size_t stack_budget_ = 0;
  std::vector<Value> stack_;

  // Memory kept per thread from one evaluation to the next (the partial evaluator runs one
  // per batch): the value stack's capacity and the pooled argument vectors, all empty.
  struct Spare {
    bool in_use = false;
    std::vector<Value> stack;
    std::vector<Values> args;
  };
  bool owns_spare_ = false;
  static Spare& spare() {
    thread_local Spare s;
    return s;
  }

  struct Frame {
    size_t base;
    const Values* captures;
  };

public:
  [[noreturn]] void fail(const Span& s, const std::string& msg) {
    throw Error(s.str() + ": error: " + msg);
  }

  struct DepthGuard {
    Evaluator& e;
    DepthGuard(Evaluator& ev, const Span& s) : e(ev) {
      uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
      bool out_of_stack = e.stack_top_ > here && e.stack_top_ - here > e.stack_budget_;
      if (++e.depth_ > e.max_depth_ || out_of_stack) {
        --e.depth_;
        e.fail(s, "recursion deeper than " +
                      std::to_string(out_of_stack ? e.depth_ : e.max_depth_) + " calls" +
                      (out_of_stack ? " (out of native stack)" : ""));
      }
      e.peak_ = std::max(e.peak_, e.depth_);
    }
    ~DepthGuard() { --e.depth_; }
  };

  Value call_fn_impl(const FnDecl& f, const Values& args, const Span& at) {
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

  /// Pushes a frame for `f` with `args` moved into its parameter slots; returns its base.
  size_t enter_moving(const FnDecl& f, Values& args) {
    size_t base = stack_.size();
    stack_.resize(base + static_cast<size_t>(f.frame_size));
    for (size_t i = 0; i < args.size(); ++i)
      stack_[base + f.param_slots[i]] = std::move(args[i]);
    return base;
  }

  /// As call_fn_impl, moving the arguments into the frame (they are the caller's to lose).
  Value call_fn_moving(const FnDecl& f, Values& args, const Span& at) {
    DepthGuard g(*this, at.known() ? at : f.span);
    size_t base = enter_moving(f, args);
    Frame fr{base, nullptr};
    Value r = eval(f.body, fr);
    stack_.resize(base);
    return r;
  }

  // The argument-vector pool (see the header note).
  std::vector<Values> args_pool_;
  Values take_args(size_t n) {
    if (args_pool_.empty()) {
      Values v;
      v.reserve(n < 4 ? 4 : n);
      return v;
    }
    Values v = std::move(args_pool_.back());
    args_pool_.pop_back();
    v.reserve(n);
    return v;
  }
  void give_args(Values&& v) {
    v.clear();
    args_pool_.push_back(std::move(v));
  }

  Value call_closure(const Closure& c, const Values& args, const Span& at) {
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

  Value lookup(const VarRef& r, const Frame& fr, const Span& s) {
    switch (r.kind) {
    case VarRef::Kind::Local:
      return stack_[fr.base + static_cast<size_t>(r.index)];
    case VarRef::Kind::Capture:
      return (*fr.captures)[static_cast<size_t>(r.index)];
    case VarRef::Kind::Param:
      return backend_.param(r.index);
    case VarRef::Kind::Global: {
      auto c = std::make_shared<Closure>();
      c->fn_index = r.index;
      return Value::closure(std::move(c));
    }
    case VarRef::Kind::Ctor:
      return Value::adt(r.index, {});
    default:
      fail(s, "unresolved name (the module was not checked)");
    }
  }

  void bind(const Pattern& p, const Value& v, const Frame& fr) {
    switch (p.kind) {
    case Pattern::Kind::Wild:
      return;
    case Pattern::Kind::Name:
      stack_[fr.base + static_cast<size_t>(p.slot)] = v;
      return;
    case Pattern::Kind::Tuple:
      for (size_t i = 0; i < p.elems.size(); ++i)
        bind(p.elems[i], v.items()[i], fr);
      return;
    }
  }

  Value eval(const Expr& e, const Frame& fr) {
    switch (e->kind) {
    case ExprKind::IntLit:
      return Value::integer(e->cast<IntLit>().value);
    case ExprKind::BoolLit:
      return Value::boolean(e->cast<BoolLit>().value);
    case ExprKind::FloatLit:
      return Value::tensor(Tensor::scalar_f32(static_cast<float>(e->cast<FloatLit>().value)));
    case ExprKind::Var:
      return lookup(e->cast<Var>().ref, fr, e->span);
    case ExprKind::Tuple: {
      Values xs;
      xs.reserve(e->cast<ir::Tuple>().elems.size());
      for (const auto& x : e->cast<ir::Tuple>().elems)
        xs.push_back(eval(x, fr));
      return Value::tuple(std::move(xs));
    }
    case ExprKind::Proj: {
      const auto& p = e->cast<Proj>();
      Value t = eval(p.tuple, fr);
      return t.items()[static_cast<size_t>(p.index)];
    }
    case ExprKind::Let: {
      const auto& l = e->cast<Let>();
      eval_let_value(l, fr);
      return eval(l.body, fr);
    }
    case ExprKind::If: {
      const auto& i = e->cast<If>();
      return eval(eval(i.cond, fr).as_bool() ? i.then_e : i.else_e, fr);
    }
    case ExprKind::Match:
      return eval(select_arm(e->cast<Match>(), fr), fr);
    case ExprKind::Lambda: {
      const auto& l = e->cast<Lambda>();
      auto c = std::make_shared<Closure>();
      c->lambda = &l;
      for (const auto& ref : l.captures)
        c->captures.push_back(lookup(ref, fr, e->span));
      return Value::closure(std::move(c));
    }
    case ExprKind::ListLit: {
      Values xs;
      xs.reserve(e->cast<ListLit>().elems.size());
      for (const auto& x : e->cast<ListLit>().elems)
        xs.push_back(eval(x, fr));
      return Value::list(std::move(xs));
    }
    case ExprKind::Binary:
      return eval_binary(e->cast<Binary>(), fr);
    case ExprKind::Unary: {
      const auto& u = e->cast<Unary>();
      Value v = eval(u.operand, fr);
      if (u.tensor_op >= 0)
        return backend_.op(static_cast<ops::OpId>(u.tensor_op), {}, &v, 1, e->span);
      if (u.op == UnOp::Not)
        return Value::boolean(!v.as_bool());
      return Value::integer(static_cast<int64_t>(0ull - static_cast<uint64_t>(v.as_int())));
    }
    case ExprKind::Call:
      return eval_call(e->cast<Call>(), fr);
    }
    PEJIT_CHECK(false) << "unknown expression kind";
  }

  // A let's value bound to its pattern. `let (a, b) = f(...)` with f a global function
  // returning a tuple binds the call's results without building the tuple: a backend with
  // call_flat (the partial evaluator) gives them for a template call, and an inlined body
  // leaves them in a pooled vector (eval_into).
  void eval_let_value(const Let& l, const Frame& fr) {
    if (l.pattern.kind == Pattern::Kind::Tuple && l.value->kind == ExprKind::Call &&
        let_call_tuple(l, fr))
      return;
    bind(l.pattern, eval(l.value, fr), fr);
  }

  // Returns false, having evaluated nothing, when the call is not of that form.
  bool let_call_tuple(const Let& l, const Frame& fr) {
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
    if constexpr (requires { &Backend::call_flat; }) {
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

  // A call of the global function f that the backend did not take (Backend::call), its body
  // evaluated here unless the backend's memo of inlined calls replays it (see the header).
  // flat: f returns a tuple, whose elements are appended to `out`; else its value is.
  // `args` are the caller's to lose.
  void call_inline(const FnDecl& f, int fn_index, Values& args, const Span& at, Values& out,
                   bool flat) {
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

  void inline_body(const FnDecl& f, Values& args, const Span& at, Values& out, bool flat) {
    if (flat)
      call_fn_into(f, args, at, out);
    else
      out.push_back(call_fn_moving(f, args, at));
  }

  Value call_global_inline(const FnDecl& f, int fn_index, Values& args, const Span& at) {
    Values out = take_args(1);
    call_inline(f, fn_index, args, at, out, false);
    Value r = std::move(out[0]);
    give_args(std::move(out));
    return r;
  }

  /// As call_fn_moving for a function returning a tuple: its elements appended to `out`.
  void call_fn_into(const FnDecl& f, Values& args, const Span& at, Values& out) {
    DepthGuard g(*this, at.known() ? at : f.span);
    size_t base = enter_moving(f, args);
    Frame fr{base, nullptr};
    eval_into(f.body, fr, out, f.ret->elems.size());
    stack_.resize(base);
  }

  // Evaluates e, whose value is an n-tuple, appending its elements to `out`: a tuple
  // expression in tail position (through let, if and match) is never built.
  void eval_into(const Expr& e, const Frame& fr, Values& out, size_t n) {
    switch (e->kind) {
    case ExprKind::Tuple: {
      const auto& t = e->cast<ir::Tuple>();
      if (t.elems.size() != n)
        break;
      for (const auto& x : t.elems)
        out.push_back(eval(x, fr));
      return;
    }
    case ExprKind::Let: {
      const auto& l = e->cast<Let>();
      eval_let_value(l, fr);
      return eval_into(l.body, fr, out, n);
    }
    case ExprKind::If: {
      const auto& i = e->cast<If>();
      return eval_into(eval(i.cond, fr).as_bool() ? i.then_e : i.else_e, fr, out, n);
    }
    case ExprKind::Match:
      return eval_into(select_arm(e->cast<Match>(), fr), fr, out, n);
    default:
      break;
    }
    Value v = eval(e, fr);
    for (const auto& x : v.items())
      out.push_back(x);
  }

  // Evaluates the scrutinee, binds the matching arm's fields and returns its body. A scrutinee
  // that is a local is read in its slot, not copied (a tree walk matches every node).
  const Expr& select_arm(const Match& mt, const Frame& fr) {
    if (mt.scrutinee->kind == ExprKind::Var) {
      const VarRef& r = mt.scrutinee->cast<Var>().ref;
      if (r.kind == VarRef::Kind::Local)
        return bind_arm(mt, stack_[fr.base + static_cast<size_t>(r.index)], r.index, fr);
    }
    Value s = eval(mt.scrutinee, fr);
    return bind_arm(mt, s, -1, fr);
  }

  // As select_arm for the scrutinee's value `s`, which is slot `s_slot` of the frame if >= 0.
  const Expr& bind_arm(const Match& mt, const Value& s, int s_slot, const Frame& fr) {
    int tag;
    bool is_list = s.kind() == Value::Kind::List;
    if (is_list)
      tag = s.list_size() == 0 ? 0 : 1;
    else
      tag = s.tag();
    for (const auto& arm : mt.arms) {
      if (!arm.ctor.empty() && arm.ctor_index != tag)
        continue;
      if (!arm.ctor.empty()) {
        if (s_slot >= 0 &&
            std::find(arm.slots.begin(), arm.slots.end(), s_slot) != arm.slots.end()) {
          Value copy = s; // the arm rebinds the scrutinee's slot
          return bind_arm(mt, copy, -1, fr);
        }
        for (size_t i = 0; i < arm.slots.size(); ++i) {
          if (arm.slots[i] < 0)
            continue;
          Value& slot = stack_[fr.base + static_cast<size_t>(arm.slots[i])];
          if (!is_list)
            slot = s.items()[i];
          else
            slot = i == 0 ? s.list_at(0) : s.list_tail();
        }
      }
      return arm.body;
    }
    fail(mt.span, "no match arm for this value");
  }

  Value eval_binary(const Binary& b, const Frame& fr) {
    // && and || short-circuit.
    if (b.op == BinOp::And) {
      if (!eval(b.lhs, fr).as_bool())
        return Value::boolean(false);
      return Value::boolean(eval(b.rhs, fr).as_bool());
    }
    if (b.op == BinOp::Or) {
      if (eval(b.lhs, fr).as_bool())
        return Value::boolean(true);
      return Value::boolean(eval(b.rhs, fr).as_bool());
    }
    Value args[2] = {eval(b.lhs, fr), eval(b.rhs, fr)};
    if (b.tensor_op >= 0)
      return backend_.op(static_cast<ops::OpId>(b.tensor_op), {}, args, 2, b.span);
    if (args[0].kind() == Value::Kind::Bool) {
      bool x = args[0].as_bool(), y = args[1].as_bool();
      return Value::boolean(b.op == BinOp::Eq ? x == y : x != y);
    }
    int64_t x = args[0].as_int(), y = args[1].as_int();
    auto ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
    switch (b.op) {
    case BinOp::Add:
      return Value::integer(static_cast<int64_t>(ux + uy));
    case BinOp::Sub:
      return Value::integer(static_cast<int64_t>(ux - uy));
    case BinOp::Mul:
      return Value::integer(static_cast<int64_t>(ux * uy));
    case BinOp::Div:
    case BinOp::Mod:
      if (y == 0)
        fail(b.span, "Int division by zero");
      if (x == INT64_MIN && y == -1)
        fail(b.span, "Int division overflows");
      return Value::integer(b.op == BinOp::Div ? x / y : x % y);
    case BinOp::Lt:
      return Value::boolean(x < y);
    case BinOp::Le:
      return Value::boolean(x <= y);
    case BinOp::Gt:
      return Value::boolean(x > y);
    case BinOp::Ge:
      return Value::boolean(x >= y);
    case BinOp::Eq:
      return Value::boolean(x == y);
    case BinOp::Ne:
      return Value::boolean(x != y);
    default:
      break;
    }
    PEJIT_CHECK(false) << "bad scalar operator";
  }

  Values eval_args(const Call& c, const Frame& fr) {
    Values xs;
    xs.reserve(c.args.size());
    for (const auto& a : c.args)
      xs.push_back(eval(a, fr));
    return xs;
  }

  /// The arguments in a pooled vector (give it back with give_args).
  Values eval_args_pooled(const Call& c, const Frame& fr) {
    Values xs = take_args(c.args.size());
    for (const auto& a : c.args)
      xs.push_back(eval(a, fr));
    return xs;
  }

  Value apply(const Value& f, const Values& args, const Span& s) {
    return call_closure(f.as_closure(), args, s);
  }

  Value eval_call(const Call& c, const Frame& fr) {
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

  // Kept out of eval_call's frame so that deep recursion uses little native stack.
  __attribute__((noinline)) Value eval_op(const Call& c, const Frame& fr) {
    size_t n = static_cast<size_t>(c.tensor_args);
    Values args = take_args(n);
    for (size_t i = 0; i < n; ++i)
      args.push_back(eval(c.args[i], fr));
    ops::Attr attr{c.attr_ints};
    auto id = static_cast<ops::OpId>(c.ref.index);
    if (id == ops::OpId::Split) {
      Values parts;
      backend_.op(id, attr, args.data(), n, c.span, &parts);
      give_args(std::move(args));
      return Value::tuple(std::move(parts));
    }
    Value r = backend_.op(id, attr, args.data(), n, c.span);
    give_args(std::move(args));
    return r;
  }

  Value eval_builtin(const Call& c, Builtin b, const Frame& fr) {
    switch (b) {
    case Builtin::Map: {
      Value f = eval(c.args[0], fr);
      Value xs = eval(c.args[1], fr);
      Values out;
      out.reserve(xs.list_size());
      Values arg(1);
      for (size_t i = 0; i < xs.list_size(); ++i) {
        arg[0] = xs.list_at(i);
        out.push_back(apply(f, arg, c.span));
      }
      return Value::list(std::move(out));
    }
    case Builtin::Fold: {
      Value f = eval(c.args[0], fr);
      Value acc = eval(c.args[1], fr);
      Value xs = eval(c.args[2], fr);
      Values arg(2);
      for (size_t i = 0; i < xs.list_size(); ++i) {
        arg[0] = acc;
        arg[1] = xs.list_at(i);
        acc = apply(f, arg, c.span);
      }
      return acc;
    }
    case Builtin::SumList:
      return backend_.sum_list(eval(c.args[0], fr), c.type, c.span);
    case Builtin::Append: {
      Value a = eval(c.args[0], fr);
      Value b = eval(c.args[1], fr);
      Values xs;
      xs.reserve(a.list_size() + b.list_size());
      for (size_t i = 0; i < a.list_size(); ++i)
        xs.push_back(a.list_at(i));
      for (size_t i = 0; i < b.list_size(); ++i)
        xs.push_back(b.list_at(i));
      return Value::list(std::move(xs));
    }
    case Builtin::Length:
      return Value::integer(static_cast<int64_t>(eval(c.args[0], fr).list_size()));
    case Builtin::ToInt:
      return backend_.to_int(eval(c.args[0], fr), c.span);
    case Builtin::ToBool:
      return backend_.to_bool(eval(c.args[0], fr), c.span);
    }
    PEJIT_CHECK(false) << "unknown builtin";
  }
};

} // namespace pejit::interp
