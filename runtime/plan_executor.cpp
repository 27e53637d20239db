// Batched execution of plans in an arena (see plan_executor.h): the forward sweep, each group on
// its template graph or with the batching backend of batch_backend.h (a group's ops on all its
// rows at once, or row by row). The backward sweep is plan_executor_backward.cpp.
#include "runtime/plan_executor_impl.h"

#include "runtime/parallel.h"

#include "jit/kernel_cache.h"
#include "specializer/template_graph.h"
#include "src/interp/evaluator.h"
#include "src/interp/recorded_op.h"
#include "src/kernels/kernels.h"
#include "src/ops/emitter.h"
#include "src/util/asan.h"
#include "src/util/check.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

namespace pejit::runtime {

using detail::BatchBackend;
using detail::NotBatchable;
using interp::Value;
using interp::Values;
using specializer::Group;
using specializer::Instance;
using specializer::Ref;
using specializer::RowRef;

namespace {

void flatten(const Value& v, std::vector<Value>& out) {
  if (v.kind() == Value::Kind::Tensor)
    out.push_back(v);
  else
    for (const auto& e : v.items())
      flatten(e, out);
}

// A template as reported: its name, and for an op's template the call site it was made for.
std::string reported_name(const specializer::Template& t) {
  return t.where.known() ? t.name + " (" + t.where.str() + ")" : t.name;
}

} // namespace

std::shared_ptr<const GraphRunner> PlanExecutor::Impl::runner(const specializer::Template& t,
                                                              PlanStats& stats) {
  if (runners == nullptr)
    return nullptr;
  std::string why;
  auto r = runners->get(t, opt.compile, &why);
  if (!r && reported.insert(reported_name(t) + ": " + why).second) {
    stats.graph_fallbacks.push_back(reported_name(t) + ": " + why);
    stats.interpreted_templates.push_back(reported_name(t) + ": " + why);
  }
  return r;
}

std::shared_ptr<const GraphRunner>
PlanExecutor::Impl::known_runner(int32_t id, const specializer::Template& t,
                                 const specializer::TemplateTable& tt, PlanStats& stats) {
  if (runners == nullptr)
    return nullptr;
  const auto i = static_cast<size_t>(id);
  if (i < known.size() && known[i].tt == &tt && known[i].generation == m->generation() &&
      known[i].tmpl.same_as(t))
    return known[i].graph;
  stats.runner_lookups++;
  auto r = runner(t, stats);
  // A compiling get() settles the template (compiled, or its failure remembered); without
  // it, a JIT's cache may still compile it later (prepare()), unless it has.
  if (r != nullptr && (opt.compile || !runners->jit() || r->compiled())) {
    if (known.size() <= i)
      known.resize(i + 1);
    known[i] = {&tt, m->generation(), t, r};
  }
  return r;
}

const char* PlanExecutor::Impl::ptr(const RowSource& s, const specializer::Residual& r,
                                    const interp::Params& params) {
  switch (s.kind) {
  case Ref::Kind::Inst:
    return at(s.off);
  case Ref::Kind::Input:
    return static_cast<const char*>(r.inputs[static_cast<size_t>(s.index)].raw()) + s.off * 4;
  case Ref::Kind::Param:
    return static_cast<const char*>(params.values[static_cast<size_t>(s.index)].raw()) + s.off * 4;
  case Ref::Kind::Const:
    return static_cast<const char*>(r.consts[static_cast<size_t>(s.index)].raw()) + s.off * 4;
  }
  PEJIT_CHECK(false) << "bad row source";
}

// Gathers the rows of `a` into its block: one copy per run of consecutive source rows.
void PlanExecutor::Impl::gather(const ExecLayout& L, const ExecLayout::Arg& a,
                                const specializer::Residual& r, const interp::Params& params) {
  const size_t row_bytes = static_cast<size_t>(a.row_elems) * 4;
  char* dst = at(a.off);
  std::span<const RowSource> rows = L.rows(a);
  auto copy = [&](size_t b, size_t e) {
    if (row_bytes == 4) { // scalar rows (a batch's word ids and labels, each its own tensor)
      for (size_t i = b; i < e; ++i)
        std::memcpy(dst + i * 4, ptr(rows[i], r, params), 4);
      return;
    }
    const char* src = b < e ? ptr(rows[b], r, params) : nullptr;
    for (size_t i = b; i < e;) {
      size_t j = i + 1;
      const char* next = nullptr; // row j's source, once read
      for (; j < e; ++j) {
        next = ptr(rows[j], r, params);
        if (next != src + (j - i) * row_bytes)
          break;
      }
      std::memcpy(dst + i * row_bytes, src, (j - i) * row_bytes);
      i = j;
      src = next;
    }
  };
  const auto n = static_cast<int64_t>(rows.size());
  if (opt.workers == nullptr) {
    copy(0, rows.size());
    return;
  }
  opt.workers->for_rows(
      n, a.row_elems, 1,
      [&](int64_t r0, int64_t k) { copy(static_cast<size_t>(r0), static_cast<size_t>(r0 + k)); },
      static_cast<int>(Family::Gathers));
}

// One template call on `args` (its tensor arguments): the op, or the function's body with
// its static Int/Bool arguments in place; the results flattened.
std::vector<Value> PlanExecutor::Impl::call_template(const specializer::Template& t,
                                                     BatchBackend& be, const Values& args) {
  std::vector<Value> outs;
  if (t.kind == specializer::Template::Kind::Op) {
    Values multi;
    be.op(t.op, t.attr, args.data(), args.size(), Span{}, &multi);
    return multi;
  }
  interp::Evaluator<BatchBackend> ev(*m, be, interp::CallLimit::of(0, 0));
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
  if (ti + 1 == args.size()) // a random template: its key is the last argument
    be.set_random_key(args.back());
  flatten(ev.call_fn(f, full, f.span), outs);
  return outs;
}

// A segment sum: row k of the result is the sum of its terms, in order (each a row anywhere).
void PlanExecutor::Impl::run_sum(const ExecLayout& L, const ExecLayout::Group& G, const Group& g,
                                 const specializer::Residual& r, const interp::Params& params) {
  const auto& R = G.results[0];
  const size_t n = static_cast<size_t>(R.row_elems);
  const size_t sums = g.segments.empty() ? 1 : g.segments.size() - 1; // none: one row of all
  for (size_t k = 0; k < sums; ++k) {
    float* acc = reinterpret_cast<float*>(at(R.off + static_cast<int64_t>(k) * R.row_elems));
    const size_t b = g.segments.empty() ? 0 : static_cast<size_t>(g.segments[k]);
    const size_t e = g.segments.empty() ? G.args.size() : static_cast<size_t>(g.segments[k + 1]);
    for (size_t a = b; a < e; ++a) {
      const float* t = reinterpret_cast<const float*>(ptr(L.rows(G.args[a])[0], r, params));
      if (a == b)
        std::memcpy(acc, t, n * 4);
      else
        for (size_t i = 0; i < n; ++i)
          acc[i] += t[i];
    }
  }
}

void PlanExecutor::Impl::run_group(size_t gi, const Group& g, const ExecLayout& L,
                                   const specializer::Residual& r,
                                   const specializer::TemplateTable& tt,
                                   const interp::Params& params, bool train, PlanStats& stats) {
  const ExecLayout::Group& G = L.groups[gi];
  if (g.tmpl == Instance::kSumN) {
    run_sum(L, G, g, r, params);
    stats.groups_batched++;
    return;
  }
  GroupState& gs = st[gi];
  const int64_t rows = G.rows;
  const specializer::Template& t = tt.at(g.tmpl);
  std::vector<Tensor>& xs = gs.ins;
  xs.assign(g.args.size(), Tensor());
  gs.arg_leaf.assign(g.args.size(), -1);
  int32_t nleaves = 0;
  // A parameter or constant the template reads itself (Template::param_args, const_args)
  // is no argument of its graph.
  bool shared_args = false;
  for (size_t a = 0; a < g.args.size(); ++a) {
    const bool bound = a < t.param_args.size() && t.param_args[a] >= 0;
    PEJIT_CHECK(!bound || (g.args[a].shared && g.args[a].shared_ref.kind == Ref::Kind::Param &&
                           g.args[a].shared_ref.index == t.param_args[a]))
        << t.name << ": argument " << a << " is not the parameter its template reads";
    const bool literal = a < t.const_args.size() && t.const_args[a].defined();
    PEJIT_CHECK(!literal || (g.args[a].shared && g.args[a].shared_ref.kind == Ref::Kind::Const))
        << t.name << ": argument " << a << " is not the constant its template reads";
    shared_args = shared_args || (g.args[a].shared && !bound && !literal);
  }
  gs.graph = shared_args ? nullptr : known_runner(g.tmpl, t, tt, stats);
  if (gs.graph == nullptr && (shared_args || runners == nullptr)) { // else runner() said why
    std::string why = reported_name(t) + (shared_args ? ": an argument shared by every row "
                                                        "(template graphs take per-row "
                                                        "arguments only)"
                                                      : ": template graphs are off");
    if (reported.insert(why).second)
      stats.interpreted_templates.push_back(why);
  }
  // An argument that a panel core gathers itself (GraphRunner::lazy_arg) gets its rows'
  // addresses instead of a gathered block.
  gs.gst.arg_rows.resize(g.args.size());
  for (auto& rows : gs.gst.arg_rows)
    rows.clear();
  for (size_t a = 0; a < g.args.size(); ++a) {
    if (g.args[a].shared)
      continue;
    auto t0 = tick();
    if (opt.panels && gs.graph != nullptr && gs.graph->lazy_arg(a) &&
        g.args[a].sig.dtype == DType::F32) {
      auto& rows = gs.gst.arg_rows[a];
      for (const RowSource& s : L.rows(G.args[a]))
        rows.push_back(reinterpret_cast<const float*>(ptr(s, r, params)));
      stats.lazy_gathers++;
    } else {
      gather(L, G.args[a], r, params);
    }
    tock(stats, Family::Gathers, t0);
    xs[a] = block(G.args[a].off, g.args[a].sig, rows);
    if (train && g.args[a].sig.dtype == DType::F32)
      gs.arg_leaf[a] = nleaves++;
  }
  auto shared_value = [&](const Ref& ref, interp::Tape* tape) -> Value {
    switch (ref.kind) {
    case Ref::Kind::Param:
      return Value::tensor(params.values[static_cast<size_t>(ref.index)],
                           tape ? nleaves + ref.index : -1);
    case Ref::Kind::Const:
      return Value::tensor(r.consts[static_cast<size_t>(ref.index)]);
    case Ref::Kind::Input:
      return Value::tensor(r.inputs[static_cast<size_t>(ref.index)]);
    case Ref::Kind::Inst:
      break;
    }
    PEJIT_CHECK(false) << "a shared argument that is an instance";
  };
  auto reset_tape = [&] {
    if (!train)
      return;
    std::vector<Tensor> ls(static_cast<size_t>(nleaves));
    for (size_t a = 0; a < g.args.size(); ++a)
      if (gs.arg_leaf[a] >= 0)
        ls[static_cast<size_t>(gs.arg_leaf[a])] = xs[a];
    ls.insert(ls.end(), params.values.begin(), params.values.end());
    if (!gs.tape)
      gs.tape = std::make_unique<interp::Tape>();
    gs.tape->reset(ls);
  };
  if (gs.graph != nullptr) {
    std::vector<Tensor>& results = gs.outs;
    results.clear();
    for (size_t k = 0; k < g.results.size(); ++k)
      results.push_back(block(G.results[k].off, g.results[k], rows));
    GraphRunStats rs;
    rs.profile = opt.profile;
    gs.gst.transposed = &transposed;
    gs.gst.scratch = &scratch;
    gs.gst.deferred = train ? weight_grads.sink() : nullptr;
    gs.gst.panels = opt.panels;
    gs.gst.jit_gemm = opt.jit_gemm;
    gs.gst.workers = opt.workers;
    gs.gst.inference = !train;
    const ScratchArena::Mark before = scratch.mark();
    gs.graph->forward(rows, xs, params, results, gs.gst, rs);
    xs.clear();
    results.clear();
    merge(stats, rs);
    stats.groups_on_graphs++;
    stats.groups_batched++;
    if (!train) { // no backward reads this group's intermediates: the next group reuses them
      gs.gst.vals.clear();
      gs.gst.row_stats.clear();
      scratch.release_to(before);
    }
    return;
  }
  InterpretedTimer timer(stats);
  reset_tape();
  interp::Tape* tape = train ? gs.tape.get() : nullptr;

  // The template on all rows at once.
  try {
    BatchBackend be(params, tape, nleaves, dims, rows);
    Values args;
    for (size_t a = 0; a < g.args.size(); ++a)
      args.push_back(g.args[a].shared ? shared_value(g.args[a].shared_ref, tape)
                                      : Value::batched_tensor(xs[a], gs.arg_leaf[a]));
    std::vector<Value> outs = call_template(t, be, args);
    PEJIT_CHECK(outs.size() == g.results.size()) << t.name << ": result count";
    gs.result_ids.clear();
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!outs[k].batched()) {
        // A result that does not depend on the rows (every argument shared): the same for
        // every row, broadcast by an add of per-row zeros so that gradients flow back.
        Value two[2] = {Value::batched_tensor(
                            Tensor::zeros(g.results[k].dtype, rows_shape(rows, g.results[k].dims))),
                        outs[k]};
        outs[k] = be.op(ops::OpId::Add, {}, two, 2, Span{});
      }
      const Tensor& o = outs[k].as_tensor();
      PEJIT_CHECK(o.numel() == rows * G.results[k].row_elems) << t.name << ": result size";
      std::memmove(at(G.results[k].off), o.raw(), o.nbytes());
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
  reset_tape();
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
    PEJIT_CHECK(outs.size() == g.results.size()) << t.name << ": result count";
    for (size_t k = 0; k < outs.size(); ++k) {
      const Tensor& o = outs[k].as_tensor();
      PEJIT_CHECK(o.numel() == G.results[k].row_elems) << t.name << ": result size";
      std::memcpy(at(G.results[k].off + i * G.results[k].row_elems), o.raw(), o.nbytes());
      gs.row_ids[static_cast<size_t>(i)].push_back(outs[k].tape_id());
    }
  }
}

// The arena holds one plan's blocks at a time, 64 bytes aligned, and is reused from run to
// run: under ASan the alignment gaps between blocks and the arena past the plan's end are
// poisoned for the run, so that a C++ kernel, a gather or a seed sum reading or writing past
// its block is reported instead of touching the next block (or a block of the run before).
void PlanExecutor::Impl::poison_gaps(const ExecLayout& L, bool train) {
  if constexpr (!util::kAsan)
    return;
  util::asan_poison(arena.raw(), arena.nbytes());
  auto open = [this](int64_t off, int64_t elems) {
    if (off >= 0 && elems > 0)
      util::asan_unpoison(at(off), static_cast<size_t>(elems) * 4);
  };
  for (const ExecLayout::Group& G : L.groups) {
    for (const ExecLayout::Result& R : G.results) {
      open(R.off, G.rows * R.row_elems);
      if (train)
        open(R.seed_off, G.rows * R.row_elems);
    }
    for (const ExecLayout::Arg& A : G.args) {
      open(A.off, static_cast<int64_t>(A.num_rows) * A.row_elems);
      if (train)
        open(A.grad_off, G.rows * A.row_elems);
    }
  }
}

// The forward of every group, in plan order, with the arena sized for it (and for the
// backward when `train`); returns the layout used (`own`, made here, when none was given).
const ExecLayout* PlanExecutor::Impl::forward(const specializer::Plan& plan,
                                              const ExecLayout* layout, ExecLayout& own,
                                              const specializer::Residual& r,
                                              const specializer::TemplateTable& tt,
                                              const interp::Params& params, bool train,
                                              PlanStats& stats) {
  if (layout == nullptr) {
    own = make_layout(plan, r);
    layout = &own;
  }
  reserve(train ? layout->total_elems : layout->forward_elems);
  poison_gaps(*layout, train);
  transposed.invalidate(); // the parameters may have changed since the last run
  // What the last run's groups still hold of its scratch buffer (the values of a group whose
  // backward had no seed, a cross-entropy's row statistics), so that this run reuses it.
  for (GroupState& gs : st) {
    gs.gst.vals.clear();
    gs.gst.row_stats.clear();
  }
  scratch.reset();
  weight_grads.clear();
  if (st.size() < plan.groups.size())
    st.resize(plan.groups.size());
  for (size_t gi = 0; gi < plan.groups.size(); ++gi)
    run_group(gi, plan.groups[gi], *layout, r, tt, params, train, stats);
  return layout;
}

PlanExecutor::PlanExecutor(std::shared_ptr<const ir::Module> m, interp::DimBindings dims,
                           ExecOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->m = std::move(m);
  impl_->dims = std::move(dims);
  impl_->opt = options;
  if (options.graphs) {
    impl_->runners = options.runners;
    if (impl_->runners == nullptr) {
      impl_->own_runners = std::make_unique<RunnerCache>(
          impl_->m, impl_->dims, options.kernels,
          GraphRunner::CompileScope{false, options.workers && options.workers->threads() > 1});
      impl_->runners = impl_->own_runners.get();
    }
  }
  ops::register_kernels();
  ops::register_gradients();
}

PlanExecutor::~PlanExecutor() = default;

std::vector<Tensor> PlanExecutor::run(const specializer::Plan& plan, const specializer::Residual& r,
                                      const specializer::TemplateTable& tt,
                                      const interp::Params& params, const ExecLayout* layout) {
  ExecLayout own;
  layout = impl_->forward(plan, layout, own, r, tt, params, false, stats_);
  Impl& I = *impl_;
  stats_.packed_buffers = I.transposed.allocated();
  stats_.scratch_buffers = I.scratch.buffers();
  stats_.scratch_elems = I.scratch.peak();
  std::vector<Tensor> out;
  for (size_t k = 0; k < plan.outputs.size(); ++k) {
    const RowRef& o = plan.outputs[k];
    const RowSource& s = layout->outputs[k];
    switch (o.kind) {
    case Ref::Kind::Inst: {
      const auto& sig =
          plan.groups[static_cast<size_t>(o.index)].results[static_cast<size_t>(o.out)];
      out.push_back(I.arena.view(s.off, sig.dtype, Shape(std::span<const int64_t>(sig.dims)))
                        .clone()); // the arena is reused by the next run
      break;
    }
    case Ref::Kind::Input:
      out.push_back(r.inputs[static_cast<size_t>(o.index)]);
      break;
    case Ref::Kind::Param:
      out.push_back(params.values[static_cast<size_t>(o.index)].clone());
      break;
    case Ref::Kind::Const:
      out.push_back(r.consts[static_cast<size_t>(o.index)]);
      break;
    }
  }
  return out;
}

} // namespace pejit::runtime
