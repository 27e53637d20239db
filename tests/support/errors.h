// Reading errors in tests: the message of the pejit::Error a call throws, and its first line
// (the located "file:line:col: error: ..." line, before any source excerpt).
#pragma once

#include "src/util/check.h"

#include <string>

namespace pejit::test {

/// The whole message of the Error `fn` throws, or "" if none.
template <class Fn> std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

} // namespace pejit::test
