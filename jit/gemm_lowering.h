// jit-internal (gemm_codegen.cpp, gemm_tn_codegen.cpp): GemmLowering, which lowers one
// GemmSpec to LLVM IR with IRBuilder: its state, the small IR helpers every layout uses and
// its emitters. NN and NT are emitted in gemm_codegen.cpp, which opens with the design note;
// TN (weight gradients) in gemm_tn_codegen.cpp.
#pragma once

#include "jit/elementwise_codegen.h" // CodegenTarget
#include "jit/gemm_codegen.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace pejit::jit {

class GemmLowering {
public:
  using Value = llvm::Value;

  GemmLowering(const GemmSpec& spec, int lanes, llvm::LLVMContext& ctx, llvm::Module& m)
      : s_(spec.resolved(lanes)), lanes_(lanes), ctx_(ctx), m_(m), b_(ctx), f32_(b_.getFloatTy()),
        i64_(b_.getInt64Ty()), vec_(llvm::FixedVectorType::get(f32_, lanes)) {}

  void emit(const std::string& fn_name, const CodegenTarget& target,
            llvm::GlobalValue::LinkageTypes linkage = llvm::Function::ExternalLinkage);

private:
  using Carried = std::vector<Value*>;

  // A narrow NN (n <= lanes/2) would fill a fraction of each vector: copy B^T [n,k] to the
  // stack once per call and run it as NT, which fills whole vectors along k. The copy is one
  // explicit loop over vectors of k, each column gathered ldb apart (the last step masked):
  // as a scalar loop, O3 vectorized and unrolled it completely into dozens of gathers, a large
  // share of the classifier kernel's compile time.
  void pack_b_transposed();

  // for (i = 0; i < n; ++i) carried = body(i, carried); returns the carried values after the
  // loop. `positive` promises n > 0 (no guard).
  Carried emit_loop(Value* n, const std::string& name, const Carried& init, bool positive,
                    const std::function<Carried(Value*, const Carried&)>& body);

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
  void emit_row_block_nn(Value* i0, int rows);

  // C[i0.., j0..] (+)= sum over k of A(i,k) * B[k, j0..] for `rows` x `vecs` vectors; the
  // last vector has `last` valid lanes.
  void emit_tile_nn(Value* i0, Value* j0, int rows, int vecs, int last);

  Value* c_ptr(Value* i0, int r, Value* j0, int v) {
    return gep(c_, add(idx(add(i0, r), s_.ldc, j0), int64_t{v} * lanes_));
  }

  // NT: full column blocks of nr columns in a loop, then the leftover columns.
  void emit_row_block_nt(Value* i0, int rows);

  // The sum of each vector's lanes, as the same tree for every one (lane l added to lane
  // l + h for h = lanes/2, lanes/4, ..., 1), computed for lanes vectors at once: each level
  // interleaves two vectors' halves into one (two shuffles and an add for two vectors), so
  // 16 sums take 15 shuffle pairs rather than 16 reductions of 4 levels each. Fewer and
  // wholly used shuffles: instruction selection spent a large share of the classifier
  // kernel's compile time proving lanes of llvm.vector.reduce.fadd's shuffles dead.
  // Deterministic.
  std::vector<Value*> lane_sums(const std::vector<Value*>& vs);

  // C[i, j] (+)= dot(A[i, :], B[j, :]) for `rows` x `cols`: vectors of partial sums over k,
  // one masked step for the k tail, then a tree reduction of each.
  void emit_tile_nt(Value* i0, Value* j0, int rows, int cols);

  // ---- TN: weight gradients (gemm_tn_codegen.cpp; design note in gemm_codegen.cpp) ----

  static constexpr int64_t kPrefetchRows = 16; // rows of A and B fetched ahead

  void emit_tn(const std::string& fn_name, const CodegenTarget& target);

  // A narrow C (n <= lanes/2) as C^T: per block of mr columns, the rows in blocks of nr
  // vectors, the last block holding the last (masked) vector.
  void emit_tn_transposed();

  // All rows of C for one column panel: ceil(m / mr) blocks of near-equal size, the larger
  // ones first (their sizes are static: two loops, one per size).
  void emit_tn_panel(Value* j0, int vecs, int last);

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
                                      int64_t ld);
  void prefetch(Value* base, Value* index, bool write);

  // C[i0 .. i0+rows, j0 .. j0+vecs vectors] (+)= sum over the stretches (or the one A, B) of
  // A^T·B; the last vector has `last` valid lanes.
  // Transposed (`t`, tn_transposed): columns j0 .. j0+rows of C, rows i0 .. i0+vecs vectors,
  // accumulator (r, v) holding column j0+r of C for a vector of rows.
  void emit_tile_tn(Value* i0, int rows, Value* j0, int vecs, int last, bool t = false);

  // Transposed: per k, `vecs` vectors of A's row k (rows i0.. of C) times a broadcast of
  // B(k, j0 + c) for each of the `cols` columns: fma(B, A, acc), the same exact product as
  // fma(A, B, acc), so the bits of the untransposed kernel.
  Carried emit_tn_k_transposed(Value* a, Value* b, Value* k, Value* i0, int cols, Value* j0,
                               int vecs, int last, const Carried& init,
                               const Ahead* next = nullptr);

  // The accumulators after k rows of A [k, lda] and B [k, ldb] (k may be 0).
  Carried emit_tn_k(Value* a, Value* b, Value* k, Value* i0, int rows, Value* j0, int vecs,
                    int last, const Carried& init, const Ahead* next = nullptr);

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

} // namespace pejit::jit
