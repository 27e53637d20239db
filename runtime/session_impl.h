// The private halves of the public Session, Optimizer and Value (include/pejit/pejit.h),
// shared by the files that implement them: runtime/session.cpp (construction, steps, runs,
// parameters), session_checkpoint.cpp (save and load), session_info.cpp (statistics,
// kernels, ranks) and value.cpp.
#pragma once

#include "pejit/pejit.h"

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cuda/device.h"
#include "runtime/dist/comm.h"
#include "runtime/dist/grad_reducer.h"
#include "runtime/engine.h"
#include "runtime/optim/optimizer.h"
#include "runtime/parallel.h"
#include "runtime/schedule_api.h"
#include "runtime/session_access.h"
#include "runtime/train/eval_entry.h"
#include "src/interp/interpreter.h"
#include "src/types/builtins.h"
#include "src/types/check.h"
#include "src/util/check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>

namespace pejit {

struct Value::Impl {
  interp::Value v;
};

namespace runtime::detail {
inline Value wrap(interp::Value v) {
  return Value(std::make_shared<const Value::Impl>(Value::Impl{std::move(v)}));
}
inline const interp::Value& unwrap(const Value& v) {
  return v.impl().v;
}
/// Every parameter of `params` from the checkpoint `ck` (read from `path`), which must hold
/// each with the same shape (it may hold more).
void take_params(interp::Params& params, const checkpoint::Checkpoint& ck, const std::string& path);
} // namespace runtime::detail

struct Session::Impl {
  std::shared_ptr<ir::Module> module;
  SessionOptions opt;
  interp::DimBindings dims;
  interp::Params params;
  std::shared_ptr<const runtime::Workers> workers; // shared by the engine and the optimizers
  std::unique_ptr<runtime::Engine> engine;
  std::unique_ptr<optim::Optimizer> optimizer;
  // Per-entry counters (SessionStats::per_entry): the engine's plan hits and misses are
  // attributed to the entry whose batch ran since the last look at them.
  std::map<std::string, SessionStats::Entry> per_entry;
  int64_t seen_hits = 0, seen_misses = 0;
  std::vector<std::string> respecialized, reused;
  std::set<std::string> frozen; // parameters step() leaves as they are (Session::freeze)
  // Data parallelism: the job's communicator and this session's gradient reduction (null:
  // not distributed).
  runtime::dist::Comm* comm = nullptr;
  std::unique_ptr<runtime::dist::GradReducer> reducer;
  uint64_t random_seed = 0; // the seed the caller gave (the engine's is keyed by the rank too)
  // The one-pass evaluation entry (SessionAccess::eval_entry), hidden from what the session
  // lists: `eval_name` is its name once added, kept when it is made again; `eval` is what the
  // last making gave (an empty name: the model has none), current while `eval_current`.
  std::string eval_name;
  runtime::EvalEntry eval;
  bool eval_current = false;

  bool hidden(const std::string& name) const { return !eval_name.empty() && name == eval_name; }
  // After add_source's change `r`: the evaluation entry is made again before its next run when
  // the definition of an entry it copies changed (or a prediction entry came); a change to
  // what they call reaches the copies as it reaches the entries. Definitions of the caller's
  // under its names (or its helpers') make them the caller's: the next one takes other names.
  void note_change(const types::AddResult& r) {
    for (const std::string& c : r.changed) {
      if (c == "loss" || c == "infer_nodes" || c == "infer")
        eval_current = false;
      if (!eval_name.empty() && (c == eval_name || c == runtime::eval_loss_name(eval_name) ||
                                 c == runtime::eval_preds_name(eval_name))) {
        eval_name.clear();
        eval = {};
        eval_current = false;
      }
    }
  }
  std::vector<std::string> visible(std::vector<std::string> names) const {
    std::erase_if(names, [&](const std::string& n) { return hidden(n); });
    return names;
  }

  // The engine's random seed: each rank draws its own numbers (its slice's dropout masks are
  // not the other ranks'), the same ones on every path.
  void set_random(uint64_t seed, uint32_t step) {
    random_seed = seed;
    uint64_t mixed = seed;
    if (comm != nullptr && comm->rank() > 0)
      mixed = seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(comm->rank()));
    engine->set_random(mixed, step);
  }

  // A data-parallel step: this rank's slice, the gradients summed over the ranks (the same
  // sequence of collectives on every rank, even when this rank's part fails), one update.
  float dist_step(const std::string& entry, const interp::Value& batch, optim::Optimizer& opt) {
    std::vector<bool> skip(params.names.size(), false);
    for (size_t i = 0; i < params.names.size(); ++i)
      skip[i] = frozen.count(params.names[i]) != 0;
    reducer->begin(params, skip);
    interp::Interpreter::Gradients g;
    std::string failure;
    try {
      if (batch.kind() == interp::Value::Kind::List && batch.list_size() == 0) {
        // A global batch smaller than the job: nothing here, but the step's draws still count.
        g.loss = 0;
        g.grads.assign(params.names.size(), interp::ParamGrad{});
        auto r = engine->random();
        engine->set_random(r.seed, r.step + 1);
      } else {
        g = engine->value_and_grad(entry, batch, params, reducer.get());
        account(entry);
      }
      drop_frozen(g.grads);
    } catch (const std::exception& e) {
      failure = *e.what() != '\0' ? e.what() : "an unnamed error";
    }
    float loss = reducer->finish(g.grads, g.loss, failure);
    if (std::isfinite(loss))
      opt.step(params, g.grads);
    return loss;
  }

  // The gradients of frozen parameters dropped before an update: an empty gradient is one the
  // optimizers skip.
  void drop_frozen(std::vector<interp::ParamGrad>& grads) const {
    if (frozen.empty())
      return;
    for (size_t i = 0; i < params.names.size() && i < grads.size(); ++i)
      if (frozen.count(params.names[i]) != 0)
        grads[i] = interp::ParamGrad{};
  }

  void account(const std::string& entry) {
    auto s = engine->stats();
    auto& e = per_entry[entry];
    e.batches += 1;
    e.plan_hits += s.plan_hits - seen_hits;
    e.plan_misses += s.plan_misses - seen_misses;
    seen_hits = s.plan_hits;
    seen_misses = s.plan_misses;
  }

  void init_missing_params() {
    interp::Params fresh = interp::init_params(*module, dims, opt.seed);
    interp::Params next;
    for (size_t i = 0; i < fresh.names.size(); ++i) {
      int old = params.index(fresh.names[i]);
      next.names.push_back(fresh.names[i]);
      next.values.push_back(old >= 0 && params.values[old].shape() == fresh.values[i].shape()
                                ? params.values[old]
                                : fresh.values[i]);
    }
    params = std::move(next);
  }
};

struct Optimizer::Impl {
  optim::Optimizer opt;
};

} // namespace pejit
