// `pejit eval`'s one-pass scoring: the loss and every prediction from one entry per batch
// (runtime/train/eval_entry.h), no gradients, the same scores as the two entries run apart on
// the generic path; --rounds; and the entry's name kept clear of the model's definitions.
#include "runtime/fault_hooks.h"
#include "runtime/session_access.h"
#include "runtime/train/common.h"
#include "runtime/train/eval_entry.h"
#include "runtime/train/trainer.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "src/types/check.h"
#include "tests/cli/cli_util.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>

namespace tests_cli_eval_cli_test {

using namespace pejit::cli_test;

namespace {

// The example model cut before its `// (h, c, predictions` block: loss and infer, no
// infer_nodes; or before `entry infer`: loss alone.
std::string model_upto(const std::string& marker, const std::string& name) {
  std::ifstream in(kModel);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  size_t at = text.find(marker);
  REQUIRE(at != std::string::npos);
  std::string path = tmp(name);
  std::ofstream(path) << text.substr(0, at);
  return path;
}

nlohmann::json eval_json(const std::string& args) {
  Run r = run_pejit("eval " + args + " --json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto js = json_lines(r.out);
  REQUIRE(js.size() == 1);
  return js[0];
}

// The scores of two evaluations agree as the plans and the generic path do: the loss to f32
// rounding, an accuracy to the odd argmax that a rounding-level difference flips.
void same_scores(const nlohmann::json& a, const nlohmann::json& b, int trees) {
  CHECK(a["trees"] == b["trees"]);
  CHECK(a["nodes"] == b["nodes"]);
  CHECK(a["loss"].get<double>() == doctest::Approx(b["loss"].get<double>()).epsilon(1e-5));
  if (a["root_acc"].is_null() || b["root_acc"].is_null()) {
    CHECK(a["root_acc"].is_null() == b["root_acc"].is_null());
  } else {
    CHECK(std::fabs(a["root_acc"].get<double>() - b["root_acc"].get<double>()) <=
          1.0 / trees + 1e-9);
  }
  if (a["node_acc"].is_null() || b["node_acc"].is_null()) {
    CHECK(a["node_acc"].is_null() == b["node_acc"].is_null());
  } else {
    CHECK(std::fabs(a["node_acc"].get<double>() - b["node_acc"].get<double>()) <= 0.002);
  }
}

} // namespace

TEST_SUITE("cli") {
  TEST_CASE("eval: one pass per batch, no gradients, the scores of the two entries run apart") {
    std::string data = tmp("eval_data.txt"), ck = tmp("eval.ckpt");
    REQUIRE(run_pejit("gen sst --trees 230 --seed 31 -o " + data).code == 0);
    Run t =
        run_pejit("train " + kModel + " --data " + data +
                  " --epochs 1 --json --no-train-eval --batch 25 --mode specialized --save " + ck);
    INFO(t.err);
    REQUIRE(t.code == 0);
    auto tj = json_lines(t.out);
    REQUIRE(tj.size() == 1);
    const std::string common = kModel + " --params " + ck + " --data " + data;

    // The reference: loss and infer_nodes run one after the other on the generic path.
    nlohmann::json ref = eval_json(common + " --two-pass --mode generic --batch 25");
    CHECK(ref["entry"] == "loss+infer_nodes");
    CHECK(ref["passes"] == 2 * 10);
    CHECK(ref["grad_batches"] == 0);
    CHECK(ref["specialized_batches"] == 0);

    // The default: one entry per batch, planned (JIT kernels in auto mode), no step.
    nlohmann::json one = eval_json(common + " --batch 100");
    CHECK(one["entry"].get<std::string>().starts_with("__eval"));
    CHECK(one["passes"] == 3); // 100 + 100 + 30 trees
    CHECK(one["encoded_batches"] == 3);
    CHECK(one["grad_batches"] == 0);
    CHECK(one["generic_batches"] == 0);
    // The order check of infer_nodes runs `infer` on a few trees of the first batch: 3 + 1.
    CHECK(one["specialized_batches"] == 4);
    same_scores(one, ref, 230);

    // Specialized mode (kernels compiled before the first run) and the generic path agree
    // with it too; so does the two-pass path on plans.
    nlohmann::json spec = eval_json(common + " --batch 100 --mode specialized");
    CHECK(spec["passes"] == 3);
    same_scores(spec, ref, 230);
    // Inference compiles the forward kernels alone: fewer kernels than training compiles for
    // the loss entry (its forward and backward), though eval's entry holds the predictions'
    // templates besides the loss's.
    CHECK(spec["kernels_compiled"].get<int>() > 0);
    CHECK(spec["kernels_compiled"].get<int>() < tj[0]["kernels_compiled"].get<int>());
    nlohmann::json gen = eval_json(common + " --batch 100 --mode generic");
    CHECK(gen["passes"] == 3);
    same_scores(gen, ref, 230);
    nlohmann::json two = eval_json(common + " --batch 100 --two-pass");
    CHECK(two["passes"] == 6);
    same_scores(two, ref, 230);

    // --rounds: every round the same scores; seconds per round, passes per round. The batches
    // are encoded in the first round and kept, and infer_nodes' order is checked once.
    nlohmann::json rounds = eval_json(common + " --batch 100 --rounds 3");
    REQUIRE(rounds["round_seconds"].size() == 3);
    CHECK(rounds["seconds"] == rounds["round_seconds"][0]);
    CHECK(rounds["passes"] == 3);
    CHECK(rounds["encoded_batches"] == 3);
    CHECK(rounds["grad_batches"] == 0);
    CHECK(rounds["specialized_batches"] == 3 * 3 + 1);
    CHECK(rounds["loss"] == one["loss"]);
    CHECK(rounds["node_acc"] == one["node_acc"]);
    CHECK(run_pejit("eval " + common + " --rounds 0").code != 0);
    // Two passes per batch read the same kept batches.
    nlohmann::json two_rounds = eval_json(common + " --batch 100 --two-pass --rounds 2");
    CHECK(two_rounds["encoded_batches"] == 3);
    CHECK(two_rounds["loss"] == two["loss"]);
    CHECK(two_rounds["node_acc"] == two["node_acc"]);
  }

  // 50 generated trees (`pejit gen sst --seed SEED`) read for the example model's `loss`, as
  // `pejit train` reads its data.
  struct Generated {
    Generated(const std::string& name, int seed) {
      std::string data = tmp(name);
      REQUIRE(run_pejit("gen sst --trees 50 --seed " + std::to_string(seed) + " -o " + data).code ==
              0);
      m = pejit::runtime::load_model(kModel);
      ds = pejit::runtime::read_dataset(data, vocab, true,
                                        pejit::runtime::batch_element_type(*m, "loss"));
      REQUIRE(ds.size() == 50);
    }
    std::shared_ptr<pejit::ir::Module> m;
    pejit::data::Vocab vocab;
    pejit::runtime::Dataset ds;
  };

  TEST_CASE("EvalSet: batches encoded once and kept within the bound, the others each time") {
    using namespace pejit::runtime;
    Generated g("evalset_data.txt", 33);
    auto& m = g.m;
    auto& vocab = g.vocab;
    const Dataset& ds = g.ds;
    const Encoder enc(*m, ds, batch_element_type(*m, "loss"));
    int64_t first_two = 0; // the nodes of the first two batches of 20 trees
    for (size_t i = 0; i < 40; ++i)
      first_two += static_cast<int64_t>(ds.trees[i].nodes.size());

    // Everything kept: a second pass over the batches encodes nothing, and gives the very
    // values of the first.
    EvalSet all(ds, enc, 20);
    REQUIRE(all.batches() == 3);
    CHECK(all.end(2) == 50);
    std::vector<pejit::Value> seen;
    for (size_t i = 0; i < all.batches(); ++i)
      seen.push_back(all.batch(i));
    for (size_t i = 0; i < all.batches(); ++i)
      CHECK(&all.batch(i).impl() == &seen[i].impl());
    CHECK(all.encoded_batches() == 3);
    CHECK(seen[2].size() == 10);

    // A bound that holds the first two batches: the third is encoded on every pass.
    EvalSet bounded(ds, enc, 20, 0, 1, {}, first_two);
    std::vector<pejit::Value> third;
    for (int pass = 0; pass < 3; ++pass) {
      for (size_t i = 0; i < 2; ++i)
        CHECK(bounded.batch(i).size() == 20);
      third.push_back(bounded.batch(2));
      CHECK(third.back().size() == 10);
    }
    CHECK(&third[0].impl() != &third[1].impl());
    CHECK(bounded.encoded_batches() == 2 + 3);

    // A kept batch runs with the facts found on its first run (depth, plan key, payloads):
    // the bits of a plain run, and the facts are what the run reads (another batch's facts
    // of the same shape give that batch's result).
    pejit::SessionOptions so;
    so.mode = "specialized";
    so.compile.jit = false;
    for (const auto& [name, size] : vocab_dims(*m, vocab))
      so.dims[name] = size;
    pejit::Session session = pejit::runtime::SessionAccess::from_module(m, so);
    EvalSet one(ds, enc, 1);
    auto loss_of = [](const pejit::Value& v) { return v.item_f32(); };
    for (size_t i : {size_t{0}, size_t{1}}) {
      pejit::Value v = one.batch(i);
      const float plain = loss_of(session.run("loss", v));
      CHECK(loss_of(one.run(session, "loss", i, v)) == plain); // finds the facts
      CHECK(loss_of(one.run(session, "loss", i, v)) == plain); // runs with them
    }
    // Batch 0 run with batch 1's facts gives batch 1's loss: the run reads the facts, not
    // the batch (a kept batch is only ever given its own).
    pejit::Value v0 = one.batch(0), v1 = one.batch(1);
    const float l0 = loss_of(session.run("loss", v0)), l1 = loss_of(session.run("loss", v1));
    REQUIRE(l0 != l1);
    auto f1 = pejit::runtime::SessionAccess::facts(session, v1);
    CHECK(loss_of(pejit::runtime::SessionAccess::run(session, "loss", v0, *f1)) == l1);

    // Rank 1 of 2: every other batch from the second on.
    EvalSet shard(ds, enc, 20, 1, 2);
    REQUIRE(shard.batches() == 1);
    CHECK(shard.begin(0) == 20);
    CHECK(shard.nodes(0) == all.nodes(1));
  }

  // Before the first plan run of the watched entry, waits (up to 30 s) for a second batch of
  // it to begin its partial evaluation, and records whether one did.
  class NextPlannedBeforeRun : public pejit::runtime::FaultHooks {
  public:
    void watch(const std::string& entry) {
      std::lock_guard<std::mutex> lock(mu_);
      entry_ = entry;
    }
    void before_partial_eval(const std::string& entry) const override {
      std::lock_guard<std::mutex> lock(mu_);
      if (entry == entry_)
        ++begun_;
      cv_.notify_all();
    }
    void before_execute(const std::string& entry) const override {
      std::unique_lock<std::mutex> lock(mu_);
      if (entry != entry_ || first_run_)
        return;
      first_run_ = cv_.wait_for(lock, std::chrono::seconds(30), [&] { return begun_ >= 2; });
    }
    std::optional<bool> next_began_before_first_run() const {
      std::lock_guard<std::mutex> lock(mu_);
      return first_run_;
    }

  private:
    mutable std::mutex mu_;
    mutable std::condition_variable cv_;
    std::string entry_;
    mutable int begun_ = 0;
    mutable std::optional<bool> first_run_;
  };

  TEST_CASE("scoring: a batch is planned on the pipeline while the one before it runs") {
    using namespace pejit::runtime;
    Generated g("prefetch_data.txt", 34);
    const Encoder enc(*g.m, g.ds, batch_element_type(*g.m, "loss"));
    pejit::SessionOptions so;
    so.mode = "specialized";
    so.compile.jit = false;
    for (const auto& [name, size] : vocab_dims(*g.m, g.vocab))
      so.dims[name] = size;
    auto hooks = std::make_shared<NextPlannedBeforeRun>();
    pejit::Session session = SessionAccess::from_module(g.m, so, nullptr, {}, false, hooks);
    const std::string eval = SessionAccess::eval_entry(session).name; // what score() runs
    REQUIRE(!eval.empty());
    hooks->watch(eval);
    EvalSet set(g.ds, enc, 20, 0, 1, /*one_pass=*/true);
    REQUIRE(set.batches() == 3);
    const Scores first = score(session, set);
    CHECK(hooks->next_began_before_first_run() == std::optional<bool>(true));
    CHECK(session.stats().plans_prefetched >= 1);
    // The same scores as a pass whose plans are all cached.
    const Scores again = score(session, set);
    CHECK(again.loss == first.loss);
    CHECK(again.root_ok == first.root_ok);
    CHECK(again.node_ok == first.node_ok);
  }

  TEST_CASE("KeptExamples: each example encoded once within the bound and shared by the "
            "batches of every epoch and by the scoring") {
    using namespace pejit::runtime;
    using pejit::interp::Value;
    Generated g("kept_data.txt", 34);
    const auto& m = g.m;
    const Dataset& ds = g.ds;
    const Encoder enc(*m, ds, batch_element_type(*m, "loss"));
    std::vector<size_t> order(50), reversed(50);
    std::iota(order.begin(), order.end(), 0);
    std::iota(reversed.rbegin(), reversed.rend(), 0);
    // The same value as Encoder::batch's: the same skeleton and the same payloads.
    auto same_as_encoded = [&](const Value& v, const std::vector<size_t>& idx, size_t b, size_t e) {
      Value want = enc.batch(ds, idx, b, e);
      CHECK(pejit::specializer::skeleton_hash(v) == pejit::specializer::skeleton_hash(want));
      std::vector<pejit::Tensor> got, exp;
      pejit::specializer::batch_payloads(v, got);
      pejit::specializer::batch_payloads(want, exp);
      REQUIRE(got.size() == exp.size());
      for (size_t i = 0; i < got.size(); ++i)
        CHECK(got[i].item_i32() == exp[i].item_i32());
    };
    // An example's node in a batch: its fields' vector, which a kept example shares.
    auto node = [](const Value& batch, size_t k) { return &batch.list_at(k).items(); };

    KeptExamples kept(ds, enc);
    Value a = kept.batch(order, 0, 25), b = kept.batch(order, 25, 50);
    CHECK(kept.encoded() == 50);
    same_as_encoded(a, order, 0, 25);
    same_as_encoded(b, order, 25, 50);
    // A second epoch in another order encodes nothing: its batches hold the first epoch's
    // very examples.
    Value c = kept.batch(reversed, 0, 25);
    CHECK(kept.encoded() == 50);
    same_as_encoded(c, reversed, 0, 25);
    CHECK(node(c, 0) == node(b, 24)); // example 49
    CHECK(node(c, 24) == node(b, 0)); // example 25

    // The scoring of the same data set shares them too.
    EvalSet scored(ds, enc, 20);
    scored.share(kept);
    const Value& s0 = pejit::runtime::SessionAccess::unwrap(scored.batch(0));
    CHECK(node(s0, 3) == node(a, 3));
    CHECK(kept.encoded() == 50);

    // A bound that holds the first 10 examples: the others are encoded for every batch.
    int64_t first_ten = 0;
    for (size_t i = 0; i < 10; ++i)
      first_ten += static_cast<int64_t>(ds.trees[i].nodes.size());
    KeptExamples bounded(ds, enc, first_ten);
    Value x = bounded.batch(order, 0, 20), y = bounded.batch(order, 0, 20);
    CHECK(bounded.encoded() == 10 + 10 + 10);
    CHECK(node(x, 9) == node(y, 9));
    CHECK(node(x, 10) != node(y, 10));
    same_as_encoded(y, order, 0, 20);
  }

  TEST_CASE("eval: one pass with infer when the model has no infer_nodes, the loss alone "
            "without either") {
    std::string data = tmp("eval_roots.txt"), ck = tmp("eval_roots.ckpt");
    REQUIRE(run_pejit("gen sst --trees 120 --seed 32 -o " + data).code == 0);
    REQUIRE(run_pejit("train " + kModel + " --data " + data +
                      " --epochs 1 --no-train-eval --mode generic --save " + ck)
                .code == 0);
    const std::string roots = model_upto("// (h, c, predictions", "roots_only.pe");
    const std::string loss_only = model_upto("entry infer(", "loss_only.pe");
    const std::string tail = " --params " + ck + " --data " + data + " --batch 50";

    nlohmann::json ref = eval_json(roots + tail + " --two-pass --mode generic");
    CHECK(ref["entry"] == "loss+infer");
    CHECK(ref["passes"] == 6);
    nlohmann::json one = eval_json(roots + tail);
    CHECK(one["entry"].get<std::string>().starts_with("__eval"));
    CHECK(one["passes"] == 3);
    CHECK(one["node_acc"].is_null());
    CHECK(!one["root_acc"].is_null());
    same_scores(one, ref, 120);

    nlohmann::json alone = eval_json(loss_only + tail);
    CHECK(alone["entry"] == "loss");
    CHECK(alone["passes"] == 3);
    CHECK(alone["root_acc"].is_null());
    CHECK(alone["loss"].get<double>() == doctest::Approx(one["loss"].get<double>()).epsilon(1e-5));
  }

  TEST_CASE("add_eval_entry: a name no definition has, both results, nothing without a loss") {
    std::ifstream in(kModel);
    std::stringstream ss;
    ss << in.rdbuf();
    pejit::ir::Module m;
    pejit::Diagnostics d;
    // The model already uses the first names the entry would take.
    std::string text = ss.str() + "\nfn __eval(x: f32[]) -> f32[] { x }\n"
                                  "fn __eval2_preds(x: f32[]) -> f32[] { x }\n";
    REQUIRE(pejit::types::add_source(m, text, "model.pe", d).ok);
    pejit::runtime::EvalEntry e = pejit::runtime::add_eval_entry(m);
    CHECK(e.name == "__eval3");
    CHECK(e.preds == "infer_nodes");
    const pejit::ir::FnDecl* f = m.fn(e.name);
    REQUIRE(f != nullptr);
    CHECK(f->is_entry);
    CHECK(pejit::ir::type_str(f->ret) == "(f32[], List[List[i32[]]])");
    // The model's own entries are untouched.
    CHECK(m.fn("loss")->is_entry);
    CHECK(m.fn("infer_nodes")->is_entry);

    pejit::ir::Module none;
    REQUIRE(pejit::types::add_source(none, "entry infer(x: f32[]) -> f32[] { x }\n", "n.pe", d).ok);
    CHECK(pejit::runtime::add_eval_entry(none).name.empty());
  }
}

} // namespace tests_cli_eval_cli_test
