// The dispatcher: auto and specialized training give the generic path's parameters (the
// tolerances of tests/support/compare.h, same batch order), failures and refusals fall back to
// generic with the reason counted, the engine reuses, evicts and invalidates exactly the plans it
// should (the plan cache's own rules: plan_cache_test.cpp), and the background pipeline publishes
// prefetched plans.
#include "runtime/chrome_trace.h"
#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"
#include "runtime/engine.h"
#include "runtime/fault_hooks.h"
#include "runtime/optim/optimizer.h"
#include "runtime/plan_cache.h"
#include "runtime/specializer_service.h"
#include "runtime/train/encode.h"
#include "src/types/check.h"
#include "src/util/check.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

namespace tests_runtime_engine_test {

using namespace pejit;

namespace {

struct Setup {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  std::vector<interp::Value> batches;

  explicit Setup(size_t nbatches, int seed = 3, const std::string& extra = "") {
    Diagnostics d;
    REQUIRE(types::add_file(*m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d).ok);
    if (!extra.empty())
      REQUIRE_MESSAGE(types::add_source(*m, extra, "extra.pe", d).ok, d.render());
    data::Vocab vocab;
    auto trees = data::gen_sst(nbatches * 5, static_cast<uint64_t>(seed), data::Shape::Sst, vocab);
    dims = interp::bind_dims(*m, {{"V", static_cast<int64_t>(vocab.size())}});
    runtime::TreeEncoder enc(*m, "Tree");
    for (size_t b = 0; b < nbatches; ++b) {
      interp::Values xs;
      for (size_t i = b * 5; i < b * 5 + 5; ++i)
        xs.push_back(enc.encode(trees[i]));
      batches.push_back(interp::Value::list(xs));
    }
  }
};

// Trains `steps` steps over the batches (cycling) with `mode`; returns the parameters.
interp::Params train(Setup& s, runtime::Mode mode, optim::Kind kind, int steps,
                     runtime::EngineStats* stats = nullptr, runtime::EngineOptions eo = {},
                     std::shared_ptr<const runtime::FaultHooks> faults = nullptr) {
  eo.mode = mode;
  runtime::Engine engine(s.m, s.dims, eo, std::move(faults));
  interp::Params params = interp::init_params(*s.m, s.dims, 17);
  optim::OptimizerOptions oo;
  oo.kind = kind;
  oo.lr = kind == optim::Kind::Sgd ? 0.01f : 0.05f;
  // Adagrad with an empty accumulator moves each weight by lr * g / (|g| + eps) on the first
  // step: a sign function of the gradient, so rounding-level differences in near-zero
  // gradients (summation order) become lr-sized differences in the weights. A non-zero
  // initial accumulator keeps the update a smooth function of the gradient.
  oo.adagrad_init = 0.1f;
  optim::Optimizer opt(oo);
  // Auto plans ahead; the other modes plan each batch at its step, so that the tests below
  // can count plans made and reused (specialized mode's planning ahead has its own test).
  if (mode == runtime::Mode::Auto)
    engine.prefetch("loss", s.batches);
  for (int i = 0; i < steps; ++i) {
    auto g =
        engine.value_and_grad("loss", s.batches[static_cast<size_t>(i) % s.batches.size()], params);
    opt.step(params, g.grads);
  }
  engine.drain();
  if (stats)
    *stats = engine.stats();
  return params;
}

// Fails one of the engine's steps on every batch, as a bug there would.
enum class Stage { PartialEval, Planning, Compile, Execute };

class FailAt : public runtime::FaultHooks {
public:
  explicit FailAt(Stage s) : stage_(s) {}
  void before_partial_eval(const std::string&) const override {
    if (stage_ == Stage::PartialEval)
      throw InternalError("injected failure in partial evaluation");
  }
  void before_planning(const std::string&) const override {
    if (stage_ == Stage::Planning)
      throw InternalError("injected failure in planning");
  }
  bool corrupt_kernel_ir() const override { return stage_ == Stage::Compile; }
  void before_execute(const std::string&) const override {
    if (stage_ == Stage::Execute)
      throw InternalError("injected failure in plan execution");
  }

private:
  Stage stage_;
};

// Counts the calls of each hook (from any thread: no doctest assertion in them) and fails
// nothing.
class CountCalls : public runtime::FaultHooks {
public:
  mutable std::atomic<int> pe{0}, planning{0}, execute{0}, other_entry{0};
  void before_partial_eval(const std::string& entry) const override { count(pe, entry); }
  void before_planning(const std::string& entry) const override { count(planning, entry); }
  void before_execute(const std::string& entry) const override { count(execute, entry); }

private:
  void count(std::atomic<int>& n, const std::string& entry) const {
    ++n;
    if (entry != "loss")
      ++other_entry;
  }
};

} // namespace

TEST_SUITE("engine") {
  TEST_CASE("auto and specialized train to the generic path's parameters (SGD x10, Adagrad x3)") {
    Setup s(4);
    for (auto [kind, steps] :
         {std::pair{optim::Kind::Sgd, 10}, std::pair{optim::Kind::Adagrad, 3}}) {
      runtime::EngineStats sa, ss;
      auto g = train(s, runtime::Mode::Generic, kind, steps);
      auto a = train(s, runtime::Mode::Auto, kind, steps, &sa);
      auto p = train(s, runtime::Mode::Specialized, kind, steps, &ss);
      test::check_close(a, g);
      test::check_close(p, g);
      CHECK(sa.specialized_batches == steps);
      CHECK(sa.generic_batches == 0);
      CHECK(ss.specialized_batches == steps);
      CHECK(sa.plans_prefetched + sa.plan_misses >= 4); // four skeletons, planned once each
      CHECK(sa.plan_hits + sa.plan_misses == steps);
    }
  }

  TEST_CASE("tiers: specialized runs every batch on JIT kernels, auto compiles in the background") {
    Setup s(4);
    runtime::EngineStats ss, sa, sn;
    auto g = train(s, runtime::Mode::Generic, optim::Kind::Sgd, 8);
    auto p = train(s, runtime::Mode::Specialized, optim::Kind::Sgd, 8, &ss);
    test::check_close(p, g);
    CHECK(ss.jit_batches == 8); // compiled before the first batch ran, waiting for it
    CHECK(ss.kernels_compiled > 0);
    CHECK(ss.jit_seconds <= ss.specialized_seconds);
    // Auto: the training thread never compiles; the pipeline compiles the templates of the
    // plans it makes, and batches after that run on JIT kernels.
    auto a = train(s, runtime::Mode::Auto, optim::Kind::Sgd, 8, &sa);
    test::check_close(a, g);
    CHECK(sa.specialized_batches == 8);
    CHECK(sa.kernels_compiled > 0);
    CHECK(sa.compile_failures.empty());
    // --no-jit: planned batches on reference kernels only.
    runtime::EngineOptions off;
    off.jit = false;
    auto n = train(s, runtime::Mode::Specialized, optim::Kind::Sgd, 8, &sn, off);
    test::check_close(n, g);
    CHECK(sn.jit_batches == 0);
    CHECK(sn.kernels_compiled == 0);
  }

  TEST_CASE("compile times: kernels compile with the first batch, none after (specialized)") {
    Setup s(6); // six batches of new tree shapes over the same templates
    runtime::EngineStats st, sg;
    train(s, runtime::Mode::Specialized, optim::Kind::Sgd, 1, &st);
    CHECK(st.kernels_compiled > 0);
    CHECK(st.first_planned_s >= 0);
    CHECK(st.first_jit_s >= st.first_planned_s); // the first batch already ran on JIT kernels
    REQUIRE(st.last_compile_s >= 0);
    runtime::EngineStats all;
    train(s, runtime::Mode::Specialized, optim::Kind::Sgd, 6, &all);
    CHECK(all.kernels_compiled == st.kernels_compiled); // later shapes reuse the kernels
    CHECK(all.jit_batches == 6);
    // Generic mode plans and compiles nothing.
    train(s, runtime::Mode::Generic, optim::Kind::Sgd, 2, &sg);
    CHECK(sg.first_planned_s < 0);
    CHECK(sg.first_jit_s < 0);
    CHECK(sg.last_compile_s < 0);
  }

  TEST_CASE("auto: the templates known before any batch compile when the engine starts") {
    Setup s(1);
    runtime::Engine engine(s.m, s.dims, runtime::EngineOptions{});
    engine.drain(); // lets the background work run, even on one core
    runtime::EngineStats st = engine.stats();
    CHECK(st.kernels_compiled > 0); // leaf, cell, node_loss's elementwise chains
    CHECK(st.specialized_batches + st.generic_batches == 0);
    CHECK(st.compile_failures.empty());
  }

  TEST_CASE("an LLVM failure sends the plan's batches to the generic path, counted, training on") {
    Setup s(3);
    auto g = train(s, runtime::Mode::Generic, optim::Kind::Sgd, 6);
    for (auto mode : {runtime::Mode::Specialized, runtime::Mode::Auto}) {
      CAPTURE(runtime::mode_name(mode));
      runtime::EngineStats st;
      auto p =
          train(s, mode, optim::Kind::Sgd, 6, &st, {}, std::make_shared<FailAt>(Stage::Compile));
      test::check_close(p, g);
      CHECK(st.jit_batches == 0);
      REQUIRE_FALSE(st.compile_failures.empty());
      const std::string& f = st.compile_failures[0];
      bool named = f.find("cell") != std::string::npos || f.find("leaf") != std::string::npos;
      CHECK_MESSAGE(named, f);
      // Remembered: each template failed once, not once per batch.
      CHECK(st.compile_failures.size() <= 4);
      if (mode == runtime::Mode::Specialized) {
        // The plan compiles before its first run: every batch runs generic, with the reason.
        CHECK(st.generic_batches == 6);
        CHECK(st.specialized_batches == 0);
        REQUIRE(st.fallbacks.size() == 1);
        CHECK(st.fallbacks.begin()->first.find("kernel compile failed: ") == 0);
        CHECK(st.fallbacks.begin()->second == 6);
      }
    }
  }

  TEST_CASE("the pipeline publishes prefetched plans, the cache reuses them (both planned "
            "modes)") {
    Setup s(3);
    interp::Interpreter in(s.m, s.dims);
    for (auto mode : {runtime::Mode::Auto, runtime::Mode::Specialized}) {
      CAPTURE(static_cast<int>(mode));
      runtime::EngineOptions eo;
      eo.mode = mode;
      runtime::Engine engine(s.m, s.dims, eo);
      engine.prefetch("loss", s.batches);
      engine.drain();
      CHECK(engine.stats().plans_prefetched == 3);
      CHECK(engine.cached_plans("loss") == 3);
      interp::Params params = interp::init_params(*s.m, s.dims, 1);
      for (const auto& b : s.batches) {
        auto g = engine.value_and_grad("loss", b, params);
        auto ref = in.value_and_grad("loss", {b}, params);
        CHECK(std::fabs(g.loss - ref.loss) <= 1e-5 * std::fabs(ref.loss));
      }
      CHECK(engine.stats().plan_hits == 3);
      CHECK(engine.stats().plan_misses == 0);
      CHECK(engine.stats().specialized_batches == 3);
    }
  }

  TEST_CASE("failures in PE, planning or plan execution leave training on the generic path") {
    Setup s(2);
    for (auto [stage, reason] :
         {std::pair{Stage::PartialEval,
                    "specialization failed: injected failure in partial evaluation"},
          std::pair{Stage::Planning, "specialization failed: injected failure in planning"},
          std::pair{Stage::Execute, "plan execution failed: injected failure in plan execution"}}) {
      CAPTURE(reason);
      runtime::EngineStats st;
      auto a = train(s, runtime::Mode::Auto, optim::Kind::Sgd, 4, &st, {},
                     std::make_shared<FailAt>(stage));
      auto g = train(s, runtime::Mode::Generic, optim::Kind::Sgd, 4);
      test::check_close(a, g);
      CHECK(st.generic_batches == 4);
      CHECK(st.specialized_batches == 0);
      REQUIRE_FALSE(st.fallbacks.empty());
      CHECK(st.fallbacks.begin()->first.find("injected failure") != std::string::npos);
      CHECK(st.fallbacks.size() == 1);
      CHECK(st.fallbacks.begin()->first == reason);
      CHECK(st.fallbacks.begin()->second == 4);
    }
  }

  TEST_CASE("specialized mode stops when a plan fails while running") {
    Setup s(2);
    runtime::EngineOptions eo;
    eo.mode = runtime::Mode::Specialized;
    runtime::Engine engine(s.m, s.dims, eo, std::make_shared<FailAt>(Stage::Execute));
    interp::Params params = interp::init_params(*s.m, s.dims, 1);
    try {
      engine.value_and_grad("loss", s.batches[0], params);
      FAIL("a plan that failed while running was not reported");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find("--mode specialized") != std::string::npos);
      CHECK(what.find("failed while running: injected failure in plan execution") !=
            std::string::npos);
    }
    CHECK(engine.stats().specialized_batches == 0);
  }

  TEST_CASE("the fault hooks are called where a batch is partially evaluated, planned and run") {
    Setup s(3);
    auto hooks = std::make_shared<CountCalls>();
    runtime::EngineStats st;
    train(s, runtime::Mode::Specialized, optim::Kind::Sgd, 6, &st, {}, hooks);
    CHECK(st.specialized_batches == 6);
    CHECK(st.plan_misses == 3);
    CHECK(hooks->pe == 3); // once per plan made, never for a cached plan
    CHECK(hooks->planning == 3);
    CHECK(hooks->execute == 6);
    CHECK(hooks->other_entry == 0);
    // Auto: the pipeline plans the prefetched batches; every batch then runs its plan.
    auto ahead = std::make_shared<CountCalls>();
    train(s, runtime::Mode::Auto, optim::Kind::Sgd, 6, &st, {}, ahead);
    CHECK(st.plans_prefetched + st.plan_misses == ahead->pe);
    CHECK(ahead->pe >= 3);
    CHECK(ahead->execute == 6);
  }

  TEST_CASE("an entry that cannot be specialized trains on the generic path, refusal remembered") {
    Setup s(3, 5, R"(
fn gated(t: Tree) -> f32[] {
  match t {
    Leaf(w, y) => if to_bool(sum(take(emb, w)) > 0.0) { node_loss(leaf(take(emb, w)).0, y) } else { 0.0 }
    Node(l, r, y) => gated(l) + gated(r)
  }
}
entry gated_loss(batch: List[Tree]) -> f32[] { sum_list(map(gated, batch)) }
)");
    runtime::Engine engine(s.m, s.dims, {});
    interp::Params params = interp::init_params(*s.m, s.dims, 2);
    for (const auto& b : s.batches) {
      auto g = engine.value_and_grad("gated_loss", b, params);
      CHECK(std::isfinite(g.loss));
    }
    auto st = engine.stats();
    CHECK(st.generic_batches == 3);
    REQUIRE(st.fallbacks.size() == 1);
    CHECK(st.fallbacks.begin()->second == 3);
    CHECK(st.fallbacks.begin()->first.find("refused at extra.pe:4:") != std::string::npos);
    CHECK(engine.explain("gated_loss").find("refused at") != std::string::npos);
    CHECK(st.plan_misses == 3); // looked up, but partially evaluated only once

    // Specialized mode is strict: the first such batch stops with the reason, nothing runs.
    runtime::EngineOptions strict;
    strict.mode = runtime::Mode::Specialized;
    runtime::Engine se(s.m, s.dims, strict);
    CHECK_THROWS_WITH_AS(se.value_and_grad("gated_loss", s.batches[0], params),
                         doctest::Contains("--mode specialized: a batch of entry 'gated_loss' "
                                           "cannot be planned: refused at extra.pe:4:"),
                         pejit::Error);
    CHECK_THROWS_AS(se.run("gated_loss", s.batches[0], params), pejit::Error);
    CHECK(se.stats().generic_batches == 0);
  }

  TEST_CASE("small cache bounds evict plans and kernels and training still matches") {
    Setup s(5);
    runtime::EngineOptions eo;
    eo.plan_cache_entries = 2;
    eo.kernel_cache_entries = 1; // TreeLSTM's templates need more than one kernel
    auto g = train(s, runtime::Mode::Generic, optim::Kind::Sgd, 10);
    for (auto mode : {runtime::Mode::Specialized, runtime::Mode::Auto}) {
      CAPTURE(runtime::mode_name(mode));
      runtime::EngineStats st;
      auto a = train(s, mode, optim::Kind::Sgd, 10, &st, eo);
      test::check_close(a, g);
      CHECK(st.plan_evictions > 0);
      CHECK(st.kernel_evictions > 0);
      CHECK(st.specialized_batches == 10);
      CHECK(st.compile_failures.empty());
    }
  }

  TEST_CASE("plans used once stay on probation, a skeleton seen again is kept") {
    Setup s(12); // 12 batches of new skeletons
    runtime::EngineOptions eo;
    eo.mode = runtime::Mode::Specialized;
    eo.plan_probation_entries = 4;
    runtime::Engine engine(s.m, s.dims, eo);
    interp::Params params = interp::init_params(*s.m, s.dims, 1);
    for (const auto& b : s.batches) // shuffled training: every skeleton once
      engine.value_and_grad("loss", b, params);
    CHECK(engine.cached_plans("loss") == 4);
    CHECK(engine.stats().plan_evictions == 8);
    // The last four again: second uses, promoted and kept; then hits.
    for (int round = 0; round < 2; ++round)
      for (size_t i = 8; i < 12; ++i)
        engine.value_and_grad("loss", s.batches[i], params);
    CHECK(engine.stats().plan_hits == 8);
    // An early skeleton (evicted from probation, remembered) made again is kept at once.
    engine.value_and_grad("loss", s.batches[0], params);
    engine.value_and_grad("loss", s.batches[0], params);
    CHECK(engine.stats().plan_hits == 9);
    CHECK(engine.cached_plans("loss") == 5);
    // Plans made ahead are not evicted before their batch runs, however far ahead.
    runtime::EngineOptions ea = eo;
    ea.mode = runtime::Mode::Auto;
    runtime::Engine ahead(s.m, s.dims, ea);
    ahead.prefetch("loss", s.batches);
    ahead.drain();
    CHECK(ahead.cached_plans("loss") == 12);
    for (const auto& b : s.batches)
      ahead.value_and_grad("loss", b, params);
    CHECK(ahead.stats().plan_hits == 12);
    CHECK(ahead.cached_plans("loss") == 4);
  }

  TEST_CASE("invalidation drops exactly the plans of the changed entries") {
    Setup s(2);
    runtime::Engine engine(s.m, s.dims, {});
    interp::Params params = interp::init_params(*s.m, s.dims, 1);
    auto infer_nodes_loss =
        R"(entry nodes_loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => encode(t).2, batch)) * 0.5 })";
    Diagnostics d;
    engine.drain(); // the module changes only while no background work reads it
    REQUIRE(types::add_source(*s.m, infer_nodes_loss, "more.pe", d).ok);
    for (const auto& b : s.batches) {
      engine.value_and_grad("loss", b, params);
      engine.value_and_grad("nodes_loss", b, params);
    }
    CHECK(engine.cached_plans("loss") == 2);
    CHECK(engine.cached_plans("nodes_loss") == 2);
    // A change to `nodes_loss` alone touches that entry only.
    engine.drain();
    auto r = types::add_source(*s.m,
                               "entry nodes_loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t "
                               "=> encode(t).2, batch)) * 0.25 }",
                               "more.pe", d);
    REQUIRE(r.ok);
    CHECK(r.affected_entries == std::vector<std::string>{"nodes_loss"});
    engine.invalidate(r.affected_entries);
    CHECK(engine.cached_plans("loss") == 2);
    CHECK(engine.cached_plans("nodes_loss") == 0);
    auto g = engine.value_and_grad("nodes_loss", s.batches[0], params);
    interp::Interpreter in(s.m, s.dims);
    auto ref = in.value_and_grad("nodes_loss", {s.batches[0]}, params);
    INFO("engine " << g.loss << " generic " << ref.loss << " explain "
                   << engine.explain("nodes_loss"));
    CHECK(std::fabs(g.loss - ref.loss) <= 1e-5 * std::fabs(ref.loss));
  }

  TEST_CASE("merged instances: training equals generic, and batches of one skeleton whose "
            "equal payloads differ get their own plans") {
    Setup s(0);
    data::Vocab vocab;
    // One skeleton, two patterns: words repeated (and a repeated subtree), then all distinct.
    auto a = data::parse_trees("(3 (2 the) (4 (2 film) (2 the)))\n(1 (2 film) (0 bad))\n"
                               "(4 (2 film) (2 the))\n(2 (2 the) (2 the))\n",
                               "a", vocab);
    auto b = data::parse_trees("(3 (2 a) (4 (2 b) (2 c)))\n(1 (2 d) (0 e))\n"
                               "(4 (2 f) (2 g))\n(2 (2 h) (2 i))\n",
                               "b", vocab);
    s.dims = interp::bind_dims(*s.m, {{"V", static_cast<int64_t>(vocab.size())}});
    runtime::TreeEncoder enc(*s.m, "Tree");
    for (const auto* ts : {&a, &b}) {
      interp::Values xs;
      for (const auto& t : *ts)
        xs.push_back(enc.encode(t));
      s.batches.push_back(interp::Value::list(xs));
    }
    runtime::EngineStats merged, plain;
    auto g = train(s, runtime::Mode::Generic, optim::Kind::Adagrad, 4);
    auto p = train(s, runtime::Mode::Specialized, optim::Kind::Adagrad, 4, &merged);
    test::check_close(p, g);
    CHECK(merged.specialized_batches == 4);
    CHECK(merged.plan_misses == 2); // a's plan would give b the words of a's repeats
    CHECK(merged.plan_hits == 2);
    runtime::EngineOptions off;
    off.merge_equal = false;
    auto q = train(s, runtime::Mode::Specialized, optim::Kind::Adagrad, 4, &plain, off);
    test::check_close(q, g);
    CHECK(plain.plan_misses == 1); // one skeleton: one plan for both
    CHECK(plain.plan_hits == 3);
  }

  TEST_CASE("a cached plan runs a new batch of the same skeleton with that batch's payloads") {
    Diagnostics d;
    auto m = std::make_shared<ir::Module>();
    REQUIRE(types::add_file(*m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d).ok);
    data::Vocab vocab;
    auto a = data::gen_sst(6, 9, data::Shape::Sst, vocab);
    auto b = a; // same shapes, other words and labels
    for (auto& t : b)
      for (auto& n : t.nodes) {
        if (n.word >= 0)
          n.word = (n.word * 13 + 5) % static_cast<int32_t>(vocab.size());
        if (n.label >= 0)
          n.label = (n.label + 2) % 5;
      }
    auto dims = interp::bind_dims(*m, {{"V", static_cast<int64_t>(vocab.size())}});
    runtime::TreeEncoder enc(*m, "Tree");
    auto batch = [&](const std::vector<data::ParseTree>& ts) {
      interp::Values xs;
      for (const auto& t : ts)
        xs.push_back(enc.encode(t));
      return interp::Value::list(xs);
    };
    runtime::EngineOptions eo;
    eo.mode = runtime::Mode::Specialized;
    runtime::Engine engine(m, dims, eo);
    interp::Params params = interp::init_params(*m, dims, 4);
    interp::Interpreter in(m, dims);
    auto ga = engine.value_and_grad("loss", batch(a), params);
    auto gb = engine.value_and_grad("loss", batch(b), params);
    CHECK(engine.stats().plan_hits == 1);
    CHECK(engine.stats().plan_misses == 1);
    auto ra = in.value_and_grad("loss", {batch(a)}, params);
    auto rb = in.value_and_grad("loss", {batch(b)}, params);
    CHECK(std::fabs(ga.loss - ra.loss) <= 1e-5 * std::fabs(ra.loss));
    CHECK(std::fabs(gb.loss - rb.loss) <= 1e-5 * std::fabs(rb.loss));
    CHECK(std::fabs(ga.loss - gb.loss) > 1e-3); // the payloads did change the result
  }

  TEST_CASE("a published plan keeps what running it reads and drops its instances") {
    Setup s(1);
    runtime::ChromeTrace trace(false);
    runtime::SpecializerService service(s.m, s.dims, true, nullptr, trace);
    auto make = [&] {
      runtime::PlanKey key = service.key("loss", s.batches[0]);
      std::string why;
      double secs = 0;
      auto e = service.make("loss", s.batches[0], key.slots, why, secs);
      REQUIRE_MESSAGE(e != nullptr, why);
      return e;
    };
    auto e = make();
    CHECK(e->residual.instances.empty());
    CHECK(e->residual.arg_pool.empty());
    CHECK(e->plan.group_of.empty());
    CHECK(e->plan.row_of.empty());
    CHECK_FALSE(e->plan.groups.empty());
    CHECK(e->layout.groups.size() == e->plan.groups.size());
    service.keep_instances(true); // for a caller that writes the instances out
    auto kept = make();
    CHECK_FALSE(kept->residual.instances.empty());
    CHECK(kept->plan.group_of.size() == kept->residual.instances.size());
    CHECK(kept->plan.groups.size() == e->plan.groups.size());
  }

  TEST_CASE("a batch run again with its facts keeps its plan past probation") {
    Setup s(4);
    runtime::EngineOptions eo;
    eo.mode = runtime::Mode::Specialized;
    eo.plan_probation_entries = 1;
    runtime::Engine engine(s.m, s.dims, eo);
    interp::Params params = interp::init_params(*s.m, s.dims, 4);
    const runtime::BatchFacts kept = engine.facts(s.batches[0]); // a scored set's batch
    CHECK(kept.repeats);
    const interp::Value first = engine.run("loss", s.batches[0], params, &kept);
    // Three other batches' plans, each pushing the one before it off probation.
    for (size_t b = 1; b < 4; ++b)
      engine.run("loss", s.batches[b], params);
    CHECK(engine.stats().plan_misses == 4);
    const interp::Value again = engine.run("loss", s.batches[0], params, &kept);
    CHECK(engine.stats().plan_misses == 4); // its plan was kept
    CHECK(engine.stats().plan_hits == 1);
    CHECK(std::memcmp(first.as_tensor().raw(), again.as_tensor().raw(), 4) == 0);
    // A batch run without facts is not known to come back: its plan went with probation.
    engine.run("loss", s.batches[1], params);
    CHECK(engine.stats().plan_misses == 5);
  }
}

} // namespace tests_runtime_engine_test
