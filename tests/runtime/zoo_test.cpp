// The zoo's tree models (examples/treelstm, recnn, treegru, nary_treelstm, childsum) and list
// models (examples/rnn, and examples/tagger over a tree's words): their plans match the generic
// path (docs/architecture.md: loss within a relative 1e-5, every gradient within 1e-4 * max|ref| +
// 1e-6) on every executor (the batching interpreter, the template graphs on reference kernels, and
// with JIT-compiled runs), on generated trees of several shapes or sentences; every parameter gets
// a gradient; and on template graphs no group is left to the batching interpreter: the embedding
// lookup (op.take) is a row gather of the template's kernel program, its gradient row-sparse.
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
#include "tests/support/plan_check.h"

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <utility>

namespace tests_runtime_zoo_test {

using namespace pejit;

namespace {

using test::Exec;

// Generic path vs plan on every executor configuration, and where each template ran.
void check_same(test::FileModel& md, const interp::Value& batch) {
  for (const auto& [mode, st] : test::check_plan_matches_generic(md, batch)) {
    std::string exec = test::exec_name(mode);
    CAPTURE(exec);
    if (mode == Exec::Interpreter) {
      CHECK(st.groups_on_graphs == 0);
      CHECK(st.groups_interpreted > 0);
      // Every template, each once, as graphs off (the lookup too: its table is no argument).
      size_t off = 0;
      for (const auto& why : st.interpreted_templates)
        off += why.find(": template graphs are off") != std::string::npos;
      CHECK(off >= 3);
      CHECK(off == st.interpreted_templates.size());
    } else {
      CHECK(st.groups_on_graphs > 0);
      // Every template, the embedding lookup included, is lowered to its kernel program.
      CHECK(st.graph_fallbacks.empty());
      CHECK(st.interpreted_templates.empty());
      CHECK(st.groups_interpreted == 0);
      CHECK(st.interpreted_seconds == 0);
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
    test::FileModel md(file, static_cast<int64_t>(vocab.size()));
    check_same(md, test::tree_batch(*md.m, trees));
  }
  data::Vocab vocab;
  auto ts = data::parse_trees(extra, "t.txt", vocab);
  test::FileModel md(file, static_cast<int64_t>(vocab.size()));
  check_same(md, test::tree_batch(*md.m, ts));
}

// Sentences of lengths 0 to 8 over a vocabulary of `vocab` words, as List[List[i32[]]].
interp::Value sentence_batch(int count, int vocab) {
  interp::Values sents;
  for (int s = 0; s < count; ++s) {
    interp::Values words;
    for (int w = 0; w < s % 9; ++w)
      words.push_back(interp::Value::tensor(Tensor::scalar_i32((s * 5 + w * 3) % vocab)));
    sents.push_back(interp::Value::list(words));
  }
  return interp::Value::list(sents);
}

// The tagger on 25 generated SST-shaped trees (`seed`), batched for its entries.
struct TaggerBatch {
  data::Vocab vocab;
  std::vector<data::ParseTree> trees;
  test::FileModel md;
  interp::Value batch;
  explicit TaggerBatch(uint64_t seed)
      : trees(data::gen_sst(25, seed, data::Shape::Sst, vocab)),
        md(PEJIT_SOURCE_DIR "/examples/tagger/tagger.pe", static_cast<int64_t>(vocab.size())),
        batch(test::tree_batch(*md.m, trees)) {}
};

// Two training runs of `plan` on one executor (reference kernels, or JIT ones with `jit`):
// the second gives the first one's loss and gradients to the bit. Returns the executor's
// statistics after each run.
std::pair<runtime::PlanStats, runtime::PlanStats>
run_twice(test::FileModel& md, const specializer::Plan& plan, const specializer::Residual& r,
          const specializer::TemplateTable& tt, bool jit) {
  runtime::ExecOptions o;
  o.kernels = jit ? &test::shared_test_kernels() : nullptr;
  runtime::PlanExecutor ex(md.m, md.dims, o);
  auto a = ex.value_and_grad(plan, r, tt, md.params);
  const runtime::PlanStats first_stats = ex.stats();
  std::vector<Tensor> first; // dense copies: the gradients may view the executor's arena
  for (size_t p = 0; p < md.params.values.size(); ++p)
    first.push_back(a.grads[p].to_dense(md.params.values[p].shape()).clone());
  auto b = ex.value_and_grad(plan, r, tt, md.params);
  CHECK(test::same_bits(a.loss, b.loss));
  for (size_t p = 0; p < md.params.values.size(); ++p) {
    CAPTURE(md.params.names[p]);
    CHECK(test::same_bits(first[p], b.grads[p].to_dense(md.params.values[p].shape())));
  }
  return {first_stats, ex.stats()};
}

} // namespace

TEST_SUITE("examples") {
  TEST_CASE("zoo: the bidirectional LSTM tagger's plans == generic path, none in the "
            "interpreter") {
    check_model(PEJIT_SOURCE_DIR "/examples/tagger/tagger.pe", 2,
                "(1 (2 a) (3 b))\n(3 (2 (4 c) (1 d)) (0 e))\n(2 w)\n");
  }

  TEST_CASE("zoo: the tagger's word losses run in one group per batch, and its labels match "
            "the generic path") {
    TaggerBatch tb(3);
    const auto& trees = tb.trees;
    test::FileModel& md = tb.md;
    const interp::Value& batch = tb.batch;
    size_t longest = 0;
    for (const auto& t : trees) {
      size_t words = 0;
      for (const auto& n : t.nodes)
        words += n.children.empty();
      longest = std::max(longest, words);
    }
    specializer::TemplateTable lt;
    auto lpe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, lt);
    REQUIRE(lpe.ok);
    specializer::Plan lplan = specializer::make_plan(lpe.residual, lt);
    // word_loss feeds no other call: all the batch's words in one group, not one group per step
    // of the recursion; step2 (both directions' steps) a group per word position.
    size_t per_word = 0, steps = 0;
    for (const auto& g : lplan.groups) {
      if (g.tmpl < 0)
        continue;
      const std::string& name = lt.at(g.tmpl).name;
      per_word += name == "word_loss";
      steps += name == "step2";
    }
    CHECK(per_word == 1);
    CHECK(steps == longest);
    CHECK(lplan.groups.size() <= steps + 3);
    // infer_words on a plan (JIT kernels) gives the generic path's labels, word for word.
    specializer::TemplateTable tt;
    auto pe = specializer::partially_evaluate(*md.m, md.dims, "infer_words", batch, tt);
    REQUIRE(pe.ok);
    specializer::Plan plan = specializer::make_plan(pe.residual, tt);
    runtime::ExecOptions o;
    o.kernels = &test::shared_test_kernels();
    runtime::PlanExecutor ex(md.m, md.dims, o);
    std::vector<Tensor> got = ex.run(plan, pe.residual, tt, md.params);
    // The executor asks the shared graph cache once per template, not once per group; a second
    // run of the plan asks it nothing.
    std::set<int32_t> tmpls;
    for (const auto& g : plan.groups)
      if (g.tmpl >= 0)
        tmpls.insert(g.tmpl);
    const int64_t lookups = ex.stats().runner_lookups;
    CHECK(lookups == static_cast<int64_t>(tmpls.size()));
    CHECK(plan.groups.size() > tmpls.size() + 10);
    CHECK(ex.run(plan, pe.residual, tt, md.params).size() == got.size());
    CHECK(ex.stats().runner_lookups == lookups);
    // predict (an i32 result: argmax of the scores, no backward) is lowered like the rest.
    CHECK(ex.stats().groups_interpreted == 0);
    CHECK(ex.stats().interpreted_templates.empty());
    CHECK(ex.stats().graph_fallbacks.empty());
    bool predict_planned = false;
    for (int32_t t : tmpls)
      predict_planned |= tt.at(t).name == "predict";
    CHECK(predict_planned);
    interp::Interpreter in(md.m, md.dims);
    interp::Value ref = in.run("infer_words", {batch}, md.params);
    std::vector<int32_t> want, have;
    for (size_t s = 0; s < ref.list_size(); ++s)
      for (size_t w = 0; w < ref.list_at(s).list_size(); ++w)
        want.push_back(ref.list_at(s).list_at(w).as_tensor().item_i32());
    for (const Tensor& t : got)
      have.push_back(t.item_i32());
    CHECK(have == want);
    CHECK(want.size() > trees.size());
  }

  TEST_CASE("zoo: the tagger's step gradients of x and h (slices of dX = dY W^T) are copied "
            "straight into their arguments' blocks, the same bits run after run") {
    TaggerBatch tb(5);
    test::FileModel& md = tb.md;
    const interp::Value& batch = tb.batch;
    specializer::TemplateTable tt;
    auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
    REQUIRE(pe.ok);
    specializer::Plan plan = specializer::make_plan(pe.residual, tt);
    int64_t steps = 0, words = 0;
    for (const auto& g : plan.groups)
      if (g.tmpl >= 0) {
        steps += tt.at(g.tmpl).name == "step2";
        words += tt.at(g.tmpl).name == "word_loss";
      }
    REQUIRE(steps > 2);
    REQUIRE(words == 1);
    for (bool jit : {false, true}) {
      CAPTURE(jit);
      const auto [st, st2] = run_twice(md, plan, pe.residual, tt, jit);
      // Each step's x gradients (both directions; its h gradients too but at the first step,
      // whose h is the zero state) and the word loss's two state gradients: no reference
      // slice, no copy after.
      CHECK(st.direct_slices >= 2 * steps + 2);
      CHECK(st.direct_slices <= 4 * steps + 2);
      CHECK(st2.direct_slices == 2 * st.direct_slices);
    }
  }

  TEST_CASE("zoo: the recursive neural network's classifier gradient dX = dY W^T is computed "
            "straight into its argument's block, the same bits run after run") {
    data::Vocab vocab;
    auto trees = data::gen_sst(25, 3, data::Shape::Sst, vocab);
    test::FileModel md(PEJIT_SOURCE_DIR "/examples/recnn/recnn.pe",
                       static_cast<int64_t>(vocab.size()));
    const interp::Value batch = test::tree_batch(*md.m, trees);
    specializer::TemplateTable tt;
    auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
    REQUIRE(pe.ok);
    specializer::Plan plan = specializer::make_plan(pe.residual, tt);
    int64_t losses = 0;
    for (const auto& g : plan.groups)
      losses += g.tmpl >= 0 && tt.at(g.tmpl).name == "node_loss";
    REQUIRE(losses == 1); // every node's classifier in one group
    for (bool jit : {false, true}) {
      CAPTURE(jit);
      const auto [st, st2] = run_twice(md, plan, pe.residual, tt, jit);
      // The classifier's gradient of h, the group's one dX (compose's is its run's core).
      CHECK(st.direct_gemms == 1);
      CHECK(st2.direct_gemms == 2);
    }
  }

  TEST_CASE("zoo: the LSTM language model's plans == generic path, none in the interpreter (its "
            "zero state a constant its templates are specialized to)") {
    test::FileModel md(PEJIT_SOURCE_DIR "/examples/rnn/rnn.pe", 40);
    interp::Value batch = sentence_batch(25, 40);
    check_same(md, batch);
    // The first step and the first word's loss of every sentence take zeros(64): their
    // templates read it as a literal (Template::const_args), apart from the per-row ones; the
    // loss's then has one logits row (b_out) for all its rows.
    specializer::TemplateTable tt;
    auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
    REQUIRE(pe.ok);
    int literal = 0, per_row = 0;
    for (size_t i = 0; i < tt.size(); ++i) {
      const auto& t = tt.at(static_cast<int32_t>(i));
      if (t.name != "step" && t.name != "word_loss")
        continue;
      bool bound = false;
      for (const auto& c : t.const_args)
        bound = bound || c.defined();
      (bound ? literal : per_row)++;
    }
    CHECK(literal == 2);
    CHECK(per_row == 2);
  }

  TEST_CASE("zoo: the binary TreeLSTM's plans == generic path, none in the interpreter") {
    check_model(PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", 2,
                "(1 (2 a) (3 b))\n(3 (2 (4 c) (1 d)) (0 e))\n");
  }

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

  TEST_CASE("zoo: the child-sum TreeLSTM's plans == generic path, none in the interpreter") {
    check_model(PEJIT_SOURCE_DIR "/examples/childsum/childsum.pe", 4,
                "(1 (2 a) (3 b) (0 c) (4 d))\n(3 (2 (4 c) (1 d)) (0 e))\n");
  }
}

} // namespace tests_runtime_zoo_test
