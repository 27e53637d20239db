// Partial evaluation, merging and planning of one batch, with the template table, refusals
// and cone versions they share (specializer_service.h).
#include "runtime/specializer_service.h"

#include "runtime/chrome_trace.h"
#include "runtime/fault_hooks.h"
#include "specializer/batch_walk.h"
#include "specializer/fragments.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "src/util/hash_mix.h"

#include <chrono>

namespace pejit::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A stage boundary for time_stages: the clock only while someone is timing the stages.
Clock::time_point stage_stamp(const PlanningStages* stages) {
  return stages != nullptr ? Clock::now() : Clock::time_point{};
}

// The per-instance parts of a plan and its residual: make_layout's input, which a published
// plan does not read again. A plan of 25 trees holds about as much in them as in the rest.
void release_instances(PlanEntry& e) {
  std::vector<specializer::Instance>().swap(e.residual.instances);
  std::vector<specializer::Ref>().swap(e.residual.arg_pool);
  std::vector<specializer::TensorSig>().swap(e.residual.sum_sigs);
  std::vector<int32_t>().swap(e.plan.group_of);
  std::vector<int32_t>().swap(e.plan.row_of);
}

} // namespace

uint64_t ConeVersions::of(const std::string& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (generation_ != m_->generation()) {
    versions_.clear();
    generation_ = m_->generation();
  }
  auto it = versions_.find(entry);
  if (it != versions_.end())
    return it->second;
  return versions_[entry] = m_->cone_version(entry);
}

void ConeVersions::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  versions_.clear();
}

SpecializerService::SpecializerService(std::shared_ptr<const ir::Module> m,
                                       interp::DimBindings dims, bool merge_equal,
                                       const FaultHooks* faults, ChromeTrace& trace, int max_depth)
    : m_(m), dims_(std::move(dims)), merge_equal_(merge_equal), max_depth_(max_depth),
      faults_(faults), trace_(trace), cones_(std::move(m)) {}

PlanKey SpecializerService::batch_key(const interp::Value& batch) const {
  return batch_part(batch).key;
}

uint64_t SpecializerService::with_pattern(uint64_t skeleton, const std::vector<int32_t>& slots) {
  return util::hash_mix(skeleton, specializer::payload_pattern_hash(slots));
}

// One walk (specializer::walk_batch) for the depth, the key's hashes and the payloads. The
// walk's vectors are kept per thread for the next batch, up to kKeptPayloads.
static constexpr size_t kKeptPayloads = size_t{1} << 16;

BatchPart SpecializerService::batch_part(const interp::Value& batch) const {
  thread_local specializer::BatchWalk w; // its vectors' capacity kept per thread
  const auto t0 = stage_stamp(stages_);
  specializer::walk_batch(batch, w);
  const auto t1 = stage_stamp(stages_);
  BatchPart b;
  b.depth = w.depth;
  b.skeleton = w.skeleton;
  b.key.hash = w.skeleton;
  if (merge_equal_) {
    b.key.slots = specializer::equal_payload_slots(w.payloads, w.sites);
    b.key.hash = with_pattern(b.key.hash, b.key.slots);
  }
  if (stages_) {
    stages_->walk += secs(t0, t1);
    stages_->payload_pattern += secs(t1, Clock::now());
    stages_->walked++;
  }
  if (w.payloads.size() <= kKeptPayloads) {
    b.payloads.reserve(w.payloads.size());
    b.payloads.swap(w.payloads); // w keeps the reserved vector for the next batch's
  } else {                       // an unusually large batch: w keeps nothing of it
    b.payloads = std::move(w.payloads);
    w.payloads = {};
    std::vector<uint64_t>().swap(w.sites);
  }
  return b;
}

PlanKey SpecializerService::key(const std::string& entry, PlanKey batch_part) {
  PlanKey k = std::move(batch_part);
  for (char c : entry)
    k.hash = util::hash_mix(k.hash, static_cast<uint8_t>(c));
  k.hash = util::hash_mix(k.hash, cones_.of(entry));
  for (const auto& [n, s] : dims_) {
    for (char c : n)
      k.hash = util::hash_mix(k.hash, static_cast<uint8_t>(c));
    k.hash = util::hash_mix(k.hash, static_cast<uint64_t>(s));
  }
  return k;
}

std::shared_ptr<const PlanEntry> SpecializerService::make(const std::string& entry,
                                                          const interp::Value& batch,
                                                          const std::vector<int32_t>& slots,
                                                          std::string& why, double& seconds,
                                                          const BatchKnown& known) {
  auto t0 = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t cone = cones_.of(entry);
  auto r = refused_.find(entry);
  if (r != refused_.end() && r->second.cone == cone) {
    why = r->second.why;
    return nullptr;
  }
  try {
    if (faults_)
      faults_->before_partial_eval(entry);
    // The executor reads this batch's payloads from the batch itself (batch_payloads):
    // partial evaluation only numbers them.
    specializer::PeOptions pe_opt;
    pe_opt.keep_inputs = false;
    pe_opt.max_depth = max_depth_;
    pe_opt.depth = known.depth;
    pe_opt.skeleton = known.skeleton;
    auto t_pe0 = stage_stamp(stages_);
    auto pe = specializer::partially_evaluate(*m_, dims_, entry, batch, templates_, pe_opt);
    auto t_pe = stage_stamp(stages_);
    if (!pe.ok) {
      why = "refused at " + pe.where.str() + ": " + pe.reason;
      refused_[entry] = {cone, why};
      return nullptr;
    }
    if (merge_equal_)
      specializer::merge_equal_instances(pe.residual, slots);
    auto t_merge = stage_stamp(stages_);
    auto e = std::make_shared<PlanEntry>();
    e->entry = entry;
    if (faults_)
      faults_->before_planning(entry);
    e->plan = specializer::make_plan(pe.residual, templates_);
    auto t_plan = stage_stamp(stages_);
    e->residual = std::move(pe.residual);
    e->residual.inputs.clear();
    e->layout = make_layout(e->plan, e->residual);
    if (!keep_instances_) // the layout has what running the plan needs of them
      release_instances(*e);
    auto t_layout = stage_stamp(stages_);
    if (!snapshot_ || snapshot_->size() != templates_.size())
      snapshot_ = std::make_shared<const specializer::TemplateTable>(templates_);
    e->templates = snapshot_;
    e->bytes = sizeof(PlanEntry) + e->residual.instances.size() * 64 + e->plan.groups.size() * 256 +
               e->layout.bytes();
    auto t1 = Clock::now();
    seconds = secs(t0, t1);
    if (stages_) {
      stages_->scan += pe.scan_seconds;
      stages_->evaluate += secs(t_pe0, t_pe) - pe.scan_seconds;
      stages_->merge += secs(t_pe, t_merge);
      stages_->plan += secs(t_merge, t_plan);
      stages_->layout += secs(t_plan, t_layout);
      stages_->planned++;
    }
    trace_.add("plan " + entry, "specialize", t0, t1);
    return e;
  } catch (const std::exception& ex) {
    why = std::string("specialization failed: ") + ex.what();
    return nullptr;
  }
}

void SpecializerService::forget(const std::vector<std::string>& entries) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : entries)
    refused_.erase(e);
  cones_.clear();
}

SpecializerService::MemoFacts SpecializerService::fragment_memo() {
  std::lock_guard<std::mutex> lock(mu_);
  const specializer::FragmentMemo* fm = templates_.pe_memo().fragments.p.get();
  return fm == nullptr ? MemoFacts{} : MemoFacts{fm->bytes(), fm->full};
}

} // namespace pejit::runtime
