// The zoo's tree models (examples/treelstm, recnn, treegru, nary_treelstm, childsum): their
// plans match the generic path (docs/architecture.md: loss within a relative 1e-5, every
// gradient within 1e-4 * max|ref| + 1e-6) on every executor (the batching interpreter, the
// template graphs on reference kernels, and with JIT-compiled runs), on generated trees of
// several shapes; every parameter gets a gradient; and on template graphs no group is left
// to the batching interpreter: the embedding lookup (op.take) is a row gather of the
// template's kernel program, its gradient row-sparse.
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

#include <string>

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

} // namespace

TEST_SUITE("examples") {
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
