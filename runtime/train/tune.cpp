// `pejit tune`: finds the JIT kernels a model compiles on a data set's batches (planning
// only, nothing runs), measures candidate schedules for each on this machine and writes a
// tuned schedule database.
#include "runtime/train/trainer.h"

#include "jit/jit.h"
#include "jit/schedule.h"
#include "jit/tuner.h"
#include "runtime/kernel_dump.h"
#include "runtime/train/common.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"

#include <fmt/format.h>

#include <fstream>
#include <numeric>
#include <ostream>

namespace pejit::runtime {

using interp::Value;

size_t tune(const TuneOptions& opt, std::ostream& out) {
  if (opt.batch < 1)
    throw Error("--batch must be >= 1");
  if (opt.out.empty())
    throw Error("tune: --out names the database to write");
  auto m = load_model(opt.model);
  ir::Type elem = batch_element_type(*m, "loss");
  data::Vocab vocab;
  Dataset ds = read_dataset(opt.data, vocab, true, elem);
  ds.limit(opt.limit);
  interp::DimBindings dims = interp::bind_dims(*m, vocab_dims(*m, vocab));
  // Entries already in the database are kept (another CPU's, another model's): a corrupt one
  // is an error here, never silently overwritten.
  jit::ScheduleDB db(opt.out);
  if (std::ifstream(opt.out).good())
    db = jit::ScheduleDB::load(opt.out);

  // The kernels: those of every template the entries that training runs specialize to on
  // the data's batches (planning is cheap; nothing runs).
  std::vector<std::string> entries{"loss"};
  for (const char* e : {"infer_nodes", "infer"})
    if (m->fn(e) && m->fn(e)->is_entry)
      entries.push_back(e);
  const Encoder enc(*m, ds, elem, dims);
  std::vector<size_t> idx(ds.size());
  std::iota(idx.begin(), idx.end(), 0);
  specializer::TemplateTable tt;
  for (size_t lo = 0; lo < ds.size(); lo += static_cast<size_t>(opt.batch)) {
    Value batch = enc.batch(ds, idx, lo, std::min(ds.size(), lo + static_cast<size_t>(opt.batch)));
    for (const auto& e : entries)
      (void)specializer::partially_evaluate(*m, dims, e, batch, tt); // a refusal: nothing to tune
  }
  std::vector<jit::KernelSpec> specs = template_kernel_specs(*m, dims, tt);
  std::vector<jit::GemmSpec> gemms = template_gemm_specs(*m, dims, tt);
  if (specs.empty() && gemms.empty())
    throw Error("tune: '" + opt.model + "' compiles no JIT kernel on '" + opt.data + "'");

  jit::Jit jit(jit::JitOptions{.compile_threads = 0});
  jit::TuneTiming to;
  to.rows = opt.rows;
  to.min_ms = opt.min_ms;
  to.repeats = opt.repeats;
  out << "tuning " << specs.size() + gemms.size() << " kernels on " << jit.target_cpu() << " (rows";
  for (int64_t r : opt.rows)
    out << " " << r;
  out << ")\n";
  for (const auto& spec : specs) {
    jit::ScheduleEntry e = jit::tune_kernel(jit, spec, to);
    out << fmt::format("{}: {} ({} candidates; default {:.2f} us, chosen {:.2f} us)\n", e.signature,
                       e.schedule, e.candidates, e.default_us, e.best_us)
        << std::flush;
    db.put(std::move(e));
  }
  for (const auto& spec : gemms) { // weight gradients: their register block
    jit::ScheduleEntry e = jit::tune_kernel(jit, spec, to);
    out << fmt::format("{}: {} ({} candidates; default {:.2f} us, chosen {:.2f} us)\n", e.signature,
                       e.schedule, e.candidates, e.default_us, e.best_us)
        << std::flush;
    db.put(std::move(e));
  }
  db.save(opt.out);
  out << "wrote " << opt.out << " (" << db.size() << " entries)\n";
  return specs.size() + gemms.size();
}

} // namespace pejit::runtime
