// Jit: one LLJIT for the host, an O3 IRTransformLayer transform, one ResourceTracker per kernel.
// llvm::Error and llvm::Expected live only in this file; Jit's public members rethrow them as
// pejit::Error with LLVM's message (the caller then runs that batch generic: docs/architecture.md).
// With an object store, the compiler hands each kernel's object file to an ObjectCache that
// keeps it for the store, and a stored kernel is added as an object file (addObjectFile).
#include "jit/jit.h"

#include "jit/elementwise_codegen.h"
#include "jit/object_capture.h"
#include "pejit/error.h"

#include <fmt/format.h>
#include <llvm/Analysis/TargetTransformInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace pejit::jit {

// Defined in gemm_codegen.cpp. Declared here rather than in gemm_codegen.h, which shows no LLVM
// type: the lowering of a validated GemmSpec.
std::unique_ptr<llvm::Module> lower_gemm(const GemmSpec& spec, llvm::LLVMContext& ctx,
                                         const std::string& fn_name, const CodegenTarget& target);
// Defined in reduce_codegen.cpp: the lowering of a validated ReduceSpec.
std::unique_ptr<llvm::Module> lower_reduce(const ReduceSpec& spec, llvm::LLVMContext& ctx,
                                           const std::string& fn_name, const CodegenTarget& target);

// The generated panel kernels read PanelCore as {ptr, ptr, ptr, ptr, i64, ptr, [8 x ptr] x 3}
// (elementwise_codegen.cpp).
static_assert(offsetof(PanelCore, gemm_a) == 8 && offsetof(PanelCore, gemm_b) == 16 &&
              offsetof(PanelCore, gemm_c) == 24 && offsetof(PanelCore, gemm_c_step) == 32 &&
              offsetof(PanelCore, gather_dst) == 40 && offsetof(PanelCore, part_src) == 48 &&
              offsetof(PanelCore, part_rows) == 48 + 8 * PanelCore::kMaxParts &&
              offsetof(PanelCore, fill_rows) == 48 + 16 * PanelCore::kMaxParts);

namespace {

namespace orc = llvm::orc;

[[noreturn]] void throw_error(const char* what, llvm::Error err) {
  throw Error(fmt::format("jit: {}: {}", what, llvm::toString(std::move(err))));
}

template <class T> T unwrap(const char* what, llvm::Expected<T> value) {
  if (!value)
    throw_error(what, value.takeError());
  return std::move(*value);
}

void initialize_llvm_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

} // namespace

class Jit::Impl {
public:
  explicit Impl(JitOptions options)
      : store_(std::move(options.store)), in_place_(options.compile_threads == 0) {
    initialize_llvm_once();
    jtmb_ = unwrap("detecting the host", orc::JITTargetMachineBuilder::detectHost());
    jtmb_.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    orc::LLJITBuilder builder;
    builder.setJITTargetMachineBuilder(jtmb_).setNumCompileThreads(options.compile_threads);
    if (store_) {
      // The compiler LLJIT would pick (one per thread with a pool, else one TargetMachine),
      // with the capture as its ObjectCache: the same code, its object file kept.
      capture_ = std::make_unique<ObjectCapture>();
      const bool pool = !in_place_;
      builder.setCompileFunctionCreator(
          [cap = capture_.get(), pool](orc::JITTargetMachineBuilder jtmb)
              -> llvm::Expected<std::unique_ptr<orc::IRCompileLayer::IRCompiler>> {
            if (pool)
              return std::make_unique<orc::ConcurrentIRCompiler>(std::move(jtmb), cap);
            auto tm = jtmb.createTargetMachine();
            if (!tm)
              return tm.takeError();
            return std::make_unique<orc::TMOwningSimpleCompiler>(std::move(*tm), cap);
          });
    }
    lljit_ = unwrap("creating LLJIT", builder.create());
    target_.triple = lljit_->getTargetTriple().str();
    target_.data_layout = lljit_->getDataLayout().getStringRepresentation();
    target_.cpu = jtmb_.getCPU();
    target_.features = jtmb_.getFeatures().getString();
    target_.vector_bits = preferred_vector_bits();
    lljit_->getMainJITDylib().addGenerator(
        unwrap("host symbols", orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                                   lljit_->getDataLayout().getGlobalPrefix())));
    // Runs on the compile thread, on the module LLJIT cloned into that thread's context.
    lljit_->getIRTransformLayer().setTransform(
        [this](orc::ThreadSafeModule tsm,
               orc::MaterializationResponsibility&) -> llvm::Expected<orc::ThreadSafeModule> {
          llvm::Error err = llvm::Error::success();
          tsm.withModuleDo([&](llvm::Module& m) {
            err = optimize(m);
            if (!err)
              record_ir_hash(m);
          });
          if (err)
            return err;
          return tsm;
        });
  }

  ~Impl() {
    std::lock_guard lock(mu_);
    trackers_.clear(); // before lljit_: a tracker refers to its JITDylib
  }

  // Lowers a kernel through `lower(ctx, name)`, links it and fills what every compiled kind
  // has: the function pointer, its handle, the compile time and the optimized IR's hash. With
  // an object store, the kernel's stored object is linked instead when there is a good one,
  // and a kernel compiled is stored.
  template <class Compiled, class Fn, class Lower>
  llvm::Expected<Compiled> compile_as(const char* prefix, const std::string& spec_text,
                                      Lower lower) {
    auto start = std::chrono::steady_clock::now();
    uint64_t id = next_id_.fetch_add(1);
    std::string name = fmt::format("{}_{}", prefix, id);
    auto ctx = std::make_unique<llvm::LLVMContext>();
    std::unique_ptr<llvm::Module> m;
    std::string key; // the store's key when the object is to be stored
    if (store_) {
      // Lowered under the canonical name (the IR optimized_ir() sees), keyed, then named after
      // the key: the symbol its stored object defines, the same in every process.
      m = lower(*ctx, prefix);
      key = store_key(prefix, spec_text, *m);
      const std::string symbol = fmt::format("{}_k{:016x}", prefix, ir_text_hash(key));
      if (claim(id, symbol)) {
        if (std::optional<Compiled> k = load_stored<Compiled, Fn>(id, key, symbol, start))
          return std::move(*k);
        name = symbol;
        capture_->expect(name);
      } else {
        key.clear(); // a live kernel of this Jit has the symbol (its entry evicted, in use)
      }
      rename(*m, prefix, name);
    } else {
      m = lower(*ctx, name);
    }
    expect_ir_hash(name, prefix);
    auto addr = link(id, name, std::move(ctx), std::move(m));
    uint64_t hash = take_ir_hash(name);
    std::string object = key.empty() ? std::string() : capture_->take(name);
    if (!addr) {
      release(id);
      return addr.takeError();
    }
    if (!object.empty())
      store_->store(key, StoredObject{name, hash, std::move(object)});
    Compiled k;
    k.fn = addr->toPtr<Fn>();
    k.handle.id = id;
    k.compile_ms = ms_since(start);
    k.ir_hash = hash;
    return k;
  }

  // The store's key of a kernel lowered under its canonical name `prefix`.
  std::string store_key(const char* prefix, const std::string& spec_text,
                        const llvm::Module& lowered) const {
    return fmt::format("pejit {}; LLVM {}; {}; triple {}; cpu {}; features {}; {} {}; lowered "
                       "fnv={:016x}",
                       PEJIT_VERSION_STRING, LLVM_VERSION_STRING, kPipeline, target_.triple,
                       target_.cpu, target_.features, prefix, spec_text,
                       ir_text_hash(print(lowered)));
  }

  llvm::Expected<CompiledKernel> compile(const KernelSpec& spec) {
    spec.validate();
    auto k = compile_as<CompiledKernel, ElementwiseFn>(
        "pejit_ew", spec.canonical_text(), [&](llvm::LLVMContext& ctx, const std::string& name) {
          return lower_elementwise(spec, ctx, name, target_);
        });
    if (k && spec.panel_rows > 0) { // the symbol is a PanelFn: never callable as the other
      // Through void (*)(): the generic function pointer type, which -Wcast-function-type
      // accepts as the go-between; the address is the PanelFn the lowering defined.
      k->panel = reinterpret_cast<PanelFn>(reinterpret_cast<void (*)()>(k->fn));
      k->fn = nullptr;
    }
    return k;
  }

  llvm::Expected<CompiledGemm> compile_gemm(const GemmSpec& spec) {
    spec.validate();
    auto k = compile_as<CompiledGemm, GemmFn>("pejit_gemm", spec.canonical_text(),
                                              [&](llvm::LLVMContext& ctx, const std::string& name) {
                                                return lower_gemm(spec, ctx, name, target_);
                                              });
    if (!k)
      return k.takeError();
    if (spec.stretches) { // the symbol is a GemmStretchesFn (through void (*)(), as above)
      k->stretches = reinterpret_cast<GemmStretchesFn>(reinterpret_cast<void (*)()>(k->fn));
      k->fn = nullptr;
    }
    GemmSpec r = spec.resolved(gemm_lanes(target_));
    k->schedule = fmt::format("{}x{} ({})", r.mr, r.nr, spec.mr ? "given" : "default");
    return k;
  }

  llvm::Expected<CompiledReduce> compile_reduce(const ReduceSpec& spec) {
    spec.validate();
    return compile_as<CompiledReduce, ReduceFn>(
        "pejit_reduce", spec.canonical_text(),
        [&](llvm::LLVMContext& ctx, const std::string& name) {
          return lower_reduce(spec, ctx, name, target_);
        });
  }

  llvm::Error remove(KernelHandle handle) {
    orc::ResourceTrackerSP rt;
    {
      std::lock_guard lock(mu_);
      release_locked(handle.id);
      auto it = trackers_.find(handle.id);
      if (it == trackers_.end())
        return llvm::Error::success();
      rt = std::move(it->second);
      trackers_.erase(it);
    }
    return rt->remove();
  }

  llvm::Expected<std::string> optimized_ir(const KernelSpec& spec) const {
    spec.validate();
    llvm::LLVMContext ctx;
    return optimized_text(*lower_elementwise(spec, ctx, "pejit_ew", target_));
  }

  llvm::Expected<std::string> optimized_ir(const GemmSpec& spec) const {
    spec.validate();
    llvm::LLVMContext ctx;
    return optimized_text(*lower_gemm(spec, ctx, "pejit_gemm", target_));
  }

  llvm::Expected<std::string> optimized_ir(const ReduceSpec& spec) const {
    spec.validate();
    llvm::LLVMContext ctx;
    return optimized_text(*lower_reduce(spec, ctx, "pejit_reduce", target_));
  }

  size_t live_kernels() const {
    std::lock_guard lock(mu_);
    return trackers_.size();
  }

  const CodegenTarget& target() const { return target_; }

  std::string store_key(const KernelSpec& spec) {
    spec.validate();
    llvm::LLVMContext ctx;
    return store_key("pejit_ew", spec.canonical_text(),
                     *lower_elementwise(spec, ctx, "pejit_ew", target_));
  }

private:
  // Takes `symbol` for kernel `id`: false when a live kernel of this Jit has it.
  bool claim(uint64_t id, const std::string& symbol) {
    std::lock_guard lock(mu_);
    if (!claimed_.insert(symbol).second)
      return false;
    symbols_[id] = symbol;
    return true;
  }
  void release(uint64_t id) {
    std::lock_guard lock(mu_);
    release_locked(id);
  }
  void release_locked(uint64_t id) { // mu_ held
    if (auto it = symbols_.find(id); it != symbols_.end()) {
      claimed_.erase(it->second);
      symbols_.erase(it);
    }
  }

  static void rename(llvm::Module& m, const std::string& from, const std::string& to) {
    if (llvm::Function* fn = m.getFunction(from))
      fn->setName(to);
    m.setModuleIdentifier(to);
    m.setSourceFileName(to);
  }

  // Links the stored object of `key` as kernel `id`; nothing when there is no good entry or
  // it does not link (the caller compiles it and the entry is rewritten).
  template <class Compiled, class Fn>
  std::optional<Compiled> load_stored(uint64_t id, const std::string& key,
                                      const std::string& symbol,
                                      std::chrono::steady_clock::time_point start) {
    std::optional<StoredObject> obj = store_->load(key);
    if (!obj || obj->symbol != symbol)
      return std::nullopt;
    orc::ResourceTrackerSP rt = lljit_->getMainJITDylib().createResourceTracker();
    if (llvm::Error err =
            lljit_->addObjectFile(rt, llvm::MemoryBuffer::getMemBufferCopy(obj->object, symbol))) {
      llvm::consumeError(std::move(err));
      llvm::consumeError(rt->remove());
      return std::nullopt;
    }
    auto sym = lljit_->lookup(symbol);
    if (!sym) {
      llvm::consumeError(sym.takeError());
      llvm::consumeError(rt->remove());
      return std::nullopt;
    }
    {
      std::lock_guard lock(mu_);
      trackers_.emplace(id, rt);
    }
    Compiled k;
    k.fn = sym->toPtr<Fn>();
    k.handle.id = id;
    k.compile_ms = ms_since(start);
    k.ir_hash = obj->ir_hash;
    k.loaded = true;
    return k;
  }

  static double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  }

  // Verifies `m`, adds it under a ResourceTracker of its own (kept under `id`) and returns the
  // address of `name`.
  llvm::Expected<orc::ExecutorAddr> link(uint64_t id, const std::string& name,
                                         std::unique_ptr<llvm::LLVMContext> ctx,
                                         std::unique_ptr<llvm::Module> m) {
    if (llvm::Error err = verify(*m)) {
      m.reset(); // before its context, whatever order the parameters are destroyed in
      return err;
    }
    m = fresh_copy(*m); // as optimized_ir() does, for the same IR
    // Build the module before moving the context into the ThreadSafeModule (docs/dependencies.md).
    orc::ThreadSafeModule tsm(std::move(m), std::move(ctx));
    // Without a pool, lookup() compiles on this thread with LLJIT's one TargetMachine: one
    // compile at a time.
    std::unique_lock<std::mutex> in_place;
    if (in_place_)
      in_place = std::unique_lock<std::mutex>(in_place_mu_);
    orc::ResourceTrackerSP rt = lljit_->getMainJITDylib().createResourceTracker();
    if (llvm::Error err = lljit_->addIRModule(rt, std::move(tsm)))
      return err;
    auto sym = lljit_->lookup(name);
    if (!sym) {
      llvm::consumeError(rt->remove());
      return sym.takeError();
    }
    std::lock_guard lock(mu_);
    trackers_.emplace(id, rt);
    return *sym;
  }

  llvm::Expected<std::string> optimized_text(const llvm::Module& lowered) const {
    if (llvm::Error err = verify(lowered))
      return err;
    std::unique_ptr<llvm::Module> m = fresh_copy(lowered);
    if (llvm::Error err = optimize(*m))
      return err;
    return print(*m);
  }

  // The module as optimize() must see it in every entry point. A value symbol table keeps a
  // counter of the name clashes it has resolved ("x", "x1", ...) that the IR text does not
  // show; the optimizer's new names depend on it, so a module fresh from the lowering and a
  // copy of it print differently after O3. Both paths optimize a copy.
  static std::unique_ptr<llvm::Module> fresh_copy(const llvm::Module& m) {
    return llvm::CloneModule(m);
  }

  static std::string print(const llvm::Module& m) {
    std::string text;
    llvm::raw_string_ostream os(text);
    m.print(os, nullptr);
    return os.str();
  }

  // The IR hash of a compiled kernel. Its module and function are named `name` (unique in
  // the JITDylib); optimized_ir() names them `canonical`. The transform hashes the optimized
  // module printed under the canonical name, so both entry points hash the same text.
  void expect_ir_hash(const std::string& name, const char* canonical) {
    std::lock_guard lock(mu_);
    hash_names_[name] = canonical;
  }

  uint64_t take_ir_hash(const std::string& name) {
    std::lock_guard lock(mu_);
    hash_names_.erase(name);
    auto it = ir_hashes_.find(name);
    if (it == ir_hashes_.end())
      return 0;
    uint64_t h = it->second;
    ir_hashes_.erase(it);
    return h;
  }

  // Runs in the transform, after optimize(): renames to the canonical name, prints, hashes,
  // and restores the names, so the module that is linked is unchanged.
  void record_ir_hash(llvm::Module& m) {
    const std::string name = m.getModuleIdentifier();
    std::string canonical;
    {
      std::lock_guard lock(mu_);
      auto it = hash_names_.find(name);
      if (it == hash_names_.end())
        return;
      canonical = it->second;
    }
    const std::string source = m.getSourceFileName();
    llvm::Function* fn = m.getFunction(name);
    if (fn != nullptr)
      fn->setName(canonical);
    m.setModuleIdentifier(canonical);
    m.setSourceFileName(canonical);
    uint64_t h = ir_text_hash(print(m));
    if (fn != nullptr)
      fn->setName(name);
    m.setModuleIdentifier(name);
    m.setSourceFileName(source);
    std::lock_guard lock(mu_);
    ir_hashes_[name] = h;
  }

  static llvm::Error verify(const llvm::Module& m) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    if (llvm::verifyModule(m, &os))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "kernel IR fails verification: " + os.str());
    return llvm::Error::success();
  }

  // The host's preferred vector width (CodegenTarget::vector_bits): the register width of the
  // cost model the vectorizer uses, asked of a function with the host's CPU and features.
  int preferred_vector_bits() const {
    orc::JITTargetMachineBuilder jtmb = jtmb_;
    std::unique_ptr<llvm::TargetMachine> tm =
        unwrap("creating a target machine", jtmb.createTargetMachine());
    llvm::LLVMContext ctx;
    llvm::Module m("probe", ctx);
    m.setDataLayout(tm->createDataLayout());
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), false),
                                      llvm::Function::ExternalLinkage, "probe", m);
    fn->addFnAttr("target-cpu", target_.cpu);
    fn->addFnAttr("target-features", target_.features);
    return static_cast<int>(
        tm->getTargetTransformInfo(*fn)
            .getRegisterBitWidth(llvm::TargetTransformInfo::RGK_FixedWidthVector)
            .getFixedValue());
  }

  // O3 with the new pass manager. The TargetMachine comes from the same builder (CPU, features,
  // opt level) that LLJIT's compiler uses, so the vectorizer's cost model sees the host's
  // vector registers (docs/dependencies.md); a TargetMachine per call keeps compile threads apart.
  llvm::Error optimize(llvm::Module& m) const {
    orc::JITTargetMachineBuilder jtmb = jtmb_;
    auto tm = jtmb.createTargetMachine();
    if (!tm)
      return tm.takeError();
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = true;
    pto.SLPVectorization = true;
    llvm::PassBuilder pb(tm->get(), pto);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
    return llvm::Error::success();
  }

  orc::JITTargetMachineBuilder jtmb_{llvm::Triple()};
  CodegenTarget target_;
  std::shared_ptr<ObjectStore> store_;     ///< null: none
  std::unique_ptr<ObjectCapture> capture_; ///< with a store; outlives lljit_, which calls it
  std::unique_ptr<orc::LLJIT> lljit_;
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex mu_;
  const bool in_place_;                                           ///< compile_threads == 0
  std::mutex in_place_mu_;                                        ///< serializes in-place compiles
  std::unordered_map<uint64_t, orc::ResourceTrackerSP> trackers_; // guarded by mu_
  // Kernels being linked: their canonical names, then their IR hashes; guarded by mu_.
  std::unordered_map<std::string, std::string> hash_names_;
  std::unordered_map<std::string, uint64_t> ir_hashes_;
  // The store symbols of live kernels (by kernel id), which another kernel must not define;
  // guarded by mu_.
  std::unordered_map<uint64_t, std::string> symbols_;
  std::unordered_set<std::string> claimed_;
};

uint64_t ir_text_hash(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull; // FNV-1a, 64-bit
  for (char c : text) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

Jit::Jit(JitOptions options) : impl_(std::make_unique<Impl>(options)) {}
Jit::~Jit() = default;

CompiledKernel Jit::compile(const KernelSpec& spec) {
  return unwrap("compiling elementwise kernel", impl_->compile(spec));
}

void Jit::remove(KernelHandle handle) {
  if (llvm::Error err = impl_->remove(handle))
    throw_error("removing kernel", std::move(err));
}

std::string Jit::optimized_ir(const KernelSpec& spec) const {
  return unwrap("lowering elementwise kernel", impl_->optimized_ir(spec));
}

CompiledGemm Jit::compile_gemm(const GemmSpec& spec) {
  return unwrap("compiling gemm kernel", impl_->compile_gemm(spec));
}

std::string Jit::optimized_ir(const GemmSpec& spec) const {
  return unwrap("lowering gemm kernel", impl_->optimized_ir(spec));
}

CompiledReduce Jit::compile_reduce(const ReduceSpec& spec) {
  return unwrap("compiling reduce kernel", impl_->compile_reduce(spec));
}

std::string Jit::optimized_ir(const ReduceSpec& spec) const {
  return unwrap("lowering reduce kernel", impl_->optimized_ir(spec));
}

std::string Jit::host_cpu() {
  return llvm::sys::getHostCPUName().str(); // what JITTargetMachineBuilder::detectHost() uses
}

const std::string& Jit::target_cpu() const {
  return impl_->target().cpu;
}
const std::string& Jit::target_features() const {
  return impl_->target().features;
}
int Jit::vector_lanes() const {
  return gemm_lanes(impl_->target());
}
int Jit::chain_width() const {
  return default_chain_width(impl_->target());
}
size_t Jit::live_kernels() const {
  return impl_->live_kernels();
}
std::string Jit::store_key(const KernelSpec& spec) const {
  return impl_->store_key(spec);
}

} // namespace pejit::jit
