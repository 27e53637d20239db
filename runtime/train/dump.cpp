// `pejit dump`: what specialization makes of one batch (counts, planning time, then the
// templates, instances, plan, graph, kernels or LLVM IR), straight from the specializer and
// the kernel dump: tooling, no session or engine.
#include "runtime/train/trainer.h"

#include "runtime/exec_layout.h"
#include "runtime/kernel_dump.h"
#include "runtime/schedule_api.h"
#include "runtime/train/common.h"
#include "specializer/dump.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#ifdef PEJIT_HAVE_CUDA
#include "runtime/cuda/gpu_kernels.h"
#endif

#include <cstdio>
#include <numeric>
#include <optional>
#include <ostream>

namespace pejit::runtime {

using interp::Value;

void dump(const DumpOptions& opt, std::ostream& out, std::ostream* warnings) {
  if (opt.batch < 1)
    throw Error("--batch must be >= 1");
  // The database as a session loads it (CompileOptions::schedules), with its warning.
  std::optional<ScheduleDB> db;
  if (!opt.tuned.empty())
    db = ScheduleDB::load(opt.tuned);
  const jit::ScheduleDB* tuned = db ? db->impl().db.get() : nullptr;
  auto m = load_model(opt.model);
  if (db && warnings != nullptr && !db->warning().empty())
    *warnings << "warning: " << db->warning() << "\n";
  ir::Type elem = batch_element_type(*m, opt.entry);
  data::Vocab vocab;
  Dataset ds = read_dataset(opt.data, vocab, true, elem);
  interp::DimBindings dims = interp::bind_dims(*m, vocab_dims(*m, vocab));
  size_t lo = static_cast<size_t>(opt.batch_index) * static_cast<size_t>(opt.batch);
  if (opt.batch_index < 0 || lo >= ds.size())
    throw Error("--batch-index " + std::to_string(opt.batch_index) + " is past the data (" +
                std::to_string(ds.size()) + " examples)");
  size_t hi = std::min(ds.size(), lo + static_cast<size_t>(opt.batch));
  std::vector<size_t> idx(ds.size());
  std::iota(idx.begin(), idx.end(), 0);
  const Encoder enc(*m, ds, elem, dims);
  Value batch = enc.batch(ds, idx, lo, hi);

  specializer::TemplateTable tt;
  auto t0 = Clock::now();
  auto pe = specializer::partially_evaluate(*m, dims, opt.entry, batch, tt);
  auto t1 = Clock::now();
  if (!pe.ok)
    throw Error("entry '" + opt.entry + "' cannot be specialized: " + pe.where.str() + ": " +
                pe.reason);
  size_t merged = 0;
  if (opt.merge) // as the engine plans (EngineOptions::merge_equal)
    merged =
        specializer::merge_equal_instances(pe.residual, specializer::equal_payload_slots(batch));
  specializer::Plan plan = specializer::make_plan(pe.residual, tt);
  auto t2 = Clock::now();
  char buf[240];
  std::snprintf(buf, sizeof buf,
                "batch %lld: %zu examples, partial evaluation %.0f us, planning %.0f us, %zu "
                "instances merged into equal ones\n",
                static_cast<long long>(opt.batch_index), hi - lo, secs(t0, t1) * 1e6,
                secs(t1, t2) * 1e6, merged);
  out << buf << specializer::dump_counts(pe.residual, plan, tt);
  {
    // The executor's arena for this plan: forward blocks, and with the seed and gradient
    // blocks of training.
    ExecLayout layout = make_layout(plan, pe.residual);
    out << "arena_bytes_forward=" << layout.forward_elems * 4
        << " arena_bytes_training=" << layout.total_elems * 4 << "\n";
  }
  if (opt.emit == "templates")
    out << specializer::dump_templates(pe.residual, tt, *m);
  else if (opt.emit == "instances")
    out << specializer::dump_instances(pe.residual, tt, *m);
  else if (opt.emit == "plan")
    out << plan.describe(tt);
  else if (opt.emit == "dot")
    out << specializer::dump_dot(pe.residual, tt, *m);
  else if (opt.emit == "kernels")
    out << print_kernel_dump(dump_kernels(*m, dims, plan, tt, false, tuned));
  else if (opt.emit == "llvm")
    out << print_kernel_llvm(dump_kernels(*m, dims, plan, tt, true, tuned));
  else if (opt.emit == "kernel-program")
    out << print_kernel_programs(*m, dims, plan, tt);
  else if (opt.emit == "ptx") {
#ifdef PEJIT_HAVE_CUDA
    if (!jit::PtxCompiler::available())
      throw Error("--emit ptx: this LLVM has no NVPTX target");
    jit::PtxCompiler ptx;
    out << cuda::print_gpu_kernels(cuda::plan_gpu_kernels(*m, dims, plan, pe.residual, tt), ptx);
#else
    throw Error("--emit ptx: this pejit was built without the CUDA backend (PEJIT_CUDA=OFF)");
#endif
  } else
    throw Error(
        "--emit must be templates, instances, plan, dot, kernels, kernel-program, llvm or ptx");
}

} // namespace pejit::runtime
