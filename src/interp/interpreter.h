// The generic path: an eager evaluator of the checked IR (closures, recursion, match, lists)
// that records tensor ops on a tape when gradients are wanted. It is pejit's ground truth and
// its fallback: every specialized result is checked against it. An Interpreter is set up once
// per module and reused across calls; it holds no hidden global state.
#pragma once

#include "src/interp/call_limit.h"
#include "src/interp/params.h"
#include "src/interp/random.h"
#include "src/interp/tape.h"
#include "src/interp/value.h"

#include <memory>
#include <string>
#include <vector>

namespace pejit::interp {

struct InterpreterOptions {
  /// Maximum depth of nested function calls: max_depth plus calls_per_level per level of the
  /// input's nesting (call_limit.h). Deeper recursion is a pejit::Error, never a stack
  /// overflow.
  int max_depth = CallLimit::kDefaultMaxDepth;
  int calls_per_level = CallLimit::kCallsPerLevel;
};

class Interpreter {
public:
  /// `m` must be checked and outlive the interpreter; `dims` binds its named dimensions.
  Interpreter(std::shared_ptr<const ir::Module> m, DimBindings dims, InterpreterOptions opt = {});

  /// Runs an entry without gradients. Arguments are checked against the entry's types.
  Value run(const std::string& entry, const Values& args, const Params& params);

  struct Gradients {
    float loss = 0;
    std::vector<ParamGrad> grads; ///< one per parameter, in the module's order
  };
  /// Value of a scalar (f32[]) entry and the gradient of every parameter.
  Gradients value_and_grad(const std::string& entry, const Values& args, const Params& params);

  /// Calls a (non-entry) function directly, without gradients: what a residual program's
  /// function templates compute, one instance at a time.
  Value call_function(int fn_index, const Values& args, const Params& params);

  /// The seed and step that random ops draw with (interp/random.h). value_and_grad is a
  /// training step (dropout on); run and call_function are inference (dropout off), whatever
  /// `train` says.
  void set_random(const RandomState& rs) { random_ = rs; }
  const RandomState& random() const { return random_; }

  const ir::Module& module() const { return *m_; }
  const DimBindings& dims() const { return dims_; }

private:
  std::shared_ptr<const ir::Module> m_;
  DimBindings dims_;
  InterpreterOptions opt_;
  Tape tape_;
  RandomState random_;
  std::vector<bool> contexts_; ///< random_context_functions of the module, at contexts_gen_
  uint64_t contexts_gen_ = ~uint64_t{0};
  const std::vector<bool>& random_contexts();
};

/// check_grad: compares central differences along `directions` random unit directions in
/// parameter space with the AD directional derivative <grad, d>. Both evaluate the entry as a
/// training step at the interpreter's random state (the same dropout masks).
struct GradCheckReport {
  bool ok = true;
  double max_rel_error = 0;
  std::vector<double> numeric, analytic; ///< per direction
  std::string message;                   ///< a readable report (always filled)
};
GradCheckReport check_grad(Interpreter& in, const std::string& entry, const Values& args,
                           const Params& params, int directions = 3, uint64_t seed = 1,
                           double eps = 1e-2, double tolerance = 2e-2);

} // namespace pejit::interp
