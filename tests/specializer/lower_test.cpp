// The lowering pass (specializer/passes/lower.h) on small templates: a gate cell whose GEMM
// becomes the core of its epilogue's panel kernel (the concat gathered per panel, the bias
// sum and the splits read in place, the cell's other argument filled per panel), the
// backward chain feeding dY·W^T, the deferred weight gradient and the bias gradient's row
// sum; a GRU cell's two input-gradient GEMMs each fed by its chain, a RecNN's by its lone
// tanh gradient; a child-sum forget gate's two gradients in one run; a ReLU gradient's run
// with the next dY·W^T as its core; the loss on reduction kernels; reference steps only
// without kernels; an unsupported template and why.
#include "specializer/passes/lower.h"

#include "specializer/template_graph.h"
#include "src/types/check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

namespace tests_specializer_lower_test {

using namespace pejit;
using namespace pejit::specializer;
using graph::NodeId;

namespace {

const char* kSrc = R"(param W : f32[8, 12] = xavier
param b : f32[12] = zeros
param V : f32[4, 3] = xavier
param E : f32[10, 4] = xavier

fn cell(hl: f32[4], hr: f32[4], c: f32[4]) -> (f32[4], f32[4]) {
  let (i, f, u) = split3(concat(hl, hr) @ W + b);
  let c2 = sigmoid(i) * tanh(u) + sigmoid(f) * c;
  (sigmoid(c2) * tanh(c2), c2)
}

fn loss(h: f32[4], y: i32[]) -> f32[] { cross_entropy(h @ V, y) }

fn pick(t: f32[3, 4], i: i32[]) -> f32[4] { take(t, i) }

fn embed(i: i32[]) -> f32[4] { tanh(take(E, i)) }

param Uzr : f32[8, 12] = xavier
param Uh : f32[8, 4] = xavier

fn gru(hl: f32[4], hr: f32[4]) -> f32[4] {
  let (z, rl, rr) = split3(concat(hl, hr) @ Uzr);
  let cand = tanh(concat(sigmoid(rl) * hl, sigmoid(rr) * hr) @ Uh);
  let u = sigmoid(z);
  (1.0 - u) * (hl + hr) + u * cand
}

fn rec(c1: f32[4], c2: f32[4]) -> f32[4] { tanh(concat(c1, c2) @ Uh) }

param Uf : f32[4, 4] = xavier

fn forget(h: f32[4], c: f32[4]) -> f32[4] { sigmoid(h @ Uf) * c }

fn mlp(h: f32[4]) -> f32[3] { relu(h @ Uf) @ V }
)";

struct Fixture {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  Fixture() {
    Diagnostics d;
    auto r = types::add_source(*m, kSrc, "lower.pe", d);
    REQUIRE_MESSAGE(r.ok, d.render());
    dims = interp::bind_dims(*m, {});
  }
  TemplateGraph compile(const std::string& fn, std::vector<TensorSig> args,
                        std::vector<TensorSig> results, LowerOptions lower = {}) const {
    Template t;
    t.fn = m->fn_index(fn);
    t.name = fn;
    t.args = std::move(args);
    t.results = std::move(results);
    TemplateOptions opt;
    opt.lower = lower;
    return compile_template(*m, dims, t, opt);
  }
};

const TensorSig kVec4{DType::F32, {4}};

template <class T> std::vector<const T*> steps_of(const std::vector<KernelSteps>& ks) {
  std::vector<const T*> out;
  for (const auto& k : ks)
    for (const auto& s : k.steps)
      if (const auto* t = std::get_if<T>(&s))
        out.push_back(t);
  return out;
}

bool is_op(const graph::Graph& g, NodeId id, ops::OpId op) {
  return g.node(id).kind == graph::Kind::Op && g.node(id).op() == op;
}

/// Checks that the backward has one elementwise run, of `count` nodes, and `gemms` dY·W^T
/// steps, the last of them that run's core (computed per panel after its rows); returns the run.
const ElementwiseRun* backward_core_run(const KernelProgram& p, size_t count, size_t gemms) {
  auto bruns = steps_of<ElementwiseRun>(p.bwd);
  REQUIRE(bruns.size() == 1);
  CHECK(bruns[0]->count == count);
  CHECK(!bruns[0]->spec.core_first);
  auto bgemms = steps_of<RowGemm>(p.bwd);
  REQUIRE(bgemms.size() == gemms);
  CHECK(bgemms.back()->transposed);
  CHECK(bgemms.back()->fused_into_run == static_cast<int64_t>(bruns[0]->index));
  for (size_t i = 0; i + 1 < bgemms.size(); ++i)
    CHECK(bgemms[i]->fused_into_run < 0);
  return bruns[0];
}

/// The nodes that a program's steps run on reference kernels outside its runs (a run's own
/// reference steps are for an executor without its kernel).
std::vector<NodeId> reference_steps(const std::vector<KernelSteps>& ks) {
  std::vector<NodeId> out;
  for (const auto& k : ks)
    for (size_t i = 0; i < k.steps.size(); ++i) {
      if (const auto* r = std::get_if<ElementwiseRun>(&k.steps[i]))
        i += r->count;
      else if (const auto* n = std::get_if<ReferenceNode>(&k.steps[i]))
        out.push_back(n->node);
    }
  return out;
}

} // namespace

TEST_SUITE("specializer") {
  TEST_CASE("lower: a gate cell's GEMM is the core of its epilogue's panel kernel") {
    Fixture f;
    TemplateGraph tg = f.compile("cell", {kVec4, kVec4, kVec4}, {kVec4, kVec4});
    const KernelProgram& p = tg.program;
    REQUIRE(p.lowered);
    REQUIRE_MESSAGE(p.supported(), p.why);
    CHECK(p.kernels);
    const graph::Graph& g = tg.g;
    // Row classes: the arguments are per row, the weight shared, its gradient summed.
    for (NodeId a : tg.args)
      CHECK(p.cls(a) == RowClass::Rows);
    CHECK(p.cls(tg.params[0]) == RowClass::Shared);

    // Forward: one run with the x·W core, x = concat(hl, hr) gathered per panel.
    auto runs = steps_of<ElementwiseRun>(p.fwd);
    REQUIRE(runs.size() == 1);
    const ElementwiseRun& r = *runs[0];
    REQUIRE(r.core != graph::kNoNode);
    CHECK(is_op(g, r.core, ops::OpId::MatMul));
    CHECK(r.spec.core_first);
    CHECK(r.spec.panel_rows == 48);
    CHECK(r.spec.gemm_n == 12);
    CHECK(r.spec.gemm_k == 8);
    REQUIRE(r.gather != graph::kNoNode);
    CHECK(is_op(g, r.gather, ops::OpId::Concat));
    CHECK(r.spec.gather_widths == std::vector<int64_t>{4, 4});
    // c is read by the chain only: filled per panel; every argument may stay ungathered.
    CHECK(r.fills == std::vector<NodeId>{tg.args[2]});
    CHECK(p.lazy_args == std::vector<bool>{true, true, true});
    auto gemms = steps_of<RowGemm>(p.fwd);
    REQUIRE(gemms.size() == 1);
    CHECK(gemms[0]->node == r.core);
    CHECK(gemms[0]->fused_into_run == static_cast<int64_t>(r.index));
    auto gathers = steps_of<GatherConcat>(p.fwd);
    REQUIRE(gathers.size() == 1);
    CHECK(gathers[0]->node == r.gather);
    // The bias sum and the three splits are read in place, never computed.
    auto views = steps_of<InPlaceView>(p.fwd);
    CHECK(views.size() == 4);
    CHECK(std::count_if(views.begin(), views.end(), [&](const InPlaceView* v) {
            return is_op(g, v->node, ops::OpId::Split);
          }) == 3);
    // The run's step is followed by its nodes' steps, for an executor without its kernel.
    for (const auto& k : p.fwd)
      for (size_t i = 0; i < k.steps.size(); ++i)
        if (std::holds_alternative<ElementwiseRun>(k.steps[i])) {
          REQUIRE(i + r.count < k.steps.size());
          for (size_t j = 1; j <= r.count; ++j)
            CHECK(std::holds_alternative<ReferenceNode>(k.steps[i + j]));
        }

    // Backward: the gate-gradient chain writes dY, which its core multiplies by W^T.
    auto bruns = steps_of<ElementwiseRun>(p.bwd);
    REQUIRE(!bruns.empty());
    const ElementwiseRun* core_run = nullptr;
    for (const auto* b : bruns)
      if (b->core != graph::kNoNode)
        core_run = b;
    REQUIRE(core_run != nullptr);
    CHECK(!core_run->spec.core_first);
    CHECK(g.node(core_run->core).grad_op() == ops::GradOp::MatMulGradA);
    auto bgemms = steps_of<RowGemm>(p.bwd);
    REQUIRE(bgemms.size() == 1);
    CHECK(bgemms[0]->transposed);
    CHECK(bgemms[0]->fused_into_run == static_cast<int64_t>(core_run->index));

    // W's gradient is deferred to one TN GEMM over all groups' rows; b's is a row sum.
    auto wg = steps_of<DeferredWeightGrad>(p.bwd);
    REQUIRE(wg.size() == 1);
    REQUIRE(wg[0]->index == 0);
    CHECK(p.weight_grads[0].spec.layout == jit::GemmLayout::TN);
    CHECK(p.weight_grads[0].spec.m == 8);
    CHECK(p.weight_grads[0].spec.n == 12);
    CHECK(p.cls(wg[0]->node) == RowClass::Summed);
    REQUIRE(p.param_grads.size() == 2);
    CHECK(p.param_grads[0].how == ParamGradStep::How::Deferred);
    CHECK(p.param_grads[1].how == ParamGradStep::How::SumRows);
    REQUIRE(p.param_grads[1].reduction >= 0);
    CHECK(p.reductions[static_cast<size_t>(p.param_grads[1].reduction)].param_sum);

    std::string text = print_kernel_program(tg, p);
    CHECK(text.find("core of run 0") != std::string::npos);
    CHECK(text.find("gather %") != std::string::npos);
    CHECK(text.find("deferred weight grad") != std::string::npos);
    CHECK(text.find("arguments a panel core gathers (the caller may pass their rows): 0 1 2") !=
          std::string::npos);
  }

  TEST_CASE("lower: two GEMMs in a row (a GRU cell): each dY·W^T is fed by the chain before "
            "it, its product's slices are read in place, nothing runs on reference kernels") {
    Fixture f;
    TemplateGraph tg = f.compile("gru", {kVec4, kVec4}, {kVec4});
    const KernelProgram& p = tg.program;
    REQUIRE_MESSAGE(p.supported(), p.why);
    const graph::Graph& g = tg.g;
    // Both input gradients' GEMMs (dY·Uh^T, then dY·Uzr^T) are the cores of the runs that
    // make their dY: the candidate's gate gradient, and the reset and update gates' (which
    // run after the first GEMM, next to the nodes that read its product, not before it).
    auto bgemms = steps_of<RowGemm>(p.bwd);
    REQUIRE(bgemms.size() == 2);
    for (const RowGemm* m : bgemms) {
      CHECK(m->transposed);
      CHECK(m->fused_into_run >= 0);
    }
    // The product's columns per child (slices) are views; no node outside the runs is
    // computed by a reference kernel once every run has its kernel.
    auto views = steps_of<InPlaceView>(p.bwd);
    CHECK(std::count_if(views.begin(), views.end(), [&](const InPlaceView* v) {
            return is_op(g, v->node, ops::OpId::Slice);
          }) == 4);
    for (NodeId n : reference_steps(p.bwd))
      CHECK_MESSAGE(is_op(g, n, ops::OpId::Concat), graph::print_node(g, n));
  }

  TEST_CASE("lower: a lone gradient node that is a dY·W^T's whole dY is its panel run") {
    Fixture f;
    TemplateGraph tg = f.compile("rec", {kVec4, kVec4}, {kVec4});
    const KernelProgram& p = tg.program;
    REQUIRE_MESSAGE(p.supported(), p.why);
    backward_core_run(p, 1, 1);
  }

  TEST_CASE("lower: a gradient that reads only the seed and forward values (the child-sum "
            "forget gate's dc) runs in the gate gradient's run, whose dY·W^T is its core") {
    Fixture f;
    TemplateGraph tg = f.compile("forget", {kVec4, kVec4}, {kVec4});
    const KernelProgram& p = tg.program;
    REQUIRE_MESSAGE(p.supported(), p.why);
    const graph::Graph& g = tg.g;
    // dc = dy * f reads the seed and the forward's f, as the gate gradient does; alone it was
    // a kernel of one mul on a reference kernel, and it stood between the gate gradient's run
    // and dY·Uf^T, so that the GEMM was no panel core.
    backward_core_run(p, 3, 1);
    for (NodeId n : reference_steps(p.bwd))
      FAIL_CHECK("on a reference kernel: " << graph::print_node(g, n));
  }

  TEST_CASE("lower: a ReLU gradient is a run, and the dY·W^T after it its core, past the "
            "deferred weight gradient between them (ListOps' classifier)") {
    Fixture f;
    TemplateGraph tg = f.compile("mlp", {kVec4}, {{DType::F32, {3}}});
    const KernelProgram& p = tg.program;
    REQUIRE_MESSAGE(p.supported(), p.why);
    const graph::Graph& g = tg.g;
    // Backward: dY·V^T (its dY the seed: no run makes it), then relu_bwd, V's deferred weight
    // gradient, and dY·Uf^T, whose dY relu_bwd makes.
    const ElementwiseRun* run = backward_core_run(p, 1, 2);
    CHECK(run->spec.ops.at(0).op == jit::ElementwiseOp::ReluBwd);
    CHECK(steps_of<DeferredWeightGrad>(p.bwd).size() == 2);
    for (NodeId n : reference_steps(p.bwd))
      FAIL_CHECK("on a reference kernel: " << graph::print_node(g, n));
  }

  TEST_CASE("lower: the loss and its backward run on reduction kernels") {
    Fixture f;
    TemplateGraph tg = f.compile("loss", {kVec4, {DType::I32, {}}}, {{DType::F32, {}}});
    const KernelProgram& p = tg.program;
    REQUIRE_MESSAGE(p.supported(), p.why);
    auto fwd = steps_of<Loss>(p.fwd);
    auto bwd = steps_of<Loss>(p.bwd);
    REQUIRE(fwd.size() == 1);
    REQUIRE(bwd.size() == 1);
    CHECK(p.reductions[fwd[0]->index].spec.kind == jit::ReduceKind::CrossEntropy);
    CHECK(p.reductions[bwd[0]->index].spec.kind == jit::ReduceKind::CrossEntropyBwd);
    CHECK(p.reductions[fwd[0]->index].spec.width == 3);
    // The GEMM before it has no elementwise epilogue: no panel kernel, the library GEMM.
    auto gemms = steps_of<RowGemm>(p.fwd);
    REQUIRE(gemms.size() == 1);
    CHECK(gemms[0]->fused_into_run == -1);
  }

  TEST_CASE("lower: without kernels, reference steps only (the classes and deferrals stay)") {
    Fixture f;
    TemplateGraph tg =
        f.compile("cell", {kVec4, kVec4, kVec4}, {kVec4, kVec4}, LowerOptions{.kernels = false});
    const KernelProgram& p = tg.program;
    REQUIRE(p.supported());
    CHECK(!p.kernels);
    CHECK(steps_of<ElementwiseRun>(p.fwd).empty());
    CHECK(steps_of<InPlaceView>(p.fwd).empty());
    CHECK(steps_of<GatherConcat>(p.fwd).empty());
    CHECK(p.reductions.empty());
    CHECK(p.weight_grads.empty());
    CHECK(p.lazy_args.empty());
    CHECK(p.run_count == 0);
    auto wg = steps_of<DeferredWeightGrad>(p.bwd);
    REQUIRE(wg.size() == 1);
    CHECK(wg[0]->index == -1);
  }

  TEST_CASE("lower: the embedding gradient stays row-sparse, a per-row table is unsupported") {
    Fixture f;
    TemplateGraph e = f.compile("embed", {{DType::I32, {}}}, {kVec4});
    REQUIRE_MESSAGE(e.program.supported(), e.program.why);
    auto sparse = steps_of<SparseEmbeddingGrad>(e.program.bwd);
    REQUIRE(sparse.size() == 1);
    CHECK(!sparse[0]->dense);
    REQUIRE(e.program.param_grads.size() == 1);
    CHECK(e.program.param_grads[0].how == ParamGradStep::How::Sparse);

    TemplateGraph tg = f.compile("pick", {{DType::F32, {3, 4}}, {DType::I32, {}}}, {kVec4});
    CHECK(!tg.program.supported());
    CHECK(tg.program.why.find("take from a per-row table") != std::string::npos);
    CHECK(tg.program.fwd.empty());
    CHECK(print_kernel_program(tg, tg.program).find("not supported") != std::string::npos);
  }

  TEST_CASE("lower: a lookup op template on a parameter is a row gather into its result, its "
            "gradient row-sparse") {
    Fixture f;
    // take(E, w) outside any function: its table is the parameter E (Template::param_args).
    Template t;
    t.kind = Template::Kind::Op;
    t.op = ops::OpId::Take;
    t.name = "op.take";
    t.args = {{DType::F32, {10, 4}}, {DType::I32, {}}};
    t.param_args = {f.m->param_index("E"), -1};
    t.results = {kVec4};
    for (bool kernels : {true, false}) {
      CAPTURE(kernels);
      TemplateOptions opt;
      opt.lower.kernels = kernels;
      TemplateGraph tg = compile_template(*f.m, f.dims, t, opt);
      REQUIRE_MESSAGE(tg.program.supported(), tg.program.why);
      CHECK(tg.args[0] == graph::kNoNode); // the table is read as the parameter
      CHECK(tg.bwd_arg_grads[0] == graph::kNoNode);
      REQUIRE(tg.param_index.size() == 1);
      CHECK(tg.param_index[0] == f.m->param_index("E"));
      auto gathers = steps_of<RowGather>(tg.program.fwd);
      REQUIRE(gathers.size() == 1);
      CHECK(gathers[0]->node == tg.fwd_outputs[0]);
      CHECK(gathers[0]->result == 0);
      CHECK(steps_of<ReferenceNode>(tg.program.fwd).empty());
      auto sparse = steps_of<SparseEmbeddingGrad>(tg.program.bwd);
      REQUIRE(sparse.size() == 1);
      CHECK(!sparse[0]->dense); // never densified
      REQUIRE(tg.program.param_grads.size() == 1);
      CHECK(tg.program.param_grads[0].how == ParamGradStep::How::Sparse);
      CHECK(print_kernel_program(tg, tg.program).find("row gather %") != std::string::npos);
    }
    // The same op on a table that is not a parameter stays unsupported.
    Template u = t;
    u.param_args.clear();
    CHECK(u.key() != t.key());
    TemplateGraph ug = compile_template(*f.m, f.dims, u);
    CHECK(ug.program.why.find("take from a per-row table") != std::string::npos);
  }

  TEST_CASE("lower runs in the template pipeline: --dump-after lower prints the program") {
    Fixture f;
    std::ostringstream os;
    Template t;
    t.fn = f.m->fn_index("loss");
    t.name = "loss";
    t.args = {kVec4, {DType::I32, {}}};
    t.results = {{DType::F32, {}}};
    TemplateOptions opt;
    opt.dump_after = {"lower"};
    opt.dump = &os;
    compile_template(*f.m, f.dims, t, opt);
    CHECK(std::find(template_pass_names().begin(), template_pass_names().end(), "lower") !=
          template_pass_names().end());
    CHECK(os.str().find("// loss after lower") != std::string::npos);
    CHECK(os.str().find("loss %") != std::string::npos);
    CHECK(os.str().find("cross_entropy_bwd") != std::string::npos);
  }
}

} // namespace tests_specializer_lower_test
