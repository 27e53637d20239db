// The zoo's tree models (examples/recnn, examples/treegru, examples/nary_treelstm): their plans
// match the generic path (docs/architecture.md: loss within a relative 1e-5, every gradient
// within 1e-4 * max|ref| + 1e-6) on every executor (the batching interpreter, the template
// graphs on reference kernels, and with JIT-compiled runs), on generated trees of several
// shapes; every parameter gets a gradient; and on template graphs the only template left to
// the batching interpreter is the embedding lookup (op.take).
#include "jit/kernel_cache.h"
#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"
#include "runtime/plan_executor.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "tests/support/batches.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <string>

using namespace pejit;

namespace {

struct Model {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  interp::Params params;
  Model(const std::string& file, int64_t vocab) {
    Diagnostics d;
    REQUIRE_MESSAGE(types::add_file(*m, file, d).ok, d.render());
    dims = interp::bind_dims(*m, {{"V", vocab}});
    params = interp::init_params(*m, dims, 9);
  }
};

enum class Exec { Interpreter, Graphs, GraphsJit };
const char* exec_name(Exec e) {
  return e == Exec::Interpreter ? "interpreter" : e == Exec::Graphs ? "graphs" : "graphs+jit";
}
jit::KernelCache& shared_kernels() {
  static jit::Jit jit;
  static jit::KernelCache cache(jit, 512);
  return cache;
}

// Generic path vs plan: loss and every gradient, on every executor configuration.
void check_same(Model& md, const interp::Value& batch) {
  specializer::TemplateTable tt;
  auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
  REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);
  specializer::Plan plan = specializer::make_plan(pe.residual, tt);
  interp::Interpreter in(md.m, md.dims);
  auto ref = in.value_and_grad("loss", {batch}, md.params);
  for (Exec mode : {Exec::Interpreter, Exec::Graphs, Exec::GraphsJit}) {
    std::string exec = exec_name(mode);
    CAPTURE(exec);
    runtime::ExecOptions o;
    o.graphs = mode != Exec::Interpreter;
    o.kernels = mode == Exec::GraphsJit ? &shared_kernels() : nullptr;
    runtime::PlanExecutor ex(md.m, md.dims, o);
    auto got = ex.value_and_grad(plan, pe.residual, tt, md.params);
    CHECK(test::loss_close(got.loss, ref.loss));
    auto fwd = ex.run(plan, pe.residual, tt, md.params);
    REQUIRE(fwd.size() == 1);
    CHECK(test::loss_close(fwd[0].item_f32(), ref.loss));
    for (size_t p = 0; p < md.params.values.size(); ++p) {
      CAPTURE(md.params.names[p]);
      const Shape& s = md.params.values[p].shape();
      CHECK_FALSE(ref.grads[p].empty()); // the batches use every parameter
      CHECK(got.grads[p].empty() == ref.grads[p].empty());
      test::check_close(got.grads[p].to_dense(s), ref.grads[p].to_dense(s), md.params.names[p]);
    }
    const auto& st = ex.stats();
    CHECK(st.groups_row_by_row == 0);
    if (mode == Exec::Interpreter) {
      CHECK(st.groups_on_graphs == 0);
      CHECK(st.groups_interpreted > 0);
      // Every template, each once: the lookup for its shared table, the others as graphs off.
      size_t off = 0;
      for (const auto& why : st.interpreted_templates)
        off += why.find(": template graphs are off") != std::string::npos;
      CHECK(off >= 2);
      CHECK(off + 1 >= st.interpreted_templates.size());
    } else {
      CHECK(st.groups_on_graphs > 0);
      // Everything but the embedding lookup is lowered to the template's kernel program.
      CHECK(st.graph_fallbacks.empty());
      CHECK(st.interpreted_templates.size() <= 1);
      for (const auto& why : st.interpreted_templates)
        CHECK_MESSAGE(why.rfind("op.take: ", 0) == 0, why);
    }
    if (mode == Exec::GraphsJit)
      CHECK(st.jit_launches > 0);
    else
      CHECK(st.jit_launches == 0);
  }
}

// Generated trees of every shape (n-ary up to `arity` children), then `extra` parsed trees.
void check_model(const std::string& file, size_t arity, const char* extra) {
  for (auto shape : {data::Shape::Sst, data::Shape::Deep, data::Shape::Balanced}) {
    CAPTURE(data::shape_name(shape));
    data::Vocab vocab;
    auto trees = data::gen_sst(16, 13, shape, vocab, arity);
    Model md(file, static_cast<int64_t>(vocab.size()));
    check_same(md, test::tree_batch(*md.m, trees));
  }
  data::Vocab vocab;
  auto ts = data::parse_trees(extra, "t.txt", vocab);
  Model md(file, static_cast<int64_t>(vocab.size()));
  check_same(md, test::tree_batch(*md.m, ts));
}

} // namespace

TEST_SUITE("examples") {
  TEST_CASE("zoo: the recursive neural network's plans == generic path") {
    check_model(PEJIT_SOURCE_DIR "/examples/recnn/recnn.pe", 2,
                "(1 (2 a) (3 b))\n(3 (2 (4 c) (1 d)) (0 e))\n");
  }

  TEST_CASE("zoo: the Tree-GRU's plans == generic path") {
    check_model(PEJIT_SOURCE_DIR "/examples/treegru/treegru.pe", 2,
                "(1 (2 a) (3 b))\n(3 (2 (4 c) (1 d)) (0 e))\n");
  }

  TEST_CASE("zoo: the 3-ary TreeLSTM's plans == generic path, on nodes of two and three "
            "children") {
    check_model(
        PEJIT_SOURCE_DIR "/examples/nary_treelstm/nary_treelstm.pe", 3,
        "(1 (2 a) (3 b) (0 c))\n(3 (2 (4 c) (1 d)) (0 e))\n(2 (1 (0 a) (1 b) (2 c)) (3 d))\n");
  }
}
