// PEJIT_CHECK: the assertion for bugs (not for user mistakes, which are Diagnostics).
// A failed check throws pejit::InternalError naming file and line, so a background task can
// catch it at its boundary and a CLI can report it instead of aborting.
#pragma once

#include "pejit/error.h"

#include <sstream>
#include <stdexcept>
#include <string>

namespace pejit {

/// Thrown by a failed PEJIT_CHECK: a bug in pejit, never a user's mistake.
class InternalError : public std::logic_error {
public:
  using std::logic_error::logic_error;
};

namespace detail {
class CheckFailure {
public:
  CheckFailure(const char* file, int line, const char* cond) {
    os_ << file << ":" << line << ": internal check failed: " << cond;
  }
  template <class T> CheckFailure& operator<<(const T& v) {
    os_ << (first_ ? ": " : "") << v;
    first_ = false;
    return *this;
  }
  [[noreturn]] ~CheckFailure() noexcept(false) { throw InternalError(os_.str()); }

private:
  std::ostringstream os_;
  bool first_ = true;
};
} // namespace detail

} // namespace pejit

#define PEJIT_CHECK(cond)                                                                          \
  if (cond) {                                                                                      \
  } else                                                                                           \
    ::pejit::detail::CheckFailure(__FILE__, __LINE__, #cond)
