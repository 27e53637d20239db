// The partial evaluator: runs an entry's control flow on one concrete batch and leaves the
// residual program, an instance DAG over templates (specializer/residual.h).
//
// Design note.
// - Online: the shared evaluator (interp/evaluator.h) runs the IR; structure (constructor
//   tags, list spines, Int and Bool values) is concrete, tensors are either known constants
//   (literals, zeros, what folds from them) or residual references. The checker's binding
//   times say in advance what will be static; the partial evaluator decides on the values
//   it actually sees.
// - Templates (polyvariant, memoized): a call of a function whose parameters are tensors,
//   Ints and Bools and whose result is tensors (or tuples of them) is not unfolded: it becomes
//   an instance of the template (function, static Int/Bool arguments, argument shapes),
//   interned once per run in a TemplateTable. Ops outside any template become one-op
//   templates. `+` of residual tensors of one shape and `sum_list` stay symbolic and become
//   one n-ary SumN instance where the sum is used.
// - Termination: every call and op spends fuel; the budget scales with the size of the
//   batch's structure (PeOptions). Running out is a refusal, never a hang. Recursion depth is
//   bounded by the evaluator as on the generic path.
// - Refusal: control flow on a dynamic value (to_int/to_bool of a residual tensor, and so any
//   `if`/`match` that needs it) stops partial evaluation with the source location; the
//   caller runs that batch on the generic path and remembers the refusal.
// - Cost (planning must stay far cheaper than a generic step): one walk over the batch
//   checks it against the entry's type, hashes its skeleton and makes its input slots (a
//   mismatch reruns interp::check_value for the message); the TemplateTable's PeMemo keeps,
//   per module state and dims, signature ids, the template each (callee, statics, argument
//   signatures) resolved to, and the entry's cone version (Module::cone_version builds a
//   graph), so a call seen before costs one hash lookup and no Template is built. Instances'
//   arguments go to one flat pool (Residual::arg_pool), the batch's rebuilt structure to
//   vectors the memo keeps (pe_backend.h, NodePool), and the backend's and the evaluator's
//   working vectors are kept per thread: a batch allocates little beyond its residual. A
//   call that is not a template, on a subtree whose skeleton was seen before (an SST leaf, a
//   small subtree, a whole repeated tree), is not evaluated but replayed from its fragment
//   (the design note in partial_eval.cpp).
// - Not handled: returning lists or ADTs from template-eligible functions (such calls are
//   unfolded instead), dynamic shapes (shapes are static by construction).
#pragma once

#include "specializer/residual.h"
#include "src/interp/call_limit.h"
#include "src/interp/params.h"
#include "src/interp/value.h"
#include "src/util/diagnostics.h"

#include <optional>
#include <string>

namespace pejit::specializer {

struct PeOptions {
  /// Fuel per value of the batch's structure (nodes, list cells, payloads), plus kFuelBase.
  size_t fuel_per_value = 4096;
  static constexpr size_t kFuelBase = 100000;
  /// Maximum depth of nested calls: max_depth plus calls_per_level per level of the batch's
  /// nesting (interp/call_limit.h).
  int max_depth = interp::CallLimit::kDefaultMaxDepth;
  int calls_per_level = interp::CallLimit::kCallsPerLevel;
  /// Memory for the fragments of inlined calls (partial_eval.cpp), kept across batches in the
  /// TemplateTable; past it the memo records nothing more and replays what it holds, until it
  /// stops paying (FragmentMemo::stale). 0: no fragments, every call is evaluated. Room for
  /// the fragments of the SST training set with the zoo's BiLSTM tagger, whose fragments (a
  /// sentence's whole residual each) are the largest measured (bench/RESULTS.md, Session 25).
  size_t fragment_memo_bytes = size_t{256} << 20;
  /// Whether Residual::inputs gets a copy of each payload tensor. A caller that plans and then
  /// runs the plan on the payloads it collects itself (the engine) turns it off: the residual
  /// then only counts its input slots (Residual::num_inputs) and the batch scan touches no
  /// tensor's storage.
  bool keep_inputs = true;
  /// The batch's nesting depth (interp::nesting_depth) when the caller has measured it, which
  /// spares partial evaluation that walk; kUnknownDepth: measured here.
  static constexpr size_t kUnknownDepth = ~size_t{0};
  size_t depth = kUnknownDepth;
  /// skeleton_hash(batch) when the caller has it (walk_batch), which spares the batch scan
  /// hashing the skeleton again; none: hashed here.
  std::optional<uint64_t> skeleton;
};

struct PeResult {
  bool ok = false;
  Residual residual;
  Span where;         ///< refusal: the source location
  std::string reason; ///< refusal: why
  /// Inlined calls replayed from fragments, and fragments recorded (partial_eval.cpp).
  size_t replayed = 0, recorded = 0;
  /// Trees of the batch taken whole (met in an earlier batch; partial_eval.cpp, "Trees taken
  /// whole"), not scanned.
  size_t whole_trees = 0;
  /// Of the call's time, the scan of the batch before its evaluation (BatchScan: checked
  /// against the entry's type, payloads numbered, structure rebuilt).
  double scan_seconds = 0;
};

/// Partially evaluates `entry` on `batch` (its single argument). Throws pejit::Error only for
/// misuse (unknown entry, a batch that does not match the entry's type).
PeResult partially_evaluate(const ir::Module& m, const interp::DimBindings& dims,
                            const std::string& entry, const interp::Value& batch,
                            TemplateTable& templates, const PeOptions& opt = {});

/// The skeleton key of a batch: a hash of its static structure (constructor tags, list
/// lengths, Int and Bool values, payload dtypes and shapes), not of payload contents.
uint64_t skeleton_hash(const interp::Value& batch);

/// Whether calls of `f` become template instances (tensor/Int/Bool parameters, tensor
/// results, at least one tensor parameter).
bool is_template_eligible(const ir::FnDecl& f);

/// The templates known before any batch: one per template-eligible function whose parameters
/// are all tensors (no static Int/Bool), at its declared shapes; equal (Template::same_as) to
/// what partial evaluation makes for its calls. Lets a session compile their kernels at start.
std::vector<Template> static_templates(const ir::Module& m, const interp::DimBindings& dims);

} // namespace pejit::specializer
