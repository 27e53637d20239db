// ObjectStore (object_store.h). An entry file is: the magic "PJKOBJ01", then the key, the
// symbol, the IR hash and the object, each string as a 64-bit length and its bytes, and last the
// FNV-1a hash of everything before it. Numbers are in host byte order: a file from a host of the
// other order fails the magic or the checksum, as a foreign file should.
#include "jit/object_store.h"

#include "jit/jit.h"
#include "pejit/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace pejit::jit {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'P', 'J', 'K', 'O', 'B', 'J', '0', '1'};
constexpr const char* kExt = ".pjk";
// A temporary file this old belongs to a writer that died: no write takes that long.
constexpr auto kStaleTemp = std::chrono::minutes(10);

void put_u64(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}

// Reads `bytes` front to back; any read past the end fails the whole decode.
struct Reader {
  const std::string& bytes;
  size_t at = 0;
  bool ok = true;

  uint64_t u64() {
    uint64_t v = 0;
    if (!ok || bytes.size() - at < sizeof v) {
      ok = false;
      return 0;
    }
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    uint64_t n = u64();
    if (!ok || bytes.size() - at < n) {
      ok = false;
      return {};
    }
    std::string s = bytes.substr(at, n);
    at += n;
    return s;
  }
};

// The whole file, or nothing when it cannot be opened (absent, or removed meanwhile).
std::optional<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::nullopt;
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

} // namespace

ObjectStore::ObjectStore(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {
  const std::string what = "kernel cache directory '" + dir_ + "'";
  if (dir_.empty())
    throw Error("kernel cache directory: empty path");
  if (max_bytes_ == 0)
    throw Error(what + ": its size bound must be above 0 bytes");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_))
    throw Error(what + ": cannot create it" + (ec ? ": " + ec.message() : std::string()));
  if (::access(dir_.c_str(), R_OK | W_OK | X_OK) != 0)
    throw Error(what + ": cannot write into it");
  prune(); // a bound smaller than the last run's holds from the start
}

std::string ObjectStore::path_of(const std::string& key) const {
  return (fs::path(dir_) / fmt::format("{:016x}{}", ir_text_hash(key), kExt)).string();
}

std::string ObjectStore::encode(const std::string& key, const StoredObject& obj) {
  std::string out(kMagic, sizeof kMagic);
  put_str(out, key);
  put_str(out, obj.symbol);
  put_u64(out, obj.ir_hash);
  put_str(out, obj.object);
  put_u64(out, ir_text_hash(out));
  return out;
}

std::optional<StoredObject> ObjectStore::decode(const std::string& bytes, const std::string& key,
                                                std::string& why) {
  if (bytes.size() < sizeof kMagic + 8 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    why = "not a kernel cache entry (no magic)";
    return std::nullopt;
  }
  Reader r{bytes, sizeof kMagic};
  std::string stored_key = r.str();
  StoredObject obj;
  obj.symbol = r.str();
  obj.ir_hash = r.u64();
  obj.object = r.str();
  const size_t body = r.at;
  uint64_t sum = r.u64();
  if (!r.ok || r.at != bytes.size()) {
    why = r.ok ? "trailing bytes" : "truncated";
    return std::nullopt;
  }
  if (sum != ir_text_hash(std::string_view(bytes.data(), body))) {
    why = "checksum mismatch";
    return std::nullopt;
  }
  if (stored_key != key) {
    why = "another key (another kernel, CPU, LLVM or pejit version)";
    return std::nullopt;
  }
  if (obj.symbol.empty() || obj.object.empty()) {
    why = "empty symbol or object";
    return std::nullopt;
  }
  return obj;
}

std::optional<StoredObject> ObjectStore::load(const std::string& key) {
  const std::string path = path_of(key);
  std::optional<std::string> bytes = read_file(path);
  std::lock_guard lock(mu_);
  if (!bytes) {
    ++stats_.absent;
    return std::nullopt;
  }
  std::string why;
  std::optional<StoredObject> obj = decode(*bytes, key, why);
  if (!obj) {
    ++stats_.rejected; // store() replaces it once the kernel is compiled
    return std::nullopt;
  }
  ++stats_.loaded;
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); // recently used: the last to be pruned
  return obj;
}

void ObjectStore::store(const std::string& key, const StoredObject& obj) {
  static std::atomic<uint64_t> counter{0};
  const std::string path = path_of(key);
  const std::string bytes = encode(key, obj);
  // Unique per process and call; renamed over the entry in one step, so a reader sees the
  // old file or the new one, never a part.
  const std::string tmp = (fs::path(dir_) / fmt::format(".{:016x}.{}.{}.tmp", ir_text_hash(key),
                                                        ::getpid(), counter.fetch_add(1)))
                              .string();
  bool ok = false;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ok = write_all(fd, bytes);
    ok = ::close(fd) == 0 && ok;
    ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok)
      ::unlink(tmp.c_str());
  }
  {
    std::lock_guard lock(mu_);
    ++(ok ? stats_.written : stats_.write_failures);
  }
  if (ok)
    prune();
}

void ObjectStore::prune() {
  struct File {
    fs::path path;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<File> entries;
  uint64_t total = 0;
  const auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    const fs::path& p = it->path();
    auto mtime = fs::last_write_time(p, e2);
    if (e2)
      continue; // removed meanwhile
    if (p.extension() == ".tmp" && p.filename().string().front() == '.') {
      if (now - mtime > kStaleTemp)
        fs::remove(p, e2);
      continue;
    }
    if (p.extension() != kExt)
      continue; // not ours: left alone
    uint64_t size = fs::file_size(p, e2);
    if (e2)
      continue;
    entries.push_back({p, size, mtime});
    total += size;
  }
  if (total <= max_bytes_)
    return;
  // Oldest first; ties by name, so concurrent pruners agree on the order.
  std::sort(entries.begin(), entries.end(), [](const File& a, const File& b) {
    return a.mtime != b.mtime ? a.mtime < b.mtime : a.path < b.path;
  });
  uint64_t removed = 0;
  for (const File& f : entries) {
    if (total <= max_bytes_)
      break;
    std::error_code e2;
    if (fs::remove(f.path, e2))
      ++removed;
    total -= f.bytes; // removed by another pruner, if not by this one
  }
  std::lock_guard lock(mu_);
  stats_.pruned += removed;
}

ObjectStoreStats ObjectStore::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

} // namespace pejit::jit
