// Key + partial evaluation + planning time per shuffled-order 25-tree batch, measured alone
// (no execution): the specializer's per-batch cost. Prints the median, quartiles and the
// instance/group counts, in wall time and in the thread's CPU time (which leaves out the time
// the thread was preempted: on a shared host, the steadier figure to compare builds by).
// Usage: pejit_plan_bench [TRAIN_FILE] [BATCHES] [--no-fragments] [--warm] [--keep-inputs]
// [--no-merge]
// (--no-fragments: every inlined call evaluated, as before fragments, for A/B comparisons;
// --warm: one unmeasured pass over the data in file order first, so that the shuffled batches
// are measured as in a later epoch of training: every tree seen, in other batches;
// --keep-inputs: copy the payloads into Residual::inputs, which the engine does not;
// --no-merge: equal instances are not merged (the engine merges them: the payloads' equality
// pattern and merge_equal_instances count as planning);
// --dump FILE: every measured batch's residual and plan, in full, to FILE, to check that a
// change to the specializer leaves plans as they were)
#include "bench/plan_text.h"
#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"
#include "runtime/train/encode.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "src/types/check.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <time.h>

using namespace pejit;

static double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

// Everything a residual and its plan say (template ids included: the same table history).
static void dump_batch(std::ostream& os, const specializer::PeResult& pe,
                       const specializer::Plan& p) {
  const specializer::Residual& r = pe.residual;
  os << "batch ok " << pe.ok << " key " << r.key << " fuel " << r.fuel_used << " inputs "
     << r.num_inputs << " kept " << r.inputs.size() << " consts " << r.consts.size() << "\n";
  bench::write_residual_and_plan(os, r, p);
  os << "\n";
}

int main(int argc, char** argv) {
  std::string data = argc > 1 ? argv[1] : PEJIT_SOURCE_DIR "/../shared/data/sst/train.txt";
  size_t batches = argc > 2 ? std::stoul(argv[2]) : 200;
  specializer::PeOptions pe_opt;
  pe_opt.keep_inputs = false; // as the engine plans
  bool warm = false;
  std::string dump;
  bool merge = true;
  for (int a = 3; a < argc; ++a) {
    if (std::string(argv[a]) == "--dump" && a + 1 < argc)
      dump = argv[++a];
    if (std::string(argv[a]) == "--no-fragments")
      pe_opt.fragment_memo_bytes = 0;
    if (std::string(argv[a]) == "--no-merge")
      merge = false;
    if (std::string(argv[a]) == "--keep-inputs")
      pe_opt.keep_inputs = true;
    warm = warm || std::string(argv[a]) == "--warm";
  }
  auto m = std::make_shared<ir::Module>();
  Diagnostics d;
  if (!types::add_file(*m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d).ok) {
    std::fputs(d.render().c_str(), stderr);
    return 2;
  }
  data::Vocab v;
  std::vector<data::ParseTree> trees;
  if (std::filesystem::exists(data))
    trees = data::read_trees(data, v);
  else
    trees = data::gen_sst(8544, 1, data::Shape::Sst, v);
  auto dims = interp::bind_dims(*m, {{"V", static_cast<int64_t>(v.size())}});
  runtime::TreeEncoder enc(*m, "Tree");
  // A fixed shuffle, as in training.
  std::vector<size_t> order(trees.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  uint64_t s = 12345;
  for (size_t i = order.size(); i > 1; --i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    std::swap(order[i - 1], order[s % i]);
  }
  specializer::TemplateTable tt;
  for (size_t b = 0; warm && (b + 1) * 25 <= trees.size(); ++b) {
    interp::Values xs;
    for (size_t i = b * 25; i < (b + 1) * 25; ++i)
      xs.push_back(enc.encode(trees[i]));
    (void)specializer::partially_evaluate(*m, dims, "loss", interp::Value::list(xs), tt, pe_opt);
  }
  std::ofstream out;
  if (!dump.empty())
    out.open(dump);
  std::vector<double> pe_us, plan_us, cpu_us;
  size_t instances = 0, groups = 0, replayed = 0, recorded = 0;
  for (size_t b = 0; b < batches && (b + 1) * 25 <= trees.size(); ++b) {
    interp::Values xs;
    for (size_t i = b * 25; i < (b + 1) * 25; ++i)
      xs.push_back(enc.encode(trees[order[i]]));
    auto batch = interp::Value::list(xs);
    double c0 = thread_cpu_us();
    auto t0 = std::chrono::steady_clock::now();
    auto pe = specializer::partially_evaluate(*m, dims, "loss", batch, tt, pe_opt);
    auto t1 = std::chrono::steady_clock::now();
    if (merge)
      specializer::merge_equal_instances(pe.residual, specializer::equal_payload_slots(batch));
    auto plan = specializer::make_plan(pe.residual, tt);
    auto t2 = std::chrono::steady_clock::now();
    cpu_us.push_back(thread_cpu_us() - c0);
    pe_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    plan_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    if (out.is_open())
      dump_batch(out, pe, plan);
    instances += pe.residual.instances.size();
    replayed += pe.replayed;
    recorded += pe.recorded;
    groups += plan.groups.size();
  }
  if (out.is_open())
    for (size_t t = 0; t < tt.size(); ++t)
      out << "template " << t << " " << tt.at(static_cast<int32_t>(t)).key() << "\n";
  auto q = [](std::vector<double> v, double f) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(f * static_cast<double>(v.size() - 1))];
  };
  std::vector<double> total(pe_us.size());
  for (size_t i = 0; i < total.size(); ++i)
    total[i] = pe_us[i] + plan_us[i];
  std::printf("batches %zu of 25 trees: key+PE median %.0f us, planning median %.0f us, "
              "total median %.0f us (p25 %.0f, p75 %.0f); mean %.0f instances, %.1f groups\n",
              total.size(), q(pe_us, 0.5), q(plan_us, 0.5), q(total, 0.5), q(total, 0.25),
              q(total, 0.75), static_cast<double>(instances) / static_cast<double>(total.size()),
              static_cast<double>(groups) / static_cast<double>(total.size()));
  std::printf("fragments per batch: %.1f replayed, %.1f recorded\n",
              static_cast<double>(replayed) / static_cast<double>(total.size()),
              static_cast<double>(recorded) / static_cast<double>(total.size()));
  std::printf("thread CPU time: total median %.0f us (p25 %.0f, p75 %.0f)\n", q(cpu_us, 0.5),
              q(cpu_us, 0.25), q(cpu_us, 0.75));
  return 0;
}
