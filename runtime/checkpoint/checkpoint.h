// The pejit checkpoint format, shared with the PyTorch peer (bench/torch/treelstm_torch.py):
// one line of JSON, '\n', then a blob of raw little-endian row-major f32 tensors, each starting
// at a multiple of 64 bytes. Header: {"format":"pejit-checkpoint","version":2,
// "params":[{"name","dtype":"f32","shape","offset","checksum"}...],"vocab":[...],
// "data_bytes":N,"optimizer_state":[entries like params'] (optional),"meta":{...} (optional),
// "training":{"epoch","batch","values":{...}} (optional, version 2)}. Version 1 files (no
// "training") still load. "checksum" (16 hex digits, tensor_checksum() of the tensor's bytes)
// is written by pejit and checked on load when present; files without it (the peer's) load
// unchecked.
#pragma once

#include "src/interp/params.h"
#include "src/tensor/tensor.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pejit::checkpoint {

/// The version save() writes; load() reads it and every earlier one.
constexpr int kVersion = 2;

/// Where a training loop stood when the checkpoint was written (version 2), so that a run can
/// resume exactly: the epoch in progress, its batches already stepped, and whatever else the
/// loop keeps (strings, stored as given).
struct TrainState {
  int64_t epoch = 0;
  int64_t batch = 0;
  std::map<std::string, std::string> values;
};

/// Everything a checkpoint holds. All tensors are f32.
struct Checkpoint {
  interp::Params params;
  std::vector<std::string> vocab;
  /// As optim::Optimizer::state() returns it; empty when not saved.
  std::vector<std::pair<std::string, Tensor>> optimizer_state;
  /// Free-form strings (model file, epoch, ...). On load, a non-string JSON value written by
  /// another tool is kept as its compact JSON text.
  std::map<std::string, std::string> meta;
  /// Absent in files written outside a training loop and in version 1 files.
  std::optional<TrainState> training;
};

/// Writes `ck` atomically: to "<path>.tmp.<pid>", fsync, then rename over `path`, so a crash or
/// an error never leaves a partial file under `path` (the previous file stays intact). Temporary
/// files of earlier saves to `path` whose process is gone (a killed save) are removed. Params
/// come first in the blob, then the optimizer state. Throws pejit::Error naming the path for an
/// I/O failure, a tensor that is undefined or not f32, a duplicate or empty name, or a string
/// that is not valid UTF-8.
void save(const std::string& path, const Checkpoint& ck);

/// Reads a checkpoint. Throws pejit::Error naming the file and what is wrong for any malformed
/// input (missing or unreadable file, no header line, bad JSON, wrong format or version,
/// missing or mistyped fields (a "training" object included), a dtype other than f32, negative or
/// overflowing shapes, offsets not 64-aligned or out of range, a truncated blob, duplicate names).
/// Allocates at most about the file's size: the tensors together may not claim more bytes than the
/// blob holds. A tensor whose bytes do not match its checksum is an error naming the file and the
/// tensor; so is a parameter holding a NaN or an infinity, unless `finite_params` is false (a tool
/// that reads any file as it is).
Checkpoint load(const std::string& path, bool finite_params = true);

/// The checksum a checkpoint stores per tensor: a 64-bit hash over its bytes, in which any
/// change of one 8-byte word changes the result (each step is a bijection of the state).
uint64_t tensor_checksum(const void* data, size_t bytes);

namespace detail {
/// Test hook: when n >= 0, the next save() calls fail with pejit::Error once they have written
/// n bytes of their temporary file, as a full disk or a crash mid-write would. -1 turns it off.
void set_save_failure_after_bytes(int64_t n);
} // namespace detail

} // namespace pejit::checkpoint
