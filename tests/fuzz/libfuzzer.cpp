// A libFuzzer entry point for one reader (PEJIT_FUZZ_TARGET, tests/fuzz/targets.h), built per
// target with PEJIT_LIBFUZZER for long runs (scripts/fuzz.sh). A broken promise aborts with
// the reader's name and what went wrong, so libFuzzer keeps the input as a crash.
// PEJIT_FUZZ_SEED_DIR=DIR writes the target's seeds into DIR first (the run's corpus).
#include "tests/fuzz/targets.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace {

pejit::fuzz::Target target() {
  static const pejit::fuzz::Target t = [] {
    auto found = pejit::fuzz::target_from_name(PEJIT_FUZZ_TARGET);
    if (!found) {
      std::fprintf(stderr, "pejit fuzz: unknown target %s\n", PEJIT_FUZZ_TARGET);
      std::abort();
    }
    return *found;
  }();
  return t;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("PEJIT_FUZZ_SEED_DIR");
  if (dir == nullptr || *dir == 0)
    return 0;
  std::filesystem::create_directories(dir);
  const auto& seeds = pejit::fuzz::seeds(target());
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream f(std::filesystem::path(dir) / ("seed" + std::to_string(i)), std::ios::binary);
    f.write(seeds[i].data(), static_cast<std::streamsize>(seeds[i].size()));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pejit::fuzz::Outcome o =
      pejit::fuzz::run_one(target(), {reinterpret_cast<const char*>(data), size});
  if (!o.violation.empty()) {
    std::fprintf(stderr, "pejit fuzz %s: %s\n", PEJIT_FUZZ_TARGET, o.violation.c_str());
    std::abort();
  }
  return 0;
}
