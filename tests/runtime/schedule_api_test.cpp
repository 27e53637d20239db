// Tuned schedules through the public API (include/pejit/pejit.h): without CompileOptions every
// kernel gets its default schedule; with a database tuned for this CPU the session compiles its
// entries' schedules, says so per kernel, and computes the same bits; a database for another
// CPU is not used and warns; a bad file is a pejit::Error naming it.
#include "pejit/pejit.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

namespace tests_runtime_schedule_api_test {

namespace {

const std::string kTreeLstm = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

pejit::Value leaf(const pejit::Session& s, int w, int y) {
  return s.make("Leaf", {pejit::Value::scalar_i32(w), pejit::Value::scalar_i32(y)});
}

pejit::Value batch(const pejit::Session& s) {
  auto node = [&](pejit::Value l, pejit::Value r, int y) {
    return s.make("Node", {std::move(l), std::move(r), pejit::Value::scalar_i32(y)});
  };
  return pejit::Value::list({node(leaf(s, 1, 1), leaf(s, 2, 1), 1),
                             node(node(leaf(s, 3, 4), leaf(s, 4, 3), 3), leaf(s, 5, 2), 3)});
}

pejit::Session open(std::optional<pejit::ScheduleDB> db) {
  pejit::SessionOptions o;
  o.dims = {{"V", 8}};
  o.mode = "specialized";
  // One thread: with more, the weight gradients' column blocks are compiled too, with their
  // whole kernel's register block and no database entry of their own.
  o.threads = 1;
  o.compile.schedules = std::move(db);
  return pejit::Session::from_file(kTreeLstm, o);
}

std::string tmp(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("pejit_sapi_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

bool is_elementwise(const pejit::KernelInfo& k) {
  return k.signature.rfind("ew ", 0) == 0;
}

bool is_gemm(const pejit::KernelInfo& k) { // the weight gradients
  return k.signature.rfind("gemm ", 0) == 0;
}

// A GEMM's schedule is its register block: "12x2" by default on AVX-512.
bool is_block(const std::string& s) {
  size_t x = s.find('x');
  return x != std::string::npos && x > 0 && x + 1 < s.size() &&
         s.find_first_not_of("0123456789x") == std::string::npos;
}

// A database giving every elementwise kernel of `kernels` schedule `schedule` and every GEMM
// block `block` on `cpu` (empty: the CPU each kernel was compiled for). The row reductions and
// losses have one schedule.
std::string write_db(const std::string& name, const std::vector<pejit::KernelInfo>& kernels,
                     const std::string& schedule, const std::string& block,
                     const std::string& cpu) {
  nlohmann::json j = {{"format", "pejit-schedules"}, {"version", 1}, {"entries", nullptr}};
  j["entries"] = nlohmann::json::array();
  for (const auto& k : kernels) {
    if (!is_elementwise(k) && !is_gemm(k))
      continue;
    // The key is "<signature> sched=<schedule> cpu=<cpu>" ("block=" for a GEMM).
    std::string sig = k.signature.substr(0, k.signature.find(is_gemm(k) ? " block=" : " sched="));
    std::string host = k.signature.substr(k.signature.find(" cpu=") + 5);
    j["entries"].push_back({{"signature", sig},
                            {"cpu", cpu.empty() ? host : cpu},
                            {"family", is_gemm(k) ? "gemm" : "elementwise"},
                            {"schedule", is_gemm(k) ? block : schedule}});
  }
  std::string path = tmp(name);
  std::ofstream(path) << j.dump(2);
  return path;
}

} // namespace

TEST_SUITE("session") {
  TEST_CASE("CompileOptions: default schedules unless a database for this CPU is given") {
    pejit::Session plain = open(std::nullopt);
    float base = plain.step("loss", batch(plain));
    std::vector<pejit::KernelInfo> ks = plain.kernels();
    REQUIRE(!ks.empty());
    size_t gemms = 0;
    for (const auto& k : ks) {
      if (!is_gemm(k))
        CHECK(k.schedule == "default");
      CHECK(is_gemm(k) == is_block(k.schedule));
      CHECK(k.schedule_source == "default");
      gemms += is_gemm(k);
    }
    CHECK(gemms > 0); // the weight gradients run on generated TN kernels

    std::string path = write_db("mine.json", ks, "v8x2", "5x2", "");
    pejit::ScheduleDB db = pejit::ScheduleDB::load(path);
    CHECK(db.path() == path);
    CHECK(db.size() ==
          static_cast<size_t>(std::count_if(ks.begin(), ks.end(), is_elementwise)) + gemms);
    CHECK(db.size() > 0);
    CHECK(db.warning().empty());
    pejit::Session tuned = open(db);
    float loss = tuned.step("loss", batch(tuned));
    CHECK(loss == base); // a schedule changes speed, never results
    std::vector<pejit::KernelInfo> tk = tuned.kernels();
    REQUIRE(tk.size() == ks.size());
    std::set<std::string> sources;
    for (const auto& k : tk) {
      if (is_gemm(k)) { // a weight gradient: the block of its entry
        CHECK(k.schedule == "5x2");
        CHECK(k.signature.find(" block=5x2 cpu=") != std::string::npos);
        CHECK(k.schedule_source.rfind("tuned " + path + " entry ", 0) == 0);
        sources.insert(k.schedule_source);
        continue;
      }
      if (!is_elementwise(k)) { // the cross-entropy and row sums: their family's default
        CHECK(k.schedule == "default");
        CHECK(k.schedule_source == "default");
        continue;
      }
      CHECK(k.schedule == "v8x2");
      CHECK(k.signature.find(" sched=v8x2") != std::string::npos); // then the panel, the CPU
      CHECK(k.signature.find(" cpu=") > k.signature.find(" sched=v8x2"));
      CHECK(k.schedule_source.rfind("tuned " + path + " entry ", 0) == 0);
      sources.insert(k.schedule_source);
    }
    CHECK(sources.size() == db.size()); // each kernel names its own entry

    // The same entries measured on another CPU: not used, and the database says why.
    std::string other = write_db("other.json", ks, "v8x2", "5x2", "some-other-cpu");
    pejit::ScheduleDB foreign = pejit::ScheduleDB::load(other);
    CHECK(foreign.warning().find("'" + other + "' has no entry for this CPU") != std::string::npos);
    CHECK(foreign.warning().find("some-other-cpu") != std::string::npos);
    pejit::Session elsewhere = open(foreign);
    CHECK(elsewhere.step("loss", batch(elsewhere)) == base);
    for (const auto& k : elsewhere.kernels()) {
      if (!is_gemm(k))
        CHECK(k.schedule == "default");
      CHECK(is_gemm(k) == is_block(k.schedule));
      CHECK(k.schedule_source == "default");
    }
  }

  TEST_CASE("ScheduleDB::load: a missing or corrupt file is a pejit::Error naming it") {
    std::string missing = tmp("missing.json");
    CHECK_THROWS_WITH_AS(pejit::ScheduleDB::load(missing),
                         doctest::Contains(doctest::String(("'" + missing + "'").c_str())),
                         pejit::Error);
    std::string corrupt = tmp("corrupt.json");
    std::ofstream(corrupt) << "{\"format\": \"pejit-schedules\",";
    CHECK_THROWS_WITH_AS(pejit::ScheduleDB::load(corrupt),
                         doctest::Contains(doctest::String(("'" + corrupt + "'").c_str())),
                         pejit::Error);
  }
}

} // namespace tests_runtime_schedule_api_test
