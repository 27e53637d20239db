// jit-internal: lowers a family-1 KernelSpec to an LLVM module. Only jit/*.cpp include this.
#pragma once

#include "jit/kernel_spec.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>
#include <string>

namespace pejit::jit {

/// Where the module's code will run: stamped on the module and the function so that the IR is
/// self-describing and the vectorizer sees the host's vector width.
struct CodegenTarget {
  std::string triple;
  std::string data_layout;
  std::string cpu;
  std::string features;
  /// The width in bits of the vectors the host's code generator prefers (its cost model's
  /// register width: 512 on AVX-512 CPUs that run 512-bit vectors at full speed, 256 where it
  /// prefers 256-bit ones, as on most Intel AVX-512 CPUs).
  int vector_bits = 128;
};

/// Floats per step of an elementwise chain's default schedule: two of the host's preferred
/// vectors (32 with 512-bit vectors, 16 with 256-bit ones), so that each step has two
/// independent copies of the chain's long dependency chains (exp, division) for the CPU to
/// overlap.
int default_chain_width(const CodegenTarget& target);

/// e^x as src/kernels/fast_math.h's fast_exp (Cephes expf, degree-6 polynomial, rel. error
/// <= 3e-7), operation for operation, on a float or a vector of floats `x`: the one emitter
/// behind the elementwise and the reduction families' exp.
llvm::Value* emit_fast_exp(llvm::IRBuilder<>& b, llvm::Value* x);

/// Chain op `op` on `a` (and `b` for a binary op), floats or vectors of floats: the operations of
/// the reference kernels (src/kernels/fast_math.h for exp, tanh and sigmoid), no fast-math
/// flags. The one emitter of the chain's ops, for the CPU lowering and the GPU's.
llvm::Value* emit_elementwise_op(llvm::IRBuilder<>& b, ElementwiseOp op, llvm::Value* a,
                                 llvm::Value* b_value);

/// for (i = 0; i < n; ++i) body(i) in `fn`, as a guarded bottom-tested loop (i64 counter named
/// `name`.i); returns its latch. The loop every lowering in jit/ builds.
template <class Body>
llvm::BranchInst* emit_counted_loop(llvm::IRBuilder<>& b, llvm::Function* fn, llvm::Value* n,
                                    const char* name, Body body) {
  llvm::BasicBlock* pre = b.GetInsertBlock();
  auto* loop = llvm::BasicBlock::Create(b.getContext(), name, fn);
  auto* exit = llvm::BasicBlock::Create(b.getContext(), std::string(name) + ".exit", fn);
  llvm::Value* zero = b.getInt64(0);
  b.CreateCondBr(b.CreateICmpSGT(n, zero), loop, exit);
  b.SetInsertPoint(loop);
  llvm::PHINode* i = b.CreatePHI(b.getInt64Ty(), 2, std::string(name) + ".i");
  i->addIncoming(zero, pre);
  body(i);
  llvm::Value* next = b.CreateAdd(i, b.getInt64(1), "", true, true);
  i->addIncoming(next, b.GetInsertBlock());
  llvm::BranchInst* latch = b.CreateCondBr(b.CreateICmpEQ(next, n), exit, loop);
  b.SetInsertPoint(exit);
  return latch;
}

/// body(true) where the pointer `p` is not null, body(false) where it is: two copies of the code
/// in `fn` behind one branch, joined after (blocks named `name`, `name`.null, `name`.join).
template <class Body>
void emit_on_null(llvm::IRBuilder<>& b, llvm::Function* fn, llvm::Value* p, const char* name,
                  Body body) {
  auto* set = llvm::BasicBlock::Create(b.getContext(), name, fn);
  auto* unset = llvm::BasicBlock::Create(b.getContext(), std::string(name) + ".null", fn);
  auto* join = llvm::BasicBlock::Create(b.getContext(), std::string(name) + ".join", fn);
  b.CreateCondBr(b.CreateIsNotNull(p), set, unset);
  b.SetInsertPoint(set);
  body(true);
  b.CreateBr(join);
  b.SetInsertPoint(unset);
  body(false);
  b.CreateBr(join);
  b.SetInsertPoint(join);
}

/// Floats per vector register that the GEMM family uses on `target` (16 with AVX-512;
/// gemm_codegen.cpp).
int gemm_lanes(const CodegenTarget& target);

/// Adds to `m` an empty `void name(const float* a, const float* b, float* c, int64_t rows)`
/// (a, b, c noalias; a, b read-only) for `target`, with vectors of `lanes` floats legal and
/// preferred: the signature of every GEMM kernel (gemm_codegen.cpp).
llvm::Function* create_gemm_function(llvm::Module& m, const std::string& name,
                                     llvm::GlobalValue::LinkageTypes linkage,
                                     const CodegenTarget& target, int lanes);

/// The mask of a vector of `lanes` floats with its first `valid` lanes on.
llvm::Constant* first_lanes(llvm::LLVMContext& ctx, int lanes, int valid);

/// Adds to `m` the function `void fn_name(const float* a, const float* b, float* c, int64_t
/// rows)` computing `spec`, a validated GemmSpec with packed_b (gemm_panel_codegen.cpp): a
/// panel kernel's GEMM core (internal linkage) or a kernel of its own (external).
struct GemmSpec;
llvm::Function* emit_packed_gemm(const GemmSpec& spec, llvm::Module& m, const std::string& fn_name,
                                 const CodegenTarget& target,
                                 llvm::GlobalValue::LinkageTypes linkage);

/// Marks the loop whose latch is `latch` (explicit vector code) so that O3 neither unrolls,
/// vectorizes nor interleaves it: that would only multiply the code to compile.
void keep_loop_as_written(llvm::BranchInst* latch);

/// Emits `void fn_name(float** in, float** out, int64_t rows)` computing `spec` (unoptimized;
/// O3 vectorizes its inner loop); with spec.panel_rows > 0, `void fn_name(float** in,
/// float** out, int64_t rows, const PanelCore* core)`: the loop over row panels that calls
/// the GEMM core and the chain (an internal always-inline function) per panel. The spec must
/// have passed validate().
std::unique_ptr<llvm::Module> lower_elementwise(const KernelSpec& spec, llvm::LLVMContext& ctx,
                                                const std::string& fn_name,
                                                const CodegenTarget& target);

} // namespace pejit::jit
