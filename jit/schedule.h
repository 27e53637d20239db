// Schedules (docs/cli.md): the parameters of each kernel family, their text form, and the
// tuned database that `pejit tune` writes and `--tuned FILE` / CompileOptions read. The default
// schedule of every family is valid on every x86-64 host and is what compiles unless a caller
// hands a ScheduleDB in explicitly; nothing here reads the environment. Plain C++, no LLVM.
//
// Families and their schedule text:
// - elementwise (KernelSpec::schedule): "default" (explicit 8-float vectors over a row's
//   columns, elementwise_codegen.cpp; the flat loop: the loop vectorizer's own choice), or
//   "vWxU": the kernel's inner loop is forced to vectors of W floats (1 = not vectorized)
//   with U interleaved copies (unrolling), through llvm.loop.vectorize.width /
//   interleave.count.
// - gemm (GemmSpec mr, nr): "default" (the block resolved() picks for the target), or "MxN":
//   the register block (gemm_codegen.h).
// A database entry is keyed by the kernel's signature (its canonical text without the schedule)
// and the CPU it was measured on (Jit::target_cpu()); an entry for another CPU is never used.
#pragma once

#include "jit/gemm_codegen.h"
#include "jit/kernel_spec.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pejit::jit {

/// The parameters of an elementwise schedule; 0/0 is the default (no loop metadata).
struct ElementwiseSchedule {
  int vector_width = 0; ///< floats per vector: 1 (scalar), 2, 4, ..., 64; 0: the default's
  int interleave = 0;   ///< interleaved copies 1..16; 0: the default's
  bool is_default() const { return vector_width == 0; }
};

/// Parses "default" or "vWxU"; throws pejit::Error naming `text` when it is neither.
ElementwiseSchedule parse_elementwise_schedule(const std::string& text);
/// "default" or "vWxU".
std::string elementwise_schedule_text(const ElementwiseSchedule& s);

/// Parses a GEMM block "default" (0, 0) or "MxN" and checks it as GemmSpec::validate() does;
/// throws pejit::Error naming `text`.
void parse_gemm_schedule(const std::string& text, int& mr, int& nr);

/// One measured kernel: what `pejit tune` found best on `cpu` for `signature`.
struct ScheduleEntry {
  std::string signature; ///< KernelSpec::signature() or GemmSpec::signature()
  std::string cpu;       ///< Jit::target_cpu() of the machine that measured it
  std::string family;    ///< "elementwise" or "gemm" (from the signature)
  std::string schedule;  ///< the winner, in its family's text; may be "default"
  // What the tuner measured (informative; not used to compile).
  std::vector<int64_t> rows; ///< run-time row counts timed (each candidate: sum over them)
  double default_us = 0, best_us = 0;
  int candidates = 0;
};

/// A tuned schedule database: JSON, human-readable, written by `pejit tune`. Immutable once
/// loaded; safe to share between threads.
///
///   {"format": "pejit-schedules", "version": 1, "entries": [
///     {"signature": "ew f32 w=150 in=F,F ops=mul(0,1) out=2", "cpu": "sapphirerapids",
///      "family": "elementwise", "schedule": "v16x2",
///      "measured": {"rows": [16, 128, 512], "default_us": 3.1, "best_us": 2.6,
///                   "candidates": 8}}]}
class ScheduleDB {
public:
  ScheduleDB() = default;
  explicit ScheduleDB(std::string path) : path_(std::move(path)) {}

  /// Reads and checks a database. Throws pejit::Error naming the file for a missing or
  /// unreadable file, bad JSON, a wrong format or version; naming the file and the entry
  /// (index and signature) for a malformed entry, an unknown family, a schedule its family
  /// does not accept, or a (signature, cpu) given twice.
  static ScheduleDB load(const std::string& path);

  /// Writes the database to `path` atomically (temp file + rename), entries sorted by
  /// (signature, cpu). Throws pejit::Error naming the file.
  void save(const std::string& path) const;

  /// The entry for (signature, cpu), or null; `index` receives its position in entries().
  const ScheduleEntry* find(const std::string& signature, const std::string& cpu,
                            size_t* index = nullptr) const;
  /// Adds `e`, replacing an entry with the same (signature, cpu). Throws pejit::Error when its
  /// schedule is invalid for its family.
  void put(ScheduleEntry e);

  /// Non-empty when no entry was measured on `cpu`: a warning naming the file and the CPUs it
  /// holds (every kernel then gets its default schedule).
  std::string cpu_warning(const std::string& cpu) const;

  const std::string& path() const { return path_; }
  const std::vector<ScheduleEntry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

private:
  std::string path_;
  std::vector<ScheduleEntry> entries_;
};

/// Where a kernel's schedule came from: "default", "given" (set on the spec by its caller), or
/// "tuned FILE entry N" (the database's path and the entry's index in it).
std::string tuned_source(const ScheduleDB& db, size_t index);

/// The spec to compile: `spec` itself when it names a schedule (source "given") or when `db`
/// is null or has no entry for (spec.signature(), cpu) (source "default"); else `spec` with
/// the entry's schedule (source: tuned_source). Every entry point (KernelCache, `pejit dump`)
/// resolves through these, so the same options compile the same IR everywhere.
KernelSpec resolve_schedule(const KernelSpec& spec, const ScheduleDB* db, const std::string& cpu,
                            std::string& source);
GemmSpec resolve_schedule(const GemmSpec& spec, const ScheduleDB* db, const std::string& cpu,
                          std::string& source);

} // namespace pejit::jit
