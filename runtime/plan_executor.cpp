// Batched execution of plans on reference kernels (see plan_executor.h). The batching backend
// keeps a per-row tensor as Value::batched_tensor with the rows first; its rules: elementwise
// ops align a batched operand's per-row dimensions with the other operand's trailing ones;
// `x @ W` with a per-row vector x is one GEMM; reductions, reshape and the last-axis ops
// (concat, split, slice, softmax, argmax, cross_entropy) shift by the row dimension; take from
// a shared table gathers all rows' ids at once. Anything else throws NotBatchable and the
// group runs row by row.
#include "plan_executor.h"

#include "interp/evaluator.h"
#include "interp/recorded_op.h"
#include "kernels/kernels.h"
#include "ops/emitter.h"
#include "util/check.h"

#include <cstring>

namespace pejit::runtime {

using interp::Value;
using interp::Values;
using spec::Group;
using spec::Instance;
using spec::Ref;
using spec::RowRef;

namespace {

struct NotBatchable {
  std::string why;
};

// Runs ops eagerly, recording on a tape (when given); knows which values are batched.
class BatchBackend {
public:
  BatchBackend(const interp::Params& params, interp::Tape* tape, int32_t param_base,
               const interp::DimBindings& dims, int64_t rows)
      : params_(params), tape_(tape), param_base_(param_base), dims_(dims), rows_(rows) {}

  Value param(int i) const {
    return Value::tensor(params_.values[static_cast<size_t>(i)], tape_ ? param_base_ + i : -1);
  }

  Value op(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
           Values* multi = nullptr) {
    bool any = false;
    for (size_t i = 0; i < n; ++i)
      any = any || args[i].batched();
    if (!any)
      return run(id, attr, args, n, s, false, multi);
    using ops::OpId;
    switch (id) {
    case OpId::Add:
    case OpId::Sub:
    case OpId::Mul:
    case OpId::Div:
    case OpId::Lt:
    case OpId::Le:
    case OpId::Gt:
    case OpId::Ge:
    case OpId::Eq:
    case OpId::Ne: {
      Value a[2] = {args[0], args[1]};
      size_t ra = per_row_rank(a[0]), rb = per_row_rank(a[1]);
      size_t r = std::max(ra, rb);
      for (auto& v : a)
        if (v.batched() && per_row_rank(v) < r)
          v = expand(v, r, s);
      return run(id, attr, a, 2, s, true, multi);
    }
    case OpId::Neg:
    case OpId::Exp:
    case OpId::Log:
    case OpId::Tanh:
    case OpId::Sigmoid:
    case OpId::Relu:
    case OpId::ToF32:
    case OpId::ToI32:
    case OpId::Softmax:
    case OpId::LogSoftmax:
    case OpId::Argmax:
    case OpId::Split:
    case OpId::Slice:
      return run(id, attr, args, n, s, true, multi);
    case OpId::Concat: {
      // Shared parts are broadcast to every row (an add of per-row zeros, so that their
      // gradients are summed over the rows).
      Values parts(args, args + n);
      for (auto& v : parts)
        if (!v.batched()) {
          const Tensor& t = v.as_tensor();
          Shape sh{rows_};
          for (auto d : t.shape().dims())
            sh.push_back(d);
          Value two[2] = {Value::batched_tensor(Tensor::zeros(t.dtype(), sh)), v};
          v = op(OpId::Add, {}, two, 2, s);
        }
      return run(id, attr, parts.data(), n, s, true, multi);
    }
    case OpId::MatMul:
      if (args[0].batched() && !args[1].batched() && args[0].as_tensor().rank() == 2 &&
          args[1].as_tensor().rank() == 2)
        return run(id, attr, args, n, s, true, multi);
      throw NotBatchable{"matmul other than per-row vector @ shared matrix"};
    case OpId::Sum:
    case OpId::Mean: {
      const Tensor& t = args[0].as_tensor();
      if (attr.ints.empty()) {
        if (t.rank() == 1)
          return id == OpId::Sum ? args[0] : args[0];
        Value flat = reshape(args[0], {rows_, t.numel() / std::max<int64_t>(rows_, 1)}, s);
        return run(id, ops::Attr{{1}}, &flat, 1, s, true, multi);
      }
      int64_t ax = attr.ints[0];
      int64_t r = static_cast<int64_t>(t.rank()) - 1;
      if (ax < 0)
        ax += r;
      return run(id, ops::Attr{{ax + 1}}, args, n, s, true, multi);
    }
    case OpId::Reshape: {
      ops::Attr a;
      a.ints.push_back(rows_);
      a.ints.insert(a.ints.end(), attr.ints.begin(), attr.ints.end());
      return run(id, a, args, n, s, true, multi);
    }
    case OpId::Take:
      if (!args[0].batched() && args[1].batched())
        return run(id, attr, args, n, s, true, multi);
      throw NotBatchable{"take from a per-row table"};
    case OpId::CrossEntropy:
      if (args[0].batched() && args[1].batched())
        return run(id, attr, args, n, s, true, multi);
      throw NotBatchable{"cross_entropy of shared logits or labels"};
    default:
      throw NotBatchable{std::string("no batching rule for ") + ops::op_name(id)};
    }
  }

  std::optional<Value> call(const ir::FnDecl&, int, const Values&, const Span&) {
    return std::nullopt; // template bodies are inlined
  }

  Value sum_list(const Value& xs, const ir::Type& type, const Span& s) {
    if (xs.list_size() == 0)
      return Value::tensor(Tensor::zeros(DType::F32, interp::concrete_shape(type, dims_)));
    Value acc = xs.list_at(0);
    for (size_t i = 1; i < xs.list_size(); ++i) {
      Value two[2] = {acc, xs.list_at(i)};
      acc = op(ops::OpId::Add, {}, two, 2, s);
    }
    return acc;
  }

  Value to_int(const Value& v, const Span& s) {
    if (v.batched())
      throw NotBatchable{"to_int of a per-row value (" + s.str() + ")"};
    const Tensor& t = v.as_tensor();
    return Value::integer(t.dtype() == DType::I32 ? t.item_i32()
                                                  : static_cast<int64_t>(t.item_f32()));
  }
  Value to_bool(const Value& v, const Span& s) {
    if (v.batched())
      throw NotBatchable{"to_bool of a per-row value (" + s.str() + ")"};
    const Tensor& t = v.as_tensor();
    return Value::boolean(t.dtype() == DType::I32 ? t.item_i32() != 0 : t.item_f32() != 0.0f);
  }

private:
  const interp::Params& params_;
  interp::Tape* tape_;
  int32_t param_base_;
  const interp::DimBindings& dims_;
  int64_t rows_;
  interp::RecordedOp op_;

  static size_t per_row_rank(const Value& v) {
    size_t r = v.as_tensor().rank();
    return v.batched() ? r - 1 : r;
  }

  Value reshape(const Value& v, std::vector<int64_t> dims, const Span& s) {
    return run(ops::OpId::Reshape, ops::Attr{std::move(dims)}, &v, 1, s, true, nullptr);
  }

  // [rows, d...] -> [rows, 1, ..., 1, d...] with per-row rank r.
  Value expand(const Value& v, size_t r, const Span& s) {
    const Tensor& t = v.as_tensor();
    std::vector<int64_t> dims{t.dim(0)};
    for (size_t k = per_row_rank(v); k < r; ++k)
      dims.push_back(1);
    for (size_t k = 1; k < t.rank(); ++k)
      dims.push_back(t.shape()[k]);
    return reshape(v, dims, s);
  }

  Value run(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
            bool batched, Values* multi) {
    return op_.run(tape_, id, attr, args, n, s, batched, multi);
  }
};

void flatten(const Value& v, std::vector<Value>& out) {
  if (v.kind() == Value::Kind::Tensor)
    out.push_back(v);
  else
    for (const auto& e : v.items())
      flatten(e, out);
}

// One row of a [rows, ...] tensor, copied.
Tensor row_of(const Tensor& t, int64_t row) {
  Shape s;
  for (size_t k = 1; k < t.rank(); ++k)
    s.push_back(t.shape()[k]);
  Tensor out = Tensor::empty(t.dtype(), s);
  size_t bytes = out.nbytes();
  std::memcpy(out.raw(), static_cast<const char*>(t.raw()) + static_cast<size_t>(row) * bytes,
              bytes);
  return out;
}

} // namespace

struct PlanExecutor::Impl {
  std::shared_ptr<const ir::Module> m;
  interp::DimBindings dims;

  // Results of one group: batched tensors (rows first), or one tensor per row.
  struct GroupState {
    bool per_row = false;
    std::vector<Tensor> batched;           ///< per result
    std::vector<std::vector<Tensor>> rows; ///< per row, per result (per_row)
    // Training.
    std::unique_ptr<interp::Tape> tape;
    std::vector<int32_t> result_ids;           ///< batched: per result
    std::vector<std::vector<int32_t>> row_ids; ///< per row, per result
    std::vector<int32_t> arg_leaf;             ///< per arg: leaf id or -1 (shared)
    std::vector<Tensor> grads;                 ///< per result: gradient [rows, ...]
  };

  Tensor fetch(const RowRef& rr, const spec::Residual& r, const interp::Params& params,
               const std::vector<GroupState>& st) const {
    switch (rr.kind) {
    case Ref::Kind::Input:
      return r.inputs[static_cast<size_t>(rr.index)];
    case Ref::Kind::Param:
      return params.values[static_cast<size_t>(rr.index)];
    case Ref::Kind::Const:
      return r.consts[static_cast<size_t>(rr.index)];
    case Ref::Kind::Inst: {
      const GroupState& g = st[static_cast<size_t>(rr.index)];
      if (g.per_row)
        return g.rows[static_cast<size_t>(rr.row)][static_cast<size_t>(rr.out)];
      return row_of(g.batched[static_cast<size_t>(rr.out)], rr.row);
    }
    }
    PEJIT_CHECK(false) << "bad row ref";
  }

  // Stacks per-row tensors into [rows, ...].
  static Tensor stack(const std::vector<Tensor>& rows, const spec::TensorSig& sig) {
    Shape s;
    s.push_back(static_cast<int64_t>(rows.size()));
    for (auto d : sig.dims)
      s.push_back(d);
    Tensor out = Tensor::empty(sig.dtype, s);
    size_t bytes = rows.empty() ? 0 : rows[0].nbytes();
    for (size_t i = 0; i < rows.size(); ++i) {
      PEJIT_CHECK(rows[i].nbytes() == bytes) << "row size mismatch";
      std::memcpy(static_cast<char*>(out.raw()) + i * bytes, rows[i].raw(), bytes);
    }
    return out;
  }

  // One template call on `args` (its tensor arguments): the op, or the function's body with
  // its static Int/Bool arguments in place; the results flattened.
  std::vector<Value> call_template(const spec::Template& t, BatchBackend& be, const Values& args) {
    std::vector<Value> outs;
    if (t.kind == spec::Template::Kind::Op) {
      Values multi;
      be.op(t.op, t.attr, args.data(), args.size(), Span{}, &multi);
      return multi;
    }
    interp::Evaluator<BatchBackend> ev(*m, be, 4000);
    const ir::FnDecl& f = *m->fns()[static_cast<size_t>(t.fn)];
    Values full;
    size_t ti = 0, si = 0;
    for (const auto& p : f.params) {
      if (p.type->kind == ir::TypeKind::Int)
        full.push_back(Value::integer(t.statics[si++]));
      else if (p.type->kind == ir::TypeKind::Bool)
        full.push_back(Value::boolean(t.statics[si++] != 0));
      else
        full.push_back(args[ti++]);
    }
    flatten(ev.call_fn(f, full, f.span), outs);
    return outs;
  }

  void run_group(size_t gi, const Group& g, const spec::Residual& r, const spec::TemplateTable& tt,
                 const interp::Params& params, std::vector<GroupState>& st, bool train,
                 PlanStats& stats) {
    GroupState& gs = st[gi];
    const int64_t rows = static_cast<int64_t>(g.instances.size());
    if (g.tmpl == Instance::kSumN) {
      Tensor acc;
      for (const auto& a : g.args) {
        Tensor t = fetch(a.rows[0], r, params, st);
        if (!acc.defined())
          acc = t.clone();
        else
          kernels::add_inplace(acc, t);
      }
      gs.batched = {acc.reshaped([&] {
        Shape s{1};
        for (auto d : acc.shape().dims())
          s.push_back(d);
        return s;
      }())};
      stats.groups_batched++;
      return;
    }
    const spec::Template& t = tt.at(g.tmpl);
    // Gather the per-row arguments.
    std::vector<Tensor> xs(g.args.size());
    gs.arg_leaf.assign(g.args.size(), -1);
    int32_t nleaves = 0;
    for (size_t a = 0; a < g.args.size(); ++a) {
      const auto& ga = g.args[a];
      if (ga.shared)
        continue;
      std::vector<Tensor> rs;
      rs.reserve(ga.rows.size());
      for (const auto& rr : ga.rows)
        rs.push_back(fetch(rr, r, params, st));
      xs[a] = stack(rs, ga.sig);
      if (train && ga.sig.dtype == DType::F32)
        gs.arg_leaf[a] = nleaves++;
    }
    auto shared_value = [&](const Ref& ref, interp::Tape* tape) -> Value {
      if (ref.kind == Ref::Kind::Param)
        return Value::tensor(params.values[static_cast<size_t>(ref.index)],
                             tape ? nleaves + ref.index : -1);
      return Value::tensor(r.consts[static_cast<size_t>(ref.index)]);
    };
    auto leaves = [&]() {
      std::vector<Tensor> ls(static_cast<size_t>(nleaves));
      for (size_t a = 0; a < g.args.size(); ++a)
        if (gs.arg_leaf[a] >= 0)
          ls[static_cast<size_t>(gs.arg_leaf[a])] = xs[a];
      ls.insert(ls.end(), params.values.begin(), params.values.end());
      return ls;
    };
    if (train) {
      gs.tape = std::make_unique<interp::Tape>();
      gs.tape->reset(leaves());
    }
    interp::Tape* tape = gs.tape.get();

    // The template on all rows at once.
    try {
      BatchBackend be(params, tape, nleaves, dims, rows);
      Values args;
      for (size_t a = 0; a < g.args.size(); ++a)
        args.push_back(g.args[a].shared ? shared_value(g.args[a].shared_ref, tape)
                                        : Value::batched_tensor(xs[a], gs.arg_leaf[a]));
      std::vector<Value> outs = call_template(t, be, args);
      gs.batched.clear();
      gs.result_ids.clear();
      for (size_t k = 0; k < outs.size(); ++k) {
        if (!outs[k].batched()) {
          // A result that does not depend on the rows (every argument shared): the same for
          // every row, broadcast by an add of per-row zeros so that gradients flow back.
          const Tensor& o = outs[k].as_tensor();
          Shape s{rows};
          for (auto d : o.shape().dims())
            s.push_back(d);
          Value two[2] = {Value::batched_tensor(Tensor::zeros(o.dtype(), s)), outs[k]};
          outs[k] = be.op(ops::OpId::Add, {}, two, 2, Span{});
        }
        gs.batched.push_back(outs[k].as_tensor());
        gs.result_ids.push_back(outs[k].tape_id());
      }
      gs.per_row = false;
      stats.groups_batched++;
      return;
    } catch (const NotBatchable& nb) {
      stats.row_by_row_reasons.push_back(t.name + ": " + nb.why); // row by row below
    }
    gs.per_row = true;
    stats.groups_row_by_row++;
    if (train)
      gs.tape->reset(leaves());
    gs.rows.assign(static_cast<size_t>(rows), {});
    gs.row_ids.assign(static_cast<size_t>(rows), {});
    for (int64_t i = 0; i < rows; ++i) {
      BatchBackend be(params, tape, nleaves, dims, 1);
      Values args;
      for (size_t a = 0; a < g.args.size(); ++a) {
        if (g.args[a].shared) {
          args.push_back(shared_value(g.args[a].shared_ref, tape));
          continue;
        }
        // Row i of the gathered argument, through take so that its gradient flows back.
        Value x = Value::tensor(xs[a], gs.arg_leaf[a]);
        Value idx = Value::tensor(Tensor::scalar_i32(static_cast<int32_t>(i)));
        Value two[2] = {x, idx};
        args.push_back(be.op(ops::OpId::Take, {}, two, 2, Span{}));
      }
      std::vector<Value> outs = call_template(t, be, args);
      for (const auto& o : outs) {
        gs.rows[static_cast<size_t>(i)].push_back(o.as_tensor());
        gs.row_ids[static_cast<size_t>(i)].push_back(o.tape_id());
      }
    }
  }
};

PlanExecutor::PlanExecutor(std::shared_ptr<const ir::Module> m, interp::DimBindings dims)
    : impl_(std::make_unique<Impl>()) {
  impl_->m = std::move(m);
  impl_->dims = std::move(dims);
  ops::register_kernels();
  ops::register_gradients();
}

PlanExecutor::~PlanExecutor() = default;

std::vector<Tensor> PlanExecutor::run(const spec::Plan& plan, const spec::Residual& r,
                                      const spec::TemplateTable& tt, const interp::Params& params) {
  std::vector<Impl::GroupState> st(plan.groups.size());
  for (size_t gi = 0; gi < plan.groups.size(); ++gi)
    impl_->run_group(gi, plan.groups[gi], r, tt, params, st, false, stats_);
  std::vector<Tensor> out;
  for (const auto& o : plan.outputs)
    out.push_back(impl_->fetch(o, r, params, st));
  return out;
}

interp::Interpreter::Gradients PlanExecutor::value_and_grad(const spec::Plan& plan,
                                                            const spec::Residual& r,
                                                            const spec::TemplateTable& tt,
                                                            const interp::Params& params) {
  std::vector<Impl::GroupState> st(plan.groups.size());
  for (size_t gi = 0; gi < plan.groups.size(); ++gi)
    impl_->run_group(gi, plan.groups[gi], r, tt, params, st, true, stats_);
  if (plan.outputs.size() != 1)
    throw Error("value_and_grad needs an entry with one f32[] result");
  const RowRef& lo = plan.outputs[0];
  Tensor loss = impl_->fetch(lo, r, params, st);
  if (loss.dtype() != DType::F32 || loss.numel() != 1)
    throw Error("value_and_grad needs an entry with one f32[] result");

  interp::Interpreter::Gradients out;
  out.loss = loss.item_f32();
  out.grads.resize(params.values.size());
  if (lo.kind != Ref::Kind::Inst)
    return out;

  // Gradient storage per group result: [rows, ...], zero until something flows in.
  auto grad_of = [&](int32_t g, int32_t k) -> Tensor& {
    auto& gs = st[static_cast<size_t>(g)];
    if (gs.grads.size() <= static_cast<size_t>(k))
      gs.grads.resize(static_cast<size_t>(k) + 1);
    Tensor& t = gs.grads[static_cast<size_t>(k)];
    if (!t.defined()) {
      const Group& grp = plan.groups[static_cast<size_t>(g)];
      Shape s{static_cast<int64_t>(grp.tmpl == Instance::kSumN ? 1 : grp.instances.size())};
      for (auto d : grp.results[static_cast<size_t>(k)].dims)
        s.push_back(d);
      t = Tensor::zeros(DType::F32, s);
    }
    return t;
  };
  auto add_row = [&](const RowRef& rr, const Tensor& g) {
    if (rr.kind != Ref::Kind::Inst)
      return;
    Tensor& dst = grad_of(rr.index, rr.out);
    int64_t n = g.numel();
    float* d = dst.f32() + static_cast<size_t>(rr.row) * static_cast<size_t>(n);
    const float* s = g.f32();
    for (int64_t i = 0; i < n; ++i)
      d[i] += s[i];
  };
  grad_of(lo.index, lo.out).f32()[lo.row] += 1.0f;

  for (size_t gi = plan.groups.size(); gi-- > 0;) {
    const Group& g = plan.groups[gi];
    auto& gs = st[gi];
    if (gs.grads.empty())
      continue;
    if (g.tmpl == Instance::kSumN) {
      Tensor G = grad_of(static_cast<int32_t>(gi), 0);
      Tensor row = row_of(G, 0);
      for (const auto& a : g.args)
        add_row(a.rows[0], row);
      continue;
    }
    std::vector<std::pair<int32_t, Tensor>> seeds;
    if (!gs.per_row) {
      for (size_t k = 0; k < gs.result_ids.size(); ++k)
        if (k < gs.grads.size() && gs.grads[k].defined() && gs.result_ids[k] >= 0)
          seeds.emplace_back(gs.result_ids[k], gs.grads[k]);
    } else {
      for (size_t i = 0; i < gs.rows.size(); ++i)
        for (size_t k = 0; k < gs.row_ids[i].size(); ++k)
          if (k < gs.grads.size() && gs.grads[k].defined() && gs.row_ids[i][k] >= 0)
            seeds.emplace_back(gs.row_ids[i][k], row_of(gs.grads[k], static_cast<int64_t>(i)));
    }
    if (seeds.empty())
      continue;
    auto grads = gs.tape->backward(seeds);
    int32_t nleaves = static_cast<int32_t>(grads.size() - params.values.size());
    // Per-row argument gradients flow to the rows they were gathered from.
    for (size_t a = 0; a < g.args.size(); ++a) {
      int32_t leaf = gs.arg_leaf[a];
      if (leaf < 0 || grads[static_cast<size_t>(leaf)].empty())
        continue;
      Shape xs{static_cast<int64_t>(g.instances.size())};
      for (auto d : g.args[a].sig.dims)
        xs.push_back(d);
      Tensor dx = grads[static_cast<size_t>(leaf)].to_dense(xs);
      for (size_t i = 0; i < g.args[a].rows.size(); ++i)
        add_row(g.args[a].rows[i], row_of(dx, static_cast<int64_t>(i)));
    }
    for (size_t p = 0; p < params.values.size(); ++p) {
      auto& src = grads[static_cast<size_t>(nleaves) + p];
      auto& dst = out.grads[p];
      if (src.dense.defined()) {
        if (!dst.dense.defined())
          dst.dense = src.dense;
        else
          kernels::add_inplace(dst.dense, src.dense);
      }
      for (auto& s : src.sparse)
        dst.sparse.push_back(std::move(s));
    }
    gs.tape.reset();
  }
  return out;
}

} // namespace pejit::runtime
