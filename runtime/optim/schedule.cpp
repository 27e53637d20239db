// Parsing and evaluating learning-rate schedules (schedule.h).
#include "runtime/optim/schedule.h"

#include "pejit/error.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <numbers>

namespace pejit::optim {

namespace {

[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  throw Error("--lr-schedule '" + spec + "': " + why +
              " (expected constant, step:EVERY:GAMMA, cosine:TOTAL or warmup:STEPS[,THEN])");
}

int64_t count(const std::string& s, const std::string& spec, const char* what) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || v < 1)
    bad(spec, std::string(what) + " must be a whole number >= 1, got '" + s + "'");
  return v;
}

} // namespace

LrSchedule LrSchedule::parse(const std::string& spec) {
  LrSchedule s;
  if (spec.empty() || spec == "constant")
    return s;
  s.spec_ = spec;
  size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "step") {
    size_t c2 = rest.find(':');
    if (colon == std::string::npos || c2 == std::string::npos)
      bad(spec, "step needs EVERY and GAMMA");
    s.kind_ = Kind::Step;
    s.n_ = count(rest.substr(0, c2), spec, "EVERY");
    const std::string g = rest.substr(c2 + 1);
    char* end = nullptr;
    s.gamma_ = std::strtod(g.c_str(), &end);
    if (g.empty() || end != g.c_str() + g.size() || !(s.gamma_ >= 0) || !std::isfinite(s.gamma_))
      bad(spec, "GAMMA must be a finite number >= 0, got '" + g + "'");
  } else if (kind == "cosine") {
    if (colon == std::string::npos)
      bad(spec, "cosine needs TOTAL");
    s.kind_ = Kind::Cosine;
    s.n_ = count(rest, spec, "TOTAL");
  } else if (kind == "warmup") {
    if (colon == std::string::npos)
      bad(spec, "warmup needs STEPS");
    size_t comma = rest.find(',');
    s.kind_ = Kind::Warmup;
    s.n_ = count(rest.substr(0, comma), spec, "STEPS");
    if (comma != std::string::npos) {
      LrSchedule then = parse(rest.substr(comma + 1));
      if (then.kind_ == Kind::Warmup)
        bad(spec, "a warmup cannot follow a warmup");
      s.then_ = std::make_shared<const LrSchedule>(std::move(then));
    }
  } else {
    bad(spec, "unknown schedule '" + kind + "'");
  }
  return s;
}

double LrSchedule::factor(int64_t t) const {
  switch (kind_) {
  case Kind::Constant:
    return 1.0;
  case Kind::Step:
    return std::pow(gamma_, static_cast<double>(t / n_));
  case Kind::Cosine: {
    double x = static_cast<double>(std::min(t, n_)) / static_cast<double>(n_);
    return 0.5 * (1.0 + std::cos(std::numbers::pi * x));
  }
  case Kind::Warmup:
    if (t < n_)
      return static_cast<double>(t + 1) / static_cast<double>(n_);
    return then_ ? then_->factor(t - n_) : 1.0;
  }
  return 1.0;
}

std::string LrSchedule::str() const {
  return spec_;
}

} // namespace pejit::optim
