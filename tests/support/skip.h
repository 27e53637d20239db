// Skipping a test case at run time, when what it needs (a tool such as python3 with torch, a
// data set) is missing: the case says why and returns, and is reported as skipped, never as
// passed. ctest runs each case on its own and reads exit code kSkipCode as "Skipped" (the
// discovered tests' SKIP_RETURN_CODE, tests/CMakeLists.txt); a run of many cases lists the
// skipped ones at the end.
#pragma once

#include <string>

namespace pejit::test {

/// ctest's SKIP_RETURN_CODE for the doctest executables.
inline constexpr int kSkipCode = 77;

/// Marks the running test case skipped, with the reason (defined in tests/main.cpp). The
/// caller returns from the case right after.
void skip(const std::string& why);

} // namespace pejit::test
