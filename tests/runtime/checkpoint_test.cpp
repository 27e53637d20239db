// Tests of runtime/checkpoint: bit-exact save/load round trips, the PyTorch peer's layout,
// expected errors for malformed files, atomic saves that leave the previous file intact when
// a write fails, and fuzzed (truncated, byte-flipped) files that must load or throw pejit::Error.
#include "runtime/checkpoint/checkpoint.h"

#include "src/util/check.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sys/wait.h>
#include <unistd.h>

namespace tests_runtime_checkpoint_test {

using namespace pejit;
using namespace pejit::checkpoint;
namespace fs = std::filesystem;

namespace {

/// A fresh directory, removed on destruction.
struct TempDir {
  fs::path dir;
  TempDir() {
    static int counter = 0;
    dir = fs::temp_directory_path() /
          ("pejit_ckpt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Tensor iota_tensor(const Shape& s, float start) {
  Tensor t = Tensor::empty(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = start + 0.37f * static_cast<float>(i);
  return t;
}

Checkpoint sample() {
  Checkpoint ck;
  ck.params.names = {"emb", "W", "b", "scale", "empty"};
  ck.params.values = {iota_tensor(Shape{5, 3}, -1.5f), iota_tensor(Shape{3, 7}, 2.0f),
                      iota_tensor(Shape{7}, 0.1f), Tensor::scalar_f32(-0.0f),
                      Tensor::zeros(DType::F32, Shape{0, 4})};
  ck.params.values[0].f32()[4] = std::numeric_limits<float>::quiet_NaN();
  ck.params.values[1].f32()[0] = -std::numeric_limits<float>::infinity();
  ck.params.values[1].f32()[1] = std::numeric_limits<float>::denorm_min();
  ck.vocab = {"<unk>", "the", "caf\xc3\xa9", "a\nb", "\"quoted\"", ""};
  ck.optimizer_state = {{"adagrad_sum.emb", iota_tensor(Shape{5, 3}, 0.0f)},
                        {"steps", iota_tensor(Shape{2}, 0.0f)}};
  ck.meta = {{"model", "examples/treelstm.pe"}, {"epoch", "3"}};
  return ck;
}

void check_equal(const Checkpoint& a, const Checkpoint& b) {
  REQUIRE(a.params.names == b.params.names);
  for (size_t i = 0; i < a.params.values.size(); ++i) {
    CAPTURE(a.params.names[i]);
    CHECK(test::same_bits(a.params.values[i], b.params.values[i]));
  }
  CHECK(a.vocab == b.vocab);
  REQUIRE(a.optimizer_state.size() == b.optimizer_state.size());
  for (size_t i = 0; i < a.optimizer_state.size(); ++i) {
    CHECK(a.optimizer_state[i].first == b.optimizer_state[i].first);
    CHECK(test::same_bits(a.optimizer_state[i].second, b.optimizer_state[i].second));
  }
  CHECK(a.meta == b.meta);
}

/// What the PyTorch peer's write_checkpoint produces: keys in its order, no optional fields.
std::string peer_file() {
  std::string header = R"({"format":"pejit-checkpoint","version":1,"params":[)"
                       R"({"name":"a","dtype":"f32","shape":[2,2],"offset":0},)"
                       R"({"name":"b","dtype":"f32","shape":[3],"offset":64}],)"
                       R"("vocab":["<unk>","x"],"data_bytes":128})";
  std::string blob(128, '\0');
  const float a[4] = {1, 2, 3, 4}, b[3] = {-1, 0.5f, 8};
  std::memcpy(blob.data(), a, sizeof a);
  std::memcpy(blob.data() + 64, b, sizeof b);
  return header + "\n" + blob;
}

/// load() must either succeed or throw pejit::Error (never another exception).
bool loads_or_errors(const std::string& path) {
  try {
    (void)load(path);
    return true;
  } catch (const Error&) {
    return true;
  } catch (...) {
    return false;
  }
}

} // namespace

TEST_SUITE("checkpoint") {

  TEST_CASE("save -> load is bit-exact") {
    TempDir td;
    std::string path = td.file("model.ckpt");
    Checkpoint ck = sample();
    save(path, ck);
    check_equal(ck, load(path, /*finite_params=*/false)); // sample() holds a NaN and an inf

    // Layout: one JSON line, then data_bytes of blob, tensors at 64-byte multiples.
    std::string bytes = read_bytes(path);
    size_t nl = bytes.find('\n');
    REQUIRE(nl != std::string::npos);
    std::string header = bytes.substr(0, nl);
    CHECK(header.front() == '{');
    CHECK(header.find(R"("format":"pejit-checkpoint")") != std::string::npos);
    CHECK(header.find(R"("version":2)") != std::string::npos);
    // emb 60 B -> 64, W 84 B -> 128, b 28 B -> 64, scale 4 B -> 64, empty 0: 320 for params.
    CHECK(header.find(R"("name":"scale","offset":256,"shape":[])") != std::string::npos);
    CHECK(header.find(R"("data_bytes":448)") != std::string::npos);
    CHECK(bytes.size() == nl + 1 + 448);

    // Saving over an existing file replaces it; no temporary file is left behind.
    Checkpoint small;
    small.params.names = {"x"};
    small.params.values = {Tensor::scalar_f32(4.0f)};
    save(path, small);
    check_equal(small, load(path));
    CHECK(std::distance(fs::directory_iterator(td.dir), fs::directory_iterator{}) == 1);
  }

  TEST_CASE("reads the PyTorch peer's layout") {
    TempDir td;
    write_bytes(td.file("peer.ckpt"), peer_file());
    Checkpoint ck = load(td.file("peer.ckpt"));
    REQUIRE(ck.params.names == std::vector<std::string>{"a", "b"});
    CHECK(ck.params.values[0].shape() == Shape{2, 2});
    CHECK(ck.params.values[0].f32()[3] == 4.0f);
    CHECK(ck.params.values[1].f32()[2] == 8.0f);
    CHECK(ck.vocab == std::vector<std::string>{"<unk>", "x"});
    CHECK(ck.optimizer_state.empty());
    CHECK(ck.meta.empty());
  }

  TEST_CASE("save rejects what the format cannot hold") {
    TempDir td;
    Checkpoint ck;
    ck.params.names = {"i"};
    ck.params.values = {Tensor::zeros(DType::I32, Shape{2})};
    CHECK_THROWS_WITH_AS(save(td.file("x"), ck), doctest::Contains("f32"), Error);
    ck.params.names = {"a", "a"};
    ck.params.values = {Tensor::scalar_f32(1), Tensor::scalar_f32(2)};
    CHECK_THROWS_WITH_AS(save(td.file("x"), ck), doctest::Contains("duplicate"), Error);
    ck.params.names = {"a"};
    ck.params.values = {Tensor::scalar_f32(1)};
    ck.vocab = {"bad\xff"};
    CHECK_THROWS_WITH_AS(save(td.file("x"), ck), doctest::Contains("UTF-8"), Error);
    CHECK(!fs::exists(td.file("x")));
  }

  TEST_CASE("malformed files throw pejit::Error naming the file and the problem") {
    TempDir td;
    std::string path = td.file("bad.ckpt");
    std::string good = peer_file();
    size_t nl = good.find('\n');
    std::string blob = good.substr(nl + 1);
    auto expect = [&](const std::string& bytes, const char* what) {
      CAPTURE(what);
      write_bytes(path, bytes);
      CHECK_THROWS_WITH_AS(load(path), doctest::Contains(path.c_str()), Error);
      CHECK_THROWS_WITH_AS(load(path), doctest::Contains(what), Error);
    };
    auto with_header = [&](std::string from, std::string to) {
      std::string h = good.substr(0, nl);
      auto at = h.find(from);
      REQUIRE(at != std::string::npos);
      h.replace(at, from.size(), to);
      return h + "\n" + blob;
    };
    CHECK_THROWS_WITH_AS(load(td.file("missing.ckpt")), doctest::Contains("missing.ckpt"), Error);
    CHECK_THROWS_WITH_AS(load(td.dir.string()), doctest::Contains("not a regular file"), Error);
    expect("", "no header line");
    expect("{\"format\":\"pejit-checkpoint\"", "no header line");
    expect("{not json}\n", "not valid JSON");
    expect("[1,2]\n", "JSON object");
    expect(std::string(100, '[') + "\n", "nested too deeply");
    expect(with_header("pejit-checkpoint", "other"), "not a pejit checkpoint");
    expect(with_header("\"version\":1", "\"version\":3"), "version 3");
    expect(with_header("\"version\":1", "\"version\":0"), "version 0");
    expect(with_header("\"data_bytes\"", "\"training\":[],\"data_bytes\""),
           "\"training\" must be an object");
    expect(with_header("\"data_bytes\"", "\"training\":{\"batch\":0},\"data_bytes\""),
           "lacks \"epoch\"");
    expect(with_header("\"data_bytes\"", "\"training\":{\"epoch\":-1,\"batch\":0},\"data_bytes\""),
           "training.epoch");
    expect(with_header("\"data_bytes\"",
                       "\"training\":{\"epoch\":1,\"batch\":0,\"values\":{\"a\":1}},"
                       "\"data_bytes\""),
           "training.values.a must be a string");
    expect(with_header("\"dtype\":\"f32\",\"shape\":[3]", "\"dtype\":\"i32\",\"shape\":[3]"),
           "dtype");
    expect(with_header("[2,2]", "[-2,2]"), "shape[0]");
    expect(with_header("[2,2]", "[2.5,2]"), "must be an integer");
    expect(with_header("[2,2]", "[65536,65536,65536,65536]"), "larger than the file");
    expect(with_header("[2,2]", "[18446744073709551615,2]"), "out of range");
    expect(with_header("[2,2]", "[1,1,1,1,1,1,1,1,1]"), "at most 8");
    expect(with_header("\"offset\":64", "\"offset\":32"), "multiple of 64");
    expect(with_header("\"offset\":64", "\"offset\":128"), "runs past the end");
    expect(with_header("\"offset\":64", "\"offset\":-64"), "offset");
    expect(with_header("\"name\":\"b\"", "\"name\":\"a\""), "duplicate params 'a'");
    expect(with_header("\"name\":\"b\"", "\"name\":7"), "name must be");
    expect(with_header("[2,2]", "[4,8]"), "overlapping"); // 128 + 12 bytes in a 128-byte blob
    expect(with_header("\"vocab\"", "\"vocabulary\""), "lacks \"vocab\"");
    expect(with_header("[\"<unk>\",\"x\"]", "[\"<unk>\",3]"), "array of strings");
    expect(with_header("\"data_bytes\":128", "\"data_bytes\":128,\"meta\":[]"), "meta");
    expect(good.substr(0, good.size() - 10), "truncated");
    expect(with_header("\"data_bytes\":128", "\"data_bytes\":64"), "runs past the end");
  }

  TEST_CASE("a failed save leaves the previous file intact") {
    TempDir td;
    std::string path = td.file("model.ckpt");
    Checkpoint good = sample();
    save(path, good);
    std::string before = read_bytes(path);

    Checkpoint next = sample();
    next.params.values[1] = iota_tensor(Shape{3, 7}, 100.0f);
    for (int64_t fail_at : {0, 10, 700}) {
      CAPTURE(fail_at);
      checkpoint::detail::set_save_failure_after_bytes(fail_at);
      CHECK_THROWS_WITH_AS(save(path, next), doctest::Contains(path.c_str()), Error);
      checkpoint::detail::set_save_failure_after_bytes(-1);
      CHECK(read_bytes(path) == before);
      check_equal(good, load(path, false));
      // Only the good file: the partial temporary was removed.
      CHECK(std::distance(fs::directory_iterator(td.dir), fs::directory_iterator{}) == 1);
    }
    CHECK_THROWS_WITH_AS(save(td.file("no/such/dir/model.ckpt"), good),
                         doctest::Contains("no/such/dir/model.ckpt"), Error);
    save(path, next); // the hook is off again
    check_equal(next, load(path, false));
  }

  TEST_CASE("fuzzed files load or throw pejit::Error") {
    TempDir td;
    std::string path = td.file("fuzz.ckpt");
    save(path, sample());
    std::string valid = read_bytes(path);
    std::string peer = peer_file();
    std::mt19937 rng(1234);
    int failures = 0;
    for (int iter = 0; iter < 600; ++iter) {
      std::string bytes = iter % 3 == 0 ? peer : valid;
      size_t header_len = bytes.find('\n');
      switch (iter % 4) {
      case 0: // truncation anywhere
        bytes.resize(rng() % (bytes.size() + 1));
        break;
      case 1: // byte flips anywhere
        for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k)
          bytes[rng() % bytes.size()] = static_cast<char>(rng());
        break;
      default: // a flip inside the header, where most structure lives; maybe truncated too
        bytes[rng() % header_len] = "0123456789-[]{}\",:e.\n\xff"[rng() % 22];
        if (iter % 8 == 3)
          bytes.resize(rng() % (bytes.size() + 1));
        break;
      }
      // A fresh name per case: rewriting one file in place is slow on ext4 (truncate flushes).
      std::string case_path = path + "." + std::to_string(iter);
      write_bytes(case_path, bytes);
      if (!loads_or_errors(case_path)) {
        ++failures;
        FAIL_CHECK("iteration " << iter << " threw something other than pejit::Error");
      }
      fs::remove(case_path);
    }
    CHECK(failures == 0);
  }

  TEST_CASE("a changed byte in a tensor's data is refused, naming the file and the tensor") {
    TempDir td;
    std::string path = td.file("model.ckpt");
    Checkpoint ck = sample();
    ck.params.values[0].f32()[4] = 1.0f; // finite, so that only the checksum can refuse it
    ck.params.values[1].f32()[0] = 2.0f;
    save(path, ck);
    check_equal(ck, load(path));
    std::string valid = read_bytes(path);
    size_t base = valid.find('\n') + 1;
    // W lies at blob offset 64 (emb's 60 bytes padded); flip one byte inside it, then one in
    // the optimizer state.
    for (auto [at, name] : {std::pair<size_t, const char*>{64 + 5, "params 'W'"},
                            {320 + 3, "optimizer_state 'adagrad_sum.emb'"}}) {
      std::string bytes = valid;
      bytes[base + at] = static_cast<char>(bytes[base + at] ^ 0x10);
      write_bytes(path, bytes);
      CHECK_THROWS_WITH_AS(load(path), doctest::Contains(path.c_str()), Error);
      CHECK_THROWS_WITH_AS(load(path), doctest::Contains(name), Error);
      CHECK_THROWS_WITH_AS(load(path), doctest::Contains("does not match its checksum"), Error);
    }
    // A damaged padding byte is not data: it still loads.
    std::string bytes = valid;
    bytes[base + 62] = 'x';
    write_bytes(path, bytes);
    check_equal(ck, load(path));
    CHECK(tensor_checksum("abcdefgh", 8) != tensor_checksum("abcdefgi", 8));
    CHECK(tensor_checksum("abc", 3) != tensor_checksum("abc\0", 4));
  }

  TEST_CASE("a non-finite parameter is refused on load unless asked for as it is") {
    TempDir td;
    std::string path = td.file("nan.ckpt");
    Checkpoint ck = sample(); // emb[4] is NaN
    save(path, ck);
    CHECK_THROWS_WITH_AS(load(path), doctest::Contains("params 'emb' holds a non-finite value"),
                         Error);
    CHECK_THROWS_WITH_AS(load(path), doctest::Contains("at element 4"), Error);
    check_equal(ck, load(path, false));
  }

  TEST_CASE("temporary files of killed saves are removed by the next save") {
    TempDir td;
    std::string path = td.file("model.ckpt");
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0)
      ::_exit(0);
    int status = 0;
    ::waitpid(child, &status, 0); // the child is gone: its pid names a dead process
    std::string stale = path + ".tmp." + std::to_string(child);
    std::string live = path + ".tmp.1"; // init: alive
    std::string other = td.file("other.ckpt.tmp." + std::to_string(child));
    for (const auto& f : {stale, live, other})
      write_bytes(f, "partial");
    save(path, sample());
    CHECK_FALSE(fs::exists(stale));
    CHECK(fs::exists(live));
    CHECK(fs::exists(other)); // another checkpoint's temporary is not ours to remove
    check_equal(sample(), load(path, false));
  }

  TEST_CASE("version 2 carries a training state, version 1 files load without one") {
    TempDir td;
    std::string path = td.file("state.ckpt");
    Checkpoint ck = sample();
    ck.training = TrainState{3, 17, {{"seed", "42"}, {"loss_sum", "0x1.8p+1"}}};
    save(path, ck);
    Checkpoint back = load(path, /*finite_params=*/false);
    check_equal(ck, back);
    REQUIRE(back.training);
    CHECK(back.training->epoch == 3);
    CHECK(back.training->batch == 17);
    CHECK(back.training->values == ck.training->values);
    // Without one, none comes back; the peer's version 1 file loads as before.
    ck.training.reset();
    save(path, ck);
    CHECK_FALSE(load(path, false).training);
    std::string v1 = td.file("v1.ckpt");
    std::ofstream(v1, std::ios::binary) << peer_file();
    Checkpoint old = load(v1);
    CHECK_FALSE(old.training);
    CHECK(old.params.names == std::vector<std::string>{"a", "b"});
    ck.training = TrainState{-1, 0, {}};
    CHECK_THROWS_WITH_AS(save(path, ck), doctest::Contains("negative epoch"), Error);
  }
}

} // namespace tests_runtime_checkpoint_test
