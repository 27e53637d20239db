// Seeded mutation fuzzing of the readers of user files: bracketed trees, sentences, checkpoints
// and tuned schedule databases (tests/fuzz/targets.h says what each must do with any input).
// The suite runs a fixed number of mutants per reader; for a longer run on demand,
// PEJIT_FUZZ_CASES=N runs N per reader and PEJIT_FUZZ_SEED=S draws another sequence
// (scripts/fuzz.sh runs the same targets under libFuzzer).
#include "tests/fuzz/targets.h"

#include "jit/schedule.h"
#include "pejit/error.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace tests_runtime_reader_fuzz_test {

using namespace pejit::fuzz;

namespace {

uint64_t env_number(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0)
    return fallback;
  char* end = nullptr;
  uint64_t n = std::strtoull(v, &end, 0);
  REQUIRE_MESSAGE(*end == 0, name << "=" << v << " is not a number");
  return n;
}

/// The first bytes of `s`, printable ASCII as is and anything else as \xHH.
std::string shown(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 400)) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && u != '\\') {
      out += c;
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return s.size() > 400 ? out + "... (" + std::to_string(s.size()) + " bytes)" : out;
}

/// Runs the mutants; `refusals`: whether the mutations must break some inputs (any text is a
/// file of sentences, so that reader refuses nothing the mutator makes).
void fuzz(Target t, uint64_t default_cases, bool refusals = true) {
  const uint64_t cases = env_number("PEJIT_FUZZ_CASES", default_cases);
  const uint64_t seed =
      env_number("PEJIT_FUZZ_SEED", 0x5eed0000) + 0x100000000ULL * static_cast<uint64_t>(t);
  const auto& inputs = seeds(t);
  REQUIRE(!inputs.empty());
  for (const auto& s : inputs) {
    Outcome o = run_one(t, s);
    REQUIRE_MESSAGE(o.violation.empty(), "seed " << shown(s) << ": " << o.violation);
    REQUIRE_MESSAGE(o.accepted, "a seed is refused: " << shown(s));
  }
  uint64_t accepted = 0, rejected = 0, broken = 0;
  for (uint64_t i = 0; i < cases; ++i) {
    Mutator m(seed + i, dictionary(t));
    std::string input = m.mutate(inputs[i % inputs.size()], inputs);
    Outcome o = run_one(t, input);
    (o.accepted ? accepted : rejected) += 1;
    if (!o.violation.empty()) {
      ++broken;
      FAIL_CHECK(std::string(target_name(t))
                 << " case " << i << " (mutator seed " << seed + i << "): " << o.violation
                 << "\ninput: " << shown(input));
      if (broken == 5)
        break;
    }
  }
  MESSAGE(std::string(target_name(t))
          << ": " << accepted << " mutants read, " << rejected << " refused with a located error");
  // The mutations reach both sides: inputs broken on purpose, and inputs that still read.
  if (refusals)
    CHECK(rejected > cases / 4);
  CHECK(accepted > 0);
}

} // namespace

/// A schedule database of one gemm entry whose fields after "schedule" are `tail`.
std::string one_entry_db(const std::string& version, const std::string& schedule,
                         const std::string& tail = "") {
  return R"({"format":"pejit-schedules","version":)" + version +
         R"(,"entries":[{"signature":"gemm NN n=1","cpu":"a","family":"gemm","schedule":")" +
         schedule + "\"" + tail + "}]}";
}

TEST_SUITE("fuzz") {
  TEST_CASE("fuzz: what the fuzzers found stays fixed") {
    struct Found {
      Target target;
      std::string input, message; ///< the refusal must contain `message`
    };
    const std::vector<Found> found = {
        // A version nested deeper than the native stack: the message printed it recursively.
        {Target::Schedules,
         one_entry_db(std::string(200000, '[') + std::string(200000, ']'), "4x4"),
         "unsupported version (an array)"},
        // A block past int's range: std::stoi threw std::out_of_range ("pejit: error: stoi").
        {Target::Schedules, one_entry_db("1", "2147483648x1"),
         "entry 0 (gemm NN n=1): gemm schedule"},
        {Target::Schedules, one_entry_db("1", "v9999999999x1"),
         "entry 0 (gemm NN n=1): gemm schedule"},
        // A float count: converted to int by a plain cast (undefined behaviour).
        {Target::Schedules, one_entry_db("1", "4x4", R"(,"measured":{"candidates":1e300})"),
         "entry 0 (gemm NN n=1): \"measured\": \"candidates\" must be an integer"},
        {Target::Schedules, one_entry_db("1", "4x4", R"(,"measured":{"rows":[-5]})"),
         "\"measured\": a row count must be an integer"},
        // A number beyond a double: nlohmann's message has no line and column.
        {Target::Schedules, "{\n  \"format\": 1e400}",
         "number '1e400' out of range at line 2, column 13"},
    };
    for (const auto& f : found) {
      CAPTURE(shown(f.input));
      Outcome o = run_one(f.target, f.input);
      CHECK(o.violation.empty());
      CHECK(!o.accepted);
    }
    // The messages themselves, through the reader.
    for (const auto& f : found) {
      std::string path = (std::filesystem::temp_directory_path() /
                          ("pejit_fuzz_found_" + std::to_string(::getpid())))
                             .string();
      CAPTURE(f.message);
      std::FILE* out = std::fopen(path.c_str(), "wb");
      REQUIRE(out != nullptr);
      std::fwrite(f.input.data(), 1, f.input.size(), out);
      std::fclose(out);
      CHECK_THROWS_WITH_AS(pejit::jit::ScheduleDB::load(path), doctest::Contains(f.message.c_str()),
                           pejit::Error);
      std::remove(path.c_str());
    }
  }

  TEST_CASE("fuzz: mutated tree files read or give FILE:LINE:COL errors, never crash") {
    fuzz(Target::Trees, 4000);
  }
  TEST_CASE("fuzz: mutated sentence files read as their words or give FILE:LINE:COL errors") {
    fuzz(Target::Sentences, 4000, false);
  }
  TEST_CASE("fuzz: mutated checkpoints load their seed's bits or give errors naming file and "
            "tensor") {
    fuzz(Target::Checkpoint, 2000);
  }
  TEST_CASE("fuzz: mutated schedule databases load and round-trip, or give errors naming the "
            "file and the entry") {
    fuzz(Target::Schedules, 2000);
  }
}

} // namespace tests_runtime_reader_fuzz_test
