// Plans on reference kernels against the generic path (docs/architecture.md: loss within a relative
// 1e-5, every gradient within 1e-4 * max|ref| + 1e-6), on the examples and on trees of every
// shape; and the structure of the batching schedule (the child-sum sums: segment sums).
#include "jit/kernel_cache.h"
#include "pejit/error.h"
#include "runtime/data/synthetic.h"
#include "runtime/plan_executor.h"
#include "runtime/train/encode.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "tests/support/batches.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

namespace tests_specializer_plan_test {

using namespace pejit;

namespace {

struct Model {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  interp::Params params;
  Model(const std::string& path, interp::DimBindings over, bool source = false) {
    Diagnostics d;
    REQUIRE_MESSAGE(
        (source ? types::add_source(*m, path, "test.pe", d) : types::add_file(*m, path, d)).ok,
        d.render());
    dims = interp::bind_dims(*m, over);
    params = interp::init_params(*m, dims, 9);
  }
};

// The executor configurations every differential check runs: the batching interpreter, the
// template graphs on reference kernels, and the template graphs with JIT-compiled elementwise
// runs (one Jit and kernel cache for the whole test program).
enum class Exec { Interpreter, Graphs, GraphsJit };
const char* exec_name(Exec e) {
  return e == Exec::Interpreter ? "interpreter" : e == Exec::Graphs ? "graphs" : "graphs+jit";
}
jit::KernelCache& shared_kernels() {
  static jit::Jit jit;
  static jit::KernelCache cache(jit, 512);
  return cache;
}
runtime::ExecOptions exec_options(Exec e) {
  runtime::ExecOptions o;
  o.graphs = e != Exec::Interpreter;
  o.kernels = e == Exec::GraphsJit ? &shared_kernels() : nullptr;
  return o;
}

// Generic path vs plan: loss and every gradient, on every executor configuration.
void check_same(Model& md, const interp::Value& batch, specializer::Plan* out_plan = nullptr,
                specializer::TemplateTable* out_tt = nullptr) {
  specializer::TemplateTable local;
  specializer::TemplateTable& tt = out_tt ? *out_tt : local;
  auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
  REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);
  specializer::Plan plan = specializer::make_plan(pe.residual, tt);
  interp::Interpreter in(md.m, md.dims);
  auto ref = in.value_and_grad("loss", {batch}, md.params);
  for (Exec mode : {Exec::Interpreter, Exec::Graphs, Exec::GraphsJit}) {
    CAPTURE(exec_name(mode));
    runtime::PlanExecutor ex(md.m, md.dims, exec_options(mode));
    auto got = ex.value_and_grad(plan, pe.residual, tt, md.params);
    CHECK(test::loss_close(got.loss, ref.loss));
    // The gradients before the executor runs again: a row-sparse one views its arena.
    for (size_t p = 0; p < md.params.values.size(); ++p) {
      CAPTURE(md.params.names[p]);
      const Shape& s = md.params.values[p].shape();
      CHECK(got.grads[p].empty() == ref.grads[p].empty());
      test::check_close(got.grads[p].to_dense(s), ref.grads[p].to_dense(s), md.params.names[p]);
    }
    // The embedding's gradient stays row-sparse on the specialized path too.
    int e = md.params.index("emb");
    if (e >= 0 && !got.grads[static_cast<size_t>(e)].empty())
      CHECK_FALSE(got.grads[static_cast<size_t>(e)].dense.defined());
    auto fwd = ex.run(plan, pe.residual, tt, md.params);
    REQUIRE(fwd.size() == 1);
    CHECK(test::loss_close(fwd[0].item_f32(), ref.loss));
    const auto& st = ex.stats();
    CHECK(st.groups_row_by_row == 0);
    for (const auto& why : st.row_by_row_reasons)
      MESSAGE("row by row: " << why);
    // The examples' templates all have batched graph rules: every template group ran on its
    // graph, and with the JIT some of it on compiled code.
    CHECK(st.graph_fallbacks.empty());
    for (const auto& why : st.graph_fallbacks)
      MESSAGE("graph fallback: " << why);
    if (mode != Exec::Interpreter)
      CHECK(st.groups_on_graphs > 0);
    else
      CHECK(st.groups_on_graphs == 0);
    if (mode == Exec::GraphsJit && md.params.index("U") >= 0)
      CHECK(st.jit_launches > 0);
    // On graphs, each weight's gradient is one GEMM over all its rows (every level's): one
    // per weight matrix that has a gradient.
    if (mode != Exec::Interpreter && md.params.index("U") >= 0) {
      int64_t weights = 0;
      for (size_t p = 0; p < md.params.values.size(); ++p)
        weights +=
            md.params.values[p].rank() == 2 && md.params.names[p] != "emb" && !ref.grads[p].empty();
      CHECK(st.weight_grad_gemms == weights);
    }
    if (mode == Exec::Interpreter)
      CHECK(st.weight_grad_gemms == 0);
    // With the JIT, every one of them runs on its generated TN kernel; never without.
    if (mode == Exec::GraphsJit)
      CHECK(st.jit_weight_grads == st.weight_grad_gemms);
    else
      CHECK(st.jit_weight_grads == 0);
    if (mode == Exec::GraphsJit && md.params.index("U") >= 0)
      CHECK(st.jit_weight_grads > 0);
    if (mode != Exec::GraphsJit)
      CHECK(st.jit_launches == 0);
    // Once compiled, the TreeLSTM's cross-entropy, its backward and its bias gradients' sums
    // over the rows run on row-reduction kernels (2 per node_loss group, forward and
    // backward, plus a sum per bias); never without the JIT.
    if (mode == Exec::GraphsJit && md.params.index("b_out") >= 0)
      CHECK(st.jit_reductions >= 3);
    if (mode != Exec::GraphsJit)
      CHECK(st.jit_reductions == 0);
    // With compiled runs, the TreeLSTM's gate splits are read in place (not computed) and its
    // gate gradients are written into their concat; without, both are computed.
    if (mode == Exec::GraphsJit && md.params.index("U") >= 0)
      CHECK(st.in_place > 0);
    if (mode != Exec::GraphsJit)
      CHECK(st.in_place == 0);
    // With compiled runs, the TreeLSTM's gate epilogues run fused with their x·W, and its
    // gate-gradient chains with their dY·W^T, per row panel.
    if (mode == Exec::GraphsJit && md.params.index("U") >= 0)
      CHECK(st.panel_launches > 0);
    if (mode != Exec::GraphsJit)
      CHECK(st.panel_launches == 0);
  }
  if (out_plan)
    *out_plan = plan;
}

const std::string kTreeLstm = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

// The TreeLSTM and the plan of `n` SST-like trees generated with `seed`.
struct TreeLstmPlan {
  data::Vocab vocab;
  std::vector<data::ParseTree> trees;
  Model md;
  interp::Value batch;
  specializer::TemplateTable tt;
  specializer::PeResult pe;
  specializer::Plan plan;

  TreeLstmPlan(size_t n, uint64_t seed)
      : trees(data::gen_sst(n, seed, data::Shape::Sst, vocab)),
        md(kTreeLstm, {{"V", static_cast<int64_t>(vocab.size())}}),
        batch(test::tree_batch(*md.m, trees)),
        pe(specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt)) {
    REQUIRE(pe.ok);
    plan = specializer::make_plan(pe.residual, tt);
  }
};

} // namespace

TEST_SUITE("specializer") {
  TEST_CASE("plan on reference kernels == generic path: TreeLSTM on every tree shape") {
    for (auto shape : {data::Shape::Sst, data::Shape::Deep, data::Shape::Balanced}) {
      CAPTURE(data::shape_name(shape));
      data::Vocab vocab;
      auto trees = data::gen_sst(25, 13, shape, vocab);
      Model md(kTreeLstm, {{"V", static_cast<int64_t>(vocab.size())}});
      check_same(md, test::tree_batch(*md.m, trees));
    }
    // A batch of single-leaf trees.
    data::Vocab vocab;
    std::vector<data::ParseTree> leaves;
    for (int i = 0; i < 4; ++i) {
      data::ParseTree t;
      t.nodes.push_back({i % 5, vocab.add("w" + std::to_string(i)), {}});
      t.tokens.push_back("w");
      leaves.push_back(t);
    }
    Model md(kTreeLstm, {{"V", static_cast<int64_t>(vocab.size())}});
    check_same(md, test::tree_batch(*md.m, leaves));
  }

  TEST_CASE("a label out of range is the reference kernel's error on every executor, JIT too") {
    data::Vocab vocab;
    auto trees = data::gen_sst(6, 21, data::Shape::Sst, vocab);
    trees[3].nodes[1].label = 7; // C = 5
    Model md(kTreeLstm, {{"V", static_cast<int64_t>(vocab.size())}});
    interp::Value batch = test::tree_batch(*md.m, trees);
    specializer::TemplateTable tt;
    auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
    REQUIRE(pe.ok);
    specializer::Plan plan = specializer::make_plan(pe.residual, tt);
    for (Exec mode : {Exec::Interpreter, Exec::Graphs, Exec::GraphsJit}) {
      CAPTURE(exec_name(mode));
      runtime::PlanExecutor ex(md.m, md.dims, exec_options(mode));
      CHECK_THROWS_WITH_AS(ex.value_and_grad(plan, pe.residual, tt, md.params),
                           doctest::Contains("label 7 at position"), pejit::Error);
      CHECK_THROWS_WITH_AS(ex.run(plan, pe.residual, tt, md.params),
                           doctest::Contains("is outside [0, 5)"), pejit::Error);
      CHECK(ex.stats().jit_reductions == 0);
    }
  }

  TEST_CASE("plan structure for 25 SST-like trees: leaves in one group, a group per level") {
    data::Vocab vocab;
    auto trees = data::gen_sst(25, 21, data::Shape::Sst, vocab);
    Model md(kTreeLstm, {{"V", static_cast<int64_t>(vocab.size())}});
    specializer::Plan plan;
    specializer::TemplateTable tt;
    check_same(md, test::tree_batch(*md.m, trees), &plan, &tt);
    std::map<std::string, int> groups;
    std::map<std::string, std::set<int>> levels;
    size_t depth = 0;
    for (const auto& t : trees)
      depth = std::max(depth, t.depth());
    for (const auto& g : plan.groups) {
      std::string n = g.tmpl == specializer::Instance::kSumN ? "sum" : tt.at(g.tmpl).name;
      groups[n]++;
      CHECK(levels[n].insert(g.level).second); // at most one group per template per level
    }
    CHECK(groups["op.take"] == 1);
    CHECK(groups["leaf"] == 1);
    CHECK(groups["node_loss"] == 1); // the classifier + loss: one launch for the batch
    CHECK(groups["sum"] == 1);
    CHECK(groups["cell"] == static_cast<int>(depth) - 1);
    std::string d = plan.describe(tt);
    CHECK(d.find("launch fwd cell cell.fwd rows=") != std::string::npos);
    CHECK(d.find("launch bwd node_loss node_loss.bwd rows=") != std::string::npos);
  }

  TEST_CASE("plans on reference kernels and on JIT kernels: the same bits") {
    // What lets a seed fix an `auto` run whatever the compile timing: a batch gives the same
    // bits on either tier. The reference kernels are built without FMA contraction, as the
    // JIT's kernels are, and run the generated GEMMs' algorithms (src/kernels/gemm.cpp).
    for (auto shape : {data::Shape::Sst, data::Shape::Deep}) {
      CAPTURE(data::shape_name(shape));
      data::Vocab vocab;
      auto trees = data::gen_sst(25, 17, shape, vocab);
      Model md(kTreeLstm, {{"V", static_cast<int64_t>(vocab.size())}});
      interp::Value batch = test::tree_batch(*md.m, trees);
      specializer::TemplateTable tt;
      auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
      REQUIRE(pe.ok);
      specializer::Plan plan = specializer::make_plan(pe.residual, tt);
      runtime::PlanExecutor ref(md.m, md.dims, exec_options(Exec::Graphs));
      runtime::PlanExecutor jit(md.m, md.dims, exec_options(Exec::GraphsJit));
      auto a = ref.value_and_grad(plan, pe.residual, tt, md.params);
      auto b = jit.value_and_grad(plan, pe.residual, tt, md.params);
      CHECK(jit.stats().jit_launches > 0);
      CHECK(ref.stats().jit_launches == 0);
#ifdef __AVX512F__
      CHECK(a.loss == b.loss);
      for (size_t p = 0; p < md.params.values.size(); ++p) {
        CAPTURE(md.params.names[p]);
        const Shape& s = md.params.values[p].shape();
        Tensor ga = a.grads[p].to_dense(s), gb = b.grads[p].to_dense(s);
        int64_t differ = 0;
        for (int64_t i = 0; i < ga.numel(); ++i)
          differ += ga.f32()[i] == gb.f32()[i] ? 0 : 1;
        CHECK(differ == 0);
      }
#else
      CHECK(std::fabs(a.loss - b.loss) <= 1e-5 * std::fabs(b.loss)); // the GEMMs' orders differ
#endif
    }
  }

  TEST_CASE("GEMM + epilogue panels: the same loss and gradients as the GEMM whole, then the run") {
    TreeLstmPlan tp(25, 31);
    Model& md = tp.md;
    const specializer::PeResult& pe = tp.pe;
    const specializer::TemplateTable& tt = tp.tt;
    const specializer::Plan& plan = tp.plan;
    // 0: panels, their GEMM rows on the kernels' generated cores; 1: panels, the GEMM rows on
    // the C++ kernels; 2: no panels (the GEMM whole, then the run).
    interp::Interpreter::Gradients got[3];
    int64_t ref_nodes[3] = {0, 0, 0}, direct_gemms[3] = {0, 0, 0};
    for (int mode : {0, 1, 2}) {
      CAPTURE(mode);
      const bool panels = mode < 2;
      runtime::ExecOptions o = exec_options(Exec::GraphsJit);
      o.panels = panels;
      o.jit_gemm = mode == 0;
      runtime::PlanExecutor ex(md.m, md.dims, o);
      got[mode] = ex.value_and_grad(plan, pe.residual, tt, md.params);
      const auto& st = ex.stats();
      ref_nodes[mode] = st.ref_nodes;
      direct_gemms[mode] = st.direct_gemms;
      // Groups: op.take, leaf, node_loss, sum, and a cell group per level above the leaves.
      const int64_t cells = static_cast<int64_t>(plan.groups.size()) - 4;
      // A cell's h_l, h_r (into x) and c_l, c_r (for its chain), the leaves' embedding rows
      // and the classifier's h are gathered by their panel cores, not by the executor.
      CHECK(st.lazy_gathers == (panels ? 4 * cells + 2 : 0));
      // leaf and cell: forward x·W + gates, backward gate gradients + dY·W^T, per level; the
      // classifier: h·W + b (its backward has no elementwise chain before its dY·W^T).
      CHECK(st.panel_launches == (panels ? 2 * (cells + 1) + 1 : 0));
      CHECK(st.jit_gemm_cores == (mode == 0 ? st.panel_launches : 0));
    }
    // With panels, no x·W (leaf, cells, classifier), dY·W^T (leaf, cells) or cell input
    // concat(h_l, h_r) runs on its own: the cores compute them. Without, the leaf's dY·W^T,
    // its group's gradient of x, is written into that gradient's block (a direct GEMM, as the
    // classifier's is in every mode); the cells' are sliced into h_l's and h_r's.
    const int64_t cells = static_cast<int64_t>(plan.groups.size()) - 4;
    CHECK(direct_gemms[0] == 1);
    CHECK(direct_gemms[1] == 1);
    CHECK(direct_gemms[2] == 2);
    CHECK(ref_nodes[2] + direct_gemms[2] - (ref_nodes[0] + direct_gemms[0]) ==
          (cells + 2) + (cells + 1) + cells);
    CHECK(ref_nodes[1] == ref_nodes[0]);
    // Row results do not depend on how the rows are split into GEMM calls, and where
    // src/kernels/gemm.cpp runs its AVX-512 kernels the generated cores sum as they do (the
    // classifier's narrow logits as the same dot products: tests/jit/gemm_panel_test.cpp), so
    // the three configurations give the same bits there; elsewhere up to rounding.
    const double tol = 1e-6;
    for (int mode : {0, 1}) {
      CAPTURE(mode);
#ifdef __AVX512F__
      CHECK(got[mode].loss == got[2].loss);
#endif
      CHECK(std::fabs(got[mode].loss - got[2].loss) <= tol * std::fabs(got[2].loss));
      for (size_t p = 0; p < md.params.values.size(); ++p) {
        CAPTURE(md.params.names[p]);
        const Shape& s = md.params.values[p].shape();
        Tensor a = got[mode].grads[p].to_dense(s), b = got[2].grads[p].to_dense(s);
        for (int64_t i = 0; i < a.numel(); ++i) {
#ifdef __AVX512F__
          REQUIRE(a.f32()[i] == b.f32()[i]);
#endif
          REQUIRE(std::fabs(a.f32()[i] - b.f32()[i]) <= tol * (1 + std::fabs(b.f32()[i])));
        }
      }
    }
  }

  TEST_CASE("weight gradients on generated TN kernels: the reference kernel's bits") {
    TreeLstmPlan tp(25, 37);
    Model& md = tp.md;
    const specializer::PeResult& pe = tp.pe;
    const specializer::TemplateTable& tt = tp.tt;
    const specializer::Plan& plan = tp.plan;
    interp::Interpreter::Gradients got[2];
    for (bool jit_dw : {false, true}) {
      CAPTURE(jit_dw);
      runtime::ExecOptions o = exec_options(Exec::GraphsJit);
      o.jit_weight_grads = jit_dw;
      runtime::PlanExecutor ex(md.m, md.dims, o);
      got[jit_dw] = ex.value_and_grad(plan, pe.residual, tt, md.params);
      // W_leaf, U, W_out: one GEMM each over all their rows (U's over every cell level).
      CHECK(ex.stats().weight_grad_gemms == 3);
      CHECK(ex.stats().jit_weight_grads == (jit_dw ? 3 : 0));
    }
    CHECK(got[0].loss == got[1].loss);
    // Each element of dW is one fma chain over the rows in order in both kernels, so the bits
    // agree where kernels::sgemm_tn_stretches is the AVX-512 kernel; elsewhere (libxsmm) up to
    // rounding.
#ifdef __AVX512F__
    const bool bits = jit::Jit().vector_lanes() == 16;
#else
    const bool bits = false;
#endif
    for (size_t p = 0; p < md.params.values.size(); ++p) {
      CAPTURE(md.params.names[p]);
      const Shape& s = md.params.values[p].shape();
      Tensor a = got[0].grads[p].to_dense(s), b = got[1].grads[p].to_dense(s);
      REQUIRE(a.numel() == b.numel());
      if (bits) {
        CHECK(test::same_bits(a, b));
        continue;
      }
      for (int64_t i = 0; i < a.numel(); ++i)
        REQUIRE(std::fabs(a.f32()[i] - b.f32()[i]) <= 1e-5 * (1 + std::fabs(b.f32()[i])));
    }
  }

  TEST_CASE("softmax, log_softmax, sum and mean of per-row values run on JIT kernels, == generic") {
    // A template whose graph reduces along each row: forward softmax, log_softmax, sum and
    // mean, backward the two softmax gradients (the sums' gradients are broadcasts).
    Model md(R"(
      param W : f32[4, 6] = xavier
      param V : f32[6, 19] = xavier
      fn f(x: f32[4]) -> f32[] {
        let p = softmax(x @ W);
        let q = log_softmax(p @ V);
        let r = softmax(reshape(p, 2, 3) * 2.0);
        sum(q) * 0.1 + mean(p * p) + mean(q) * 0.01 + sum(r * r)
      }
      entry loss(xs: List[f32[4]]) -> f32[] { sum_list(map(fn x => f(x), xs)) }
    )",
             {}, true);
    interp::Values xs;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (int i = 0; i < 23; ++i) {
      Tensor t = Tensor::empty(DType::F32, Shape{4});
      for (int j = 0; j < 4; ++j)
        t.f32()[j] = u(rng);
      xs.push_back(interp::Value::tensor(t));
    }
    interp::Value batch = interp::Value::list(xs);
    check_same(md, batch); // loss and gradients on every executor, the JIT's included
    specializer::TemplateTable tt;
    auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
    REQUIRE(pe.ok);
    specializer::Plan plan = specializer::make_plan(pe.residual, tt);
    runtime::PlanExecutor ex(md.m, md.dims, exec_options(Exec::GraphsJit));
    ex.value_and_grad(plan, pe.residual, tt, md.params);
    // 2 softmax (one of a per-row [2, 3] matrix), log_softmax, 2 sums, 2 means forward; the
    // three softmax gradients backward.
    CHECK(ex.stats().jit_reductions == 10);
  }

  TEST_CASE("plan == generic path: ListOps and the RNN language model") {
    {
      data::Vocab vocab;
      auto trees = data::gen_listops(12, 5, vocab);
      Model md(PEJIT_SOURCE_DIR "/examples/listops/listops.pe",
               {{"V", static_cast<int64_t>(vocab.size())}});
      check_same(md, test::tree_batch(*md.m, trees, "Example"));
    }
    {
      Model md(PEJIT_SOURCE_DIR "/examples/rnn/rnn.pe", {{"V", 40}});
      interp::Values sents;
      size_t longest = 0;
      for (int s = 0; s < 25; ++s) {
        interp::Values words;
        int len = 1 + (s * 7) % 9;
        longest = std::max(longest, static_cast<size_t>(len));
        for (int w = 0; w < len; ++w)
          words.push_back(interp::Value::tensor(Tensor::scalar_i32((s * 5 + w * 3) % 40)));
        sents.push_back(interp::Value::list(words));
      }
      specializer::Plan plan;
      specializer::TemplateTable tt;
      check_same(md, interp::Value::list(sents), &plan, &tt);

      // One launch per template per time step.
      std::map<std::string, std::set<int>> levels;
      std::map<std::string, int> groups;
      for (const auto& g : plan.groups) {
        std::string n = g.tmpl == specializer::Instance::kSumN ? "sum" : tt.at(g.tmpl).name;
        groups[n]++;
        levels[n].insert(g.level);
      }
      CHECK(groups["step"] <= static_cast<int>(longest));
      // Each word's loss is its own template (word_loss), per time step like step, not one
      // group gathering every step's logits.
      CHECK(groups["word_loss"] <= static_cast<int>(longest));
      CHECK(groups["op.take"] == 1);
      CHECK(groups.count("op.cross_entropy") == 0);
    }
  }

  TEST_CASE("plan: the child-sum TreeLSTM's sums over children are one segment sum per level and "
            "signature") {
    data::Vocab vocab;
    auto trees = data::gen_sst(25, 17, data::Shape::Sst, vocab, 4);
    Model md(PEJIT_SOURCE_DIR "/examples/childsum/childsum.pe",
             {{"V", static_cast<int64_t>(vocab.size())}});
    specializer::Plan plan;
    specializer::TemplateTable tt;
    check_same(md, test::tree_batch(*md.m, trees), &plan, &tt);
    // (level, signature) of every SumN group: each at most once; its rows are its sums, each
    // a segment of its terms.
    std::set<std::pair<int32_t, std::vector<int64_t>>> seen;
    size_t sum_groups = 0, sum_rows = 0, nodes = 0;
    for (const auto& g : plan.groups) {
      if (g.tmpl != specializer::Instance::kSumN) {
        nodes += tt.at(g.tmpl).name == "node" ? g.instances.size() : 0;
        continue;
      }
      ++sum_groups;
      sum_rows += g.instances.size();
      CHECK(seen.insert({g.level, g.results.at(0).dims.vec()}).second);
      REQUIRE(g.segments.size() == g.instances.size() + 1);
      CHECK(g.segments.front() == 0);
      CHECK(static_cast<size_t>(g.segments.back()) == g.args.size());
      for (size_t k = 0; k + 1 < g.segments.size(); ++k)
        CHECK(g.segments[k] < g.segments[k + 1]);
    }
    // The sums of every internal node (its children's h, their gated c), in a few groups.
    CHECK(sum_rows >= nodes);
    CHECK(sum_groups <= 2 * static_cast<size_t>(plan.levels) + 1);
    CHECK(sum_groups * 4 < sum_rows);
  }

  TEST_CASE("signature dimensions: held inline up to a tensor's rank, compared by value") {
    using specializer::SigDims;
    using specializer::TensorSig;
    TensorSig a{DType::F32, {3, 5}};
    TensorSig b = a; // a copy owns its dimensions
    b.dims[1] = 7;
    CHECK(a.dims.size() == 2);
    CHECK(a.dims[1] == 5);
    CHECK_FALSE(a == b);
    b.dims[1] = 5;
    CHECK(a == b);
    CHECK_FALSE(a == (TensorSig{DType::F32, {3}}));    // a prefix is another signature
    CHECK_FALSE(a == (TensorSig{DType::I32, {3, 5}})); // and so is another dtype
    CHECK(a.str() == "f32[3, 5]");
    std::span<const int64_t> view = a.dims;
    CHECK(std::vector<int64_t>(view.begin(), view.end()) == std::vector<int64_t>{3, 5});
    CHECK(TensorSig{}.str() == "f32[]");
    SigDims d;
    for (size_t i = 0; i < Shape::kMaxRank; ++i)
      d.push_back(static_cast<int64_t>(i + 1));
    CHECK(d.size() == Shape::kMaxRank);
    CHECK(d.back() == static_cast<int64_t>(Shape::kMaxRank));
    CHECK_THROWS_WITH_AS(d.push_back(9), doctest::Contains("more than 8 dimensions"), Error);
    CHECK(d.size() == Shape::kMaxRank); // unchanged
    const std::vector<int64_t> nine{1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK_THROWS_AS(SigDims(nine.begin(), nine.end()), Error);
  }
}

} // namespace tests_specializer_plan_test
