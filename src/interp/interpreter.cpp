// The generic path: the shared evaluator (interp/evaluator.h) with an eager backend. Tensor
// ops run their registry kernel and, when recording, are appended to the tape if any input
// needs a gradient.
#include "src/interp/interpreter.h"

#include "src/interp/evaluator.h"
#include "src/interp/random.h"
#include "src/interp/recorded_op.h"

#include "src/ops/emitter.h"
#include "src/types/builtins.h"
#include "src/util/check.h"

#include <cmath>
#include <functional>

namespace pejit::interp {

using namespace ir;
using types::Builtin;

namespace {

// The generic path's backend: tensors are computed at once on reference kernels; an op whose
// inputs need gradients is recorded on the tape.
class EagerBackend {
public:
  EagerBackend(const Params& params, Tape* tape, const DimBindings& dims, const RandomState& rs,
               const std::vector<bool>& contexts)
      : params_(params), tape_(tape), dims_(dims), rs_(rs), contexts_(contexts) {}

  /// Evaluates a function's body (the evaluator's call_fn): set once the evaluator exists.
  std::function<Value(const FnDecl&, const Values&, const Span&)> inline_call;

  Value param(int i) const {
    return Value::tensor(params_.values[static_cast<size_t>(i)], tape_ ? i : -1);
  }

  Value op(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
           Values* multi = nullptr) {
    return op_.run(tape_, id, attr, args, n, s, false, multi);
  }

  // A call that opens a random context (interp/random.h) is evaluated here, inside it; every
  // other call is inlined by the evaluator.
  std::optional<Value> call(const FnDecl& f, int fn_index, const Values& args, const Span& s) {
    if (cursor_.open >= 0 || !contexts_[static_cast<size_t>(fn_index)])
      return std::nullopt;
    cursor_.open = cursor_.next++;
    cursor_.j = 0;
    struct Close {
      RandomCursor& c;
      ~Close() { c.open = -1; }
    } close{cursor_};
    return inline_call(f, args, s);
  }

  const DimBindings& dims() const { return dims_; }

  Value random_key(const Span&, int64_t& j) {
    auto [ctx, index] = cursor_.draw();
    j = 0;
    return Value::tensor(random_key_tensor(ctx, index, rs_));
  }

  Value sum_list(const Value& xs, const ir::Type& type, const Span& s) {
    return interp::sum_left_to_right(*this, xs, type, dims_, s);
  }

  Value to_int(const Value& v, const Span& s) {
    const Tensor& t = v.as_tensor();
    if (t.dtype() == DType::I32)
      return Value::integer(t.item_i32());
    float x = t.item_f32();
    if (!std::isfinite(x) || std::fabs(x) > 9.2e18f)
      throw Error(s.str() + ": error: to_int of a non-finite or huge value");
    return Value::integer(static_cast<int64_t>(x));
  }

  Value to_bool(const Value& v, const Span&) {
    const Tensor& t = v.as_tensor();
    return Value::boolean(t.dtype() == DType::I32 ? t.item_i32() != 0 : t.item_f32() != 0.0f);
  }

private:
  const Params& params_;
  Tape* tape_;
  const DimBindings& dims_;
  RandomState rs_;
  const std::vector<bool>& contexts_;
  RandomCursor cursor_;
  RecordedOp op_;
};
static_assert(EvaluatorBackend<EagerBackend>);

} // namespace

Interpreter::Interpreter(std::shared_ptr<const Module> m, DimBindings dims, InterpreterOptions opt)
    : m_(std::move(m)), dims_(std::move(dims)), opt_(opt) {
  ops::register_kernels();
  ops::register_gradients();
}

const std::vector<bool>& Interpreter::random_contexts() {
  if (contexts_gen_ != m_->generation() || contexts_.size() != m_->fns().size()) {
    contexts_ = random_context_functions(*m_);
    contexts_gen_ = m_->generation();
  }
  return contexts_;
}

namespace {
const FnDecl& entry_of(const Module& m, const std::string& name, size_t nargs) {
  const FnDecl* f = m.fn(name);
  if (!f || !f->is_entry)
    throw Error("no entry named '" + name + "' in the module");
  if (!f->checked)
    throw Error("entry '" + name + "' has not been checked");
  if (f->params.size() != nargs)
    throw Error("entry '" + name + "' takes " + std::to_string(f->params.size()) +
                " arguments, got " + std::to_string(nargs));
  return *f;
}
} // namespace

// Every entry point measures its arguments' depth first (without recursing) and evaluates
// where the native stack has room for it (call_limit.h): a thread of its own for a deep input.
Value Interpreter::run(const std::string& entry, const Values& args, const Params& params) {
  const FnDecl& f = entry_of(*m_, entry, args.size());
  return with_call_limit(CallLimit::of_inputs(opt_.max_depth, args, opt_.calls_per_level),
                         [&](const CallLimit& lim) {
                           for (size_t i = 0; i < args.size(); ++i)
                             check_value(args[i], f.params[i].type, *m_, dims_, f.params[i].name);
                           RandomState rs = random_;
                           rs.train = false; // inference: dropout off
                           EagerBackend backend(params, nullptr, dims_, rs, random_contexts());
                           Evaluator<EagerBackend> ev(*m_, backend, lim);
                           backend.inline_call = [&](const FnDecl& g, const Values& a,
                                                     const Span& at) {
                             return ev.call_fn(g, a, at);
                           };
                           return ev.call_entry(f, args);
                         });
}

Value Interpreter::call_function(int fn_index, const Values& args, const Params& params) {
  if (fn_index < 0 || static_cast<size_t>(fn_index) >= m_->fns().size())
    throw Error("no function #" + std::to_string(fn_index));
  const FnDecl& f = *m_->fns()[static_cast<size_t>(fn_index)];
  if (args.size() != f.params.size())
    throw Error("function '" + f.name + "' takes " + std::to_string(f.params.size()) +
                " arguments, got " + std::to_string(args.size()));
  return with_call_limit(CallLimit::of_inputs(opt_.max_depth, args, opt_.calls_per_level),
                         [&](const CallLimit& lim) {
                           RandomState rs = random_;
                           rs.train = false;
                           EagerBackend backend(params, nullptr, dims_, rs, random_contexts());
                           Evaluator<EagerBackend> ev(*m_, backend, lim);
                           backend.inline_call = [&](const FnDecl& g, const Values& a,
                                                     const Span& at) {
                             return ev.call_fn(g, a, at);
                           };
                           return ev.call_fn(f, args, f.span);
                         });
}

Interpreter::Gradients Interpreter::value_and_grad(const std::string& entry, const Values& args,
                                                   const Params& params) {
  const FnDecl& f = entry_of(*m_, entry, args.size());
  if (!f.ret || f.ret->kind != TypeKind::Tensor || !f.ret->dims.empty() || f.ret->elem != Elem::F32)
    throw Error("entry '" + entry + "' must return f32[] to be differentiated, it returns " +
                type_str(f.ret));
  return with_call_limit(CallLimit::of_inputs(opt_.max_depth, args, opt_.calls_per_level),
                         [&](const CallLimit& lim) {
                           for (size_t i = 0; i < args.size(); ++i)
                             check_value(args[i], f.params[i].type, *m_, dims_, f.params[i].name);
                           tape_.reset(params.values);
                           RandomState rs = random_;
                           rs.train = true; // a training step: dropout on
                           EagerBackend backend(params, &tape_, dims_, rs, random_contexts());
                           Evaluator<EagerBackend> ev(*m_, backend, lim);
                           backend.inline_call = [&](const FnDecl& g, const Values& a,
                                                     const Span& at) {
                             return ev.call_fn(g, a, at);
                           };
                           Value loss = ev.call_entry(f, args);
                           Gradients g;
                           g.loss = loss.as_tensor().item_f32();
                           g.grads = tape_.backward(loss.tape_id());
                           tape_.reset({});
                           return g;
                         });
}

GradCheckReport check_grad(Interpreter& in, const std::string& entry, const Values& args,
                           const Params& params, int directions, uint64_t seed, double eps,
                           double tolerance) {
  GradCheckReport rep;
  auto g = in.value_and_grad(entry, args, params);
  std::vector<Tensor> dense;
  for (size_t p = 0; p < params.values.size(); ++p)
    dense.push_back(g.grads[p].to_dense(params.values[p].shape()));

  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&s]() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<double>(s >> 11) / 9007199254740992.0;
  };
  std::string msg;
  for (int d = 0; d < directions; ++d) {
    // A random direction: each parameter tensor's part has norm 1/sqrt(P), so that small
    // tensors (biases) and large ones (embeddings) all contribute a measurable derivative.
    std::vector<std::vector<double>> dir(params.values.size());
    const double per =
        1.0 / std::sqrt(static_cast<double>(std::max<size_t>(1, params.values.size())));
    for (size_t p = 0; p < params.values.size(); ++p) {
      dir[p].resize(static_cast<size_t>(params.values[p].numel()));
      double norm = 0;
      for (auto& x : dir[p]) {
        x = 2 * next() - 1;
        norm += x * x;
      }
      norm = std::sqrt(std::max(norm, 1e-300));
      for (auto& x : dir[p])
        x *= per / norm;
    }
    double analytic = 0;
    for (size_t p = 0; p < params.values.size(); ++p) {
      const float* gp = dense[p].f32();
      for (size_t i = 0; i < dir[p].size(); ++i)
        analytic += dir[p][i] * gp[i];
    }
    auto shifted = [&](double h) {
      Params q = params.clone();
      for (size_t p = 0; p < q.values.size(); ++p) {
        float* x = q.values[p].f32();
        for (size_t i = 0; i < dir[p].size(); ++i)
          x[i] += static_cast<float>(h * dir[p][i]);
      }
      // A training evaluation, as the analytic gradient's: the same random draws (dropout
      // on, the interpreter's seed and step), so the two differentiate one function.
      return static_cast<double>(in.value_and_grad(entry, args, q).loss);
    };
    double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
    double rel =
        std::fabs(numeric - analytic) / std::max(1e-3, std::fabs(numeric) + std::fabs(analytic));
    rep.numeric.push_back(numeric);
    rep.analytic.push_back(analytic);
    rep.max_rel_error = std::max(rep.max_rel_error, rel);
    msg += "direction " + std::to_string(d) + ": numeric " + std::to_string(numeric) +
           ", analytic " + std::to_string(analytic) + ", relative error " + std::to_string(rel) +
           "\n";
  }
  rep.ok = rep.max_rel_error <= tolerance;
  rep.message = (rep.ok ? "check_grad passed for entry '" : "check_grad FAILED for entry '") +
                entry + "':\n" + msg;
  return rep;
}

} // namespace pejit::interp
