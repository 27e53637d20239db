// GraphRunner on its own, outside the plan executor: the templates of a tiny program, built by
// the template pipeline and handed out by the runner cache as the executor gets them, run on
// all rows at once. Results, the loss and the parameter gradients agree with the interpreter
// row by row, the argument gradients with the template graph evaluated one row at a time, on
// reference and on JIT kernels (a loss: with the same bits on both); a runner is deterministic
// and a copy gives its bits; a forward-only compile gives a full compile's forward bits; a graph
// with a node it has no batched rule for is refused, with the node and why.
#include "jit/jit.h"
#include "jit/kernel_cache.h"
#include "runtime/graph_runner.h"
#include "runtime/runner_cache.h"
#include "src/graph/evaluate.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "src/util/asan.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace tests_runtime_graph_runner_test {

using namespace pejit;
using runtime::GraphRunner;
using specializer::TensorSig;

namespace {

// The runner the plan executor would get for `t`: built through a runner cache (the template
// pipeline, then GraphRunner's constructor), compiled on `kernels` when given (null: reference
// kernels only). Null when the runner refuses the graph; `why` then says why.
std::shared_ptr<const GraphRunner>
make_runner(std::shared_ptr<const ir::Module> m, const interp::DimBindings& dims,
            const specializer::Template& t, jit::KernelCache* kernels, std::string* why = nullptr) {
  runtime::RunnerCache cache(std::move(m), dims, kernels);
  return cache.get(t, kernels != nullptr, why);
}

jit::KernelCache& shared_kernels() {
  static jit::Jit jit;
  static jit::KernelCache cache(jit, 256);
  return cache;
}

const char* kProgram = R"(
param W : f32[6, 8] = normal(0.0, 0.4)
param b : f32[8]    = normal(0.0, 0.4)
param V : f32[4, 3] = normal(0.0, 0.4)

// A gated layer, as a TreeLSTM leaf is: x @ W + b split into gates, an elementwise epilogue.
fn hidden(x: f32[6], h: f32[4]) -> (f32[4], f32[4]) {
  let (i, u) = split2(x @ W + b);
  let c = sigmoid(i) * tanh(u) + h;
  (tanh(c), c)
}

// A classifier's loss, as a TreeLSTM node's is.
fn score(h: f32[4], y: i32[]) -> f32[] { cross_entropy(h @ V, y) }

// Reads a table that differs from row to row: no batched rule.
fn pick(t: f32[5, 3], i: i32[]) -> f32[3] { take(t, i) }

entry hidden_loss(x: f32[6], h: f32[4], s0: f32[4], s1: f32[4]) -> f32[] {
  let (a, c) = hidden(x, h);
  sum(a * s0) + sum(c * s1)
}

entry score_loss(h: f32[4], y: i32[]) -> f32[] { score(h, y) }
)";

struct Program {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  interp::Params params;
  Program() {
    Diagnostics d;
    REQUIRE_MESSAGE(types::add_source(*m, kProgram, "tiny.pe", d).ok, d.render());
    dims = interp::bind_dims(*m, {});
    params = interp::init_params(*m, dims, 7);
  }
  int fn(const std::string& name) const {
    for (size_t i = 0; i < m->fns().size(); ++i)
      if (m->fns()[i]->name == name)
        return static_cast<int>(i);
    FAIL("no function " << name);
    return -1;
  }
  specializer::Template tmpl(const std::string& name, std::vector<TensorSig> args,
                             std::vector<TensorSig> results) const {
    specializer::Template t;
    t.kind = specializer::Template::Kind::Function;
    t.fn = fn(name);
    t.args = std::move(args);
    t.results = std::move(results);
    t.name = name;
    return t;
  }
};

TensorSig f32(std::vector<int64_t> dims) {
  return {DType::F32, specializer::SigDims(dims.begin(), dims.end())};
}
TensorSig i32(std::vector<int64_t> dims) {
  return {DType::I32, specializer::SigDims(dims.begin(), dims.end())};
}

Shape with_rows(int64_t rows, std::span<const int64_t> dims) {
  Shape s{rows};
  for (int64_t d : dims)
    s.push_back(d);
  return s;
}

// [rows, dims...] of values in [-1, 1] (f32) or labels in [0, 3) (i32).
Tensor random_rows(const TensorSig& s, int64_t rows, std::mt19937& rng) {
  Tensor t = Tensor::zeros(s.dtype, with_rows(rows, s.dims));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, 2);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (s.dtype == DType::F32)
      t.f32()[i] = u(rng);
    else
      t.i32()[i] = label(rng);
  }
  return t;
}

// Row r of a [rows, ...] tensor, as its own tensor.
Tensor row(const Tensor& t, int64_t r) {
  Shape s{std::span<const int64_t>(t.shape().dims()).subspan(1)};
  Tensor out = Tensor::zeros(t.dtype(), s);
  size_t bytes = out.nbytes();
  std::memcpy(out.raw(), static_cast<const char*>(t.raw()) + static_cast<size_t>(r) * bytes, bytes);
  return out;
}

// The first n rows of a [rows, ...] tensor.
Tensor first_rows(const Tensor& t, int64_t n) {
  Shape s = t.shape();
  s[0] = n;
  Tensor out = Tensor::zeros(t.dtype(), s);
  std::memcpy(out.raw(), t.raw(), out.nbytes());
  return out;
}

// What one runner computes for a group of rows: forward, then backward from `seeds`.
struct Outcome {
  std::vector<Tensor> results, arg_grads;
  std::vector<interp::ParamGrad> param_grads;
  runtime::GraphRunStats stats;
};

Outcome run_rows(const GraphRunner& r, const specializer::Template& t, int64_t rows,
                 const std::vector<Tensor>& args, const std::vector<Tensor>& seeds,
                 const interp::Params& params) {
  Outcome o;
  GraphRunner::State st;
  for (const auto& s : t.results)
    o.results.push_back(Tensor::zeros(s.dtype, with_rows(rows, s.dims)));
  r.forward(rows, args, params, o.results, st, o.stats);
  for (const auto& s : t.args)
    o.arg_grads.push_back(s.dtype == DType::F32 ? Tensor::zeros(s.dtype, with_rows(rows, s.dims))
                                                : Tensor());
  o.param_grads.resize(params.values.size());
  r.backward(seeds, params, o.arg_grads, o.param_grads, st, o.stats);
  return o;
}

// Every result, argument gradient and parameter gradient of `a` has `b`'s bits.
void check_same_bits(const Outcome& a, const Outcome& b, const interp::Params& params) {
  REQUIRE(a.results.size() == b.results.size());
  for (size_t k = 0; k < a.results.size(); ++k)
    CHECK_MESSAGE(test::same_bits(a.results[k], b.results[k]), "result " << k);
  REQUIRE(a.arg_grads.size() == b.arg_grads.size());
  for (size_t i = 0; i < a.arg_grads.size(); ++i)
    if (a.arg_grads[i].defined() || b.arg_grads[i].defined())
      CHECK_MESSAGE(test::same_bits(a.arg_grads[i], b.arg_grads[i]), "d/arg " << i);
  for (size_t p = 0; p < params.values.size(); ++p) {
    const Shape& s = params.values[p].shape();
    CHECK_MESSAGE(test::same_bits(a.param_grads[p].to_dense(s), b.param_grads[p].to_dense(s)),
                  "d/" << params.names[p]);
  }
}

// The template graph evaluated on one row at a time (graph::evaluate: no batching, no fused
// kernels): the argument gradients of every row, and the parameter gradients summed over them.
void check_against_rowwise_graph(const GraphRunner& r, const Outcome& got, int64_t rows,
                                 const std::vector<Tensor>& args, const std::vector<Tensor>& seeds,
                                 const interp::Params& params) {
  const specializer::TemplateGraph& tg = r.graph();
  std::vector<graph::NodeId> outs;
  for (graph::NodeId g : tg.bwd_arg_grads)
    if (g != graph::kNoNode)
      outs.push_back(g);
  outs.insert(outs.end(), tg.bwd_param_grads.begin(), tg.bwd_param_grads.end());
  std::vector<Tensor> param_sum(tg.bwd_param_grads.size());
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<Tensor> a, s;
    for (const auto& x : args)
      a.push_back(row(x, i));
    for (const auto& x : seeds)
      s.push_back(row(x, i));
    auto vals = graph::evaluate(tg.g, tg.bind_inputs(a, params, s), outs);
    size_t k = 0;
    for (size_t j = 0; j < tg.bwd_arg_grads.size(); ++j)
      if (tg.bwd_arg_grads[j] != graph::kNoNode)
        test::check_close(row(got.arg_grads[j], i), vals[k++],
                          "row " + std::to_string(i) + " d/arg " + std::to_string(j));
    for (size_t p = 0; p < param_sum.size(); ++p, ++k) {
      if (!param_sum[p].defined()) {
        param_sum[p] = vals[k].clone();
        continue;
      }
      for (int64_t e = 0; e < vals[k].numel(); ++e)
        param_sum[p].f32()[e] += vals[k].f32()[e];
    }
  }
  for (size_t p = 0; p < param_sum.size(); ++p) {
    auto pi = static_cast<size_t>(tg.param_index[p]);
    test::check_close(got.param_grads[pi].to_dense(params.values[pi].shape()), param_sum[p],
                      "d/" + params.names[pi]);
  }
}

// More rows than one panel of a panel kernel (48), and not a multiple of it.
constexpr int64_t kRows = 53;

} // namespace

TEST_SUITE("runtime") {
  TEST_CASE("GraphRunner: a gated layer on all rows == the interpreter row by row, both tiers") {
    Program p;
    auto t = p.tmpl("hidden", {f32({6}), f32({4})}, {f32({4}), f32({4})});
    std::mt19937 rng(17);
    std::vector<Tensor> args, seeds;
    for (const auto& s : t.args)
      args.push_back(random_rows(s, kRows, rng));
    for (const auto& s : t.results)
      seeds.push_back(random_rows(s, kRows, rng));

    // The interpreter, one row at a time: the results by calling the function, the
    // parameter gradients of sum(a * s0) + sum(c * s1), summed over the rows.
    interp::Interpreter in(p.m, p.dims);
    std::vector<std::vector<Tensor>> want(kRows);
    std::vector<Tensor> want_grads;
    for (const auto& v : p.params.values)
      want_grads.push_back(Tensor::zeros(DType::F32, v.shape()));
    for (int64_t i = 0; i < kRows; ++i) {
      interp::Values xs = {interp::Value::tensor(row(args[0], i)),
                           interp::Value::tensor(row(args[1], i))};
      interp::Value r = in.call_function(t.fn, xs, p.params);
      for (const auto& x : r.items())
        want[static_cast<size_t>(i)].push_back(x.as_tensor());
      xs.push_back(interp::Value::tensor(row(seeds[0], i)));
      xs.push_back(interp::Value::tensor(row(seeds[1], i)));
      auto g = in.value_and_grad("hidden_loss", xs, p.params);
      for (size_t q = 0; q < want_grads.size(); ++q) {
        Tensor d = g.grads[q].to_dense(p.params.values[q].shape());
        for (int64_t e = 0; e < d.numel(); ++e)
          want_grads[q].f32()[e] += d.f32()[e];
      }
    }
    CHECK(test::max_abs(want_grads[static_cast<size_t>(p.params.index("V"))]) == 0.0);

    for (bool jit : {false, true}) {
      CAPTURE(jit);
      std::string why;
      auto r = make_runner(p.m, p.dims, t, jit ? &shared_kernels() : nullptr, &why);
      REQUIRE_MESSAGE(r != nullptr, why);
      CHECK(r->supported());
      CHECK(r->why().empty());
      CHECK(r->compiled());                 // without the JIT there is nothing to compile
      CHECK(r->jit_runs().empty() == !jit); // no elementwise runs are planned without the JIT
      Outcome got = run_rows(*r, t, kRows, args, seeds, p.params);
      for (int64_t i = 0; i < kRows; ++i)
        for (size_t k = 0; k < got.results.size(); ++k)
          test::check_close(row(got.results[k], i), want[static_cast<size_t>(i)][k],
                            "row " + std::to_string(i) + " result " + std::to_string(k));
      for (size_t q = 0; q < want_grads.size(); ++q)
        test::check_close(got.param_grads[q].to_dense(p.params.values[q].shape()), want_grads[q],
                          "d/" + p.params.names[q]);
      CHECK(got.param_grads[static_cast<size_t>(p.params.index("V"))].empty());
      check_against_rowwise_graph(*r, got, kRows, args, seeds, p.params);
      // On JIT kernels the gate epilogue and its backward chain run as compiled code.
      if (jit)
        CHECK(got.stats.jit_launches > 0);
      else
        CHECK(got.stats.jit_launches == 0);
      CHECK(got.stats.ref_nodes > 0); // the GEMMs at least, or their panels' gathers
    }
  }

  TEST_CASE("GraphRunner: a classifier's loss on all rows == the interpreter's losses and grads") {
    Program p;
    auto t = p.tmpl("score", {f32({4}), i32({})}, {f32({})});
    std::mt19937 rng(23);
    std::vector<Tensor> args = {random_rows(t.args[0], kRows, rng),
                                random_rows(t.args[1], kRows, rng)};
    std::vector<Tensor> ones = {Tensor::full(Shape{kRows}, 1.0f)};

    interp::Interpreter in(p.m, p.dims);
    double want_loss = 0;
    std::vector<float> losses;
    int v = p.params.index("V");
    REQUIRE(v >= 0);
    Tensor want_dv = Tensor::zeros(DType::F32, p.params.values[static_cast<size_t>(v)].shape());
    for (int64_t i = 0; i < kRows; ++i) {
      auto g = in.value_and_grad(
          "score_loss",
          {interp::Value::tensor(row(args[0], i)), interp::Value::tensor(row(args[1], i))},
          p.params);
      losses.push_back(static_cast<float>(g.loss));
      want_loss += g.loss;
      Tensor d = g.grads[static_cast<size_t>(v)].to_dense(want_dv.shape());
      for (int64_t e = 0; e < d.numel(); ++e)
        want_dv.f32()[e] += d.f32()[e];
    }

    std::vector<Outcome> tiers;
    for (bool jit : {false, true}) {
      CAPTURE(jit);
      auto r = make_runner(p.m, p.dims, t, jit ? &shared_kernels() : nullptr);
      REQUIRE(r != nullptr);
      Outcome got = run_rows(*r, t, kRows, args, ones, p.params);
      tiers.push_back(got);
      REQUIRE(got.results[0].shape() == Shape{kRows});
      double loss = 0;
      for (int64_t i = 0; i < kRows; ++i) {
        CHECK(test::loss_close(got.results[0].f32()[i], losses[static_cast<size_t>(i)]));
        loss += got.results[0].f32()[i];
      }
      CHECK(test::loss_close(loss, want_loss));
      test::check_close(got.param_grads[static_cast<size_t>(v)].to_dense(want_dv.shape()), want_dv,
                        "d/V");
      CHECK(got.param_grads[static_cast<size_t>(p.params.index("W"))].empty());
      check_against_rowwise_graph(*r, got, kRows, args, ones, p.params);
      // With the JIT, the loss and its backward are row-reduction kernels.
      CHECK(r->reduce_runs().empty() == !jit);
      if (jit)
        CHECK(got.stats.jit_reductions > 0);
      else
        CHECK(got.stats.jit_reductions == 0);
    }
    // The compiled cross-entropy computes the reference kernel's algorithm and h·V and dV are
    // the same GEMMs on both tiers: the same loss and dV bits. (dh = dY·V^T is a narrow panel
    // core's dot products with the JIT: up to rounding, checked above.)
    CHECK(test::same_bits(tiers[1].results[0], tiers[0].results[0]));
    const Shape& vs = p.params.values[static_cast<size_t>(v)].shape();
    CHECK(test::same_bits(tiers[1].param_grads[static_cast<size_t>(v)].to_dense(vs),
                          tiers[0].param_grads[static_cast<size_t>(v)].to_dense(vs)));
  }

  TEST_CASE("GraphRunner: runs are deterministic, a copy gives the same bits, rows are "
            "independent of the rows around them") {
    Program p;
    auto t = p.tmpl("hidden", {f32({6}), f32({4})}, {f32({4}), f32({4})});
    std::mt19937 rng(29);
    std::vector<Tensor> args, seeds;
    for (const auto& s : t.args)
      args.push_back(random_rows(s, kRows, rng));
    for (const auto& s : t.results)
      seeds.push_back(random_rows(s, kRows, rng));
    for (bool jit : {false, true}) {
      CAPTURE(jit);
      auto r = make_runner(p.m, p.dims, t, jit ? &shared_kernels() : nullptr);
      REQUIRE(r != nullptr);
      Outcome a = run_rows(*r, t, kRows, args, seeds, p.params);
      Outcome b = run_rows(*r, t, kRows, args, seeds, p.params);
      check_same_bits(a, b, p.params);
      GraphRunner copy(*r);
      CHECK(copy.compiled() == r->compiled());
      check_same_bits(run_rows(copy, t, kRows, args, seeds, p.params), a, p.params);
      // The first 5 rows alone (one partial panel) compute those rows' results with the same
      // bits as inside all 53 (a full panel, then a partial one). So do their argument
      // gradients on JIT kernels (panel kernels: dY·W^T row by row); the reference kernels'
      // whole dY·W^T may block its rows differently with their number: up to rounding.
      const int64_t few = 5;
      std::vector<Tensor> fa, fs;
      for (const auto& x : args)
        fa.push_back(first_rows(x, few));
      for (const auto& x : seeds)
        fs.push_back(first_rows(x, few));
      Outcome f = run_rows(*r, t, few, fa, fs, p.params);
      for (int64_t i = 0; i < few; ++i) {
        CAPTURE(i);
        for (size_t k = 0; k < f.results.size(); ++k)
          CHECK(test::same_bits(row(f.results[k], i), row(a.results[k], i)));
        for (size_t k = 0; k < f.arg_grads.size(); ++k) {
          if (jit)
            CHECK(test::same_bits(row(f.arg_grads[k], i), row(a.arg_grads[k], i)));
          else
            test::check_close(row(f.arg_grads[k], i), row(a.arg_grads[k], i), "d/arg");
        }
      }
    }
  }

  TEST_CASE("GraphRunner: a forward-only compile (inference) runs the forward on its kernels "
            "with the bits of a full compile, and the backward still runs") {
    Program p;
    auto hidden = p.tmpl("hidden", {f32({6}), f32({4})}, {f32({4}), f32({4})});
    auto score = p.tmpl("score", {f32({4}), i32({})}, {f32({})});
    std::mt19937 rng(31);
    for (const auto* t : {&hidden, &score}) {
      CAPTURE(t->name);
      std::vector<Tensor> args, seeds;
      for (const auto& s : t->args)
        args.push_back(random_rows(s, kRows, rng));
      for (const auto& s : t->results)
        seeds.push_back(random_rows(s, kRows, rng));
      runtime::RunnerCache fwd_cache(p.m, p.dims, &shared_kernels(),
                                     runtime::GraphRunner::CompileScope{.forward_only = true});
      auto fwd = fwd_cache.get(*t, true);
      auto full = make_runner(p.m, p.dims, *t, &shared_kernels());
      REQUIRE(fwd != nullptr);
      REQUIRE(full != nullptr);
      CHECK(fwd->forward_compiled());
      CHECK_FALSE(fwd->compiled()); // its backward runs have no kernel
      CHECK(full->compiled());
      for (const auto& run : fwd->jit_runs())
        CHECK(run.schedule.empty() == !run.forward);
      // Inference: the forward alone, with the views a compiled forward allows.
      std::vector<Tensor> got, want;
      for (const auto& s : t->results) {
        got.push_back(Tensor::zeros(s.dtype, with_rows(kRows, s.dims)));
        want.push_back(Tensor::zeros(s.dtype, with_rows(kRows, s.dims)));
      }
      GraphRunner::State a, b;
      a.inference = b.inference = true;
      runtime::GraphRunStats sa, sb;
      fwd->forward(kRows, args, p.params, got, a, sa);
      full->forward(kRows, args, p.params, want, b, sb);
      CHECK(sa.ref_nodes == sb.ref_nodes);
      CHECK(sa.jit_launches == sb.jit_launches);
      for (size_t k = 0; k < got.size(); ++k)
        CHECK(test::same_bits(got[k], want[k]));
      // Training on a forward-only runner: its backward on reference kernels, up to rounding.
      Outcome o = run_rows(*fwd, *t, kRows, args, seeds, p.params);
      Outcome w = run_rows(*full, *t, kRows, args, seeds, p.params);
      for (size_t k = 0; k < o.results.size(); ++k)
        CHECK(test::same_bits(o.results[k], w.results[k]));
      for (size_t k = 0; k < o.arg_grads.size(); ++k)
        if (w.arg_grads[k].defined())
          test::check_close(o.arg_grads[k], w.arg_grads[k], "d/arg");
    }
  }

  TEST_CASE("GraphRunner: a node without a batched rule is refused, naming it and why") {
    Program p;
    auto t = p.tmpl("pick", {f32({5, 3}), i32({})}, {f32({3})});
    for (jit::KernelCache* kernels : {static_cast<jit::KernelCache*>(nullptr), &shared_kernels()}) {
      CAPTURE(kernels != nullptr);
      std::string why;
      auto r = make_runner(p.m, p.dims, t, kernels, &why);
      CHECK(r == nullptr);
      CHECK_MESSAGE(why.find("take from a per-row table") != std::string::npos, why);
      CHECK_MESSAGE(why.find("take") != why.rfind("take"), why); // the node is printed too
      CHECK(why.rfind("%", 0) == 0);                             // "%<node id> ..."
    }
  }
}

TEST_CASE("ScratchArena: one run's intermediates share a buffer that the next run reuses") {
  runtime::ScratchArena a;
  a.reset();
  // The first run has no buffer yet: each request gets a block of its own.
  Tensor x = a.take(DType::F32, Shape{3, 5});
  Tensor y = a.take(DType::I32, Shape{7});
  CHECK(a.overflows() == 2);
  CHECK(!x.shares_storage(y));
  x = Tensor(), y = Tensor();
  a.reset(); // sized for what the first run asked: 15 and 7 elements, each 64-byte aligned
  CHECK(a.buffers() == 1);
  Tensor p = a.take(DType::F32, Shape{3, 5});
  Tensor q = a.take(DType::I32, Shape{7});
  CHECK(a.overflows() == 0);
  CHECK(p.shares_storage(q));
  CHECK(q.shape() == Shape{7});
  CHECK(q.dtype() == DType::I32);
  CHECK(reinterpret_cast<uintptr_t>(q.raw()) % 64 == 0);
  // p's 15 floats and the gap to 64 bytes (under ASan also a 64-byte redzone) before q.
  CHECK(static_cast<const char*>(q.raw()) - static_cast<const char*>(p.raw()) ==
        (util::kAsan ? 128 : 64));
  // Past the buffer's end: a block of its own, and the next buffer is larger.
  Tensor r = a.take(DType::F32, Shape{40});
  CHECK(a.overflows() == 1);
  CHECK(!r.shares_storage(p));
  p = Tensor(), q = Tensor(), r = Tensor();
  a.reset();
  CHECK(a.buffers() == 2);
  Tensor s1 = a.take(DType::F32, Shape{15});
  s1.f32()[0] = 42.0f;
  CHECK(a.take(DType::F32, Shape{7}).defined());
  CHECK(a.take(DType::F32, Shape{40}).defined());
  CHECK(a.overflows() == 0);
  // A view still held: the next run may not write over it, so it gets a fresh buffer.
  a.reset();
  CHECK(a.buffers() == 3);
  Tensor s2 = a.take(DType::F32, Shape{15});
  CHECK(!s2.shares_storage(s1));
  s2.f32()[0] = 7.0f;
  CHECK(s1.f32()[0] == 42.0f);
  s1 = Tensor(), s2 = Tensor();
  a.reset(); // nothing held: the buffer again
  CHECK(a.buffers() == 3);
  CHECK(a.take(DType::F32, Shape{15}).defined());
  CHECK(a.overflows() == 0);
}

TEST_CASE("ScratchArena: views given back with release_to are handed out again") {
  runtime::ScratchArena a;
  a.reset();
  (void)a.take(DType::F32, Shape{64});
  (void)a.take(DType::F32, Shape{64});
  a.reset(); // 128 elements
  Tensor keep = a.take(DType::F32, Shape{16});
  const runtime::ScratchArena::Mark m = a.mark();
  const void* first = nullptr;
  {
    Tensor v = a.take(DType::F32, Shape{32});
    Tensor w = a.take(DType::F32, Shape{32});
    first = v.raw();
    CHECK(a.peak() == (util::kAsan ? 128 : 80));
  }
  a.release_to(m); // v and w are dropped: their elements are the next views'
  Tensor x = a.take(DType::F32, Shape{48});
  CHECK(x.raw() == first);
  CHECK(x.shares_storage(keep));
  CHECK(a.overflows() == 0);
  // The next buffer holds the most that was held at once, not all that was asked for.
  CHECK(a.peak() == (util::kAsan ? 128 : 80));
  if (util::kAsan) // the given-back elements past x are poisoned until handed out again
    CHECK(util::asan_poisoned(static_cast<const char*>(first) + 4 * 48 + 64));
  x = Tensor(), keep = Tensor();
  a.reset();
  CHECK(a.buffers() == 1); // the 128 elements hold it
  CHECK(a.peak() == 0);
}

// Under AddressSanitizer (scripts/asan.sh) the bytes between two views are poisoned, so that a
// kernel writing past its output's end is reported instead of landing in the next view; a
// reused buffer starts clean. Elsewhere there is nothing to check.
TEST_CASE("ScratchArena: under AddressSanitizer the bytes after each view are poisoned" *
          doctest::skip(!util::kAsan)) {
  runtime::ScratchArena a;
  a.reset();
  (void)a.take(DType::F32, Shape{10});
  (void)a.take(DType::F32, Shape{3});
  a.reset();
  {
    Tensor v = a.take(DType::F32, Shape{10});
    Tensor w = a.take(DType::F32, Shape{3});
    const char* p = static_cast<const char*>(v.raw());
    CHECK(a.overflows() == 0);
    CHECK_FALSE(util::asan_poisoned(p));
    CHECK_FALSE(util::asan_poisoned(p + 39)); // v's last byte
    CHECK(util::asan_poisoned(p + 40));       // the gap to 64 bytes
    CHECK(util::asan_poisoned(p + 100));      // the redzone
    CHECK(static_cast<const char*>(w.raw()) == p + 128);
    CHECK_FALSE(util::asan_poisoned(p + 128));
    CHECK(util::asan_poisoned(p + 128 + 12)); // past w's 3 floats
  }
  a.reset(); // nothing held: the same buffer, addressable again until the next views
  CHECK(a.buffers() == 1);
  Tensor big = a.take(DType::F32, Shape{30});
  const char* p = static_cast<const char*>(big.raw());
  CHECK_FALSE(util::asan_poisoned(p + 100)); // inside the view now
  CHECK(util::asan_poisoned(p + 120));
}

} // namespace tests_runtime_graph_runner_test
