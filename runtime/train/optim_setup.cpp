// Installing the trainer's schedule and per-parameter optimizer options (optim_setup.h).
#include "runtime/train/optim_setup.h"

#include "runtime/optim/optimizer.h"
#include "runtime/session_access.h"
#include "runtime/train/lifecycle.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

namespace pejit::runtime {

namespace {

// "NAME=VALUE" items of `flag` into `into`, each NAME a parameter of the session.
void parse_items(const std::vector<std::string>& items, const char* flag, const Session& s,
                 std::map<std::string, float>& into) {
  const auto names = s.param_names();
  for (const auto& item : items) {
    size_t eq = item.rfind('=');
    if (eq == std::string::npos || eq == 0)
      throw Error(std::string(flag) + " '" + item + "': expected NAME=VALUE");
    std::string name = item.substr(0, eq), v = item.substr(eq + 1);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string all;
      for (const auto& n : names)
        all += (all.empty() ? "" : ", ") + n;
      throw Error(std::string(flag) + " " + item + ": the model has no parameter " + name +
                  " (it has " + all + ")");
    }
    char* end = nullptr;
    float x = std::strtof(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x) || x < 0)
      throw Error(std::string(flag) + " " + item + ": '" + v + "' is not a finite number >= 0");
    into[name] = x;
  }
}

} // namespace

optim::LrSchedule setup_optimizer(Session& session, const TrainOptions& opt,
                                  std::string& canonical) {
  optim::LrSchedule sched = optim::LrSchedule::parse(opt.lr_schedule);
  optim::Optimizer& o = SessionAccess::optimizer(session);
  optim::OptimizerOptions oo = o.options();
  if (opt.no_decay_bias)
    for (const auto& n : session.param_names())
      if (session.param_shape(n).size() <= 1)
        oo.param_weight_decay[n] = 0.0f;
  parse_items(opt.param_lr, "--param-lr", session, oo.param_lr);
  parse_items(opt.param_decay, "--param-decay", session, oo.param_weight_decay);
  o.set_param_options(oo.param_lr, oo.param_weight_decay); // its workers stay
  std::set<std::string> frozen;
  for (const auto& name : opt.freeze) {
    const auto names = session.param_names();
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string all;
      for (const auto& n : names)
        all += (all.empty() ? "" : ", ") + n;
      throw Error("--freeze " + name + ": the model has no parameter " + name + " (it has " + all +
                  ")");
    }
    session.freeze(name);
    frozen.insert(name);
  }
  canonical.clear();
  if (sched.str() != "constant")
    canonical += "lr_schedule=" + sched.str() + ";";
  auto list = [&](const char* key, const std::map<std::string, float>& m) {
    if (m.empty())
      return;
    canonical += key;
    canonical += "=";
    for (const auto& [n, v] : m)
      canonical += n + ":" + exact(v) + ",";
    canonical += ";";
  };
  list("param_lr", oo.param_lr);
  list("param_decay", oo.param_weight_decay);
  if (!frozen.empty()) {
    canonical += "freeze=";
    for (const auto& n : frozen)
      canonical += n + ",";
    canonical += ";";
  }
  return sched;
}

} // namespace pejit::runtime
