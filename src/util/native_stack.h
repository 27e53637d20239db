// The native stack as a resource: how much of it is left to the calling thread, and running
// a function on another thread whose stack is as large as the caller asks (recursive stages on
// deep inputs: the evaluator, the walks over a batch's values). Ordinary inputs run where they
// are; only an input that needs more stack than the caller has runs on another thread. That
// thread is kept for the caller's next such input where its stack is moderate (a scoring
// pass's 500-tree batches, each a few hundred levels deep), so that a pass starts it once and
// its thread-local buffers outlive each batch; a deeper input gets a thread of its own.
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

/// Threads started by run_on_stack in this process.
uint64_t native_stack_threads();
/// Bodies run_on_stack ran in this process (to check that ordinary inputs run none).
uint64_t native_stack_runs();

/// The native stack of the thread run_on_stack last ran a body on, as resident after it, in
/// bytes (the pages its bodies touched; thread-local storage at its top included): what the
/// body touched, at most, on a thread started for it.
size_t native_stack_last_used();

/// Stacks up to this size (after rounding) are kept with their thread for the caller's next
/// body (one per calling thread, ended when the caller ends); larger ones get a thread each.
inline constexpr size_t kKeptStackBytes = size_t{64} << 20;
/// A kept thread whose stack has more than this resident after a body is not kept (its pages
/// would stay with it).
inline constexpr size_t kKeptStackResident = size_t{8} << 20;

/// Runs `body(arg)` on another thread whose stack is at least `bytes` (reserved, its pages
/// committed only as they are touched) and waits for it: the caller's kept thread when its
/// stack is large enough, else a thread started now (kept when its stack is at most
/// kKeptStackBytes, the size then rounded up to a power of two). Throws pejit::Error naming the
/// size when the stack cannot be reserved or the thread not started. `body` must not throw.
void run_on_stack(size_t bytes, void (*body)(void*), void* arg);

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
  run_on_stack(
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
