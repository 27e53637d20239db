// IR emitters that every lowering in jit/ shares (declared in elementwise_codegen.h): the loop
// metadata that keeps an explicit-vector loop as written, e^x as src/kernels/fast_math.h's
// fast_exp, operation for operation (on AVX-512 its final scaling by 2^n is one vscalefps, with
// the same bits), so that JIT and reference kernels agree to a few ulps, and the elementwise
// chain's ops (the CPU lowering and the GPU's, jit/ptx_codegen.cpp).
#include "jit/elementwise_codegen.h"

#include <llvm/ADT/STLExtras.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Metadata.h>
#include <llvm/Support/MathExtras.h>

#include <cstdint>
#include <vector>

namespace pejit::jit {

using llvm::Value;

void keep_loop_as_written(llvm::BranchInst* latch) {
  llvm::LLVMContext& ctx = latch->getContext();
  auto hint = [&](const char* name, int32_t value) {
    return llvm::MDNode::get(
        ctx, {llvm::MDString::get(ctx, name), llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(
                                                  llvm::Type::getInt32Ty(ctx), value))});
  };
  llvm::TempMDNode self = llvm::MDNode::getTemporary(ctx, {});
  llvm::Metadata* ops[] = {
      self.get(), llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.disable")}),
      hint("llvm.loop.vectorize.width", 1), hint("llvm.loop.interleave.count", 1)};
  llvm::MDNode* id = llvm::MDNode::getDistinct(ctx, ops);
  id->replaceOperandWith(0, id);
  latch->setMetadata(llvm::LLVMContext::MD_loop, id);
}

namespace {

// Whether the function being emitted targets x86 with AVX-512F (and AVX-512VL), from its
// "target-features" attribute: "+avx512f" as a whole entry ("+avx512fp16" is another one).
bool has_feature(llvm::IRBuilder<>& b, llvm::StringRef feature) {
  llvm::BasicBlock* bb = b.GetInsertBlock();
  if (bb == nullptr || bb->getParent() == nullptr)
    return false;
  llvm::StringRef all = bb->getParent()->getFnAttribute("target-features").getValueAsString();
  llvm::SmallVector<llvm::StringRef, 64> parts;
  all.split(parts, ',');
  return llvm::is_contained(parts, feature);
}

// y * 2^fn for an integral fn in [-150, 128] and y in [0.5, 2): AVX-512's vscalefps, one
// instruction where fast_exp multiplies by 2^(n/2) and 2^(n - n/2) (two shifts, three integer
// ops and two products). The same bits: y * 2^(n/2) is exact (a normal times a power of two
// that keeps it normal), so both forms round the exact y * 2^n once, with the same mode
// (overflow to +inf, gradual underflow). Null where the target has no such instruction for
// this type (then the caller multiplies).
Value* scalef(llvm::IRBuilder<>& b, Value* y, Value* fn) {
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(y->getType());
  if (vt == nullptr || !vt->getElementType()->isFloatTy() || !has_feature(b, "+avx512f"))
    return nullptr;
  const unsigned n = vt->getNumElements();
  if ((n == 8 || n == 4) && has_feature(b, "+avx512vl"))
    return b.CreateIntrinsic(
        n == 8 ? llvm::Intrinsic::x86_avx512_mask_scalef_ps_256
               : llvm::Intrinsic::x86_avx512_mask_scalef_ps_128,
        {},
        {y, fn, llvm::Constant::getNullValue(vt), b.getInt8(static_cast<uint8_t>((1u << n) - 1))});
  if (n % 16 != 0 || !llvm::isPowerOf2_32(n))
    return nullptr;
  // Wider vectors (the elementwise chains' two registers) in pieces of 16 lanes.
  auto* v16 = llvm::FixedVectorType::get(vt->getElementType(), 16);
  std::vector<Value*> pieces;
  for (unsigned at = 0; at < n; at += 16) {
    llvm::SmallVector<int, 16> lanes;
    for (unsigned j = 0; j < 16; ++j)
      lanes.push_back(static_cast<int>(at + j));
    Value* ys = n == 16 ? y : b.CreateShuffleVector(y, lanes);
    Value* fs = n == 16 ? fn : b.CreateShuffleVector(fn, lanes);
    pieces.push_back(b.CreateIntrinsic(llvm::Intrinsic::x86_avx512_mask_scalef_ps_512, {},
                                       {ys, fs, llvm::Constant::getNullValue(v16),
                                        b.getInt16(0xffff), b.getInt32(4)})); // 4: MXCSR's mode
  }
  // Joined pairwise back into one vector of n lanes.
  while (pieces.size() > 1) {
    std::vector<Value*> joined;
    for (size_t i = 0; i < pieces.size(); i += 2) {
      const unsigned w = llvm::cast<llvm::FixedVectorType>(pieces[i]->getType())->getNumElements();
      llvm::SmallVector<int, 64> lanes;
      for (unsigned j = 0; j < 2 * w; ++j)
        lanes.push_back(static_cast<int>(j));
      joined.push_back(b.CreateShuffleVector(pieces[i], pieces[i + 1], lanes));
    }
    pieces = std::move(joined);
  }
  return pieces[0];
}

} // namespace

llvm::Value* emit_fast_exp(llvm::IRBuilder<>& b, llvm::Value* x) {
  llvm::Type* ft = x->getType();
  llvm::Type* it = b.getInt32Ty();
  if (auto* vt = llvm::dyn_cast<llvm::VectorType>(ft))
    it = llvm::VectorType::get(it, vt->getElementCount());
  auto f = [&](float v) { return llvm::ConstantFP::get(ft, v); };
  auto i = [&](int32_t v) { return llvm::ConstantInt::get(it, static_cast<uint64_t>(v)); };
  x = b.CreateSelect(b.CreateFCmpOLT(x, f(-104.0f)), f(-104.0f), x);
  x = b.CreateSelect(b.CreateFCmpOGT(x, f(89.0f)), f(89.0f), x);
  const float shifter = 12582912.0f;
  Value* t = b.CreateFAdd(b.CreateFMul(x, f(1.44269504088896341f)), f(shifter));
  Value* fn = b.CreateFSub(t, f(shifter));
  Value* r = b.CreateFSub(x, b.CreateFMul(fn, f(0.693359375f)));
  r = b.CreateFSub(r, b.CreateFMul(fn, f(-2.12194440e-4f)));
  Value* p = f(1.9875691500e-4f);
  for (float c :
       {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    p = b.CreateFAdd(b.CreateFMul(p, r), f(c));
  Value* y = b.CreateFAdd(b.CreateFAdd(b.CreateFMul(p, b.CreateFMul(r, r)), r), f(1.0f));
  if (Value* e = scalef(b, y, fn))
    return e;
  Value* n = b.CreateSub(b.CreateBitCast(t, it), i(0x4B400000)); // bits(shifter)
  Value* n1 = b.CreateAShr(n, 1);
  Value* n2 = b.CreateSub(n, n1);
  auto scale = [&](Value* k) {
    return b.CreateBitCast(b.CreateShl(b.CreateAdd(k, i(127)), 23), ft);
  };
  return b.CreateFMul(b.CreateFMul(y, scale(n1)), scale(n2));
}

namespace {

// fast_tanh of src/kernels/fast_math.h.
Value* emit_fast_tanh(llvm::IRBuilder<>& b, Value* x) {
  llvm::Type* ft = x->getType();
  auto f = [&](float v) { return llvm::ConstantFP::get(ft, v); };
  Value* neg = b.CreateFCmpOLT(x, f(0.0f));
  Value* ax = b.CreateSelect(neg, b.CreateFNeg(x), x);
  Value* z = b.CreateFMul(x, x);
  Value* p = f(-5.70498872745e-3f);
  p = b.CreateFAdd(b.CreateFMul(p, z), f(2.06390887954e-2f));
  p = b.CreateFSub(b.CreateFMul(p, z), f(5.37397155531e-2f));
  p = b.CreateFAdd(b.CreateFMul(p, z), f(1.33314422036e-1f));
  p = b.CreateFSub(b.CreateFMul(p, z), f(3.33332819422e-1f));
  Value* small = b.CreateFAdd(b.CreateFMul(b.CreateFMul(p, z), x), x);
  Value* e = emit_fast_exp(b, b.CreateFMul(f(2.0f), ax));
  Value* big = b.CreateFSub(f(1.0f), b.CreateFDiv(f(2.0f), b.CreateFAdd(e, f(1.0f))));
  big = b.CreateSelect(neg, b.CreateFNeg(big), big);
  return b.CreateSelect(b.CreateFCmpOLT(ax, f(0.625f)), small, big);
}

} // namespace

llvm::Value* emit_elementwise_op(llvm::IRBuilder<>& b, ElementwiseOp op, llvm::Value* x,
                                 llvm::Value* y) {
  auto f = [&](float v) { return llvm::ConstantFP::get(x->getType(), v); };
  switch (op) {
  case ElementwiseOp::Add:
    return b.CreateFAdd(x, y);
  case ElementwiseOp::Sub:
    return b.CreateFSub(x, y);
  case ElementwiseOp::Mul:
    return b.CreateFMul(x, y);
  case ElementwiseOp::Div:
    return b.CreateFDiv(x, y);
  case ElementwiseOp::Neg:
    return b.CreateFNeg(x);
  case ElementwiseOp::Exp:
    return emit_fast_exp(b, x);
  case ElementwiseOp::Tanh:
    return emit_fast_tanh(b, x);
  case ElementwiseOp::Sigmoid:
    return b.CreateFDiv(f(1), b.CreateFAdd(f(1), emit_fast_exp(b, b.CreateFNeg(x))));
  case ElementwiseOp::Relu:
    return b.CreateSelect(b.CreateFCmpOGT(x, f(0)), x, f(0));
  case ElementwiseOp::SigmoidBwd: // gy * y * (1 - y)
    return b.CreateFMul(b.CreateFMul(y, x), b.CreateFSub(f(1), x));
  case ElementwiseOp::TanhBwd: // gy * (1 - y*y)
    return b.CreateFMul(y, b.CreateFSub(f(1), b.CreateFMul(x, x)));
  case ElementwiseOp::ReluBwd: // x > 0 ? gy : 0, as kernels::relu_backward
    return b.CreateSelect(b.CreateFCmpOGT(x, f(0)), y, f(0));
  }
  return nullptr;
}

} // namespace pejit::jit
