// doctest's main for every pejit test executable. CTest runs each test case on its own, by
// name (doctest_discover_tests): a name that the filter cannot match (a ';' in it splits it
// as a CMake list) would run nothing and pass. So a run with a test-case filter that runs no
// test case fails, naming the filter. A case that skipped itself (tests/support/skip.h) makes
// such a run exit with ctest's skip code, and a run of many cases name it, instead of passing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/support/skip.h"

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

int g_started = 0;                  ///< test cases started in this run
std::string g_current;              ///< the running test case's name
std::vector<std::string> g_skipped; ///< "name: why" per test case that skipped itself

struct CountCases : doctest::IReporter {
  explicit CountCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    ++g_started;
    g_current = tc.m_name;
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

} // namespace

DOCTEST_REGISTER_LISTENER("count_cases", 1, CountCases);

void pejit::test::skip(const std::string& why) {
  MESSAGE("skipped: " << why);
  g_skipped.push_back(g_current + ": " + why);
}

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  if (ctx.shouldExit())
    return rc;
  const char* filter = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    for (std::string_view p : {"--test-case=", "-tc="})
      if (a.substr(0, p.size()) == p)
        filter = argv[i];
  }
  if (filter != nullptr && g_started == 0) {
    std::fprintf(stderr, "error: %s matched no test case (a ';' in a test name?)\n", filter);
    return 1;
  }
  for (const auto& s : g_skipped)
    std::fprintf(stderr, "skipped: %s\n", s.c_str());
  if (rc == 0 && g_started > 0 && static_cast<size_t>(g_started) == g_skipped.size())
    return pejit::test::kSkipCode; // everything that ran skipped itself: not a pass
  return rc;
}
