// PTX through LLVM's NVPTX backend (ptx_codegen.h). Each kernel is its own module: lowered here
// (the elementwise chain, gathers, segment sums and optimizer steps) or in reduce_codegen.cpp's
// GPU mode, verified, optimized with the NVPTX target machine's O3 pipeline and printed as PTX.
// The element or row loop of a CPU kernel is a grid-stride loop (ptx_ir.h): the launch may use
// one thread per index or fewer. Floating point follows the CPU kernels: the same emitters for
// exp, tanh and sigmoid, no contraction (FPOpFusion::Strict, no fast-math flags), and NVPTX's
// defaults of IEEE-rounded f32 division and square root.
#include "jit/ptx_codegen.h"

#include "jit/elementwise_codegen.h"
#include "jit/ptx_ir.h"
#include "pejit/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <mutex>
#include <numeric>

namespace pejit::jit {

std::unique_ptr<llvm::Module> lower_reduce_gpu(const ReduceSpec& spec, llvm::LLVMContext& ctx,
                                               const std::string& fn_name);

int64_t RowGatherSpec::stride() const {
  return dst_stride != 0 ? dst_stride : std::accumulate(widths.begin(), widths.end(), int64_t{0});
}

int64_t RowGatherSpec::src_stride(size_t i) const {
  return i < src_strides.size() && src_strides[i] != 0 ? src_strides[i] : widths[i];
}

std::string RowGatherSpec::canonical_text() const {
  std::vector<int64_t> src;
  for (size_t i = 0; i < widths.size(); ++i)
    src.push_back(src_stride(i));
  return fmt::format("gather w={} src={} stride={}", fmt::join(widths, ","), fmt::join(src, ","),
                     stride());
}

std::string SegmentSumSpec::canonical_text() const {
  return fmt::format("segment_sum w={}{}", width, element_offsets ? " elems" : "");
}

std::string OptimizerStepSpec::canonical_text() const {
  const char* names[] = {"sgd", "adagrad", "adam"};
  return fmt::format("optim {} {} w={}", names[static_cast<int>(rule)], sparse ? "sparse" : "dense",
                     width);
}

KernelSpec gpu_chain(const KernelSpec& spec) {
  KernelSpec s = spec;
  s.panel_rows = 0;
  s.core_first = true;
  s.in_panel.clear();
  s.gemm_n = s.gemm_k = 0;
  s.gather_widths.clear();
  s.fill_inputs.clear();
  s.schedule = "default";
  return s;
}

namespace {

using llvm::Value;

// Row and column of element i of a grid `width` wide (width is static: a multiply-shift).
std::pair<Value*, Value*> row_col(llvm::IRBuilder<>& b, Value* i, int64_t width) {
  if (width == 1)
    return {i, b.getInt64(0)};
  Value* w = b.getInt64(width);
  return {b.CreateUDiv(i, w, "r"), b.CreateURem(i, w, "c")};
}

Value* at(llvm::IRBuilder<>& b, llvm::Type* t, Value* base, Value* index) {
  return b.CreateInBoundsGEP(t, base, index);
}

void lower_chain(const KernelSpec& spec, llvm::Module& m, const std::string& name) {
  llvm::IRBuilder<> b(m.getContext());
  auto* ptr = b.getPtrTy();
  llvm::Type* f32 = b.getFloatTy();
  const size_t nin = spec.inputs.size(), nout = spec.outputs.size();
  std::vector<llvm::Type*> params(nin + nout, ptr);
  params.push_back(b.getInt64Ty());
  llvm::Function* fn = create_gpu_kernel(m, b, name, params);
  for (size_t i = 0; i < nin; ++i)
    fn->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::ReadOnly);
  Value* rows = fn->getArg(static_cast<unsigned>(nin + nout));
  Value* n = b.CreateMul(rows, b.getInt64(spec.width), "n", true, true);
  emit_grid_stride_loop(b, fn, n, "i", [&](Value* i) {
    auto [r, c] = row_col(b, i, spec.width);
    auto index = [&](int64_t stride) {
      return stride == spec.width ? i : b.CreateAdd(b.CreateMul(r, b.getInt64(stride)), c);
    };
    std::vector<Value*> v;
    for (size_t k = 0; k < nin; ++k) {
      Value* base = fn->getArg(static_cast<unsigned>(k));
      Value* idx = spec.inputs[k] == InputShape::Full           ? index(spec.in_stride(k))
                   : spec.inputs[k] == InputShape::RowBroadcast ? c
                                                                : b.getInt64(0);
      v.push_back(b.CreateAlignedLoad(f32, at(b, f32, base, idx), llvm::Align(4)));
    }
    for (const ElementwiseStep& st : spec.ops)
      v.push_back(emit_elementwise_op(b, st.op, v[static_cast<size_t>(st.a)],
                                      st.b >= 0 ? v[static_cast<size_t>(st.b)] : nullptr));
    for (size_t j = 0; j < nout; ++j)
      b.CreateAlignedStore(
          v[static_cast<size_t>(spec.outputs[j])],
          at(b, f32, fn->getArg(static_cast<unsigned>(nin + j)), index(spec.out_stride(j))),
          llvm::Align(4));
  });
  b.CreateRetVoid();
}

void lower_gather(const RowGatherSpec& spec, llvm::Module& m, const std::string& name) {
  llvm::IRBuilder<> b(m.getContext());
  auto* ptr = b.getPtrTy();
  llvm::Type* f32 = b.getFloatTy();
  std::vector<llvm::Type*> params(1 + 2 * spec.widths.size(), ptr);
  params.push_back(b.getInt64Ty());
  llvm::Function* fn = create_gpu_kernel(m, b, name, params);
  Value* dst = fn->getArg(0);
  Value* rows = fn->getArg(static_cast<unsigned>(params.size() - 1));
  const int64_t stride = spec.stride();
  int64_t col = 0;
  // One grid-stride loop per part: its columns are contiguous in dst.
  for (size_t p = 0; p < spec.widths.size(); ++p) {
    const int64_t w = spec.widths[p];
    Value* src = fn->getArg(static_cast<unsigned>(1 + 2 * p));
    Value* table = fn->getArg(static_cast<unsigned>(2 + 2 * p));
    Value* indirect = b.CreateIsNotNull(table, "indirect");
    Value* n = b.CreateMul(rows, b.getInt64(w), "n", true, true);
    emit_grid_stride_loop(b, fn, n, "part", [&](Value* i) {
      auto [r, c] = row_col(b, i, w);
      // The row's address: from the table, or dense in src (a select of two addresses: the
      // table is read only where it is given).
      auto* load_row = llvm::BasicBlock::Create(m.getContext(), "table", fn);
      auto* join = llvm::BasicBlock::Create(m.getContext(), "row", fn);
      llvm::BasicBlock* from = b.GetInsertBlock();
      Value* dense = at(b, f32, src, b.CreateMul(r, b.getInt64(spec.src_stride(p))));
      b.CreateCondBr(indirect, load_row, join);
      b.SetInsertPoint(load_row);
      Value* listed = b.CreateAlignedLoad(ptr, at(b, ptr, table, r), llvm::Align(8));
      b.CreateBr(join);
      b.SetInsertPoint(join);
      llvm::PHINode* row = b.CreatePHI(ptr, 2, "row.p");
      row->addIncoming(dense, from);
      row->addIncoming(listed, load_row);
      Value* x = b.CreateAlignedLoad(f32, at(b, f32, row, c), llvm::Align(4));
      Value* to = b.CreateAdd(b.CreateMul(r, b.getInt64(stride)), b.CreateAdd(c, b.getInt64(col)));
      b.CreateAlignedStore(x, at(b, f32, dst, to), llvm::Align(4));
    });
    col += w;
  }
  b.CreateRetVoid();
}

void lower_segment_sum(const SegmentSumSpec& spec, llvm::Module& m, const std::string& name) {
  llvm::IRBuilder<> b(m.getContext());
  auto* ptr = b.getPtrTy();
  llvm::Type *f32 = b.getFloatTy(), *i64 = b.getInt64Ty();
  llvm::Function* fn = create_gpu_kernel(m, b, name, {ptr, ptr, ptr, ptr, i64});
  Value *out = fn->getArg(0), *g = fn->getArg(1), *order = fn->getArg(2), *offsets = fn->getArg(3);
  Value* segments = fn->getArg(4);
  const int64_t w = spec.width;
  llvm::BasicBlock* entry = b.GetInsertBlock();
  llvm::AllocaInst* acc;
  {
    llvm::IRBuilder<> eb(entry, entry->begin());
    acc = eb.CreateAlloca(f32, nullptr, "acc");
  }
  auto g_at = [&](Value* k, Value* c) {
    Value* row = b.CreateAlignedLoad(i64, at(b, i64, order, k), llvm::Align(8));
    Value* start = spec.element_offsets ? row : b.CreateMul(row, b.getInt64(w));
    return b.CreateAlignedLoad(f32, at(b, f32, g, b.CreateAdd(start, c)), llvm::Align(4));
  };
  emit_grid_stride_loop(b, fn, b.CreateMul(segments, b.getInt64(w)), "i", [&](Value* i) {
    auto [u, c] = row_col(b, i, w);
    Value* lo = b.CreateAlignedLoad(i64, at(b, i64, offsets, u), llvm::Align(8));
    Value* hi = b.CreateAlignedLoad(i64, at(b, i64, offsets, b.CreateAdd(u, b.getInt64(1))),
                                    llvm::Align(8));
    b.CreateStore(g_at(lo, c), acc);
    Value* first = b.CreateAdd(lo, b.getInt64(1));
    emit_counted_loop(b, fn, b.CreateSub(hi, first), "dup", [&](Value* k) {
      b.CreateStore(b.CreateFAdd(b.CreateLoad(f32, acc), g_at(b.CreateAdd(first, k), c)), acc);
    });
    b.CreateAlignedStore(b.CreateLoad(f32, acc), at(b, f32, out, i), llvm::Align(4));
  });
  b.CreateRetVoid();
}

void lower_optimizer_step(const OptimizerStepSpec& spec, llvm::Module& m, const std::string& name) {
  llvm::IRBuilder<> b(m.getContext());
  auto* ptr = b.getPtrTy();
  llvm::Type *f32 = b.getFloatTy(), *i64 = b.getInt64Ty();
  std::vector<llvm::Type*> params = {ptr, ptr, ptr, ptr, ptr, i64};
  params.insert(params.end(), 10, f32);
  llvm::Function* fn = create_gpu_kernel(m, b, name, params);
  Value *p = fn->getArg(0), *g = fn->getArg(1), *sa = fn->getArg(2), *sb = fn->getArg(3),
        *ids = fn->getArg(4), *rows = fn->getArg(5);
  auto arg = [&](unsigned k) { return fn->getArg(6 + k); };
  Value *lr = arg(0), *wd = arg(1), *coef = arg(2), *eps = arg(3), *b1 = arg(4), *b2 = arg(5),
        *omb1 = arg(6), *omb2 = arg(7), *step_size = arg(8), *bc2_sqrt = arg(9);
  const int64_t w = spec.sparse ? spec.width : 1;
  auto one = llvm::ConstantFP::get(f32, 1.0);
  auto zero = llvm::ConstantFP::get(f32, 0.0);
  emit_grid_stride_loop(b, fn, b.CreateMul(rows, b.getInt64(w)), "i", [&](Value* i) {
    Value* k = i; // the element of p and its state
    if (spec.sparse) {
      auto [u, c] = row_col(b, i, w);
      Value* id = b.CreateAlignedLoad(i64, at(b, i64, ids, u), llvm::Align(8));
      k = b.CreateAdd(b.CreateMul(id, b.getInt64(w)), c);
    }
    auto load = [&](Value* base, Value* idx) {
      return b.CreateAlignedLoad(f32, at(b, f32, base, idx), llvm::Align(4));
    };
    auto store = [&](Value* v, Value* base, Value* idx) {
      b.CreateAlignedStore(v, at(b, f32, base, idx), llvm::Align(4));
    };
    Value* pk = load(p, k);
    // grad(k): times coef unless it is 1, plus wd * p unless wd is 0 (update_span's terms).
    Value* gi = load(g, i);
    gi = b.CreateSelect(b.CreateFCmpUNE(coef, one), b.CreateFMul(gi, coef), gi);
    gi = b.CreateSelect(b.CreateFCmpUNE(wd, zero), b.CreateFAdd(gi, b.CreateFMul(wd, pk)), gi);
    auto sqrt = [&](Value* x) { return b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x); };
    switch (spec.rule) {
    case OptimizerStepSpec::Rule::Sgd:
      store(b.CreateFSub(pk, b.CreateFMul(lr, gi)), p, k);
      break;
    case OptimizerStepSpec::Rule::Adagrad: {
      Value* s = b.CreateFAdd(load(sa, k), b.CreateFMul(gi, gi));
      store(s, sa, k);
      store(b.CreateFSub(pk, b.CreateFDiv(b.CreateFMul(lr, gi), b.CreateFAdd(sqrt(s), eps))), p, k);
      break;
    }
    case OptimizerStepSpec::Rule::Adam: {
      Value* mk = b.CreateFAdd(b.CreateFMul(b1, load(sa, k)), b.CreateFMul(omb1, gi));
      Value* vk =
          b.CreateFAdd(b.CreateFMul(b2, load(sb, k)), b.CreateFMul(b.CreateFMul(omb2, gi), gi));
      store(mk, sa, k);
      store(vk, sb, k);
      Value* den = b.CreateFAdd(b.CreateFDiv(sqrt(vk), bc2_sqrt), eps);
      store(b.CreateFSub(pk, b.CreateFDiv(b.CreateFMul(step_size, mk), den)), p, k);
      break;
    }
    }
  });
  b.CreateRetVoid();
}

void init_nvptx_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Every target this LLVM was built with: NVPTX by name would not link where it is missing.
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
  });
}

} // namespace

bool PtxCompiler::available() {
  init_nvptx_once();
  std::string err;
  return llvm::TargetRegistry::lookupTarget(kNvptxTriple, err) != nullptr;
}

class PtxCompiler::Impl {
public:
  explicit Impl(PtxOptions options) : options_(std::move(options)) {
    init_nvptx_once();
    std::string err;
    const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kNvptxTriple, err);
    if (target == nullptr)
      throw Error(fmt::format("ptx: this LLVM has no NVPTX target: {}", err));
    llvm::TargetOptions to;
    to.AllowFPOpFusion = llvm::FPOpFusion::Strict; // no fma: the CPU kernels' roundings
    // PTX ISA 8.0: the first to know sm_90.
    tm_.reset(target->createTargetMachine(kNvptxTriple, options_.arch, "+ptx80", to, std::nullopt,
                                          std::nullopt, llvm::CodeGenOptLevel::Aggressive));
    if (!tm_)
      throw Error(fmt::format("ptx: no NVPTX target machine for {}", options_.arch));
  }

  template <class Lower> std::string compile(const std::string& name, Lower lower) {
    std::lock_guard lock(mu_);
    llvm::LLVMContext ctx;
    std::unique_ptr<llvm::Module> m = lower(ctx);
    m->setTargetTriple(kNvptxTriple);
    m->setDataLayout(tm_->createDataLayout());
    std::string why;
    llvm::raw_string_ostream vs(why);
    if (llvm::verifyModule(*m, &vs))
      throw Error(fmt::format("ptx: kernel {} fails verification: {}", name, why));
    {
      llvm::LoopAnalysisManager lam;
      llvm::FunctionAnalysisManager fam;
      llvm::CGSCCAnalysisManager cgam;
      llvm::ModuleAnalysisManager mam;
      llvm::PassBuilder pb(tm_.get());
      pb.registerModuleAnalyses(mam);
      pb.registerCGSCCAnalyses(cgam);
      pb.registerFunctionAnalyses(fam);
      pb.registerLoopAnalyses(lam);
      pb.crossRegisterProxies(lam, fam, cgam, mam);
      pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*m, mam);
    }
    llvm::SmallString<0> text;
    llvm::raw_svector_ostream os(text);
    llvm::legacy::PassManager pm;
    if (tm_->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
      throw Error("ptx: the NVPTX target cannot emit assembly");
    pm.run(*m);
    return std::string(text.str());
  }

  PtxOptions options_;
  std::unique_ptr<llvm::TargetMachine> tm_;
  std::mutex mu_;
};

PtxCompiler::PtxCompiler(PtxOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
PtxCompiler::~PtxCompiler() = default;

const std::string& PtxCompiler::arch() const {
  return impl_->options_.arch;
}

namespace {

template <class Emit>
std::unique_ptr<llvm::Module> module_with(llvm::LLVMContext& ctx, const std::string& name,
                                          Emit emit) {
  auto m = std::make_unique<llvm::Module>(name, ctx);
  emit(*m);
  return m;
}

} // namespace

std::string PtxCompiler::elementwise(const KernelSpec& spec, const std::string& name) const {
  KernelSpec chain = gpu_chain(spec);
  chain.validate();
  return impl_->compile(name, [&](llvm::LLVMContext& ctx) {
    return module_with(ctx, name, [&](llvm::Module& m) { lower_chain(chain, m, name); });
  });
}

std::string PtxCompiler::reduce(const ReduceSpec& spec, const std::string& name) const {
  spec.validate();
  return impl_->compile(name,
                        [&](llvm::LLVMContext& ctx) { return lower_reduce_gpu(spec, ctx, name); });
}

std::string PtxCompiler::gather(const RowGatherSpec& spec, const std::string& name) const {
  if (spec.widths.empty())
    throw Error("ptx: a gather needs at least one part");
  for (int64_t w : spec.widths)
    if (w < 1)
      throw Error(fmt::format("ptx: gather part width {} < 1", w));
  return impl_->compile(name, [&](llvm::LLVMContext& ctx) {
    return module_with(ctx, name, [&](llvm::Module& m) { lower_gather(spec, m, name); });
  });
}

std::string PtxCompiler::segment_sum(const SegmentSumSpec& spec, const std::string& name) const {
  if (spec.width < 1)
    throw Error(fmt::format("ptx: segment_sum width {} < 1", spec.width));
  return impl_->compile(name, [&](llvm::LLVMContext& ctx) {
    return module_with(ctx, name, [&](llvm::Module& m) { lower_segment_sum(spec, m, name); });
  });
}

std::string PtxCompiler::optimizer_step(const OptimizerStepSpec& spec,
                                        const std::string& name) const {
  if (spec.width < 1)
    throw Error(fmt::format("ptx: optimizer step width {} < 1", spec.width));
  return impl_->compile(name, [&](llvm::LLVMContext& ctx) {
    return module_with(ctx, name, [&](llvm::Module& m) { lower_optimizer_step(spec, m, name); });
  });
}

} // namespace pejit::jit
