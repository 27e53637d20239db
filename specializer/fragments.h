// Residual fragments: what the partial evaluator keeps of an inlined call (a call of a function
// that is not a template, such as a tree encoder) so that the same call on the same static
// structure later costs a replay of the instances it appended instead of an evaluation. The
// conditions under which that is exact are in the design note at the top of
// specializer/partial_eval.cpp; recording and replay are in pe_fragments.cpp.
//
// A fragment is a list of steps (an instance to append, a constant to intern, a fragment to
// replay for a nested call) over LocalRefs: references relative to the place and the arguments
// of a replay, so that one fragment serves every batch whose structure contains that call.
#pragma once

#include "specializer/huge_pages.h"
#include "specializer/key_map.h"
#include "specializer/residual.h"
#include "src/interp/value.h"

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace pejit::specializer {

/// A reference inside a fragment, resolved against a replay's first instance, the input slot
/// where each structured argument's payloads start, and the references of its tensor arguments.
struct LocalRef {
  enum class Kind : uint8_t { Inst, Slot, Param, Const, Arg, SumOf };
  Kind kind = Kind::Inst;
  /// Inst: instance, counted from the fragment's first; Slot: input slot, counted from its
  /// argument's first; Param: parameter; Const: the fragment's constant #; Arg: argument #;
  /// SumOf (a term of a Sum node only): the fragment's nested call # (its Call steps counted).
  int32_t index = 0;
  int32_t aux = 0; ///< Inst: which result; Slot: argument #; SumOf: that call's pending sum #
};

/// The fragments of one TemplateTable's partial evaluator (PeMemo::fragments), valid for the
/// memo's module state and dimension binding. Argument numbers count a call's parameters that
/// are not Int or Bool (those are in the key), in order.
struct FragmentMemo {
  struct Step {
    enum class Kind : uint8_t { Inst, Call, Const };
    Kind kind = Kind::Inst;
    int32_t id = 0;       ///< Inst: template or Instance::kSumN; Call: fragment; Const: tensor
    int32_t sum_sig = -1; ///< Inst of a SumN: its signature id (PeMemo::sigs)
    uint32_t first = 0;   ///< Inst: its arguments; Call: the callee's arguments, in refs
    uint32_t count = 0;
    /// Call: where the callee's steps and their references start (its Fragment's first_step,
    /// and that step's `first`), so that a replay can ask for them as it starts, without
    /// waiting for the callee's record: the memo is megabytes, read at random.
    uint32_t callee_step = 0, callee_ref = 0;
  };
  /// The call's result in preorder: Tuple/List (n), Adt (tag, n), Int/Bool (v), Value (a
  /// constant tensor: tensors[v]), Ref (refs[v], sig), Sum (a pending sum: its terms in order
  /// refs[v, v + n), a SumOf standing for all the terms of a nested call's pending sum; sig;
  /// `tag` numbers the distinct pending sums, which replay as one each; n = 0 again after the
  /// first). A nested call's sum is not copied, so a fragment stays as small as its own work.
  struct Node {
    enum class Kind : uint8_t { Tuple, List, Adt, Int, Bool, Value, Ref, Sum };
    Kind kind = Kind::Tuple;
    int32_t tag = 0;
    int32_t n = 0;
    int32_t sig = -1;
    int64_t v = 0;
  };
  struct Fragment {
    /// Recording: being recorded in run `run` (or left so by a refusal in an earlier run: it
    /// is recorded again); Ok: replayed; No: evaluated, never recorded.
    enum class State : uint8_t { Recording, Ok, No };
    State state = State::Recording;
    /// Ok: only a few Inst steps and no pending sum in its result, so that a fragment
    /// recording a call of it takes its instances as its own (PeBackend::inlined).
    bool flat = false;
    uint32_t run = 0;
    uint32_t first_step = 0, num_steps = 0;
    uint32_t first_node = 0, num_nodes = 0;
    uint32_t instances = 0; ///< appended by a replay, nested calls included
    uint32_t num_sums = 0;  ///< distinct pending sums in the result
    uint64_t fuel = 0;      ///< fuel the evaluation spent
    int32_t depth = 0;      ///< deepest nesting of calls it reached, itself included
  };

  /// What scanning a tree of a batch found (BatchScan, specializer/batch_scan.h), by the address of
  /// the tree's items: a tree met again (an example kept from epoch to epoch) is taken whole,
  /// its payloads numbered and its skeleton read from here, without walking it, where the
  /// entry hands each tree only to calls that replay (partial_eval.cpp, "Trees taken whole").
  /// `alive` tells whether the address is still that tree (it is not kept alive for this; a
  /// gone tree's weak reference keeps a small block until its facts are swept: bytes() counts
  /// it with the map's node).
  struct TreeFacts {
    std::weak_ptr<const interp::Values> alive;
    const void* type = nullptr; ///< the tree's type node (ir::TypeNode)
    uint64_t h1 = 0, h2 = 0;    ///< its skeleton
    int32_t tag = 0;            ///< its constructor
    uint32_t fields = 0;
    int32_t slots = 0;   ///< its payloads
    uint64_t values = 0; ///< the values the scan counts in it (the evaluation's fuel)
  };
  std::unordered_map<const void*, TreeFacts> trees;
  size_t trees_swept_at = 1024; ///< the size at which `trees` is next swept of gone trees
  /// Set when a tree taken whole met a call that could not replay: the batch was evaluated
  /// again with every tree scanned, and no tree is taken whole with this memo any more.
  bool trees_off = false;

  /// (function, Int/Bool arguments, skeletons of structured ones, signatures of tensor ones)
  /// -> fragment
  KeyMap keys;
  /// Megabytes after a pass over a data set, grown a little with every batch: on huge pages.
  std::vector<Fragment, HugePageAllocator<Fragment>> fragments;
  std::vector<Step, HugePageAllocator<Step>> steps;
  std::vector<LocalRef, HugePageAllocator<LocalRef>> refs;
  std::vector<Node, HugePageAllocator<Node>> nodes;
  std::vector<Tensor> tensors;
  uint32_t run = 0; ///< partial evaluations so far

  /// Past its memory bound the memo is full: it records nothing more (no new key, no new
  /// fragment) and replays what it holds. A data set bigger than the bound then replays the
  /// part it holds in every epoch, where dropping the memo each time it filled would record
  /// every call again and replay none. While full, each window of kFullWindow partial
  /// evaluations counts the instances they made and those replays appended; a window in which
  /// replays made less than a quarter means the batches moved on to other data: the memo is
  /// then stale, and dropped before the next batch, to record afresh.
  static constexpr uint32_t kFullWindow = 64;
  bool full = false;
  bool stale = false;
  uint32_t window_runs = 0;
  uint64_t window_instances = 0, window_replayed = 0;
  /// Counts one partial evaluation while full: `instances` made, `replayed` of them by
  /// replays. At a window's end, sets `stale` from it and starts the next.
  void count_full_run(uint64_t instances, uint64_t replayed) {
    ++window_runs;
    window_instances += instances;
    window_replayed += replayed;
    if (window_runs < kFullWindow)
      return;
    stale = window_replayed * 4 < window_instances;
    window_runs = 0;
    window_instances = window_replayed = 0;
  }

  /// An estimate of the memory held, to bound it (PeOptions::fragment_memo_bytes).
  size_t bytes() const {
    return fragments.size() * sizeof(Fragment) + steps.size() * sizeof(Step) +
           refs.size() * sizeof(LocalRef) + nodes.size() * sizeof(Node) + tensors.size() * 64 +
           keys.size() * 96 + trees.size() * (sizeof(TreeFacts) + 96);
  }
};

} // namespace pejit::specializer
