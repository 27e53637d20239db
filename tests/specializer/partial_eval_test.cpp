// The partial evaluator: residual programs agree with the generic path, templates are
// interned once, skeleton keys separate structure from payloads, refusals name their
// location, and fuel bounds the work.
#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"
#include "runtime/train/encode.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "specializer/residual_eval.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "tests/support/batches.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

namespace tests_specializer_partial_eval_test {

using namespace pejit;

namespace {

struct Model {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  interp::Params params;
  explicit Model(const std::string& path_or_src, bool is_path, interp::DimBindings over = {}) {
    Diagnostics d;
    auto r = is_path ? types::add_file(*m, path_or_src, d)
                     : types::add_source(*m, path_or_src, "test.pe", d);
    REQUIRE_MESSAGE(r.ok, d.render());
    dims = interp::bind_dims(*m, over);
    params = interp::init_params(*m, dims, 5);
  }
};

std::map<std::string, int> count_by_template(const specializer::Residual& r,
                                             const specializer::TemplateTable& t) {
  std::map<std::string, int> c;
  for (const auto& i : r.instances)
    c[i.tmpl == specializer::Instance::kSumN ? "sum" : t.at(i.tmpl).name]++;
  return c;
}

const std::string kTreeLstm = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

} // namespace

TEST_SUITE("specializer") {
  TEST_CASE("TreeLSTM: instances per node, one SumN for the loss, and the generic loss") {
    data::Vocab vocab;
    auto trees = data::gen_sst(25, 3, data::Shape::Sst, vocab);
    Model md(kTreeLstm, true, {{"V", static_cast<int64_t>(vocab.size())}});
    interp::Value batch = test::tree_batch(*md.m, trees);
    specializer::TemplateTable tt;
    auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
    REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);

    size_t leaves = 0, nodes = 0;
    for (const auto& t : trees) {
      leaves += t.leaves();
      nodes += t.nodes.size();
    }
    auto c = count_by_template(pe.residual, tt);
    CHECK(c["op.take"] == static_cast<int>(leaves));
    CHECK(c["leaf"] == static_cast<int>(leaves));
    CHECK(c["cell"] == static_cast<int>(nodes - leaves));
    CHECK(c["node_loss"] == static_cast<int>(nodes));
    CHECK(c["sum"] == 1); // every node's loss in every tree: one n-ary sum
    CHECK(tt.size() == 4);
    REQUIRE(pe.residual.outputs.size() == 1);
    const auto& sum = pe.residual.instances[static_cast<size_t>(pe.residual.outputs[0].index)];
    CHECK(pe.residual.args(sum).size() == nodes);
    MESSAGE(pe.residual.instances.size() << " instances for 25 trees of " << nodes << " nodes");

    interp::Interpreter in(md.m, md.dims);
    float generic = in.run("loss", {batch}, md.params).as_tensor().item_f32();
    auto out = specializer::evaluate_residual(pe.residual, tt, in, md.params);
    REQUIRE(out.size() == 1);
    CHECK(std::fabs(out[0].item_f32() - generic) <= 1e-5 * std::fabs(generic));

    // The templates known before any batch (what a session compiles at start) are the ones
    // the partial evaluator made for leaf, cell and node_loss, not others.
    auto known = specializer::static_templates(*md.m, md.dims);
    std::set<std::string> names;
    for (const auto& t : known) {
      names.insert(t.name);
      size_t before = tt.size();
      int32_t id = tt.intern(t);
      if (t.name == "leaf" || t.name == "cell" || t.name == "node_loss") {
        CHECK_MESSAGE(tt.size() == before, t.name); // found, not added
        CHECK(tt.at(id).name == t.name);
      }
    }
    CHECK(names.count("leaf") == 1);
    CHECK(names.count("cell") == 1);
    CHECK(names.count("node_loss") == 1);
    CHECK(names.count("encode") == 0); // takes a Tree: not a template
  }

  TEST_CASE("a template's key names its function or op, static arguments and signatures") {
    specializer::Template f;
    f.kind = specializer::Template::Kind::Function;
    f.fn = 3;
    f.name = "cell";
    f.statics = {150, -2};
    f.args = {{DType::F32, {150}}, {DType::I32, {}}, {DType::F32, {2, 300}}};
    CHECK(f.key() == "fn 3 cell #150 #-2 (f32[150],i32[],f32[2, 300],)");
    specializer::Template o;
    o.kind = specializer::Template::Kind::Op;
    o.op = ops::OpId::Take;
    o.attr.ints = {0, 7};
    o.name = "op.take";
    o.args = {{DType::F32, {1000, 300}}};
    CHECK(o.key() ==
          "op " + std::to_string(static_cast<int>(ops::OpId::Take)) + " @0 @7 (f32[1000, 300],)");
    specializer::Template g = f;
    g.statics = {150, 2};
    CHECK(g.key() != f.key()); // every part counts
  }

  TEST_CASE("merged instances: a repeated word's leaf runs once, and the results do not change") {
    // "the" three times, "film" three times, one subtree (film the) twice with the same label.
    data::Vocab vocab;
    auto trees = data::parse_trees("(3 (2 the) (4 (2 film) (2 the)))\n(1 (2 film) (0 bad))\n"
                                   "(4 (2 film) (2 the))\n",
                                   "t", vocab);
    Model md(kTreeLstm, true, {{"V", static_cast<int64_t>(vocab.size() + 3)}});
    interp::Value batch = test::tree_batch(*md.m, trees);
    specializer::TemplateTable tt;
    auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
    REQUIRE(pe.ok);
    specializer::Residual merged = pe.residual;
    std::vector<int32_t> slots = specializer::equal_payload_slots(batch);
    REQUIRE(slots.size() == static_cast<size_t>(pe.residual.num_inputs));
    // Words, leaf labels and node labels are compared within their own kind: 3 distinct
    // words, leaf labels {2, 0}, node labels {3, 4, 1}, although the values overlap.
    std::set<int32_t> classes(slots.begin(), slots.end());
    CHECK(classes.size() == 3 + 2 + 3);
    size_t removed = specializer::merge_equal_instances(merged, slots);
    auto before = count_by_template(pe.residual, tt), after = count_by_template(merged, tt);
    CHECK(before["leaf"] == 7);
    CHECK(after["leaf"] == 3);
    CHECK(after["op.take"] == 3);
    CHECK(before["cell"] == 4);
    CHECK(after["cell"] == 3); // (film the) once
    // Leaf losses: (the, 2) and (film, 2) once each, (bad, 0); node losses: the shared
    // subtree's (label 4) once, the two others.
    CHECK(after["node_loss"] == 3 + 3);
    CHECK(removed == pe.residual.instances.size() - merged.instances.size());
    interp::Interpreter in(md.m, md.dims);
    float generic = in.run("loss", {batch}, md.params).as_tensor().item_f32();
    auto a = specializer::evaluate_residual(pe.residual, tt, in, md.params);
    auto b = specializer::evaluate_residual(merged, tt, in, md.params);
    REQUIRE(b.size() == 1);
    CHECK(std::fabs(b[0].item_f32() - generic) <= 1e-5 * std::fabs(generic));
    CHECK(std::fabs(b[0].item_f32() - a[0].item_f32()) <= 1e-6 * std::fabs(generic));
    // Other equal payloads, other merges: the pattern tells batches of one skeleton apart.
    auto distinct = data::parse_trees("(3 (2 a) (4 (2 b) (2 c)))\n(1 (2 d) (0 e))\n"
                                      "(4 (2 f) (2 g))\n",
                                      "u", vocab);
    auto slots2 = specializer::equal_payload_slots(test::tree_batch(*md.m, distinct));
    CHECK(specializer::skeleton_hash(test::tree_batch(*md.m, distinct)) ==
          specializer::skeleton_hash(batch));
    CHECK(specializer::payload_pattern_hash(slots2) != specializer::payload_pattern_hash(slots));
  }

  TEST_CASE("TreeLSTM infer and infer_nodes: residual outputs equal the generic path's") {
    data::Vocab vocab;
    auto trees = data::gen_sst(6, 8, data::Shape::Deep, vocab);
    Model md(kTreeLstm, true, {{"V", static_cast<int64_t>(vocab.size())}});
    interp::Value batch = test::tree_batch(*md.m, trees);
    interp::Interpreter in(md.m, md.dims);
    specializer::TemplateTable tt;
    for (const char* entry : {"infer", "infer_nodes"}) {
      auto pe = specializer::partially_evaluate(*md.m, md.dims, entry, batch, tt);
      REQUIRE(pe.ok);
      auto out = specializer::evaluate_residual(pe.residual, tt, in, md.params);
      interp::Value g = in.run(entry, {batch}, md.params);
      std::vector<int32_t> flat;
      std::function<void(const interp::Value&)> walk = [&](const interp::Value& v) {
        if (v.kind() == interp::Value::Kind::Tensor)
          flat.push_back(v.as_tensor().item_i32());
        else
          for (size_t i = 0; i < v.list_size(); ++i)
            walk(v.list_at(i));
      };
      walk(g);
      REQUIRE(out.size() == flat.size());
      for (size_t i = 0; i < flat.size(); ++i)
        CHECK(out[i].item_i32() == flat[i]);
    }
  }

  TEST_CASE(
      "skeleton keys: same shapes and other words share a key and a DAG, other shapes do not") {
    data::Vocab vocab;
    auto a = data::gen_sst(10, 1, data::Shape::Sst, vocab);
    auto b = a;
    for (auto& t : b)
      for (auto& n : t.nodes) {
        if (n.word >= 0)
          n.word = (n.word * 7 + 3) % static_cast<int32_t>(vocab.size());
        if (n.label >= 0)
          n.label = (n.label + 1) % 5;
      }
    auto c = data::gen_sst(10, 2, data::Shape::Sst, vocab);
    auto d = a;
    std::swap(d[0], d[1]);
    Model md(kTreeLstm, true, {{"V", static_cast<int64_t>(vocab.size())}});
    specializer::TemplateTable tt;
    auto pa =
        specializer::partially_evaluate(*md.m, md.dims, "loss", test::tree_batch(*md.m, a), tt);
    auto pb =
        specializer::partially_evaluate(*md.m, md.dims, "loss", test::tree_batch(*md.m, b), tt);
    auto pc =
        specializer::partially_evaluate(*md.m, md.dims, "loss", test::tree_batch(*md.m, c), tt);
    auto pd =
        specializer::partially_evaluate(*md.m, md.dims, "loss", test::tree_batch(*md.m, d), tt);
    auto pi =
        specializer::partially_evaluate(*md.m, md.dims, "infer", test::tree_batch(*md.m, a), tt);
    CHECK(pa.residual.key == pb.residual.key);
    CHECK(pa.residual.key != pc.residual.key);
    CHECK(pa.residual.key != pd.residual.key); // order is structure
    CHECK(pa.residual.key != pi.residual.key); // entry is part of the key
    REQUIRE(pa.residual.instances.size() == pb.residual.instances.size());
    for (size_t i = 0; i < pa.residual.instances.size(); ++i) {
      CHECK(pa.residual.instances[i].tmpl == pb.residual.instances[i].tmpl);
      CHECK(std::ranges::equal(pa.residual.args(i), pb.residual.args(i)));
    }
    // A changed definition in the entry's cone changes the key.
    Diagnostics dg;
    REQUIRE(types::add_source(*md.m, "fn logits(h: f32[150]) -> f32[5] { h @ W_out + b_out * 1.0 }",
                              "edit.pe", dg)
                .ok);
    auto pe2 =
        specializer::partially_evaluate(*md.m, md.dims, "loss", test::tree_batch(*md.m, a), tt);
    CHECK(pe2.residual.key != pa.residual.key);
  }

  TEST_CASE("refusal: control flow on a dynamic value names its location") {
    Model md(R"(param W : f32[2] = normal(0.0, 1.0)
type T = L(x: f32[2]) | N(l: T, r: T)
fn f(t: T) -> f32[] {
  match t {
    L(x) => if to_bool(sum(x * W) > 0.0) { sum(x) } else { 0.0 }
    N(l, r) => f(l) + f(r)
  }
}
entry loss(ts: List[T]) -> f32[] { sum_list(map(f, ts)) }
)",
             false);
    interp::Values leaves{interp::Value::adt(0, {interp::Value::tensor(Tensor::full({2}, 1.0f))})};
    interp::Value batch = interp::Value::list(leaves);
    specializer::TemplateTable tt;
    auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
    CHECK_FALSE(pe.ok);
    CHECK(pe.where.line == 5);
    CHECK(pe.where.col == 16);
    CHECK(pe.reason.find("dynamic") != std::string::npos);
    // The generic path runs it.
    interp::Interpreter in(md.m, md.dims);
    CHECK(std::isfinite(in.run("loss", {batch}, md.params).as_tensor().item_f32()));
  }

  TEST_CASE("fuel: work not bounded by the batch's structure is refused, not a hang") {
    Model md(R"(fn grow(n: Int) -> Int { if n == 0 { 1 } else { grow(n - 1) + grow(n - 1) } }
entry loss(xs: List[f32[2]]) -> f32[] { let k = grow(60); sum_list(map(fn x => sum(x), xs)) }
)",
             false);
    interp::Value batch = interp::Value::list({interp::Value::tensor(Tensor::full({2}, 1.0f))});
    specializer::TemplateTable tt;
    specializer::PeOptions opt;
    opt.fuel_per_value = 10;
    auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt, opt);
    CHECK_FALSE(pe.ok);
    CHECK(pe.reason.find("out of fuel") != std::string::npos);
  }

  TEST_CASE("the RNN and ListOps examples specialize and agree with the generic path") {
    // RNN language model over a list of word ids.
    {
      Model md(PEJIT_SOURCE_DIR "/examples/rnn/rnn.pe", true, {{"V", 50}});
      interp::Values sents;
      for (int s = 0; s < 5; ++s) {
        interp::Values words;
        for (int w = 0; w < 3 + 2 * s; ++w)
          words.push_back(interp::Value::tensor(Tensor::scalar_i32((s * 7 + w * 3) % 50)));
        sents.push_back(interp::Value::list(words));
      }
      interp::Value batch = interp::Value::list(sents);
      specializer::TemplateTable tt;
      auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
      REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);
      interp::Interpreter in(md.m, md.dims);
      float generic = in.run("loss", {batch}, md.params).as_tensor().item_f32();
      auto out = specializer::evaluate_residual(pe.residual, tt, in, md.params);
      CHECK(std::fabs(out[0].item_f32() - generic) <= 1e-5 * std::fabs(generic));
    }
    // ListOps, labeled at the root through a wrapper ADT.
    {
      data::Vocab vocab;
      auto trees = data::gen_listops(8, 4, vocab);
      Model md(PEJIT_SOURCE_DIR "/examples/listops/listops.pe", true,
               {{"V", static_cast<int64_t>(vocab.size())}});
      interp::Value batch = test::tree_batch(*md.m, trees, "Example");
      specializer::TemplateTable tt;
      auto pe = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
      REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);
      interp::Interpreter in(md.m, md.dims);
      float generic = in.run("loss", {batch}, md.params).as_tensor().item_f32();
      auto out = specializer::evaluate_residual(pe.residual, tt, in, md.params);
      CHECK(std::fabs(out[0].item_f32() - generic) <= 1e-5 * std::fabs(generic));
    }
  }
}

} // namespace tests_specializer_partial_eval_test
