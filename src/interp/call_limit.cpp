// The bound on nested calls and the native stack for an input (call_limit.h).
#include "src/interp/call_limit.h"

#include <algorithm>
#include <climits>

namespace pejit::interp {

CallLimit CallLimit::of(int max_depth, size_t input_depth, int per_level) {
  CallLimit l;
  l.base = max_depth > 0 ? max_depth : kDefaultMaxDepth;
  l.per_level = std::max(0, per_level);
  l.input_depth = input_depth;
  long long calls = l.base + static_cast<long long>(l.per_level) *
                                 static_cast<long long>(std::min<size_t>(input_depth, INT_MAX));
  l.calls = static_cast<int>(std::min<long long>(calls, INT_MAX));
  long long extra = std::max<long long>(0, static_cast<long long>(l.calls) - kDefaultMaxDepth);
  l.stack_bytes = kBaseStack + static_cast<size_t>(extra) * kStackPerCall;
  l.thread_stack_bytes = kBaseStack + static_cast<size_t>(l.calls) * kStackPerCall;
  return l;
}

CallLimit CallLimit::of_inputs(int max_depth, const Values& inputs, int per_level) {
  size_t d = 0;
  for (const auto& v : inputs)
    d = std::max(d, nesting_depth(v));
  return of(max_depth, d, per_level);
}

std::string CallLimit::explain() const {
  std::string depth = "the input's depth is " + std::to_string(input_depth);
  if (per_level == 0)
    return "the limit is max_depth " + std::to_string(base) + " whatever the input; " + depth;
  return "the limit is max_depth " + std::to_string(base) + " + " + std::to_string(per_level) +
         " per level of the input; " + depth +
         "; --max-depth (SessionOptions::max_depth) raises the " + std::to_string(base);
}

} // namespace pejit::interp
