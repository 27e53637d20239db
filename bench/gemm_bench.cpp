// pejit_gemm_bench: GFLOP/s of the GEMM core at the TreeLSTM plan's real shapes:
// (a) the JIT's generated register-blocked kernel (jit/gemm_codegen.h), (b) kernels::sgemm as
// the reference kernels call it (built for AVX-512: src/kernels/gemm.cpp's register-blocked
// kernels, B^T transposed into scratch; else libxsmm's per-shape kernels in row panels of 64),
// (b'') kernels::sgemm_packed on B packed once (NN: W; NT: W^T, as a plan run's dX does),
// (b') libxsmm_smmdispatch for the whole shape where it gives a kernel, (c) OpenBLAS
// cblas_sgemm when built with it. One thread. With --packed, (a) is the panel kernels'
// generated core on the packed B of (b'').
//
// Per (shape, rows, implementation): one untimed call, then --reps repetitions, interleaved
// across implementations; each repetition times back-to-back calls on the same operands for at
// least --min-ms and gives GFLOP/s = 2*M*N*K / time per call. The table shows medians. The
// first line is this machine's SGEMM peak in the same run: the best of libxsmm over a few large
// square-ish shapes. `--dw`: the weight gradients alone, as a plan step runs them (K rows in
// stretches; generated TN vs kernels::sgemm_tn_stretches vs libxsmm and OpenBLAS on the stacked
// rows; see run_dw_table).
#include "jit/jit.h"
#include "src/kernels/kernels.h"

#include <CLI/CLI.hpp>
#include <libxsmm.h>
#ifdef PEJIT_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace pejit;

namespace {

// One plan GEMM. Row-major; `rows` (M, or K for TN) is the batched level's row count.
struct PlanGemm {
  const char* name;
  jit::GemmLayout layout;
  int64_t m_or_k; ///< the static one of M (TN) and K (NN, NT)
  int64_t n;
};

const PlanGemm kShapes[] = {
    {"fwd leaf  [M,300]x[300,450]", jit::GemmLayout::NN, 300, 450},
    {"fwd cell  [M,300]x[300,750]", jit::GemmLayout::NN, 300, 750},
    {"classif.  [M,150]x[150,5]", jit::GemmLayout::NN, 150, 5},
    {"dX cell   [M,750]x[300,750]^T", jit::GemmLayout::NT, 750, 300},
    {"dX leaf   [M,450]x[300,450]^T", jit::GemmLayout::NT, 450, 300},
    {"dW cell   [M,300]^Tx[M,750]", jit::GemmLayout::TN, 300, 750},
    {"dW leaf   [M,300]^Tx[M,450]", jit::GemmLayout::TN, 300, 450},
};

struct Problem {
  jit::GemmLayout layout;
  int64_t m, n, k;
  bool accumulate; // weight gradients accumulate (C += A^T B), as a plan's do
  std::vector<float> a, b, c;
};

Problem make_problem(const PlanGemm& s, int64_t rows, std::mt19937& rng) {
  bool tn = s.layout == jit::GemmLayout::TN;
  Problem p{s.layout, tn ? s.m_or_k : rows, s.n, tn ? rows : s.m_or_k, tn, {}, {}, {}};
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, int64_t size) {
    v.resize(size_t(size));
    for (float& x : v)
      x = d(rng);
  };
  fill(p.a, p.m * p.k);
  fill(p.b, p.k * p.n);
  fill(p.c, p.m * p.n);
  return p;
}

using Call = std::function<void()>;

// The whole shape from libxsmm_smmdispatch (column-major view: C^T = op(B)^T op(A)^T), or an
// empty Call when libxsmm has no kernel for it.
Call xsmm_whole(Problem& p) {
  bool nt = p.layout == jit::GemmLayout::NT, tn = p.layout == jit::GemmLayout::TN;
  libxsmm_blasint m = libxsmm_blasint(p.n), n = libxsmm_blasint(p.m), k = libxsmm_blasint(p.k);
  libxsmm_blasint lda = nt ? k : m, ldb = tn ? n : k, ldc = m;
  int flags = (nt ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (tn ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) |
              (p.accumulate ? 0 : LIBXSMM_GEMM_FLAG_BETA_0);
  float alpha = 1, beta = p.accumulate ? 1 : 0;
  int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
  libxsmm_smmfunction fn =
      libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
  if (!fn)
    return {};
  return [fn, &p] { fn(p.b.data(), p.a.data(), p.c.data()); };
}

// B packed once, outside the timing (a plan run packs each weight once for all its levels).
Call packed_sgemm(Problem& p, std::vector<float>& packed) {
  if (p.layout == jit::GemmLayout::TN)
    return {};
  bool nt = p.layout == jit::GemmLayout::NT;
  packed.assign(size_t(kernels::packed_size(p.k, p.n)), 0.0f);
  kernels::pack_b(nt, p.k, p.n, p.b.data(), nt ? p.k : p.n, packed.data());
  return [&p, &packed] {
    kernels::sgemm_packed(p.m, p.n, p.k, p.a.data(), p.k, packed.data(), 0.0f, p.c.data(), p.n);
  };
}

Call xsmm_sgemm(Problem& p) {
  bool ta = p.layout == jit::GemmLayout::TN, tb = p.layout == jit::GemmLayout::NT;
  return [&p, ta, tb] {
    kernels::sgemm(ta, tb, p.m, p.n, p.k, 1.0f, p.a.data(), ta ? p.m : p.k, p.b.data(),
                   tb ? p.k : p.n, p.accumulate ? 1.0f : 0.0f, p.c.data(), p.n);
  };
}

#ifdef PEJIT_HAVE_OPENBLAS
Call openblas(Problem& p) {
  bool ta = p.layout == jit::GemmLayout::TN, tb = p.layout == jit::GemmLayout::NT;
  return [&p, ta, tb] {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                int(p.m), int(p.n), int(p.k), 1.0f, p.a.data(), int(ta ? p.m : p.k), p.b.data(),
                int(tb ? p.k : p.n), p.accumulate ? 1.0f : 0.0f, p.c.data(), int(p.n));
  };
}
#endif

// GFLOP/s of one repetition: back-to-back calls for at least min_ms.
double measure(const Call& call, double flops, double min_ms) {
  using clock = std::chrono::steady_clock;
  int64_t iters = 1;
  for (;;) {
    auto t0 = clock::now();
    for (int64_t i = 0; i < iters; ++i)
      call();
    double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if (ms >= min_ms)
      return flops * double(iters) / (ms * 1e6);
    iters = ms < min_ms / 16 ? iters * 8 : int64_t(double(iters) * 1.3 * min_ms / ms) + 1;
  }
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

std::string cell(double gflops) {
  if (gflops <= 0)
    return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", gflops);
  return buf;
}

std::string ratio(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", r);
  return buf;
}

std::string loadavg() {
  std::string s;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {};
    if (std::fgets(buf, sizeof buf, f))
      s = buf;
    std::fclose(f);
  }
  while (!s.empty() && s.back() == '\n')
    s.pop_back();
  return s;
}

// max |x - y| / max |y|: a sanity check that the generated kernel computes the same product.
double rel_diff(const std::vector<float>& x, const std::vector<float>& y) {
  double d = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    d = std::max(d, double(std::abs(x[i] - y[i])));
    s = std::max(s, double(std::abs(y[i])));
  }
  return s > 0 ? d / s : d;
}

// --dw: weight gradients dW [m, n] = X^T·dY as a plan step runs them: K rows in `nst` stretches
// (near-equal, each its own buffer, as a step's level groups sit apart in the arena), C not
// accumulated (beta 0). Generated TN kernel with stretches vs kernels::sgemm_tn_stretches (what
// plans ran before), libxsmm's whole-shape kernel on the rows stacked (one stretch), and
// OpenBLAS likewise. Every implementation's result is checked against the reference's bits.
struct DwShape {
  const char* name;
  int64_t m, n;
};

const DwShape kDwShapes[] = {
    {"dW cell  [K,300]^Tx[K,750]", 300, 750},
    {"dW leaf  [K,300]^Tx[K,450]", 300, 450},
    {"dW class [K,150]^Tx[K,5]", 150, 5},
};

void run_dw_table(jit::Jit& jit, const std::vector<int64_t>& rows_list, int nst_max, int reps,
                  double min_ms, const std::string& only, int mr, int nr, double peak,
                  bool with_openblas, std::mt19937& rng) {
  (void)with_openblas; // without OpenBLAS in the build
  std::printf("\n| shape | K | stretches | block | generated | sgemm_tn_stretches | libxsmm "
              "(whole, stacked) | OpenBLAS (stacked) | gen / tn_stretches (paired) | gen / "
              "libxsmm (paired) | gen / peak | bits |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (const DwShape& s : kDwShapes) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos)
      continue;
    jit::GemmSpec spec{
        .layout = jit::GemmLayout::TN, .m = s.m, .n = s.n, .mr = mr, .nr = nr, .stretches = true};
    jit::CompiledGemm g = jit.compile_gemm(spec);
    std::fprintf(stderr, "%s: compiled in %.1f ms, block %s\n", s.name, g.compile_ms,
                 g.schedule.c_str());
    for (int64_t k : rows_list)
      for (int nst : nst_max > 1 ? std::vector<int>{1, nst_max} : std::vector<int>{1}) {
        if (nst > k)
          continue;
        // Each stretch in its own buffer; the stacked copy for the whole-shape libraries.
        std::vector<std::vector<float>> a(static_cast<size_t>(nst)), b(static_cast<size_t>(nst));
        std::vector<kernels::GemmStretch> st;
        std::vector<jit::GemmStretch> jst;
        std::vector<float> a_all, b_all;
        for (int q = 0; q < nst; ++q) {
          int64_t kq = k * (q + 1) / nst - k * q / nst;
          a[size_t(q)].resize(size_t(kq * s.m));
          b[size_t(q)].resize(size_t(kq * s.n));
          for (float& x : a[size_t(q)])
            x = d(rng);
          for (float& x : b[size_t(q)])
            x = d(rng);
          a_all.insert(a_all.end(), a[size_t(q)].begin(), a[size_t(q)].end());
          b_all.insert(b_all.end(), b[size_t(q)].begin(), b[size_t(q)].end());
          st.push_back({a[size_t(q)].data(), b[size_t(q)].data(), kq});
          jst.push_back({a[size_t(q)].data(), b[size_t(q)].data(), kq});
        }
        std::vector<float> c(size_t(s.m * s.n), 0.0f), c_ref(c.size());
        double flops = 2.0 * double(s.m) * double(s.n) * double(k);
        std::vector<std::pair<std::string, Call>> impls;
        impls.emplace_back("gen", [&] { g.stretches(jst.data(), nst, c.data(), 0); });
        impls.emplace_back("tn", [&] {
          kernels::sgemm_tn_stretches(s.m, s.n, st.data(), st.size(), 0.0f, c.data(), s.n);
        });
        libxsmm_blasint xm = libxsmm_blasint(s.n), xn = libxsmm_blasint(s.m),
                        xk = libxsmm_blasint(k);
        int flags = LIBXSMM_GEMM_FLAG_TRANS_B | LIBXSMM_GEMM_FLAG_BETA_0;
        float alpha = 1, beta = 0;
        int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
        if (libxsmm_smmfunction fn =
                libxsmm_smmdispatch(xm, xn, xk, &xm, &xn, &xm, &alpha, &beta, &flags, &prefetch))
          impls.emplace_back("xsmm", [&, fn] { fn(b_all.data(), a_all.data(), c.data()); });
#ifdef PEJIT_HAVE_OPENBLAS
        if (with_openblas)
          impls.emplace_back("openblas", [&] {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(s.m), int(s.n), int(k), 1.0f,
                        a_all.data(), int(s.m), b_all.data(), int(s.n), 0.0f, c.data(), int(s.n));
          });
#endif
        // Bits: the generated kernel against the reference kernel it replaces.
        impls[1].second();
        c_ref = c;
        impls[0].second();
        bool same = std::memcmp(c.data(), c_ref.data(), c.size() * sizeof(float)) == 0;
        for (size_t i = 2; i < impls.size(); ++i) {
          impls[i].second();
          if (rel_diff(c, c_ref) > 1e-4)
            std::fprintf(stderr, "  WARNING %s K=%lld: %s differs by %.2e\n", s.name, (long long)k,
                         impls[i].first.c_str(), rel_diff(c, c_ref));
        }
        std::vector<std::vector<double>> res(impls.size());
        for (int r = 0; r < reps; ++r)
          for (size_t i = 0; i < impls.size(); ++i)
            res[i].push_back(measure(impls[i].second, flops, min_ms));
        // Ratios paired per repetition (gen and the others timed back to back), so that the
        // machine's speed swings between repetitions cancel.
        auto paired = [&](size_t i) {
          std::vector<double> r;
          for (int q = 0; q < reps; ++q)
            r.push_back(res[0][size_t(q)] / res[i][size_t(q)]);
          return median(r);
        };
        double gen = median(res[0]), tn = median(res[1]), xsmm = 0, ob = 0, gen_xsmm = 0;
        for (size_t i = 2; i < impls.size(); ++i) {
          (impls[i].first == "xsmm" ? xsmm : ob) = median(res[i]);
          if (impls[i].first == "xsmm")
            gen_xsmm = paired(i);
        }
        std::printf("| %s | %lld | %d | %s | %s | %s | %s | %s | %.3f | %s | %.2f | %s |\n", s.name,
                    (long long)k, nst, g.schedule.c_str(), cell(gen).c_str(), cell(tn).c_str(),
                    cell(xsmm).c_str(), cell(ob).c_str(), paired(1),
                    xsmm > 0 ? ratio(gen_xsmm).c_str() : "-", gen / peak, same ? "same" : "DIFFER");
        std::fflush(stdout);
      }
  }
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"pejit_gemm_bench: generated GEMM vs libxsmm (and OpenBLAS) at TreeLSTM shapes"};
  int reps = 7;
  double min_ms = 20;
  std::vector<int64_t> rows_list = {8, 32, 128, 512};
  std::string only;
  int mr = 0, nr = 0;
  bool no_openblas = false;
  bool dump_ir = false;
  bool packed_core = false;
  app.add_option("--reps", reps, "repetitions per (shape, rows, implementation); median shown");
  app.add_option("--min-ms", min_ms, "minimum time of one repetition");
  app.add_option("--rows", rows_list, "row counts M (K for weight gradients)")->delimiter(',');
  app.add_option("--only", only, "only shapes whose name contains this");
  app.add_option("--mr", mr, "generated kernel: block rows (with --nr; 0: default)");
  app.add_option("--nr", nr, "generated kernel: block vectors (NT: columns)");
  app.add_flag("--no-openblas", no_openblas, "skip OpenBLAS");
  app.add_flag("--packed", packed_core,
               "generated kernel: the panel kernels' core (GemmSpec::packed_b) on B packed as "
               "for sgemm_packed (NN and NT shapes; NT as NN on W^T)");
  app.add_flag("--ir", dump_ir, "print the generated kernels' optimized IR instead of timing");
  bool dw = false;
  int stretches = 12;
  app.add_flag("--dw", dw,
               "only weight gradients as a plan step runs them: generated TN with stretches vs "
               "sgemm_tn_stretches vs libxsmm (--rows: K, the step's rows)");
  app.add_option("--stretches", stretches, "--dw: also time K split into this many stretches");
  CLI11_PARSE(app, argc, argv);

#ifdef PEJIT_HAVE_OPENBLAS
  openblas_set_num_threads(1);
  bool have_openblas = !no_openblas;
#else
  bool have_openblas = false;
#endif
  libxsmm_init();
  std::printf("loadavg at start: %s\n", loadavg().c_str());
  std::mt19937 rng(42);

  // Peak: the best libxsmm median over large square-ish shapes, measured before and after the
  // table (other processes on a shared machine come and go); the table's last column uses the
  // larger.
  auto measure_peak = [&](const char* when) {
    double peak = 0;
    std::string shape;
    for (auto [m, n, k] : {std::tuple{256, 256, 256}, std::tuple{64, 512, 512},
                           std::tuple{128, 768, 512}, std::tuple{512, 512, 512}}) {
      PlanGemm s{"peak", jit::GemmLayout::NN, k, n};
      Problem p = make_problem(s, m, rng);
      Call call = xsmm_whole(p);
      if (!call)
        continue;
      call();
      std::vector<double> g;
      for (int r = 0; r < reps; ++r)
        g.push_back(measure(call, 2.0 * m * n * k, min_ms));
      double med = median(g);
      if (med > peak) {
        peak = med;
        shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
      }
    }
    std::printf("SGEMM peak %s (best libxsmm median, at MxNxK %s): %.1f GFLOP/s\n", when,
                shape.c_str(), peak);
    return peak;
  };
  double peak = dump_ir ? 0 : measure_peak("before");

  jit::Jit jit;
  std::printf("jit target: %s\n\n", jit.target_cpu().c_str());
  if (dw && dump_ir) {
    for (const DwShape& s : kDwShapes)
      std::printf("; %s\n%s\n", s.name,
                  jit.optimized_ir(jit::GemmSpec{.layout = jit::GemmLayout::TN,
                                                 .m = s.m,
                                                 .n = s.n,
                                                 .mr = mr,
                                                 .nr = nr,
                                                 .stretches = true})
                      .c_str());
    return 0;
  }
  if (dw) {
    run_dw_table(jit, rows_list, stretches, reps, min_ms, only, mr, nr, peak, have_openblas, rng);
    double after = measure_peak("after");
    std::printf("gen / peak above used %.1f (after: %.1f)\n", peak, after);
    std::printf("\nloadavg at end: %s\n", loadavg().c_str());
    return 0;
  }
  std::printf("| shape | M | block | generated | kernels::sgemm | sgemm_packed | libxsmm (whole) | "
              "OpenBLAS | gen / best other | gen / peak | best sgemm / peak |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const PlanGemm& s : kShapes) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos)
      continue;
    bool tn = s.layout == jit::GemmLayout::TN;
    if (packed_core && tn)
      continue;
    jit::GemmSpec spec{.layout = s.layout,
                       .m = tn ? s.m_or_k : 0,
                       .n = s.n,
                       .k = tn ? 0 : s.m_or_k,
                       .accumulate = tn,
                       .mr = mr,
                       .nr = nr};
    if (packed_core) {
      spec.layout = jit::GemmLayout::NN;
      spec.packed_b = true;
    }
    if (dump_ir) {
      std::printf("; %s\n%s\n", s.name, jit.optimized_ir(spec).c_str());
      continue;
    }
    jit::CompiledGemm g = jit.compile_gemm(spec);
    std::fprintf(stderr, "%s: compiled in %.1f ms, block %s\n", s.name, g.compile_ms,
                 g.schedule.c_str());
    for (int64_t rows : rows_list) {
      Problem p = make_problem(s, rows, rng);
      double flops = 2.0 * double(p.m) * double(p.n) * double(p.k);
      std::vector<float> packed;
      Call packed_call = packed_sgemm(p, packed);
      const float* gen_b = packed_core ? packed.data() : p.b.data();
      // Sanity: the generated kernel and libxsmm agree (on a copy of C).
      std::vector<float> c0 = p.c;
      g.fn(p.a.data(), gen_b, p.c.data(), rows);
      std::vector<float> c_gen = p.c;
      p.c = c0;
      xsmm_sgemm(p)();
      double diff = rel_diff(c_gen, p.c);
      if (diff > 1e-4)
        std::fprintf(stderr, "  WARNING %s M=%lld: generated differs from libxsmm by %.2e\n",
                     s.name, (long long)rows, diff);
      std::vector<std::pair<std::string, Call>> impls;
      impls.emplace_back("gen", [&] { g.fn(p.a.data(), gen_b, p.c.data(), rows); });
      impls.emplace_back("xsmm", xsmm_sgemm(p));
      if (packed_call)
        impls.emplace_back("packed", packed_call);
      if (Call w = xsmm_whole(p))
        impls.emplace_back("whole", w);
#ifdef PEJIT_HAVE_OPENBLAS
      if (have_openblas)
        impls.emplace_back("openblas", openblas(p));
#endif
      (void)have_openblas;
      std::vector<std::vector<double>> res(impls.size());
      for (auto& [name, call] : impls)
        call(); // untimed: first-call kernel generation, page faults
      for (int r = 0; r < reps; ++r)
        for (size_t i = 0; i < impls.size(); ++i)
          res[i].push_back(measure(impls[i].second, flops, min_ms));
      double gen = 0, xsmm = 0, pk = 0, whole = 0, ob = 0;
      for (size_t i = 0; i < impls.size(); ++i) {
        double med = median(res[i]);
        const std::string& name = impls[i].first;
        (name == "gen"      ? gen
         : name == "xsmm"   ? xsmm
         : name == "packed" ? pk
         : name == "whole"  ? whole
                            : ob) = med;
      }
      double best = std::max({xsmm, pk, whole});
      std::printf("| %s | %lld | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.2f |\n", s.name,
                  (long long)rows, g.schedule.c_str(), cell(gen).c_str(), cell(xsmm).c_str(),
                  cell(pk).c_str(), cell(whole).c_str(), cell(ob).c_str(), gen / best, gen / peak,
                  std::max(xsmm, pk) / peak);
      std::fflush(stdout);
    }
  }
  if (!dump_ir) {
    double after = measure_peak("after");
    std::printf("gen / peak above used %.1f; with the larger peak the ratios scale by %.2f\n", peak,
                peak / std::max(peak, after));
  }
  std::printf("\nloadavg at end: %s\n", loadavg().c_str());
  return 0;
}
