// One walk over a batch for what planning and running it need before partial evaluation: its
// nesting depth (interp::nesting_depth), its skeleton hash (skeleton_hash), and its payloads
// in input slot order with their sites (batch_payloads, equal_payload_slots), found together
// rather than by four walks that each chase the batch's scattered nodes again. The walk keeps
// its own stack (no recursion), so it runs before the caller knows how deep the batch is.
#pragma once

#include "src/interp/value.h"
#include "src/tensor/tensor.h"

#include <cstdint>
#include <vector>

namespace pejit::specializer {

struct BatchWalk {
  size_t depth = 0;             ///< interp::nesting_depth(batch)
  uint64_t skeleton = 0;        ///< skeleton_hash(batch)
  std::vector<Tensor> payloads; ///< batch_payloads(batch)
  std::vector<uint64_t> sites;  ///< each payload's site (equal_payload_slots)
};

/// Walks `batch` once; `out`'s vectors are cleared first (their capacity is kept).
void walk_batch(const interp::Value& batch, BatchWalk& out);

} // namespace pejit::specializer
