// Jit: one ORC LLJIT for the host CPU (its name and features, so AVX-512 where present), O3 with
// the new pass manager, concurrent compilation on a pool of `compile_threads`, and code freed
// only through the ResourceTracker of the kernel it belongs to. LLVM stays inside jit.cpp: this
// header shows no LLVM type, and every llvm::Error is rethrown here as pejit::Error.
#pragma once

#include "jit/gemm_codegen.h"
#include "jit/kernel_spec.h"
#include "jit/object_store.h"
#include "jit/reduce_spec.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace pejit::jit {

/// The compiled form of a family-1 KernelSpec.
using ElementwiseFn = void (*)(float* const* in, float* const* out, int64_t rows);

/// The compiled form of a family-1 KernelSpec with panel_rows > 0 (a chain fused with a GEMM
/// core, called per row panel).
using PanelFn = void (*)(float* const* in, float* const* out, int64_t rows, const PanelCore* core);

/// Names one compiled kernel's code inside its Jit; 0 is "none".
struct KernelHandle {
  uint64_t id = 0;
  friend bool operator==(KernelHandle, KernelHandle) = default;
};

/// A kernel ready to call. `fn` stays valid until `Jit::remove(handle)` or the Jit's destruction.
struct CompiledKernel {
  ElementwiseFn fn = nullptr; ///< a plain kernel (panel_rows == 0), else null
  PanelFn panel = nullptr;    ///< a panel kernel (panel_rows > 0), else null
  KernelHandle handle;
  double compile_ms = 0; ///< lowering + O3 + codegen + link, measured around compile()
  /// ir_text_hash() of the optimized IR that was linked, printed under the kernel's canonical
  /// name: equal to the hash of optimized_ir(spec) (byte-identical IR from
  /// every entry point: docs/architecture.md).
  uint64_t ir_hash = 0;
  /// Its object code came from the object store (JitOptions::store): linked, not compiled;
  /// compile_ms is then the time to lower, read and link it.
  bool loaded = false;
};

/// FNV-1a (64-bit) of an LLVM IR text: the hash CompiledKernel::ir_hash records and
/// `pejit dump --emit llvm` prints ("fnv=%016x").
uint64_t ir_text_hash(std::string_view text);

/// The compiled form of a GemmSpec; `rows` is the spec's run-time dimension (M, or K for TN).
using GemmFn = void (*)(const float* a, const float* b, float* c, int64_t rows);

/// The compiled form of a TN GemmSpec with `stretches`: C = sum of st[s].a^T · st[s].b, or
/// C += that sum when `accumulate` is nonzero (C is then read).
using GemmStretchesFn = void (*)(const GemmStretch* st, int64_t count, float* c,
                                 int64_t accumulate);

/// A GEMM kernel ready to call, valid until `Jit::remove(handle)` or the Jit's destruction.
struct CompiledGemm {
  GemmFn fn = nullptr;                 ///< every spec but a TN with stretches
  GemmStretchesFn stretches = nullptr; ///< a TN spec with stretches
  KernelHandle handle;
  double compile_ms = 0;
  std::string schedule; ///< the register block it got, e.g. "6x4 (default)"
  uint64_t ir_hash = 0; ///< as CompiledKernel::ir_hash, of optimized_ir(GemmSpec)
  bool loaded = false;  ///< as CompiledKernel::loaded
};

/// The compiled form of a ReduceSpec (family 3): returns -1, or for cross-entropy the first row
/// whose label is out of range (reduce_spec.h).
using ReduceFn = int64_t (*)(const void* const* in, void* const* out, int64_t rows);

/// A row-reduction or loss kernel ready to call, valid until `Jit::remove(handle)` or the Jit's
/// destruction.
struct CompiledReduce {
  ReduceFn fn = nullptr;
  KernelHandle handle;
  double compile_ms = 0;
  uint64_t ir_hash = 0; ///< as CompiledKernel::ir_hash, of optimized_ir(ReduceSpec)
  bool loaded = false;  ///< as CompiledKernel::loaded
};

struct JitOptions {
  /// ORC's compile pool; beside training, keep at most 1. 0: no pool: each
  /// compile runs on the thread that asks for it, one at a time (what the engine uses: its
  /// pipeline threads compile).
  unsigned compile_threads = 1;
  /// Where compiled kernels' object code is kept across processes (object_store.h); null:
  /// nowhere. With one, a kernel whose entry is there is linked from it (no O3, no code
  /// generation), and every kernel compiled is written to it. Its key: the spec's canonical
  /// text, the hash of the lowered IR, the target (triple, CPU, features), the LLVM version
  /// and pejit's version.
  std::shared_ptr<ObjectStore> store = nullptr;
};

/// Owns one LLJIT. Every member function is safe to call from several threads at once.
class Jit {
public:
  /// Throws pejit::Error when the host target cannot be set up.
  explicit Jit(JitOptions options = {});
  ~Jit();
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;

  /// Lowers, verifies, optimizes and links `spec`. Throws pejit::Error (a malformed spec, IR
  /// that fails verification, an LLVM failure); the Jit stays usable afterwards.
  CompiledKernel compile(const KernelSpec& spec);

  /// Lowers, verifies, optimizes and links a GEMM kernel (gemm_codegen.h); errors as compile().
  CompiledGemm compile_gemm(const GemmSpec& spec);

  /// Lowers, verifies, optimizes and links a row-reduction or loss kernel (reduce_spec.h);
  /// errors as compile().
  CompiledReduce compile_reduce(const ReduceSpec& spec);

  /// Frees the kernel's code through its ResourceTracker. Unknown or already removed handles
  /// are ignored. The caller guarantees that no thread is running the kernel.
  void remove(KernelHandle handle);

  /// The optimized LLVM IR that compile() would link for `spec` (for tests and `pejit dump`).
  std::string optimized_ir(const KernelSpec& spec) const;
  std::string optimized_ir(const GemmSpec& spec) const;   ///< the same for a GEMM kernel
  std::string optimized_ir(const ReduceSpec& spec) const; ///< the same for a family-3 kernel

  const std::string& target_cpu() const; ///< e.g. "sapphirerapids"
  /// What target_cpu() is on this host, without setting up a Jit.
  static std::string host_cpu();
  const std::string& target_features() const; ///< e.g. "+avx512f,+avx2,..."
  int vector_lanes() const; ///< floats per vector register the GEMM family uses (16 with AVX-512)
  /// Floats per step of an elementwise chain's default schedule: two of the host's preferred
  /// vectors (32 where it prefers 512-bit vectors, 16 with 256-bit ones).
  int chain_width() const;
  size_t live_kernels() const; ///< kernels compiled and not yet removed
  /// The object store's key for `spec` on this Jit's target (JitOptions::store), for tests and
  /// diagnostics.
  std::string store_key(const KernelSpec& spec) const;

private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace pejit::jit
