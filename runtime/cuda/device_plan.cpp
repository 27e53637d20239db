// The device memory of a model and of a plan (device_plan.h). Regions are laid out in order,
// each aligned to kDeviceAlign; the arena keeps the CPU executor's element offsets (4-byte
// elements), so a block at element offset o of the CPU arena is at byte 4 * o of the device
// arena and the plan's index maps translate row sources once, on the host.
#include "runtime/cuda/device_plan.h"

#include "pejit/error.h"

#include <fmt/format.h>

namespace pejit::runtime::cuda {

const char* region_kind_name(DeviceRegion::Kind k) {
  switch (k) {
  case DeviceRegion::Kind::Param:
    return "param";
  case DeviceRegion::Kind::Grad:
    return "grad";
  case DeviceRegion::Kind::State:
    return "state";
  case DeviceRegion::Kind::Arena:
    return "arena";
  case DeviceRegion::Kind::Values:
    return "values";
  case DeviceRegion::Kind::RowIndex:
    return "row_index";
  case DeviceRegion::Kind::SeedIndex:
    return "seed_index";
  case DeviceRegion::Kind::Payload:
    return "payload";
  case DeviceRegion::Kind::Output:
    return "output";
  }
  return "?";
}

namespace {

int64_t align_up(int64_t n) {
  return (n + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
}

// Appends a region at the next aligned offset; empty regions are left out.
void place(std::vector<DeviceRegion>& regions, int64_t& end, DeviceRegion::Kind kind,
           std::string name, int64_t bytes) {
  if (bytes < 0)
    throw Error(fmt::format("device plan: region {} of {} bytes", name, bytes));
  if (bytes == 0)
    return;
  int64_t at = align_up(end);
  regions.push_back(DeviceRegion{kind, std::move(name), at, bytes});
  end = at + bytes;
}

} // namespace

ModelMemory plan_model_memory(const std::vector<DeviceParam>& params, optim::Kind rule) {
  ModelMemory m;
  int64_t end = 0;
  const int states = rule == optim::Kind::Sgd ? 0 : rule == optim::Kind::Adagrad ? 1 : 2;
  for (const DeviceParam& p : params) {
    if (p.numel < 0 || p.sparse_rows < 0 || p.row_width < 0)
      throw Error(fmt::format("device plan: parameter {} has a negative size", p.name));
    place(m.regions, end, DeviceRegion::Kind::Param, p.name, 4 * p.numel);
    // A row-sparse gradient: its coalesced rows (values, then their i64 ids), never the table.
    int64_t grad = p.sparse_rows > 0 ? p.sparse_rows * (4 * p.row_width + 8) : 4 * p.numel;
    place(m.regions, end, DeviceRegion::Kind::Grad, p.name, grad);
    place(m.regions, end, DeviceRegion::Kind::State, p.name, int64_t{4} * states * p.numel);
  }
  m.bytes = align_up(end);
  return m;
}

PlanMemory plan_device_memory(const specializer::Plan& plan, const ExecLayout& layout,
                              const std::vector<int64_t>& input_bytes, bool training,
                              const std::vector<std::pair<int64_t, int64_t>>& values) {
  if (layout.groups.size() != plan.groups.size() || layout.outputs.size() != plan.outputs.size())
    throw Error("device plan: the layout is not the plan's");
  PlanMemory pm;
  int64_t end = 0;
  place(pm.regions, end, DeviceRegion::Kind::Arena, "arena",
        4 * (training ? layout.total_elems : layout.forward_elems));
  // Each group's template values, one block per group (every group keeps its own until the
  // backward pass has read them).
  int64_t floats = 0;
  for (const specializer::Group& g : plan.groups)
    if (g.tmpl >= 0 && static_cast<size_t>(g.tmpl) < values.size()) {
      const auto& [per_row, per_group] = values[static_cast<size_t>(g.tmpl)];
      if (per_row < 0 || per_group < 0)
        throw Error(fmt::format("device plan: template {} has negative sizes", g.tmpl));
      floats += per_row * static_cast<int64_t>(g.instances.size()) + per_group;
    }
  place(pm.regions, end, DeviceRegion::Kind::Values, "template values", 4 * floats);
  // Every per-row argument's row and every output as a device address (i64).
  const int64_t rows = static_cast<int64_t>(layout.sources.size() + layout.outputs.size());
  place(pm.regions, end, DeviceRegion::Kind::RowIndex, "row sources", 8 * rows);
  if (training)
    place(pm.regions, end, DeviceRegion::Kind::SeedIndex, "seed maps",
          4 * static_cast<int64_t>(layout.seed_start.size()) +
              8 * static_cast<int64_t>(layout.seed_src.size()));
  int64_t payload = 0;
  for (size_t i = 0; i < input_bytes.size(); ++i) {
    if (input_bytes[i] < 0)
      throw Error(fmt::format("device plan: input slot {} of {} bytes", i, input_bytes[i]));
    // Packed (a batch has an input per word id and label: hundreds of scalars), each input
    // at a multiple of 16 bytes.
    payload += (input_bytes[i] + kPayloadAlign - 1) / kPayloadAlign * kPayloadAlign;
  }
  place(pm.regions, end, DeviceRegion::Kind::Payload, "inputs", payload);
  // The outputs' values (a loss, per-node predictions) and the first bad label's row.
  int64_t out = 8;
  for (const specializer::RowRef& r : plan.outputs)
    out +=
        4 * (r.kind == specializer::Ref::Kind::Inst ? layout.groups.at(static_cast<size_t>(r.index))
                                                          .results.at(static_cast<size_t>(r.out))
                                                          .row_elems
                                                    : 1);
  place(pm.regions, end, DeviceRegion::Kind::Output, "outputs", out);
  pm.bytes = align_up(end);
  for (const DeviceRegion& r : pm.regions) {
    if (r.kind == DeviceRegion::Kind::RowIndex || r.kind == DeviceRegion::Kind::SeedIndex)
      pm.index_bytes += r.bytes;
    if (r.kind == DeviceRegion::Kind::Payload)
      pm.payload_bytes = r.bytes;
    if (r.kind == DeviceRegion::Kind::Output)
      pm.download_bytes = r.bytes;
  }
  return pm;
}

const DeviceRegion* PlanMemory::find(DeviceRegion::Kind k) const {
  for (const DeviceRegion& r : regions)
    if (r.kind == k)
      return &r;
  return nullptr;
}

std::string print_regions(const std::vector<DeviceRegion>& regions) {
  std::string s;
  for (const DeviceRegion& r : regions)
    s += fmt::format("{} {} offset={} bytes={}\n", region_kind_name(r.kind), r.name, r.offset,
                     r.bytes);
  return s;
}

} // namespace pejit::runtime::cuda
