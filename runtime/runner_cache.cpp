// The shared cache of template graphs (runner_cache.h).
#include "runtime/runner_cache.h"

#include "jit/kernel_cache.h"
#include "specializer/template_graph.h"

namespace pejit::runtime {

RunnerCache::RunnerCache(std::shared_ptr<const ir::Module> m, interp::DimBindings dims,
                         jit::KernelCache* kernels, GraphRunner::CompileScope scope)
    : m_(std::move(m)), dims_(std::move(dims)), kernels_(kernels), scope_(scope) {}

std::shared_ptr<const GraphRunner> RunnerCache::get(const specializer::Template& t, bool compile,
                                                    std::string* why) {
  std::string key = t.key();
  Entry e;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation_ != m_->generation()) { // definitions changed: every graph may be stale
      map_.clear();
      generation_ = m_->generation();
    }
    auto it = map_.find(key);
    if (it != map_.end()) {
      e = it->second;
      found = true;
    }
  }
  bool want_compile = compile && kernels_ != nullptr;
  if (found && (!e.runner || e.compiled || e.failed || !want_compile)) {
    if (why != nullptr)
      *why = e.why;
    return e.runner;
  }
  if (!found) {
    try {
      specializer::TemplateOptions opt;
      opt.lower.kernels = kernels_ != nullptr; // without a JIT: reference steps only
      auto r = std::make_shared<GraphRunner>(specializer::compile_template(*m_, dims_, t, opt));
      if (r->supported())
        e.runner = std::move(r);
      else
        e.why = r->why();
    } catch (const std::exception& ex) {
      e.why = ex.what();
    }
    // Nothing to compile.
    e.compiled =
        e.runner && (scope_.forward_only ? e.runner->forward_compiled() : e.runner->compiled());
  }
  std::string failure;
  if (e.runner && want_compile && !e.compiled) {
    auto c = std::make_shared<GraphRunner>(*e.runner);
    try {
      c->compile(*kernels_, inject_, scope_);
      e.runner = std::move(c);
      e.compiled = true;
    } catch (const std::exception& ex) {
      e.failed = true;
      failure = e.failure = t.name + ": " + ex.what();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry& slot = map_[key];
  // Another thread may have compiled it meanwhile, or failed to: then its outcome stands, and
  // its failure is the one listed (a template is listed once however many threads tried it).
  const bool ours = !slot.compiled && !slot.failed;
  if (ours)
    slot = e;
  if (!failure.empty() && ours) {
    failures_.push_back(failure);
    any_failure_ = true;
  }
  if (why != nullptr)
    *why = slot.why;
  return slot.runner;
}

std::string RunnerCache::failure(const specializer::Template& t) const {
  if (!any_failure_)
    return {};
  std::string key = t.key();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  return it != map_.end() && it->second.failed ? it->second.failure : std::string();
}

std::vector<std::string> RunnerCache::compile_failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

} // namespace pejit::runtime
