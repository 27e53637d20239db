// What a Session reports (include/pejit/pejit.h): statistics, compiled kernels, and the
// distributed job's ranks, slices and replica checks.
#include "runtime/session_impl.h"
#include "src/util/hash_mix.h"

namespace pejit {

using runtime::detail::unwrap;
using runtime::detail::wrap;

namespace {

// The doubles <-> bytes copies of gather_ranks' allgather: an empty vector's data() may be null,
// and memcpy from or to null is undefined even for no bytes.
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes != 0)
    std::memcpy(dst, src, bytes);
}

} // namespace

SessionStats Session::stats() const {
  auto s = impl_->engine->stats();
  SessionStats out;
  out.threads = impl_->workers->threads();
  out.generic_batches = s.generic_batches;
  out.specialized_batches = s.specialized_batches;
  out.generic_seconds = s.generic_seconds;
  out.specialized_seconds = s.specialized_seconds;
  out.grad_batches = s.grad_batches;
  out.plan_hits = s.plan_hits;
  out.plan_misses = s.plan_misses;
  out.plans_prefetched = s.plans_prefetched;
  out.plan_evictions = s.plan_evictions;
  out.plan_seconds = s.plan_seconds;
  out.background_plan_seconds = s.background_plan_seconds;
  out.jit_batches = s.jit_batches;
  out.jit_seconds = s.jit_seconds;
  out.interpreted_groups = s.interpreted_groups;
  out.interpreted_seconds = s.interpreted_seconds;
  for (const auto& what : s.interpreted_templates) {
    // "name: why" -> "name (where the function is): why"; an op's template has no function.
    const size_t colon = what.find(": ");
    const ir::FnDecl* f = impl_->module->fn(what.substr(0, colon));
    if (f != nullptr && f->span.known() && colon != std::string::npos)
      out.interpreted_templates.push_back(what.substr(0, colon) + " (" + f->span.str() + ")" +
                                          what.substr(colon));
    else
      out.interpreted_templates.push_back(what);
  }
  out.kernels_compiled = s.kernels_compiled;
  out.compile_ms = s.compile_ms;
  out.kernels_cached = s.kernels_cached;
  out.first_planned_s = s.first_planned_s;
  out.first_jit_s = s.first_jit_s;
  out.last_compile_s = s.last_compile_s;
  out.fallbacks = s.fallbacks;
  if (impl_->reducer) {
    const auto& d = impl_->reducer->stats();
    out.rank = rank();
    out.ranks = ranks();
    out.grad_reductions = d.reductions;
    out.reductions_overlapped = d.overlapped;
    out.comm_wait_seconds = d.wait_seconds;
    out.comm_dense_bytes = d.dense_bytes;
    out.comm_sparse_bytes = d.sparse_bytes;
  }
  for (const auto& [name, e] : impl_->per_entry)
    if (!impl_->hidden(name)) {
      out.per_entry[name] = e;
      out.per_entry[name].plans_cached = static_cast<int64_t>(impl_->engine->cached_plans(name));
    }
  out.respecialized = impl_->respecialized;
  out.reused = impl_->reused;
  return out;
}

std::vector<KernelInfo> Session::kernels() const {
  std::vector<KernelInfo> out;
  for (const auto& k : impl_->engine->kernels())
    out.push_back({k.signature, k.schedule, k.schedule_source, k.ir_hash, k.compile_ms, k.cached});
  return out;
}

int Session::rank() const {
  return impl_->comm != nullptr ? impl_->comm->rank() : 0;
}

int Session::ranks() const {
  return impl_->comm != nullptr ? impl_->comm->size() : 1;
}

std::pair<size_t, size_t> Session::slice(size_t n) const {
  const auto r = static_cast<size_t>(rank()), k = static_cast<size_t>(ranks());
  return {n * r / k, n * (r + 1) / k};
}

std::vector<std::vector<double>> Session::gather_ranks(const std::vector<double>& values) const {
  if (impl_->comm == nullptr)
    return {values};
  std::string mine(values.size() * sizeof(double), '\0');
  copy_bytes(mine.data(), values.data(), mine.size());
  std::vector<std::vector<double>> out;
  for (const auto& b : impl_->comm->allgather(mine)) {
    std::vector<double> v(b.size() / sizeof(double));
    copy_bytes(v.data(), b.data(), v.size() * sizeof(double));
    out.push_back(std::move(v));
  }
  return out;
}

uint64_t Session::param_hash() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t x) { h = util::hash_mix(h, x); };
  for (size_t i = 0; i < impl_->params.names.size(); ++i) {
    for (char c : impl_->params.names[i])
      mix(static_cast<unsigned char>(c));
    const Tensor& t = impl_->params.values[i];
    const auto* w = reinterpret_cast<const uint32_t*>(t.raw());
    mix(static_cast<uint64_t>(t.numel()));
    for (int64_t k = 0; k < t.numel(); ++k)
      mix(w[k]);
  }
  return h;
}

void Session::check_replicas() const {
  if (impl_->comm == nullptr)
    return;
  const uint64_t h = param_hash();
  // Two halves: a double holds 32 bits exactly.
  auto all = gather_ranks({static_cast<double>(h >> 32), static_cast<double>(h & 0xffffffffu)});
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      throw runtime::dist::JobError(
          "the parameters of rank " + std::to_string(r) +
          " differ from rank 0's: the ranks do not "
          "train the same model (another --seed, model, data vocabulary or checkpoint)");
}

float* Session::param_data(const std::string& name) {
  int i = impl_->params.index(name);
  if (i < 0)
    throw Error("no parameter named '" + name + "'");
  Tensor& t = impl_->params.values[static_cast<size_t>(i)];
  // A tensor shared with another holder (a checkpoint just loaded) gets storage of its own
  // first: writes through the pointer must reach this session's parameter only.
  if (!t.unique())
    t = t.clone();
  return t.f32();
}

} // namespace pejit
