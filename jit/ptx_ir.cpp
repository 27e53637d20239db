// IR pieces of the GPU kernels (ptx_ir.h): thread indices through the NVVM special-register
// intrinsics, kernel functions marked by their calling convention (NVPTX emits them as
// `.entry`), and a Cephes logf in plain IR, since NVPTX would lower llvm.log.f32 to a call of
// an external logf that no PTX module provides.
#include "jit/ptx_ir.h"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <cstdint>

namespace pejit::jit {

using llvm::Value;

const char* const kNvptxTriple = "nvptx64-nvidia-cuda";

llvm::Function* create_gpu_kernel(llvm::Module& m, llvm::IRBuilder<>& b, const std::string& name,
                                  const std::vector<llvm::Type*>& params) {
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), params, false);
  auto* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, m);
  fn->setCallingConv(llvm::CallingConv::PTX_Kernel);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  for (unsigned i = 0; i < params.size(); ++i)
    if (params[i]->isPointerTy())
      fn->addParamAttr(i, llvm::Attribute::NoAlias);
  b.SetInsertPoint(llvm::BasicBlock::Create(m.getContext(), "entry", fn));
  return fn;
}

namespace {

Value* sreg(llvm::IRBuilder<>& b, llvm::Intrinsic::ID id) {
  return b.CreateZExt(b.CreateIntrinsic(b.getInt32Ty(), id, {}), b.getInt64Ty());
}

} // namespace

Value* emit_global_thread(llvm::IRBuilder<>& b) {
  Value* block = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  Value* dim = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
  Value* tid = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  return b.CreateAdd(b.CreateMul(block, dim, "", true, true), tid, "thread", true, true);
}

Value* emit_thread_count(llvm::IRBuilder<>& b) {
  Value* grid = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  Value* dim = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
  return b.CreateMul(grid, dim, "threads", true, true);
}

Value* emit_gpu_logf(llvm::IRBuilder<>& b, Value* x) {
  llvm::Type* f32 = b.getFloatTy();
  llvm::Type* i32 = b.getInt32Ty();
  auto f = [&](float v) { return llvm::ConstantFP::get(f32, v); };
  auto i = [&](int32_t v) { return b.getInt32(static_cast<uint32_t>(v)); };
  // Subnormals are scaled into the normal range first (2^23), their exponent corrected after.
  Value* tiny = b.CreateFCmpOLT(x, f(1.17549435e-38f));
  Value* xs = b.CreateSelect(tiny, b.CreateFMul(x, f(8388608.0f)), x);
  Value* bits = b.CreateBitCast(xs, i32);
  // x = m * 2^e with m in [0.5, 1) (frexpf).
  Value* e = b.CreateSub(b.CreateAnd(b.CreateLShr(bits, 23), i(0xff)), i(126));
  e = b.CreateSub(e, b.CreateSelect(tiny, i(23), i(0)));
  Value* m = b.CreateBitCast(b.CreateOr(b.CreateAnd(bits, i(0x807fffff)), i(0x3f000000)), f32);
  // m below sqrt(1/2): 2m - 1 and e - 1, else m - 1 (Cephes' reduction).
  Value* low = b.CreateFCmpOLT(m, f(0.707106781186547524f));
  e = b.CreateSub(e, b.CreateSelect(low, i(1), i(0)));
  Value* r =
      b.CreateSelect(low, b.CreateFSub(b.CreateFAdd(m, m), f(1.0f)), b.CreateFSub(m, f(1.0f)));
  Value* fe = b.CreateSIToFP(e, f32);
  Value* z = b.CreateFMul(r, r);
  Value* p = f(7.0376836292e-2f);
  for (float c : {-1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f, 1.4249322787e-1f,
                  -1.6668057665e-1f, 2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f})
    p = b.CreateFAdd(b.CreateFMul(p, r), f(c));
  Value* y = b.CreateFMul(b.CreateFMul(p, r), z);
  y = b.CreateFAdd(y, b.CreateFMul(fe, f(-2.12194440e-4f)));
  y = b.CreateFSub(y, b.CreateFMul(z, f(0.5f)));
  Value* res = b.CreateFAdd(b.CreateFAdd(r, y), b.CreateFMul(fe, f(0.693359375f)));
  // Special values: +0 or -0 -> -inf, x < 0 or NaN -> NaN, +inf -> +inf.
  llvm::Constant* inf = llvm::ConstantFP::getInfinity(f32);
  res = b.CreateSelect(b.CreateFCmpOEQ(x, inf), inf, res);
  res = b.CreateSelect(b.CreateFCmpOEQ(x, f(0.0f)), llvm::ConstantFP::getInfinity(f32, true), res);
  res = b.CreateSelect(b.CreateFCmpULT(x, f(0.0f)), llvm::ConstantFP::getNaN(f32), res);
  return res;
}

} // namespace pejit::jit
