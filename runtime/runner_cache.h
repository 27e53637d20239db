// RunnerCache: the template graphs of one module (GraphRunner per template), shared by the
// plan executor and the engine's pipeline, with their compile state.
#pragma once

#include "runtime/graph_runner.h"
#include "src/interp/params.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace pejit::runtime {

/// The template graphs of one module, by Template::key(), shared by the plan executor (the
/// training thread) and the specialization pipeline; thread-safe. A template's entry is its
/// runner as it is now: on reference kernels until its elementwise runs are compiled (tier 2),
/// then on JIT kernels (tier 3). A compile failure is remembered with its reason and never
/// retried; the engine then runs the batches of plans that use that template on the generic
/// path. Null runner: the template runs through the batching interpreter (no
/// batched rule for some node, or tracing failed).
class RunnerCache {
public:
  /// `scope`: what a compiling get() compiles (GraphRunner::compile): the forward kernels
  /// alone for an engine that only runs inference; the weight gradients' column blocks too
  /// when steps split across more than one thread.
  RunnerCache(std::shared_ptr<const ir::Module> m, interp::DimBindings dims,
              jit::KernelCache* kernels, GraphRunner::CompileScope scope = {});

  /// The runner to use for `t` now; builds its graph on a miss, and compiles it first when
  /// `compile` (else it runs on reference kernels until prepare() or a compiling get()).
  /// `why` (optional) receives the reason of a null runner.
  std::shared_ptr<const GraphRunner> get(const specializer::Template& t, bool compile,
                                         std::string* why = nullptr);

  /// Tests: every compile fails (invalid IR), as an LLVM error would.
  void inject_compile_failure(bool on) { inject_ = on; }
  /// "template: reason" for every compile that failed.
  std::vector<std::string> compile_failures() const;
  /// "template: reason" if `t`'s compile failed, else empty. Cheap while nothing has failed.
  std::string failure(const specializer::Template& t) const;
  bool jit() const { return kernels_ != nullptr; }

private:
  struct Entry {
    std::shared_ptr<const GraphRunner> runner;
    std::string why;
    bool compiled = false, failed = false;
    std::string failure; ///< "template: reason" when failed
  };
  std::shared_ptr<const ir::Module> m_;
  interp::DimBindings dims_;
  jit::KernelCache* kernels_;
  GraphRunner::CompileScope scope_;
  bool inject_ = false;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> map_;
  uint64_t generation_ = ~0ull;
  std::vector<std::string> failures_;
  std::atomic<bool> any_failure_{false};
};

} // namespace pejit::runtime
