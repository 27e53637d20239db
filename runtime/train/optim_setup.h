// The trainer's optimizer options beyond SessionOptions: a learning-rate schedule,
// per-parameter learning rates and weight decay, and frozen parameters (`--lr-schedule`,
// `--param-lr`, `--param-decay`, `--no-decay-bias`, `--freeze`), checked against the model's parameters and installed in
// the session's optimizer; their canonical text goes into the checkpoint's training state, so
// that a resumed run with other options is refused instead of silently diverging.
#pragma once

#include "pejit/pejit.h"
#include "runtime/optim/schedule.h"
#include "runtime/train/trainer.h"

#include <string>

namespace pejit::runtime {

/// Parses the options of `opt`, installs the per-parameter ones in the session's optimizer
/// (before any state is loaded into it), freezes the parameters named, and returns the schedule. `canonical` gets their text
/// ("" when none is set). Throws pejit::Error naming the flag for a bad value or an unknown
/// parameter.
optim::LrSchedule setup_optimizer(Session& session, const TrainOptions& opt,
                                  std::string& canonical);

} // namespace pejit::runtime
