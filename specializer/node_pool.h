// The memory of a batch's rebuilt structure (BatchScan, specializer/batch_scan.h), which the
// partial evaluator's backend (pe_backend.h) reads: per node its items, its skeleton and its
// range of input slots, in a pool kept by the TemplateTable's memo and reused from batch to
// batch.
// Internal to the partial evaluator.
#pragma once

#include "src/interp/value.h"
#include "specializer/residual.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace pejit::specializer::pe {

using interp::Values;

/// A node of a batch's rebuilt structure (BatchScan, specializer/batch_scan.h): its items, and
/// what fragments key and replay a call on it by.
struct PoolNode {
  Values items;
  uint64_t h1 = 0, h2 = 0; ///< its skeleton (BatchScan): 128 bits of hash
  bool known = false;      ///< whether it has one (no closure inside; fragments on)
  int32_t first_slot = 0;  ///< its payloads are the input slots [first_slot, first_slot + slots)
  int32_t slots = 0;
  /// A tree of the batch taken whole from FragmentMemo::trees (BatchScan): its items are
  /// placeholders, never read; only a replayed call may take it as an argument.
  bool lazy = false;
};

// The nodes of a batch's rebuilt structure, kept in the TemplateTable's memo and reused from
// batch to batch, so that rebuilding a batch allocates nothing in steady state. A rebuilt node
// points to one of its nodes' items without owning anything (shared_ptr's aliasing
// constructor over an empty owner): copying or dropping one, which the evaluator does at every
// match, touches no reference count. That is safe because no Value of a batch outlives its
// partial evaluation (the residual, the fragments and the memo keep none), and the pool lives
// as long as the memo; partial evaluation clears the nodes it used when it ends, after every
// Value of the batch is gone (Release). Nodes live in fixed chunks, so that a Value's items
// can be told to be a node.
struct NodePool {
  static constexpr size_t kChunk = 256;
  std::vector<std::unique_ptr<PoolNode[]>> chunks;
  size_t used = 0; ///< nodes [0, used) belong to the current batch

  /// An empty node for `n` items.
  PoolNode& take(size_t n) {
    if (used == chunks.size() * kChunk)
      chunks.push_back(std::make_unique<PoolNode[]>(kChunk));
    PoolNode& p = chunks[used / kChunk][used % kChunk];
    ++used;
    p.lazy = false;
    p.items.reserve(n);
    return p;
  }

  /// The node of the current batch whose items are `items`, or null.
  const PoolNode* find(const Values* items) const {
    auto a = reinterpret_cast<uintptr_t>(items);
    for (size_t c = 0; c * kChunk < used; ++c) {
      auto b = reinterpret_cast<uintptr_t>(&chunks[c][0].items);
      if (a < b || a >= b + kChunk * sizeof(PoolNode))
        continue;
      size_t k = (a - b) / sizeof(PoolNode);
      const PoolNode& p = chunks[c][k];
      return &p.items == items && c * kChunk + k < used ? &p : nullptr;
    }
    return nullptr;
  }

  /// The pool of a memo: its own, unless a partial evaluation in progress holds that one.
  static std::shared_ptr<NodePool> of(PeMemo& memo) {
    if (!memo.scratch.p || memo.scratch.p.use_count() != 1)
      memo.scratch.p = std::make_shared<NodePool>();
    return std::static_pointer_cast<NodePool>(memo.scratch.p);
  }

  /// Clears the nodes the batch used (at scope exit, after every Value of the batch).
  struct Release {
    NodePool& pool;
    ~Release() {
      for (size_t i = 0; i < pool.used; ++i)
        pool.chunks[i / kChunk][i % kChunk].items.clear();
      pool.used = 0;
    }
  };
};

} // namespace pejit::specializer::pe
