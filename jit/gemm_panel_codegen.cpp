// Lowering of a GemmSpec with a packed B (kernel family 2): the GEMM core that panel kernels
// run per row panel, C[rows, n] (+)= A[rows, k] · B with B a weight packed once per plan run.
//
// Design note. This is src/kernels/gemm.cpp's register-blocked AVX-512 design (namespace
// avx512) generated for the spec's static n and k, so that the plan's GEMMs run on generated
// code at the speed of the best kernels measured here (bench/RESULTS.md):
// - B comes packed (GemmSpec::packed_b): column panels of 32 columns whose rows are contiguous,
//   so a block's loads of B are two cache lines per k, streamed by the prefetcher.
// - For each column panel, for each chunk of at most kChunk values of k (equal-sized chunks),
//   for each block of rows, a block keeps its rows x (32 / lanes) vectors of C in registers
//   over the chunk: per k it loads one packed row of B (prefetched kPrefetch rows ahead) and
//   broadcasts one element of A per row.
// - Blocks of rows: mr (12 with AVX-512), then of 4, then at most one of 2 and one of 1. The
//   avx512 kernels split rows into near-equal blocks instead (13 = 7 + 6); that needs a body
//   per height 1..12, and compile time grows with the sum of the bodies' heights (measured:
//   ~65 ms for the 12-row body alone, ~400 ms with all twelve, for x·W at n 750, k 300).
// - The first chunk starts from zero (or from C with `accumulate`), the others from C, and
//   each element is summed over k in order with fma: the same bits as the avx512 kernels, and
//   for any row count or blocking (tests/jit/gemm_panel_test.cpp compares them bit for bit).
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

constexpr int64_t kChunk = 320;   // most values of k per pass over a B panel (40 KB of it)
constexpr int64_t kPrefetch = 16; // rows of B fetched ahead

class PackedGemmLowering {
public:
  PackedGemmLowering(const GemmSpec& spec, int lanes, llvm::Module& m)
      : s_(spec.resolved(lanes)), lanes_(lanes), m_(m), b_(m.getContext()), f32_(b_.getFloatTy()),
        i64_(b_.getInt64Ty()), vec_(llvm::FixedVectorType::get(f32_, lanes)) {}

  llvm::Function* emit(const std::string& fn_name, const CodegenTarget& target,
                       llvm::GlobalValue::LinkageTypes linkage) {
    auto* ptr = b_.getPtrTy();
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, i64_}, false);
    fn_ = llvm::Function::Create(fty, linkage, fn_name, m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    fn_->addFnAttr("target-cpu", target.cpu);
    fn_->addFnAttr("target-features", target.features);
    std::string bits = std::to_string(32 * lanes_);
    fn_->addFnAttr("min-legal-vector-width", bits);
    fn_->addFnAttr("prefer-vector-width", bits);
    for (unsigned i = 0; i < 3; ++i) {
      fn_->addParamAttr(i, llvm::Attribute::NoAlias);
      fn_->addParamAttr(i, llvm::Attribute::NoCapture);
      if (i < 2)
        fn_->addParamAttr(i, llvm::Attribute::ReadOnly);
    }
    a_ = fn_->getArg(0);
    bm_ = fn_->getArg(1);
    c_ = fn_->getArg(2);
    Value* rows = fn_->getArg(3);
    a_->setName("a");
    bm_->setName("b");
    c_->setName("c");
    rows->setName("rows");
    b_.SetInsertPoint(llvm::BasicBlock::Create(m_.getContext(), "entry", fn_));
    for (int i = 0; i < s_.mr * s_.nr; ++i)
      acc_.push_back(b_.CreateAlloca(vec_, nullptr, "acc"));
    // Row blocks: ceil(rows / mr), none for rows <= 0.
    Value* positive = b_.CreateICmpSGT(rows, b_.getInt64(0));
    Value* m = b_.CreateSelect(positive, rows, b_.getInt64(0), "m");
    // Rows: blocks of mr, then of q (the largest power of two <= mr / 2) and at most one
    // each of the powers of two below q (12 rows: 12, 4, 2, 1): four bodies to compile, not
    // twelve (compile time grows with the sum of their heights).
    q_ = 1;
    while (2 * q_ <= s_.mr / 2)
      q_ *= 2;
    full_ = b_.CreateUDiv(m, b_.getInt64(s_.mr), "full");
    Value* left = b_.CreateSub(m, mul(full_, s_.mr), "left", true, true);
    nq_ = b_.CreateUDiv(left, b_.getInt64(q_), "nq");
    rest_ = b_.CreateSub(left, mul(nq_, q_), "rest", true, true);
    const int64_t full = s_.n / GemmSpec::kPackedCols;
    emit_counted_loop(b_, fn_, b_.getInt64(full), "panel",
                      [&](Value* p) { emit_panel(p, s_.nr, lanes_); });
    if (int64_t rest = s_.n - full * GemmSpec::kPackedCols) {
      int vecs = static_cast<int>((rest + lanes_ - 1) / lanes_);
      emit_panel(b_.getInt64(full), vecs, static_cast<int>(rest - int64_t{vecs - 1} * lanes_));
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
  // The first `valid` lanes on (valid in 1..lanes).
  Value* lane_mask(int valid) {
    std::vector<llvm::Constant*> bits;
    for (int l = 0; l < lanes_; ++l)
      bits.push_back(b_.getInt1(l < valid));
    return llvm::ConstantVector::get(bits);
  }
  void prefetch(Value* p, bool write) {
    b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {b_.getPtrTy()},
                       {p, b_.getInt32(write ? 1 : 0), b_.getInt32(3), b_.getInt32(1)});
  }

  // Column panel `p` (vecs vectors, the last with `last` valid lanes): every chunk of k, and
  // in it every block of rows.
  void emit_panel(Value* p, int vecs, int last) {
    const int64_t cols = GemmSpec::kPackedCols;
    Value* bpanel = gep(bm_, mul(p, cols * s_.k));
    Value* cpanel = gep(c_, mul(p, cols));
    const int64_t chunks = (s_.k + kChunk - 1) / kChunk;
    emit_counted_loop(b_, fn_, b_.getInt64(chunks), "chunk", [&](Value* q) {
      Value* p0 = b_.CreateUDiv(mul(q, s_.k), b_.getInt64(chunks), "p0");
      Value* p1 = b_.CreateUDiv(mul(add(q, 1), s_.k), b_.getInt64(chunks), "p1");
      Value* kq = b_.CreateSub(p1, p0, "kq", true, true);
      Value* first = b_.CreateICmpEQ(q, b_.getInt64(0), "first");
      Value* bchunk = gep(bpanel, mul(p0, cols));
      auto block_at = [&](Value* i0, int rows) {
        emit_block(rows, vecs, last, gep(a_, b_.CreateAdd(mul(i0, s_.lda), p0)), bchunk,
                   gep(cpanel, mul(i0, s_.ldc)), kq, first);
      };
      emit_counted_loop(b_, fn_, full_, "rb", [&](Value* bi) { block_at(mul(bi, s_.mr), s_.mr); });
      Value* base = mul(full_, s_.mr);
      if (q_ < s_.mr)
        emit_counted_loop(b_, fn_, nq_, "rq", [&](Value* bi) {
          block_at(b_.CreateAdd(base, mul(bi, q_)), static_cast<int>(q_));
        });
      base = b_.CreateAdd(base, mul(nq_, q_));
      for (int64_t h = q_ / 2; h >= 1; h /= 2) { // the bits of rest, high to low
        auto* run = llvm::BasicBlock::Create(m_.getContext(), "rp", fn_);
        auto* next = llvm::BasicBlock::Create(m_.getContext(), "rp.next", fn_);
        Value* bit = b_.CreateAnd(rest_, b_.getInt64(h));
        b_.CreateCondBr(b_.CreateIsNotNull(bit), run, next);
        b_.SetInsertPoint(run);
        block_at(b_.CreateAdd(base, b_.CreateAnd(rest_, b_.getInt64(~(2 * h - 1)))),
                 static_cast<int>(h));
        b_.CreateBr(next);
        b_.SetInsertPoint(next);
      }
    });
  }

  // C[rows, vecs vectors] (+)= A[rows, kq] · B[kq, vecs vectors]; A at `a` (lda apart), B's
  // packed rows at `b` (kPackedCols apart), C at `c` (ldc apart). `first`: the chunk that
  // starts from zero (unless the spec accumulates).
  void emit_block(int rows, int vecs, int last, Value* a, Value* b, Value* c, Value* kq,
                  Value* first) {
    const int64_t cols = GemmSpec::kPackedCols;
    auto valid = [&](int v) { return v == vecs - 1 ? last : lanes_; };
    auto cptr = [&](int r, int v) { return gep(c, b_.getInt64(r * s_.ldc + int64_t{v} * lanes_)); };
    auto slot = [&](int r, int v) { return acc_[static_cast<size_t>(r * s_.nr + v)]; };
    Value* zero = llvm::Constant::getNullValue(vec_);
    for (int r = 0; r < rows; ++r) {
      if (!s_.accumulate) { // C's lines are written at the end: ask for them now (cold in a plan)
        for (int v = 0; v < vecs; ++v)
          prefetch(cptr(r, v), true);
        prefetch(gep(c, b_.getInt64(r * s_.ldc + int64_t{vecs} * lanes_ - 1)), true);
      }
      for (int v = 0; v < vecs; ++v) {
        Value* old =
            b_.CreateMaskedLoad(vec_, cptr(r, v), llvm::Align(4), lane_mask(valid(v)), zero);
        b_.CreateStore(s_.accumulate ? old : b_.CreateSelect(first, zero, old), slot(r, v));
      }
    }
    emit_counted_loop(b_, fn_, kq, "k", [&](Value* k) {
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
      for (int v = 0; v < vecs; ++v) {
        Value* acc = b_.CreateLoad(vec_, slot(r, v));
        if (valid(v) == lanes_)
          b_.CreateAlignedStore(acc, cptr(r, v), llvm::Align(4));
        else
          b_.CreateMaskedStore(acc, cptr(r, v), llvm::Align(4), lane_mask(valid(v)));
      }
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
  int64_t q_ = 1;         // the height of the blocks after the full ones
  Value* full_ = nullptr; // blocks of mr rows
  Value* nq_ = nullptr;   // then blocks of q_ rows
  Value* rest_ = nullptr; // then rows < q_, one block per bit
  std::vector<llvm::AllocaInst*> acc_;
};

} // namespace

llvm::Function* emit_packed_gemm(const GemmSpec& spec, llvm::Module& m, const std::string& fn_name,
                                 const CodegenTarget& target,
                                 llvm::GlobalValue::LinkageTypes linkage) {
  return PackedGemmLowering(spec, gemm_lanes(target), m).emit(fn_name, target, linkage);
}

} // namespace pejit::jit
