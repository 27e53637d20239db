// jit-internal: IR pieces of the GPU kernels (NVPTX), shared by the GPU lowerings of the kernel
// families (ptx_codegen.cpp, and reduce_codegen.cpp's GPU mode): the kernel's thread index and
// thread count, the grid-stride loop that replaces a CPU kernel's row or element loop, a
// kernel function's marking, and logf (NVPTX has no log instruction to lower llvm.log to).
// Pure IR: no NVPTX target is needed to build it, only to turn it into PTX.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <string>
#include <vector>

namespace pejit::jit {

/// The NVPTX triple every GPU module is stamped with (ptx_codegen.cpp adds the target's data
/// layout before optimizing).
extern const char* const kNvptxTriple;

/// Adds to `m` an externally visible kernel `void name(params...)` (the PTX_Kernel calling
/// convention, so `.entry`), its pointer parameters noalias, and positions `b` in its entry.
llvm::Function* create_gpu_kernel(llvm::Module& m, llvm::IRBuilder<>& b, const std::string& name,
                                  const std::vector<llvm::Type*>& params);

/// blockIdx.x * blockDim.x + threadIdx.x, and gridDim.x * blockDim.x, as i64.
llvm::Value* emit_global_thread(llvm::IRBuilder<>& b);
llvm::Value* emit_thread_count(llvm::IRBuilder<>& b);

/// for (i = thread; i < n; i += threads) body(i) in `fn`: every index below n is visited by
/// exactly one thread of the launch, whatever its grid (one thread per index, or fewer threads
/// each taking several). The loop every GPU kernel is written around.
template <class Body>
void emit_grid_stride_loop(llvm::IRBuilder<>& b, llvm::Function* fn, llvm::Value* n,
                           const char* name, Body body) {
  llvm::Value* first = emit_global_thread(b);
  llvm::Value* step = emit_thread_count(b);
  llvm::BasicBlock* pre = b.GetInsertBlock();
  auto* loop = llvm::BasicBlock::Create(b.getContext(), name, fn);
  auto* exit = llvm::BasicBlock::Create(b.getContext(), std::string(name) + ".exit", fn);
  b.CreateCondBr(b.CreateICmpSLT(first, n), loop, exit);
  b.SetInsertPoint(loop);
  llvm::PHINode* i = b.CreatePHI(b.getInt64Ty(), 2, std::string(name) + ".i");
  i->addIncoming(first, pre);
  body(i);
  llvm::Value* next = b.CreateAdd(i, step, "", true, true);
  i->addIncoming(next, b.GetInsertBlock());
  b.CreateCondBr(b.CreateICmpSLT(next, n), loop, exit);
  b.SetInsertPoint(exit);
}

/// logf(x) for a float: Cephes' logf (x = m * 2^e, m in [sqrt(1/2), sqrt(2)), a degree-9
/// polynomial in m - 1), within about 1 ulp of the correctly rounded result; +0 gives -inf,
/// a negative x or NaN gives NaN, +inf gives +inf, subnormals are scaled first.
llvm::Value* emit_gpu_logf(llvm::IRBuilder<>& b, llvm::Value* x);

} // namespace pejit::jit
