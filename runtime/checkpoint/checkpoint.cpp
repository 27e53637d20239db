// Checkpoint save (atomic: temp file, fsync, rename) and load (every field validated against
// the file's size before anything is allocated, so corrupt or hostile files throw pejit::Error
// instead of crashing or allocating absurdly). POSIX I/O; the blob is read with pread straight
// into the tensors.
#include "runtime/checkpoint/checkpoint.h"

#include "src/util/check.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <limits>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace pejit::checkpoint {

static_assert(std::endian::native == std::endian::little, "the checkpoint blob is little-endian");

namespace {

using json = nlohmann::json;

constexpr int64_t kAlign = 64;
constexpr int kMaxJsonDepth = 16;
constexpr int64_t kMaxDim = int64_t{1} << 40;

std::atomic<int64_t> g_fail_after{-1};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("checkpoint '" + path + "': " + what);
}

std::string errno_text() {
  return std::strerror(errno);
}

/// Closes the descriptor and removes the temporary file unless committed.
class TempFile {
public:
  TempFile(std::string path, std::string final_path)
      : path_(std::move(path)), final_(std::move(final_path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0)
      fail(final_, "cannot create '" + path_ + "': " + errno_text());
  }
  ~TempFile() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!committed_)
      ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      size_t chunk = std::min<size_t>(n, size_t{1} << 30);
      int64_t limit = g_fail_after.load();
      if (limit >= 0) {
        if (written_ >= limit)
          fail(final_, "write failed (test hook) after " + std::to_string(written_) + " bytes");
        chunk = std::min<size_t>(chunk, static_cast<size_t>(limit - written_));
      }
      ssize_t k = ::write(fd_, p, chunk);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        fail(final_, "write to '" + path_ + "' failed: " + errno_text());
      p += k;
      n -= static_cast<size_t>(k);
      written_ += k;
    }
  }

  void commit() {
    if (::fsync(fd_) != 0)
      fail(final_, "fsync of '" + path_ + "' failed: " + errno_text());
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      fail(final_, "close of '" + path_ + "' failed: " + errno_text());
    if (::rename(path_.c_str(), final_.c_str()) != 0)
      fail(final_, "rename from '" + path_ + "' failed: " + errno_text());
    committed_ = true;
    // Make the rename itself durable; best effort (not every filesystem supports it).
    auto slash = final_.rfind('/');
    std::string dir = slash == std::string::npos ? "." : final_.substr(0, slash + 1);
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

private:
  std::string path_, final_;
  int fd_ = -1;
  int64_t written_ = 0;
  bool committed_ = false;
};

std::string hex64(uint64_t v) {
  char buf[17];
  for (int i = 15; i >= 0; --i, v >>= 4)
    buf[i] = "0123456789abcdef"[v & 15];
  buf[16] = 0;
  return buf;
}

/// Removes "<path>.tmp.<pid>" files left by saves whose process no longer exists (a save
/// killed mid-write). Temporary files of live processes (a concurrent save) are left alone.
void remove_stale_temps(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string prefix = p.filename().string() + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0)
      continue;
    long pid = 0;
    const char* first = name.data() + prefix.size();
    const char* last = name.data() + name.size();
    auto [ptr, err] = std::from_chars(first, last, pid);
    if (err != std::errc() || ptr != last || pid <= 0 || pid == ::getpid())
      continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code rm;
      fs::remove(it->path(), rm);
    }
  }
}

/// Header entries for `tensors`, laid out from blob offset `off` (advanced past them).
json layout(const std::string& path, const char* what,
            const std::vector<std::pair<const std::string*, const Tensor*>>& tensors,
            int64_t& off) {
  json arr = json::array();
  std::set<std::string> seen;
  for (auto [name, t] : tensors) {
    if (name->empty())
      fail(path, std::string("an empty name among the ") + what);
    if (!seen.insert(*name).second)
      fail(path, std::string("duplicate ") + what + " '" + *name + "'");
    if (!t->defined() || t->dtype() != DType::F32)
      fail(path, std::string(what) + " '" + *name + "' is not a defined f32 tensor");
    json shape = json::array();
    for (int64_t d : t->shape())
      shape.push_back(d);
    arr.push_back({{"name", *name},
                   {"dtype", "f32"},
                   {"shape", shape},
                   {"offset", off},
                   {"checksum", hex64(tensor_checksum(t->raw(), t->nbytes()))}});
    int64_t bytes = static_cast<int64_t>(t->nbytes());
    off += (bytes + kAlign - 1) / kAlign * kAlign;
  }
  return arr;
}

// ---- load helpers -------------------------------------------------------------------------

class Reader {
public:
  explicit Reader(std::string path) : path_(std::move(path)) {
    // O_NONBLOCK so that a FIFO cannot block open(); it is rejected below.
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0)
      fail(path_, "cannot open: " + errno_text());
    struct stat st{};
    if (::fstat(fd_, &st) != 0)
      fail(path_, "cannot stat: " + errno_text());
    if (!S_ISREG(st.st_mode))
      fail(path_, "not a regular file");
    size_ = static_cast<int64_t>(st.st_size);
  }
  ~Reader() { ::close(fd_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  int64_t size() const { return size_; }

  /// Reads exactly n bytes at `off`, or throws naming `what`.
  void read_at(void* dst, int64_t n, int64_t off, const std::string& what) {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t k = ::pread(fd_, p, static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30)),
                          static_cast<off_t>(off));
      if (k < 0 && errno == EINTR)
        continue;
      if (k < 0)
        fail(path_, "read of " + what + " failed: " + errno_text());
      if (k == 0)
        fail(path_, "truncated: " + what + " runs past the end of the file");
      p += k;
      n -= k;
      off += k;
    }
  }

  /// The first line (without '\n').
  std::string header_line() {
    std::string line;
    char buf[65536];
    int64_t off = 0;
    while (off < size_) {
      int64_t n = std::min<int64_t>(sizeof buf, size_ - off);
      read_at(buf, n, off, "the header");
      const char* nl = static_cast<const char*>(std::memchr(buf, '\n', static_cast<size_t>(n)));
      if (nl) {
        line.append(buf, static_cast<size_t>(nl - buf));
        return line;
      }
      line.append(buf, static_cast<size_t>(n));
      off += n;
    }
    fail(path_, "no header line (the file must start with one line of JSON)");
  }

private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

int64_t get_int(const std::string& path, const json& j, const std::string& what, int64_t lo,
                int64_t hi) {
  int64_t v = 0;
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi))
      fail(path, what + " is out of range");
    v = static_cast<int64_t>(u);
  } else if (j.is_number_integer()) {
    v = j.get<int64_t>();
  } else {
    fail(path, what + " must be an integer");
  }
  if (v < lo || v > hi)
    fail(path, what + " = " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
  return v;
}

const json& field(const std::string& path, const json& obj, const char* key,
                  const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end())
    fail(path, where + " lacks \"" + key + "\"");
  return *it;
}

/// Reads the tensors of one header array ("params" or "optimizer_state"). `budget` is the
/// blob bytes not yet claimed; every tensor's bytes are taken from it.
std::vector<std::pair<std::string, Tensor>> read_tensors(Reader& rd, const std::string& path,
                                                         const json& arr, const char* key,
                                                         int64_t base, int64_t blob_len,
                                                         int64_t& budget, bool finite) {
  if (!arr.is_array())
    fail(path, std::string("\"") + key + "\" must be an array");
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& e = arr[i];
    std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    if (!e.is_object())
      fail(path, where + " must be an object");
    const json& jn = field(path, e, "name", where);
    if (!jn.is_string() || jn.get_ref<const std::string&>().empty())
      fail(path, where + ".name must be a non-empty string");
    std::string name = jn.get<std::string>();
    where = std::string(key) + " '" + name + "'";
    if (!seen.insert(name).second)
      fail(path, "duplicate " + where);
    if (auto it = e.find("dtype"); it != e.end() && (!it->is_string() || *it != "f32"))
      fail(path, where + " has dtype " + it->dump() + " (only \"f32\" is supported)");
    const json& js = field(path, e, "shape", where);
    if (!js.is_array() || js.size() > Shape::kMaxRank)
      fail(path, where + ".shape must be an array of at most " + std::to_string(Shape::kMaxRank) +
                     " integers");
    Shape shape;
    int64_t numel = 1;
    for (size_t k = 0; k < js.size(); ++k) {
      int64_t d = get_int(path, js[k], where + ".shape[" + std::to_string(k) + "]", 0, kMaxDim);
      shape.push_back(d);
      // Cap by the blob before multiplying further, so the product cannot overflow.
      if (numel != 0 && d != 0 && numel > blob_len / 4 / d + 1)
        fail(path, where + " shape " + shape.str() + " is larger than the file");
      numel *= d;
    }
    int64_t bytes = numel * 4;
    int64_t off = get_int(path, field(path, e, "offset", where), where + ".offset", 0, blob_len);
    if (off % kAlign != 0)
      fail(path, where + ".offset " + std::to_string(off) + " is not a multiple of 64");
    if (bytes > blob_len - off)
      fail(path, where + " (" + std::to_string(bytes) + " bytes at offset " + std::to_string(off) +
                     ") runs past the end of the blob (" + std::to_string(blob_len) + " bytes)");
    if (bytes > budget)
      fail(path, "the tensors claim more bytes than the blob holds (overlapping entries)");
    budget -= bytes;
    Tensor t = Tensor::empty(DType::F32, shape);
    rd.read_at(t.raw(), bytes, base + off, where);
    if (auto it = e.find("checksum"); it != e.end()) {
      if (!it->is_string() || it->get_ref<const std::string&>().size() != 16)
        fail(path, where + ".checksum must be a string of 16 hex digits");
      std::string have = hex64(tensor_checksum(t.raw(), static_cast<size_t>(bytes)));
      if (have != it->get_ref<const std::string&>())
        fail(path, where + " does not match its checksum (stored " + it->get<std::string>() +
                       ", data " + have +
                       "): the file was damaged or changed after it was written");
    }
    if (finite) {
      const float* v = t.f32();
      for (int64_t k = 0; k < numel; ++k)
        if (!std::isfinite(v[k]))
          fail(path, where + " holds a non-finite value (" + std::to_string(v[k]) +
                         ") at element " + std::to_string(k) +
                         "; a model trained into NaN or infinity cannot be used");
    }
    out.emplace_back(std::move(name), std::move(t));
  }
  return out;
}

} // namespace

uint64_t tensor_checksum(const void* data, size_t bytes) {
  // FNV-1a's offset and prime over 8-byte words: xor then multiply by an odd constant are both
  // bijections of the state, so changing any one word changes the result. The length is mixed
  // in last, so zero padding cannot pass for data.
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * kPrime;
  }
  if (i < bytes) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, bytes - i);
    h = (h ^ w) * kPrime;
  }
  return (h ^ static_cast<uint64_t>(bytes)) * kPrime;
}

namespace detail {
void set_save_failure_after_bytes(int64_t n) {
  g_fail_after.store(n);
}
} // namespace detail

void save(const std::string& path, const Checkpoint& ck) {
  if (ck.params.names.size() != ck.params.values.size())
    fail(path, "params has " + std::to_string(ck.params.names.size()) + " names for " +
                   std::to_string(ck.params.values.size()) + " values");
  std::vector<std::pair<const std::string*, const Tensor*>> ps, os;
  for (size_t i = 0; i < ck.params.names.size(); ++i)
    ps.emplace_back(&ck.params.names[i], &ck.params.values[i]);
  for (const auto& [n, t] : ck.optimizer_state)
    os.emplace_back(&n, &t);

  int64_t off = 0;
  json h = json::object();
  h["format"] = "pejit-checkpoint";
  h["version"] = kVersion;
  h["params"] = layout(path, "parameter", ps, off);
  h["vocab"] = ck.vocab;
  if (!os.empty())
    h["optimizer_state"] = layout(path, "optimizer state", os, off);
  if (!ck.meta.empty())
    h["meta"] = ck.meta;
  if (ck.training) {
    if (ck.training->epoch < 0 || ck.training->batch < 0)
      fail(path, "a training state with a negative epoch or batch");
    h["training"] = {{"epoch", ck.training->epoch},
                     {"batch", ck.training->batch},
                     {"values", ck.training->values}};
  }
  h["data_bytes"] = off;
  std::string text;
  try {
    text = h.dump(); // compact: one line, newlines inside strings are escaped
  } catch (const json::exception& e) {
    fail(path, std::string("cannot encode the header (a name, word or meta string is not valid "
                           "UTF-8?): ") +
                   e.what());
  }
  text.push_back('\n');

  remove_stale_temps(path);
  TempFile tmp(path + ".tmp." + std::to_string(::getpid()), path);
  tmp.write(text.data(), text.size());
  static const char zeros[kAlign] = {};
  for (const auto* list : {&ps, &os})
    for (auto [name, t] : *list) {
      size_t n = t->nbytes();
      tmp.write(t->raw(), n);
      tmp.write(zeros, static_cast<size_t>((kAlign - static_cast<int64_t>(n) % kAlign) % kAlign));
    }
  tmp.commit();
}

Checkpoint load(const std::string& path, bool finite_params) {
  Reader rd(path);
  std::string line = rd.header_line();
  json h;
  try {
    // Depth-limited: a header is three levels deep; refuse pathological nesting.
    h = json::parse(line, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        fail(path, "the header JSON is nested too deeply");
      return true;
    });
  } catch (const json::exception& e) {
    fail(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!h.is_object())
    fail(path, "the header must be a JSON object");
  if (auto it = h.find("format"); it == h.end() || *it != "pejit-checkpoint")
    fail(path, "not a pejit checkpoint (\"format\" is not \"pejit-checkpoint\")");
  if (auto it = h.find("version");
      it == h.end() || !it->is_number_integer() || *it < 1 || *it > kVersion)
    fail(path, "unsupported version " + (it == h.end() ? std::string("(missing)") : it->dump()) +
                   " (this build reads versions 1 to " + std::to_string(kVersion) + ")");

  const int64_t base = static_cast<int64_t>(line.size()) + 1;
  int64_t blob_len = rd.size() - base;
  if (auto it = h.find("data_bytes"); it != h.end()) {
    int64_t db = get_int(path, *it, "data_bytes", 0, std::numeric_limits<int64_t>::max());
    if (db > blob_len)
      fail(path, "truncated: the blob has " + std::to_string(blob_len) +
                     " bytes, data_bytes says " + std::to_string(db));
    blob_len = db; // tensors must lie within data_bytes
  }

  Checkpoint ck;
  const json& jv = field(path, h, "vocab", "the header");
  if (!jv.is_array())
    fail(path, "\"vocab\" must be an array of strings");
  ck.vocab.reserve(jv.size());
  for (const auto& w : jv) {
    if (!w.is_string())
      fail(path, "\"vocab\" must be an array of strings");
    ck.vocab.push_back(w.get<std::string>());
  }

  int64_t budget = blob_len;
  auto params = read_tensors(rd, path, field(path, h, "params", "the header"), "params", base,
                             blob_len, budget, finite_params);
  for (auto& [n, t] : params) {
    ck.params.names.push_back(std::move(n));
    ck.params.values.push_back(std::move(t));
  }
  if (auto it = h.find("optimizer_state"); it != h.end())
    ck.optimizer_state =
        read_tensors(rd, path, *it, "optimizer_state", base, blob_len, budget, false);
  if (auto it = h.find("meta"); it != h.end()) {
    if (!it->is_object())
      fail(path, "\"meta\" must be an object");
    for (const auto& [k, v] : it->items())
      ck.meta[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  if (auto it = h.find("training"); it != h.end()) {
    if (!it->is_object())
      fail(path, "\"training\" must be an object");
    TrainState ts;
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    ts.epoch = get_int(path, field(path, *it, "epoch", "\"training\""), "training.epoch", 0, kMax);
    ts.batch = get_int(path, field(path, *it, "batch", "\"training\""), "training.batch", 0, kMax);
    if (auto v = it->find("values"); v != it->end()) {
      if (!v->is_object())
        fail(path, "training.values must be an object of strings");
      for (const auto& [k, x] : v->items()) {
        if (!x.is_string())
          fail(path, "training.values." + k + " must be a string");
        ts.values[k] = x.get<std::string>();
      }
    }
    ck.training = std::move(ts);
  }
  return ck;
}

} // namespace pejit::checkpoint
