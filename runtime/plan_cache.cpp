// The 2Q cache of plans (plan_cache.h).
#include "runtime/plan_cache.h"

#include <algorithm>

namespace pejit::runtime {

bool PlanCache::cached(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.count(key) != 0;
}

std::shared_ptr<const PlanEntry> PlanCache::use_or_claim(uint64_t key) {
  std::unique_lock<std::mutex> lock(mu_);
  made_.wait(lock, [&] { return making_.count(key) == 0; });
  auto it = slots_.find(key);
  if (it != slots_.end())
    return use(it);
  making_.insert(key);
  return nullptr;
}

bool PlanCache::claim(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.count(key) == 0 && making_.insert(key).second;
}

void PlanCache::abandon(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (making_.erase(key))
    made_.notify_all();
}

std::shared_ptr<const PlanEntry> PlanCache::use(Slots::iterator it) {
  const uint64_t key = it->first;
  Slot& slot = it->second;
  std::shared_ptr<const PlanEntry> entry = slot.entry; // evict() below may drop the slot
  if (slot.reused) {
    lru_.splice(lru_.begin(), lru_, slot.pos);
  } else if (++slot.uses >= 2) { // a second use: off probation
    probation_.erase(slot.pos);
    lru_.push_front(key);
    slot.pos = lru_.begin();
    slot.reused = true;
    evict();
  } else { // a plan made ahead ran: it may leave probation now
    evict();
  }
  return entry;
}

void PlanCache::publish(uint64_t key, std::shared_ptr<const PlanEntry> e, int uses, bool repeats) {
  std::lock_guard<std::mutex> lock(mu_);
  if (making_.erase(key))
    made_.notify_all();
  if (slots_.count(key))
    return;
  bytes_ += e->bytes;
  const bool reused = ghosts_.erase(key) > 0 || repeats;
  auto& list = reused ? lru_ : probation_;
  list.push_front(key);
  slots_.emplace(key, Slot{std::move(e), list.begin(), reused, uses});
  evict();
}

void PlanCache::drop_entries(const std::vector<std::string>& entries) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = slots_.begin(); it != slots_.end();) {
    auto next = std::next(it);
    if (std::find(entries.begin(), entries.end(), it->second.entry->entry) != entries.end())
      drop(it);
    it = next;
  }
}

size_t PlanCache::count(const std::string& entry) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [k, s] : slots_)
    n += s.entry->entry == entry;
  return n;
}

int64_t PlanCache::evictions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evictions_;
}

void PlanCache::drop(Slots::iterator it) {
  bytes_ -= it->second.entry->bytes;
  (it->second.reused ? lru_ : probation_).erase(it->second.pos);
  slots_.erase(it);
}

void PlanCache::evict() {
  auto over_bytes = [&] { return bytes_ > limits_.bytes; };
  while (!probation_.empty() && (probation_.size() > limits_.probation_entries || over_bytes())) {
    // The oldest plan that has run; plans made ahead wait for their batch (unless the byte
    // bound is hit), however far ahead a caller prefetched.
    auto v = std::find_if(probation_.rbegin(), probation_.rend(),
                          [&](uint64_t k) { return slots_.find(k)->second.uses > 0; });
    if (v == probation_.rend() && !over_bytes())
      break;
    uint64_t victim = v == probation_.rend() ? probation_.back() : *v;
    drop(slots_.find(victim));
    if (ghosts_.insert(victim).second)
      ghost_order_.push_back(victim);
    while (ghost_order_.size() > kGhosts) {
      ghosts_.erase(ghost_order_.front());
      ghost_order_.pop_front();
    }
    ++evictions_;
  }
  while (!lru_.empty() && (lru_.size() > limits_.entries || over_bytes())) {
    drop(slots_.find(lru_.back()));
    ++evictions_;
  }
}

} // namespace pejit::runtime
