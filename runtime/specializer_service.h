// SpecializerService: turns one batch of an entry into a plan (partial evaluation, merging of
// equal instances, planning) and owns what that needs across batches: the template table,
// the refusals, and the cone versions the plan keys are made of.
#pragma once

#include "runtime/plan_cache.h"
#include "specializer/partial_eval.h"
#include "src/interp/call_limit.h"
#include "src/interp/params.h"
#include "src/interp/value.h"
#include "src/ir/module.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace pejit::runtime {

class ChromeTrace;
class FaultHooks;

/// The cone version of each entry (ir::Module::cone_version), cached until the module's
/// generation changes. Owns the cache under its one lock, which is never held during a
/// partial evaluation: the training thread computes plan keys while the pipeline plans.
class ConeVersions {
public:
  explicit ConeVersions(std::shared_ptr<const ir::Module> m) : m_(std::move(m)) {}
  uint64_t of(const std::string& entry);
  void clear();

private:
  std::shared_ptr<const ir::Module> m_;
  std::mutex mu_;
  std::map<std::string, uint64_t> versions_; // under mu_
  uint64_t generation_ = ~0ull;              // under mu_: the module generation of versions_
};

/// A batch's plan key, and with merge_equal the pattern of its equal payloads
/// (specializer::equal_payload_slots) that a merged plan depends on.
struct PlanKey {
  uint64_t hash = 0;
  std::vector<int32_t> slots;
};

/// What a walk of a batch finds for planning and running it: its nesting depth
/// (interp::nesting_depth), its part of the plan key (SpecializerService::batch_key) and its
/// payloads (specializer::batch_payloads).
struct BatchPart {
  size_t depth = 0;
  uint64_t skeleton = 0; ///< specializer::skeleton_hash
  PlanKey key;
  std::vector<Tensor> payloads;
};

/// Where planning time went, stage by stage, summed over the batches walked and planned since
/// SpecializerService::time_stages: for benches that look for what to shorten.
struct PlanningStages {
  double walk = 0;            ///< walk_batch: depth, skeleton, payloads and their sites
  double payload_pattern = 0; ///< equal_payload_slots (with merge_equal)
  double scan = 0;            ///< partial evaluation's scan of the batch (PeResult)
  double evaluate = 0;        ///< partial evaluation after the scan: fragments replayed, recorded
  double merge = 0;           ///< merge_equal_instances
  double plan = 0;            ///< make_plan
  double layout = 0;          ///< make_layout
  int64_t walked = 0, planned = 0; ///< batches
};

/// What the caller of SpecializerService::make already knows of the batch (its BatchPart's
/// depth and skeleton hash), which partial evaluation then does not find again.
struct BatchKnown {
  size_t depth = specializer::PeOptions::kUnknownDepth;
  std::optional<uint64_t> skeleton;
};

/// Partial evaluation and planning, one batch at a time, from the training thread (inline
/// planning) and the pipeline's threads. Owns the template table (append-only; plans hold
/// snapshots of it), the last snapshot, and the refusals (per entry, at the cone version
/// they were made at, so a refused entry is not partially evaluated again batch after batch
/// until its definitions change), all under its one lock; the cone versions are a
/// ConeVersions of their own.
class SpecializerService {
public:
  /// `faults` (null in production) and `trace` must outlive the service; `max_depth`: the
  /// partial evaluator's bound on nested calls besides its per-level part (PeOptions).
  SpecializerService(std::shared_ptr<const ir::Module> m, interp::DimBindings dims,
                     bool merge_equal, const FaultHooks* faults, ChromeTrace& trace,
                     int max_depth = interp::CallLimit::kDefaultMaxDepth);

  /// The key of `batch`'s plan: its skeleton, the entry, its definitions' cone version and
  /// the dims, and with merge_equal which of its payloads are equal.
  PlanKey key(const std::string& entry, const interp::Value& batch) {
    return key(entry, batch_key(batch));
  }
  /// The part of the key that the batch alone gives (its skeleton and equal payloads: what a
  /// walk of the batch finds), for a batch run many times (Engine::facts).
  PlanKey batch_key(const interp::Value& batch) const;
  /// The batch's part of a merged plan's key from its skeleton hash and equal payloads.
  static uint64_t with_pattern(uint64_t skeleton, const std::vector<int32_t>& slots);
  /// The depth, batch_key and payloads of `batch`, found in one walk.
  BatchPart batch_part(const interp::Value& batch) const;
  /// `batch_part` (batch_key's) completed with the entry, its cone version and the dims.
  PlanKey key(const std::string& entry, PlanKey batch_part);

  /// Partially evaluates and plans `batch` (`slots`: its PlanKey's); null with `why` on a
  /// refusal (remembered) or a failure (not remembered). `seconds`: the time it took.
  /// `known`: what the caller has found of the batch already (BatchPart).
  std::shared_ptr<const PlanEntry> make(const std::string& entry, const interp::Value& batch,
                                        const std::vector<int32_t>& slots, std::string& why,
                                        double& seconds, const BatchKnown& known = {});

  /// Forgets the refusals of these entries and every cached cone version (definitions
  /// changed).
  void forget(const std::vector<std::string>& entries);

  /// The partial evaluator's fragment memo: the memory it holds (FragmentMemo::bytes) and
  /// whether it is full (past PeOptions::fragment_memo_bytes), for reports.
  struct MemoFacts {
    size_t bytes = 0;
    bool full = false;
  };
  MemoFacts fragment_memo();

  /// From now on, sums each stage's time into `*stages` (null: no more). Not synchronized:
  /// for a caller that walks and plans its batches on one thread (pejit_profile_bench
  /// --stages); `*stages` must outlive the timing.
  void time_stages(PlanningStages* stages) { stages_ = stages; }

  /// Whether the plans made from now on keep their residual's instances and arguments and the
  /// plan's per-instance maps (group_of, row_of), for a caller that writes them out
  /// (pejit_plan_ahead_bench --dump). By default a plan drops them once its layout is made:
  /// running it reads the layout. Set before planning starts.
  void keep_instances(bool on) { keep_instances_ = on; }

private:
  struct Refusal {
    uint64_t cone;
    std::string why;
  };
  const std::shared_ptr<const ir::Module> m_;
  const interp::DimBindings dims_;
  const bool merge_equal_;
  const int max_depth_;
  const FaultHooks* const faults_;
  ChromeTrace& trace_;
  ConeVersions cones_;
  PlanningStages* stages_ = nullptr; ///< time_stages'
  bool keep_instances_ = false;      ///< keep_instances' (set before planning starts)

  std::mutex mu_;                        // held for a whole partial evaluation: one at a time
  specializer::TemplateTable templates_; // under mu_
  std::shared_ptr<const specializer::TemplateTable> snapshot_; // under mu_: of templates_
  std::map<std::string, Refusal> refused_;                     // under mu_
};

} // namespace pejit::runtime
