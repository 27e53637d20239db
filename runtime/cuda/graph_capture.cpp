// The CUDA-graph capture policy (graph_capture.h): a sighting count per plan key and an LRU of
// the keys whose graph is kept.
#include "runtime/cuda/graph_capture.h"

#include "pejit/error.h"

namespace pejit::runtime::cuda {

CapturePolicy::CapturePolicy(CaptureOptions o) : o_(o) {
  if (o_.capacity == 0 || o_.sightings < 1)
    throw Error("CapturePolicy: capacity and sightings must be at least 1");
}

CaptureDecision CapturePolicy::decide(uint64_t key, size_t launches) {
  Entry& e = plans_[key];
  e.seen++;
  CaptureDecision d;
  if (e.graph) {
    lru_.splice(lru_.begin(), lru_, *e.graph); // most recently used
    stats_.replays++;
    d.action = CaptureDecision::Action::Replay;
    return d;
  }
  if (e.never || launches < o_.min_launches || e.seen < o_.sightings) {
    stats_.launches++;
    return d;
  }
  if (lru_.size() >= o_.capacity) {
    uint64_t old = lru_.back();
    lru_.pop_back();
    plans_[old].graph.reset();
    stats_.evictions++;
    d.evict = old;
  }
  lru_.push_front(key);
  e.graph = lru_.begin();
  stats_.captures++;
  d.action = CaptureDecision::Action::Capture;
  return d;
}

void CapturePolicy::forget(uint64_t key, bool failed) {
  auto it = plans_.find(key);
  if (it == plans_.end())
    return;
  if (it->second.graph) {
    lru_.erase(*it->second.graph);
    it->second.graph.reset();
  }
  it->second.never = it->second.never || failed;
}

} // namespace pejit::runtime::cuda
