// The planning pipeline's work per batch, alone: what the engine's background pipeline does
// for a batch it has not planned yet (runtime/engine.cpp plan_ahead: the batch's facts, its
// plan key, then SpecializerService::make: partial evaluation, merging, planning, layout), on
// shuffled 25-example batches of any model `pejit train` takes, the last of EPOCHS epochs
// measured (earlier ones warm the fragment memo as training does; no plan cache, so every
// batch is planned). Reports per batch the user-mode instructions the thread retired (a count
// that does not depend on the host's load; "n/a" where perf events are not allowed) and its
// CPU time. Where the host has no hardware counters, callgrind counts the same instructions
// (but not in a PEJIT_NATIVE build on a host with AVX-512: valgrind stops at its first
// AVX-512 instruction):
//   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*plan_measured*'
//       pejit_plan_ahead_bench ...
// Else compare thread CPU times, paired (old and new builds alternated in one run), or see
// where the time goes with perf record --call-graph dwarf and perf annotate.
//
//   pejit_plan_ahead_bench [TRAIN_FILE] [EXAMPLES] [EPOCHS] [--model FILE.pe] [--dump FILE]
//                          [--separate-walks]
//
// --dump FILE: every measured batch's plan (its residual, groups and layout) to FILE, to
// check that a change to planning leaves every plan as it was. --separate-walks: the batch's
// facts by the four separate walks the engine made before specializer::walk_batch (A/B).
#include "bench/bench_data.h"
#include "bench/plan_text.h"
#include "pejit/pejit.h"
#include "runtime/chrome_trace.h"
#include "runtime/specializer_service.h"
#include "runtime/train/common.h"
#include "specializer/merge_instances.h"
#include "src/types/check.h"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

using namespace pejit;

namespace {

double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

// The calling thread's retired user-mode instructions; -1 when perf events are not allowed.
class Instructions {
public:
  Instructions() {
    perf_event_attr a;
    std::memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_HARDWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_HW_INSTRUCTIONS;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    fd_ = static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
  }
  ~Instructions() {
    if (fd_ >= 0)
      close(fd_);
  }
  int64_t read_now() const {
    int64_t v = -1;
    if (fd_ < 0 || ::read(fd_, &v, sizeof v) != sizeof v)
      return -1;
    return v;
  }

private:
  int fd_ = -1;
};

void dump_plan(std::ostream& os, const runtime::PlanEntry& e, uint64_t key) {
  const specializer::Residual& r = e.residual;
  os << "batch key " << key << " residual " << r.key << " fuel " << r.fuel_used << " inputs "
     << r.num_inputs << " consts " << r.consts.size() << "\n";
  bench::write_residual_and_plan(os, r, e.plan);
  os << "\nlayout " << e.layout.bytes() << "\n";
  bench::write_layout(os, e.layout);
  os << "\n";
}

// What the pipeline does for one batch (runtime/engine.cpp: the facts, the key, make).
// With `separate`, the batch's facts are found as the engine found them before walk_batch:
// four walks (nesting_depth, skeleton_hash, equal_payload_slots, batch_payloads), and
// partial evaluation measures the depth and hashes the skeleton again.
bool separate = false;

[[gnu::noinline]] std::shared_ptr<const runtime::PlanEntry>
plan_batch(runtime::SpecializerService& service, const interp::Value& batch,
           runtime::PlanKey& key) {
  runtime::BatchPart f;
  if (separate) {
    (void)interp::nesting_depth(batch);
    f.key.hash = specializer::skeleton_hash(batch);
    f.key.slots = specializer::equal_payload_slots(batch);
    f.key.hash = runtime::SpecializerService::with_pattern(f.key.hash, f.key.slots);
    specializer::batch_payloads(batch, f.payloads);
  } else {
    f = service.batch_part(batch);
  }
  key = service.key("loss", std::move(f.key));
  std::string why;
  double s = 0;
  return service.make("loss", batch, key.slots, why, s,
                      separate ? runtime::BatchKnown{} : runtime::BatchKnown{f.depth, f.skeleton});
}

// The same, for the measured epoch: under valgrind --tool=callgrind --collect-atstart=no
// --toggle-collect=plan_measured, only these batches are counted (where the host has no
// hardware counters).
[[gnu::noinline]] std::shared_ptr<const runtime::PlanEntry>
plan_measured(runtime::SpecializerService& service, const interp::Value& batch,
              runtime::PlanKey& key) {
  return plan_batch(service, batch, key);
}

} // namespace

int main(int argc, char** argv) {
  pejit::keep_freed_memory(); // as `pejit` does
  std::vector<std::string> pos;
  std::string model = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", dump;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc)
      model = argv[++i];
    else if (a == "--separate-walks")
      separate = true;
    else if (a == "--dump" && i + 1 < argc)
      dump = argv[++i];
    else if (a.rfind("--", 0) != 0 && pos.size() < 3)
      pos.push_back(a);
    else {
      std::fprintf(stderr, "pejit_plan_ahead_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const std::string data = !pos.empty() ? pos[0] : PEJIT_SOURCE_DIR "/../shared/data/sst/train.txt";
  const size_t limit = pos.size() > 1 ? std::stoul(pos[1]) : 2000;
  const int epochs = pos.size() > 2 ? std::stoi(pos[2]) : 2;
  auto m = std::make_shared<ir::Module>();
  Diagnostics d;
  if (!types::add_file(*m, model, d).ok) {
    std::fputs(d.render().c_str(), stderr);
    return 2;
  }
  data::Vocab v;
  std::vector<interp::Value> encoded;
  interp::DimBindings dims;
  try {
    const ir::Type elem = runtime::batch_element_type(*m, "loss");
    runtime::Dataset ds = runtime::read_dataset(data, v, true, elem);
    bench::EncodedData e = bench::encode_examples(*m, ds, elem, v, limit);
    dims = std::move(e.dims);
    encoded = std::move(e.examples);
  } catch (const Error& e) {
    std::fprintf(stderr, "pejit_plan_ahead_bench: %s\n", e.what());
    return 2;
  }
  if (encoded.size() < 25) {
    std::fprintf(stderr, "pejit_plan_ahead_bench: %zu examples; a batch takes 25\n",
                 encoded.size());
    return 2;
  }

  runtime::ChromeTrace trace(false);
  runtime::SpecializerService service(m, dims, true, nullptr, trace);
  std::ofstream out;
  if (!dump.empty()) {
    out.open(dump);
    service.keep_instances(true); // the dump writes every instance's rows
  }
  Instructions ins;
  std::vector<size_t> order(encoded.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(1);
  std::vector<double> cpu_us;
  int64_t instructions = 0;
  size_t refused = 0;
  for (int ep = 0; ep < epochs; ++ep) {
    std::shuffle(order.begin(), order.end(), rng);
    const bool measured = ep + 1 == epochs;
    for (size_t b = 0; (b + 1) * 25 <= order.size(); ++b) {
      interp::Values xs;
      for (size_t i = b * 25; i < (b + 1) * 25; ++i)
        xs.push_back(encoded[order[i]]);
      const interp::Value batch = interp::Value::list(std::move(xs));
      const int64_t i0 = ins.read_now();
      const double c0 = thread_cpu_us();
      runtime::PlanKey key;
      auto e = measured ? plan_measured(service, batch, key) : plan_batch(service, batch, key);
      const double c1 = thread_cpu_us();
      const int64_t i1 = ins.read_now();
      if (!e)
        ++refused;
      if (!measured)
        continue;
      cpu_us.push_back(c1 - c0);
      instructions += i1 - i0;
      if (out.is_open() && e)
        dump_plan(out, *e, key.hash);
    }
  }
  std::vector<double> sorted = cpu_us;
  std::sort(sorted.begin(), sorted.end());
  auto q = [&](double f) { return sorted[static_cast<size_t>(f * (sorted.size() - 1))]; };
  const double n = static_cast<double>(cpu_us.size());
  std::printf("%s: %zu batches of 25 planned (%zu refused); per batch: ", model.c_str(),
              cpu_us.size(), refused);
  if (ins.read_now() >= 0)
    std::printf("%.0f instructions, ", static_cast<double>(instructions) / n);
  else
    std::printf("instructions n/a, ");
  std::printf("thread CPU median %.0f us (p25 %.0f, p75 %.0f)\n", q(0.5), q(0.25), q(0.75));
  return 0;
}
