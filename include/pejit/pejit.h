// pejit's public API for programs that embed it: load a model, build batches from your own
// data structures, train and run entries. No LLVM, TBB or Boost type appears here.
//
//   pejit::Session s = pejit::Session::from_file("treelstm.pe", {.dims = {{"V", 100}}});
//   pejit::Value leaf = s.make("Leaf", {pejit::Value::scalar_i32(7), pejit::Value::scalar_i32(3)});
//   float loss = s.step("loss", pejit::Value::list({leaf}));
#pragma once

#include "pejit/error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pejit {

namespace runtime {
struct SessionAccess; // the library's own access to a session (runtime/session_access.h)
}

/// A value of the language: Int, Bool, tensor, tuple, list or ADT value. Immutable; copies
/// share their contents.
class Value {
public:
  Value();
  ~Value();
  Value(const Value&);
  Value& operator=(const Value&);

  static Value integer(int64_t v);
  static Value boolean(bool v);
  static Value scalar_i32(int32_t v);
  static Value scalar_f32(float v);
  /// Throws pejit::Error unless data.size() is the product of shape.
  static Value tensor_f32(const std::vector<int64_t>& shape, const std::vector<float>& data);
  static Value tensor_i32(const std::vector<int64_t>& shape, const std::vector<int32_t>& data);
  static Value list(const std::vector<Value>& items);
  static Value tuple(const std::vector<Value>& items);

  bool is_list() const;
  bool is_tensor() const;
  /// Elements of a list or tuple.
  size_t size() const;
  Value at(size_t i) const;
  int64_t as_int() const;
  bool as_bool() const;
  /// The single element of a tensor.
  float item_f32() const;
  int32_t item_i32() const;
  std::vector<int64_t> shape() const;
  std::vector<float> to_f32() const;
  std::string describe() const;

  struct Impl;
  explicit Value(std::shared_ptr<const Impl> impl);
  const Impl& impl() const;

private:
  std::shared_ptr<const Impl> impl_;
};

/// A tuned schedule database written by `pejit tune` on some machine (docs/cli.md). Only an
/// entry measured on this host's CPU is used; kernels without one get their default schedule.
class ScheduleDB {
public:
  /// Reads and checks the file. Throws pejit::Error naming it (and the entry at fault) when it
  /// is missing, not JSON, or malformed.
  static ScheduleDB load(const std::string& path);
  const std::string& path() const;
  size_t size() const; ///< entries, for every CPU the file holds
  /// Non-empty when the file has no entry for this host's CPU: a warning naming the file and
  /// the CPUs it was tuned on (every kernel then gets its default schedule).
  std::string warning() const;

  struct Impl;
  const Impl& impl() const;

private:
  explicit ScheduleDB(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

/// How kernels are compiled.
struct CompileOptions {
  /// Tuned schedules (`ScheduleDB::load(path)`); unset: every kernel gets its family's default
  /// schedule, valid on every x86-64 host. Nothing is ever read implicitly (no environment
  /// variable, home directory or network).
  std::optional<ScheduleDB> schedules;
  /// Planned batches run kernels compiled with LLVM; false: reference kernels only (no LLVM
  /// is set up). Results are the same either way.
  bool jit = true;
  /// A directory where compiled kernels are kept across runs (`--kernel-cache DIR`, created
  /// when missing): a kernel found there is linked instead of compiled, bit for bit the same
  /// code. Entries are keyed by the kernel, the CPU, the LLVM version and pejit's version; a
  /// corrupt or foreign one is compiled again and rewritten; runs may share the directory.
  /// Empty (the default): nothing is read or written (docs/cli.md, "Kernel cache").
  std::string kernel_cache_dir;
  /// The directory's bound: the least recently used entries go beyond it.
  uint64_t kernel_cache_max_bytes = 256u << 20;
};

/// A compiled kernel and where its schedule came from.
struct KernelInfo {
  std::string signature;       ///< the kernel cache's key (canonical spec text + CPU)
  std::string schedule;        ///< "default", "v16x2" (elementwise), "6x4" (gemm block), ...
  std::string schedule_source; ///< "default", "given" or "tuned FILE entry N"
  uint64_t ir_hash = 0;        ///< FNV-1a of the optimized LLVM IR that was linked
  double compile_ms = 0;
  /// Linked from CompileOptions::kernel_cache_dir instead of compiled (its compile_ms is the
  /// load's).
  bool cached = false;
};

struct SessionOptions {
  uint64_t seed = 1;                   ///< parameter initialization
  std::map<std::string, int64_t> dims; ///< sizes of named dimensions (e.g. V)
  std::string optimizer = "adagrad";   ///< sgd, adagrad or adam
  float lr = 0.05f;
  float weight_decay = 0.0f;
  float clip = 0.0f;         ///< global gradient-norm clipping (0: off)
  std::string mode = "auto"; ///< generic, specialized or auto
  int lookahead = 8;         ///< batches planned ahead (auto mode)
  /// Nested calls a batch may recurse into besides 4 per level of its nesting (a tree's depth,
  /// a list's length): deeper recursion is a pejit::Error naming this bound (`--max-depth`).
  int max_depth = 4000;
  /// Threads a step's work is split across (a planned batch's row blocks, weight gradients,
  /// the optimizer's update); 0: the CPUs of the process's affinity mask. Results are the
  /// same bits for any count (docs/architecture.md, "Threads").
  int threads = 0;
  /// Instances of a batch that compute the same thing (one function on equal arguments, a
  /// repeated word's leaf) run once; false: every instance runs. Results are the same.
  bool merge_equal = true;
  /// The caller's batches come back: the same batches (the same trees) every epoch, in any
  /// order (`pejit train --shuffle batches` or `none`). Each plan is then kept from its first
  /// use rather than from its second (within the plan cache's bounds), so the second epoch
  /// plans nothing either. Results are the same.
  bool batches_repeat = false;
  CompileOptions compile;
  /// A Chrome trace (chrome://tracing, Perfetto) of the pipeline's stages and the batches'
  /// runs, written by Session::write_trace(); empty: nothing is recorded.
  std::string trace_file;
  /// Where plans run: "cpu", or "cuda" / "cuda:N" (docs/cuda.md; a session asking for a CUDA
  /// device that cannot be used is an Error naming why).
  std::string device = "cpu";
  /// Data-parallel training across the processes of an MPI job (docs/distributed.md): "off";
  /// "mpi" (this process is one rank of the job it was launched in); "auto" ("mpi" when the
  /// environment says this process is one of several: mpirun, srun, else "off"). In a job,
  /// step() takes this rank's slice of a global batch (slice()) and returns the loss of the
  /// whole global batch, and every rank holds bitwise the same parameters. Sessions are made
  /// on every rank in the same order; a job without MPI in this build is a pejit::Error.
  std::string distributed = "off";
};

/// An optimizer and its own state (Adagrad accumulators, Adam moments), for
/// Session::step(entry, batch, optimizer): the caller decides which steps share state (one per
/// entry, a fresh one after changing the model, ...). Not thread-safe.
class Optimizer {
public:
  /// `kind`: sgd, adagrad or adam; `clip`: global gradient-norm clipping (0: off). Throws
  /// pejit::Error for another kind or a negative or non-finite rate.
  explicit Optimizer(const std::string& kind = "adagrad", float lr = 0.05f,
                     float weight_decay = 0.0f, float clip = 0.0f);
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;
  ~Optimizer();

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
  friend class Session;
};

/// Time and batches per execution path.
struct SessionStats {
  int64_t generic_batches = 0, specialized_batches = 0;
  double generic_seconds = 0, specialized_seconds = 0;
  /// Of those batches, the ones run with gradients (step(); run() computes none).
  int64_t grad_batches = 0;
  /// Batches that found their plan made (by an earlier batch of the same skeleton and, with
  /// merge_equal, the same repeated payloads), and plans made.
  int64_t plan_hits = 0, plan_misses = 0;
  /// Plans made in the background for prefetched batches, and plans dropped by the plan
  /// cache's bound.
  int64_t plans_prefetched = 0, plan_evictions = 0;
  /// Seconds spent making plans (partial evaluation and planning): inline, before a batch
  /// could run, and in the background pipeline.
  double plan_seconds = 0, background_plan_seconds = 0;
  /// Planned batches that ran JIT-compiled kernels, and their time (part of
  /// specialized_seconds) less the part of it in the batching interpreter.
  int64_t jit_batches = 0;
  double jit_seconds = 0;
  /// Plan groups (one template on a batch's rows) that ran through the batching interpreter
  /// because their template is not lowered to a kernel program (`pejit dump --emit kernels`
  /// says why), counted once per group per batch, and their time (part of
  /// specialized_seconds).
  int64_t interpreted_groups = 0;
  double interpreted_seconds = 0;
  /// The templates of those groups, each once: "name (file:line:col of its function): why it
  /// is not lowered".
  std::vector<std::string> interpreted_templates;
  /// Kernels compiled so far and the milliseconds it took.
  int64_t kernels_compiled = 0;
  double compile_ms = 0;
  /// Kernels linked from CompileOptions::kernel_cache_dir instead of compiled.
  int64_t kernels_cached = 0;
  /// Seconds from the session's start to the end of its first planned batch and of its first
  /// batch on JIT kernels, and an upper bound on the end of the last kernel compile (-1: not
  /// yet).
  double first_planned_s = -1, first_jit_s = -1, last_compile_s = -1;
  /// Why batches ran generic: the number of batches per reason.
  std::map<std::string, int64_t> fallbacks;
  /// The threads a step's work is split across (SessionOptions::threads resolved).
  int threads = 1;
  /// Data parallelism (SessionOptions::distributed): this process's rank and the job's ranks;
  /// the gradient reductions started (and how many while the step's backward pass was still
  /// running), the seconds steps waited for the other ranks, and this rank's gradient bytes
  /// sent: dense (reduce-scatter) and row-sparse (ids and rows).
  int rank = 0, ranks = 1;
  int64_t grad_reductions = 0, reductions_overlapped = 0;
  double comm_wait_seconds = 0;
  int64_t comm_dense_bytes = 0, comm_sparse_bytes = 0;

  // Per entry, for research loops that change the model while it trains (add_source).
  struct Entry {
    /// Batches run by step() or run(), and how many of them found their plan made or made one.
    int64_t batches = 0, plan_hits = 0, plan_misses = 0;
    int64_t plans_cached = 0; ///< plans the engine holds for the entry now
    /// Times add_source() changed the entry's dependency cone (its plans were dropped).
    int64_t respecializations = 0;
  };
  std::map<std::string, Entry> per_entry;
  /// The last add_source(): the entries whose cone changed (specialized again from their next
  /// batch) and the entries that kept their plans and kernels.
  std::vector<std::string> respecialized, reused;
};

/// Where a training loop stands, saved in a checkpoint beside the parameters and the optimizer
/// state (Session::save_training) so that a run resumes exactly where it stopped
/// (Session::load_training; `pejit train --resume`).
struct TrainingState {
  int64_t epoch = 0; ///< the epoch in progress, from 0
  int64_t batch = 0; ///< its batches already stepped (0: at its start)
  /// Whatever else the loop needs to continue as if it had not stopped (the seed of its data
  /// order, the epoch's partial sums, the best score so far), kept exactly as given.
  std::map<std::string, std::string> values;
};

/// A model instantiated with parameters and an optimizer. Not thread-safe: use one per thread.
class Session {
public:
  /// Throws pejit::Error with the rendered diagnostics when the program has errors.
  static Session from_file(const std::string& path, const SessionOptions& opt = {});
  static Session from_source(const std::string& text, const std::string& name,
                             const SessionOptions& opt = {});
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  /// An ADT value by constructor name (`Leaf`, `Node`, ...; `Nil` and `Cons` build lists).
  /// Throws pejit::Error for an unknown constructor or a wrong number of fields.
  Value make(const std::string& ctor, const std::vector<Value>& fields) const;

  /// One training step on a scalar entry: its value, gradients, one update by the session's
  /// own optimizer (SessionOptions). When the loss is not finite (NaN or an infinity) no
  /// update is made: the parameters and the optimizer state stay those before the step, so a
  /// caller can keep or save them.
  float step(const std::string& entry, const Value& batch);
  /// The same step, updated by `optimizer` (whose state is its own, not the session's).
  float step(const std::string& entry, const Value& batch, Optimizer& optimizer);
  /// Runs any entry without gradients, through the same engine as step() (a plan where one
  /// can be made, the generic path otherwise).
  Value run(const std::string& entry, const Value& batch);
  /// Batches that will come next: in auto mode they are planned in the background.
  void prefetch(const std::string& entry, const std::vector<Value>& batches);
  /// Waits until the background pipeline has planned (and compiled) every prefetched batch,
  /// so that stats() counts that work.
  void drain();
  /// Why the last batch of `entry` ran generic; empty when it ran a plan.
  std::string explain(const std::string& entry) const;
  /// "specialized: N plans cached", "generic: <why>" or "not specialized yet".
  std::string entry_status(const std::string& entry) const;
  std::vector<std::string> entries() const;

  /// Adds or replaces definitions while the session lives. Only what changed is checked;
  /// returns the entries whose dependency cone changed. New parameters are initialized,
  /// existing ones keep their values. Throws pejit::Error with diagnostics on errors (the
  /// session is then unchanged).
  std::vector<std::string> add_source(const std::string& text, const std::string& name);

  /// Re-initializes every parameter from its declared initializer with `seed`, and resets the
  /// session's own optimizer state.
  void init_params(uint64_t seed);
  std::vector<std::string> param_names() const;
  std::vector<int64_t> param_shape(const std::string& name) const;
  std::vector<float> get_param(const std::string& name) const;
  void set_param(const std::string& name, const std::vector<float>& data);
  /// Keeps parameter `name` fixed (`frozen`) or trainable again: step() drops its gradient
  /// before the update, so neither the session's optimizer nor one passed to step() changes
  /// it (nor its optimizer state). Throws pejit::Error for an unknown name.
  void freeze(const std::string& name, bool frozen = true);
  bool frozen(const std::string& name) const;
  /// The seed and step that random ops (dropout, ...) draw with: step() draws at the current
  /// step and then advances it; run() and eval are inference (dropout off). The seed starts as
  /// SessionOptions::seed and the step at 0; a resumed run sets the step it stopped at.
  void set_random(uint64_t seed, uint32_t step);
  uint64_t random_seed() const;
  uint32_t random_step() const;
  /// Parameters, the session's optimizer state, a vocabulary and free-form `meta` strings
  /// (if given) in pejit's checkpoint format, written atomically.
  void save(const std::string& path, const std::vector<std::string>& vocab = {},
            const std::map<std::string, std::string>& meta = {}) const;
  /// Loads parameters saved by save() or `pejit train --save`, and the optimizer state saved
  /// with them; returns the vocabulary. Throws pejit::Error, the session unchanged, for a
  /// missing parameter, another shape, or another optimizer's state.
  std::vector<std::string> load(const std::string& path);
  /// Loads only the parameters of a checkpoint: the session's optimizer keeps its state (a
  /// checkpoint written with another optimizer is fine). Returns the vocabulary.
  std::vector<std::string> load_params(const std::string& path);
  /// save() with where the training loop stands: a checkpoint to resume from.
  void save_training(const std::string& path, const TrainingState& state,
                     const std::vector<std::string>& vocab = {},
                     const std::map<std::string, std::string>& meta = {}) const;
  /// Loads what load() does (parameters and optimizer state) from a checkpoint written by
  /// save_training() or `pejit train --save`, and returns its training state; the vocabulary
  /// goes to `vocab` when given. Throws pejit::Error, the session unchanged, when the file
  /// holds no training state (a version 1 file, or one written by save()) or as load() does.
  TrainingState load_training(const std::string& path, std::vector<std::string>* vocab = nullptr);

  SessionStats stats() const;
  /// The kernels compiled so far, by signature, each with the schedule it got and its source.
  std::vector<KernelInfo> kernels() const;
  /// Writes the trace to SessionOptions::trace_file (nothing when it is empty).
  void write_trace() const;

  /// This process's rank in its data-parallel job and the job's number of ranks (0 and 1 when
  /// not distributed).
  int rank() const;
  int ranks() const;
  /// The part [first, second) of a global batch of `n` items this rank steps on: contiguous,
  /// the ranks' parts in rank order, their sizes differing by one at most ({0, n} alone).
  std::pair<size_t, size_t> slice(size_t n) const;
  /// Every rank's `values`, in rank order ({values} alone): for sums over the ranks in a fixed
  /// order (evaluation counts). A collective: every rank calls it at the same point.
  std::vector<std::vector<double>> gather_ranks(const std::vector<double>& values) const;
  /// A hash of every parameter's name and bits.
  uint64_t param_hash() const;
  /// Checks that every rank holds bitwise the same parameters (a collective; nothing to check
  /// alone). Throws pejit::Error on every rank, naming the first rank that differs.
  void check_replicas() const;

  /// The storage of parameter `name` (f32, row-major, param_shape(name) elements), for views
  /// that share it (the Python package's numpy arrays). Writes through it are seen by the next
  /// step() or run(); steps update it in place, so the pointer stays valid across them. It is
  /// invalidated when the parameter's tensor is made anew: by load(), init_params(),
  /// set_param(), an add_source() that changes the parameter's shape, and the session's end.
  /// Throws pejit::Error for an unknown name.
  float* param_data(const std::string& name);

private:
  friend struct runtime::SessionAccess;
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Tunes this process's allocator (glibc malloc) for a training loop, once, at start: blocks
/// of up to 32 MiB come from the heap instead of fresh mappings, and freed memory is kept
/// rather than given back to the system. A training step frees and reallocates megabytes
/// (gradients, packed weights, optimizer work); given back each step, they cost a page fault
/// per 4 KiB when touched again, a sizeable part of a TreeLSTM step. The process keeps its
/// peak memory. `pejit` and its benchmarks call it (the PyTorch peers get the same through
/// GLIBC_TUNABLES). Returns false where it does nothing (not glibc).
bool keep_freed_memory();

} // namespace pejit
