// The generated kernels run on a GPU (docs/cuda.md), against the CPU JIT's kernels on the same
// inputs: an elementwise chain and row gathers bit for bit (the same operations, no
// contraction), cross-entropy to a few ulps (logf is Cephes' on the GPU, libm's on the CPU)
// with the bad label reported, the row-sparse segment sum and an Adam step bit for bit.
// Skipped ("no CUDA device: ...") where there is no usable GPU: never run by this project's
// sessions so far.
#include "jit/jit.h"
#include "jit/ptx_codegen.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/launch_list.h"
#include "tests/support/skip.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>

namespace tests_cuda_gpu_run_test {

using namespace pejit;
using runtime::cuda::CudaDriver;
using runtime::cuda::DevicePtr;

namespace {

// The driver for device 0, or nothing (the case is then skipped with the probe's reason).
std::unique_ptr<CudaDriver> gpu_or_skip() {
  auto probe = runtime::cuda::probe_cuda_device(0);
  if (!probe.ok) {
    test::skip("no CUDA device: " + probe.why);
    return nullptr;
  }
  if (!jit::PtxCompiler::available()) {
    test::skip("this LLVM has no NVPTX target");
    return nullptr;
  }
  return std::make_unique<CudaDriver>(0);
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -4, float hi = 4) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v)
    x = u(g);
  return v;
}

template <class T> DevicePtr to_device(CudaDriver& d, const std::vector<T>& v) {
  DevicePtr p = d.alloc(v.size() * sizeof(T));
  d.upload(p, v.data(), v.size() * sizeof(T));
  return p;
}

template <class T> std::vector<T> from_device(CudaDriver& d, DevicePtr p, size_t n) {
  std::vector<T> v(n);
  d.download(v.data(), p, n * sizeof(T));
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

uint32_t grid(int64_t n) {
  return runtime::cuda::grid_for(n, {});
}

} // namespace

TEST_SUITE("cuda") {
  TEST_CASE("gpu: an elementwise chain gives the CPU JIT's bits") {
    auto d = gpu_or_skip();
    if (!d)
      return;
    jit::PtxCompiler pc;
    jit::Jit cpu;
    jit::KernelSpec s; // sigmoid(x * b + y), tanh(y), their product: the LSTM cell's kind
    s.width = 150;
    s.inputs = {jit::InputShape::Full, jit::InputShape::RowBroadcast, jit::InputShape::Full};
    s.ops = {{jit::ElementwiseOp::Mul, 0, 1},
             {jit::ElementwiseOp::Add, 3, 2},
             {jit::ElementwiseOp::Sigmoid, 4, -1},
             {jit::ElementwiseOp::Tanh, 2, -1},
             {jit::ElementwiseOp::Mul, 5, 6}};
    s.outputs = {5, 7};
    const int64_t rows = 1000;
    auto x = random_floats(rows * 150, 1), b = random_floats(150, 2),
         y = random_floats(rows * 150, 3);
    std::vector<float> o1(rows * 150), o2(rows * 150);
    float* in[] = {x.data(), b.data(), y.data()};
    float* out[] = {o1.data(), o2.data()};
    cpu.compile(s).fn(in, out, rows);
    void* fn = d->kernel(pc.elementwise(s, "chain"), "chain");
    DevicePtr dx = to_device(*d, x), db = to_device(*d, b), dy = to_device(*d, y);
    DevicePtr d1 = d->alloc(o1.size() * 4), d2 = d->alloc(o2.size() * 4);
    int64_t n = rows;
    d->launch(fn, grid(rows * 150), 256, {&dx, &db, &dy, &d1, &d2, &n});
    d->synchronize();
    CHECK(same_bits(from_device<float>(*d, d1, o1.size()), o1));
    CHECK(same_bits(from_device<float>(*d, d2, o2.size()), o2));
  }

  TEST_CASE("gpu: cross-entropy within a few ulps of the CPU JIT, a bad label reported") {
    auto d = gpu_or_skip();
    if (!d)
      return;
    jit::PtxCompiler pc;
    jit::Jit cpu;
    jit::ReduceSpec s{.kind = jit::ReduceKind::CrossEntropy, .width = 5};
    const int64_t rows = 777;
    auto x = random_floats(rows * 5, 4);
    std::vector<int32_t> labels(rows);
    for (int64_t r = 0; r < rows; ++r)
      labels[static_cast<size_t>(r)] = static_cast<int32_t>(r % 5);
    std::vector<float> want(rows);
    const void* in[] = {x.data(), labels.data()};
    void* out[] = {want.data()};
    CHECK(cpu.compile_reduce(s).fn(in, out, rows) == -1);
    void* fn = d->kernel(pc.reduce(s, "ce"), "ce");
    DevicePtr dx = to_device(*d, x), dl = to_device(*d, labels), dy = d->alloc(rows * 4);
    DevicePtr bad = to_device(*d, std::vector<int64_t>{-1});
    int64_t n = rows;
    d->launch(fn, grid(rows), 256, {&dx, &dl, &dy, &n, &bad});
    d->synchronize();
    auto got = from_device<float>(*d, dy, rows);
    for (int64_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      CHECK(std::fabs(got[r] - want[r]) <= 4e-7f * std::max(1.0f, std::fabs(want[r])));
    }
    CHECK(from_device<int64_t>(*d, bad, 1)[0] == -1);
    labels[500] = 9;
    labels[600] = -1;
    d->upload(dl, labels.data(), labels.size() * 4);
    d->launch(fn, grid(rows), 256, {&dx, &dl, &dy, &n, &bad});
    d->synchronize();
    CHECK(from_device<int64_t>(*d, bad, 1)[0] == 500);
  }

  TEST_CASE("gpu: row gathers, the segment sum and an Adam step, bit for bit") {
    auto d = gpu_or_skip();
    if (!d)
      return;
    jit::PtxCompiler pc;
    const int64_t w = 32, vocab = 50, n = 40;
    auto table = random_floats(vocab * w, 5);
    DevicePtr dt = to_device(*d, table);
    // A take of rows ids[r] through a table of row addresses.
    std::vector<int64_t> ids(n);
    std::vector<DevicePtr> rows_at(n);
    for (int64_t r = 0; r < n; ++r) {
      ids[r] = (r * 7) % 13; // duplicates
      rows_at[r] = dt + static_cast<DevicePtr>(ids[r] * w * 4);
    }
    jit::RowGatherSpec gs{.widths = {w}};
    void* gather = d->kernel(pc.gather(gs, "take"), "take");
    DevicePtr dst = d->alloc(n * w * 4), rows_tab = to_device(*d, rows_at);
    DevicePtr null = 0;
    int64_t nn = n;
    d->launch(gather, grid(n * w), 256, {&dst, &null, &rows_tab, &nn});
    d->synchronize();
    auto got = from_device<float>(*d, dst, n * w);
    bool gather_ok = true;
    for (int64_t r = 0; r < n; ++r)
      gather_ok &= std::memcmp(&got[r * w], &table[ids[r] * w], w * 4) == 0;
    CHECK(gather_ok);

    // The segment sum of gradient rows by id, in order (RowSparse::coalesce's order).
    auto g = random_floats(n * w, 6);
    std::vector<int64_t> order, offsets = {0}, uniq;
    for (int64_t id = 0; id < 13; ++id) {
      bool any = false;
      for (int64_t r = 0; r < n; ++r)
        if (ids[r] == id) {
          order.push_back(r);
          any = true;
        }
      if (any) {
        uniq.push_back(id);
        offsets.push_back(static_cast<int64_t>(order.size()));
      }
    }
    const int64_t segs = static_cast<int64_t>(uniq.size());
    std::vector<float> want(segs * w);
    for (int64_t u = 0; u < segs; ++u)
      for (int64_t c = 0; c < w; ++c) {
        float acc = g[order[offsets[u]] * w + c];
        for (int64_t k = offsets[u] + 1; k < offsets[u + 1]; ++k)
          acc += g[order[k] * w + c];
        want[u * w + c] = acc;
      }
    void* seg = d->kernel(pc.segment_sum(jit::SegmentSumSpec{.width = w}, "seg"), "seg");
    DevicePtr dg = to_device(*d, g), dord = to_device(*d, order), doff = to_device(*d, offsets);
    DevicePtr dsum = d->alloc(segs * w * 4);
    int64_t ns = segs;
    d->launch(seg, grid(segs * w), 256, {&dsum, &dg, &dord, &doff, &ns});
    d->synchronize();
    auto sums = from_device<float>(*d, dsum, segs * w);
    CHECK(same_bits(sums, want));

    // An Adam step on the coalesced rows (update_span's operations, in C++ without contraction).
    auto m = random_floats(vocab * w, 7, -0.1f, 0.1f), v = random_floats(vocab * w, 8, 0, 0.1f);
    std::vector<float> p = table, pm = m, pv = v;
    const float lr = 0.01f, wd = 0.0f, coef = 1.0f, eps = 1e-8f, b1 = 0.9f, b2 = 0.999f;
    const float omb1 = 1.0f - b1, omb2 = 1.0f - b2;
    const float step_size = static_cast<float>(0.01 / (1.0 - std::pow(0.9, 3)));
    const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(0.999, 3)));
    for (int64_t u = 0; u < segs; ++u)
      for (int64_t c = 0; c < w; ++c) {
        size_t k = static_cast<size_t>(uniq[u] * w + c);
        float gi = sums[u * w + c];
        float mk = b1 * pm[k] + omb1 * gi;
        float vk = b2 * pv[k] + omb2 * gi * gi;
        pm[k] = mk;
        pv[k] = vk;
        p[k] -= step_size * mk / (std::sqrt(vk) / bc2_sqrt + eps);
      }
    jit::OptimizerStepSpec os{
        .rule = jit::OptimizerStepSpec::Rule::Adam, .sparse = true, .width = w};
    void* adam = d->kernel(pc.optimizer_step(os, "adam"), "adam");
    DevicePtr dm = to_device(*d, m), dv = to_device(*d, v), dids = to_device(*d, uniq);
    std::vector<void*> params = {&dt, &dsum, &dm, &dv, &dids, &ns};
    float hyper[] = {lr, wd, coef, eps, b1, b2, omb1, omb2, step_size, bc2_sqrt};
    for (float& h : hyper)
      params.push_back(&h);
    d->launch(adam, grid(segs * w), 256, params);
    d->synchronize();
    CHECK(same_bits(from_device<float>(*d, dt, p.size()), p));
    CHECK(same_bits(from_device<float>(*d, dm, pm.size()), pm));
    CHECK(same_bits(from_device<float>(*d, dv, pv.size()), pv));
  }
}

} // namespace tests_cuda_gpu_run_test
