// The library's own access to a public Session (include/pejit/pejit.h): what in-tree code built
// on a session (the trainer in runtime/train, the Python extension) needs beyond the public API.
// The trainer reads its data with the model's types before it knows the vocabulary's size, so
// it opens the session over a module it has already loaded; both encode batches as interpreter
// values.
#pragma once

#include "pejit/pejit.h"
#include "runtime/train/eval_entry.h"
#include "src/interp/params.h"
#include "src/interp/value.h"
#include "src/ir/module.h"

#include <memory>

namespace pejit::optim {
class Optimizer;
}
namespace pejit::checkpoint {
struct Checkpoint;
}
namespace pejit::runtime {
struct BatchFacts;
class FaultHooks;
} // namespace pejit::runtime

namespace pejit::runtime {

struct SessionAccess {
  /// A session over a module already checked (Session::from_source parses, then calls this).
  /// With `params`, its parameters are the checkpoint's (read from `params_path`), not drawn
  /// from their initializers: what evaluation, which loads them anyway, needs. Throws
  /// pejit::Error as Session::load_params does. `inference`: the session will only run()
  /// (EngineOptions::inference: forward kernels alone are compiled). `faults`: tests only
  /// (runtime/fault_hooks.h), the engine's hooks.
  static Session from_module(std::shared_ptr<ir::Module> m, const SessionOptions& opt,
                             const checkpoint::Checkpoint* params = nullptr,
                             const std::string& params_path = {}, bool inference = false,
                             std::shared_ptr<const FaultHooks> faults = nullptr);
  static const ir::Module& module(const Session& s);
  /// The session's own optimizer, for the trainer's schedule and per-parameter options.
  static optim::Optimizer& optimizer(Session& s);
  /// Drops `v` (a batch the caller has stepped) and frees its contents off the calling thread
  /// where the session has a pipeline (Engine::later): freeing a batch's many small values
  /// is serial work that need not delay the next step.
  static void retire(Session& s, Value& v);
  /// What running `batch` finds by walking it (runtime/engine.h BatchFacts), for a batch run
  /// many times on this session: run() with them skips those walks.
  static std::shared_ptr<const BatchFacts> facts(const Session& s, const Value& batch);
  /// Session::run on `batch`, whose facts() these are.
  static Value run(Session& s, const std::string& entry, const Value& batch,
                   const BatchFacts& facts);
  /// Hands `batch`, whose facts() these are, to the planning pipeline to be planned while the
  /// caller runs another (Engine::prefetch); a no-op in generic mode.
  static void prefetch(Session& s, const std::string& entry, const Value& batch,
                       std::shared_ptr<const BatchFacts> facts);
  /// The session's one-pass evaluation entry (runtime/train/eval_entry.h): added to its
  /// module on first use (after the engine's background work, as add_source), made again
  /// after add_source changes `loss`, `infer_nodes` or `infer` (its copies of their bodies
  /// would be stale), under the same name. The session's entries(), stats() and add_source()
  /// do not list it. An empty name: the model has none (score its entries one by one).
  static EvalEntry eval_entry(Session& s);
  /// The session's named dimensions, bound (the sizes its parameters were made with).
  static const interp::DimBindings& dims(const Session& s);
  static Value wrap(interp::Value v);
  static const interp::Value& unwrap(const Value& v);
};

} // namespace pejit::runtime
