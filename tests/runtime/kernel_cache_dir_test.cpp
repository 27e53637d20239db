// CompileOptions::kernel_cache_dir end to end on a Session: a second session on the directory
// compiles no kernel and links them all, with the same bits of every loss and parameter; a
// corrupted or truncated entry is compiled again and rewritten, the bits unchanged; the size
// bound holds; without a directory nothing is cached; a directory that cannot be used is an
// error naming it.
#include "pejit/pejit.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace tests_runtime_kernel_cache_dir_test {

using namespace pejit;
namespace fs = std::filesystem;

namespace {

const std::string kModel = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

struct Run {
  std::vector<float> losses, params;
  SessionStats stats;
  int64_t flagged_cached = 0; ///< kernels whose KernelInfo::cached is set
};

// Four steps on two batches of a TreeLSTM, specialized (kernels compiled before each batch).
Run train(const std::string& cache_dir, uint64_t max_bytes = 256u << 20) {
  SessionOptions o;
  o.compile.kernel_cache_max_bytes = max_bytes;
  o.dims = {{"V", 12}};
  o.seed = 3;
  o.mode = "specialized";
  o.compile.kernel_cache_dir = cache_dir;
  Session s = Session::from_file(kModel, o);
  auto leaf = [&](int w, int y) {
    return s.make("Leaf", {Value::scalar_i32(w), Value::scalar_i32(y)});
  };
  auto node = [&](Value l, Value r, int y) {
    return s.make("Node", {std::move(l), std::move(r), Value::scalar_i32(y)});
  };
  Value a = Value::list({node(leaf(1, 1), leaf(2, 3), 2), leaf(4, 0)});
  Value b = Value::list({node(node(leaf(3, 4), leaf(5, 2), 3), leaf(6, 1), 0),
                         node(leaf(7, 2), leaf(8, 2), 1), leaf(9, 4)});
  Run r;
  for (const Value* v : {&a, &b, &a, &b})
    r.losses.push_back(s.step("loss", *v));
  for (const auto& n : s.param_names()) {
    auto p = s.get_param(n);
    r.params.insert(r.params.end(), p.begin(), p.end());
  }
  r.stats = s.stats();
  for (const auto& k : s.kernels())
    r.flagged_cached += k.cached ? 1 : 0;
  return r;
}

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".pjk")
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spill(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

} // namespace

TEST_CASE("kernel cache directory: a second session links every kernel, the same bits") {
  const fs::path dir =
      fs::temp_directory_path() / ("pejit_kcache_session_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const Run plain = train("");
  REQUIRE(plain.stats.kernels_compiled > 0);
  CHECK(plain.stats.kernels_cached == 0);

  const Run first = train(dir.string());
  const int64_t n = first.stats.kernels_compiled;
  CHECK(n == plain.stats.kernels_compiled);
  CHECK(first.stats.kernels_cached == 0);
  CHECK(first.flagged_cached == 0);
  CHECK(test::same_bits(first.losses, plain.losses));
  CHECK(test::same_bits(first.params, plain.params));
  const std::vector<fs::path> files = entries(dir);
  REQUIRE(static_cast<int64_t>(files.size()) == n);

  const Run second = train(dir.string());
  CHECK(second.stats.kernels_compiled == 0);
  CHECK(second.stats.kernels_cached == n);
  CHECK(second.flagged_cached == n); // each kernel says it was linked
  CHECK(test::same_bits(second.losses, first.losses));
  CHECK(test::same_bits(second.params, first.params));

  // A byte flipped in one entry, another truncated: those two are compiled again (and
  // rewritten: the next session links all), the others linked; the bits do not move.
  const std::string good0 = slurp(files[0]), good1 = slurp(files[1]);
  std::string flipped = good0;
  flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x10);
  spill(files[0], flipped);
  spill(files[1], good1.substr(0, good1.size() / 3));
  const Run repaired = train(dir.string());
  CHECK(repaired.stats.kernels_compiled == 2);
  CHECK(repaired.stats.kernels_cached == n - 2);
  CHECK(repaired.flagged_cached == n - 2);
  CHECK(test::same_bits(repaired.losses, first.losses));
  CHECK(test::same_bits(repaired.params, first.params));
  CHECK(slurp(files[0]) == good0);
  CHECK(slurp(files[1]) == good1);
  const Run again = train(dir.string());
  CHECK(again.stats.kernels_compiled == 0);
  CHECK(again.stats.kernels_cached == n);
  CHECK(test::same_bits(again.losses, first.losses));

  // A bound below the entries' total: the directory stays under it, the run's bits unchanged.
  uint64_t total = 0;
  for (const auto& f : entries(dir))
    total += fs::file_size(f);
  const Run bounded = train(dir.string(), total / 2);
  uint64_t left = 0;
  for (const auto& f : entries(dir))
    left += fs::file_size(f);
  CHECK(left <= total / 2);
  CHECK(entries(dir).size() < files.size());
  CHECK(bounded.stats.kernels_compiled + bounded.stats.kernels_cached == n);
  CHECK(test::same_bits(bounded.losses, first.losses));

  // A file where the directory should be: an error naming it, before any step.
  const fs::path file = dir / "not_a_dir";
  spill(file, "x");
  std::string error;
  try {
    train(file.string());
  } catch (const pejit::Error& e) {
    error = e.what();
  }
  CHECK(error.find("kernel cache directory '" + file.string() + "'") != std::string::npos);
  fs::remove_all(dir);
}

} // namespace tests_runtime_kernel_cache_dir_test
