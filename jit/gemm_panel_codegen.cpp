// Lowering of a GemmSpec with a packed B (kernel family 2): the GEMM core that panel kernels
// run per row panel, C[rows, n] (+)= A[rows, k] · B with B a weight packed once per plan run.
//
// Design note. This is src/kernels/gemm.cpp's register-blocked AVX-512 design (namespace
// avx512) generated for the spec's static n and k, so that the plan's GEMMs run on generated
// code at the speed of the best kernels measured here (bench/RESULTS.md):
// - B comes packed (GemmSpec::packed_b): column panels of 32 columns whose rows are contiguous,
//   so a block's loads of B are two cache lines per k, streamed by the prefetcher.
// - For each column panel, for each block of rows, a block keeps its rows x (32 / lanes)
//   vectors of C in registers over all of k: per k it loads one packed row of B (prefetched
//   kPrefetch rows ahead) and broadcasts one element of A per row. (The avx512 kernels also
//   cut k into chunks of 320 so that a B chunk stays in L1 across row blocks; a panel kernel's
//   calls have at most 48 rows, and without chunks the dX shapes (k 450, 750) ran as fast or
//   faster and compiled faster.)
// - Blocks of rows of a few heights (emit_row_blocks), one straight-line body each.
// - Every panel runs the whole panel's vectors; the last panel's columns past n are masked on
//   C (B is zero-padded there), so there is one set of bodies, not one more for that panel.
// - C starts from zero (or from C with `accumulate`), and each element is summed over k in
//   order with fma: the same bits as the avx512 kernels, for any row count or blocking
//   (tests/jit/gemm_panel_test.cpp compares them bit for bit).
// - Accumulators live in allocas that SROA turns into registers; O3 only schedules the code.
// Not handled: run-time n or k (the plan's weights have static shapes).
#include "jit/elementwise_codegen.h"
#include "jit/gemm_codegen.h"

#include <llvm/IR/Intrinsics.h>

#include <algorithm>
#include <string>
#include <vector>

namespace pejit::jit {
namespace {

using llvm::Value;

constexpr int64_t kPrefetch = 16; // rows of B fetched ahead

class PackedGemmLowering {
public:
  PackedGemmLowering(const GemmSpec& spec, int lanes, llvm::Module& m)
      : s_(spec.resolved(lanes)), lanes_(lanes), m_(m), b_(m.getContext()), f32_(b_.getFloatTy()),
        i64_(b_.getInt64Ty()), vec_(llvm::FixedVectorType::get(f32_, lanes)) {}

  llvm::Function* emit(const std::string& fn_name, const CodegenTarget& target,
                       llvm::GlobalValue::LinkageTypes linkage) {
    fn_ = create_gemm_function(m_, fn_name, linkage, target, lanes_);
    a_ = fn_->getArg(0);
    bm_ = fn_->getArg(1);
    c_ = fn_->getArg(2);
    Value* rows = fn_->getArg(3);
    b_.SetInsertPoint(llvm::BasicBlock::Create(m_.getContext(), "entry", fn_));
    for (int i = 0; i < s_.mr * s_.nr; ++i)
      acc_.push_back(b_.CreateAlloca(vec_, nullptr, "acc"));
    Value* positive = b_.CreateICmpSGT(rows, b_.getInt64(0));
    m_rows_ = b_.CreateSelect(positive, rows, b_.getInt64(0), "m");
    const int64_t cols = GemmSpec::kPackedCols;
    if (s_.n < cols) { // one panel, its vectors and the last one's mask known here
      int vecs = static_cast<int>((s_.n + lanes_ - 1) / lanes_);
      std::vector<Value*> masks(static_cast<size_t>(vecs), lane_mask(lanes_));
      masks.back() = lane_mask(static_cast<int>(s_.n - int64_t{vecs - 1} * lanes_));
      emit_panel(b_.getInt64(0), masks);
    } else { // every panel with the whole panel's vectors, the last one's columns masked
      loop(b_.getInt64((s_.n + cols - 1) / cols), "panel", [&](Value* p) {
        Value* valid = b_.CreateSub(b_.getInt64(s_.n), mul(p, cols), "valid", true, true);
        std::vector<llvm::Constant*> lane;
        for (int l = 0; l < lanes_; ++l)
          lane.push_back(b_.getInt64(l));
        Value* lanes = llvm::ConstantVector::get(lane);
        std::vector<Value*> masks;
        for (int v = 0; v < s_.nr; ++v)
          masks.push_back(b_.CreateICmpSLT(
              b_.CreateAdd(lanes, b_.CreateVectorSplat(lanes_, b_.getInt64(int64_t{v} * lanes_))),
              b_.CreateVectorSplat(lanes_, valid), "mask"));
        emit_panel(p, masks);
      });
    }
    b_.CreateRetVoid();
    return fn_;
  }

private:
  Value* gep(Value* base, Value* index) { return b_.CreateInBoundsGEP(f32_, base, index); }
  Value* mul(Value* x, int64_t c) { return b_.CreateMul(x, b_.getInt64(c), "", true, true); }
  Value* add(Value* x, int64_t c) {
    return c ? b_.CreateAdd(x, b_.getInt64(c), "", true, true) : x;
  }
  Value* lane_mask(int valid) { return first_lanes(m_.getContext(), lanes_, valid); }
  // A counted loop that O3 must neither unroll nor interleave: its body is already a block of
  // explicit vector fmas (or a sequence of such blocks); unrolling a loop of 2-3 chunks or
  // panels, or interleaving a k loop, only multiplies the code to compile (x1.5-3 the time).
  template <class Body> void loop(Value* n, const char* name, Body body) {
    keep_loop_as_written(emit_counted_loop(b_, fn_, n, name, body));
  }
  void prefetch(Value* p, bool write) {
    b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {b_.getPtrTy()},
                       {p, b_.getInt32(write ? 1 : 0), b_.getInt32(3), b_.getInt32(1)});
  }

  // Column panel `p` (one vector per mask, each storing its mask's lanes of C): every chunk
  // of k, and in it every block of rows.
  void emit_panel(Value* p, const std::vector<Value*>& masks) {
    const int64_t cols = GemmSpec::kPackedCols;
    Value* bpanel = gep(bm_, mul(p, cols * s_.k));
    Value* cpanel = gep(c_, mul(p, cols));
    emit_row_blocks([&](Value* i0, int rows) {
      emit_block(rows, masks, gep(a_, mul(i0, s_.lda)), bpanel, gep(cpanel, mul(i0, s_.ldc)));
    });
  }

  // Blocks of rows over [0, m), each `body(i0, height)`. Heights: mr (12 with AVX-512) and
  // 1..h with h = mr/2 + 1 (7), one body each, chosen per block by what is left (l): mr when
  // l == mr or l >= mr + 4; l itself when l <= h; else min(h, l - 4). So every block has at
  // least 4 rows when m >= 4 (8 independent fma chains: what two fma ports of latency 4
  // need), and 13 rows are 7 + 6, 11 are 7 + 4. The avx512 kernels use a body per height
  // 1..12 instead; compile time grows with the sum of the heights, and twelve bodies cost
  // several times what one does.
  template <class Body> void emit_row_blocks(Body body) {
    const int64_t half = std::max(1, std::min(s_.mr - 1, s_.mr / 2 + 1));
    const int64_t small = std::min<int64_t>(4, half);
    llvm::LLVMContext& ctx = m_.getContext();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(ctx, "rows", fn_);
    auto* latch = llvm::BasicBlock::Create(ctx, "rows.next", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx, "rows.exit", fn_);
    b_.CreateCondBr(b_.CreateICmpSGT(m_rows_, b_.getInt64(0)), loop, exit);
    b_.SetInsertPoint(loop);
    llvm::PHINode* i0 = b_.CreatePHI(i64_, 2, "i0");
    i0->addIncoming(b_.getInt64(0), pre);
    Value* left = b_.CreateSub(m_rows_, i0, "left", true, true);
    Value* whole = b_.CreateOr(b_.CreateICmpEQ(left, b_.getInt64(s_.mr)),
                               b_.CreateICmpSGE(left, b_.getInt64(s_.mr + small)));
    Value* part = b_.CreateSelect(
        b_.CreateICmpSLE(left, b_.getInt64(half)), left,
        b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.getInt64(half), add(left, -small)));
    Value* height = b_.CreateSelect(whole, b_.getInt64(s_.mr), part, "height");
    auto* full = llvm::BasicBlock::Create(ctx, "block.full", fn_);
    llvm::SwitchInst* sw = b_.CreateSwitch(height, full, static_cast<unsigned>(half));
    for (int64_t h = 1; h <= half; ++h) {
      if (h == s_.mr)
        break; // mr <= 1: the full block
      auto* bb = llvm::BasicBlock::Create(ctx, "block", fn_);
      sw->addCase(b_.getInt64(h), bb);
      b_.SetInsertPoint(bb);
      body(i0, static_cast<int>(h));
      b_.CreateBr(latch);
    }
    b_.SetInsertPoint(full);
    body(i0, s_.mr);
    b_.CreateBr(latch);
    b_.SetInsertPoint(latch);
    Value* next = b_.CreateAdd(i0, height, "i0.next", true, true);
    i0->addIncoming(next, latch);
    keep_loop_as_written(b_.CreateCondBr(b_.CreateICmpSLT(next, m_rows_), loop, exit));
    b_.SetInsertPoint(exit);
  }

  // C[rows, vectors] (+)= A[rows, k] · B[k, vectors]; A at `a` (lda apart), B's packed rows at
  // `b` (kPackedCols apart), C at `c` (ldc apart), each vector of C stored under its mask.
  void emit_block(int rows, const std::vector<Value*>& masks, Value* a, Value* b, Value* c) {
    const int64_t cols = GemmSpec::kPackedCols;
    const int vecs = static_cast<int>(masks.size());
    auto cptr = [&](int r, int v) { return gep(c, b_.getInt64(r * s_.ldc + int64_t{v} * lanes_)); };
    auto slot = [&](int r, int v) { return acc_[static_cast<size_t>(r * s_.nr + v)]; };
    Value* zero = llvm::Constant::getNullValue(vec_);
    for (int r = 0; r < rows; ++r) {
      if (!s_.accumulate) { // C's lines are written at the end: ask for them now (cold in a plan)
        for (int v = 0; v < vecs; ++v)
          prefetch(b_.CreateGEP(f32_, c, b_.getInt64(r * s_.ldc + int64_t{v} * lanes_)), true);
        prefetch(b_.CreateGEP(f32_, c, b_.getInt64(r * s_.ldc + int64_t{vecs} * lanes_ - 1)), true);
      }
      for (int v = 0; v < vecs; ++v)
        b_.CreateStore(s_.accumulate
                           ? b_.CreateMaskedLoad(vec_, cptr(r, v), llvm::Align(4), masks[v], zero)
                           : zero,
                       slot(r, v));
    }
    loop(b_.getInt64(s_.k), "k", [&](Value* k) {
      Value* row = mul(k, cols);
      // Past B's end, prefetches are harmless: a plain GEP, not an inbounds one.
      Value* ahead = b_.CreateGEP(f32_, b, add(row, kPrefetch * cols));
      for (int64_t off = 0; off < int64_t{vecs} * lanes_; off += 16)
        prefetch(b_.CreateGEP(f32_, ahead, b_.getInt64(off)), false);
      std::vector<Value*> bv;
      for (int v = 0; v < vecs; ++v) // whole vectors: the last panel is zero-padded
        bv.push_back(
            b_.CreateAlignedLoad(vec_, gep(b, add(row, int64_t{v} * lanes_)), llvm::Align(4)));
      for (int r = 0; r < rows; ++r) {
        Value* x = b_.CreateAlignedLoad(f32_, gep(a, add(k, r * s_.lda)), llvm::Align(4));
        Value* splat = b_.CreateVectorSplat(lanes_, x);
        for (int v = 0; v < vecs; ++v) {
          Value* acc = b_.CreateLoad(vec_, slot(r, v));
          b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec_}, {splat, bv[v], acc}),
                         slot(r, v));
        }
      }
    });
    for (int r = 0; r < rows; ++r)
      for (int v = 0; v < vecs; ++v)
        b_.CreateMaskedStore(b_.CreateLoad(vec_, slot(r, v)), cptr(r, v), llvm::Align(4), masks[v]);
  }

  GemmSpec s_;
  int lanes_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  llvm::Type* f32_;
  llvm::Type* i64_;
  llvm::FixedVectorType* vec_;
  llvm::Function* fn_ = nullptr;
  Value* a_ = nullptr;
  Value* bm_ = nullptr;
  Value* c_ = nullptr;
  Value* m_rows_ = nullptr; // the row count, 0 if negative
  std::vector<llvm::AllocaInst*> acc_;
};

} // namespace

// Defined in gemm_codegen.cpp: a validated NN or NT GemmSpec (no packed B) into `m`.
llvm::Function* emit_nn_gemm(const GemmSpec& spec, llvm::Module& m, const std::string& fn_name,
                             const CodegenTarget& target, llvm::GlobalValue::LinkageTypes linkage);

llvm::Function* emit_packed_gemm(const GemmSpec& spec, llvm::Module& m, const std::string& fn_name,
                                 const CodegenTarget& target,
                                 llvm::GlobalValue::LinkageTypes linkage) {
  const int lanes = gemm_lanes(target);
  if (2 * spec.n <= lanes && spec.n * spec.k <= GemmSpec::kMaxPackedB) {
    // A narrow C (the classifier's 5 columns) would fill a fraction of each vector: the one
    // packed panel is B with kPackedCols floats between rows, which the plain NN lowering
    // runs as dot products along k on B^T copied per call (GemmSpec::packs_b_transposed).
    // Faster than libxsmm there (bench/RESULTS.md); src/kernels/gemm.cpp runs a narrow B as
    // the same dot products, so the reference kernels give the same bits.
    GemmSpec plain{.layout = GemmLayout::NN,
                   .n = spec.n,
                   .k = spec.k,
                   .lda = spec.lda,
                   .ldb = GemmSpec::kPackedCols,
                   .ldc = spec.ldc,
                   .accumulate = spec.accumulate,
                   .mr = spec.mr,
                   .nr = spec.nr};
    return emit_nn_gemm(plain, m, fn_name, target, linkage);
  }
  return PackedGemmLowering(spec, lanes, m).emit(fn_name, target, linkage);
}

} // namespace pejit::jit
