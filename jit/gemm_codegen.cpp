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

namespace {

using llvm::Value;

class GemmLowering {
public:
  GemmLowering(const GemmSpec& spec, int lanes, llvm::LLVMContext& ctx, llvm::Module& m)
      : s_(spec.resolved(lanes)), lanes_(lanes), ctx_(ctx), m_(m), b_(ctx), f32_(b_.getFloatTy()),
        i64_(b_.getInt64Ty()), vec_(llvm::FixedVectorType::get(f32_, lanes)) {}

  void emit(const std::string& fn_name, const CodegenTarget& target,
            llvm::GlobalValue::LinkageTypes linkage = llvm::Function::ExternalLinkage) {
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

private:
  using Carried = std::vector<Value*>;

  // A narrow NN (n <= lanes/2) would fill a fraction of each vector: copy B^T [n,k] to the
  // stack once per call and run it as NT, which fills whole vectors along k. The copy is one
  // explicit loop over vectors of k, each column gathered ldb apart (the last step masked):
  // as a scalar loop, O3 vectorized and unrolled it completely into dozens of gathers, a large
  // share of the classifier kernel's compile time.
  void pack_b_transposed() {
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
        Value* x = b_.CreateMaskedGather(vec_, at, llvm::Align(4), mask,
                                         llvm::Constant::getNullValue(vec_));
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

  // for (i = 0; i < n; ++i) carried = body(i, carried); returns the carried values after the
  // loop. `positive` promises n > 0 (no guard).
  Carried emit_loop(Value* n, const std::string& name, const Carried& init, bool positive,
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

  Value* gep(Value* base, Value* index) { return b_.CreateInBoundsGEP(f32_, base, index); }
  Value* idx(Value* row, int64_t ld, Value* col) {
    return b_.CreateAdd(b_.CreateMul(row, b_.getInt64(ld), "", true, true), col, "", true, true);
  }
  Value* add(Value* x, int64_t c) {
    return c ? b_.CreateAdd(x, b_.getInt64(c), "", true, true) : x;
  }

  Value* lane_mask(int valid) { return first_lanes(ctx_, lanes_, valid); }
  Value* load_vec(Value* p, int valid) {
    if (valid == lanes_)
      return b_.CreateAlignedLoad(vec_, p, llvm::Align(4));
    return b_.CreateMaskedLoad(vec_, p, llvm::Align(4), lane_mask(valid),
                               llvm::Constant::getNullValue(vec_));
  }
  void store_vec(Value* v, Value* p, int valid) {
    if (valid == lanes_)
      b_.CreateAlignedStore(v, p, llvm::Align(4));
    else
      b_.CreateMaskedStore(v, p, llvm::Align(4), lane_mask(valid));
  }
  Value* fma(Value* x, Value* y, Value* acc) {
    return b_.CreateIntrinsic(llvm::Intrinsic::fma, {vec_}, {x, y, acc});
  }

  // Rows i0 .. i0+rows-1 of C, all columns.
  void emit_row_block(Value* i0, int rows) {
    if (dot_)
      emit_row_block_nt(i0, rows);
    else
      emit_row_block_nn(i0, rows);
  }

  // NN / TN: full column blocks of nr vectors in a loop, then the leftover vectors.
  void emit_row_block_nn(Value* i0, int rows) {
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

  // C[i0.., j0..] (+)= sum over k of A(i,k) * B[k, j0..] for `rows` x `vecs` vectors; the
  // last vector has `last` valid lanes.
  void emit_tile_nn(Value* i0, Value* j0, int rows, int vecs, int last) {
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

  Value* c_ptr(Value* i0, int r, Value* j0, int v) {
    return gep(c_, add(idx(add(i0, r), s_.ldc, j0), int64_t{v} * lanes_));
  }

  // NT: full column blocks of nr columns in a loop, then the leftover columns.
  void emit_row_block_nt(Value* i0, int rows) {
    int64_t full = s_.n / s_.nr;
    emit_loop(b_.getInt64(full), "cb", {}, true, [&](Value* jb, const Carried&) {
      emit_tile_nt(i0, b_.CreateMul(jb, b_.getInt64(s_.nr), "j0", true, true), rows, s_.nr);
      return Carried{};
    });
    int rest = static_cast<int>(s_.n - full * s_.nr);
    if (rest > 0)
      emit_tile_nt(i0, b_.getInt64(full * s_.nr), rows, rest);
  }

  // The sum of each vector's lanes, as the same tree for every one (lane l added to lane
  // l + h for h = lanes/2, lanes/4, ..., 1), computed for lanes vectors at once: each level
  // interleaves two vectors' halves into one (two shuffles and an add for two vectors), so
  // 16 sums take 15 shuffle pairs rather than 16 reductions of 4 levels each. Fewer and
  // wholly used shuffles: instruction selection spent a large share of the classifier kernel's
  // compile time proving lanes of llvm.vector.reduce.fadd's shuffles dead. Deterministic.
  std::vector<Value*> lane_sums(const std::vector<Value*>& vs) {
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

  // C[i, j] (+)= dot(A[i, :], B[j, :]) for `rows` x `cols`: vectors of partial sums over k,
  // one masked step for the k tail, then a tree reduction of each.
  void emit_tile_nt(Value* i0, Value* j0, int rows, int cols) {
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

  // ---- TN: weight gradients (design note at the top) ----

  static constexpr int64_t kPrefetchRows = 16; // rows of A and B fetched ahead

  void emit_tn(const std::string& fn_name, const CodegenTarget& target) {
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

  // A narrow C (n <= lanes/2) as C^T: per block of mr columns, the rows in blocks of nr
  // vectors, the last block holding the last (masked) vector.
  void emit_tn_transposed() {
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

  // All rows of C for one column panel: ceil(m / mr) blocks of near-equal size, the larger
  // ones first (their sizes are static: two loops, one per size).
  void emit_tn_panel(Value* j0, int vecs, int last) {
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

  /// A stretch's operands to prefetch from while the stretch before it runs.
  struct Ahead {
    Value* a;
    Value* b;
  };

  /// The operand row kPrefetchRows after row p of a stretch of k rows, as a base (`row0`, the
  /// stretch's element at `col` of row 0) and an element index: past the stretch's end, the
  /// row of the `next` stretch (its base `next` + `col`) that many rows on. Without `next`,
  /// the row past the end (never read: a prefetch does not fault).
  std::pair<Value*, Value*> ahead_row(Value* row0, Value* next, Value* col, Value* p, Value* k,
                                      int64_t ld) {
    Value* ahead = add(p, kPrefetchRows);
    if (next == nullptr)
      return {row0, b_.CreateMul(ahead, b_.getInt64(ld), "", true, true)};
    Value* in = b_.CreateICmpSLT(ahead, k);
    Value* base = b_.CreateSelect(in, row0, gep(next, col));
    Value* row = b_.CreateSelect(in, ahead, b_.CreateSub(ahead, k));
    return {base, b_.CreateMul(row, b_.getInt64(ld), "", true, true)};
  }

  void prefetch(Value* base, Value* index, bool write) {
    // Not inbounds: rows ahead of the last one are past the array (a prefetch never faults).
    Value* p = b_.CreateGEP(f32_, base, index);
    b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {b_.getPtrTy()},
                       {p, b_.getInt32(write ? 1 : 0), b_.getInt32(3), b_.getInt32(1)});
  }

  // C[i0 .. i0+rows, j0 .. j0+vecs vectors] (+)= sum over the stretches (or the one A, B) of
  // A^T·B; the last vector has `last` valid lanes.
  // Transposed (`t`, tn_transposed): columns j0 .. j0+rows of C, rows i0 .. i0+vecs vectors,
  // accumulator (r, v) holding column j0+r of C for a vector of rows.
  void emit_tile_tn(Value* i0, int rows, Value* j0, int vecs, int last, bool t = false) {
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
        Value* a =
            b_.CreateAlignedLoad(b_.getPtrTy(), b_.CreateStructGEP(rec, r, 0), llvm::Align(8));
        Value* b =
            b_.CreateAlignedLoad(b_.getPtrTy(), b_.CreateStructGEP(rec, r, 1), llvm::Align(8));
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
        b_.CreateMaskedScatter(acc[r * vecs + v], c_elems(r, v), llvm::Align(4),
                               lane_mask(valid(v)));
      }
  }

  // Transposed: per k, `vecs` vectors of A's row k (rows i0.. of C) times a broadcast of
  // B(k, j0 + c) for each of the `cols` columns: fma(B, A, acc), the same exact product as
  // fma(A, B, acc), so the bits of the untransposed kernel.
  Carried emit_tn_k_transposed(Value* a, Value* b, Value* k, Value* i0, int cols, Value* j0,
                               int vecs, int last, const Carried& init,
                               const Ahead* next = nullptr) {
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

  // The accumulators after k rows of A [k, lda] and B [k, ldb] (k may be 0).
  Carried emit_tn_k(Value* a, Value* b, Value* k, Value* i0, int rows, Value* j0, int vecs,
                    int last, const Carried& init, const Ahead* next = nullptr) {
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

  Value* st_ = nullptr;      // TN with stretches: the records
  Value* nst_ = nullptr;     // and their count
  Value* acc_arg_ = nullptr; // and whether C is accumulated

  GemmSpec s_;
  int lanes_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  llvm::Type* f32_;
  llvm::Type* i64_;
  llvm::FixedVectorType* vec_;
  llvm::Function* fn_ = nullptr;
  Value* a_ = nullptr;
  Value* bm_ = nullptr;
  Value* c_ = nullptr;
  Value* k_ = nullptr;
  bool k_positive_ = true;
  int64_t ldb_ = 0;  // of bm_, which is B^T on the stack when packed
  bool dot_ = false; // blocks of dot products along k (NT, or a packed narrow NN)
};

} // namespace

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
