// Optimizers (SGD, Adagrad, Adam) that update parameters in place from the generic path's
// ParamGrad (dense, row-sparse, or both). A row-sparse gradient (an embedding's) updates only
// the rows it touches, so a step costs O(touched rows), not O(vocabulary).
// Steady-state steps allocate nothing beyond reused scratch vectors; the state tensors are
// created on a parameter's first gradient and then written in place.
#pragma once

#include "src/interp/params.h"
#include "src/interp/tape.h"
#include "src/tensor/tensor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pejit::runtime {
class Workers;
}

namespace pejit::optim {

/// Which update rule an Optimizer applies.
enum class Kind { Sgd, Adagrad, Adam };

/// "sgd", "adagrad" or "adam"; throws pejit::Error naming the accepted names otherwise.
Kind parse_kind(std::string_view name);
/// The name parse_kind accepts for `k`.
const char* kind_name(Kind k);

/// Hyper-parameters. The defaults are those of the TreeLSTM/SST recipe (Adagrad, lr 0.05).
struct OptimizerOptions {
  Kind kind = Kind::Adagrad;
  float lr = 0.05f;
  /// L2 penalty added to the gradient (g += weight_decay * p), after clipping, as torch does.
  /// For a row-sparse-only gradient it applies to the touched rows only.
  float weight_decay = 0.0f;
  /// 0: off. Otherwise the gradients of all parameters are scaled by
  /// clip_norm / (norm + 1e-6) when that is below 1, where norm is the global L2 norm over
  /// every parameter's whole gradient (dense + coalesced sparse rows), like
  /// torch.nn.utils.clip_grad_norm_.
  float clip_norm = 0.0f;
  float adagrad_eps = 1e-10f;
  float adagrad_init = 0.0f; ///< initial accumulator value
  float beta1 = 0.9f, beta2 = 0.999f, adam_eps = 1e-8f;
  /// Per-parameter learning rate and weight decay, by name, in place of lr and weight_decay
  /// (`pejit train --param-lr`, `--param-decay`, `--no-decay-bias`).
  std::map<std::string, float> param_lr, param_weight_decay;
};

/// Applies optimizer steps to a Params. Deterministic: the same bits on any number of workers.
///
/// Update rules, per element of the gradient g (after clipping and weight decay):
///  - Sgd:     p -= lr * g
///  - Adagrad: sum += g * g; p -= lr * g / (sqrt(sum) + eps)   (torch.optim.Adagrad)
///  - Adam:    m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
///             p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)   (torch.optim.Adam)
///
/// Gradient shapes: a ParamGrad that is empty means "no gradient": the parameter and all its
/// state are left untouched (for Adam its moments are not decayed and its step count t does
/// not advance, as torch does for a parameter whose .grad is None). A ParamGrad with a dense
/// part updates every element (the sparse parts are added to it first, in the order of
/// ParamGrad::to_dense). A ParamGrad with only row-sparse parts updates only the rows it
/// touches: duplicate indices are summed in their original order (like RowSparse::coalesce),
/// rows are visited in increasing index order. For SGD and Adagrad this gives bit-for-bit the
/// step of the dense gradient to_dense() (an untouched row has g = 0 and would not move).
/// Adam on sparse-only gradients is *lazy* Adam, like torch.optim.SparseAdam: only the touched
/// rows' moments are decayed and updated, and t counts the steps in which the parameter had
/// any gradient; so it equals dense Adam on the touched rows only while every earlier step
/// touched the same rows (rows skipped in a step keep stale moments instead of decaying).
/// Unlike SparseAdam, eps enters as in dense Adam (after dividing by sqrt(1 - b2^t)), so both
/// paths share one formula.
class Optimizer {
public:
  /// Throws pejit::Error for a negative or non-finite lr, weight decay, clip norm or eps, or
  /// betas outside [0, 1).
  explicit Optimizer(OptimizerOptions o);

  /// Applies one step to `params` given one ParamGrad per param (grads.size() ==
  /// params.values.size()). Values are updated in place; a value whose storage is shared is
  /// cloned first, so other holders never see the change. Throws pejit::Error for a count,
  /// shape or dtype mismatch or a sparse index out of range, before modifying anything.
  void step(interp::Params& params, const std::vector<interp::ParamGrad>& grads);

  /// Multiplies every learning rate from the next step on (a schedule's factor, schedule.h);
  /// 1 leaves the steps bit for bit as without it. Throws pejit::Error unless finite, >= 0.
  void set_lr_scale(float scale);
  float lr_scale() const { return lr_scale_; }
  /// Replaces OptimizerOptions::param_lr and param_weight_decay (the state and workers stay).
  /// Throws pejit::Error, nothing changed, for a value that is negative or not finite.
  void set_param_options(std::map<std::string, float> lr, std::map<std::string, float> wd);
  /// The threads a step's updates are split across (runtime/parallel.h): the blocks of every
  /// parameter in one fork-join (two with clip_norm, the norm summed between them on the
  /// calling thread); null (the default): the calling thread. The same bits either way.
  void set_workers(std::shared_ptr<const runtime::Workers> workers) {
    workers_ = std::move(workers);
  }

  /// Number of step() calls so far (restored by load_state).
  int64_t steps() const { return steps_; }
  const OptimizerOptions& options() const { return opts_; }

  /// The optimizer's state for checkpointing, sorted by name: "steps" (f32 [2]: the step count
  /// as hi * 2^24 + lo, exact to 2^48), and per parameter with state "adagrad_sum.<param>",
  /// or "adam_m.<param>", "adam_v.<param>" and "adam_step.<param>" (f32 [2], as "steps").
  /// The tensors share storage with the optimizer's; a later step copies before writing.
  std::vector<std::pair<std::string, Tensor>> state() const;
  /// Replaces all state by `state` (as state() returns it; the tensors are cloned). Throws
  /// pejit::Error for a name this kind of optimizer does not use or a malformed tensor; a
  /// tensor whose shape does not match its parameter is reported by the next step().
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);

private:
  /// State of one parameter, created on its first gradient (or by load_state).
  struct Slot {
    Tensor a;      ///< Adagrad sum or Adam m
    Tensor b;      ///< Adam v
    int64_t t = 0; ///< Adam: steps in which this parameter had a gradient
  };
  /// Everything an element's update needs; fixed for one parameter in one step.
  struct Rule {
    Kind kind = Kind::Sgd;
    float lr = 0, wd = 0, coef = 1, eps = 0;
    float b1 = 0, b2 = 0, one_minus_b1 = 0, one_minus_b2 = 0, step_size = 0, bc2_sqrt = 1; // Adam
  };
  /// How a parameter's update visits it: every element (a dense gradient alone), every row (a
  /// dense gradient and touched rows), or the touched rows only (row-sparse alone).
  enum class Visit { Elements, Rows, Touched };
  /// Per-parameter scratch, reused across steps (capacity only grows), and what this step's
  /// update of the parameter reads and writes.
  struct Work {
    struct Entry {
      int32_t idx;  ///< row index
      int32_t part; ///< which RowSparse of the ParamGrad
      int64_t pos;  ///< row within that part
    };
    std::vector<Entry> entries; ///< sorted by (idx, part, pos)
    std::vector<int32_t> uniq;  ///< touched rows, increasing
    std::vector<size_t> starts; ///< entries of uniq[j]: [starts[j], starts[j + 1])
    std::vector<float> rows;    ///< their summed gradient rows [uniq.size(), row_elems]
    int64_t nrows = 0, row_elems = 0;
    bool active = false; ///< the ParamGrad was not empty
    const interp::ParamGrad* g = nullptr;
    Visit visit = Visit::Elements;
    Rule rule;
    float *p = nullptr, *a = nullptr, *b = nullptr; ///< the parameter and its state
  };
  /// One block of one parameter's update: units [begin, begin + n) of its Visit (elements,
  /// rows, or touched rows); `sum`: the block first sums its touched rows' gradients.
  struct Job {
    uint32_t param;
    bool sum, update;
    int64_t begin, n;
  };

  void bind(const interp::Params& params);
  /// Validates parameter i's gradient and sorts its row-sparse entries; sums nothing yet.
  void index(size_t i, const Tensor& value, const interp::ParamGrad& g);
  /// Touched rows [j0, j1) of parameter i: their gradient (dense row + sparse rows) summed.
  void sum_rows(Work& w, size_t j0, size_t j1) const;
  double squared_norm(size_t i, const interp::ParamGrad& g) const;
  /// The rule, state and copy-on-write of parameter i for this step (before any job runs).
  void prepare(size_t i, Tensor& value, float coef);
  /// Appends parameter i's jobs (one when nothing splits), blocks fixed by the work alone.
  void add_jobs(size_t i, bool sum, bool update, bool split);
  void run_job(const Job& j);
  /// Runs jobs_ on the workers in one fork-join (inline with one thread), then clears it.
  void run_jobs();
  static void update_span(const Rule& r, float* __restrict p, const float* __restrict g,
                          float* __restrict a, float* __restrict b, int64_t n);

  OptimizerOptions opts_;
  float lr_scale_ = 1.0f;
  int64_t steps_ = 0;
  std::map<std::string, Slot> slots_; ///< by parameter name
  std::vector<std::string> bound_names_;
  std::vector<Slot*> bound_; ///< slots_ entries, by parameter index
  std::vector<Work> work_;   ///< by parameter index
  std::vector<Job> jobs_;    ///< one fork-join's blocks, reused
  int64_t jobs_work_ = 0;    ///< their work in all (flops, roughly)
  std::shared_ptr<const runtime::Workers> workers_;
};

} // namespace pejit::optim
