// The schedule tuner (tuner.h). Inputs are random but seeded per row count, so every candidate
// of a kernel runs on the same data and its outputs can be compared bit for bit with the
// default's. A candidate's time at one row count is the fastest of `repeats` timings (taken
// round-robin over the candidates), each averaging enough calls to last `min_ms`; its cost is
// the sum over the row counts.
#include "jit/tuner.h"

#include "pejit/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <set>

namespace pejit::jit {

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Calls per timing so that one timing lasts about `min_ms` (after a warming call).
int64_t calls_per_timing(const std::function<void()>& call, const TuneTiming& opt) {
  call(); // warm: code and data in cache
  auto t0 = Clock::now();
  call();
  double one = std::max(us_since(t0), 0.01);
  return std::clamp<int64_t>(static_cast<int64_t>(opt.min_ms * 1e3 / one), 1, 1000000);
}

double time_us(const std::function<void()>& call, int64_t n) {
  auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i)
    call();
  return us_since(t0) / static_cast<double>(n);
}

// Magnitudes in [0.25, 2] with random signs: no division by zero, nothing overflows.
std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(0.25f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v)
    x = (rng() & 1) ? mag(rng) : -mag(rng);
  return v;
}

// Frees a candidate's code when it goes out of scope.
struct Removal {
  Jit& jit;
  KernelHandle handle;
  ~Removal() {
    try {
      jit.remove(handle);
    } catch (const Error&) {
      // The code stays mapped until the Jit dies; nothing else to do here.
    }
  }
};

// One candidate compiled: runs it at row-count index i on the shared data (outputs reset).
using Runner = std::function<void(size_t i)>;

struct Candidate {
  std::string schedule;
  Runner run;
  std::unique_ptr<Removal> code;
  std::vector<int64_t> calls;  ///< per row count: calls per timing
  std::vector<double> best_us; ///< per row count: the fastest timing so far
  double cost_us = 0;          ///< sum of best_us
};

// Compiles every candidate through `compile` (which returns its runner and its handle, or
// throws) and checks its outputs against the default's (`outputs(i)` returns them and resets
// them to their initial values). Then times them round-robin, `repeats` rounds, so that a
// drift in the machine's speed (other load, clocks) touches every candidate alike; a
// candidate's time at a row count is its fastest timing. Returns the entry of the winner.
ScheduleEntry
measure(Jit& jit, const std::string& signature, const std::string& family,
        const std::vector<std::string>& candidates, const TuneTiming& opt,
        const std::function<std::pair<Runner, KernelHandle>(const std::string&)>& compile,
        const std::function<std::vector<float>(size_t i)>& outputs) {
  const size_t nrows = opt.rows.size();
  std::vector<std::vector<float>> reference;
  std::vector<Candidate> cands;
  for (const std::string& sched : candidates) {
    std::pair<Runner, KernelHandle> k;
    try {
      k = compile(sched);
    } catch (const Error&) {
      if (sched == "default")
        throw;
      continue; // a candidate this target cannot compile is simply not a choice
    }
    std::unique_ptr<Removal> code(new Removal{jit, k.second}); // in place: no temporary
    bool same = true;
    for (size_t i = 0; i < nrows; ++i) {
      (void)outputs(i); // resets what an accumulating kernel's earlier runs left there
      k.first(i);
      std::vector<float> out = outputs(i);
      if (sched == "default")
        reference.push_back(std::move(out));
      else
        same &= out.size() == reference[i].size() &&
                std::memcmp(out.data(), reference[i].data(), out.size() * sizeof(float)) == 0;
    }
    if (!same)
      continue; // never choose a schedule that changes results
    Candidate c{sched, k.first, std::move(code), {}, {}, 0};
    for (size_t i = 0; i < nrows; ++i)
      c.calls.push_back(calls_per_timing([&] { c.run(i); }, opt));
    c.best_us.assign(nrows, std::numeric_limits<double>::infinity());
    cands.push_back(std::move(c));
  }
  for (int r = 0; r < std::max(1, opt.repeats); ++r)
    for (auto& c : cands)
      for (size_t i = 0; i < nrows; ++i)
        c.best_us[i] = std::min(c.best_us[i], time_us([&] { c.run(i); }, c.calls[i]));
  for (auto& c : cands)
    for (double t : c.best_us)
      c.cost_us += t;
  const Candidate& def = cands.front();
  const Candidate* best = &def;
  for (const auto& c : cands)
    if (c.cost_us < best->cost_us)
      best = &c;
  if (best->cost_us > def.cost_us * (1 - opt.margin))
    best = &def;
  ScheduleEntry e;
  e.signature = signature;
  e.cpu = jit.target_cpu();
  e.family = family;
  e.schedule = best->schedule;
  e.rows = opt.rows;
  e.default_us = def.cost_us;
  e.best_us = best->cost_us;
  e.candidates = static_cast<int>(cands.size());
  return e;
}

void check_rows(const TuneTiming& opt) {
  if (opt.rows.empty())
    throw Error("tune: no row counts to time");
  for (int64_t r : opt.rows)
    if (r < 1 || r > (int64_t{1} << 20))
      throw Error(fmt::format("tune: row count {} is not in 1..{}", r, int64_t{1} << 20));
}

} // namespace

std::vector<std::string> tune_candidates(const KernelSpec&, int lanes) {
  std::vector<std::string> out{"default"};
  for (int w : {lanes / 2, lanes, 2 * lanes})
    for (int u : {1, 2, 4})
      if (w >= 4 && (u < 4 || w == lanes))
        out.push_back(elementwise_schedule_text({w, u}));
  return out;
}

std::vector<std::string> tune_candidates(const GemmSpec& spec, int lanes) {
  std::vector<std::string> out{"default"};
  std::set<std::pair<int, int>> seen;
  GemmSpec d = spec;
  d.mr = d.nr = 0;
  GemmSpec r = d.resolved(lanes);
  seen.insert({r.mr, r.nr}); // the default block itself
  auto add = [&](int mr, int nr) {
    mr = std::clamp(mr, 1, 32);
    if (nr < 1 || nr > 32 || mr * nr > 28 || !seen.insert({mr, nr}).second)
      return;
    out.push_back(fmt::format("{}x{}", mr, nr));
  };
  if (spec.layout == GemmLayout::NT || spec.packs_b_transposed(lanes)) {
    // Blocks of rows x columns, each column a dot product over k.
    int64_t cols = spec.n;
    for (auto [mr, nr] : {std::pair{1, 8}, {2, 4}, {2, 8}, {3, 4}, {4, 4}, {4, 6}, {6, 4}, {2, 12}})
      if (nr <= cols)
        add(mr, nr);
    if (cols <= 28)
      for (int mr : {1, 2, 4})
        add(mr, static_cast<int>(cols));
  } else if (spec.tn_transposed(lanes)) {
    // Columns of C x vectors of its rows (C^T).
    int n = static_cast<int>(spec.n);
    for (int cols : {n, (n + 1) / 2, 1})
      for (int nr = 1; nr <= 6; ++nr)
        add(cols, nr);
  } else {
    // Rows x vectors of C.
    int vecs = static_cast<int>(std::min<int64_t>((spec.n + lanes - 1) / lanes, 4));
    for (int nr = 1; nr <= vecs; ++nr)
      for (int acc : {8, 12, 16, 24, 28})
        add(acc / nr, nr);
  }
  return out;
}

ScheduleEntry tune_kernel(Jit& jit, const KernelSpec& panel_spec, const TuneTiming& opt) {
  // A panel kernel's chain is tuned as the plain kernel (a database entry is keyed by the
  // signature, which leaves the panel out).
  KernelSpec spec = panel_spec;
  spec.panel_rows = 0;
  spec.in_panel.clear();
  spec.gemm_n = spec.gemm_k = 0;
  spec.gather_widths.clear();
  spec.fill_inputs.clear();
  if (spec.schedule != "default")
    throw Error("tune: the kernel names a schedule (" + spec.schedule + "); tune its default");
  spec.validate();
  check_rows(opt);
  struct Data {
    std::vector<std::vector<float>> in, out;
    std::vector<float*> inp, outp;
  };
  std::vector<Data> data(opt.rows.size());
  for (size_t i = 0; i < opt.rows.size(); ++i) {
    int64_t rows = opt.rows[i];
    std::mt19937 rng(static_cast<uint32_t>(1000 + rows));
    Data& d = data[i];
    for (size_t k = 0; k < spec.inputs.size(); ++k) {
      InputShape s = spec.inputs[k];
      // A strided array (a column block of a wider one) spans its whole rows.
      size_t n = s == InputShape::Full           ? static_cast<size_t>(rows * spec.in_stride(k))
                 : s == InputShape::RowBroadcast ? static_cast<size_t>(spec.width)
                                                 : 1;
      d.in.push_back(random_floats(n, rng));
    }
    for (size_t j = 0; j < spec.outputs.size(); ++j)
      d.out.emplace_back(static_cast<size_t>(rows * spec.out_stride(j)));
    for (auto& v : d.in)
      d.inp.push_back(v.data());
    for (auto& v : d.out)
      d.outp.push_back(v.data());
  }
  auto compile = [&](const std::string& cand) {
    KernelSpec s = spec;
    s.schedule = cand;
    CompiledKernel k = jit.compile(s);
    Runner run = [&data, &opt, fn = k.fn](size_t i) {
      fn(data[i].inp.data(), data[i].outp.data(), opt.rows[i]);
    };
    return std::pair{run, k.handle};
  };
  auto outputs = [&](size_t i) {
    std::vector<float> all;
    for (auto& v : data[i].out) {
      all.insert(all.end(), v.begin(), v.end());
      std::fill(v.begin(), v.end(), 0.0f);
    }
    return all;
  };
  return measure(jit, spec.signature(), "elementwise", tune_candidates(spec, jit.vector_lanes()),
                 opt, compile, outputs);
}

ScheduleEntry tune_kernel(Jit& jit, const GemmSpec& spec, const TuneTiming& opt) {
  if (spec.mr != 0 || spec.nr != 0)
    throw Error("tune: the gemm kernel names a block (" + spec.canonical_text() +
                "); tune its default");
  spec.validate();
  check_rows(opt);
  GemmSpec r = spec.resolved(jit.vector_lanes());
  bool tn = spec.layout == GemmLayout::TN;
  struct Data {
    std::vector<float> a, b, c, c0;
    std::vector<GemmStretch> st; ///< TN with stretches: the rows in three stretches
  };
  std::vector<Data> data(opt.rows.size());
  for (size_t i = 0; i < opt.rows.size(); ++i) {
    int64_t rows = opt.rows[i];
    std::mt19937 rng(static_cast<uint32_t>(2000 + rows));
    int64_t m = tn ? spec.m : rows, k = tn ? rows : spec.k;
    int64_t a_rows = tn ? k : m, b_rows = spec.layout == GemmLayout::NT ? spec.n : k;
    Data& d = data[i];
    d.a = random_floats(static_cast<size_t>(a_rows * r.lda), rng);
    d.b = random_floats(static_cast<size_t>(b_rows * r.ldb), rng);
    d.c0 = random_floats(static_cast<size_t>(m * r.ldc), rng);
    d.c = d.c0;
    for (int64_t s = 0, p0 = 0; s < 3 && spec.stretches; ++s) { // rows split 1/4, 1/4, 1/2
      int64_t p1 = s == 2 ? k : k * (s + 1) / 4;
      d.st.push_back({d.a.data() + p0 * r.lda, d.b.data() + p0 * r.ldb, p1 - p0});
      p0 = p1;
    }
  }
  auto compile = [&](const std::string& cand) {
    GemmSpec s = spec;
    parse_gemm_schedule(cand, s.mr, s.nr);
    CompiledGemm g = jit.compile_gemm(s);
    Runner run;
    if (g.stretches != nullptr)
      run = [&data, fn = g.stretches](size_t i) {
        fn(data[i].st.data(), static_cast<int64_t>(data[i].st.size()), data[i].c.data(), 1);
      };
    else
      run = [&data, &opt, fn = g.fn](size_t i) {
        fn(data[i].a.data(), data[i].b.data(), data[i].c.data(), opt.rows[i]);
      };
    return std::pair{run, g.handle};
  };
  auto outputs = [&](size_t i) {
    std::vector<float> c = data[i].c;
    data[i].c = data[i].c0; // an accumulating kernel starts from the same C every time
    return c;
  };
  ScheduleEntry e = measure(jit, spec.signature(), "gemm",
                            tune_candidates(spec, jit.vector_lanes()), opt, compile, outputs);
  // A GEMM kernel reports the block it compiles with (CachedKernel::schedule): so does its
  // entry, also when the default block won.
  if (e.schedule == "default")
    e.schedule = fmt::format("{}x{}", r.mr, r.nr);
  return e;
}

} // namespace pejit::jit
