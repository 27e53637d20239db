// FaultHooks: the points where a test can make the engine fail, to check its failure policy
// (a batch whose partial evaluation, planning, kernel compile or plan run fails runs on the
// generic path, counted, with the reason recorded), or hold its kernel compiles back, to choose
// the batch at which an `auto` run switches to JIT kernels. The engine holds a null pointer in
// production; only tests install an implementation.
#pragma once

#include <string>

namespace pejit::runtime {

/// Called by the engine at its failure points and before its kernel compiles; the default of
/// each does nothing. A throwing hook fails that step as a bug in it would. Hooks run on the
/// training thread and on the pipeline's threads at once: an implementation must be
/// thread-safe.
class FaultHooks {
public:
  virtual ~FaultHooks() = default;
  /// Before the partial evaluation of a batch of `entry` (inline or in the pipeline).
  virtual void before_partial_eval(const std::string& entry) const { (void)entry; }
  /// Before a partially evaluated batch of `entry` is planned.
  virtual void before_planning(const std::string& entry) const { (void)entry; }
  /// Asked once, when the engine starts: true makes every kernel compile get invalid IR, so
  /// that LLVM fails as it would on a code generator bug.
  virtual bool corrupt_kernel_ir() const { return false; }
  /// Before the engine compiles the kernels of a plan of `entry`, or (`entry` empty) the
  /// templates known when it starts. In auto mode this runs on the pipeline's one thread and
  /// may block: until it returns nothing compiles and nothing is planned in the background,
  /// so batches run planned inline on reference kernels. Release it before Engine::drain()
  /// or the engine's destruction, which wait for it.
  virtual void before_compile(const std::string& entry) const { (void)entry; }
  /// Before a plan runs a batch of `entry`.
  virtual void before_execute(const std::string& entry) const { (void)entry; }
};

} // namespace pejit::runtime
