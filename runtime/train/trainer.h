// Training and evaluation of a model on a data file: what `pejit train` and `pejit eval` run,
// usable from C++ too. Both run on a public pejit::Session whose options (SessionOptions: seed,
// optimizer, mode, lookahead, JIT, merging, trace) the caller sets; batches of trees (or
// sentences) are shuffled per epoch by the seed, stepped through the session's `loss` entry
// and its optimizer; per epoch it reports loss per node, root and all-node accuracy on train
// and dev, trees/s and time per path. dump and tune are tooling over the specializer and JIT.
#pragma once

#include "pejit/pejit.h"

#include <cmath>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pejit::runtime {

/// How the training examples are ordered from epoch to epoch (`pejit train --shuffle`).
enum class Shuffle : uint8_t {
  Examples, ///< every epoch a new order of the examples (the default)
  Batches,  ///< the batches of the first epoch's order kept, every epoch in a new order
  None,     ///< the data file's order in every epoch (--fixed-batches)
};
/// "examples", "batches" or "none" (`--shuffle`'s words); anything else is an Error naming
/// `what`.
Shuffle parse_shuffle(const std::string& word, const std::string& what);
const char* shuffle_name(Shuffle s);

struct TrainOptions {
  std::string model;
  std::string data;
  std::string dev;
  int epochs = 1;
  int batch = 25;
  int64_t limit = 0;                   ///< use the first N training trees (0: all)
  Shuffle shuffle = Shuffle::Examples; ///< BatchOrder in common.h
  /// The checkpoint written at the end, and on SIGINT/SIGTERM (handle_signals), at a failing
  /// batch (the state before it) and every save_every epochs. With save_best it holds the
  /// best epoch's model instead, and those go to "<save>.last".
  std::string save;
  int save_every = 0;      ///< epochs between periodic saves (0: none)
  std::string save_best;   ///< a metric (dev_root_acc, dev_loss, ...; Metric in lifecycle.h)
  int patience = 0;        ///< stop after this many epochs without save_best improving (0: never)
  std::string init_params; ///< start from this checkpoint's parameters (and vocabulary)
  /// Continue the run that wrote this checkpoint (`save`) where it stopped: parameters,
  /// optimizer state, epoch and batch, data order (its seed, batch size and shuffling), the
  /// epoch's partial sums and the best score so far. `epochs` counts from the run's start.
  std::string resume;
  /// SIGINT and SIGTERM finish the step in flight, write `save` and throw Interrupted (the
  /// CLI sets it; a library caller keeps its own handlers by leaving it off).
  bool handle_signals = false;
  /// Data parallel (session.distributed): steps between checks that every rank holds bitwise
  /// the same parameters (0: at each epoch's end only). A difference is an error.
  int check_replicas = 0;
  bool json = false;
  bool explain = false;   ///< say why each batch that ran generic did
  bool train_eval = true; ///< evaluate accuracy on the training set after each epoch
  /// Trees per batch of the scoring after each epoch (the dev set, and the training set with
  /// train_eval): one pass per batch for the loss and the predictions, as `pejit eval` scores.
  int eval_batch = 500;
  int progress = -1; ///< -1: when stderr is a terminal; 0 off; 1 on
  std::string tuned; ///< a tuned schedule database (`pejit tune`); empty: defaults
  /// "fine" (labels as read) or "binary" (SST binary: labels.h), for --data and --dev alike.
  std::string labels = "fine";
  /// Parameters kept fixed (Session::freeze): no update, no optimizer state.
  std::vector<std::string> freeze;
  /// Word vectors (GloVe/word2vec text, gzip too) copied into `embeddings_param` (empty: the
  /// 2-D parameter over V) for the vocabulary's words before training (embeddings.h).
  std::string embeddings, embeddings_param;
  /// A learning-rate schedule (runtime/optim/schedule.h syntax; empty: constant), stepped per
  /// batch of the run; per-parameter learning rates and weight decay as "NAME=VALUE", and no
  /// weight decay on biases (parameters of rank <= 1). All kept in the checkpoint's training
  /// state: --resume continues them and refuses others.
  std::string lr_schedule;
  std::vector<std::string> param_lr, param_decay;
  bool no_decay_bias = false;
  /// The session trained: its seed (also the shuffling's), optimizer, mode, lookahead, JIT,
  /// merging and trace file. train() sets its dims (V: the vocabulary's size) and
  /// compile.schedules (from `tuned`).
  SessionOptions session;
};

/// A compiled kernel and where its schedule came from, for `--json`.
struct KernelProvenance {
  std::string signature; ///< the kernel cache's key
  std::string schedule, schedule_source;
  uint64_t ir_hash = 0;  ///< jit::ir_text_hash of its optimized IR
  double compile_ms = 0; ///< lowering + O3 + code generation + link (or the load, if cached)
  bool cached = false;   ///< linked from the kernel cache directory
};

struct EpochStats {
  int epoch = 0;
  double loss_per_node = NAN;
  double root_acc = NAN, node_acc = NAN, dev_root_acc = NAN, dev_node_acc = NAN;
  double dev_loss_per_node = NAN;
  int64_t trees = 0, nodes = 0;
  double trees_per_s = 0, seconds = 0;
  int64_t batches = 0, specialized_batches = 0, generic_batches = 0;
  /// Training examples encoded in the epoch (for its batches and the training set's scoring):
  /// each is kept once encoded (KeptExamples), so a later epoch encodes only those past the
  /// bound.
  int64_t encoded_examples = 0;
  int threads = 1;                     ///< the session's (SessionOptions::threads resolved)
  Shuffle shuffle = Shuffle::Examples; ///< the run's data order (--shuffle)
  double specialized_seconds = 0, generic_seconds = 0;
  int64_t jit_batches = 0;
  double jit_seconds = 0; ///< the part of specialized_seconds that ran JIT kernels
  /// Plan groups run through the batching interpreter (templates not lowered to kernels),
  /// and their seconds (part of specialized_seconds; SessionStats::interpreted_*).
  int64_t interpreted_groups = 0;
  double interpreted_seconds = 0;
  /// Since the engine started: their templates, where each is and why it is not lowered.
  std::vector<std::string> interpreted_templates;
  int64_t kernels_compiled = 0;
  int64_t kernels_cached = 0; ///< linked from --kernel-cache DIR instead of compiled
  double compile_ms = 0;
  /// Since the engine started (once per run, not per epoch; NaN: not yet): the end of the
  /// first planned batch, of the first batch on JIT kernels, and an upper bound on the end of
  /// the last kernel compile (SessionStats::first_planned_s, first_jit_s, last_compile_s).
  double first_planned_s = std::nan(""), first_jit_s = std::nan(""), last_compile_s = std::nan("");
  double plan_ms = 0, background_plan_ms = 0;
  int64_t plan_hits = 0, plan_misses = 0, plans_prefetched = 0, plan_evictions = 0;
  std::map<std::string, int64_t> fallbacks;
  std::string tuned;          ///< the tuned schedule database in use (empty: default schedules)
  std::string device = "cpu"; ///< where the plans ran ("cpu", "cuda:N")
  /// Data parallel: the job's ranks, and this rank's gradient reductions over the epoch (how
  /// many started during the backward pass), its seconds waiting for the other ranks and its
  /// gradient bytes sent (SessionStats). "ranks" and "comm" in the JSON.
  int ranks = 1;
  int64_t grad_reductions = 0, reductions_overlapped = 0;
  double comm_wait_seconds = 0;
  int64_t comm_dense_bytes = 0, comm_sparse_bytes = 0;
  /// The final epoch only: the kernels the engine holds then ("kernels" in the JSON).
  std::optional<std::vector<KernelProvenance>> kernels;
  /// One line of JSON with every field (NaN fields are null).
  std::string json() const;
};

/// Thrown by train() after SIGINT or SIGTERM stopped it (TrainOptions::handle_signals) and
/// the checkpoint, if one was asked for, was written. `pejit train` exits with 128 + signal.
class Interrupted : public Error {
public:
  Interrupted(int sig, const std::string& what) : Error(what), signal(sig) {}
  int signal;
};

/// Trains; writes per-epoch summaries to `out` (JSON lines with opt.json) and progress and
/// human summaries to `err`. Returns the per-epoch statistics. Throws pejit::Error on bad input.
std::vector<EpochStats> train(const TrainOptions& opt, std::ostream& out, std::ostream& err);

struct EvalOptions {
  std::string model;
  std::string params;
  std::string data;
  int batch = 500; ///< trees per batch: large, for fewer plans and more merged instances
  int64_t limit = 0;
  bool json = false;
  /// One pass per batch for the loss and the predictions (add_eval_entry); false: the loss
  /// entry and the prediction entry each run on every batch (for comparisons).
  bool one_pass = true;
  /// Evaluate the data this many times in the one session (the scores are the same each
  /// round): the first round plans and compiles, the later ones find their plans and kernels
  /// made, as the dev set's evaluation after each training epoch does. Timing; `round_seconds`.
  int rounds = 1;
  std::string tuned;           ///< a tuned schedule database; empty: defaults
  std::string labels = "fine"; ///< "fine" or "binary" (labels.h)
  /// The session evaluated on: its mode, JIT and merging. evaluate() sets its dims and
  /// compile.schedules, and loads the parameters into it.
  SessionOptions session;
};

struct EvalStats {
  int64_t trees = 0, nodes = 0;
  double loss_per_node = NAN, root_acc = NAN, node_acc = NAN;
  /// The first round's (planning and compiling included); trees_per_s is trees / seconds.
  double seconds = 0, trees_per_s = 0;
  std::vector<double> round_seconds; ///< every round's, the first included
  /// Entry runs per round (one per batch with the one-pass entry), and the batches that ran
  /// with gradients (Session::step: none in evaluation) over all rounds.
  int64_t passes = 0, grad_batches = 0;
  /// Batches encoded into values over all rounds: each once, in the first round, while the
  /// data fit the bound on what is kept (EvalSet).
  int64_t encoded_batches = 0;
  std::string entry;       ///< the entry scored in one pass, or "loss+infer_nodes" (two passes)
  double plan_seconds = 0; ///< partial evaluation and planning, all rounds (SessionStats)
  int64_t specialized_batches = 0, generic_batches = 0;
  double specialized_seconds = 0, generic_seconds = 0, jit_seconds = 0;
  int64_t kernels_compiled = 0, kernels_cached = 0; ///< as SessionStats
  std::string device = "cpu";                       ///< where the plans ran ("cpu", "cuda:N")
  int threads = 1; ///< the session's (SessionOptions::threads resolved)
  std::string json() const;
};

EvalStats evaluate(const EvalOptions& opt, std::ostream& out, std::ostream& err);

struct PredictOptions {
  std::string model;
  std::string params;
  std::string data;
  std::string out;    ///< the predictions, one line per tree
  bool nodes = false; ///< every node's prediction (infer_nodes), not only the root's (infer)
  int batch = 500;    ///< trees per batch: large, as `pejit eval` scores (EvalOptions::batch)
  int64_t limit = 0;
  std::string tuned;
  SessionOptions session; ///< its mode, JIT and merging; predict() sets the dims
};

/// `pejit predict`: writes opt.out, one line per tree of opt.data in its order: the class
/// `infer` gives (the root's), or with opt.nodes the classes `infer_nodes` gives every node,
/// space-separated, children before parents (the data's node order). The data's labels are
/// not used (`-` is fine). Returns the number of trees. Throws pejit::Error for a model
/// without the entry, a sentence data set, a count of predictions that does not fit the tree,
/// or an output that cannot be written.
int64_t predict(const PredictOptions& opt, std::ostream& err);

struct DumpOptions {
  std::string model;
  std::string data;
  std::string entry = "loss";
  int batch = 25;
  int64_t batch_index = 0;
  /// templates, instances, plan, dot, kernels, kernel-program, llvm, ptx
  std::string emit = "plan";
  std::string tuned; ///< the tuned schedule database the kernels are resolved against
  bool merge = true; ///< merge equal instances first, as training does (--no-merge)
};

/// What specialization makes of one batch (`pejit dump`): counts, planning time, and the
/// chosen form. Throws pejit::Error on bad input, a refusal included. Warnings (a tuned
/// database with no entry for this CPU) go to `warnings` if given.
void dump(const DumpOptions& opt, std::ostream& out, std::ostream* warnings = nullptr);

struct TuneOptions {
  std::string model;
  std::string data;
  std::string out;   ///< the database written; entries of another CPU (or kernel) in it are kept
  int batch = 25;    ///< batches as `pejit train` makes them (unshuffled)
  int64_t limit = 0; ///< use the first N examples to find the kernels (0: all)
  std::vector<int64_t> rows = {16, 128, 512}; ///< run-time row counts timed per candidate
  double min_ms = 1.0;                        ///< each timing lasts at least this long
  int repeats = 3;                            ///< timings per candidate and row count
};

/// `pejit tune`: finds the kernels (elementwise runs and weight-gradient GEMMs) of every
/// template the model's entries (loss, and infer / infer_nodes when present) specialize to on
/// the data's batches, without running anything, measures candidate schedules for each on this
/// machine (jit/tuner.h) and writes the database to opt.out, merged with the entries already
/// there. One line per kernel on `out`; returns the number of kernels tuned. Throws
/// pejit::Error on bad input, naming the file.
size_t tune(const TuneOptions& opt, std::ostream& out);

} // namespace pejit::runtime
