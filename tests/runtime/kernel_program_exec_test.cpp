// GraphRunner as the executor of a template's KernelProgram: a gate cell run on reference
// kernels and on its compiled program (the epilogue's panel kernel with its GEMM core, the
// backward chain feeding dY·W^T, the bias gradient's row sum) gives the same results and
// gradients, the compiled steps are the ones launched, and an argument the caller leaves
// ungathered (lazy_arg) is gathered by the panel core. The embedding lookup's op template
// (take from a parameter by per-row ids) gathers its rows straight into the caller's block,
// and its gradient is the seed rows with their ids, never a dense table.
#include "jit/jit.h"
#include "jit/kernel_cache.h"
#include "runtime/graph_runner.h"
#include "src/types/check.h"
#include "src/util/check.h"

#include <doctest/doctest.h>

#include <random>

namespace tests_runtime_kernel_program_exec_test {

using namespace pejit;

namespace {

const char* kSrc = R"(param W : f32[8, 12] = xavier
param b : f32[12] = normal(0.0, 0.5)

fn cell(hl: f32[4], hr: f32[4], c: f32[4]) -> (f32[4], f32[4]) {
  let (i, f, u) = split3(concat(hl, hr) @ W + b);
  let c2 = sigmoid(i) * tanh(u) + sigmoid(f) * c;
  (sigmoid(c2) * tanh(c2), c2)
}
)";

const char* kLookupSrc = R"(param W : f32[8, 12] = xavier
param E : f32[10, 4] = normal(0.0, 1.0)
)";

struct Run {
  std::vector<Tensor> results, arg_grads;
  std::vector<interp::ParamGrad> grads;
  runtime::GraphRunStats stats;
};

constexpr int64_t kRows = 7;

Tensor random_rows(std::mt19937& rng) {
  Tensor t = Tensor::empty(DType::F32, Shape{kRows, 4});
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = u(rng);
  return t;
}

// Forward and backward of `r` on `args`; with `lazy`, argument 0's block is left unfilled and
// its rows are passed by address.
Run run(const runtime::GraphRunner& r, const std::vector<Tensor>& args, const interp::Params& p,
        bool lazy) {
  Run out;
  runtime::GraphRunner::State st;
  std::vector<Tensor> xs = args;
  if (lazy) {
    xs[0] = Tensor::zeros(DType::F32, Shape{kRows, 4});
    st.arg_rows.resize(args.size());
    for (int64_t i = 0; i < kRows; ++i)
      st.arg_rows[0].push_back(args[0].f32() + i * 4);
  }
  for (int k = 0; k < 2; ++k)
    out.results.push_back(Tensor::empty(DType::F32, Shape{kRows, 4}));
  r.forward(kRows, xs, p, out.results, st, out.stats);
  std::vector<Tensor> seeds(2, Tensor::full(Shape{kRows, 4}, 1.0f));
  for (int k = 0; k < 3; ++k)
    out.arg_grads.push_back(Tensor::empty(DType::F32, Shape{kRows, 4}));
  out.grads.resize(p.values.size());
  r.backward(seeds, p, out.arg_grads, out.grads, st, out.stats);
  return out;
}

void check_close(const Tensor& a, const Tensor& b) {
  REQUIRE(a.numel() == b.numel());
  for (int64_t i = 0; i < a.numel(); ++i)
    CHECK(a.f32()[i] == doctest::Approx(b.f32()[i]).epsilon(1e-5));
}

} // namespace

TEST_SUITE("runtime") {
  TEST_CASE("graph runner: the compiled kernel program gives the reference kernels' results") {
    auto m = std::make_shared<ir::Module>();
    Diagnostics d;
    REQUIRE_MESSAGE(types::add_source(*m, kSrc, "cell.pe", d).ok, d.render());
    interp::DimBindings dims = interp::bind_dims(*m, {});
    interp::Params params = interp::init_params(*m, dims, 3);
    specializer::Template t;
    t.fn = m->fn_index("cell");
    t.name = "cell";
    t.args = {{DType::F32, {4}}, {DType::F32, {4}}, {DType::F32, {4}}};
    t.results = {{DType::F32, {4}}, {DType::F32, {4}}};
    runtime::GraphRunner ref(specializer::compile_template(*m, dims, t));
    REQUIRE(ref.supported());
    CHECK(!ref.compiled());
    CHECK(ref.lazy_arg(0));

    jit::Jit jit;
    jit::KernelCache cache(jit, 64);
    runtime::GraphRunner compiled(ref);
    compiled.compile(cache);
    REQUIRE(compiled.compiled());
    REQUIRE(compiled.jit_runs().size() == 2);
    CHECK(!compiled.jit_runs()[0].schedule.empty());

    std::mt19937 rng(9);
    std::vector<Tensor> args = {random_rows(rng), random_rows(rng), random_rows(rng)};
    Run a = run(ref, args, params, false);
    CHECK(a.stats.jit_launches == 0);
    CHECK(a.stats.jit_reductions == 0);
    for (bool lazy : {false, true}) {
      CAPTURE(lazy);
      Run b = run(compiled, args, params, lazy);
      // The forward epilogue and the backward chain, each with its GEMM core.
      CHECK(b.stats.jit_launches == 2);
      CHECK(b.stats.panel_launches == 2);
      CHECK(b.stats.jit_reductions >= 1); // b's gradient: a sum over the rows
      CHECK(b.stats.ref_nodes < a.stats.ref_nodes);
      for (size_t k = 0; k < 2; ++k)
        check_close(b.results[k], a.results[k]);
      for (size_t k = 0; k < 3; ++k)
        check_close(b.arg_grads[k], a.arg_grads[k]);
      for (size_t p = 0; p < params.values.size(); ++p) {
        CAPTURE(p);
        REQUIRE(b.grads[p].dense.defined());
        check_close(b.grads[p].dense, a.grads[p].dense);
      }
    }
  }

  TEST_CASE("graph runner: the lookup gathers into the caller's block, its gradient row-sparse") {
    auto m = std::make_shared<ir::Module>();
    Diagnostics d;
    REQUIRE_MESSAGE(types::add_source(*m, kLookupSrc, "lookup.pe", d).ok, d.render());
    interp::DimBindings dims = interp::bind_dims(*m, {});
    interp::Params params = interp::init_params(*m, dims, 3);
    const int e = m->param_index("E");
    specializer::Template t;
    t.kind = specializer::Template::Kind::Op;
    t.op = ops::OpId::Take;
    t.name = "op.take";
    t.args = {{DType::F32, {10, 4}}, {DType::I32, {}}};
    t.param_args = {e, -1};
    t.results = {{DType::F32, {4}}};
    runtime::GraphRunner r(specializer::compile_template(*m, dims, t));
    REQUIRE_MESSAGE(r.supported(), r.why());

    const std::vector<int32_t> ids = {3, 0, 3, 9, 1, 3, 7};
    Tensor idx = Tensor::empty(DType::I32, Shape{kRows});
    std::copy(ids.begin(), ids.end(), idx.i32());
    std::vector<Tensor> args = {Tensor(), idx}; // the table is no argument
    std::vector<Tensor> results = {Tensor::empty(DType::F32, Shape{kRows, 4})};
    runtime::GraphRunner::State st;
    runtime::GraphRunStats stats;
    r.forward(kRows, args, params, results, st, stats);
    CHECK(stats.row_gathers == 1);
    CHECK(stats.ref_nodes == 0); // a gather, no reference kernel
    CHECK(st.vals[static_cast<size_t>(r.graph().fwd_outputs[0])].raw() == results[0].raw());
    const Tensor& table = params.values[static_cast<size_t>(e)];
    for (int64_t i = 0; i < kRows; ++i)
      for (int64_t j = 0; j < 4; ++j)
        CHECK(results[0].f32()[i * 4 + j] == table.f32()[ids[static_cast<size_t>(i)] * 4 + j]);

    std::mt19937 rng(5);
    std::vector<Tensor> seeds = {random_rows(rng)};
    std::vector<Tensor> arg_grads(2);
    std::vector<interp::ParamGrad> grads(params.values.size());
    r.backward(seeds, params, arg_grads, grads, st, stats);
    for (size_t p = 0; p < grads.size(); ++p) {
      CAPTURE(p);
      CHECK(!grads[p].dense.defined()); // never a dense [10, 4] gradient
      CHECK(grads[p].sparse.size() == (p == static_cast<size_t>(e) ? 1u : 0u));
    }
    const kernels::RowSparse& g = grads[static_cast<size_t>(e)].sparse.at(0);
    CHECK(g.num_rows == 10);
    REQUIRE(g.indices.numel() == kRows);
    for (int64_t i = 0; i < kRows; ++i) {
      CHECK(g.indices.i32()[i] == ids[static_cast<size_t>(i)]);
      for (int64_t j = 0; j < 4; ++j)
        CHECK(g.rows.f32()[i * 4 + j] == seeds[0].f32()[i * 4 + j]);
    }

    // An id outside the table is an error, as on the generic path.
    idx.i32()[2] = 10;
    runtime::GraphRunner::State bad;
    CHECK_THROWS_AS(r.forward(kRows, args, params, results, bad, stats), pejit::Error);
  }
}

} // namespace tests_runtime_kernel_program_exec_test
