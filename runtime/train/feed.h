// The training loop's batches of one epoch: made ahead of their steps (of the examples
// KeptExamples encodes once and keeps) and handed to the session's planning pipeline (auto
// and specialized mode), each on this rank's slice of its global batch. The pipeline plans
// batch b + look + 1 from the end of step b while the training thread makes the batch after
// it: a batch is made one step before it is handed over, so that its planning runs beside the
// training thread's serial work (making the batch, bookkeeping, the start of the next step)
// rather than beside the next step's first levels, which would then lack their second worker
// (docs/architecture.md, "Threads").
#pragma once

#include "pejit/pejit.h"
#include "runtime/train/common.h"

#include <deque>
#include <utility>
#include <vector>

namespace pejit::runtime {

class BatchFeed {
public:
  /// Batches of `batch` examples of `ds` in `order`, from batch `first` on, their examples
  /// from `examples` (of `ds`); `look`: how many batches the pipeline plans ahead (0: no
  /// pipeline, each batch made just before its step).
  BatchFeed(Session& session, KeptExamples& examples, const Dataset& ds,
            const std::vector<size_t>& order, size_t batch, size_t first, size_t look);
  /// Batch b, the next one: made, and batches up to b + look handed to the pipeline.
  pejit::Value take(size_t b);
  /// After step b: batch b + look + 1 to the pipeline, then the one after it made.
  void stepped(size_t b);

private:
  void make_upto(size_t upto);     ///< batches [made_, upto) made
  void prefetch_upto(size_t upto); ///< batches [prefetched_, upto) handed over (made ones)

  Session& session_;
  KeptExamples& examples_;
  const Dataset& ds_;
  const std::vector<size_t>& order_;
  const size_t batch_, batches_, look_;
  size_t made_, prefetched_;
  /// Batches made and not yet taken (front: the next), and whether each has rows on this rank.
  std::deque<std::pair<pejit::Value, bool>> ahead_;
};

} // namespace pejit::runtime
