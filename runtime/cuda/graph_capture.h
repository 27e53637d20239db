// When the CUDA executor captures a plan's launches as a CUDA graph (docs/cuda.md). A plan is
// keyed by its identity (specializer::Plan::key, the plan cache's key): the same key means the
// same templates, groups, rows, layout and launch list, so the same device addresses, and a
// graph captured once replays for every later batch of that plan after the batch's payloads
// are copied into the plan's staging area. Capturing costs about one run's launches plus the
// instantiation, so a plan is captured only when it repeats (its second sighting), and only
// when it has enough launches for a replay to save anything; the captured graphs are bounded
// (least recently used evicted first, the caller destroys the evicted key's graph). Plain C++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>

namespace pejit::runtime::cuda {

struct CaptureOptions {
  int sightings = 2;       ///< capture on this sighting of a plan (1: on the first)
  size_t min_launches = 4; ///< plans with fewer launches are always launched directly
  size_t capacity = 64;    ///< graphs kept at once
};

struct CaptureDecision {
  enum class Action : uint8_t {
    Launch,  ///< enqueue the launch list directly
    Capture, ///< enqueue it under stream capture, instantiate and keep the graph
    Replay,  ///< launch the kept graph
  };
  Action action = Action::Launch;
  /// With Capture at capacity: the plan whose graph the caller must destroy first.
  std::optional<uint64_t> evict;
};

class CapturePolicy {
public:
  explicit CapturePolicy(CaptureOptions o = {});

  /// What to do for a batch of plan `key` whose launch list has `launches` launches. Counts
  /// the sighting; a Capture makes the next decide() of that key a Replay (until it is evicted
  /// or forgotten).
  CaptureDecision decide(uint64_t key, size_t launches);
  /// The capture of `key` failed (or its graph was destroyed): launch it directly from now on
  /// (failed: never capture it again).
  void forget(uint64_t key, bool failed = false);

  size_t captured() const { return lru_.size(); }
  struct Stats {
    int64_t launches = 0, captures = 0, replays = 0, evictions = 0;
  };
  const Stats& stats() const { return stats_; }

private:
  struct Entry {
    int seen = 0;
    bool never = false; ///< a failed capture
    std::optional<std::list<uint64_t>::iterator> graph;
  };
  CaptureOptions o_;
  std::unordered_map<uint64_t, Entry> plans_;
  std::list<uint64_t> lru_; ///< keys with a graph, most recently used first
  Stats stats_;
};

} // namespace pejit::runtime::cuda
