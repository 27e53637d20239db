// What every evaluator backend needs to key the random ops (src/kernels/random.h): the run's
// random state (seed, step, train or inference), the cursor that numbers random contexts in
// evaluation order, and which functions open a context. docs/language.md ("Random ops")
// defines the key; the rule here is the one the generic path, the partial evaluator and the
// template tracer all follow, so that they number every draw alike.
#pragma once

#include "src/ir/module.h"
#include "src/tensor/tensor.h"

#include <cstdint>
#include <vector>

namespace pejit::interp {

/// The run's random state. `train` false (inference: Interpreter::run, Session::run and eval)
/// turns dropout into the identity; the sources (bernoulli, uniform, normal) draw either way.
struct RandomState {
  uint64_t seed = 0;
  uint32_t step = 0;
  bool train = true;
};

/// Numbers random contexts in evaluation order. A context opens at each call of a function
/// that opens_random_context while none is open (and closes when that call returns); a random
/// op draws at (the open context, its next index), or alone in a fresh context when none is
/// open.
struct RandomCursor {
  uint32_t next = 0; ///< the next context number
  int64_t open = -1; ///< the open context, -1: none
  uint32_t j = 0;    ///< the next index in the open context

  /// The (context, index) of a random op evaluated now.
  std::pair<uint32_t, uint32_t> draw() {
    if (open >= 0)
      return {static_cast<uint32_t>(open), j++};
    return {next++, 0};
  }
};

/// The key operand of a random op: i32[6] {context, index, step, seed low, seed high, train}.
Tensor random_key_tensor(uint32_t context, uint32_t index, const RandomState& rs);

/// Whether calls of `f` can be template instances (tensor, Int and Bool parameters, at least
/// one tensor, tensor results): specializer::is_template_eligible is this rule.
bool template_eligible(const ir::FnDecl& f);

/// Per function of `m` (by index): whether evaluating it can draw random numbers (a random op
/// in its body or in a function it calls or names).
std::vector<bool> random_functions(const ir::Module& m);

/// Per function: whether its calls open a random context (template_eligible and random).
std::vector<bool> random_context_functions(const ir::Module& m);

} // namespace pejit::interp
