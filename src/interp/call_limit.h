// How deep the recursive stages (the evaluator, and the walks over a batch's values before
// and after it) may go on one input, and the native stack that takes. The bound on nested
// calls is max_depth (`--max-depth`, SessionOptions::max_depth; 4000 by default) plus
// calls_per_level per level of the input's nesting (interp::nesting_depth), so that a program
// recursing along its input is never stopped by the input's size. The calls past the default
// bound get native stack reserved for them, on a thread of its own when the caller's has too
// little (util::with_native_stack): ordinary inputs run where they are. docs/architecture.md
// ("Deep inputs") has the design.
#pragma once

#include "src/interp/value.h"
#include "src/util/native_stack.h"

#include <cstddef>
#include <string>

namespace pejit::interp {

struct CallLimit {
  static constexpr int kDefaultMaxDepth = 4000;
  static constexpr int kCallsPerLevel = 4;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  /// Under AddressSanitizer (redzones) and ThreadSanitizer frames are several times larger:
  /// the stacks sized from an input grow alike, so deep inputs run there too.
  static constexpr size_t kFrameScale = 4;
#else
  static constexpr size_t kFrameScale = 1;
#endif
  /// Native stack reserved per nested call; the evaluator's guard stops a program whose calls
  /// need more with an error, never a fault.
  static constexpr size_t kStackPerCall = kFrameScale * (size_t{4} << 10);
  /// What the stages need besides the calls.
  static constexpr size_t kBaseStack = size_t{1} << 20;

  int base = kDefaultMaxDepth; ///< max_depth
  int per_level = kCallsPerLevel;
  size_t input_depth = 0;
  int calls = kDefaultMaxDepth; ///< the bound on nested calls
  /// The stack a thread must have left to run the input where it is: kBaseStack and the calls
  /// past the default bound (those within it run on an ordinary thread's stack, as now; the
  /// guard stops them where it runs out). An ordinary input needs no more than kBaseStack.
  size_t stack_bytes = kBaseStack;
  /// The stack of a thread started for the input: kBaseStack and every call.
  size_t thread_stack_bytes = kBaseStack + kDefaultMaxDepth * kStackPerCall;

  /// The bound for an input of `input_depth` levels: max_depth (<= 0: the default) plus
  /// per_level calls per level.
  static CallLimit of(int max_depth, size_t input_depth, int per_level = kCallsPerLevel);
  /// As of() for the deepest of `inputs`.
  static CallLimit of_inputs(int max_depth, const Values& inputs, int per_level = kCallsPerLevel);

  /// What the bound is made of and what raises it, for the evaluator's errors.
  std::string explain() const;
};

/// fn(limit) where the native stack has room for `limit` (this thread, or a thread of its own).
template <class F> decltype(auto) with_call_limit(const CallLimit& limit, F&& fn) {
  return util::with_native_stack(limit.stack_bytes, limit.thread_stack_bytes,
                                 [&]() -> decltype(auto) { return fn(limit); });
}

} // namespace pejit::interp
