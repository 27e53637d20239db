// Value numbering of a batch's residual program: instances that compute the same thing are
// made one. Templates are pure given their arguments (a random op's key is an argument, an
// input slot of its own), so two instances of one template on the same arguments give the
// same results; an argument that is a batch
// payload counts as the same when the payloads are equal (dtype, shape and bytes). In a SST
// batch many leaves repeat a word of another leaf: their embedding rows,
// leaf cells and (with equal labels) losses are computed once, and the gradients of every
// use meet in the one instance's seed (the executor sums a result's consumers).
//
// What the merge depends on besides the skeleton is which payloads are equal, so a plan made
// from a merged residual is only valid for batches with the same equality pattern: the engine
// puts payload_pattern_hash into its plan key.
#pragma once

#include "src/interp/value.h"
#include "specializer/residual.h"

#include <cstdint>
#include <vector>

namespace pejit::specializer {

/// The payload tensors of `batch` in input slot order (a preorder walk, as partial evaluation
/// numbers them): what a plan's Input refs index.
void batch_payloads(const interp::Value& batch, std::vector<Tensor>& out);

/// For each payload of `batch`, in input slot order (a preorder walk, as partial evaluation
/// numbers them): the first slot with an equal payload at the same site (the same field of an
/// ADT constructor or tuple: words with words, labels with labels), itself if none comes
/// before.
std::vector<int32_t> equal_payload_slots(const interp::Value& batch);

/// The same from the payloads and their sites as walk_batch (batch_walk.h) finds them.
std::vector<int32_t> equal_payload_slots(const std::vector<Tensor>& payloads,
                                         const std::vector<uint64_t>& sites);

/// A hash of equal_payload_slots(batch) (0 when no two payloads are equal).
uint64_t payload_pattern_hash(const std::vector<int32_t>& slots);

/// Merges the instances of `r` that compute the same thing, given each input slot's
/// representative (equal_payload_slots of the batch `r` was made from): every reference to a
/// merged instance goes to the first one, the others are removed and the rest renumbered, in
/// order. Returns the number of instances removed.
size_t merge_equal_instances(Residual& r, const std::vector<int32_t>& slot_rep);

} // namespace pejit::specializer
