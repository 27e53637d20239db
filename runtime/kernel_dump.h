// What the JIT makes of one batch's plan, for `pejit dump --emit kernels|llvm` and for the
// determinism tests (docs/architecture.md): per template of the plan, its fused kernels and, under
// each, the elementwise runs the JIT compiles, then its row reductions and loss kernels, with
// their schedule, its source, and optionally their optimized LLVM IR and its hash. The template
// graphs are built as the engine builds them (specializer::compile_template, GraphRunner with JIT
// runs), so the specs and the IR are those the engine compiles for the same plan.
#pragma once

#include "jit/gemm_codegen.h"
#include "jit/kernel_spec.h"
#include "jit/reduce_spec.h"
#include "jit/schedule.h"
#include "specializer/plan.h"
#include "specializer/residual.h"
#include "src/graph/graph.h"
#include "src/interp/params.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pejit::runtime {

/// One JIT elementwise run of a template's fused kernel.
struct KernelDumpRun {
  bool forward = true;
  size_t kernel = 0; ///< the kernel's index in fwd_kernels or bwd_kernels
  size_t run = 0;    ///< the run's index within its kernel
  jit::KernelSpec spec;
  std::string schedule;        ///< the schedule it compiles with
  std::string schedule_source; ///< where that came from: "default" or "tuned FILE entry N"
  std::string ir;              ///< optimized LLVM IR (with_ir only)
  uint64_t ir_hash = 0;        ///< jit::ir_text_hash(ir) (with_ir only)
};

/// One node of a template run on a row-reduction or loss kernel (jit/reduce_spec.h).
struct KernelDumpReduce {
  graph::NodeId node = graph::kNoNode;
  /// The node's kernel as "fwd K" / "bwd K", or "param grad" for the backward pass's sum over
  /// the rows of a per-row parameter gradient.
  std::string where;
  jit::ReduceSpec spec;
  std::string schedule = "default", schedule_source = "default"; ///< the family's only one
  std::string ir;       ///< optimized LLVM IR (with_ir only)
  uint64_t ir_hash = 0; ///< jit::ir_text_hash(ir) (with_ir only)
};

/// One weight gradient of a template run on a generated TN GEMM kernel (summed over every
/// group's rows by the plan executor).
struct KernelDumpGemm {
  graph::NodeId node = graph::kNoNode;
  std::string param; ///< the weight's name
  jit::GemmSpec spec;
  std::string schedule;        ///< the block it compiles with ("12x2")
  std::string schedule_source; ///< "default", or "tuned FILE entry N"
  std::string ir;              ///< optimized LLVM IR (with_ir only)
  uint64_t ir_hash = 0;        ///< jit::ir_text_hash(ir) (with_ir only)
};

/// One template of the plan.
struct KernelDumpTemplate {
  int32_t id = -1;     ///< in the plan's template table
  std::string name;    ///< "cell", "op.take", ...
  std::string kernels; ///< specializer::print_kernels of its graph: one line per fused kernel
  std::string why;     ///< non-empty: no graph runner (the batching interpreter runs it)
  std::vector<KernelDumpRun> runs;
  std::vector<KernelDumpReduce> reductions;
  std::vector<KernelDumpGemm> gemms;
};

/// The templates `plan` launches, in template order. With `with_ir`, a local Jit lowers and
/// optimizes every run (no code is linked). `schedules`: the tuned database the engine would
/// be given (null: none); each run's schedule is resolved against it for this host's CPU as
/// the kernel cache resolves it, so the IR is the IR the engine links. Throws pejit::Error
/// when the host has no JIT target.
std::vector<KernelDumpTemplate> dump_kernels(const ir::Module& m, const interp::DimBindings& dims,
                                             const specializer::Plan& plan,
                                             const specializer::TemplateTable& templates,
                                             bool with_ir,
                                             const jit::ScheduleDB* schedules = nullptr);

/// The elementwise kernel specs (no schedule named) of every template in `templates` that a
/// graph runner compiles, each once, by signature: what `pejit tune` measures.
std::vector<jit::KernelSpec> template_kernel_specs(const ir::Module& m,
                                                   const interp::DimBindings& dims,
                                                   const specializer::TemplateTable& templates);

/// The weight-gradient GEMM specs (no block named) of the same templates, each once.
std::vector<jit::GemmSpec> template_gemm_specs(const ir::Module& m, const interp::DimBindings& dims,
                                               const specializer::TemplateTable& templates);

/// Per template its kernel lines, each followed by its runs: the spec's canonical text, then
/// "schedule S (source: SRC)"; then its row reductions, "reduce %N (WHERE): TEXT" and their
/// schedule line; then its weight gradients, "gemm %N (weight grad PARAM): TEXT" and theirs.
std::string print_kernel_dump(const std::vector<KernelDumpTemplate>& ts);

/// The lowered kernel program (specializer::print_kernel_program) of every template `plan`
/// launches, in template order, each after a line "template NAME#ID", indented; no JIT needed.
std::string print_kernel_programs(const ir::Module& m, const interp::DimBindings& dims,
                                  const specializer::Plan& plan,
                                  const specializer::TemplateTable& templates);

/// The IR of every run, each preceded by "; kernel NAME#ID fwd|bwd K run R fnv=HASH" (HASH:
/// 16 hex digits of jit::ir_text_hash, FNV-1a 64), then of every row reduction, preceded by
/// "; reduce NAME#ID %N (WHERE) fnv=HASH", then of every weight-gradient GEMM, preceded by
/// "; gemm NAME#ID %N (weight grad PARAM) fnv=HASH". Needs dump_kernels(..., with_ir = true).
std::string print_kernel_llvm(const std::vector<KernelDumpTemplate>& ts);

} // namespace pejit::runtime
