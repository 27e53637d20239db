// Learning-rate schedules for `pejit train --lr-schedule`: a factor on every parameter's
// learning rate that depends only on the optimizer step (the batch's index in the run, from
// 0), so a resumed run, which knows its epoch and batch, continues the schedule exactly.
//   constant                 1
//   step:EVERY:GAMMA         GAMMA^floor(t / EVERY)
//   cosine:TOTAL             (1 + cos(pi * min(t, TOTAL) / TOTAL)) / 2
//   warmup:STEPS[,THEN]      (t + 1) / STEPS while t < STEPS, then THEN at t - STEPS (or 1)
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace pejit::optim {

class LrSchedule {
public:
  /// Throws pejit::Error naming the syntax for a spec that does not parse.
  static LrSchedule parse(const std::string& spec);
  /// The factor at optimizer step t (t >= 0).
  double factor(int64_t t) const;
  /// The spec as parsed, normalized ("constant" for the empty spec).
  std::string str() const;

private:
  enum class Kind { Constant, Step, Cosine, Warmup } kind_ = Kind::Constant;
  int64_t n_ = 0;                          ///< EVERY, TOTAL or STEPS
  double gamma_ = 1;                       ///< step's GAMMA
  std::shared_ptr<const LrSchedule> then_; ///< after warmup
  std::string spec_ = "constant";
};

} // namespace pejit::optim
