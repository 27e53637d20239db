// Lowering of fused elementwise chains (kernel family 1) with IRBuilder.
//
// Shape of the code: pointers and scalar inputs are loaded once in the entry block; then either
// one flat loop over rows*width elements (no row-broadcast input or width 1, no strides) or a
// loop over rows around a loop over the static width, each array indexed by its own row stride
// (a column block of a wider array: a split's part read, a concat's part written in place).
// In the nested form the default schedule writes the chain once, on explicit vectors of
// default_chain_width(target) floats, W (32 with 512-bit vectors: two registers per operation,
// so two independent copies of the chain per step; ceil(width / W) steps, the last moved back
// to end at the row's end; a width under W is one masked vector of 8, 16 or 32 floats, the
// smallest that holds it), in loops left as written; a "vWxU" schedule writes it as scalar code
// for the loop vectorizer, the width's ragged end done as one vector overlapping the loop's
// last columns. The flat loop is scalar code for the vectorizer in every schedule.
// Every array access carries its own alias scope and is `noalias` to every other array, so the
// loop vectorizer needs no runtime overlap checks: callers must not pass an output whose
// elements overlap an input's or another output's (disjoint column blocks of one array are fine).
//
// exp/tanh/sigmoid mirror src/kernels/fast_math.h operation for operation (Cephes expf with a
// degree-6 polynomial, tanhf's odd polynomial below |x| = 0.625), so JIT and reference kernels
// agree to a few ulps. Max error vs double precision, measured over [-20, 20] step 1e-3 in
// tests/jit/elementwise_test.cpp: exp rel <= 3e-7, tanh rel <= 5e-7 (abs <= 3e-7),
// sigmoid rel <= 5e-7 for x >= -87. No FMA contraction is allowed (no fast-math flags).
//
// Panel kernels (KernelSpec::panel_rows > 0): the chain fused with a GEMM core. The generated
// function walks the rows in panels of panel_rows; per panel it assembles the rows the GEMM
// reads from their parts (gather_widths: a cell's x = [h_l | h_r], from row pointers or dense
// blocks) and copies in the rows of the chain's filled inputs (fill_inputs), calls the core's
// C++ callback (PanelCore::fn: nothing, or the C++ GEMM for comparisons), computes the panel's
// GEMM rows with its generated core (gemm_n: gemm_panel_codegen.cpp, on a weight packed once
// per plan run) and runs the chain on them, so the GEMM's rows are read by the epilogue while
// they are still in cache (forward: core first; backward: the chain makes dY's rows, then the
// core computes dX's). The chain is the plain kernel's row loop, emitted as an internal
// always-inline function called with pointers advanced to the panel; the GEMM core is an
// internal function of the same module, not inlined.
//
// Schedule (jit/schedule.h): "default" is the explicit W-float vectors above in the nested
// form, and leaves the flat loop to the vectorizer's cost model; "vWxU" forces W-float
// vectors and U interleaved copies through llvm.loop metadata. Every element is computed by
// the same operations in every schedule, so all schedules give bitwise identical results;
// only speed (and compile time) differs.
#include "jit/elementwise_codegen.h"

#include "jit/gemm_codegen.h"
#include "jit/schedule.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>

#include <algorithm>
#include <bit>
#include <map>
#include <vector>

namespace pejit::jit {
namespace {

using llvm::Value;

class ElementwiseLowering {
public:
  ElementwiseLowering(const KernelSpec& spec, llvm::LLVMContext& ctx, llvm::Module& m)
      : spec_(spec), ctx_(ctx), m_(m), b_(ctx), f32_(b_.getFloatTy()), i32_(b_.getInt32Ty()),
        i64_(b_.getInt64Ty()) {}

  void emit(const std::string& fn_name, const CodegenTarget& target) {
    if (spec_.panel_rows == 0) {
      emit_rows(fn_name, llvm::Function::ExternalLinkage, target);
      return;
    }
    // A panel kernel: the chain over a panel's rows is an internal function, inlined into the
    // loop over panels that calls the GEMM core.
    // Its name is fixed: inlining leaves it in block labels, which must not depend on fn_name.
    llvm::Function* rows_fn = emit_rows("chain", llvm::Function::InternalLinkage, target);
    rows_fn->addFnAttr(llvm::Attribute::AlwaysInline);
    emit_panels(fn_name, rows_fn, target);
  }

private:
  // void name(float** in, float** out, int64_t rows, const PanelCore* core): for each panel of
  // panel_rows rows at r0, core->fn(core, r0, n) and the chain on rows [r0, r0 + n) (every Full
  // array's pointer advanced by r0 rows, but a panel's scratch), in the order core_first says.
  void emit_panels(const std::string& fn_name, llvm::Function* rows_fn,
                   const CodegenTarget& target) {
    auto* ptr = b_.getPtrTy();
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, i64_, ptr}, false);
    auto* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, fn_name, m_);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    fn->addFnAttr("target-cpu", target.cpu);
    fn->addFnAttr("target-features", target.features);
    llvm::Value *in = fn->getArg(0), *out = fn->getArg(1), *rows = fn->getArg(2),
                *core = fn->getArg(3);
    in->setName("in");
    out->setName("out");
    rows->setName("rows");
    core->setName("core");
    fn_ = fn;
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn));
    size_t nin = spec_.inputs.size(), nout = spec_.outputs.size();
    auto* in_arr = b_.CreateAlloca(llvm::ArrayType::get(ptr, nin), nullptr, "panel.in");
    auto* out_arr = b_.CreateAlloca(llvm::ArrayType::get(ptr, nout), nullptr, "panel.out");
    std::vector<Value*> ins, outs;
    for (size_t i = 0; i < nin; ++i)
      ins.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, in, i), "in.p"));
    for (size_t j = 0; j < nout; ++j)
      outs.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, out, j), "out.p"));
    Value* core_fn = b_.CreateLoad(ptr, core, "core.fn");
    auto* core_ty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, i64_, i64_}, false);
    // PanelCore's fields (kernel_spec.h), read once.
    auto* slots = llvm::ArrayType::get(ptr, PanelCore::kMaxParts);
    auto* core_struct =
        llvm::StructType::get(ctx_, {ptr, ptr, ptr, ptr, i64_, ptr, slots, slots, slots});
    auto field = [&](unsigned i, llvm::Type* t, const char* name) {
      return b_.CreateLoad(t, b_.CreateStructGEP(core_struct, core, i), name);
    };
    auto slot = [&](unsigned i, size_t j, const char* name) {
      Value* at = b_.CreateInBoundsGEP(
          core_struct, core,
          {b_.getInt32(0), b_.getInt32(i), b_.getInt32(static_cast<uint32_t>(j))});
      return b_.CreateLoad(ptr, at, name);
    };
    // The generated GEMM core (gemm_n > 0).
    llvm::Function* gemm = nullptr;
    if (spec_.gemm_n > 0) {
      GemmSpec gs{.layout = GemmLayout::NN, .n = spec_.gemm_n, .k = spec_.gemm_k};
      gs.packed_b = true;
      gemm = emit_packed_gemm(gs, m_, "gemm", target, llvm::Function::InternalLinkage);
      // Called once per panel: inlining it would only make O3 work on one huge function.
      gemm->addFnAttr(llvm::Attribute::NoInline);
    }
    const int lanes = gemm_lanes(target);
    Value* height = b_.getInt64(spec_.panel_rows);
    Value* npanels =
        b_.CreateUDiv(b_.CreateAdd(rows, b_.getInt64(spec_.panel_rows - 1)), height, "panels");
    emit_loop(npanels, "panel", [&](Value* p) {
      // The core's fields are read in every panel, after the previous panel's call of
      // core->fn (which may write any memory): invariant, their null tests made loop
      // unswitching copy the whole panel body (the chain inlined) once per combination.
      Value *gemm_a = nullptr, *gemm_b = nullptr, *gemm_c = nullptr, *gemm_step = nullptr;
      if (gemm != nullptr) {
        gemm_a = field(1, ptr, "gemm.a");
        gemm_b = field(2, ptr, "gemm.b");
        gemm_c = field(3, ptr, "gemm.c");
        gemm_step = field(4, i64_, "gemm.step");
      }
      // The gathers: the GEMM's A rows from their parts, the filled inputs' rows.
      Value* gather_dst = spec_.gather_widths.empty() ? nullptr : field(5, ptr, "gather.dst");
      std::vector<Value*> part_src, part_rows, fill_rows;
      for (size_t i = 0; i < spec_.gather_widths.size(); ++i) {
        part_src.push_back(slot(6, i, "part.src"));
        part_rows.push_back(slot(7, i, "part.rows"));
      }
      for (size_t j = 0; j < spec_.fill_inputs.size(); ++j)
        fill_rows.push_back(slot(8, j, "fill.rows"));
      Value* r0 = b_.CreateMul(p, height, "r0", true, true);
      Value* left = b_.CreateSub(rows, r0, "left", true, true);
      Value* n = b_.CreateSelect(b_.CreateICmpSLT(left, height), left, height, "n");
      if (gather_dst != nullptr)
        when(b_.CreateIsNotNull(gather_dst), [&] {
          int64_t col = 0;
          for (size_t i = 0; i < spec_.gather_widths.size(); ++i) {
            const int64_t w = spec_.gather_widths[i];
            copy_rows(b_.CreateInBoundsGEP(f32_, gather_dst, b_.getInt64(col)), spec_.gemm_k,
                      part_src[i], part_rows[i], w, r0, n, lanes);
            col += w;
          }
        });
      for (size_t j = 0; j < spec_.fill_inputs.size(); ++j) {
        const size_t t = static_cast<size_t>(spec_.fill_inputs[j]);
        when(b_.CreateIsNotNull(fill_rows[j]), [&] {
          copy_rows(ins[t], spec_.in_stride(t), nullptr, fill_rows[j], spec_.width, r0, n, lanes);
        });
      }
      auto call_core = [&] {
        b_.CreateCall(core_ty, core_fn, {core, r0, n});
        if (gemm == nullptr)
          return;
        auto* run = llvm::BasicBlock::Create(ctx_, "gemm.run", fn);
        auto* next = llvm::BasicBlock::Create(ctx_, "gemm.next", fn);
        b_.CreateCondBr(b_.CreateIsNotNull(gemm_b), run, next);
        b_.SetInsertPoint(run);
        b_.CreateCall(
            gemm, {b_.CreateInBoundsGEP(f32_, gemm_a, b_.CreateMul(r0, b_.getInt64(spec_.gemm_k))),
                   gemm_b, b_.CreateInBoundsGEP(f32_, gemm_c, b_.CreateMul(r0, gemm_step)), n});
        b_.CreateBr(next);
        b_.SetInsertPoint(next);
      };
      if (spec_.core_first)
        call_core();
      for (size_t i = 0; i < nin; ++i) {
        Value* at = ins[i];
        if (spec_.inputs[i] == InputShape::Full && !spec_.panel_input(i))
          at = b_.CreateInBoundsGEP(f32_, at, b_.CreateMul(r0, b_.getInt64(spec_.in_stride(i))));
        b_.CreateStore(at, b_.CreateConstInBoundsGEP2_64(in_arr->getAllocatedType(), in_arr, 0, i));
      }
      for (size_t j = 0; j < nout; ++j)
        b_.CreateStore(
            b_.CreateInBoundsGEP(f32_, outs[j], b_.CreateMul(r0, b_.getInt64(spec_.out_stride(j)))),
            b_.CreateConstInBoundsGEP2_64(out_arr->getAllocatedType(), out_arr, 0, j));
      b_.CreateCall(rows_fn, {in_arr, out_arr, n});
      if (!spec_.core_first)
        call_core();
    });
    b_.CreateRetVoid();
  }

  // if (cond) then() in the current function.
  template <class Then> void when(Value* cond, Then then) {
    auto* yes = llvm::BasicBlock::Create(ctx_, "if", fn_);
    auto* next = llvm::BasicBlock::Create(ctx_, "if.next", fn_);
    b_.CreateCondBr(cond, yes, next);
    b_.SetInsertPoint(yes);
    then();
    b_.CreateBr(next);
    b_.SetInsertPoint(next);
  }

  // Rows [r0, r0 + n) of `width` floats into dst (row r at dst + r * dst_stride), row r read
  // from rows[r] when `rows` is not null, else from src + r * width (src may be null when
  // rows never is). Vectors of `lanes` floats, the last one masked.
  void copy_rows(Value* dst, int64_t dst_stride, Value* src, Value* rows, int64_t width, Value* r0,
                 Value* n, int lanes) {
    auto* vec = llvm::FixedVectorType::get(f32_, static_cast<unsigned>(lanes));
    auto* ptr = b_.getPtrTy();
    auto copy_loop = [&](bool indirect) {
      auto body = [&](Value* i) {
        Value* r = b_.CreateAdd(r0, i, "", true, true);
        Value* from = indirect
                          ? b_.CreateLoad(ptr, b_.CreateInBoundsGEP(ptr, rows, r), "row")
                          : b_.CreateInBoundsGEP(f32_, src, b_.CreateMul(r, b_.getInt64(width)));
        Value* to = b_.CreateInBoundsGEP(f32_, dst, b_.CreateMul(r, b_.getInt64(dst_stride)));
        for (int64_t c = 0; c < width; c += lanes) {
          Value* at = b_.getInt64(c);
          const int64_t valid = std::min<int64_t>(lanes, width - c);
          if (valid == lanes) {
            b_.CreateAlignedStore(
                b_.CreateAlignedLoad(vec, b_.CreateInBoundsGEP(f32_, from, at), llvm::Align(4)),
                b_.CreateInBoundsGEP(f32_, to, at), llvm::Align(4));
            continue;
          }
          Value* mask = first_lanes(ctx_, lanes, static_cast<int>(valid));
          b_.CreateMaskedStore(
              b_.CreateMaskedLoad(vec, b_.CreateInBoundsGEP(f32_, from, at), llvm::Align(4), mask),
              b_.CreateInBoundsGEP(f32_, to, at), llvm::Align(4), mask);
        }
      };
      keep_loop_as_written(emit_loop(n, indirect ? "gather.ind" : "gather.dense", body));
    };
    if (src == nullptr) {
      copy_loop(true);
      return;
    }
    emit_on_null(b_, fn_, rows, "rows.ind", copy_loop);
  }

  llvm::Function* emit_rows(const std::string& fn_name, llvm::Function::LinkageTypes linkage,
                            const CodegenTarget& target) {
    auto* ptr = b_.getPtrTy();
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, i64_}, false);
    fn_ = llvm::Function::Create(fty, linkage, fn_name, m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    fn_->addFnAttr("target-cpu", target.cpu);
    fn_->addFnAttr("target-features", target.features);
    for (unsigned i = 0; i < 2; ++i) {
      fn_->addParamAttr(i, llvm::Attribute::NoCapture);
      fn_->addParamAttr(i, llvm::Attribute::ReadOnly);
    }
    llvm::Value *in = fn_->getArg(0), *out = fn_->getArg(1), *rows = fn_->getArg(2);
    in->setName("in");
    out->setName("out");
    rows->setName("rows");

    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
    make_alias_scopes();
    size_t nin = spec_.inputs.size();
    for (size_t i = 0; i < nin; ++i)
      in_ptrs_.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, in, i), "in.p"));
    for (size_t j = 0; j < spec_.outputs.size(); ++j)
      out_ptrs_.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, out, j), "out.p"));

    // Loops over rows and columns where an array's rows are not contiguous with the grid's
    // (a broadcast row, a stride); one flat loop otherwise.
    bool nested = spec_.strided();
    for (InputShape s : spec_.inputs)
      nested |= spec_.width > 1 && s == InputShape::RowBroadcast;
    // Invariant inputs (scalars, and row-broadcast rows of width 1) are loaded once.
    hoisted_.assign(nin, nullptr);
    for (size_t i = 0; i < nin; ++i)
      if (spec_.inputs[i] == InputShape::Scalar ||
          (spec_.inputs[i] == InputShape::RowBroadcast && spec_.width == 1))
        hoisted_[i] = annotate(b_.CreateLoad(f32_, in_ptrs_[i], "s"), i);

    Value* width = b_.getInt64(spec_.width);
    // A row's ragged end: vectors of the schedule's width, or of default_chain_width floats.
    ElementwiseSchedule sched = parse_elementwise_schedule(spec_.schedule);
    tail_ = sched.is_default() ? default_chain_width(target) : sched.vector_width;
    if (sched.is_default()) // a narrow row: the smallest vector of 8, 16, ... floats that holds it
      tail_ = std::min<int64_t>(
          tail_, std::max<int64_t>(8, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(
                                          std::max<int64_t>(1, spec_.width))))));
    llvm::BranchInst* inner = nullptr; // the latch of the loop the schedule applies to
    if (nested) {
      llvm::BranchInst* row_latch = emit_loop(rows, "row", [&](Value* r) {
        // Row starts per array stride (most arrays share the width's).
        std::map<int64_t, Value*> base;
        auto base_of = [&](int64_t stride) {
          auto [it, fresh] = base.try_emplace(stride, nullptr);
          if (fresh)
            it->second = b_.CreateMul(r, b_.getInt64(stride), "base", true, true);
          return it->second;
        };
        for (size_t i = 0; i < nin; ++i)
          if (spec_.inputs[i] == InputShape::Full)
            base_of(spec_.in_stride(i));
        for (size_t j = 0; j < spec_.outputs.size(); ++j)
          base_of(spec_.out_stride(j));
        int64_t w = spec_.width;
        if (sched.is_default() && w < tail_) { // one vector per row, its first w lanes
          Value* c = b_.getInt64(0);
          emit_vector_element(
              c, [&](int64_t stride) { return base_of(stride); },
              first_lanes(ctx_, static_cast<int>(tail_), static_cast<int>(w)));
          return;
        }
        if (sched.is_default()) {
          // The default schedule: one explicit vector of tail_ columns per step, ceil(w /
          // tail_) steps, the last one moved back to end at the row's end (overlapping the
          // previous step's columns: each element is a pure function of the inputs, which no
          // output overlaps, so rewriting it stores the same bits). One copy of the chain,
          // left as written: the vectorizer's body, its interleaved copy and a separate tail
          // made O3 and instruction selection work on the chain three times.
          Value* last = b_.getInt64(w - tail_);
          keep_loop_as_written(
              emit_loop(b_.getInt64((w + tail_ - 1) / tail_), "col", [&](Value* i) {
                Value* c = b_.CreateMul(i, b_.getInt64(tail_), "c", true, true);
                if (w % tail_ != 0)
                  c = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, c, last);
                emit_vector_element(c, [&](int64_t stride) {
                  return b_.CreateAdd(base_of(stride), c, "idx", true, true);
                });
              }));
          return;
        }
        // The columns in whole vectors; a ragged end as one vector of the row's last tail_
        // columns, overlapping the loop's last ones (as above). Without it a 150-wide row
        // ends in the vectorizer's slow scalar epilogue.
        int64_t tail = w > tail_ && w % tail_ != 0 ? tail_ : 0;
        inner = emit_loop(b_.getInt64(tail != 0 ? w - w % tail : w), "col", [&](Value* c) {
          emit_element(c, [&](int64_t stride) {
            return b_.CreateAdd(base_of(stride), c, "idx", true, true);
          });
        });
        if (tail != 0)
          emit_vector_element(b_.getInt64(w - tail), [&](int64_t stride) {
            return b_.CreateAdd(base_of(stride), b_.getInt64(w - tail), "idx", true, true);
          });
      });
      if (sched.is_default()) // explicit vectors in the rows: no copies of them to unroll
        keep_loop_as_written(row_latch);
    } else {
      inner = emit_loop(b_.CreateMul(rows, width, "n", true, true), "i",
                        [&](Value* i) { emit_element(nullptr, [i](int64_t) { return i; }); });
    }
    apply_schedule(inner);
    b_.CreateRetVoid();
    if (spec_.inject_invalid_ir)
      llvm::BasicBlock::Create(ctx_, "unterminated", fn_); // fails verifyModule
    return fn_;
  }

  // One scope per array (inputs then outputs); each access is noalias to all the others.
  void make_alias_scopes() {
    llvm::MDBuilder md(ctx_);
    llvm::MDNode* domain = md.createAnonymousAliasScopeDomain("pejit.ew");
    size_t n = spec_.inputs.size() + spec_.outputs.size();
    std::vector<llvm::Metadata*> scopes;
    for (size_t i = 0; i < n; ++i)
      scopes.push_back(md.createAnonymousAliasScope(domain));
    for (size_t i = 0; i < n; ++i) {
      std::vector<llvm::Metadata*> others;
      for (size_t k = 0; k < n; ++k)
        if (k != i)
          others.push_back(scopes[k]);
      scope_lists_.push_back(llvm::MDNode::get(ctx_, {scopes[i]}));
      noalias_lists_.push_back(llvm::MDNode::get(ctx_, others));
    }
  }

  template <class I> I* annotate(I* access, size_t array) {
    access->setMetadata(llvm::LLVMContext::MD_alias_scope, scope_lists_[array]);
    access->setMetadata(llvm::LLVMContext::MD_noalias, noalias_lists_[array]);
    return access;
  }

  // A non-default schedule forces the vectorizer's width and interleave count on the inner
  // loop through its llvm.loop metadata; the default leaves both to the cost model.
  void apply_schedule(llvm::BranchInst* latch) {
    ElementwiseSchedule s = parse_elementwise_schedule(spec_.schedule);
    if (s.is_default())
      return;
    auto hint = [&](const char* name, llvm::Constant* v) {
      return llvm::MDNode::get(ctx_,
                               {llvm::MDString::get(ctx_, name), llvm::ConstantAsMetadata::get(v)});
    };
    llvm::TempMDNode self = llvm::MDNode::getTemporary(ctx_, {});
    llvm::Metadata* ops[] = {self.get(), hint("llvm.loop.vectorize.enable", b_.getTrue()),
                             hint("llvm.loop.vectorize.width", b_.getInt32(s.vector_width)),
                             hint("llvm.loop.interleave.count", b_.getInt32(s.interleave))};
    llvm::MDNode* loop_id = llvm::MDNode::getDistinct(ctx_, ops);
    loop_id->replaceOperandWith(0, loop_id);
    latch->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
  }

  template <class Body> llvm::BranchInst* emit_loop(Value* n, const char* name, Body body) {
    return emit_counted_loop(b_, fn_, n, name, body);
  }

  // One element: `col` is the column (nested loops only); index(stride) is the element's
  // index in an array of that row stride.
  template <class Index> void emit_element(Value* col, Index index) {
    std::vector<Value*> v;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      if (hoisted_[i]) {
        v.push_back(hoisted_[i]);
        continue;
      }
      Value* at = spec_.inputs[i] == InputShape::Full ? index(spec_.in_stride(i)) : col;
      v.push_back(annotate(b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, in_ptrs_[i], at)), i));
    }
    for (const ElementwiseStep& st : spec_.ops)
      v.push_back(emit_op(st.op, v[st.a], st.b >= 0 ? v[st.b] : nullptr));
    size_t nin = spec_.inputs.size();
    for (size_t j = 0; j < spec_.outputs.size(); ++j)
      annotate(b_.CreateStore(v[spec_.outputs[j]],
                              b_.CreateInBoundsGEP(f32_, out_ptrs_[j], index(spec_.out_stride(j)))),
               nin + j);
  }

  // tail_ columns at once from column `col`: the same operations as emit_element on vectors.
  // With a mask, only its lanes are read (the others are zero) and written.
  template <class Index> void emit_vector_element(Value* col, Index index, Value* mask = nullptr) {
    auto* vf = llvm::FixedVectorType::get(f32_, static_cast<unsigned>(tail_));
    std::vector<Value*> v;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      if (hoisted_[i]) {
        v.push_back(b_.CreateVectorSplat(static_cast<unsigned>(tail_), hoisted_[i]));
        continue;
      }
      Value* at = spec_.inputs[i] == InputShape::Full ? index(spec_.in_stride(i)) : col;
      Value* from = b_.CreateInBoundsGEP(f32_, in_ptrs_[i], at);
      llvm::Instruction* load =
          mask != nullptr ? static_cast<llvm::Instruction*>(b_.CreateMaskedLoad(
                                vf, from, llvm::Align(4), mask, llvm::Constant::getNullValue(vf)))
                          : b_.CreateAlignedLoad(vf, from, llvm::Align(4));
      v.push_back(annotate(load, i));
    }
    for (const ElementwiseStep& st : spec_.ops)
      v.push_back(emit_op(st.op, v[st.a], st.b >= 0 ? v[st.b] : nullptr));
    size_t nin = spec_.inputs.size();
    for (size_t j = 0; j < spec_.outputs.size(); ++j) {
      Value* to = b_.CreateInBoundsGEP(f32_, out_ptrs_[j], index(spec_.out_stride(j)));
      annotate(mask != nullptr ? static_cast<llvm::Instruction*>(b_.CreateMaskedStore(
                                     v[spec_.outputs[j]], to, llvm::Align(4), mask))
                               : b_.CreateAlignedStore(v[spec_.outputs[j]], to, llvm::Align(4)),
               nin + j);
    }
  }

  // The op on a float or a vector of floats: the emitter the GPU lowering shares.
  Value* emit_op(ElementwiseOp op, Value* a, Value* b) { return emit_elementwise_op(b_, op, a, b); }

  const KernelSpec& spec_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  llvm::Type *f32_, *i32_, *i64_;
  int64_t tail_ = 8; ///< the vector width of a row's ragged end, in floats
  llvm::Function* fn_ = nullptr;
  std::vector<Value*> in_ptrs_, out_ptrs_, hoisted_;
  std::vector<llvm::MDNode*> scope_lists_, noalias_lists_;
};

} // namespace

int default_chain_width(const CodegenTarget& target) {
  return std::max(8, 2 * target.vector_bits / 32);
}

std::unique_ptr<llvm::Module> lower_elementwise(const KernelSpec& spec, llvm::LLVMContext& ctx,
                                                const std::string& fn_name,
                                                const CodegenTarget& target) {
  auto m = std::make_unique<llvm::Module>(fn_name, ctx);
  m->setTargetTriple(target.triple);
  m->setDataLayout(target.data_layout);
  ElementwiseLowering(spec, ctx, *m).emit(fn_name, target);
  return m;
}

} // namespace pejit::jit
