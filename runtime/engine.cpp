// The dispatcher (engine.h): runs each batch on a plan (cached, or made now) or on the
// generic interpreter, and hands batches and kernel compiles to the background pipeline.
//
// The engine is a composition of small owners, each with its one lock: the plan cache
// (plan_cache.h), the specializer service with the template table and refusals
// (specializer_service.h), the pipeline (pipeline.h), the statistics (engine_stats.h) and the
// trace (chrome_trace.h); the runner cache and the kernel cache keep their own. This file
// holds no lock: a published plan is immutable, so the training thread runs it while the
// pipeline plans and compiles.
#include "runtime/engine.h"

#include "jit/kernel_cache.h"
#include "runtime/chrome_trace.h"
#include "runtime/engine_stats.h"
#include "runtime/fault_hooks.h"
#include "runtime/grad_ready.h"
#include "runtime/parallel.h"
#include "runtime/pipeline.h"
#include "runtime/plan_cache.h"
#include "runtime/plan_executor.h"
#include "runtime/runner_cache.h"
#include "runtime/specializer_service.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "src/interp/call_limit.h"
#include "src/util/check.h"

#include <chrono>
#include <deque>
#include <mutex>
#include <optional>

namespace pejit::runtime {

namespace {
// A batch deeper than an ordinary thread's stack holds is keyed, planned, run and freed on a
// thread whose stack fits its depth (interp/call_limit.h); any other runs here.
template <class F> decltype(auto) on_stack_for_depth(size_t depth, int max_depth, F&& fn) {
  interp::CallLimit limit = interp::CallLimit::of(max_depth, depth);
  return interp::with_call_limit(limit,
                                 [&](const interp::CallLimit&) -> decltype(auto) { return fn(); });
}
} // namespace

using Clock = std::chrono::steady_clock;
using interp::Value;

Mode parse_mode(const std::string& s) {
  if (s == "generic")
    return Mode::Generic;
  if (s == "specialized")
    return Mode::Specialized;
  if (s == "auto")
    return Mode::Auto;
  throw Error("unknown mode '" + s + "' (generic, specialized or auto)");
}

const char* mode_name(Mode m) {
  switch (m) {
  case Mode::Generic:
    return "generic";
  case Mode::Specialized:
    return "specialized";
  case Mode::Auto:
    return "auto";
  }
  return "?";
}

namespace {

// The kernel cache directory's store; null without one or without a JIT. A directory that
// cannot be used is an error (pejit::Error naming it), not a run without it.
std::shared_ptr<jit::ObjectStore> make_store(const EngineOptions& o) {
  if (!o.jit || !o.graphs || o.kernel_cache_dir.empty())
    return nullptr;
  return std::make_shared<jit::ObjectStore>(o.kernel_cache_dir, o.kernel_cache_max_bytes);
}

std::unique_ptr<jit::Jit> make_jit(const EngineOptions& o, std::shared_ptr<jit::ObjectStore> store,
                                   std::string& why) {
  if (!o.jit || !o.graphs)
    return nullptr;
  try {
    // No ORC pool: the pipeline's threads compile, one at a time.
    return std::make_unique<jit::Jit>(jit::JitOptions{0, std::move(store)});
  } catch (const std::exception& e) {
    why = e.what(); // no host target: plans run on reference kernels
    return nullptr;
  }
}

// In auto mode the training thread never waits for LLVM: templates run on reference kernels
// until the pipeline has compiled them.
ExecOptions exec_options(const EngineOptions& o, jit::KernelCache* kernels, RunnerCache* runners) {
  ExecOptions e{o.graphs, kernels, runners, o.mode != Mode::Auto};
  e.workers = o.workers.get();
  return e;
}

} // namespace

struct Engine::Impl {
  std::shared_ptr<const ir::Module> m;
  interp::DimBindings dims;
  EngineOptions opt;
  std::shared_ptr<const FaultHooks> faults; // null in production
  interp::Interpreter generic;
  std::string jit_disabled;
  std::shared_ptr<jit::ObjectStore> store; // --kernel-cache; null: none
  std::unique_ptr<jit::Jit> jit;
  std::unique_ptr<jit::KernelCache> kernels;
  std::unique_ptr<RunnerCache> runners; // template graphs, shared with the pipeline
  PlanExecutor exec;
  size_t templates_seen = 0; // exec's interpreted_templates passed on to stats
  ChromeTrace trace;
  StatsRecorder stats;
  SpecializerService specializer;
  PlanCache plans;
  // Facts of prefetched batches, each with its batch (which keeps the list's elements, whose
  // address is the key, from being reused while the entry lives); at most kKeptFacts, oldest
  // dropped.
  static constexpr size_t kKeptFacts = 64;
  std::mutex facts_mu;
  std::deque<std::pair<Value, std::shared_ptr<BatchFacts>>> kept_facts;
  // Last: its work uses the members above, so they outlive it. ~Impl stops it first anyway.
  std::unique_ptr<Pipeline> pipeline; // both planned modes

  Impl(std::shared_ptr<const ir::Module> mod, interp::DimBindings d, EngineOptions o,
       std::shared_ptr<const FaultHooks> f)
      : m(std::move(mod)), dims(std::move(d)), opt(std::move(o)), faults(std::move(f)),
        generic(m, dims, interp::InterpreterOptions{opt.max_depth}), store(make_store(opt)),
        jit(make_jit(opt, store, jit_disabled)),
        kernels(
            jit ? std::make_unique<jit::KernelCache>(*jit, opt.kernel_cache_entries, opt.schedules)
                : nullptr),
        runners(opt.graphs
                    ? std::make_unique<RunnerCache>(
                          m, dims, kernels.get(),
                          GraphRunner::CompileScope{opt.inference, !opt.inference && opt.workers &&
                                                                       opt.workers->threads() > 1})
                    : nullptr),
        exec(m, dims, exec_options(opt, kernels.get(), runners.get())),
        trace(!opt.trace_file.empty()),
        specializer(m, dims, opt.merge_equal, faults.get(), trace, opt.max_depth),
        plans(PlanCacheLimits{opt.plan_cache_entries, opt.plan_cache_bytes,
                              opt.plan_probation_entries}) {
    if (faults && runners && faults->corrupt_kernel_ir())
      runners->inject_compile_failure(true);
    // Both planned modes plan ahead in the background; auto also runs a plan on reference
    // kernels while its kernels compile, specialized compiles them before the plan's first run.
    if (opt.mode != Mode::Generic)
      pipeline = std::make_unique<Pipeline>(
          opt.lookahead, [this](const std::string& entry, const Value& batch) {
            // One walk (without recursion) finds the depth with the other facts.
            auto f = std::make_shared<BatchFacts>(facts_of(batch));
            on_stack_for_depth(f->depth, this->opt.max_depth,
                               [&] { plan_ahead(entry, batch, std::move(f)); });
          });
  }

  // The pipeline is stopped, and what it is running finished, before any member is destroyed
  // (a member declared after it by mistake would otherwise die while a plan still uses it).
  ~Impl() { pipeline.reset(); }

  bool compiles() const { return runners && runners->jit(); }

  // A claimed plan key (PlanCache::claim): published, or else abandoned when it goes.
  struct Claim {
    PlanCache& plans;
    uint64_t key;
    bool published = false;
    void publish(std::shared_ptr<const PlanEntry> e, int uses, bool repeats) {
      plans.publish(key, std::move(e), uses, repeats);
      published = true;
    }
    ~Claim() {
      if (!published)
        plans.abandon(key);
    }
  };

  // Whether a batch's plan is kept from its first use: its facts say it runs again (a scored
  // set's), or every batch of this engine's caller does (EngineOptions::batches_repeat).
  bool repeats(const BatchFacts* facts) const {
    return opt.batches_repeat || (facts && facts->repeats);
  }

  // The plan for `batch`: cached, or made now (counted); null with the reason when the batch
  // must run generic.
  std::shared_ptr<const PlanEntry> plan_for(const std::string& entry, const Value& batch,
                                            std::string& why, const BatchFacts* facts) {
    if (opt.mode == Mode::Generic) {
      why = "mode generic";
      return nullptr;
    }
    PlanKey key = facts ? specializer.key(entry, PlanKey{facts->key_hash, facts->slots})
                        : specializer.key(entry, batch);
    // A plan the pipeline is making now is waited for: making it here too would wait for the
    // specializer anyway (one plan at a time), and then do that work again.
    if (auto e = plans.use_or_claim(key.hash)) {
      stats.plan_hit();
      return e;
    }
    Claim claim{plans, key.hash};
    double s = 0;
    auto e = specializer.make(entry, batch, key.slots, why, s,
                              facts ? BatchKnown{facts->depth, facts->skeleton} : BatchKnown{});
    if (e)
      claim.publish(e, 1, repeats(facts));
    stats.plan_miss(s);
    return e;
  }

  // The pipeline's work for one prefetched batch: plan_known(). Its facts (BatchFacts) are
  // kept for the step that runs it (take_facts), which then need not walk the batch again on
  // the training thread.
  void plan_ahead(const std::string& entry, const Value& batch, std::shared_ptr<BatchFacts> f) {
    keep_facts(batch, f);
    plan_known(entry, batch, *f);
  }

  // Plans a batch whose facts are known unless its plan is cached or being made, publishes
  // the plan and compiles its kernels (the plan runs on reference kernels meanwhile).
  void plan_known(const std::string& entry, const Value& batch, const BatchFacts& f) {
    PlanKey key = specializer.key(entry, PlanKey{f.key_hash, f.slots});
    if (!plans.claim(key.hash))
      return;
    Claim claim{plans, key.hash};
    std::string why;
    double s = 0;
    auto e = specializer.make(entry, batch, key.slots, why, s, BatchKnown{f.depth, f.skeleton});
    if (!e)
      return; // that batch will be planned inline, or run generic
    claim.publish(e, 0, repeats(&f));
    stats.plan_prefetched(s);
    if (!e->compile_requested.exchange(true))
      compile_plan(*e);
  }

  // What running `batch` finds by walking it (once: SpecializerService::batch_part).
  BatchFacts facts_of(const Value& batch) const {
    BatchPart p = specializer.batch_part(batch);
    BatchFacts f;
    f.depth = p.depth;
    f.skeleton = p.skeleton;
    f.key_hash = p.key.hash;
    f.slots = std::move(p.key.slots);
    f.payloads = std::move(p.payloads);
    return f;
  }

  // The same list: the same elements at the same address (a view of other elements differs).
  static bool same_list(const Value& a, const Value& b) {
    return a.list_size() == b.list_size() && &a.list_at(0) == &b.list_at(0);
  }
  static bool keyable(const Value& batch) {
    return batch.kind() == Value::Kind::List && batch.list_size() > 0;
  }

  void keep_facts(const Value& batch, std::shared_ptr<BatchFacts> f) {
    if (!keyable(batch))
      return;
    std::lock_guard<std::mutex> lock(facts_mu);
    if (kept_facts.size() >= kKeptFacts)
      kept_facts.pop_front();
    kept_facts.emplace_back(batch, std::move(f));
  }

  // The facts the pipeline found for this very batch (the same list), taken; else null.
  // Once the pipeline is through with them the caller holds the only reference.
  std::shared_ptr<BatchFacts> take_facts(const Value& batch) {
    if (!keyable(batch))
      return nullptr;
    std::lock_guard<std::mutex> lock(facts_mu);
    for (auto it = kept_facts.begin(); it != kept_facts.end(); ++it)
      if (same_list(it->first, batch)) {
        auto f = std::move(it->second);
        kept_facts.erase(it);
        return f;
      }
    return nullptr;
  }

  // One batch of `entry` on the best path: `planned(plan, residual with this batch's payloads)`
  // or `generic()`, timed and counted per path (and per kernel tier).
  template <class Planned, class Generic>
  auto dispatch(const std::string& entry, const Value& batch, const char* what,
                const interp::RandomState& rs, Planned planned, Generic generic_run,
                const BatchFacts* facts = nullptr, std::vector<Tensor>* own_payloads = nullptr)
      -> decltype(generic_run()) {
    auto t0 = Clock::now();
    std::string why;
    std::shared_ptr<const PlanEntry> e = plan_for(entry, batch, why, facts);
    auto run_generic = [&] {
      if (opt.mode != Mode::Generic)
        stats.fallback(entry, why);
      auto out = generic_run();
      auto t1 = Clock::now();
      trace.add(std::string(what) + " " + entry + " (generic)", "execute", t0, t1);
      stats.generic_batch(t0, t1);
      return out;
    };
    if (!e) {
      // Specialized mode is the strict one: a batch that cannot be planned stops the run with
      // the reason rather than running generic unseen. Auto is the forgiving mode.
      if (opt.mode == Mode::Specialized)
        throw Error("--mode specialized: a batch of entry '" + entry + "' cannot be planned: " +
                    why + " (--mode auto runs such batches on the generic path)");
      return run_generic();
    }
    // A plan whose kernels failed to compile runs generic (counted, and the failure is
    // remembered: never compiled again). Specialized mode compiles before the first run so
    // that even that batch takes the generic path.
    if (compiles()) {
      if (opt.mode == Mode::Specialized && !e->compile_requested.exchange(true))
        compile_plan(*e);
      std::string failed = compile_failure(*e);
      if (!failed.empty()) {
        why = "kernel compile failed: " + failed;
        return run_generic();
      }
    }
    // Its kernels compile in the background (auto mode) if nobody has asked for them yet:
    // asked for before the run, so that the run's later groups find those ready (most are, as
    // kernels of templates compiled for other plans) rather than running all on reference
    // kernels, which for a large batch (a scoring pass over 500 trees) takes many times its
    // run on JIT kernels.
    if (pipeline && compiles() && !e->compile_requested.exchange(true))
      pipeline->background([this, e] { compile_plan(*e); });
    // The plan's constants and outputs with this batch's payloads. `own_payloads`: the
    // facts' payloads, which no one else reads, moved rather than copied (a copy is an atomic
    // increment on each payload's storage, and a decrement at the end).
    std::vector<Tensor> payloads;
    if (own_payloads)
      payloads = std::move(*own_payloads);
    else if (facts)
      payloads = facts->payloads;
    else
      specializer::batch_payloads(batch, payloads);
    specializer::Residual with_inputs =
        specializer::with_payloads(e->residual, std::move(payloads), rs);
    int64_t launches = exec.stats().jit_launches;
    int64_t interpreted_groups = exec.stats().groups_interpreted;
    double interpreted_seconds = exec.stats().interpreted_seconds;
    std::optional<decltype(generic_run())> planned_out;
    try {
      if (faults)
        faults->before_execute(entry);
      planned_out.emplace(planned(*e, with_inputs));
    } catch (const std::exception& ex) {
      // A failure while running the plan (a bug, or memory): this batch runs generic, counted.
      why = std::string("plan execution failed: ") + ex.what();
      if (opt.mode != Mode::Specialized)
        return run_generic();
      // Strict mode stops. The generic path runs the batch first, so that a fault of the
      // data (a bad label) is reported as the generic path reports it, with its location;
      // a plan that fails where the generic path does not is what stops the run.
      run_generic();
      throw Error("--mode specialized: the plan of a batch of entry '" + entry +
                  "' failed while running: " + ex.what() +
                  " (the generic path ran that batch; --mode auto falls back to it)");
    }
    auto t1 = Clock::now();
    bool on_jit = exec.stats().jit_launches > launches;
    trace.add(std::string(what) + " " + entry + (on_jit ? " (plan, jit)" : " (plan)"), "execute",
              t0, t1);
    note_compiles(); // specialized mode compiles inline, in this batch
    stats.planned_batch(entry, t0, t1, on_jit, exec.stats().groups_interpreted - interpreted_groups,
                        exec.stats().interpreted_seconds - interpreted_seconds);
    const auto& interpreted = exec.stats().interpreted_templates; // each once, in order
    for (; templates_seen < interpreted.size(); ++templates_seen)
      stats.interpreted_template(interpreted[templates_seen]);
    // The pipeline's references to the payloads (walk_batch took them) are dropped where it
    // took them: their storage headers are in that core's cache, and a decrement here would
    // fetch each one.
    if (pipeline && own_payloads != nullptr && !with_inputs.inputs.empty())
      pipeline->background([v = std::move(with_inputs.inputs)]() mutable { v.clear(); });
    return std::move(*planned_out);
  }

  // "template: reason" for the first template of `e` whose compile failed, else empty.
  std::string compile_failure(const PlanEntry& e) const {
    for (const auto& g : e.plan.groups)
      if (g.tmpl >= 0)
        if (std::string f = runners->failure(e.templates->at(g.tmpl)); !f.empty())
          return f;
    return {};
  }

  // Builds and compiles the template graphs a plan uses (pipeline threads; the training
  // thread in specialized mode, before the plan's first run).
  void compile_plan(const PlanEntry& e) {
    if (!compiles())
      return;
    if (faults)
      faults->before_compile(e.entry);
    auto t0 = Clock::now();
    std::vector<bool> seen(e.templates->size(), false);
    for (const auto& g : e.plan.groups)
      if (g.tmpl >= 0 && !seen[static_cast<size_t>(g.tmpl)]) {
        seen[static_cast<size_t>(g.tmpl)] = true;
        runners->get(e.templates->at(g.tmpl), true);
      }
    trace.add("compile " + e.entry, "compile", t0, Clock::now());
    note_compiles();
  }

  // The templates of the tensor-only functions, at their declared shapes (session start).
  void compile_static_templates() {
    auto t0 = Clock::now();
    try {
      if (faults)
        faults->before_compile("");
      for (const auto& t : specializer::static_templates(*m, dims))
        runners->get(t, true);
    } catch (const std::exception&) {
      // Best effort: the plans' own templates compile with them (compile_plan).
    }
    trace.add("compile static templates", "compile", t0, Clock::now());
    note_compiles();
  }

  // Records when the kernel cache's compile count last grew (EngineStats::last_compile_s).
  void note_compiles() {
    if (kernels) {
      auto ks = kernels->stats();
      stats.compiles(ks.compiles + ks.loaded); // a kernel linked from the store is ready too
    }
  }
};

Engine::Engine(std::shared_ptr<const ir::Module> m, interp::DimBindings dims, EngineOptions opt,
               std::shared_ptr<const FaultHooks> faults)
    : impl_(std::make_unique<Impl>(std::move(m), std::move(dims), std::move(opt),
                                   std::move(faults))) {
  Impl& I = *impl_;
  // The templates known before any batch start compiling now, in the background (auto).
  if (I.pipeline && I.compiles())
    I.pipeline->background([&I] { I.compile_static_templates(); });
}

Engine::~Engine() = default;

const EngineOptions& Engine::options() const {
  return impl_->opt;
}

interp::Interpreter::Gradients Engine::value_and_grad(const std::string& entry, const Value& batch,
                                                      const interp::Params& params,
                                                      GradReady* ready) {
  Impl& I = *impl_;
  interp::RandomState rs = I.generic.random(); // a training step: dropout on
  rs.train = true;
  const std::shared_ptr<BatchFacts> facts = I.pipeline ? I.take_facts(batch) : nullptr;
  const size_t depth = facts ? facts->depth : interp::nesting_depth(batch);
  // Facts the pipeline is still planning with stay as they are (it reads the key's parts).
  std::vector<Tensor>* own_payloads = facts && facts.use_count() == 1 ? &facts->payloads : nullptr;
  auto g = on_stack_for_depth(depth, I.opt.max_depth, [&] {
    return I.dispatch(
        entry, batch, "step", rs,
        [&](const PlanEntry& e, const specializer::Residual& r) {
          return I.exec.value_and_grad(e.plan, r, *e.templates, params, &e.layout, ready);
        },
        [&] {
          if (ready != nullptr)
            ready->restart(); // after a failed plan run, what it announced is void
          return I.generic.value_and_grad(entry, {batch}, params);
        },
        facts.get(), own_payloads);
  });
  rs.step++;
  I.generic.set_random(rs);
  I.stats.grad_batch();
  return g;
}

void Engine::set_random(uint64_t seed, uint32_t step) {
  impl_->generic.set_random(interp::RandomState{seed, step, true});
}

interp::RandomState Engine::random() const {
  return impl_->generic.random();
}

Value Engine::run(const std::string& entry, const Value& batch, const interp::Params& params,
                  const BatchFacts* facts) {
  Impl& I = *impl_;
  interp::RandomState rs = I.generic.random(); // inference: dropout off
  rs.train = false;
  const size_t depth = facts ? facts->depth : interp::nesting_depth(batch);
  return on_stack_for_depth(depth, I.opt.max_depth, [&] {
    return I.dispatch(
        entry, batch, "run", rs,
        [&](const PlanEntry& e, const specializer::Residual& r) {
          return specializer::build_result(e.residual.result_shape,
                                           I.exec.run(e.plan, r, *e.templates, params, &e.layout));
        },
        [&] { return I.generic.run(entry, {batch}, params); }, facts);
  });
}

BatchFacts Engine::facts(const Value& batch) const {
  BatchFacts f = impl_->facts_of(batch);
  f.repeats = true;
  return f;
}

void Engine::prefetch(const std::string& entry, std::vector<Value> batches) {
  if (impl_->pipeline)
    impl_->pipeline->prefetch(entry, std::move(batches));
}

void Engine::prefetch(const std::string& entry, const Value& batch,
                      std::shared_ptr<const BatchFacts> facts) {
  Impl& I = *impl_;
  if (!I.pipeline)
    return;
  I.pipeline->background([&I, entry, batch, f = std::move(facts)] {
    on_stack_for_depth(f->depth, I.opt.max_depth, [&] { I.plan_known(entry, batch, *f); });
  });
}

void Engine::later(std::function<void()> task) {
  if (impl_->pipeline)
    impl_->pipeline->background(std::move(task));
  else
    task();
}

void Engine::drain() {
  if (impl_->pipeline)
    impl_->pipeline->drain();
}

void Engine::invalidate(const std::vector<std::string>& entries) {
  // Keys include the entry's cone version, so stale plans can never be hit again; dropping
  // them frees their memory now. Plans of other entries stay.
  impl_->specializer.forget(entries);
  impl_->plans.drop_entries(entries);
}

size_t Engine::cached_plans(const std::string& entry) const {
  return impl_->plans.count(entry);
}

std::string Engine::explain(const std::string& entry) const {
  return impl_->stats.explain(entry);
}

EngineStats Engine::stats() const {
  EngineStats st = impl_->stats.snapshot();
  st.plan_evictions = impl_->plans.evictions();
  if (impl_->kernels) {
    auto ks = impl_->kernels->stats();
    st.kernels_compiled = static_cast<int64_t>(ks.compiles);
    st.kernels_cached = static_cast<int64_t>(ks.loaded);
    st.kernel_evictions = static_cast<int64_t>(ks.evictions);
    st.compile_ms = ks.compile_ms;
  }
  st.jit_disabled = impl_->jit_disabled;
  if (impl_->jit && impl_->opt.schedules)
    st.schedule_warning = impl_->opt.schedules->cpu_warning(impl_->jit->target_cpu());
  if (impl_->runners)
    st.compile_failures = impl_->runners->compile_failures();
  return st;
}

std::vector<EngineKernel> Engine::kernels() const {
  std::vector<EngineKernel> out;
  if (impl_->kernels)
    for (const auto& k : impl_->kernels->entries()) {
      EngineKernel e;
      e.signature = k->key;
      e.ir_hash = k->ir_hash;
      e.schedule = k->schedule;
      e.schedule_source = k->schedule_source;
      e.compile_ms = k->compile_ms;
      e.cached = k->loaded;
      std::visit([&](const auto& f) { e.spec = f.spec; }, k->family);
      out.push_back(std::move(e));
    }
  return out;
}

void Engine::write_trace() const {
  if (!impl_->opt.trace_file.empty())
    impl_->trace.write(impl_->opt.trace_file);
}

} // namespace pejit::runtime
