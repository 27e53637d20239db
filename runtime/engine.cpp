// The dispatcher, the plan cache and the background specialization pipeline (engine.h).
//
// Sharing: a published plan (PlanEntry) is immutable and holds a snapshot of the template
// table (copied only when the table has grown since the last plan; it is append-only), so
// the training thread can run it while the pipeline interns new templates. The template table and
// the partial evaluator are used under one lock (pe_mutex_); the plan cache, the queue and the
// statistics each have their own.
#include "runtime/engine.h"

#include "runtime/graph_runner.h"
#include "jit/kernel_cache.h"
#include "runtime/plan_executor.h"
#include "runtime/runner_cache.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "src/util/check.h"

#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <list>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace pejit::runtime {

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

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// A plan with what running it needs besides the batch's payloads.
struct PlanEntry {
  std::string entry;
  specializer::Residual residual; ///< instances, constants, outputs; inputs cleared
  specializer::Plan plan;
  ExecLayout layout; ///< the executor's index maps and arena offsets
  /// Set once a background compile of this plan's templates has been asked for.
  mutable std::atomic<bool> compile_requested{false};
  /// A snapshot of the template table (shared by the plans made while it did not grow).
  std::shared_ptr<const specializer::TemplateTable> templates;
  size_t bytes = 0;
};

// Chrome trace events (chrome://tracing, Perfetto), recorded from any thread.
class Trace {
public:
  explicit Trace(bool on) : on_(on), t0_(Clock::now()) {}
  void add(const std::string& name, const char* cat, Clock::time_point a, Clock::time_point b) {
    if (!on_)
      return;
    std::lock_guard<std::mutex> lock(mu_);
    auto tid = std::hash<std::thread::id>{}(std::this_thread::get_id());
    auto [it, fresh] = tids_.emplace(tid, static_cast<int>(tids_.size()) + 1);
    events_.push_back({name, cat, std::chrono::duration<double, std::micro>(a - t0_).count(),
                       std::chrono::duration<double, std::micro>(b - a).count(), it->second});
  }
  void write(const std::string& path) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp);
      f << "{\"traceEvents\":[";
      bool first = true;
      for (const auto& [tid, n] : tids_) {
        f << (first ? "" : ",") << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << n
          << ",\"args\":{\"name\":\"" << (n == 1 ? "training loop" : "thread") << " " << n
          << "\"}}";
        first = false;
      }
      for (const auto& e : events_) {
        f << (first ? "" : ",") << "{\"name\":\"" << e.name << "\",\"cat\":\"" << e.cat
          << "\",\"ph\":\"X\",\"ts\":" << e.ts << ",\"dur\":" << e.dur
          << ",\"pid\":1,\"tid\":" << e.tid << "}";
        first = false;
      }
      f << "]}\n";
      if (!f)
        throw Error("cannot write trace '" + path + "'");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error("cannot write trace '" + path + "'");
  }

private:
  struct Event {
    std::string name;
    const char* cat;
    double ts, dur;
    int tid;
  };
  bool on_;
  Clock::time_point t0_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::unordered_map<size_t, int> tids_;
};

} // namespace

std::unique_ptr<jit::Jit> make_jit(const EngineOptions& o, std::string& why) {
  if (!o.jit || !o.graphs)
    return nullptr;
  try {
    // No ORC pool: the pipeline's threads compile, one at a time (docs/architecture.md).
    return std::make_unique<jit::Jit>(jit::JitOptions{0});
  } catch (const std::exception& e) {
    why = e.what(); // no host target: plans run on reference kernels
    return nullptr;
  }
}

struct Engine::Impl {
  std::shared_ptr<const ir::Module> m;
  interp::DimBindings dims;
  EngineOptions opt;
  interp::Interpreter generic;
  std::unique_ptr<jit::Jit> jit;
  std::unique_ptr<jit::KernelCache> kernels;
  std::string jit_disabled;
  std::unique_ptr<RunnerCache> runners; // template graphs, shared with the pipeline
  PlanExecutor exec;
  Trace trace;

  // Partial evaluation and the template table: one at a time.
  std::mutex pe_mutex;
  specializer::TemplateTable templates;
  std::shared_ptr<const specializer::TemplateTable> snapshot; // of `templates`, under pe_mutex

  // The plan cache over skeleton keys (key_of: with merge_equal, the pattern of equal
  // payloads too), 2Q style: a new plan waits on a short probation list
  // (EngineOptions::plan_probation_entries, oldest out first) and its second use moves it to
  // the LRU list of reused plans (plan_cache_entries, plan_cache_bytes). Shuffled batches,
  // whose skeletons almost never repeat, so occupy only the probation list. A key that left
  // probation unused is remembered (ghosts): if its plan is made again it goes straight to
  // the LRU list, so passes that repeat less often than probation turns over (evaluation each
  // epoch, fixed batches) are kept from their second pass on.
  mutable std::mutex cache_mutex;
  std::list<uint64_t> lru, probation; // most recent first
  struct Slot {
    std::shared_ptr<const PlanEntry> entry;
    std::list<uint64_t>::iterator pos;
    bool reused = false; ///< on the LRU list (else on probation)
    int uses = 0;
  };
  std::unordered_map<uint64_t, Slot> cache;
  size_t cache_bytes = 0;
  std::unordered_set<uint64_t> ghosts; // keys that left probation unused, oldest first:
  std::deque<uint64_t> ghost_order;    // bounded by kGhosts
  static constexpr size_t kGhosts = size_t{1} << 16;

  void drop(std::unordered_map<uint64_t, Slot>::iterator it) { // cache_mutex held
    cache_bytes -= it->second.entry->bytes;
    (it->second.reused ? lru : probation).erase(it->second.pos);
    cache.erase(it);
  }

  // Refusals by entry: the cone version they were made at, and why.
  struct Refusal {
    uint64_t cone;
    std::string why;
  };
  std::map<std::string, Refusal> refused;     // under pe_mutex
  std::mutex cone_mutex;                      // the training thread must not wait for a PE
  std::map<std::string, uint64_t> cone_cache; // entry -> cone version, under cone_mutex
  uint64_t cone_generation = ~0ull;

  const Clock::time_point started = Clock::now();
  mutable std::mutex stats_mutex;
  EngineStats stats;
  uint64_t compiles_seen = 0; ///< kernel cache compiles at the last note_compiles(), stats_mutex

  // Records when the kernel cache's compile count last grew (EngineStats::last_compile_s).
  void note_compiles() {
    if (!kernels)
      return;
    uint64_t n = kernels->stats().compiles;
    std::lock_guard<std::mutex> s(stats_mutex);
    if (n > compiles_seen) {
      compiles_seen = n;
      stats.last_compile_s = secs(started, Clock::now());
    }
  }
  std::map<std::string, std::string> last_explain;

  // The pipeline.
  std::unique_ptr<tbb::task_arena> arena;
  tbb::task_group group;
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<std::pair<std::string, Value>> queue;
  size_t outstanding = 0;
  bool running = false;

  Impl(std::shared_ptr<const ir::Module> mod, interp::DimBindings d, EngineOptions o)
      : m(std::move(mod)), dims(std::move(d)), opt(std::move(o)), generic(m, dims),
        jit(make_jit(opt, jit_disabled)),
        kernels(
            jit ? std::make_unique<jit::KernelCache>(*jit, opt.kernel_cache_entries, opt.schedules)
                : nullptr),
        runners(opt.graphs ? std::make_unique<RunnerCache>(m, dims, kernels.get()) : nullptr),
        exec(m, dims,
             // In auto mode the training thread never waits for LLVM: templates run on
             // reference kernels until the pipeline has compiled them.
             ExecOptions{opt.graphs, kernels.get(), runners.get(), opt.mode != Mode::Auto}),
        trace(!opt.trace_file.empty()) {
    // Background work is enqueued (task_arena::enqueue), not spawned: TBB then guarantees it
    // a thread even where it has no worker (one core, taskset -c 0), so compilation starts
    // with the session and the pipeline plans ahead while training runs; the OS shares the
    // core between them.
    if (opt.mode == Mode::Auto)
      arena = std::make_unique<tbb::task_arena>(1, 0, tbb::task_arena::priority::low);
  }

  uint64_t cone_version(const std::string& entry) {
    std::lock_guard<std::mutex> lock(cone_mutex);
    if (cone_generation != m->generation()) {
      cone_cache.clear();
      cone_generation = m->generation();
    }
    auto it = cone_cache.find(entry);
    if (it != cone_cache.end())
      return it->second;
    return cone_cache[entry] = m->cone_version(entry);
  }

  // The plan key of `batch`: its skeleton, the entry, definitions and dims, and with
  // merge_equal which of its payloads are equal (`slots`: equal_payload_slots, filled here),
  // on which a merged plan depends.
  uint64_t key_of(const std::string& entry, const Value& batch, uint64_t cone,
                  std::vector<int32_t>& slots) const {
    uint64_t h = specializer::skeleton_hash(batch);
    if (opt.merge_equal) {
      slots = specializer::equal_payload_slots(batch);
      h = mix(h, specializer::payload_pattern_hash(slots));
    }
    for (char c : entry)
      h = mix(h, static_cast<uint8_t>(c));
    h = mix(h, cone);
    for (const auto& [n, s] : dims) {
      for (char c : n)
        h = mix(h, static_cast<uint8_t>(c));
      h = mix(h, static_cast<uint64_t>(s));
    }
    return h;
  }

  // The cached plan for `key`; `use`: a batch is about to run it (counts towards promotion),
  // else the pipeline only asks whether it exists.
  std::shared_ptr<const PlanEntry> lookup(uint64_t key, bool use) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(key);
    if (it == cache.end())
      return nullptr;
    Slot& slot = it->second;
    std::shared_ptr<const PlanEntry> entry = slot.entry; // evict() below may drop the slot
    if (use && slot.reused) {
      lru.splice(lru.begin(), lru, slot.pos);
    } else if (use && ++slot.uses >= 2) { // a second use: off probation
      probation.erase(slot.pos);
      lru.push_front(key);
      slot.pos = lru.begin();
      slot.reused = true;
      evict();
    } else if (use) { // a plan made ahead ran: it may leave probation now
      evict();
    }
    return entry;
  }

  // `uses`: 1 for a plan made for the batch that runs it now, 0 for one made ahead.
  void publish(uint64_t key, std::shared_ptr<const PlanEntry> e, int uses) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cache.count(key))
      return;
    cache_bytes += e->bytes;
    bool ghost = ghosts.erase(key) > 0;
    auto& list = ghost ? lru : probation;
    list.push_front(key);
    cache.emplace(key, Slot{std::move(e), list.begin(), ghost, uses});
    evict();
  }

  void evict() { // cache_mutex held
    int64_t evicted = 0;
    auto over_bytes = [&] { return cache_bytes > opt.plan_cache_bytes; };
    while (!probation.empty() && (probation.size() > opt.plan_probation_entries || over_bytes())) {
      // The oldest plan that has run; plans made ahead wait for their batch (unless the
      // byte bound is hit), however far ahead a caller prefetched.
      auto v = std::find_if(probation.rbegin(), probation.rend(),
                            [&](uint64_t k) { return cache.find(k)->second.uses > 0; });
      if (v == probation.rend() && !over_bytes())
        break;
      uint64_t victim = v == probation.rend() ? probation.back() : *v;
      drop(cache.find(victim));
      if (ghosts.insert(victim).second)
        ghost_order.push_back(victim);
      while (ghost_order.size() > kGhosts) {
        ghosts.erase(ghost_order.front());
        ghost_order.pop_front();
      }
      ++evicted;
    }
    while (!lru.empty() && (lru.size() > opt.plan_cache_entries || over_bytes())) {
      drop(cache.find(lru.back()));
      ++evicted;
    }
    if (evicted) {
      std::lock_guard<std::mutex> s(stats_mutex);
      stats.plan_evictions += evicted;
    }
  }

  // Partially evaluates and plans; nullptr with `why` on a refusal or a failure.
  std::shared_ptr<const PlanEntry> make(const std::string& entry, const Value& batch, uint64_t key,
                                        const std::vector<int32_t>& slots, std::string& why,
                                        double& seconds) {
    auto t0 = Clock::now();
    std::lock_guard<std::mutex> lock(pe_mutex);
    uint64_t cone = cone_version(entry);
    auto r = refused.find(entry);
    if (r != refused.end() && r->second.cone == cone) {
      why = r->second.why;
      return nullptr;
    }
    try {
      if (opt.inject_failure == "pe")
        throw InternalError("injected failure in partial evaluation");
      // The executor reads this batch's payloads from the batch itself (batch_payloads):
      // partial evaluation only numbers them.
      specializer::PeOptions pe_opt;
      pe_opt.keep_inputs = false;
      auto pe = specializer::partially_evaluate(*m, dims, entry, batch, templates, pe_opt);
      if (!pe.ok) {
        why = "refused at " + pe.where.str() + ": " + pe.reason;
        refused[entry] = {cone, why};
        return nullptr;
      }
      if (opt.merge_equal)
        specializer::merge_equal_instances(pe.residual, slots);
      auto e = std::make_shared<PlanEntry>();
      e->entry = entry;
      if (opt.inject_failure == "plan")
        throw InternalError("injected failure in planning");
      e->plan = specializer::make_plan(pe.residual, templates);
      e->residual = std::move(pe.residual);
      e->residual.inputs.clear();
      e->layout = make_layout(e->plan);
      if (!snapshot || snapshot->size() != templates.size())
        snapshot = std::make_shared<const specializer::TemplateTable>(templates);
      e->templates = snapshot;
      e->bytes = sizeof(PlanEntry) + e->residual.instances.size() * 64 +
                 e->plan.groups.size() * 256 + e->layout.bytes();
      seconds = secs(t0, Clock::now());
      trace.add("plan " + entry, "specialize", t0, Clock::now());
      (void)key;
      return e;
    } catch (const std::exception& ex) {
      why = std::string("specialization failed: ") + ex.what();
      return nullptr;
    }
  }

  // The plan for `batch`: cached, or made now (counted); null with the reason when the batch
  // must run generic.
  std::shared_ptr<const PlanEntry> plan_for(const std::string& entry, const Value& batch,
                                            std::string& why) {
    if (opt.mode == Mode::Generic) {
      why = "mode generic";
      return nullptr;
    }
    std::vector<int32_t> slots;
    uint64_t key = key_of(entry, batch, cone_version(entry), slots);
    if (auto e = lookup(key, true)) {
      std::lock_guard<std::mutex> st(stats_mutex);
      stats.plan_hits++;
      return e;
    }
    double s = 0;
    auto e = make(entry, batch, key, slots, why, s);
    if (e)
      publish(key, e, 1);
    std::lock_guard<std::mutex> st(stats_mutex);
    stats.plan_misses++;
    stats.plan_seconds += s;
    return e;
  }

  // One batch of `entry` on the best path: `planned(plan, residual with this batch's payloads)`
  // or `generic()`, timed and counted per path (and per kernel tier).
  template <class Planned, class Generic>
  auto dispatch(const std::string& entry, const Value& batch, const char* what, Planned planned,
                Generic generic) -> decltype(generic()) {
    auto t0 = Clock::now();
    std::string why;
    std::shared_ptr<const PlanEntry> e = plan_for(entry, batch, why);
    auto run_generic = [&] {
      if (opt.mode != Mode::Generic)
        count_fallback(entry, why);
      auto out = generic();
      auto t1 = Clock::now();
      trace.add(std::string(what) + " " + entry + " (generic)", "execute", t0, t1);
      std::lock_guard<std::mutex> s(stats_mutex);
      stats.generic_batches++;
      stats.generic_seconds += secs(t0, t1);
      return out;
    };
    if (!e)
      return run_generic();
    // Failure policy: a plan whose kernels failed to compile runs generic (counted, and the
    // failure is remembered: never compiled again). Specialized mode compiles before the
    // first run so that even that batch takes the generic path.
    if (runners && runners->jit()) {
      if (opt.mode == Mode::Specialized && !e->compile_requested.exchange(true))
        compile_plan(*e);
      std::string failed = compile_failure(*e);
      if (!failed.empty()) {
        why = "kernel compile failed: " + failed;
        return run_generic();
      }
    }
    // The plan's constants and outputs with this batch's payloads (the executor reads no
    // instance list: the plan has the row maps).
    specializer::Residual with_inputs;
    specializer::batch_payloads(batch, with_inputs.inputs);
    with_inputs.consts = e->residual.consts;
    with_inputs.outputs = e->residual.outputs;
    with_inputs.key = e->residual.key;
    int64_t launches = exec.stats().jit_launches;
    std::optional<decltype(generic())> planned_out;
    try {
      if (opt.inject_failure == "execute")
        throw InternalError("injected failure in plan execution");
      planned_out.emplace(planned(*e, with_inputs));
    } catch (const std::exception& ex) {
      // A failure while running the plan (a bug, or memory): this batch runs generic, counted.
      why = std::string("plan execution failed: ") + ex.what();
      return run_generic();
    }
    auto out = std::move(*planned_out);
    auto t1 = Clock::now();
    // Its kernels compile in the background (auto mode) if nobody has asked for them yet.
    if (arena && runners && runners->jit() && !e->compile_requested.exchange(true))
      background([this, e] { compile_plan(*e); });
    bool on_jit = exec.stats().jit_launches > launches;
    trace.add(std::string(what) + " " + entry + (on_jit ? " (plan, jit)" : " (plan)"), "execute",
              t0, t1);
    note_compiles(); // specialized mode compiles inline, in this batch
    std::lock_guard<std::mutex> s(stats_mutex);
    stats.specialized_batches++;
    stats.specialized_seconds += secs(t0, t1);
    if (stats.first_planned_s < 0)
      stats.first_planned_s = secs(started, t1);
    if (on_jit) {
      stats.jit_batches++;
      stats.jit_seconds += secs(t0, t1);
      if (stats.first_jit_s < 0)
        stats.first_jit_s = secs(started, t1);
    }
    last_explain[entry].clear();
    return out;
  }

  void count_fallback(const std::string& entry, const std::string& why) {
    std::lock_guard<std::mutex> s(stats_mutex);
    // Count by reason without the per-batch details of a location-free message.
    stats.fallbacks[why]++;
    last_explain[entry] = why;
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
    if (!runners || !runners->jit())
      return;
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

  // Runs `f` in the pipeline's arena, counted in `outstanding` like a prefetched batch, so
  // that drain() waits for it (and, through queue_mutex, sees everything it did).
  template <class F> void background(F f) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      ++outstanding;
    }
    arena->enqueue(group.defer([this, f] {
      try {
        f();
      } catch (...) {
        // Best effort: what did not compile runs on reference kernels.
      }
      std::lock_guard<std::mutex> lock(queue_mutex);
      --outstanding;
      queue_cv.notify_all();
    }));
  }

  // The templates of the tensor-only functions, at their declared shapes (session start).
  void compile_static_templates() {
    auto t0 = Clock::now();
    try {
      for (const auto& t : specializer::static_templates(*m, dims))
        runners->get(t, true);
    } catch (const std::exception&) {
      // Best effort: the plans' own templates compile with them (compile_plan).
    }
    trace.add("compile static templates", "compile", t0, Clock::now());
    note_compiles();
  }

  // The background pipeline: serial input, parallel PE + planning, serial publication.
  void pump() {
    tbb::parallel_pipeline(
        static_cast<size_t>(std::max(1, opt.lookahead)),
        tbb::make_filter<void, std::pair<std::string, Value>*>(
            tbb::filter_mode::serial_in_order,
            [this](tbb::flow_control& fc) -> std::pair<std::string, Value>* {
              std::lock_guard<std::mutex> lock(queue_mutex);
              if (queue.empty()) {
                running = false;
                fc.stop();
                return nullptr;
              }
              auto* item = new std::pair<std::string, Value>(std::move(queue.front()));
              queue.pop_front();
              return item;
            }) &
            tbb::make_filter<std::pair<std::string, Value>*, void>(
                tbb::filter_mode::parallel, [this](std::pair<std::string, Value>* item) {
                  std::unique_ptr<std::pair<std::string, Value>> own(item);
                  try {
                    uint64_t cone = cone_version(own->first);
                    std::vector<int32_t> slots;
                    uint64_t key = key_of(own->first, own->second, cone, slots);
                    if (!lookup(key, false)) {
                      std::string why;
                      double s = 0;
                      auto e = make(own->first, own->second, key, slots, why, s);
                      if (e) {
                        publish(key, e, 0); // takes the stats lock itself on eviction
                        {
                          std::lock_guard<std::mutex> st(stats_mutex);
                          stats.plans_prefetched++;
                          stats.background_plan_seconds += s;
                        }
                        if (!e->compile_requested.exchange(true))
                          compile_plan(*e); // the plan runs on reference kernels meanwhile
                      }
                    }
                  } catch (...) {
                    // A failure here only means that batch will be planned inline or run generic.
                  }
                  std::lock_guard<std::mutex> lock(queue_mutex);
                  --outstanding;
                  queue_cv.notify_all();
                }));
  }
};

Engine::Engine(std::shared_ptr<const ir::Module> m, interp::DimBindings dims, EngineOptions opt)
    : impl_(std::make_unique<Impl>(std::move(m), std::move(dims), std::move(opt))) {
  Impl& I = *impl_;
  if (I.opt.inject_failure == "compile" && I.runners)
    I.runners->inject_compile_failure(true);
  // The templates known before any batch start compiling now, in the background (auto).
  if (I.arena && I.runners && I.runners->jit())
    I.background([&I] { I.compile_static_templates(); });
}

Engine::~Engine() {
  if (impl_->arena) {
    {
      std::lock_guard<std::mutex> lock(impl_->queue_mutex);
      impl_->outstanding -= impl_->queue.size();
      impl_->queue.clear();
    }
    impl_->arena->execute([this] { impl_->group.wait(); });
  }
}

const EngineOptions& Engine::options() const {
  return impl_->opt;
}

interp::Interpreter::Gradients Engine::value_and_grad(const std::string& entry, const Value& batch,
                                                      const interp::Params& params) {
  Impl& I = *impl_;
  return I.dispatch(
      entry, batch, "step",
      [&](const PlanEntry& e, const specializer::Residual& r) {
        return I.exec.value_and_grad(e.plan, r, *e.templates, params, &e.layout);
      },
      [&] { return I.generic.value_and_grad(entry, {batch}, params); });
}

Value Engine::run(const std::string& entry, const Value& batch, const interp::Params& params) {
  Impl& I = *impl_;
  return I.dispatch(
      entry, batch, "run",
      [&](const PlanEntry& e, const specializer::Residual& r) {
        return specializer::build_result(e.residual.result_shape,
                                  I.exec.run(e.plan, r, *e.templates, params, &e.layout));
      },
      [&] { return I.generic.run(entry, {batch}, params); });
}

void Engine::prefetch(const std::string& entry, std::vector<Value> batches) {
  Impl& I = *impl_;
  if (!I.arena || batches.empty())
    return;
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(I.queue_mutex);
    for (auto& b : batches)
      I.queue.emplace_back(entry, std::move(b));
    I.outstanding += batches.size();
    if (!I.running) {
      I.running = true;
      start = true;
    }
  }
  if (start)
    I.arena->enqueue(I.group.defer([&I] { I.pump(); }));
}

void Engine::drain() {
  Impl& I = *impl_;
  if (!I.arena)
    return;
  // Joining the arena lets this thread run what is left itself instead of only waiting.
  I.arena->execute([&I] { I.group.wait(); });
  std::unique_lock<std::mutex> lock(I.queue_mutex);
  I.queue_cv.wait(lock, [&I] { return I.outstanding == 0; });
}

void Engine::invalidate(const std::vector<std::string>& entries) {
  // Keys include the entry's cone version, so stale plans can never be hit again; dropping
  // them frees their memory now. Plans of other entries stay.
  Impl& I = *impl_;
  {
    std::lock_guard<std::mutex> lock(I.pe_mutex);
    for (const auto& e : entries)
      I.refused.erase(e);
    std::lock_guard<std::mutex> cl(I.cone_mutex);
    I.cone_cache.clear();
  }
  std::lock_guard<std::mutex> lock(I.cache_mutex);
  for (auto it = I.cache.begin(); it != I.cache.end();) {
    auto next = std::next(it);
    if (std::find(entries.begin(), entries.end(), it->second.entry->entry) != entries.end())
      I.drop(it);
    it = next;
  }
}

size_t Engine::cached_plans(const std::string& entry) const {
  std::lock_guard<std::mutex> lock(impl_->cache_mutex);
  size_t n = 0;
  for (const auto& [k, s] : impl_->cache)
    n += s.entry->entry == entry;
  return n;
}

std::string Engine::explain(const std::string& entry) const {
  std::lock_guard<std::mutex> s(impl_->stats_mutex);
  auto it = impl_->last_explain.find(entry);
  return it == impl_->last_explain.end() ? std::string() : it->second;
}

EngineStats Engine::stats() const {
  EngineStats st;
  {
    std::lock_guard<std::mutex> s(impl_->stats_mutex);
    st = impl_->stats;
  }
  if (impl_->kernels) {
    auto ks = impl_->kernels->stats();
    st.kernels_compiled = static_cast<int64_t>(ks.compiles);
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
    for (const auto& k : impl_->kernels->entries())
      out.push_back({k->key, k->ir_hash, k->schedule, k->schedule_source, k->kernel.compile_ms,
                     k->is_gemm, k->spec, k->gemm_spec, k->is_reduce, k->reduce_spec});
  return out;
}

void Engine::write_trace() const {
  if (!impl_->opt.trace_file.empty())
    impl_->trace.write(impl_->opt.trace_file);
}

} // namespace pejit::runtime
