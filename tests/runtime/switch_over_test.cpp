// An `auto` run is fixed by its seed whatever the moment its JIT kernels arrive: a whole run
// (training losses, dev losses, logits and predictions after every epoch, final parameters)
// with its kernels compiled before the first batch, with the switch-over forced at chosen
// batches (FaultHooks::before_compile holds every compile back until the training loop lets
// it go), with kernels that never arrive, and on reference kernels only: the same bits.
#include "runtime/data/synthetic.h"
#include "runtime/engine.h"
#include "runtime/fault_hooks.h"
#include "runtime/optim/optimizer.h"
#include "runtime/train/encode.h"
#include "src/types/check.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace tests_runtime_switch_over_test {

using namespace pejit;

namespace {

constexpr int kTrees = 5; // per batch

// The classifier's logits at each root, beside the model's own entries: the dev metrics are
// compared through the values they are computed from, not only through argmaxes.
constexpr const char* kRootLogits = R"(
entry root_logits(batch: List[Tree]) -> List[f32[5]] {
  map(fn t => logits(encode(t).0), batch)
}
)";

struct Data {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  std::vector<interp::Value> train, dev;

  Data(size_t train_batches, size_t dev_batches) {
    Diagnostics d;
    REQUIRE(types::add_file(*m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d).ok);
    REQUIRE_MESSAGE(types::add_source(*m, kRootLogits, "root_logits.pe", d).ok, d.render());
    data::Vocab vocab;
    auto trees = data::gen_sst((train_batches + dev_batches) * kTrees, 11, data::Shape::Sst, vocab);
    dims = interp::bind_dims(*m, {{"V", static_cast<int64_t>(vocab.size())}});
    runtime::TreeEncoder enc(*m, "Tree");
    for (size_t b = 0; b < train_batches + dev_batches; ++b) {
      interp::Values xs;
      for (size_t i = b * kTrees; i < (b + 1) * kTrees; ++i)
        xs.push_back(enc.encode(trees[i]));
      (b < train_batches ? train : dev).push_back(interp::Value::list(xs));
    }
  }
};

// Holds every kernel compile back (the pipeline's thread waits in before_compile) until
// release(); counts the compiles that waited.
class HoldCompiles : public runtime::FaultHooks {
public:
  void before_compile(const std::string&) const override {
    std::unique_lock<std::mutex> lock(mu_);
    ++held_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return released_; });
  }
  /// Waits until a compile is held (the pipeline's thread may not have reached one yet).
  bool wait_held() const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [this] { return held_ > 0; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int held_ = 0;
  bool released_ = false;
};

// Releases the hold when it goes out of scope, before the engine (declared earlier) waits
// for its pipeline: a failed REQUIRE in the loop must not leave the test hanging.
struct ReleaseAtExit {
  HoldCompiles* h;
  ~ReleaseAtExit() {
    if (h)
      h->release();
  }
};

enum class Switch { Before, AtStep, Never, NoJit };

struct Run {
  std::vector<float> losses, dev_losses, logits;
  std::vector<int32_t> node_preds;
  interp::Params params;
  runtime::EngineStats stats;
};

void append_floats(std::vector<float>& out, const Tensor& t) {
  out.insert(out.end(), t.f32(), t.f32() + t.numel());
}

// Every dev batch through `loss`, `root_logits` and `infer_nodes` (what the trainer's dev
// metrics are made of).
void evaluate(runtime::Engine& engine, const Data& d, const interp::Params& params, Run& r) {
  for (const auto& b : d.dev) {
    r.dev_losses.push_back(engine.run("loss", b, params).as_tensor().item_f32());
    interp::Value lg = engine.run("root_logits", b, params);
    for (size_t i = 0; i < lg.list_size(); ++i)
      append_floats(r.logits, lg.list_at(i).as_tensor());
    interp::Value np = engine.run("infer_nodes", b, params);
    for (size_t i = 0; i < np.list_size(); ++i)
      for (size_t j = 0; j < np.list_at(i).list_size(); ++j)
        r.node_preds.push_back(np.list_at(i).list_at(j).as_tensor().i32()[0]);
  }
}

// `epochs` epochs of Adagrad over the training batches (a different order each epoch), the
// dev set evaluated after each. `at`: the step at which held compiles are let go (Switch::AtStep).
Run train(const Data& d, Switch sw, int epochs, int at = -1) {
  runtime::EngineOptions eo;
  eo.mode = runtime::Mode::Auto;
  eo.jit = sw != Switch::NoJit;
  auto hold = std::make_shared<HoldCompiles>();
  bool holding = sw == Switch::AtStep || sw == Switch::Never;
  runtime::Engine engine(d.m, d.dims, eo, holding ? hold : nullptr);
  ReleaseAtExit guard{hold.get()};
  // What the trainer hands the pipeline, dev batches included.
  engine.prefetch("loss", d.train);
  for (const char* entry : {"loss", "root_logits", "infer_nodes"})
    engine.prefetch(entry, d.dev);
  if (sw == Switch::Before)
    engine.drain(); // every prefetched plan made and its kernels compiled

  Run r;
  r.params = interp::init_params(*d.m, d.dims, 7);
  optim::Optimizer opt(optim::OptimizerOptions{});
  const size_t n = d.train.size();
  int step = 0;
  for (int e = 0; e < epochs; ++e) {
    for (size_t i = 0; i < n; ++i, ++step) {
      if (step == at) {
        // The switch-over: before it no batch ran on JIT kernels; every compile waited.
        auto st = engine.stats();
        CHECK(st.jit_batches == 0);
        CHECK(st.kernels_compiled == 0);
        CHECK(hold->wait_held());
        hold->release();
        engine.drain(); // every plan made so far compiled: from here on, JIT kernels
        st = engine.stats();
        CHECK(st.kernels_compiled > 0);
        r.stats.specialized_batches = st.specialized_batches; // batches before the switch
      }
      const interp::Value& b = d.train[(i * 3 + static_cast<size_t>(e)) % n]; // 3 and n coprime
      auto g = engine.value_and_grad("loss", b, r.params);
      r.losses.push_back(g.loss);
      opt.step(r.params, g.grads);
    }
    evaluate(engine, d, r.params, r);
  }
  int64_t before_switch = r.stats.specialized_batches;
  if (sw == Switch::Never)
    CHECK(hold->wait_held());
  r.stats = engine.stats();
  hold->release();
  engine.drain();
  const int64_t batches =
      static_cast<int64_t>(step) + epochs * 3 * static_cast<int64_t>(d.dev.size());
  CHECK(r.stats.specialized_batches == batches);
  CHECK(r.stats.generic_batches == 0);
  switch (sw) {
  case Switch::Before:
    CHECK(r.stats.jit_batches == batches);
    break;
  case Switch::AtStep:
    CHECK(r.stats.jit_batches == batches - before_switch);
    break;
  case Switch::Never:
  case Switch::NoJit:
    CHECK(r.stats.jit_batches == 0);
    break;
  }
  return r;
}

void check_same(const Run& got, const Run& ref) {
#ifdef __AVX512F__
  CHECK(test::same_bits(got.losses, ref.losses));
  CHECK(test::same_bits(got.dev_losses, ref.dev_losses));
  CHECK(test::same_bits(got.logits, ref.logits));
  CHECK(got.node_preds == ref.node_preds);
  REQUIRE(got.params.names == ref.params.names);
  for (size_t p = 0; p < got.params.values.size(); ++p) {
    CAPTURE(got.params.names[p]);
    CHECK(test::same_bits(got.params.values[p], ref.params.values[p]));
  }
#else
  // Without AVX-512 the reference GEMMs sum in another order than the JIT's (plan_test's
  // "the same bits"): the runs agree up to rounding only.
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i)
    CHECK(test::loss_close(got.losses[i], ref.losses[i], 1e-4));
  test::check_close(got.params, ref.params);
#endif
}

// Records the entries whose kernels the engine is asked to compile; before a plan of an entry
// runs, waits (up to 30 s: the pipeline's thread may still be compiling the templates known
// at the start) for that entry's compile to have been asked for, and records whether it was.
class CompileBeforeRun : public runtime::FaultHooks {
public:
  void before_compile(const std::string& entry) const override {
    std::lock_guard<std::mutex> lock(mu_);
    asked_.insert(entry);
    cv_.notify_all();
  }
  void before_execute(const std::string& entry) const override {
    std::unique_lock<std::mutex> lock(mu_);
    bool asked =
        cv_.wait_for(lock, std::chrono::seconds(30), [&] { return asked_.count(entry) > 0; });
    first_run_.emplace(entry, asked); // the entry's first run only
  }
  /// Whether the compile of `entry`'s kernels had been asked for when its first run began.
  std::optional<bool> asked_before_first_run(const std::string& entry) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = first_run_.find(entry);
    return it == first_run_.end() ? std::nullopt : std::optional<bool>(it->second);
  }

private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::set<std::string> asked_;
  mutable std::map<std::string, bool> first_run_;
};

} // namespace

TEST_SUITE("engine") {
  TEST_CASE("auto: a new plan's kernels are asked for before its first run, not after it") {
    // A plan made inline (nothing prefetched) runs while the pipeline compiles its kernels:
    // asked for before the run, the groups that find them ready run on them; asked for after
    // it, a large batch (a scoring pass over 500 trees) ran wholly on reference kernels.
    Data d(1, 1);
    runtime::EngineOptions eo;
    eo.mode = runtime::Mode::Auto;
    auto hooks = std::make_shared<CompileBeforeRun>();
    runtime::Engine engine(d.m, d.dims, eo, hooks);
    interp::Params params = interp::init_params(*d.m, d.dims, 7);
    (void)engine.value_and_grad("loss", d.train[0], params);
    (void)engine.run("infer_nodes", d.dev[0], params);
    engine.drain();
    CHECK(hooks->asked_before_first_run("loss") == std::optional<bool>(true));
    CHECK(hooks->asked_before_first_run("infer_nodes") == std::optional<bool>(true));
  }

  TEST_CASE("auto: the switch-over to JIT kernels at any batch, or never, gives the same bits") {
    Data d(6, 2);
    const int epochs = 3;
    Run before = train(d, Switch::Before, epochs);
    REQUIRE(before.losses.size() == 18);
    struct Case {
      const char* name;
      Switch sw;
      int at;
    };
    for (Case c :
         {Case{"at step 0", Switch::AtStep, 0}, Case{"mid-epoch 1", Switch::AtStep, 3},
          Case{"mid-epoch 2, after a dev pass on reference kernels", Switch::AtStep, 10},
          Case{"never (JIT never ready)", Switch::Never, -1}, Case{"no JIT", Switch::NoJit, -1}}) {
      CAPTURE(c.name);
      check_same(train(d, c.sw, epochs, c.at), before);
    }
  }
}

} // namespace tests_runtime_switch_over_test
