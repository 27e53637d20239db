// The TN layout of GemmLowering (gemm_lowering.h): weight gradients dW = X^T·dY with K, all
// rows of a step, at run time and possibly in several stretches; column panels outer, row
// blocks of near-equal size inner, operand rows prefetched ahead across stretches, and the
// narrow C run as C^T. The design note is at the top of gemm_codegen.cpp.
#include "jit/gemm_lowering.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <algorithm>
#include <vector>

namespace pejit::jit {

using llvm::Value;

void GemmLowering::emit_tn(const std::string& fn_name, const CodegenTarget& target) {
  auto* ptr = b_.getPtrTy();
  const bool st = s_.stretches;
  auto* fty = st ? llvm::FunctionType::get(b_.getVoidTy(), {ptr, i64_, ptr, i64_}, false)
                 : llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, i64_}, false);
  fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, fn_name, m_);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  fn_->addFnAttr("target-cpu", target.cpu);
  fn_->addFnAttr("target-features", target.features);
  std::string bits = std::to_string(32 * lanes_); // 512-bit vectors where the CPU has them
  fn_->addFnAttr("min-legal-vector-width", bits);
  fn_->addFnAttr("prefer-vector-width", bits);
  const unsigned c_arg = 2;
  for (unsigned i : st ? std::vector<unsigned>{0, c_arg} : std::vector<unsigned>{0, 1, c_arg}) {
    fn_->addParamAttr(i, llvm::Attribute::NoCapture);
    if (i != c_arg)
      fn_->addParamAttr(i, llvm::Attribute::ReadOnly);
    else
      fn_->addParamAttr(i, llvm::Attribute::NoAlias);
  }
  c_ = fn_->getArg(c_arg);
  c_->setName("c");
  if (st) {
    st_ = fn_->getArg(0);
    nst_ = fn_->getArg(1);
    acc_arg_ = fn_->getArg(3);
    st_->setName("st");
    nst_->setName("count");
    acc_arg_->setName("accumulate");
  } else {
    a_ = fn_->getArg(0);
    bm_ = fn_->getArg(1);
    k_ = fn_->getArg(3);
    a_->setName("a");
    bm_->setName("b");
    k_->setName("rows");
  }
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
  if (s_.tn_transposed(lanes_)) {
    emit_tn_transposed();
    b_.CreateRetVoid();
    return;
  }
  // Column panels of nr vectors, then the leftover vectors (the last one masked).
  const int64_t width = int64_t{s_.nr} * lanes_;
  const int64_t full = s_.n / width;
  emit_loop(b_.getInt64(full), "cp", {}, true, [&](Value* jp, const Carried&) {
    emit_tn_panel(b_.CreateMul(jp, b_.getInt64(width), "j0", true, true), s_.nr, lanes_);
    return Carried{};
  });
  if (int64_t rest = s_.n - full * width) {
    int vecs = static_cast<int>((rest + lanes_ - 1) / lanes_);
    emit_tn_panel(b_.getInt64(full * width), vecs,
                  static_cast<int>(rest - int64_t{vecs - 1} * lanes_));
  }
  b_.CreateRetVoid();
}

void GemmLowering::emit_tn_transposed() {
  const int64_t vm = (s_.m + lanes_ - 1) / lanes_;
  const int last = static_cast<int>(s_.m - (vm - 1) * lanes_);
  const int64_t full = (vm - 1) / s_.nr;
  const int rest = static_cast<int>(vm - full * s_.nr);
  for (int64_t j0 = 0; j0 < s_.n; j0 += s_.mr) {
    const int cols = static_cast<int>(std::min<int64_t>(s_.mr, s_.n - j0));
    emit_loop(b_.getInt64(full), "tb", {}, false, [&](Value* ib, const Carried&) {
      Value* i0 = b_.CreateMul(ib, b_.getInt64(int64_t{s_.nr} * lanes_), "", true, true);
      emit_tile_tn(i0, cols, b_.getInt64(j0), s_.nr, lanes_, true);
      return Carried{};
    });
    emit_tile_tn(b_.getInt64(full * s_.nr * lanes_), cols, b_.getInt64(j0), rest, last, true);
  }
}

void GemmLowering::emit_tn_panel(Value* j0, int vecs, int last) {
  const int64_t blocks = (s_.m + s_.mr - 1) / s_.mr;
  const int64_t lo = s_.m / blocks, big = s_.m % blocks; // `big` blocks of lo + 1 rows
  emit_loop(b_.getInt64(big), "rb.big", {}, true, [&](Value* ib, const Carried&) {
    emit_tile_tn(b_.CreateMul(ib, b_.getInt64(lo + 1), "", true, true), static_cast<int>(lo + 1),
                 j0, vecs, last);
    return Carried{};
  });
  emit_loop(b_.getInt64(blocks - big), "rb", {}, true, [&](Value* ib, const Carried&) {
    Value* i0 = add(b_.CreateMul(ib, b_.getInt64(lo), "", true, true), big * (lo + 1));
    emit_tile_tn(i0, static_cast<int>(lo), j0, vecs, last);
    return Carried{};
  });
}

std::pair<Value*, Value*> GemmLowering::ahead_row(Value* row0, Value* next, Value* col, Value* p,
                                                  Value* k, int64_t ld) {
  Value* ahead = add(p, kPrefetchRows);
  if (next == nullptr)
    return {row0, b_.CreateMul(ahead, b_.getInt64(ld), "", true, true)};
  Value* in = b_.CreateICmpSLT(ahead, k);
  Value* base = b_.CreateSelect(in, row0, gep(next, col));
  Value* row = b_.CreateSelect(in, ahead, b_.CreateSub(ahead, k));
  return {base, b_.CreateMul(row, b_.getInt64(ld), "", true, true)};
}

void GemmLowering::prefetch(Value* base, Value* index, bool write) {
  // Not inbounds: rows ahead of the last one are past the array (a prefetch never faults).
  Value* p = b_.CreateGEP(f32_, base, index);
  b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {b_.getPtrTy()},
                     {p, b_.getInt32(write ? 1 : 0), b_.getInt32(3), b_.getInt32(1)});
}

void GemmLowering::emit_tile_tn(Value* i0, int rows, Value* j0, int vecs, int last, bool t) {
  auto valid = [&](int v) { return v == vecs - 1 ? last : lanes_; };
  // Transposed: element l of accumulator (r, v) is C[i0 + v*lanes + l, j0 + r]: a vector of
  // pointers for a gather and a scatter (one instruction each with AVX-512).
  auto c_elems = [&](int r, int v) {
    std::vector<llvm::Constant*> offs;
    for (int l = 0; l < lanes_; ++l)
      offs.push_back(b_.getInt64(int64_t{l} * s_.ldc));
    Value* base = add(idx(add(i0, int64_t{v} * lanes_), s_.ldc, j0), r);
    Value* ix = b_.CreateAdd(b_.CreateVectorSplat(lanes_, base), llvm::ConstantVector::get(offs));
    return b_.CreateGEP(f32_, c_, ix);
  };
  auto load_c = [&] {
    Carried acc;
    for (int r = 0; r < rows; ++r)
      for (int v = 0; v < vecs; ++v) {
        if (!t) {
          acc.push_back(load_vec(c_ptr(i0, r, j0, v), valid(v)));
          continue;
        }
        acc.push_back(b_.CreateMaskedGather(vec_, c_elems(r, v), llvm::Align(4),
                                            lane_mask(valid(v)),
                                            llvm::Constant::getNullValue(vec_)));
      }
    return acc;
  };
  auto zero_c = [&] { // C's lines are written at the end: ask for them now
    for (int r = 0; r < rows && !t; ++r) {
      Value* row = idx(add(i0, r), s_.ldc, j0);
      for (int v = 0; v < vecs; ++v)
        prefetch(c_, add(row, int64_t{v} * lanes_), true);
      prefetch(c_, add(row, int64_t{vecs - 1} * lanes_ + valid(vecs - 1) - 1), true);
    }
    return Carried(size_t(rows) * vecs, llvm::Constant::getNullValue(vec_));
  };
  Carried acc;
  if (!s_.stretches) {
    acc = s_.accumulate ? load_c() : zero_c();
  } else { // accumulate or not, as the call says
    auto* ld = llvm::BasicBlock::Create(ctx_, "c.load", fn_);
    auto* zr = llvm::BasicBlock::Create(ctx_, "c.zero", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "c.init", fn_);
    b_.CreateCondBr(b_.CreateICmpNE(acc_arg_, b_.getInt64(0)), ld, zr);
    b_.SetInsertPoint(ld);
    Carried loaded = load_c();
    b_.CreateBr(join);
    b_.SetInsertPoint(zr);
    Carried zeros = zero_c();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    for (size_t i = 0; i < loaded.size(); ++i) {
      llvm::PHINode* phi = b_.CreatePHI(vec_, 2);
      phi->addIncoming(loaded[i], ld);
      phi->addIncoming(zeros[i], zr);
      acc.push_back(phi);
    }
  }
  if (s_.stretches) {
    auto* rec = llvm::StructType::get(ctx_, {b_.getPtrTy(), b_.getPtrTy(), i64_});
    acc = emit_loop(nst_, "st", acc, false, [&](Value* si, const Carried& in) {
      Value* r = b_.CreateInBoundsGEP(rec, st_, si);
      Value* a = b_.CreateAlignedLoad(b_.getPtrTy(), b_.CreateStructGEP(rec, r, 0), llvm::Align(8));
      Value* b = b_.CreateAlignedLoad(b_.getPtrTy(), b_.CreateStructGEP(rec, r, 1), llvm::Align(8));
      Value* k = b_.CreateAlignedLoad(i64_, b_.CreateStructGEP(rec, r, 2), llvm::Align(8));
      // The next stretch (after the last: the first, which the next block reads from
      // next), whose first rows are prefetched while this one's last rows run.
      Value* si1 = b_.CreateAdd(si, b_.getInt64(1), "", true, true);
      Value* rn = b_.CreateInBoundsGEP(
          rec, st_, b_.CreateSelect(b_.CreateICmpSLT(si1, nst_), si1, b_.getInt64(0)));
      Ahead next{
          b_.CreateAlignedLoad(b_.getPtrTy(), b_.CreateStructGEP(rec, rn, 0), llvm::Align(8)),
          b_.CreateAlignedLoad(b_.getPtrTy(), b_.CreateStructGEP(rec, rn, 1), llvm::Align(8))};
      return t ? emit_tn_k_transposed(a, b, k, i0, rows, j0, vecs, last, in, &next)
               : emit_tn_k(a, b, k, i0, rows, j0, vecs, last, in, &next);
    });
  } else {
    acc = t ? emit_tn_k_transposed(a_, bm_, k_, i0, rows, j0, vecs, last, acc)
            : emit_tn_k(a_, bm_, k_, i0, rows, j0, vecs, last, acc);
  }
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < vecs; ++v) {
      if (!t) {
        store_vec(acc[r * vecs + v], c_ptr(i0, r, j0, v), valid(v));
        continue;
      }
      b_.CreateMaskedScatter(acc[r * vecs + v], c_elems(r, v), llvm::Align(4), lane_mask(valid(v)));
    }
}

GemmLowering::Carried GemmLowering::emit_tn_k_transposed(Value* a, Value* b, Value* k, Value* i0,
                                                         int cols, Value* j0, int vecs, int last,
                                                         const Carried& init, const Ahead* next) {
  auto valid = [&](int v) { return v == vecs - 1 ? last : lanes_; };
  Value* a0 = gep(a, i0);
  Value* b0 = gep(b, j0);
  return emit_loop(k, "k", init, false, [&](Value* p, const Carried& in) {
    Value* arow = b_.CreateMul(p, b_.getInt64(s_.lda), "", true, true);
    Value* brow = b_.CreateMul(p, b_.getInt64(s_.ldb), "", true, true);
    auto [ab, aahead] = ahead_row(a0, next ? next->a : nullptr, i0, p, k, s_.lda);
    auto [bb, bahead] = ahead_row(b0, next ? next->b : nullptr, j0, p, k, s_.ldb);
    for (int v = 0; v < vecs; ++v)
      prefetch(ab, add(aahead, int64_t{v} * lanes_), false);
    prefetch(ab, add(aahead, int64_t{vecs - 1} * lanes_ + valid(vecs - 1) - 1), false);
    prefetch(bb, bahead, false);
    std::vector<Value*> av;
    for (int v = 0; v < vecs; ++v)
      av.push_back(load_vec(gep(a0, add(arow, int64_t{v} * lanes_)), valid(v)));
    Carried out(in.size());
    for (int c = 0; c < cols; ++c) {
      Value* x = b_.CreateAlignedLoad(f32_, gep(b0, add(brow, c)), llvm::Align(4));
      Value* bc = b_.CreateVectorSplat(lanes_, x);
      for (int v = 0; v < vecs; ++v)
        out[c * vecs + v] = fma(bc, av[v], in[c * vecs + v]);
    }
    return out;
  });
}

GemmLowering::Carried GemmLowering::emit_tn_k(Value* a, Value* b, Value* k, Value* i0, int rows,
                                              Value* j0, int vecs, int last, const Carried& init,
                                              const Ahead* next) {
  auto valid = [&](int v) { return v == vecs - 1 ? last : lanes_; };
  Value* a0 = gep(a, i0); // A(i0, p) = a0[p * lda]
  Value* b0 = gep(b, j0); // B(p, j0) = b0[p * ldb]
  return emit_loop(k, "k", init, false, [&](Value* p, const Carried& in) {
    Value* arow = b_.CreateMul(p, b_.getInt64(s_.lda), "", true, true);
    Value* brow = b_.CreateMul(p, b_.getInt64(s_.ldb), "", true, true);
    // B's rows are far apart (ldb floats): the hardware prefetchers miss them when B comes
    // from L3, as in a plan run. A's rows (lda apart) too.
    auto [bb, bahead] = ahead_row(b0, next ? next->b : nullptr, j0, p, k, s_.ldb);
    for (int v = 0; v < vecs; ++v)
      prefetch(bb, add(bahead, int64_t{v} * lanes_), false);
    prefetch(bb, add(bahead, int64_t{vecs - 1} * lanes_ + valid(vecs - 1) - 1), false);
    auto [ab, aahead] = ahead_row(a0, next ? next->a : nullptr, i0, p, k, s_.lda);
    prefetch(ab, aahead, false);
    prefetch(ab, add(aahead, rows - 1), false);
    std::vector<Value*> bv;
    for (int v = 0; v < vecs; ++v)
      bv.push_back(load_vec(gep(b0, add(brow, int64_t{v} * lanes_)), valid(v)));
    Carried out(in.size());
    for (int r = 0; r < rows; ++r) {
      Value* x = b_.CreateAlignedLoad(f32_, gep(a0, add(arow, r)), llvm::Align(4));
      Value* av = b_.CreateVectorSplat(lanes_, x);
      for (int v = 0; v < vecs; ++v)
        out[r * vecs + v] = fma(av, bv[v], in[r * vecs + v]);
    }
    return out;
  });
}

} // namespace pejit::jit
