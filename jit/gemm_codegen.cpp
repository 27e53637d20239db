// Lowering of GemmSpec (kernel family 2) to a register-blocked SGEMM with IRBuilder.
//
// Design note. The code is written with explicit vectors of the host's width (`lanes` floats:
// 16 with AVX-512) and llvm.fma, so its speed does not depend on the vectorizer; O3 only
// unrolls, hoists and schedules it. No operand is packed: the plan's row panels are
// contiguous and B is a weight matrix that fits in L2, so a block streams B's rows from L2
// while its A rows stay in L1.
// - NN: a block is `mr` rows x `nr` vectors of C held in registers. Per k it loads `nr`
//   vectors of B's row k and broadcasts one element of A per row (A(i,k) is A[i*lda+k]),
//   then mr*nr fmas. Rows run in blocks of `mr`
//   (outer loop, so the A rows are reused across the columns) and columns in blocks of `nr`
//   vectors; the last column block has the leftover vectors, its last one masked (n % lanes).
//   Leftover rows (M % mr) run the same code with fewer rows, chosen by a switch on the count.
// - NT (C = A·B^T, B stored [N,K]): both operands are read along k, so a block is `mr` rows x
//   `nr` columns of C, each accumulated as a vector of partial sums over k and reduced at the
//   end; the k tail (k % lanes) is a masked load of both operands (zeros, never garbage).
// - TN (weight gradients dW = X^T·dY, K = all rows of a step, often in several stretches): the
//   design of kernels::sgemm_tn_stretches, whose bits it reproduces. Columns outer, in panels
//   of `nr` vectors (a panel of B, K rows x nr vectors, stays in L1 across the row blocks);
//   rows inner, in blocks of near-equal size (at most `mr`: 13 rows run as 7 + 6), fixed at
//   compile time since m is static. A block's C is loaded into registers (or zeroed), then
//   every stretch's rows are summed into it in order, one fma per (row, vector, k), with A's
//   and B's rows 16 ahead prefetched; so each element of C is one chain of fmas over k in
//   order, whatever the blocking or the stretch split. A narrow C (n <= lanes/2, m >= lanes:
//   the classifier's dW [150, 5]) runs as C^T = B^T·A instead: vectors along m, a broadcast
//   of B(k, j) per column, C gathered and scattered once per block; fma(B, A, acc) is the
//   same exact product, so the same bits.
// - NN with n <= lanes/2 (the classifier's n = 5) would waste most of each vector: B^T
//   (n*k <= kMaxPackedB floats) is copied to the stack once per call and the NT code runs.
// - Sums over k run in a fixed order for a given spec and target, so results are bitwise
//   reproducible. They differ from other GEMMs by rounding only (fma, a different k order).
// Not handled: run-time strides (a plan gathers rows into contiguous panels); TN with a
// run-time M (the weight gradient's M is the weight's row count, static); stretches with
// different strides.
#include "jit/gemm_codegen.h"

#include "jit/elementwise_codegen.h" // CodegenTarget
#include "jit/gemm_lowering.h"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace pejit::jit {

llvm::Function* create_gemm_function(llvm::Module& m, const std::string& name,
                                     llvm::GlobalValue::LinkageTypes linkage,
                                     const CodegenTarget& target, int lanes) {
  llvm::LLVMContext& ctx = m.getContext();
  auto* ptr = llvm::PointerType::getUnqual(ctx);
  auto* fty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx),
                                      {ptr, ptr, ptr, llvm::Type::getInt64Ty(ctx)}, false);
  llvm::Function* fn = llvm::Function::Create(fty, linkage, name, m);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  fn->addFnAttr("target-cpu", target.cpu);
  fn->addFnAttr("target-features", target.features);
  // Without these, X86 splits 512-bit vectors on CPUs tuned to prefer 256 bits.
  std::string bits = std::to_string(32 * lanes);
  fn->addFnAttr("min-legal-vector-width", bits);
  fn->addFnAttr("prefer-vector-width", bits);
  for (unsigned i = 0; i < 3; ++i) {
    fn->addParamAttr(i, llvm::Attribute::NoAlias);
    fn->addParamAttr(i, llvm::Attribute::NoCapture);
    if (i < 2)
      fn->addParamAttr(i, llvm::Attribute::ReadOnly);
  }
  const char* names[] = {"a", "b", "c", "rows"};
  for (unsigned i = 0; i < 4; ++i)
    fn->getArg(i)->setName(names[i]);
  return fn;
}

llvm::Constant* first_lanes(llvm::LLVMContext& ctx, int lanes, int valid) {
  std::vector<llvm::Constant*> bits;
  for (int l = 0; l < lanes; ++l)
    bits.push_back(llvm::ConstantInt::getBool(ctx, l < valid));
  return llvm::ConstantVector::get(bits);
}

using llvm::Value;

void GemmLowering::emit(const std::string& fn_name, const CodegenTarget& target,
                        llvm::GlobalValue::LinkageTypes linkage) {
  if (s_.layout == GemmLayout::TN) {
    emit_tn(fn_name, target);
    return;
  }
  fn_ = create_gemm_function(m_, fn_name, linkage, target, lanes_);
  a_ = fn_->getArg(0);
  bm_ = fn_->getArg(1);
  c_ = fn_->getArg(2);
  Value* rows = fn_->getArg(3);
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));

  bool tn = s_.layout == GemmLayout::TN;
  Value* m = tn ? b_.getInt64(s_.m) : rows;
  ldb_ = s_.ldb;
  dot_ = s_.layout == GemmLayout::NT;
  if (s_.packs_b_transposed(lanes_)) {
    pack_b_transposed();
    dot_ = true;
  }
  k_ = tn ? rows : b_.getInt64(s_.k);
  k_positive_ = !tn;
  // Rows: full blocks of mr, then one switch case per leftover count.
  Value* blocks = b_.CreateUDiv(m, b_.getInt64(s_.mr), "row.blocks");
  emit_loop(blocks, "rb", {}, false, [&](Value* ib, const std::vector<Value*>&) {
    emit_row_block(b_.CreateMul(ib, b_.getInt64(s_.mr), "i0", true, true), s_.mr);
    return std::vector<Value*>{};
  });
  Value* done = b_.CreateMul(blocks, b_.getInt64(s_.mr), "rows.done", true, true);
  Value* left = b_.CreateSub(m, done, "rows.left", true, true);
  auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
  llvm::SwitchInst* sw = b_.CreateSwitch(left, exit, s_.mr - 1);
  for (int r = 1; r < s_.mr; ++r) {
    auto* bb = llvm::BasicBlock::Create(ctx_, fmt::format("rows{}", r), fn_);
    sw->addCase(b_.getInt64(r), bb);
    b_.SetInsertPoint(bb);
    emit_row_block(done, r);
    b_.CreateBr(exit);
  }
  b_.SetInsertPoint(exit);
  b_.CreateRetVoid();
}

void GemmLowering::pack_b_transposed() {
  llvm::AllocaInst* buf = b_.CreateAlloca(f32_, b_.getInt64(s_.n * s_.k), "bt");
  buf->setAlignment(llvm::Align(64));
  std::vector<llvm::Constant*> lane;
  for (int l = 0; l < lanes_; ++l)
    lane.push_back(b_.getInt64(int64_t{l} * s_.ldb));
  Value* strides = llvm::ConstantVector::get(lane);
  auto step = [&](Value* k0, int valid) {
    Value* rows = gep(bm_, b_.CreateMul(k0, b_.getInt64(s_.ldb), "", true, true));
    Value* mask = lane_mask(valid);
    for (int64_t j = 0; j < s_.n; ++j) {
      Value* at = b_.CreateGEP(f32_, gep(rows, b_.getInt64(j)), strides);
      Value* x =
          b_.CreateMaskedGather(vec_, at, llvm::Align(4), mask, llvm::Constant::getNullValue(vec_));
      store_vec(x, gep(buf, add(k0, j * s_.k)), valid);
    }
  };
  const int64_t whole = s_.k / lanes_;
  emit_loop(b_.getInt64(whole), "pack.k", {}, true, [&](Value* kb, const Carried&) {
    step(b_.CreateMul(kb, b_.getInt64(lanes_), "k0", true, true), lanes_);
    return Carried{};
  });
  if (s_.k % lanes_ != 0)
    step(b_.getInt64(whole * lanes_), static_cast<int>(s_.k % lanes_));
  bm_ = buf;
  ldb_ = s_.k;
}

GemmLowering::Carried
GemmLowering::emit_loop(Value* n, const std::string& name, const Carried& init, bool positive,
                        const std::function<Carried(Value*, const Carried&)>& body) {
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(n)) {
    if (c->isZero())
      return init;
    positive = true;
  }
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* loop = llvm::BasicBlock::Create(ctx_, name, fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, name + ".exit", fn_);
  if (positive)
    b_.CreateBr(loop);
  else
    b_.CreateCondBr(b_.CreateICmpSGT(n, b_.getInt64(0)), loop, exit);
  b_.SetInsertPoint(loop);
  llvm::PHINode* i = b_.CreatePHI(i64_, 2, name + ".i");
  i->addIncoming(b_.getInt64(0), pre);
  Carried phis;
  for (Value* v : init) {
    llvm::PHINode* p = b_.CreatePHI(v->getType(), 2);
    p->addIncoming(v, pre);
    phis.push_back(p);
  }
  Carried next = body(i, phis);
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  Value* inext = b_.CreateAdd(i, b_.getInt64(1), "", true, true);
  i->addIncoming(inext, latch);
  for (size_t j = 0; j < phis.size(); ++j)
    llvm::cast<llvm::PHINode>(phis[j])->addIncoming(next[j], latch);
  llvm::BranchInst* br = b_.CreateCondBr(b_.CreateICmpEQ(inext, n), exit, loop);
  keep_loop_as_written(br); // explicit vectors: not to be unrolled, vectorized or interleaved

  b_.SetInsertPoint(exit);
  if (positive)
    return next;
  Carried out;
  for (size_t j = 0; j < next.size(); ++j) {
    llvm::PHINode* p = b_.CreatePHI(next[j]->getType(), 2);
    p->addIncoming(init[j], pre);
    p->addIncoming(next[j], latch);
    out.push_back(p);
  }
  return out;
}

void GemmLowering::emit_row_block_nn(Value* i0, int rows) {
  // Leftover rows take wider blocks (as many accumulators as a full block), so that a
  // few rows still issue enough independent fmas per load of A.
  int64_t vecs = (s_.n + lanes_ - 1) / lanes_;
  int64_t nr = std::min<int64_t>(vecs, std::max(s_.nr, s_.mr * s_.nr / rows));
  int64_t width = nr * lanes_;
  int64_t full = s_.n / width;
  emit_loop(b_.getInt64(full), "cb", {}, true, [&](Value* jb, const Carried&) {
    Value* j0 = b_.CreateMul(jb, b_.getInt64(width), "j0", true, true);
    emit_tile_nn(i0, j0, rows, static_cast<int>(nr), lanes_);
    return Carried{};
  });
  int64_t rest = s_.n - full * width;
  if (rest > 0) {
    int vecs = static_cast<int>((rest + lanes_ - 1) / lanes_);
    int last = static_cast<int>(rest - int64_t{vecs - 1} * lanes_);
    emit_tile_nn(i0, b_.getInt64(full * width), rows, vecs, last);
  }
}

void GemmLowering::emit_tile_nn(Value* i0, Value* j0, int rows, int vecs, int last) {
  auto valid = [&](int v) { return v == vecs - 1 ? last : lanes_; };
  Carried init;
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < vecs; ++v)
      init.push_back(s_.accumulate ? load_vec(c_ptr(i0, r, j0, v), valid(v))
                                   : llvm::Constant::getNullValue(vec_));
  bool tn = s_.layout == GemmLayout::TN;
  Carried acc = emit_loop(k_, "k", init, k_positive_, [&](Value* k, const Carried& in) {
    Value* brow = idx(k, s_.ldb, j0);
    std::vector<Value*> bv;
    for (int v = 0; v < vecs; ++v)
      bv.push_back(load_vec(gep(bm_, add(brow, int64_t{v} * lanes_)), valid(v)));
    Carried out(in.size());
    for (int r = 0; r < rows; ++r) {
      Value* i = add(i0, r);
      Value* ai = tn ? idx(k, s_.lda, i) : idx(i, s_.lda, k);
      Value* a =
          b_.CreateVectorSplat(lanes_, b_.CreateAlignedLoad(f32_, gep(a_, ai), llvm::Align(4)));
      for (int v = 0; v < vecs; ++v)
        out[r * vecs + v] = fma(a, bv[v], in[r * vecs + v]);
    }
    return out;
  });
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < vecs; ++v)
      store_vec(acc[r * vecs + v], c_ptr(i0, r, j0, v), valid(v));
}

void GemmLowering::emit_row_block_nt(Value* i0, int rows) {
  int64_t full = s_.n / s_.nr;
  emit_loop(b_.getInt64(full), "cb", {}, true, [&](Value* jb, const Carried&) {
    emit_tile_nt(i0, b_.CreateMul(jb, b_.getInt64(s_.nr), "j0", true, true), rows, s_.nr);
    return Carried{};
  });
  int rest = static_cast<int>(s_.n - full * s_.nr);
  if (rest > 0)
    emit_tile_nt(i0, b_.getInt64(full * s_.nr), rows, rest);
}

std::vector<Value*> GemmLowering::lane_sums(const std::vector<Value*>& vs) {
  std::vector<Value*> sums;
  Value* zero = llvm::Constant::getNullValue(vec_);
  for (size_t g = 0; g < vs.size(); g += static_cast<size_t>(lanes_)) {
    std::vector<Value*> level(vs.begin() + static_cast<std::ptrdiff_t>(g),
                              vs.begin() + static_cast<std::ptrdiff_t>(std::min(
                                               vs.size(), g + static_cast<size_t>(lanes_))));
    const size_t count = level.size();
    level.resize(static_cast<size_t>(lanes_), zero); // padding sums, never read
    // Before a level each vector holds lanes/width sources of `width` lanes each.
    for (int width = lanes_; width > 1; width /= 2) {
      std::vector<int> lo, hi;
      for (int src = 0; src < 2 * lanes_ / width; ++src)
        for (int l = 0; l < width / 2; ++l) {
          lo.push_back(src * width + l);
          hi.push_back(src * width + width / 2 + l);
        }
      std::vector<Value*> next;
      for (size_t i = 0; i + 1 < level.size(); i += 2)
        next.push_back(b_.CreateFAdd(b_.CreateShuffleVector(level[i], level[i + 1], lo),
                                     b_.CreateShuffleVector(level[i], level[i + 1], hi)));
      level = std::move(next);
    }
    for (size_t i = 0; i < count; ++i)
      sums.push_back(b_.CreateExtractElement(level[0], uint64_t{i}));
  }
  return sums;
}

void GemmLowering::emit_tile_nt(Value* i0, Value* j0, int rows, int cols) {
  auto step = [&](Value* kk, int valid, const Carried& in) {
    std::vector<Value*> av, bv;
    for (int r = 0; r < rows; ++r)
      av.push_back(load_vec(gep(a_, idx(add(i0, r), s_.lda, kk)), valid));
    for (int c = 0; c < cols; ++c)
      bv.push_back(load_vec(gep(bm_, idx(add(j0, c), ldb_, kk)), valid));
    Carried out(in.size());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        out[r * cols + c] = fma(av[r], bv[c], in[r * cols + c]);
    return out;
  };
  Carried acc(size_t(rows) * cols, llvm::Constant::getNullValue(vec_));
  int64_t kvecs = s_.k / lanes_;
  acc = emit_loop(b_.getInt64(kvecs), "kv", acc, true, [&](Value* kv, const Carried& in) {
    return step(b_.CreateMul(kv, b_.getInt64(lanes_), "k0", true, true), lanes_, in);
  });
  if (int tail = static_cast<int>(s_.k - kvecs * lanes_))
    acc = step(b_.getInt64(kvecs * lanes_), tail, acc);
  std::vector<Value*> sums = lane_sums(acc);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      Value* p = gep(c_, idx(add(i0, r), s_.ldc, add(j0, c)));
      Value* sum = sums[static_cast<size_t>(r * cols + c)];
      if (s_.accumulate)
        sum = b_.CreateFAdd(b_.CreateAlignedLoad(f32_, p, llvm::Align(4)), sum);
      b_.CreateAlignedStore(sum, p, llvm::Align(4));
    }
}

int gemm_lanes(const CodegenTarget& target) {
  const std::string& f = target.features;
  if (f.find("+avx512f") != std::string::npos)
    return 16;
  if (f.find("+avx") != std::string::npos)
    return 8;
  return 4;
}

llvm::Function* emit_nn_gemm(const GemmSpec& spec, llvm::Module& m, const std::string& fn_name,
                             const CodegenTarget& target, llvm::GlobalValue::LinkageTypes linkage) {
  GemmLowering(spec, gemm_lanes(target), m.getContext(), m).emit(fn_name, target, linkage);
  return m.getFunction(fn_name);
}

std::unique_ptr<llvm::Module> lower_gemm(const GemmSpec& spec, llvm::LLVMContext& ctx,
                                         const std::string& fn_name, const CodegenTarget& target) {
  auto m = std::make_unique<llvm::Module>(fn_name, ctx);
  m->setTargetTriple(target.triple);
  m->setDataLayout(target.data_layout);
  if (spec.packed_b)
    emit_packed_gemm(spec, *m, fn_name, target, llvm::Function::ExternalLinkage);
  else
    GemmLowering(spec, gemm_lanes(target), ctx, *m).emit(fn_name, target);
  return m;
}

} // namespace pejit::jit
