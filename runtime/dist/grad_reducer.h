// The gradient reduction of a data-parallel step (docs/distributed.md). Each rank computes the
// gradients of its slice of the global batch; the reducer sums them over the ranks so that
// every rank steps its optimizer with bitwise the same gradients:
//   - dense gradients: a reduce-scatter (each block summed on one rank) then an all-gather of
//     the blocks, started per parameter as its gradient becomes final (GradReady), in one fixed
//     order, on streams of their own;
//   - row-sparse gradients (an embedding's, through take): every rank's (ids, rows) gathered,
//     and handed to the optimizer as one part per rank in rank order (it sums rows by id);
//   - the loss, whether each rank's step failed, and which parameters had gradients: one
//     all-gather per step, summed in rank order.
// Which parameters are dense or sparse is learnt from the first step's gradients of all ranks.
// No reduction order depends on timing, and a block's sum is computed on one rank only.
#pragma once

#include "pejit/error.h"
#include "runtime/dist/comm.h"
#include "runtime/grad_ready.h"
#include "src/interp/params.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pejit::runtime::dist {

/// Thrown on every rank of a job together (a rank's step failed, the ranks disagree): the job
/// can end cleanly, each rank knowing why.
class JobError : public Error {
public:
  using Error::Error;
};

class GradReducer final : public GradReady {
public:
  explicit GradReducer(Comm& comm);
  ~GradReducer() override;

  /// Starts a step over `params`; `skip[p]` (frozen parameters) take no part.
  void begin(const interp::Params& params, const std::vector<bool>& skip);
  void ready(size_t p, const interp::ParamGrad& g) override;
  void restart() override;
  /// Completes the step on every rank: `grads` (this rank's; empty ones are fine, all empty
  /// when its step failed) become the sums over the ranks, and the sum of the ranks' losses is
  /// returned. `local_error`: why this rank's step failed (empty: it did not). Throws JobError
  /// on every rank when any rank failed, naming the first that did and why.
  float finish(std::vector<interp::ParamGrad>& grads, float loss, const std::string& local_error);

  struct Stats {
    int64_t steps = 0;
    /// Dense reductions started while the step's backward pass was still running.
    int64_t overlapped = 0, reductions = 0;
    double wait_seconds = 0; ///< in finish(): waiting for the other ranks and the reductions
    int64_t dense_bytes = 0, sparse_bytes = 0; ///< this rank's gradient bytes sent
  };
  const Stats& stats() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace pejit::runtime::dist
