// doctest's main for every pejit test executable. CTest runs each test case on its own, by
// name (doctest_discover_tests): a name that the filter cannot match (a ';' in it splits it
// as a CMake list) would run nothing and pass. So a run with a test-case filter that runs no
// test case fails, naming the filter.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string_view>

namespace {

int g_started = 0; ///< test cases started in this run

struct CountCases : doctest::IReporter {
  explicit CountCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++g_started; }
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
  return rc;
}
