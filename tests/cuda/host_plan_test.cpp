// The CUDA executor's host side without a GPU (docs/cuda.md): the device memory of a model and
// of a TreeLSTM training plan (regions aligned and disjoint, the arena the CPU executor's, per
// batch only payloads in and the loss out), the launch list (levels in order, GEMMs of a level
// batched across its groups, weight gradients summed over every group), and the graph-capture
// decision keyed by plan identity.
#include "runtime/cuda/device_plan.h"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/graph_capture.h"
#include "runtime/cuda/launch_list.h"
#include "tests/support/planned_batch.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>

namespace tests_cuda_host_plan_test {

using namespace pejit;
using namespace pejit::runtime::cuda;

namespace {

std::vector<int64_t> input_bytes(const specializer::Residual& r) {
  std::vector<int64_t> b;
  for (const Tensor& t : r.inputs)
    b.push_back(static_cast<int64_t>(t.nbytes()));
  return b;
}

void check_disjoint_aligned(const std::vector<DeviceRegion>& regions, int64_t total) {
  int64_t end = 0;
  for (const DeviceRegion& r : regions) {
    CAPTURE(r.name);
    CHECK(r.offset % kDeviceAlign == 0);
    CHECK(r.offset >= end); // in order, no overlap
    CHECK(r.bytes > 0);
    end = r.offset + r.bytes;
  }
  CHECK(end <= total);
  CHECK(total % kDeviceAlign == 0);
}

// The GPU kernels of every template the plan launches, by template id.
std::vector<std::vector<GpuKernel>> kernels_by_template(const test::PlannedBatch& pb) {
  std::vector<std::vector<GpuKernel>> ks(pb.tt.size());
  for (const auto& g : pb.plan.groups) {
    if (g.tmpl < 0 || !ks[static_cast<size_t>(g.tmpl)].empty())
      continue;
    const specializer::Template& t = pb.tt.at(g.tmpl);
    if (t.kind == specializer::Template::Kind::Op && t.op == ops::OpId::Take)
      ks[static_cast<size_t>(g.tmpl)] = {take_kernel(t, "take")};
    else
      ks[static_cast<size_t>(g.tmpl)] =
          gpu_kernels(specializer::compile_template(*pb.m, pb.dims, t), t.name);
  }
  return ks;
}

} // namespace

TEST_SUITE("cuda") {
  TEST_CASE("device plan: a model's parameters, gradients and optimizer state") {
    std::vector<DeviceParam> ps = {
        {"W", 300 * 750, 0, 0}, {"b", 5, 0, 0}, {"emb", 1000 * 300, 64, 300}};
    ModelMemory sgd = plan_model_memory(ps, optim::Kind::Sgd);
    ModelMemory ada = plan_model_memory(ps, optim::Kind::Adagrad);
    ModelMemory adam = plan_model_memory(ps, optim::Kind::Adam);
    check_disjoint_aligned(adam.regions, adam.bytes);
    auto count = [](const ModelMemory& m, DeviceRegion::Kind k) {
      return std::count_if(m.regions.begin(), m.regions.end(),
                           [&](const DeviceRegion& r) { return r.kind == k; });
    };
    CHECK(count(sgd, DeviceRegion::Kind::State) == 0);
    CHECK(count(ada, DeviceRegion::Kind::State) == 3);
    // Adam's m and v: twice Adagrad's state, the rest equal.
    int64_t state_ada = 0, state_adam = 0;
    for (const auto& r : ada.regions)
      state_ada += r.kind == DeviceRegion::Kind::State ? r.bytes : 0;
    for (const auto& r : adam.regions)
      state_adam += r.kind == DeviceRegion::Kind::State ? r.bytes : 0;
    CHECK(state_ada == 4 * (300 * 750 + 5 + 1000 * 300));
    CHECK(state_adam == 2 * state_ada);
    // The embedding's gradient is its touched rows and their ids, not the table.
    for (const auto& r : ada.regions)
      if (r.kind == DeviceRegion::Kind::Grad && r.name == "emb")
        CHECK(r.bytes == 64 * (300 * 4 + 8));
    CHECK_THROWS(plan_model_memory({{"x", -1, 0, 0}}, optim::Kind::Sgd));
  }

  TEST_CASE("device plan: a TreeLSTM plan's arena is the executor's, and per batch only payloads "
            "in and the loss out") {
    test::PlannedBatch pb(8, 11);
    std::vector<int64_t> in = input_bytes(pb.pe.residual);
    REQUIRE(!in.empty());
    PlanMemory train = plan_device_memory(pb.plan, pb.layout, in, true);
    PlanMemory infer = plan_device_memory(pb.plan, pb.layout, in, false);
    check_disjoint_aligned(train.regions, train.bytes);
    CHECK(train.find(DeviceRegion::Kind::Arena)->bytes == 4 * pb.layout.total_elems);
    CHECK(infer.find(DeviceRegion::Kind::Arena)->bytes == 4 * pb.layout.forward_elems);
    CHECK(infer.find(DeviceRegion::Kind::SeedIndex) == nullptr); // no backward
    CHECK(train.find(DeviceRegion::Kind::SeedIndex) != nullptr);
    // Row sources: one device address per gathered row and per output.
    CHECK(train.find(DeviceRegion::Kind::RowIndex)->bytes ==
          8 * static_cast<int64_t>(pb.layout.sources.size() + pb.layout.outputs.size()));
    int64_t payload = 0;
    for (int64_t b : in)
      payload += (b + kPayloadAlign - 1) / kPayloadAlign * kPayloadAlign;
    CHECK(train.payload_bytes == payload);
    // The loss (one f32) and the bad-label word come back.
    CHECK(pb.plan.outputs.size() == 1);
    CHECK(train.download_bytes == 4 + 8);
    // A plan resident on the device needs only its payloads.
    CHECK(train.upload_bytes(true) == train.payload_bytes);
    CHECK(train.upload_bytes(false) == train.payload_bytes + train.index_bytes);
    MESSAGE("8 trees: arena " << train.find(DeviceRegion::Kind::Arena)->bytes << " B, index maps "
                              << train.index_bytes << " B, payloads " << train.payload_bytes
                              << " B, download " << train.download_bytes << " B");
    CHECK(train.find(DeviceRegion::Kind::Values) == nullptr); // not asked for
    // With the template graphs' own values: per group its rows times the per-row floats.
    std::vector<std::pair<int64_t, int64_t>> values(pb.tt.size());
    int64_t want = 0;
    for (const auto& g : pb.plan.groups) {
      if (g.tmpl < 0)
        continue;
      const specializer::Template& t = pb.tt.at(g.tmpl);
      if (t.kind == specializer::Template::Kind::Op)
        continue; // op.take: its rows are the gather's, in the arena
      TemplateValues v = template_values(specializer::compile_template(*pb.m, pb.dims, t));
      CHECK(v.per_row > 0);
      values[static_cast<size_t>(g.tmpl)] = {v.per_row, v.per_group};
      want += 4 * (v.per_row * static_cast<int64_t>(g.instances.size()) + v.per_group);
    }
    PlanMemory full = plan_device_memory(pb.plan, pb.layout, in, true, values);
    check_disjoint_aligned(full.regions, full.bytes);
    REQUIRE(full.find(DeviceRegion::Kind::Values) != nullptr);
    CHECK(full.find(DeviceRegion::Kind::Values)->bytes == want);
    CHECK(full.bytes > train.bytes);
    CHECK(full.upload_bytes(true) == train.upload_bytes(true)); // nothing more crosses the bus
    CHECK_THROWS(plan_device_memory(pb.plan, runtime::ExecLayout{}, in, true));
    CHECK_THROWS(plan_device_memory(pb.plan, pb.layout, {-4}, true));
  }

  TEST_CASE("launch list: levels in order, a level's GEMMs one cuBLAS call over its groups, "
            "weight gradients over every group") {
    test::PlannedBatch pb(6, 5);
    auto ks = kernels_by_template(pb);
    LaunchList fwd = make_launch_list(pb.plan, pb.layout, ks, false);
    LaunchList train = make_launch_list(pb.plan, pb.layout, ks, true);
    INFO(train.describe());
    CHECK(train.runs_on_device());
    CHECK(fwd.launches.size() < train.launches.size());
    // Forward levels ascending, then backward descending, then the parameter gradients.
    int last_pass = 0, last_level = -1;
    for (const Launch& l : train.launches) {
      int pass = static_cast<int>(l.pass);
      CHECK(pass >= last_pass);
      if (pass != last_pass)
        last_level = pass == 1 ? 1 << 30 : -1;
      if (l.pass == Launch::Pass::Forward)
        CHECK(l.level >= last_level);
      if (l.pass == Launch::Pass::Backward)
        CHECK(l.level <= last_level);
      last_pass = pass;
      last_level = l.level;
      if (!l.cublas) {
        CHECK(l.groups.size() == (l.fold ? l.groups.size() : 1));
        CHECK(l.block == 256);
        CHECK(l.grid >= 1);
        CHECK(static_cast<int64_t>(l.grid) * l.block >=
              std::min<int64_t>(l.elements, int64_t{132 * 16 * 256}));
      } else {
        CHECK(l.gemm_m.size() == l.groups.size());
      }
    }
    // The cell's forward GEMM at a level with several cell groups is one call for all of them.
    std::map<std::pair<int32_t, int32_t>, int> cell_groups; // (level, tmpl) -> groups
    for (size_t g = 0; g < pb.plan.groups.size(); ++g)
      if (pb.plan.groups[g].tmpl >= 0)
        cell_groups[{pb.plan.groups[g].level, pb.plan.groups[g].tmpl}]++;
    size_t gemm_calls = 0, gemm_groups = 0;
    for (const Launch& l : fwd.launches)
      if (l.cublas) {
        gemm_calls++;
        gemm_groups += l.groups.size();
        CHECK(static_cast<int>(l.groups.size()) == cell_groups[{l.level, l.tmpl}]);
      }
    CHECK(gemm_calls > 0);
    CHECK(gemm_groups >= gemm_calls);
    // Each weight gradient is one accumulating call over all of its template's groups.
    size_t wgrads = 0;
    for (const Launch& l : train.launches)
      if (l.pass == Launch::Pass::ParamGrads && l.cublas) {
        wgrads++;
        CHECK(l.accumulate);
        CHECK(l.trans_a);
      }
    CHECK(wgrads == 3); // leaf, cell, classifier weights
    CHECK(train.describe() == make_launch_list(pb.plan, pb.layout, ks, true).describe());
    // A template without kernels is an error, not a silent gap.
    auto missing = ks;
    for (auto& k : missing)
      k.clear();
    CHECK_THROWS(make_launch_list(pb.plan, pb.layout, missing, false));
    // A host-only step keeps the plan off the device, and says why.
    auto host = ks;
    for (auto& k : host)
      if (!k.empty()) {
        k.push_back(GpuKernel{"h", "ref %1", HostOnly{"%1 = foo(%0)"}, true});
        break;
      }
    LaunchList off = make_launch_list(pb.plan, pb.layout, host, false);
    CHECK(!off.runs_on_device());
    CHECK(off.host_only.at(0).find("foo") != std::string::npos);
  }

  TEST_CASE("graph capture: a plan is captured when it repeats, replayed after, evicted LRU") {
    CapturePolicy p(CaptureOptions{.sightings = 2, .min_launches = 4, .capacity = 2});
    using A = CaptureDecision::Action;
    CHECK(p.decide(1, 10).action == A::Launch);  // first sighting
    CHECK(p.decide(1, 10).action == A::Capture); // it repeats
    CHECK(p.decide(1, 10).action == A::Replay);
    CHECK(p.decide(1, 10).action == A::Replay);
    CHECK(p.decide(2, 3).action == A::Launch); // too few launches to gain anything
    CHECK(p.decide(2, 3).action == A::Launch);
    CHECK(p.decide(3, 10).action == A::Launch);
    CHECK(p.decide(3, 10).action == A::Capture);
    CHECK(p.captured() == 2);
    CHECK(p.decide(1, 10).action == A::Replay); // 1 most recently used, 3 least
    CHECK(p.decide(4, 10).action == A::Launch);
    CaptureDecision d = p.decide(4, 10);
    CHECK(d.action == A::Capture);
    REQUIRE(d.evict.has_value());
    CHECK(*d.evict == 3);
    CHECK(p.captured() == 2);
    CHECK(p.decide(3, 10).action == A::Capture); // seen before: captured again at once
    // A failed capture is never retried.
    p.forget(4, true);
    CHECK(p.decide(4, 10).action == A::Launch);
    CHECK(p.decide(4, 10).action == A::Launch);
    CHECK(p.stats().evictions == 2);
    CHECK(p.stats().replays == 3);
    CHECK_THROWS(CapturePolicy(CaptureOptions{.capacity = 0}));
  }
}

} // namespace tests_cuda_host_plan_test
