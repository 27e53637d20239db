// KernelCache: one mutex over the map, the LRU list and the statistics; compiling happens
// outside it, published through a shared_future per entry so that waiters need no lock.
#include "jit/kernel_cache.h"

#include "pejit/error.h"

#include <algorithm>
#include <chrono>

namespace pejit::jit {

KernelCache::KernelCache(Jit& jit, size_t max_entries, std::shared_ptr<const ScheduleDB> schedules)
    : jit_(jit), schedules_(std::move(schedules)), max_entries_(max_entries < 1 ? 1 : max_entries) {
}

KernelCache::~KernelCache() = default;

KernelSpec KernelCache::resolve(const KernelSpec& spec, std::string& source) const {
  return resolve_schedule(spec, schedules_.get(), jit_.target_cpu(), source);
}

GemmSpec KernelCache::resolve(const GemmSpec& spec, std::string& source) const {
  return resolve_schedule(spec, schedules_.get(), jit_.target_cpu(), source);
}

std::string KernelCache::key(const KernelSpec& spec) const {
  std::string source;
  return resolve(spec, source).canonical_text() + " cpu=" + jit_.target_cpu();
}

std::string KernelCache::key(const GemmSpec& spec) const {
  std::string source;
  return resolve(spec, source).canonical_text() + " cpu=" + jit_.target_cpu();
}

std::string KernelCache::key(const ReduceSpec& spec) const {
  return spec.canonical_text() + " cpu=" + jit_.target_cpu();
}

std::shared_ptr<const CachedKernel> KernelCache::get(const KernelSpec& spec) {
  std::string source;
  KernelSpec s = resolve(spec, source);
  return get_or_compile(s.canonical_text() + " cpu=" + jit_.target_cpu(), source,
                        [&] { return ElementwiseKernel{s, jit_.compile(s)}; });
}

std::shared_ptr<const CachedKernel> KernelCache::get_gemm(const GemmSpec& spec) {
  std::string source;
  GemmSpec s = resolve(spec, source);
  return get_or_compile(s.canonical_text() + " cpu=" + jit_.target_cpu(), source,
                        [&] { return GemmKernel{s, jit_.compile_gemm(s)}; });
}

std::shared_ptr<const CachedKernel> KernelCache::get_reduce(const ReduceSpec& spec) {
  return get_or_compile(key(spec), "default",
                        [&] { return ReduceKernel{spec, jit_.compile_reduce(spec)}; });
}

namespace {

// What every family's entry records besides its code, from the family.
void describe(CachedKernel& c) {
  std::visit(
      [&](const auto& f) {
        c.handle = f.code.handle;
        c.compile_ms = f.code.compile_ms;
        c.ir_hash = f.code.ir_hash;
        c.loaded = f.code.loaded;
      },
      c.family);
  struct Schedule {
    std::string operator()(const ElementwiseKernel& f) const { return f.spec.schedule; }
    // The block it got ("6x4"), without CompiledGemm::schedule's "(default)": the source says.
    std::string operator()(const GemmKernel& f) const {
      return f.code.schedule.substr(0, f.code.schedule.find(' '));
    }
    std::string operator()(const ReduceKernel& f) const { return f.spec.schedule; }
  };
  c.schedule = std::visit(Schedule{}, c.family);
}

} // namespace

template <class Compile>
std::shared_ptr<const CachedKernel>
KernelCache::get_or_compile(const std::string& k, const std::string& source, Compile compile) {
  std::promise<std::shared_ptr<const CachedKernel>> promise;
  Future pending;
  uint64_t generation = 0;
  {
    std::lock_guard lock(mu_);
    if (auto it = entries_.find(k); it != entries_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      pending = it->second.future;
    } else {
      ++stats_.misses;
      generation = ++generation_;
      lru_.push_front(k);
      entries_.emplace(k, Entry{promise.get_future().share(), lru_.begin(), generation});
      evict_over_bound();
    }
  }
  if (pending.valid())
    return pending.get(); // waits while another thread compiles; rethrows its failure

  std::shared_ptr<const CachedKernel> result;
  try {
    auto c = std::make_unique<CachedKernel>();
    c->key = k;
    c->family = compile();
    c->schedule_source = source;
    describe(*c);
    Jit* jit = &jit_;
    // The code lives until the entry is evicted and the last holder lets go.
    result = std::shared_ptr<const CachedKernel>(c.release(), [jit](const CachedKernel* c) {
      try {
        jit->remove(c->handle);
      } catch (const Error&) {
        // Nothing to do from a destructor; the code stays mapped until the Jit dies.
      }
      delete c;
    });
  } catch (...) {
    {
      std::lock_guard lock(mu_);
      ++stats_.failures;
      // Only our own entry: it may have been evicted and the key re-requested meanwhile.
      if (auto it = entries_.find(k); it != entries_.end() && it->second.generation == generation) {
        lru_.erase(it->second.lru);
        entries_.erase(it);
      }
    }
    promise.set_exception(std::current_exception());
    throw;
  }
  {
    std::lock_guard lock(mu_);
    if (result->loaded) {
      ++stats_.loaded;
    } else {
      ++stats_.compiles;
      stats_.compile_ms += result->compile_ms;
    }
  }
  promise.set_value(result);
  return result;
}

void KernelCache::evict_over_bound() {
  while (entries_.size() > max_entries_) {
    // The newest entry is at the front, so the victim is never the one being inserted.
    std::string victim = std::move(lru_.back());
    lru_.pop_back();
    entries_.erase(victim); // its CachedKernel (and code) goes with its last shared_ptr
    ++stats_.evictions;
  }
}

KernelCacheStats KernelCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::vector<std::shared_ptr<const CachedKernel>> KernelCache::entries() const {
  std::vector<std::shared_ptr<const CachedKernel>> out;
  {
    std::lock_guard lock(mu_);
    for (const auto& [k, e] : entries_) {
      if (e.future.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        continue;
      try {
        out.push_back(e.future.get());
      } catch (...) {
        // A failed compile: its entry is being removed.
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->key < b->key; });
  return out;
}

std::vector<std::pair<std::string, uint64_t>> KernelCache::ir_hashes() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& e : entries())
    out.emplace_back(e->key, e->ir_hash);
  return out;
}

size_t KernelCache::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

} // namespace pejit::jit
