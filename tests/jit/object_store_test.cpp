// The kernel cache directory at the JIT's level: ObjectStore's entry files (a corrupt,
// truncated or foreign one is rejected), a second Jit on the same directory links every kernel
// instead of compiling it and gets the same code, a bad entry is compiled again and rewritten,
// the size bound prunes the least recently used, stores in parallel share one directory, and
// a kernel compiled again while its first copy is live (an evicted entry) does not clash.
#include "jit/kernel_cache.h"
#include "jit/object_store.h"
#include "pejit/error.h"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <vector>

namespace tests_jit_object_store_test {

using namespace pejit::jit;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the temporary one, removed when the test ends.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    static int n = 0;
    path = fs::temp_directory_path() /
           ("pejit_kcache_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spill(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<fs::path> entries(const TempDir& d) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(d.path))
    if (e.path().extension() == ".pjk")
      out.push_back(e.path());
  return out;
}

// y = tanh(x * a + x), a chain of a few ops.
KernelSpec chain(int64_t width = 40) {
  return KernelSpec{
      .width = width,
      .inputs = {InputShape::Full, InputShape::Scalar},
      .ops = {{ElementwiseOp::Mul, 0, 1}, {ElementwiseOp::Add, 2, 0}, {ElementwiseOp::Tanh, 3, -1}},
      .outputs = {4}};
}

std::vector<float> run(const CompiledKernel& k, int64_t width = 40) {
  std::vector<float> x(static_cast<size_t>(width)), out(static_cast<size_t>(width));
  for (int64_t i = 0; i < width; ++i)
    x[static_cast<size_t>(i)] = 0.37f * static_cast<float>(i) - 3.0f;
  float a = 1.7f;
  float* in[] = {x.data(), &a};
  float* o[] = {out.data()};
  k.fn(in, o, 1);
  return out;
}

JitOptions with_store(std::shared_ptr<ObjectStore> store) {
  JitOptions o;
  o.compile_threads = 0;
  o.store = std::move(store);
  return o;
}

} // namespace

TEST_CASE("object store entries: a round trip, and truncated, flipped and foreign files rejected") {
  StoredObject obj{"pejit_ew_k0123", 0xfeedu,
                   std::string("\x7f"
                               "ELF object bytes",
                               17)};
  const std::string key = "pejit 0.1.0; LLVM 19; cpu x; pejit_ew spec";
  const std::string bytes = ObjectStore::encode(key, obj);
  std::string why;
  auto back = ObjectStore::decode(bytes, key, why);
  REQUIRE(back);
  CHECK(back->symbol == obj.symbol);
  CHECK(back->ir_hash == obj.ir_hash);
  CHECK(back->object == obj.object);
  for (size_t n = 0; n < bytes.size(); ++n) { // every truncation
    CHECK_FALSE(ObjectStore::decode(bytes.substr(0, n), key, why));
  }
  CHECK_FALSE(ObjectStore::decode(bytes + "x", key, why));
  CHECK(why == "trailing bytes");
  for (size_t i = 0; i < bytes.size(); ++i) { // every flipped byte
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    CHECK_FALSE(ObjectStore::decode(bad, key, why));
  }
  // A whole, well-formed entry of another key (another CPU): foreign.
  CHECK_FALSE(ObjectStore::decode(ObjectStore::encode(key + " other cpu", obj), key, why));
  CHECK(why.find("another key") != std::string::npos);
}

TEST_CASE("object store: a directory that cannot be used is an error naming it") {
  TempDir d("bad");
  fs::create_directories(d.path);
  spill(d.path / "file", "x");
  CHECK_THROWS_WITH_AS(ObjectStore((d.path / "file").string(), 1 << 20),
                       doctest::Contains("kernel cache directory '"), pejit::Error);
  CHECK_THROWS_AS(ObjectStore(d.str(), 0), pejit::Error);
  ObjectStore made((d.path / "a" / "b").string(), 1 << 20); // created when missing
  CHECK(fs::is_directory(d.path / "a" / "b"));
}

TEST_CASE("a second Jit on the store links the kernel instead of compiling it: the same code") {
  TempDir d("reuse");
  auto store = std::make_shared<ObjectStore>(d.str(), 64u << 20);
  std::vector<float> first_out;
  uint64_t first_hash = 0;
  {
    Jit jit(with_store(store));
    KernelCache cache(jit, 8);
    auto k = cache.get(chain());
    CHECK_FALSE(k->loaded);
    first_out = run(k->elementwise());
    first_hash = k->ir_hash;
    CHECK(first_hash == ir_text_hash(jit.optimized_ir(chain())));
    CHECK(cache.stats().compiles == 1);
    CHECK(cache.stats().loaded == 0);
    // The key names what decides the code.
    const std::string key = jit.store_key(chain());
    CHECK(key.find("pejit " PEJIT_VERSION_STRING ";") == 0);
    CHECK(key.find("LLVM 19.") != std::string::npos);
    CHECK(key.find("cpu " + jit.target_cpu() + ";") != std::string::npos);
    CHECK(key.find(chain().canonical_text()) != std::string::npos);
  }
  CHECK(store->stats().written == 1);
  REQUIRE(entries(d).size() == 1);
  const std::string good = slurp(entries(d)[0]);

  auto check_second = [&](bool expect_loaded) {
    Jit jit(with_store(std::make_shared<ObjectStore>(d.str(), 64u << 20)));
    KernelCache cache(jit, 8);
    auto k = cache.get(chain());
    CHECK(k->loaded == expect_loaded);
    CHECK(cache.stats().loaded == (expect_loaded ? 1u : 0u));
    CHECK(cache.stats().compiles == (expect_loaded ? 0u : 1u));
    CHECK(k->ir_hash == first_hash);
    CHECK(run(k->elementwise()) == first_out);
    CHECK(slurp(entries(d)[0]) == good); // (re)written whole: the same bytes
  };
  check_second(true);

  // A flipped byte in the object, a truncated file, a foreign key under this key's file name:
  // each is rejected, the kernel compiled and the entry rewritten; the next Jit loads it again.
  const fs::path file = entries(d)[0];
  std::string flipped = good;
  flipped[good.size() / 2] = static_cast<char>(flipped[good.size() / 2] ^ 1);
  std::string foreign;
  {
    std::string why;
    const std::string key = Jit().store_key(chain());
    auto obj = ObjectStore::decode(good, key, why);
    REQUIRE(obj);
    std::string other = key;
    other.replace(other.find("cpu "), 4, "cpu another-");
    foreign = ObjectStore::encode(other, *obj);
  }
  for (const std::string& bad :
       {flipped, good.substr(0, good.size() - 9), foreign, std::string()}) {
    spill(file, bad);
    check_second(false);
    check_second(true);
  }
}

TEST_CASE("object store: the size bound removes the least recently used entries") {
  TempDir d("prune");
  StoredObject obj{"sym", 1, std::string(1000, 'o')};
  const uint64_t entry = ObjectStore::encode("key 0", obj).size();
  ObjectStore store(d.str(), 3 * entry + entry / 2); // room for three
  auto age = [&](const std::string& key, int seconds_ago) {
    fs::last_write_time(store.path_of(key),
                        fs::file_time_type::clock::now() - std::chrono::seconds(seconds_ago));
  };
  store.store("key 0", obj);
  store.store("key 1", obj);
  store.store("key 2", obj);
  age("key 0", 300);
  age("key 1", 200);
  age("key 2", 100);
  REQUIRE(store.load("key 0"));                         // a hit: key 0 is now the most recent
  spill(d.path / "notes.txt", std::string(10000, 'n')); // not an entry: neither counted nor removed
  store.store("key 3", obj);
  CHECK(store.stats().pruned == 1);
  CHECK(fs::exists(store.path_of("key 0")));
  CHECK_FALSE(fs::exists(store.path_of("key 1"))); // the least recently used
  CHECK(fs::exists(store.path_of("key 2")));
  CHECK(fs::exists(store.path_of("key 3")));
  CHECK(fs::exists(d.path / "notes.txt"));
  uint64_t total = 0;
  for (const auto& p : entries(d))
    total += fs::file_size(p);
  CHECK(total <= store.max_bytes());
  // A temporary file a dead writer left is removed once it is old.
  const fs::path stale = d.path / ".0000000000000000.1.0.tmp";
  spill(stale, "partial");
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(1));
  store.prune();
  CHECK_FALSE(fs::exists(stale));
}

TEST_CASE("object store: stores and loads in parallel share one directory") {
  TempDir d("parallel");
  // Two stores stand for two processes; every thread writes and reads the same keys.
  auto a = std::make_shared<ObjectStore>(d.str(), 64u << 20);
  auto b = std::make_shared<ObjectStore>(d.str(), 64u << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      ObjectStore& s = t % 2 ? *a : *b;
      for (int i = 0; i < 200; ++i) {
        std::string key = "key " + std::to_string(i % 5);
        StoredObject obj{"sym" + std::to_string(i % 5), static_cast<uint64_t>(i % 5),
                         std::string(4000 + 100 * (i % 5), static_cast<char>('a' + i % 5))};
        s.store(key, obj);
        auto back = s.load(key);
        REQUIRE(back); // another writer's entry for the key, whole
        CHECK(back->object == obj.object);
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(a->stats().rejected + b->stats().rejected == 0);
  CHECK(entries(d).size() == 5);
  for (const auto& e : fs::directory_iterator(d.path))
    CHECK(e.path().extension() != ".tmp");
}

TEST_CASE("a kernel compiled again while its evicted copy is live gets a symbol of its own") {
  TempDir d("evicted");
  Jit jit(with_store(std::make_shared<ObjectStore>(d.str(), 64u << 20)));
  KernelCache cache(jit, 1);
  auto held = cache.get(chain());
  auto other = cache.get(chain(48)); // evicts the first entry; `held` keeps its code alive
  auto again = cache.get(chain());   // the same key compiled again, beside the live copy
  CHECK(again.get() != held.get());
  CHECK(run(again->elementwise()) == run(held->elementwise()));
  CHECK(cache.stats().evictions == 2);
}

} // namespace tests_jit_object_store_test
