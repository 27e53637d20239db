// The kernels and JIT runs of one plan's templates (kernel_dump.h). The graphs are built
// afresh here, as RunnerCache builds them, so a dump never depends on what an engine has
// cached; only the IR needs LLVM, through a Jit of its own that links nothing.
#include "runtime/kernel_dump.h"

#include "jit/jit.h"
#include "runtime/graph_runner.h"
#include "specializer/template_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <set>
#include <sstream>

namespace pejit::runtime {

std::vector<KernelDumpTemplate> dump_kernels(const ir::Module& m, const interp::DimBindings& dims,
                                             const specializer::Plan& plan,
                                             const specializer::TemplateTable& templates,
                                             bool with_ir, const jit::ScheduleDB* schedules) {
  std::vector<bool> used(templates.size(), false);
  for (const auto& g : plan.groups)
    if (g.tmpl >= 0)
      used[static_cast<size_t>(g.tmpl)] = true;
  // A tuned entry applies to one CPU: the Jit names this host's, as the engine's does; a
  // GEMM's default block depends on the host's vector width.
  std::unique_ptr<jit::Jit> jit = std::make_unique<jit::Jit>();
  std::vector<KernelDumpTemplate> out;
  for (size_t id = 0; id < used.size(); ++id) {
    if (!used[id])
      continue;
    const specializer::Template& t = templates.at(static_cast<int32_t>(id));
    KernelDumpTemplate d;
    d.id = static_cast<int32_t>(id);
    d.name = t.name;
    try {
      GraphRunner runner(specializer::compile_template(m, dims, t));
      d.kernels = specializer::print_kernels(runner.graph());
      if (!runner.supported())
        d.why = runner.why();
      size_t run = 0;
      const GraphRunner::KernelRun* prev = nullptr;
      std::vector<GraphRunner::KernelRun> runs = runner.jit_runs();
      for (const auto& r : runs) {
        run =
            prev != nullptr && prev->forward == r.forward && prev->kernel == r.kernel ? run + 1 : 0;
        prev = &r;
        KernelDumpRun k;
        k.forward = r.forward;
        k.kernel = r.kernel;
        k.run = run;
        // Resolved as KernelCache::get resolves it: the same spec, the same IR.
        k.spec = jit::resolve_schedule(r.spec, schedules, jit->target_cpu(), k.schedule_source);
        k.schedule = k.spec.schedule;
        if (with_ir) {
          k.ir = jit->optimized_ir(k.spec);
          k.ir_hash = jit::ir_text_hash(k.ir);
        }
        d.runs.push_back(std::move(k));
      }
      const specializer::TemplateGraph& tg = runner.graph();
      for (const auto& r : runner.reduce_runs()) {
        KernelDumpReduce k;
        k.node = r.node;
        k.spec = r.spec;
        k.where = "param grad";
        for (int pass = 0; pass < 2 && !r.param_sum; ++pass) {
          const auto& ks = pass == 0 ? tg.fwd_kernels : tg.bwd_kernels;
          for (size_t ki = 0; ki < ks.size(); ++ki)
            if (std::find(ks[ki].nodes.begin(), ks[ki].nodes.end(), r.node) != ks[ki].nodes.end())
              k.where = fmt::format("{} {}", pass == 0 ? "fwd" : "bwd", ki);
        }
        if (with_ir) {
          k.ir = jit->optimized_ir(k.spec);
          k.ir_hash = jit::ir_text_hash(k.ir);
        }
        d.reductions.push_back(std::move(k));
      }
      for (const auto& w : runner.weight_grad_runs()) {
        KernelDumpGemm k;
        k.node = w.node;
        k.param = m.params()[static_cast<size_t>(w.param)]->name;
        // Resolved as KernelCache::get_gemm resolves it; the block is the one it compiles.
        k.spec = jit::resolve_schedule(w.spec, schedules, jit->target_cpu(), k.schedule_source);
        jit::GemmSpec r = k.spec.resolved(jit->vector_lanes());
        k.schedule = fmt::format("{}x{}", r.mr, r.nr);
        if (with_ir) {
          k.ir = jit->optimized_ir(k.spec);
          k.ir_hash = jit::ir_text_hash(k.ir);
        }
        d.gemms.push_back(std::move(k));
      }
    } catch (const std::exception& e) {
      d.why = e.what();
    }
    out.push_back(std::move(d));
  }
  return out;
}

namespace {

// `each(runner)` for every template with a graph runner (the others run through the batching
// interpreter: nothing to compile).
template <class Each>
void for_each_runner(const ir::Module& m, const interp::DimBindings& dims,
                     const specializer::TemplateTable& templates, Each each) {
  for (size_t id = 0; id < templates.size(); ++id) {
    const specializer::Template& t = templates.at(static_cast<int32_t>(id));
    std::unique_ptr<GraphRunner> runner;
    try {
      runner = std::make_unique<GraphRunner>(specializer::compile_template(m, dims, t));
    } catch (const std::exception&) {
      continue;
    }
    if (runner->supported())
      each(*runner);
  }
}

} // namespace

std::vector<jit::KernelSpec> template_kernel_specs(const ir::Module& m,
                                                   const interp::DimBindings& dims,
                                                   const specializer::TemplateTable& templates) {
  std::vector<jit::KernelSpec> out;
  std::set<std::string> seen;
  for_each_runner(m, dims, templates, [&](const GraphRunner& runner) {
    for (const auto& r : runner.jit_runs())
      if (seen.insert(r.spec.signature()).second)
        out.push_back(r.spec);
  });
  return out;
}

std::vector<jit::GemmSpec> template_gemm_specs(const ir::Module& m, const interp::DimBindings& dims,
                                               const specializer::TemplateTable& templates) {
  std::vector<jit::GemmSpec> out;
  std::set<std::string> seen;
  for_each_runner(m, dims, templates, [&](const GraphRunner& runner) {
    for (const auto& w : runner.weight_grad_runs())
      if (seen.insert(w.spec.signature()).second)
        out.push_back(w.spec);
  });
  return out;
}

std::string print_kernel_dump(const std::vector<KernelDumpTemplate>& ts) {
  std::string s;
  for (const auto& t : ts) {
    s += fmt::format("template {}#{}: {} jit run{}\n", t.name, t.id, t.runs.size(),
                     t.runs.size() == 1 ? "" : "s");
    if (!t.why.empty())
      s += fmt::format("  runs through the batching interpreter: {}\n", t.why);
    std::istringstream lines(t.kernels);
    std::string line;
    while (std::getline(lines, line)) {
      s += "  " + line + "\n";
      // "fwd 3: ..." names its kernel; its runs follow it.
      bool forward = line.rfind("fwd ", 0) == 0;
      size_t k = std::stoul(line.substr(4));
      for (const auto& r : t.runs)
        if (r.forward == forward && r.kernel == k)
          s += fmt::format("    run {}: {}\n      schedule {} (source: {})\n", r.run,
                           r.spec.canonical_text(), r.schedule, r.schedule_source);
    }
    for (const auto& r : t.reductions)
      s += fmt::format("  reduce %{} ({}): {}\n    schedule {} (source: {})\n", r.node, r.where,
                       r.spec.canonical_text(), r.schedule, r.schedule_source);
    for (const auto& g : t.gemms)
      s += fmt::format("  gemm %{} (weight grad {}): {}\n    schedule {} (source: {})\n", g.node,
                       g.param, g.spec.canonical_text(), g.schedule, g.schedule_source);
  }
  return s;
}

std::string print_kernel_programs(const ir::Module& m, const interp::DimBindings& dims,
                                  const specializer::Plan& plan,
                                  const specializer::TemplateTable& templates) {
  std::vector<bool> used(templates.size(), false);
  for (const auto& g : plan.groups)
    if (g.tmpl >= 0)
      used[static_cast<size_t>(g.tmpl)] = true;
  std::string s;
  for (size_t id = 0; id < used.size(); ++id) {
    if (!used[id])
      continue;
    const specializer::Template& t = templates.at(static_cast<int32_t>(id));
    s += fmt::format("template {}#{}\n", t.name, id);
    std::string text;
    try {
      specializer::TemplateGraph tg = specializer::compile_template(m, dims, t);
      text = specializer::print_kernel_program(tg, tg.program);
    } catch (const std::exception& e) {
      text = std::string("no graph: ") + e.what() + "\n";
    }
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line))
      s += "  " + line + "\n";
  }
  return s;
}

std::string print_kernel_llvm(const std::vector<KernelDumpTemplate>& ts) {
  std::string s;
  for (const auto& t : ts)
    for (const auto& r : t.runs)
      s += fmt::format("; kernel {}#{} {} {} run {} fnv={:016x}\n{}\n", t.name, t.id,
                       r.forward ? "fwd" : "bwd", r.kernel, r.run, r.ir_hash, r.ir);
  for (const auto& t : ts)
    for (const auto& r : t.reductions)
      s += fmt::format("; reduce {}#{} %{} ({}) fnv={:016x}\n{}\n", t.name, t.id, r.node, r.where,
                       r.ir_hash, r.ir);
  for (const auto& t : ts)
    for (const auto& g : t.gemms)
      s += fmt::format("; gemm {}#{} %{} (weight grad {}) fnv={:016x}\n{}\n", t.name, t.id, g.node,
                       g.param, g.ir_hash, g.ir);
  return s;
}

} // namespace pejit::runtime
