// ObjectStore: compiled kernels' object code kept in a directory across processes (the kernel
// cache of `--kernel-cache DIR`). An entry is one file named by a hash of its key, holding the
// key, the kernel's symbol and IR hash, the object file and a checksum: a corrupt, truncated or
// foreign entry is rejected (the caller compiles and rewrites it). Writes are a temporary file
// renamed into place, so processes share a directory; the total size is bounded by removing the
// least recently used entries (by modification time, which a hit refreshes). No LLVM type here.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace pejit::jit {

/// What an entry holds besides its key.
struct StoredObject {
  std::string symbol;   ///< the kernel's function, as the object defines it
  uint64_t ir_hash = 0; ///< CompiledKernel::ir_hash of the code compiled into it
  std::string object;   ///< the relocatable object file
};

struct ObjectStoreStats {
  uint64_t loaded = 0;         ///< lookups answered by a good entry
  uint64_t absent = 0;         ///< lookups that found no file
  uint64_t rejected = 0;       ///< files found corrupt, truncated or of another key
  uint64_t written = 0;        ///< entries written
  uint64_t write_failures = 0; ///< entries that could not be written (the run goes on)
  uint64_t pruned = 0;         ///< files removed to keep the directory under its bound
};

/// Thread-safe; several processes may use one directory at once.
class ObjectStore {
public:
  /// Creates `dir` when missing and prunes it to `max_bytes`. Throws pejit::Error naming it
  /// when it cannot be created or is not a writable directory, and when `max_bytes` is 0.
  ObjectStore(std::string dir, uint64_t max_bytes);

  /// The entry for `key`, or nothing (absent, or rejected: counted). A hit marks the entry
  /// recently used.
  std::optional<StoredObject> load(const std::string& key);
  /// Writes the entry for `key` (replacing any), then prunes. A failure to write is counted,
  /// never thrown: the kernel is compiled already, the entry is only missing later.
  void store(const std::string& key, const StoredObject& obj);
  /// Removes the least recently used entries until the entries total at most max_bytes, and
  /// temporary files that a writer which died left behind.
  void prune();

  /// The file that holds (or would hold) the entry for `key`.
  std::string path_of(const std::string& key) const;
  const std::string& dir() const { return dir_; }
  uint64_t max_bytes() const { return max_bytes_; }
  ObjectStoreStats stats() const;

  /// An entry file's bytes, as store() writes them.
  static std::string encode(const std::string& key, const StoredObject& obj);
  /// Reads an entry file's bytes; nothing, with the reason in `why`, unless they are whole,
  /// their checksum holds and their key is `key`.
  static std::optional<StoredObject> decode(const std::string& bytes, const std::string& key,
                                            std::string& why);

private:
  std::string dir_;
  uint64_t max_bytes_;
  mutable std::mutex mu_;
  ObjectStoreStats stats_; // guarded by mu_
};

} // namespace pejit::jit
