// The native stack as a resource: how much of it is left to the calling thread, and running
// a function on a thread of its own whose stack is as large as the caller asks (recursive
// stages on deep inputs: the evaluator, the walks over a batch's values). Ordinary inputs run
// where they are; only an input that needs more stack than the caller has pays for a thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

namespace pejit::util {

/// Bytes of native stack left below the caller's frame on this thread (an estimate that errs
/// low: the stack's size minus what is used, less a reserve for signal handlers and libc).
size_t native_stack_left();

/// Threads started by run_with_native_stack in this process (to check that ordinary inputs
/// start none).
uint64_t native_stack_threads();

/// The native stack the last thread started by run_on_new_stack touched, in bytes (its
/// resident pages when it ended; thread-local storage at its top included).
size_t native_stack_last_used();

/// Runs `body(arg)` on a new thread whose stack is `bytes` (rounded up to pages; reserved, its
/// pages committed only as they are touched) and waits for it. Throws pejit::Error naming
/// `bytes` when the stack cannot be reserved. `body` must not throw.
void run_on_new_stack(size_t bytes, void (*body)(void*), void* arg);

/// fn() on this thread when `bytes` of stack are left here, else on a thread with a stack of
/// `reserve` bytes (at least `bytes`); its result or exception is the caller's.
template <class F> decltype(auto) with_native_stack(size_t bytes, size_t reserve, F&& fn) {
  using R = std::invoke_result_t<F&>;
  if (native_stack_left() >= bytes)
    return fn();
  struct Box {
    std::remove_reference_t<F>* fn;
    std::exception_ptr error;
    std::conditional_t<std::is_void_v<R>, bool, std::optional<R>> out{};
  } box{&fn, nullptr};
  run_on_new_stack(
      reserve > bytes ? reserve : bytes,
      [](void* p) {
        Box& b = *static_cast<Box*>(p);
        try {
          if constexpr (std::is_void_v<R>)
            (*b.fn)();
          else
            b.out.emplace((*b.fn)());
        } catch (...) {
          b.error = std::current_exception();
        }
      },
      &box);
  if (box.error)
    std::rethrow_exception(box.error);
  if constexpr (!std::is_void_v<R>)
    return R(std::move(*box.out));
}

} // namespace pejit::util
