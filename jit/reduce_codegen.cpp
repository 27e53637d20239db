// Lowering of the row reductions and the loss (kernel family 3, jit/reduce_spec.h) with
// IRBuilder.
//
// Design note. Each kind reproduces its reference kernel's order of floating-point operations,
// so that the specialized path on JIT kernels computes what it computes on reference kernels:
// - SumRows, width > 1: columns in blocks of U = 4 vectors of the host's width V, each block's
//   accumulators kept in registers over a loop on the rows (one pass over x per block); then
//   the leftover whole vectors; then the ragged end as one vector overlapping the last V
//   columns (a column's sum is the same sequence of adds in whatever lane it is computed, so
//   rewriting it stores the same bits), or, for width < V, one vector of `width` floats.
//   Every column is summed from 0 in row order: bit for bit kernels::sum_axis(x, 0).
// - SumRows, width 1, and the sums of exponentials of cross-entropy: 16 lanes (element i into
//   lane i mod 16, in order), folded 8, 4, 2, 1, as kernels::detail::row_sum; a partial block
//   is padded with lanes that add +0. The row max is exact in any order; it runs in 4
//   interleaved accumulators, and no result depends on which of equal maxima (+0, -0) it keeps.
// - e^x is the elementwise family's branch-free Cephes exp (rel. error <= 3e-7), from the same
//   emitter (emit_fast_exp, elementwise_codegen.h), as src/kernels/fast_math.h; the log
//   is llvm.log.f32, i.e. libm's logf, as std::log in the reference. No fast-math flags, no FMA
//   contraction in the IR, and none in the reference kernels (the project builds with
//   -ffp-contract=off), so cross-entropy gives the reference algorithm's bits
//   (tests/jit/reduce_test.cpp; a whole plan's loss and gradients:
//   tests/specializer/plan_test.cpp).
// Error of the loss (vs exact arithmetic on the f32 inputs): with s = sum of C terms each
// within 3e-7 relative, and the f32 sum adding at most (C - 1) ulps' worth, log(s) is off by
// <= (3e-7 + C * 6e-8) absolute, plus logf's and the final subtractions' rounding:
// |loss - exact| <= 3e-7 + C * 6e-8 + 2 * 6e-8 * (|loss| + |x_label - m|). Its backward's
// entries are within (3e-7 + C * 6e-8) * |gy| * softmax + 2 ulps. tests/jit/reduce_test.cpp
// checks both against a double-precision computation.
// - Along a row (SumCols, MeanCols, Softmax, LogSoftmax and their backward): the same 16-lane
//   sums, row max and exp, and then the reference's elementwise steps in its order (softmax
//   multiplies by 1 / s, log-softmax subtracts m then lse, the backward kinds round the
//   product or e^y before the next step); whole blocks of 16, the tail one masked vector.
//   Sums and means give the reference's bits; the kinds with e^x give its algorithm's bits, as
//   cross-entropy does.
// Labels: a label outside [0, C) reads column 0 instead (no out-of-bounds access) and the
// kernel returns the first such row; the caller reports the error.
// Shared operands (ReduceSpec::shared_logits, shared_label): the cross-entropy kinds read one
// logits row or one label for every row; each row's arithmetic is unchanged, so its bits are
// those of the per-row kernel with that row in place (the backward writes a per-row gradient;
// its sum over the rows is the SumRows kernel's, in row order).
//
// GPU mode (lower_reduce_gpu, for jit/ptx_codegen.cpp): the same per-row code, each row on its
// own thread (the row loop becomes a grid-stride loop, so every row keeps the CPU kernel's
// order of operations), the log Cephes' logf in IR (ptx_ir.h), the first bad label an atomic
// unsigned min into a device word that the caller sets to -1. SumRows sums each column on its
// own thread, in row order (the same bits); its width-1 form runs the 16-lane sum on one thread.
#include "jit/elementwise_codegen.h"
#include "jit/ptx_ir.h"
#include "jit/reduce_spec.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <algorithm>
#include <vector>

namespace pejit::jit {
namespace {

using llvm::Value;

constexpr unsigned kLanes = 16; // the reference's lanes (src/kernels/row_ops.h)
constexpr unsigned kBlock = 4;  // SumRows: vectors per column block
constexpr int64_t kMaxAcc = 4;  // row max: independent accumulators

class ReduceLowering {
public:
  ReduceLowering(const ReduceSpec& spec, int lanes, llvm::LLVMContext& ctx, llvm::Module& m,
                 bool gpu = false)
      : spec_(spec), lanes_(static_cast<unsigned>(lanes)), ctx_(ctx), m_(m), b_(ctx),
        f32_(b_.getFloatTy()), i32_(b_.getInt32Ty()), i64_(b_.getInt64Ty()), gpu_(gpu) {}

  // `void name(ptr in0, ..., ptr out, i64 rows, ptr bad)`: a kernel over the rows (SumRows:
  // over the columns); `bad` is an i64 the cross-entropy kinds lower to the first bad row.
  void emit_gpu(const std::string& fn_name) {
    auto* ptr = b_.getPtrTy();
    const int nin = reduce_inputs(spec_.kind);
    std::vector<llvm::Type*> params(static_cast<size_t>(nin) + 1, ptr);
    params.push_back(i64_);
    params.push_back(ptr);
    fn_ = create_gpu_kernel(m_, b_, fn_name, params);
    entry_ = b_.GetInsertBlock();
    for (int i = 0; i < nin; ++i)
      in_.push_back(fn_->getArg(static_cast<unsigned>(i)));
    out_ = fn_->getArg(static_cast<unsigned>(nin));
    rows_ = fn_->getArg(static_cast<unsigned>(nin) + 1);
    Value* bad = fn_->getArg(static_cast<unsigned>(nin) + 2);
    switch (spec_.kind) {
    case ReduceKind::SumRows:
      if (spec_.width == 1) {
        auto* one = llvm::BasicBlock::Create(ctx_, "one", fn_);
        auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
        b_.CreateCondBr(b_.CreateICmpEQ(emit_global_thread(b_), b_.getInt64(0)), one, done);
        b_.SetInsertPoint(one);
        emit_sum_lanes();
        b_.CreateBr(done);
        b_.SetInsertPoint(done);
      } else {
        emit_sum_columns_gpu();
      }
      break;
    case ReduceKind::CrossEntropy:
    case ReduceKind::CrossEntropyBwd: {
      Value* first = emit_cross_entropy(spec_.kind == ReduceKind::CrossEntropyBwd);
      auto* report = llvm::BasicBlock::Create(ctx_, "report", fn_);
      auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
      b_.CreateCondBr(b_.CreateICmpSGE(first, b_.getInt64(0)), report, done);
      b_.SetInsertPoint(report);
      b_.CreateAtomicRMW(llvm::AtomicRMWInst::UMin, bad, first, llvm::MaybeAlign(8),
                         llvm::AtomicOrdering::Monotonic);
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
      break;
    }
    default:
      emit_along_rows();
      break;
    }
    b_.CreateRetVoid();
  }

  void emit(const std::string& fn_name, const CodegenTarget& target) {
    auto* ptr = b_.getPtrTy();
    auto* fty = llvm::FunctionType::get(i64_, {ptr, ptr, i64_}, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, fn_name, m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    fn_->addFnAttr("target-cpu", target.cpu);
    fn_->addFnAttr("target-features", target.features);
    for (unsigned i = 0; i < 2; ++i) {
      fn_->addParamAttr(i, llvm::Attribute::NoCapture);
      fn_->addParamAttr(i, llvm::Attribute::ReadOnly);
    }
    Value *in = fn_->getArg(0), *out = fn_->getArg(1);
    rows_ = fn_->getArg(2);
    in->setName("in");
    out->setName("out");
    rows_->setName("rows");
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry_);
    const int nin = reduce_inputs(spec_.kind);
    for (int i = 0; i < nin; ++i)
      in_.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, in, i), "in.p"));
    out_ = b_.CreateLoad(ptr, out, "out.p");
    if (spec_.row_stats) // out[1] of the forward, in[3] of the backward; either may be null
      stats_ = spec_.kind == ReduceKind::CrossEntropy
                   ? b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, out, 1), "stats.p")
                   : b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, in, nin), "stats.p");
    Value* result = b_.getInt64(-1);
    switch (spec_.kind) {
    case ReduceKind::SumRows:
      if (spec_.width == 1)
        emit_sum_lanes();
      else
        emit_sum_columns();
      break;
    case ReduceKind::CrossEntropy:
    case ReduceKind::CrossEntropyBwd:
      result = emit_cross_entropy(spec_.kind == ReduceKind::CrossEntropyBwd);
      break;
    default: // SumCols and after: along each row
      emit_along_rows();
      break;
    }
    b_.CreateRet(result);
  }

private:
  // A stack slot in the entry block (SROA turns it into registers).
  llvm::AllocaInst* slot(llvm::Type* t, const char* name) {
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    return eb.CreateAlloca(t, nullptr, name);
  }

  // Loops of explicit vectors: O3 is told not to unroll, vectorize or interleave them again.
  template <class Body> void emit_loop(Value* n, const char* name, Body body) {
    keep_loop_as_written(emit_counted_loop(b_, fn_, n, name, body));
  }

  // The loop over the rows of the per-row kinds: every row in turn, or on the GPU one thread's
  // share of them.
  template <class Body> void row_loop(Body body) {
    if (gpu_)
      emit_grid_stride_loop(b_, fn_, rows_, "row", body);
    else
      emit_loop(rows_, "row", body);
  }

  // log(x): libm's logf through llvm.log.f32, or on the GPU Cephes' logf.
  Value* emit_log(Value* x) {
    return gpu_ ? emit_gpu_logf(b_, x) : b_.CreateUnaryIntrinsic(llvm::Intrinsic::log, x);
  }

  llvm::FixedVectorType* vec(unsigned n) { return llvm::FixedVectorType::get(f32_, n); }
  Value* at(Value* base, Value* index) { return b_.CreateInBoundsGEP(f32_, base, index); }
  Value* at(Value* base, int64_t index) { return at(base, b_.getInt64(index)); }
  Value* load(llvm::Type* t, Value* p) { return b_.CreateAlignedLoad(t, p, llvm::Align(4)); }
  void store(Value* v, Value* p) { b_.CreateAlignedStore(v, p, llvm::Align(4)); }

  // ---- SumRows ----------------------------------------------------------------------------

  // Columns [col, col + count * n) of y, each summed over the rows in row order.
  void emit_column_group(Value* col, unsigned n, unsigned count) {
    llvm::Type* t = vec(n);
    std::vector<llvm::AllocaInst*> acc;
    for (unsigned u = 0; u < count; ++u) {
      acc.push_back(slot(t, "acc"));
      store(llvm::Constant::getNullValue(t), acc.back());
    }
    const int64_t w = spec_.width;
    emit_loop(rows_, "row", [&](Value* r) {
      Value* base =
          b_.CreateAdd(b_.CreateMul(r, b_.getInt64(w), "", true, true), col, "", true, true);
      for (unsigned u = 0; u < count; ++u) {
        Value* x = load(t, at(in_[0], b_.CreateAdd(base, b_.getInt64(u * n), "", true, true)));
        store(b_.CreateFAdd(load(t, acc[u]), x), acc[u]);
      }
    });
    for (unsigned u = 0; u < count; ++u)
      store(load(t, acc[u]), at(out_, b_.CreateAdd(col, b_.getInt64(u * n), "", true, true)));
  }

  // GPU: column c on its own thread, summed from 0 in row order (the CPU kernel's bits).
  void emit_sum_columns_gpu() {
    const int64_t w = spec_.width;
    emit_grid_stride_loop(b_, fn_, b_.getInt64(w), "col", [&](Value* c) {
      llvm::AllocaInst* acc = slot(f32_, "acc");
      store(llvm::ConstantFP::get(f32_, 0.0), acc);
      emit_counted_loop(b_, fn_, rows_, "row", [&](Value* r) {
        Value* x =
            load(f32_, at(in_[0], b_.CreateAdd(b_.CreateMul(r, b_.getInt64(w), "", true, true), c,
                                               "", true, true)));
        store(b_.CreateFAdd(load(f32_, acc), x), acc);
      });
      store(load(f32_, acc), at(out_, c));
    });
  }

  void emit_sum_columns() {
    const int64_t w = spec_.width, v = lanes_, block = v * kBlock;
    if (w / block > 0)
      emit_loop(b_.getInt64(w / block), "blk", [&](Value* k) {
        emit_column_group(b_.CreateMul(k, b_.getInt64(block), "", true, true),
                          static_cast<unsigned>(v), kBlock);
      });
    int64_t col = w / block * block;
    if (int64_t whole = (w - col) / v; whole > 0) {
      emit_column_group(b_.getInt64(col), static_cast<unsigned>(v), static_cast<unsigned>(whole));
      col += whole * v;
    }
    if (col < w) {
      if (w >= v)
        emit_column_group(b_.getInt64(w - v), static_cast<unsigned>(v), 1);
      else
        emit_column_group(b_.getInt64(0), static_cast<unsigned>(w), 1);
    }
  }

  // lanes[j] + lanes[j + w] for w = 8, 4, 2, 1: the fold of row_sum. Lanes from `live` on
  // are known to be +0 and the others >= +0 (or NaN), so adding them would give the other
  // operand's bits: those adds are left out (not for signed data: -0 + +0 is +0).
  Value* fold(Value* lanes, unsigned live = kLanes) {
    for (unsigned w = kLanes / 2; w >= 1; w /= 2) {
      std::vector<int> lo, hi;
      for (unsigned j = 0; j < w; ++j) {
        lo.push_back(static_cast<int>(j));
        hi.push_back(static_cast<int>(j + w));
      }
      Value* low = b_.CreateShuffleVector(lanes, lo);
      lanes = live > w ? b_.CreateFAdd(low, b_.CreateShuffleVector(lanes, hi)) : low;
      live = std::min(live, w);
    }
    return b_.CreateExtractElement(lanes, uint64_t{0});
  }

  // y[0] = the 16-lane sum of x[0..rows).
  void emit_sum_lanes() {
    llvm::Type* t = vec(kLanes);
    llvm::AllocaInst* acc = slot(t, "acc");
    store(llvm::Constant::getNullValue(t), acc);
    Value* full = b_.CreateAShr(rows_, 4, "full");
    emit_loop(full, "blk", [&](Value* k) {
      Value* x = load(t, at(in_[0], b_.CreateShl(k, 4, "", true, true)));
      store(b_.CreateFAdd(load(t, acc), x), acc);
    });
    Value* start = b_.CreateShl(full, 4, "", true, true);
    emit_loop(b_.CreateSub(rows_, start), "rem", [&](Value* j) {
      Value* x = load(f32_, at(in_[0], b_.CreateAdd(start, j, "", true, true)));
      Value* lanes = load(t, acc);
      Value* lane = b_.CreateExtractElement(lanes, j);
      store(b_.CreateInsertElement(lanes, b_.CreateFAdd(lane, x), j), acc);
    });
    store(fold(load(t, acc)), out_);
  }

  // ---- cross-entropy ----------------------------------------------------------------------

  // Elements [col, col + n) of a row as a 16-lane vector, the other lanes `pad`.
  Value* load_partial(Value* row, int64_t col, unsigned n, Value* pad) {
    Value* v = b_.CreateVectorSplat(kLanes, pad);
    for (unsigned j = 0; j < n; ++j)
      v = b_.CreateInsertElement(v, load(f32_, at(row, col + j)), uint64_t{j});
    return v;
  }

  // The largest element of a row of C: 16 lanes as row_max, each lane in kMaxAcc interleaved
  // accumulators (vector k of the row into accumulator k mod kMaxAcc) so that the selects do
  // not wait on each other, combined at the end. The value is exact in any order; what the
  // order could change is which of several maxima is kept, i.e. the sign of a zero maximum
  // when both +0 and -0 are maxima, and no result depends on that sign (see emit_cross_entropy
  // and emit_along_rows: x - m is then +-0 for those elements, whose e^x is 1, and the
  // log-sum-exp is at least log 2 > 0). NaNs: a row whose x[0] is NaN gives NaN (every lane
  // starts at x[0] and no compare with NaN is true), and other NaNs are never taken, in any
  // order, as in row_max.
  Value* emit_row_max(Value* row) {
    const int64_t c = spec_.width, whole = c / kLanes, rem = c % kLanes;
    llvm::Type* t = vec(kLanes);
    Value* x0 = load(f32_, row);
    const int64_t nacc = whole >= kMaxAcc ? kMaxAcc : 1;
    std::vector<llvm::AllocaInst*> lanes;
    for (int64_t u = 0; u < nacc; ++u) {
      lanes.push_back(slot(t, "max"));
      store(b_.CreateVectorSplat(kLanes, x0), lanes.back());
    }
    auto take = [&](llvm::AllocaInst* acc, Value* x) {
      Value* l = load(t, acc);
      store(b_.CreateSelect(b_.CreateFCmpOGT(x, l), x, l), acc);
    };
    if (whole / nacc > 0)
      emit_loop(b_.getInt64(whole / nacc), "max.blk", [&](Value* k) {
        Value* col = b_.CreateMul(k, b_.getInt64(nacc * kLanes), "", true, true);
        for (int64_t u = 0; u < nacc; ++u)
          take(lanes[static_cast<size_t>(u)],
               load(t, at(row, b_.CreateAdd(col, b_.getInt64(u * kLanes), "", true, true))));
      });
    for (int64_t v = whole / nacc * nacc; v < whole; ++v)
      take(lanes[static_cast<size_t>(v % nacc)], load(t, at(row, v * kLanes)));
    if (rem > 0)
      take(lanes[0], load_partial(row, whole * kLanes, static_cast<unsigned>(rem), x0));
    Value* l = load(t, lanes[0]);
    for (int64_t u = 1; u < nacc; ++u) {
      Value* o = load(t, lanes[static_cast<size_t>(u)]);
      l = b_.CreateSelect(b_.CreateFCmpOGT(o, l), o, l);
    }
    Value* m = b_.CreateExtractElement(l, uint64_t{0});
    // Lanes past the row's length hold x[0]: they cannot change the max.
    for (unsigned j = 1; j < static_cast<unsigned>(std::min<int64_t>(c, kLanes)); ++j) {
      Value* e = b_.CreateExtractElement(l, uint64_t{j});
      m = b_.CreateSelect(b_.CreateFCmpOGT(e, m), e, m);
    }
    return m;
  }

  // The 16-lane sum of e^(x_i - m) over a row; with `dst`, each e^(x_i - m) is also stored
  // there.
  Value* emit_exp_sum(Value* row, Value* m, Value* dst) {
    const int64_t c = spec_.width, whole = c / kLanes, rem = c % kLanes;
    llvm::Type* t = vec(kLanes);
    Value* ms = b_.CreateVectorSplat(kLanes, m);
    llvm::AllocaInst* acc = slot(t, "sum");
    store(llvm::Constant::getNullValue(t), acc);
    if (whole > 0)
      emit_loop(b_.getInt64(whole), "exp.blk", [&](Value* k) {
        Value* col = b_.CreateShl(k, 4, "", true, true);
        Value* e = emit_exp(b_.CreateFSub(load(t, at(row, col)), ms));
        if (dst != nullptr)
          store(e, at(dst, col));
        store(b_.CreateFAdd(load(t, acc), e), acc);
      });
    if (rem > 0) {
      // Padding lanes hold m: e^0 is computed there, then replaced by +0 before the add.
      Value* e = emit_exp(
          b_.CreateFSub(load_partial(row, whole * kLanes, static_cast<unsigned>(rem), m), ms));
      Value* zero = llvm::Constant::getNullValue(t);
      std::vector<int> mask;
      for (unsigned j = 0; j < kLanes; ++j)
        mask.push_back(j < rem ? static_cast<int>(j) : static_cast<int>(kLanes + j));
      Value* part = b_.CreateShuffleVector(e, zero, mask);
      for (unsigned j = 0; dst != nullptr && j < rem; ++j)
        store(b_.CreateExtractElement(part, uint64_t{j}), at(dst, whole * kLanes + j));
      store(b_.CreateFAdd(load(t, acc), part), acc);
    }
    return fold(load(t, acc), static_cast<unsigned>(std::min<int64_t>(c, kLanes)));
  }

  // Row r's statistics: its m, then its s.
  Value* stats_of(Value* r) { return at(stats_, b_.CreateShl(r, 1, "", true, true)); }

  // The backward of a row from the forward's m and s (ReduceSpec::row_stats): e^(x_i - m) times
  // gy / s, stored once, where the full backward stores e^(x_i - m) and then scales it: the same
  // products, so the same bits.
  void emit_cross_entropy_bwd_from_stats(Value* r, Value* row, Value* idx) {
    const int64_t c = spec_.width, whole = c / kLanes, rem = c % kLanes;
    llvm::Type* t = vec(kLanes);
    Value* st = stats_of(r);
    Value* m = load(f32_, st);
    Value* s = load(f32_, at(st, 1));
    Value* dst = at(out_, b_.CreateMul(r, b_.getInt64(c), "", true, true));
    Value* g = load(f32_, at(in_[2], r));
    Value* scale = b_.CreateVectorSplat(kLanes, b_.CreateFDiv(g, s, "scale"));
    Value* ms = b_.CreateVectorSplat(kLanes, m);
    if (whole > 0)
      emit_loop(b_.getInt64(whole), "bwd.blk", [&](Value* k) {
        Value* col = b_.CreateShl(k, 4, "", true, true);
        store(b_.CreateFMul(emit_exp(b_.CreateFSub(load(t, at(row, col)), ms)), scale),
              at(dst, col));
      });
    if (rem > 0) {
      Value* e = emit_exp(
          b_.CreateFSub(load_partial(row, whole * kLanes, static_cast<unsigned>(rem), m), ms));
      Value* v = b_.CreateFMul(e, scale);
      for (unsigned j = 0; j < static_cast<unsigned>(rem); ++j)
        store(b_.CreateExtractElement(v, uint64_t{j}), at(dst, whole * kLanes + j));
    }
    Value* p = at(dst, idx);
    store(b_.CreateFSub(load(f32_, p), g), p);
  }

  Value* emit_cross_entropy(bool backward) {
    llvm::AllocaInst* first_bad = slot(i64_, "first_bad");
    b_.CreateStore(b_.getInt64(-1), first_bad);
    // With row statistics (which the caller may pass as null): both forms, on the pointer.
    auto rows = [&](bool stats) { emit_cross_entropy_rows(backward, stats, first_bad); };
    if (stats_ == nullptr)
      rows(false);
    else
      emit_on_null(b_, fn_, stats_, "stats", rows);
    return b_.CreateLoad(i64_, first_bad);
  }

  // The rows of emit_cross_entropy; `stats`: the row statistics are written (forward) or read
  // (backward).
  void emit_cross_entropy_rows(bool backward, bool stats, llvm::AllocaInst* first_bad) {
    const int64_t c = spec_.width;
    row_loop([&](Value* r) {
      // A shared logits row or label: every row reads the same one (stride 0).
      Value* row = spec_.shared_logits
                       ? in_[0]
                       : at(in_[0], b_.CreateMul(r, b_.getInt64(c), "", true, true));
      Value* label = b_.CreateLoad(
          i32_, spec_.shared_label ? in_[1] : b_.CreateInBoundsGEP(i32_, in_[1], r), "label");
      // Unsigned: a negative label is out of range too.
      Value* bad = b_.CreateICmpUGE(label, b_.getInt32(static_cast<uint32_t>(c)), "bad");
      Value* fb = b_.CreateLoad(i64_, first_bad);
      Value* is_first = b_.CreateAnd(bad, b_.CreateICmpSLT(fb, b_.getInt64(0)));
      b_.CreateStore(b_.CreateSelect(is_first, r, fb), first_bad);
      Value* idx = b_.CreateSExt(b_.CreateSelect(bad, b_.getInt32(0), label), i64_, "idx");
      if (backward && stats)
        return emit_cross_entropy_bwd_from_stats(r, row, idx);
      Value* m = emit_row_max(row);
      if (!backward) {
        Value* s = emit_exp_sum(row, m, nullptr);
        if (stats) {
          Value* st = stats_of(r);
          store(m, st);
          store(s, at(st, 1));
        }
        Value* inf = b_.CreateFCmpOEQ(
            b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, m),
            llvm::ConstantFP::getInfinity(f32_)); // all -inf, or a +inf: avoid inf - inf
        Value* lse = b_.CreateSelect(inf, llvm::ConstantFP::get(f32_, 0.0), emit_log(s));
        Value* y = b_.CreateFSub(lse, b_.CreateFSub(load(f32_, at(row, idx)), m));
        store(y, at(out_, r));
        return;
      }
      Value* dst = at(out_, b_.CreateMul(r, b_.getInt64(c), "", true, true));
      Value* s = emit_exp_sum(row, m, dst);
      Value* g = load(f32_, at(in_[2], r));
      Value* scale = b_.CreateFDiv(g, s, "scale");
      const int64_t whole = c / kLanes;
      llvm::Type* t = vec(kLanes);
      if (whole > 0)
        emit_loop(b_.getInt64(whole), "scale.blk", [&](Value* k) {
          Value* p = at(dst, b_.CreateShl(k, 4, "", true, true));
          store(b_.CreateFMul(load(t, p), b_.CreateVectorSplat(kLanes, scale)), p);
        });
      for (int64_t i = whole * kLanes; i < c; ++i) {
        Value* p = at(dst, i);
        store(b_.CreateFMul(load(f32_, p), scale), p);
      }
      Value* p = at(dst, idx);
      store(b_.CreateFSub(load(f32_, p), g), p);
    });
  }

  // ---- along a row: a per-row value's sum and mean, softmax and log-softmax -----------------

  // A row's last width % 16 elements at `base` (col on) as a 16-lane vector, the others +0.
  Value* load_tail(Value* base, int64_t col, unsigned n) {
    llvm::Type* t = vec(kLanes);
    return b_.CreateMaskedLoad(t, at(base, col), llvm::Align(4),
                               first_lanes(ctx_, static_cast<int>(kLanes), static_cast<int>(n)),
                               llvm::Constant::getNullValue(t));
  }

  // The 16-lane sum of a row's width values in row_sum's order: `values(load)` gives 16 of
  // them, `load(base)` reading base's 16 floats at the current place (the tail's lanes past
  // the row read +0, which `values` must keep +0: a product or the values themselves). Lanes
  // are never -0 (they start at +0), so adding the tail's +0s changes no bits.
  template <class Values> Value* lane_sum(Values values) {
    const int64_t c = spec_.width, whole = c / kLanes, rem = c % kLanes;
    llvm::Type* t = vec(kLanes);
    llvm::AllocaInst* acc = slot(t, "sum");
    store(llvm::Constant::getNullValue(t), acc);
    if (whole > 0)
      emit_loop(b_.getInt64(whole), "sum.blk", [&](Value* k) {
        Value* col = b_.CreateShl(k, 4, "", true, true);
        Value* v = values([&](Value* base) { return load(t, at(base, col)); });
        store(b_.CreateFAdd(load(t, acc), v), acc);
      });
    if (rem > 0) {
      const unsigned n = static_cast<unsigned>(rem);
      Value* v = values([&](Value* base) { return load_tail(base, whole * kLanes, n); });
      store(b_.CreateFAdd(load(t, acc), v), acc);
    }
    return fold(load(t, acc));
  }

  // dst[i] = f(load) for every element of a row: 16 at a time, the tail as one masked vector.
  template <class F> void map_row(Value* dst, F f) {
    const int64_t c = spec_.width, whole = c / kLanes, rem = c % kLanes;
    llvm::Type* t = vec(kLanes);
    if (whole > 0)
      emit_loop(b_.getInt64(whole), "map.blk", [&](Value* k) {
        Value* col = b_.CreateShl(k, 4, "", true, true);
        store(f([&](Value* base) { return load(t, at(base, col)); }), at(dst, col));
      });
    if (rem > 0) {
      const unsigned n = static_cast<unsigned>(rem);
      Value* v = f([&](Value* base) { return load_tail(base, whole * kLanes, n); });
      b_.CreateMaskedStore(v, at(dst, whole * kLanes), llvm::Align(4),
                           first_lanes(ctx_, static_cast<int>(kLanes), static_cast<int>(n)));
    }
  }

  Value* splat(Value* x) { return b_.CreateVectorSplat(kLanes, x); }

  // The kinds from SumCols on: `rows` rows of `width` floats, each on its own.
  void emit_along_rows() {
    const int64_t c = spec_.width;
    const ReduceKind kind = spec_.kind;
    row_loop([&](Value* r) {
      Value* off = b_.CreateMul(r, b_.getInt64(c), "", true, true);
      Value* x = at(in_[0], off);
      Value* g = in_.size() > 1 ? at(in_[1], off) : nullptr;
      Value* y = at(out_, off);
      switch (kind) {
      case ReduceKind::SumCols:
      case ReduceKind::MeanCols: {
        Value* s = lane_sum([&](auto load) { return load(x); });
        if (kind == ReduceKind::MeanCols) // as mean_axis: times the reciprocal in f32
          s = b_.CreateFMul(s, llvm::ConstantFP::get(f32_, 1.0f / static_cast<float>(c)));
        store(s, at(out_, r));
        return;
      }
      case ReduceKind::Softmax: {
        Value* s = emit_exp_sum(x, emit_row_max(x), y); // e_i stored in y
        Value* inv = splat(b_.CreateFDiv(llvm::ConstantFP::get(f32_, 1.0), s, "inv"));
        map_row(y, [&](auto load) { return b_.CreateFMul(load(y), inv); });
        return;
      }
      case ReduceKind::LogSoftmax: {
        Value* m = emit_row_max(x);
        Value* s = emit_exp_sum(x, m, nullptr);
        Value* inf = b_.CreateFCmpOEQ(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, m),
                                      llvm::ConstantFP::getInfinity(f32_));
        Value* lse = splat(b_.CreateSelect(inf, llvm::ConstantFP::get(f32_, 0.0), emit_log(s)));
        Value* ms = splat(m);
        map_row(y, [&](auto load) { return b_.CreateFSub(b_.CreateFSub(load(x), ms), lse); });
        return;
      }
      case ReduceKind::SoftmaxBwd: { // x = y, g = gy: y * (gy - sum(gy * y))
        Value* s = splat(lane_sum([&](auto load) { return b_.CreateFMul(load(g), load(x)); }));
        map_row(y, [&](auto load) { return b_.CreateFMul(load(x), b_.CreateFSub(load(g), s)); });
        return;
      }
      case ReduceKind::LogSoftmaxBwd: { // x = y, g = gy: gy - e^y * sum(gy)
        Value* s = splat(lane_sum([&](auto load) { return load(g); }));
        map_row(y, [&](auto load) {
          return b_.CreateFSub(load(g), b_.CreateFMul(emit_exp(load(x)), s));
        });
        return;
      }
      default:
        return;
      }
    });
  }

  // ---- e^x --------------------------------------------------------------------------------

  // e^x: the elementwise family's emitter (src/kernels/fast_math.h's fast_exp).
  Value* emit_exp(Value* x) { return emit_fast_exp(b_, x); }

  const ReduceSpec& spec_;
  unsigned lanes_; ///< the host's vector width in floats (SumRows' column vectors)
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  llvm::Type *f32_, *i32_, *i64_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  Value* rows_ = nullptr;
  std::vector<Value*> in_;
  Value* out_ = nullptr;
  Value* stats_ = nullptr; ///< the row statistics' pointer (ReduceSpec::row_stats; CPU only)
  bool gpu_ = false;
};

} // namespace

std::unique_ptr<llvm::Module> lower_reduce(const ReduceSpec& spec, llvm::LLVMContext& ctx,
                                           const std::string& fn_name,
                                           const CodegenTarget& target) {
  auto m = std::make_unique<llvm::Module>(fn_name, ctx);
  m->setTargetTriple(target.triple);
  m->setDataLayout(target.data_layout);
  ReduceLowering(spec, gemm_lanes(target), ctx, *m).emit(fn_name, target);
  return m;
}

std::unique_ptr<llvm::Module> lower_reduce_gpu(const ReduceSpec& spec, llvm::LLVMContext& ctx,
                                               const std::string& fn_name) {
  auto m = std::make_unique<llvm::Module>(fn_name, ctx);
  m->setTargetTriple(kNvptxTriple);
  // The lanes only size SumRows' CPU column blocks, which the GPU form does not use.
  ReduceLowering(spec, 16, ctx, *m, true).emit_gpu(fn_name);
  return m;
}

} // namespace pejit::jit
