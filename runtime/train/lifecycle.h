// What keeps a `pejit train` run from losing its work: SIGINT/SIGTERM caught as a flag the
// loop polls (so the step in flight finishes and the checkpoint is written whole), the metric
// --save-best and --patience follow, and exact text for the numbers a resumable checkpoint
// carries (the epoch's partial sums must come back bit for bit).
#pragma once

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/train/trainer.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace pejit::runtime {

/// While it lives, SIGINT and SIGTERM only record themselves (the handler sets an atomic
/// flag; nothing else runs in signal context); the handlers before it are restored after.
/// A second signal changes nothing: it does not cut a save short.
class SignalGuard {
public:
  explicit SignalGuard(bool active);
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
  /// The first signal received (SIGINT or SIGTERM), 0 when none.
  static int pending();

private:
  bool active_;
};

/// "SIGINT", "SIGTERM" or "signal N".
std::string signal_name(int sig);

/// A metric of EpochStats that --save-best can follow, and which way is better.
struct Metric {
  std::string name; ///< as in `--json`: loss, root_acc, node_acc, dev_loss, dev_root_acc, ...
  bool higher_is_better = true;
  /// Throws pejit::Error naming the metrics there are.
  static Metric parse(const std::string& name);
  double of(const EpochStats& st) const;
  bool better(double v, double than) const { return higher_is_better ? v > than : v < than; }
  /// The value as printed (a percentage for accuracies).
  std::string show(double v) const;
};

/// What a run must carry across a stop to continue bit for bit, beside the parameters and the
/// optimizer state: the data order (seed, length, batch size, shuffling), the random state
/// random ops draw with (the session's seed and step: dropout's masks), the epoch's partial
/// sums, and --save-best's record. Written as a checkpoint's training state.
struct RunState {
  uint64_t seed = 0;
  int64_t examples = 0, batch_size = 0;
  Shuffle shuffle = Shuffle::Examples;
  double loss_sum = 0;
  int64_t nodes = 0, trees = 0, batches = 0;
  double best = std::nan("");
  int64_t best_epoch = -1, bad_epochs = 0;
  /// The optimizer options beyond SessionOptions (optim_setup.h's canonical text; "" when none).
  std::string optim;
  /// Session::random_seed() and random_step() when the state was taken (read by from()).
  uint64_t random_seed = 0;
  uint32_t random_step = 0;

  /// The state at `batch` of `epoch` (the next to run), with `session`'s random state.
  TrainingState at(int64_t epoch, int64_t batch, const Session& session) const;
  /// Reads what at() wrote; throws pejit::Error naming `path` for a missing or bad value. A
  /// state written before the random state was kept gets the seed and the step a run from
  /// its start has there (one step per batch done).
  static RunState from(const checkpoint::TrainState& ts, const std::string& path);
  /// Gives `session` the random state read by from(): the next step draws what it drew.
  void restore_random(Session& session) const { session.set_random(random_seed, random_step); }
  /// Starts an epoch's partial sums afresh.
  void new_epoch() { loss_sum = 0, nodes = 0, trees = 0, batches = 0; }
};

/// A double as text that reads back to the same bits (hexadecimal floating point).
std::string exact(double v);
/// Reads exact()'s text (or any strtod number); throws pejit::Error naming `what` otherwise.
double parse_exact(const std::string& s, const std::string& what);
int64_t parse_int(const std::string& s, const std::string& what);

} // namespace pejit::runtime
