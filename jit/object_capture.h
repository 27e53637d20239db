// ObjectCapture: the llvm::ObjectCache through which Jit (jit.cpp, its only user) keeps the
// object files of the kernels it compiles for its object store (object_store.h), and kPipeline,
// what the store's key says of the optimization pipeline. A private header of pejit_jit: it
// shows LLVM types, so no public header includes it.
#pragma once

#include <llvm/ExecutionEngine/ObjectCache.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBuffer.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace pejit::jit {

// What decides a kernel's machine code beside the lowered IR and the target: optimize()'s
// pipeline. Change it when optimize() changes, so that stored objects of the old one miss.
constexpr const char* kPipeline = "O3 loop-vectorize slp-vectorize";

// Receives the object file of every module compiled and keeps those it was asked for (by
// module name) until taken. It never supplies one: a stored kernel is added as an object file
// before any IR is compiled.
class ObjectCapture final : public llvm::ObjectCache {
public:
  void expect(const std::string& name) {
    std::lock_guard lock(mu_);
    wanted_.insert(name);
  }
  // The object compiled for `name` ("" when none), forgotten here.
  std::string take(const std::string& name) {
    std::lock_guard lock(mu_);
    wanted_.erase(name);
    auto node = objects_.extract(name);
    return node ? std::move(node.mapped()) : std::string();
  }
  void notifyObjectCompiled(const llvm::Module* m, llvm::MemoryBufferRef obj) override {
    std::lock_guard lock(mu_);
    if (wanted_.count(m->getModuleIdentifier()))
      objects_[m->getModuleIdentifier()] = obj.getBuffer().str();
  }
  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module*) override { return nullptr; }

private:
  std::mutex mu_;
  std::unordered_set<std::string> wanted_;
  std::unordered_map<std::string, std::string> objects_;
};

} // namespace pejit::jit
