// The registry's batching decision (ops::batched_row_class) against the two batching backends
// on real template graphs: a classification of every node built on it alone, the way
// GraphRunner's classification reads it, refuses exactly the templates GraphRunner refuses,
// with the same message; and the plan executor's batching backend refuses a group with the
// registry's words. Programs: the TreeLSTM, variants of it whose loss head cannot batch, and
// seeded random programs.
#include "runtime/data/synthetic.h"
#include "runtime/graph_runner.h"
#include "runtime/plan_executor.h"
#include "runtime/train/encode.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "specializer/template_graph.h"
#include "src/ops/batch_rules.h"
#include "src/types/check.h"
#include "tests/specializer/random_batches.h"

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

namespace tests_specializer_batch_rules_agree_test {

using namespace pejit;
using graph::Kind;
using graph::NodeId;
using ops::RowClass;

namespace {

// GraphRunner's classification with every op, gradient helper and sum decided by the
// registry: the reason the template does not batch ("" if it does).
std::string registry_why(const specializer::TemplateGraph& tg) {
  const graph::Graph& g = tg.g;
  std::vector<RowClass> cls(g.size(), RowClass::Shared);
  std::string why;
  auto fail = [&](NodeId id, const std::string& what) {
    if (why.empty())
      why = "%" + std::to_string(id) + " " + what + ": " + graph::print_node(g, id);
  };
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const graph::Node& n = g.node(id);
    std::vector<RowClass> in;
    std::vector<size_t> ranks;
    for (NodeId o : n.operands) {
      in.push_back(cls[static_cast<size_t>(o)]);
      ranks.push_back(g.node(o).type.dims.size());
    }
    ops::RowNode node;
    switch (n.kind) {
    case Kind::Input: {
      auto role = tg.slots[n.slot].role;
      cls[static_cast<size_t>(id)] =
          role == specializer::InputSlot::Role::Arg || role == specializer::InputSlot::Role::Seed
              ? RowClass::Rows
              : RowClass::Shared;
      continue;
    }
    case Kind::Const:
      continue;
    case Kind::Gather:
    case Kind::Scatter:
      for (RowClass c : in)
        if (c != RowClass::Shared) {
          fail(id, "gather/scatter of per-row values");
          break;
        }
      continue;
    case Kind::Op:
      node = ops::RowNode::op(n.op());
      break;
    case Kind::Grad:
      node = ops::RowNode::grad(n.grad_op());
      break;
    case Kind::SumN:
      node = ops::RowNode::sum_n();
      break;
    }
    ops::RowRuleResult r = ops::batched_row_class(node, in, ranks);
    cls[static_cast<size_t>(id)] = r.cls;
    if (!r.ok())
      fail(id, r.refusal);
  }
  for (NodeId o : tg.bwd_arg_grads)
    if (o != graph::kNoNode && cls[static_cast<size_t>(o)] == RowClass::Summed)
      fail(o, "an argument gradient summed over the rows");
  return why;
}

struct Counts {
  size_t templates = 0, refused = 0;
};

// Every template of `tt`: the registry's decision == GraphRunner's.
void check_templates(const ir::Module& m, const interp::DimBindings& dims,
                     const specializer::TemplateTable& tt, Counts& counts) {
  for (size_t i = 0; i < tt.size(); ++i) {
    const specializer::Template& t = tt.at(static_cast<int32_t>(i));
    CAPTURE(t.name);
    runtime::GraphRunner runner(specializer::compile_template(m, dims, t));
    CHECK(registry_why(runner.graph()) == runner.why());
    counts.templates++;
    counts.refused += runner.supported() ? 0 : 1;
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A TreeLSTM whose loss head's `h @ W_out` is replaced by `head` (with `extra` params).
struct TreeLstmVariant {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  interp::Params params;
  interp::Value batch;

  TreeLstmVariant(const std::string& head, const std::string& extra) {
    std::string src = read_file(PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe");
    const std::string from = "{ h @ W_out + b_out }";
    size_t at = src.find(from);
    REQUIRE(at != std::string::npos);
    src.replace(at, from.size(), "{ " + head + " + b_out }");
    src += extra;
    data::Vocab vocab;
    auto trees = data::gen_sst(6, 3, data::Shape::Sst, vocab);
    Diagnostics d;
    REQUIRE_MESSAGE(types::add_source(*m, src, "variant.pe", d).ok, d.render());
    dims = interp::bind_dims(*m, {{"V", static_cast<int64_t>(vocab.size())}});
    params = interp::init_params(*m, dims, 3);
    runtime::TreeEncoder enc(*m, "Tree");
    interp::Values xs;
    for (const auto& t : trees)
      xs.push_back(enc.encode(t));
    batch = interp::Value::list(std::move(xs));
  }
};

} // namespace

TEST_SUITE("specializer") {
  TEST_CASE("batching rules: the registry refuses the templates GraphRunner refuses, as it says") {
    struct Case {
      const char* head;
      const char* extra;
      const char* refusal; ///< in GraphRunner's reason and the batching backend's ("": none)
    };
    const Case cases[] = {
        {"h @ W_out", "", ""},
        {"W_t @ h", "param W_t : f32[5, 150] = xavier\n",
         "matmul other than per-row vector @ shared matrix"},
        {"reshape(reshape(h, 1, 150) @ W_out, 5)", "",
         "matmul other than per-row vector @ shared matrix"},
        {"reshape(transpose(reshape(h, 150, 1)), 150) @ W_out", "", "no batched rule"},
    };
    Counts counts;
    for (const Case& c : cases) {
      CAPTURE(c.head);
      TreeLstmVariant v(c.head, c.extra);
      specializer::TemplateTable tt;
      auto pe = specializer::partially_evaluate(*v.m, v.dims, "loss", v.batch, tt);
      REQUIRE_MESSAGE(pe.ok, pe.reason);
      check_templates(*v.m, v.dims, tt, counts);
      const specializer::Template* loss = nullptr;
      for (size_t i = 0; i < tt.size(); ++i)
        if (tt.at(static_cast<int32_t>(i)).name == "node_loss")
          loss = &tt.at(static_cast<int32_t>(i));
      REQUIRE(loss != nullptr);
      runtime::GraphRunner runner(specializer::compile_template(*v.m, v.dims, *loss));
      CHECK(runner.why().find(c.refusal) != std::string::npos);
      CHECK(runner.supported() == (c.refusal[0] == '\0'));

      // The plan executor's batching backend: the same decision on the same template.
      specializer::Plan plan = specializer::make_plan(pe.residual, tt);
      runtime::ExecOptions eo;
      eo.graphs = false; // the batching interpreter alone
      runtime::PlanExecutor ex(v.m, v.dims, eo);
      ex.value_and_grad(plan, pe.residual, tt, v.params);
      bool refused_there = false;
      for (const auto& why : ex.stats().row_by_row_reasons) {
        CHECK(why.rfind("node_loss: ", 0) == 0);
        refused_there = true;
        if (std::string(c.refusal) != "no batched rule") // the backend names the op instead
          CHECK(why == std::string("node_loss: ") + c.refusal);
        else
          CHECK(why == "node_loss: no batching rule for transpose");
      }
      CHECK(refused_there == (c.refusal[0] != '\0'));
    }
    CHECK(counts.refused >= 3); // the three heads, besides what refuses in every variant
  }

  TEST_CASE("batching rules: the registry's decision == GraphRunner's on random programs") {
    Counts counts;
    for (uint64_t seed = 0; seed < 40; ++seed) {
      CAPTURE(seed);
      testgen::RandomProgram p = testgen::generate(seed);
      auto m = std::make_shared<ir::Module>();
      Diagnostics d;
      REQUIRE_MESSAGE(types::add_source(*m, p.source, "random.pe", d).ok, d.render());
      interp::DimBindings dims = interp::bind_dims(*m, {});
      specializer::TemplateTable tt;
      auto pe = specializer::partially_evaluate(*m, dims, "loss", p.batch, tt);
      REQUIRE_MESSAGE(pe.ok, pe.reason);
      check_templates(*m, dims, tt, counts);
    }
    CHECK(counts.templates > 100);
    MESSAGE(counts.templates << " templates, " << counts.refused << " refused by both");
  }
}

} // namespace tests_specializer_batch_rules_agree_test
