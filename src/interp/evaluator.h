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
// What a backend provides is the EvaluatorBackend concept (evaluator_backend.h): the evaluator
// is constrained by it, so a backend that misses an operation fails to compile naming it. How a
// call is evaluated (frames, the backend's calls, the memo of inlined calls, tuple returns
// without the tuple) is in evaluator_calls.h.
#pragma once

#include "src/interp/call_limit.h"
#include "src/interp/dim_attrs.h"
#include "src/interp/evaluator_backend.h"
#include "src/interp/params.h"
#include "src/interp/value.h"
#include "src/ops/op.h"
#include "src/types/builtins.h"
#include "src/util/check.h"
#include "src/util/native_stack.h"

#include <algorithm>
#include <optional>

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

template <EvaluatorBackend Backend> class Evaluator {
  static constexpr bool kInlineMemo = InlineMemoBackend<Backend>;

public:
  /// `limit`: the bound on nested calls and the input's depth it was made for (call_limit.h).
  Evaluator(const Module& m, Backend& backend, const CallLimit& limit)
      : m_(m), backend_(backend), limit_(limit), max_depth_(limit.calls) {
    Spare& sp = spare();
    if (!sp.in_use) { // the value stack and argument vectors of the last evaluation here
      sp.in_use = owns_spare_ = true;
      stack_.swap(sp.stack);
      args_pool_.swap(sp.args);
    }
    stack_.reserve(1024);
    // Native stack left to this evaluation: recursion stops with an error before it runs
    // out, whatever the thread's stack size.
    stack_top_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    stack_budget_ = util::native_stack_left();
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
  CallLimit limit_;
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
      if (++e.depth_ > e.max_depth_ || out_of_stack) [[unlikely]] {
        --e.depth_;
        e.too_deep(s, out_of_stack);
      }
      e.peak_ = std::max(e.peak_, e.depth_);
    }
    ~DepthGuard() { --e.depth_; }
  };

  [[noreturn, gnu::cold, gnu::noinline]] void too_deep(const Span& s, bool out_of_stack) {
    if (out_of_stack)
      fail(s, "recursion " + std::to_string(depth_) + " calls deep ran out of the native stack (" +
                  std::to_string(stack_budget_ >> 10) + " KiB here; " + limit_.explain() +
                  " and the stack reserved with it)");
    fail(s, "recursion deeper than " + std::to_string(max_depth_) + " calls (" + limit_.explain() +
                ")");
  }

  Value call_fn_impl(const FnDecl& f, const Values& args, const Span& at);

  /// Pushes a frame for `f` with `args` moved into its parameter slots; returns its base.
  size_t enter_moving(const FnDecl& f, Values& args) {
    size_t base = stack_.size();
    stack_.resize(base + static_cast<size_t>(f.frame_size));
    for (size_t i = 0; i < args.size(); ++i)
      stack_[base + f.param_slots[i]] = std::move(args[i]);
    return base;
  }

  /// As call_fn_impl, moving the arguments into the frame (they are the caller's to lose).
  Value call_fn_moving(const FnDecl& f, Values& args, const Span& at);

  // The argument-vector pool (see the note at the top).
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

  Value call_closure(const Closure& c, const Values& args, const Span& at);

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
    case VarRef::Kind::Dim:
      return Value::integer(dim_value(m_, r.index, backend_.dims(), s));
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

  // Let bodies, if branches and match arms are evaluated in this frame's loop, not in a frame
  // of their own: a function's body costs one native frame however many lets it chains.
  Value eval(const Expr& e0, const Frame& fr) {
    const Expr* cur = &e0;
    for (;;) {
      const Expr& e = *cur;
      switch (e->kind) {
      case ExprKind::IntLit: {
        const auto& lit = e->cast<IntLit>();
        if (!lit.tensor_elem)
          return Value::integer(lit.value);
        return Value::tensor(*lit.tensor_elem == ir::Elem::F32
                                 ? Tensor::scalar_f32(static_cast<float>(lit.value))
                                 : Tensor::scalar_i32(static_cast<int32_t>(lit.value)));
      }
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
      case ExprKind::Let:
      case ExprKind::If:
      case ExprKind::Match:
        cur = &tail_of(e, fr);
        continue;
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
  }

  // A let's value bound to its pattern. `let (a, b) = f(...)` with f a global function
  // returning a tuple binds the call's results without building the tuple: a backend with
  // call_flat (the partial evaluator) gives them for a template call, and an inlined body
  // leaves them in a pooled vector (eval_into).
  // What a let, an if or a match continues with: the let's value bound, the condition or the
  // scrutinee evaluated. eval() and eval_into() loop through these tail positions instead of
  // recursing, so that depth costs no native stack.
  const Expr& tail_of(const Expr& e, const Frame& fr) {
    switch (e->kind) {
    case ExprKind::Let: {
      const auto& l = e->cast<Let>();
      eval_let_value(l, fr);
      return l.body;
    }
    case ExprKind::If: {
      const auto& i = e->cast<If>();
      return eval(i.cond, fr).as_bool() ? i.then_e : i.else_e;
    }
    case ExprKind::Match:
      return select_arm(e->cast<Match>(), fr);
    default:
      throw InternalError("tail_of: not a let, if or match");
    }
  }

  void eval_let_value(const Let& l, const Frame& fr) {
    if (l.pattern.kind == Pattern::Kind::Tuple && l.value->kind == ExprKind::Call &&
        let_call_tuple(l, fr))
      return;
    bind(l.pattern, eval(l.value, fr), fr);
  }

  // Returns false, having evaluated nothing, when the call is not of that form.
  bool let_call_tuple(const Let& l, const Frame& fr);

  // A call of the global function f that the backend did not take (Backend::call), its body
  // evaluated here unless the backend's memo of inlined calls replays it (InlineMemoBackend).
  // flat: f returns a tuple, whose elements are appended to `out`; else its value is.
  // `args` are the caller's to lose.
  void call_inline(const FnDecl& f, int fn_index, Values& args, const Span& at, Values& out,
                   bool flat);
  void inline_body(const FnDecl& f, Values& args, const Span& at, Values& out, bool flat);
  Value call_global_inline(const FnDecl& f, int fn_index, Values& args, const Span& at);

  /// As call_fn_moving for a function returning a tuple: its elements appended to `out`.
  void call_fn_into(const FnDecl& f, Values& args, const Span& at, Values& out);

  // Evaluates e, whose value is an n-tuple, appending its elements to `out`: a tuple
  // expression in tail position (through let, if and match) is never built.
  void eval_into(const Expr& e, const Frame& fr, Values& out, size_t n);

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

  Value eval_call(const Call& c, const Frame& fr);

  // Kept out of eval_call's frame so that deep recursion uses little native stack.
  __attribute__((noinline)) Value eval_op(const Call& c, const Frame& fr) {
    size_t n = static_cast<size_t>(c.tensor_args);
    Values args = take_args(n);
    for (size_t i = 0; i < n; ++i)
      args.push_back(eval(c.args[i], fr));
    ops::Attr attr{c.attr_ints};
    if (!c.attr_dims.empty()) [[unlikely]] // zeros(H): the backend sees the bound size
      resolve_attr_dims(c, backend_.dims(), attr.ints);
    auto id = static_cast<ops::OpId>(c.ref.index);
    if (ops::is_random(id)) { // the key operand and the index j (ops.def, interp/random.h)
      int64_t j = 0;
      args.push_back(backend_.random_key(c.span, j));
      attr.ints[0] = j;
      ++n;
    }
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
    case Builtin::Reverse: {
      // Structure only: the same element values in the other order (no op, no instance).
      Value a = eval(c.args[0], fr);
      Values xs;
      xs.reserve(a.list_size());
      for (size_t i = a.list_size(); i-- > 0;)
        xs.push_back(a.list_at(i));
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

#include "src/interp/evaluator_calls.h"
