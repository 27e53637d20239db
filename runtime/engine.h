// The dispatcher: runs each batch of an entry on the best path available
// (docs/architecture.md). A ready plan runs on the plan executor; a batch without a ready plan
// is planned inline (planning costs far less than the generic path); the generic interpreter
// runs only batches that cannot be planned (a refusal, remembered per entry and definition
// versions, so it is not retried batch after batch). In `auto` mode a background pipeline
// (TBB, its own low-priority arena) partially evaluates and plans the batches handed to
// prefetch() ahead of time and publishes the plans in the plan cache.
//
// Modes: generic (never specialize), specialized (plan every batch, waiting if needed),
// auto (the default of the CLI's main job: use a ready plan, plan inline otherwise, fall back
// to generic on refusal).
#pragma once

#include "jit/gemm_codegen.h"
#include "jit/kernel_spec.h"
#include "jit/reduce_spec.h"
#include "src/interp/interpreter.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace pejit::jit {
class ScheduleDB;
}

namespace pejit::runtime {

class Workers;

enum class Mode { Generic, Specialized, Auto };
Mode parse_mode(const std::string& s); ///< pejit::Error for another name
const char* mode_name(Mode m);

struct EngineOptions {
  Mode mode = Mode::Auto;
  /// Plans used at least twice (or made again for a key seen before): an LRU bound on their
  /// number and on the bytes of every cached plan.
  size_t plan_cache_entries = 2048;
  size_t plan_cache_bytes = 512u << 20;
  /// New plans wait on a probation list this long (oldest out first) until a second use.
  size_t plan_probation_entries = 64;
  /// The caller's batches repeat (SessionOptions::batches_repeat): new plans skip probation.
  bool batches_repeat = false;
  int lookahead = 8; ///< batches the pipeline may plan ahead
  /// Nested calls allowed besides 4 per level of a batch's nesting (interp/call_limit.h).
  int max_depth = 4000;
  std::string trace_file; ///< Chrome trace JSON written by write_trace()
  /// Value numbering (specializer/merge_instances.h): the instances of a batch that compute
  /// the same thing (the same template on equal arguments, equal payloads included) run once.
  bool merge_equal = true;
  /// Plans run their templates' graphs (fused kernels); false: the batching interpreter.
  bool graphs = true;
  /// Compile the graphs' elementwise runs with LLVM (one Jit and kernel cache per engine);
  /// false: reference kernels only.
  bool jit = true;
  size_t kernel_cache_entries = 256;
  /// Where compiled kernels are kept across processes (jit/object_store.h); empty: nowhere.
  /// Kernels found there are linked, not compiled; the directory stays under max bytes.
  std::string kernel_cache_dir;
  uint64_t kernel_cache_max_bytes = 256u << 20;
  /// A tuned schedule database (`--tuned FILE`, CompileOptions::schedules): kernels with an
  /// entry for this CPU compile with its schedule. Null: every kernel gets its default
  /// schedule; no database is ever looked for elsewhere (docs/architecture.md).
  std::shared_ptr<const jit::ScheduleDB> schedules;
  /// The threads a planned batch's work is split across (runtime/parallel.h: the same bits
  /// for any count); null: the calling thread alone.
  std::shared_ptr<const Workers> workers;
  /// The engine runs inference (run()) only, as evaluation does: templates compile their
  /// forward kernels alone. value_and_grad still works, its backward on reference kernels.
  bool inference = false;
};

struct EngineStats {
  int64_t specialized_batches = 0, generic_batches = 0;
  double specialized_seconds = 0, generic_seconds = 0;
  int64_t grad_batches = 0;           ///< of those batches, the ones run by value_and_grad
  double plan_seconds = 0;            ///< PE + planning done inline
  double background_plan_seconds = 0; ///< PE + planning done by the pipeline
  int64_t plan_hits = 0, plan_misses = 0, plans_prefetched = 0, plan_evictions = 0;
  std::map<std::string, int64_t> fallbacks; ///< why batches ran generic, by reason
  int64_t jit_batches = 0;                  ///< planned batches that ran JIT kernels
  /// Their time (part of specialized_seconds), less the part in the batching interpreter.
  double jit_seconds = 0;
  /// Plan groups that ran through the batching interpreter, not as lowered kernel programs
  /// (one per group per batch), and their seconds (part of specialized_seconds).
  int64_t interpreted_groups = 0;
  double interpreted_seconds = 0;
  /// The templates of those groups and why each is not lowered ("template: why"), each once.
  std::vector<std::string> interpreted_templates;
  int64_t kernels_compiled = 0;
  int64_t kernels_cached = 0;   ///< kernels linked from kernel_cache_dir instead
  int64_t kernel_evictions = 0; ///< kernels dropped by the kernel cache's bound
  double compile_ms = 0;
  /// Seconds from the engine's construction to the end of its first batch that ran planned,
  /// and of its first batch on JIT kernels (-1: none yet).
  double first_planned_s = -1, first_jit_s = -1;
  /// Seconds from the engine's construction to the end of the batch or background task whose
  /// compiles brought kernels_compiled (+ kernels_cached) to its value (-1: nothing compiled):
  /// an upper bound on when the last kernel finished compiling (or loading).
  double last_compile_s = -1;
  std::string jit_disabled; ///< why the engine has no JIT (empty: it has one, or jit off)
  /// Non-empty when the tuned database has no entry for this CPU (ScheduleDB::cpu_warning).
  std::string schedule_warning;
  /// "template: reason" per failed compile; those templates run on reference kernels.
  std::vector<std::string> compile_failures;
};

/// A compiled kernel in the engine's kernel cache, with its provenance (docs/architecture.md).
struct EngineKernel {
  /// The cache key: the spec's canonical text (with the schedule it got) and the target CPU.
  std::string signature;
  uint64_t ir_hash = 0;        ///< jit::ir_text_hash of the optimized IR that was linked
  std::string schedule;        ///< "default", "v16x2" (elementwise), "6x4" (gemm block), ...
  std::string schedule_source; ///< "default", "given" or "tuned FILE entry N"
  double compile_ms = 0;
  bool cached = false; ///< linked from the kernel cache directory, not compiled
  /// What was compiled (its schedule resolved), of its family: elementwise, GEMM, or row
  /// reduction and loss.
  std::variant<jit::KernelSpec, jit::GemmSpec, jit::ReduceSpec> spec;
};

class FaultHooks;
class GradReady;

/// What running a batch finds by walking it, found once for a batch that runs many times (a
/// data set scored after every epoch): values are immutable, so it stays true while the batch
/// lives. Engine::facts() makes it; Engine::run() takes it for that very batch, on the engine
/// that made it, and skips those walks.
struct BatchFacts {
  size_t depth = 0;             ///< interp::nesting_depth
  uint64_t skeleton = 0;        ///< specializer::skeleton_hash
  uint64_t key_hash = 0;        ///< the batch's part of its plan key (skeleton, equal payloads)
  std::vector<int32_t> slots;   ///< its equal payloads (with merging)
  std::vector<Tensor> payloads; ///< specializer::batch_payloads
  /// Made by Engine::facts() for a caller that runs the batch again: its plan is kept from
  /// its first use (the plan cache's LRU list), not put on probation.
  bool repeats = false;
};

class Engine {
public:
  /// `faults`: tests only (fault_hooks.h), to make partial evaluation, planning, kernel
  /// compiles or plan runs fail; null in production.
  Engine(std::shared_ptr<const ir::Module> m, interp::DimBindings dims, EngineOptions opt,
         std::shared_ptr<const FaultHooks> faults = nullptr);
  ~Engine();

  /// Value and gradients of scalar entry `entry` on `batch`, on the path the mode picks.
  /// `ready` (null: nobody) hears of each gradient as it becomes final (grad_ready.h).
  interp::Interpreter::Gradients value_and_grad(const std::string& entry,
                                                const interp::Value& batch,
                                                const interp::Params& params,
                                                GradReady* ready = nullptr);

  /// Value of any entry on `batch` without gradients (inference: `infer`, `infer_nodes`, a
  /// loss for evaluation), on the path the mode picks, as value_and_grad does.
  interp::Value run(const std::string& entry, const interp::Value& batch,
                    const interp::Params& params, const BatchFacts* facts = nullptr);
  /// `batch`'s facts, for run() on it again and again.
  BatchFacts facts(const interp::Value& batch) const;

  /// The seed and step that random ops draw with (interp/random.h). value_and_grad is a
  /// training step (dropout on) and then advances the step by one; run is inference (dropout
  /// off). With the same seed and step, every path and tier draws the same numbers.
  void set_random(uint64_t seed, uint32_t step);
  interp::RandomState random() const;

  /// Hands batches that will come next to the background pipeline (auto mode; a no-op
  /// otherwise). Their plans are published in the plan cache as they are made.
  void prefetch(const std::string& entry, std::vector<interp::Value> batches);
  /// Hands one batch whose facts are known (a batch run again and again, such as a scoring
  /// pass's next batch) to the pipeline to be planned while the caller runs another; its plan
  /// is published as prefetch() publishes. A no-op without a pipeline.
  void prefetch(const std::string& entry, const interp::Value& batch,
                std::shared_ptr<const BatchFacts> facts);
  /// Waits until the pipeline has planned (and compiled) everything handed to it. Call it
  /// before changing the module's definitions: background work reads them.
  /// Runs `task` on the planning pipeline's threads when there is a pipeline (after what is
  /// queued there), else now: work the training thread need not wait for, such as freeing a
  /// stepped batch's values.
  void later(std::function<void()> task);
  void drain();

  /// Drops every cached plan and refusal of these entries (after their definitions changed).
  void invalidate(const std::vector<std::string>& entries);
  /// Number of cached plans of `entry`.
  size_t cached_plans(const std::string& entry) const;

  /// Why the last batch of `entry` ran generic (empty if it ran specialized).
  std::string explain(const std::string& entry) const;

  EngineStats stats() const;
  /// The compiled kernels its cache holds now, by signature (empty without a JIT).
  std::vector<EngineKernel> kernels() const;
  const EngineOptions& options() const;
  /// Writes the Chrome trace of pipeline stages and batch executions (if trace_file is set).
  void write_trace() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace pejit::runtime
