// What the CUDA executor keeps on the device and moves across the bus (docs/cuda.md), decided
// on the host from the plan executor's own layout (exec_layout.h), so that device offsets are
// the CPU arena's: the model's memory (parameters, their gradients, the optimizer's state) for
// the whole run; per plan one arena of activations, seeds and gradients, the plan's index maps
// (row sources as device addresses, seed maps) and a staging area for the batch's payloads and
// its loss. Per batch only the payloads go in (the index maps too when the plan is new to the
// device) and only the loss and the bad-label word come out. Plain C++: no CUDA type.
#pragma once

#include "runtime/exec_layout.h"
#include "runtime/optim/optimizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pejit::runtime::cuda {

/// Every region starts at a multiple of this (cudaMalloc's alignment; coalesced row starts).
inline constexpr int64_t kDeviceAlign = 256;
/// Each input tensor of a batch starts at a multiple of this inside the payload region.
inline constexpr int64_t kPayloadAlign = 16;

/// One region of a device allocation.
struct DeviceRegion {
  enum class Kind : uint8_t {
    Param,     ///< a parameter's values
    Grad,      ///< its dense gradient (a row-sparse one: its rows, at most `sparse_rows`)
    State,     ///< the optimizer's state for it (Adagrad's sums, Adam's m then v)
    Arena,     ///< a plan's results, gathered arguments, seeds and gradients (ExecLayout)
    Values,    ///< the template graphs' own values per group (intermediates kept for backward)
    RowIndex,  ///< a plan's row sources as device addresses (i64), uploaded with the plan
    SeedIndex, ///< a plan's seed maps (seed_start i32, seed_src i64), uploaded with the plan
    Payload,   ///< a batch's input tensors (word ids, labels, payload vectors), every batch
    Output,    ///< the loss (f32 per output) and the first bad label row (i64), every batch
  };
  Kind kind = Kind::Arena;
  std::string name; ///< the parameter's name, or the region's role
  int64_t offset = 0, bytes = 0;
};
const char* region_kind_name(DeviceRegion::Kind k); ///< "param", "grad", ...

/// A parameter as the device holds it.
struct DeviceParam {
  std::string name;
  int64_t numel = 0;
  /// An embedding table updated row-sparse: its gradient region holds at most this many rows
  /// of `row_width` floats (0: a dense gradient).
  int64_t sparse_rows = 0, row_width = 0;
};

/// The model's memory, allocated once: per parameter its values, gradient and state.
struct ModelMemory {
  std::vector<DeviceRegion> regions;
  int64_t bytes = 0;
};
ModelMemory plan_model_memory(const std::vector<DeviceParam>& params, optim::Kind rule);

/// One plan's memory and traffic.
struct PlanMemory {
  std::vector<DeviceRegion> regions; ///< Arena, RowIndex, SeedIndex, Payload, Output
  int64_t bytes = 0;                 ///< the allocation (every region, aligned)
  int64_t index_bytes = 0;           ///< RowIndex + SeedIndex: uploaded once per plan
  int64_t payload_bytes = 0;         ///< uploaded every batch
  int64_t download_bytes = 0;        ///< brought back every batch
  /// Host -> device bytes for one batch: the payloads, plus the index maps when the plan is
  /// not resident on the device.
  int64_t upload_bytes(bool plan_resident) const {
    return payload_bytes + (plan_resident ? 0 : index_bytes);
  }
  const DeviceRegion* find(DeviceRegion::Kind k) const;
};

/// The memory of `plan` (its executor layout `layout`) for a batch whose input tensors take
/// `input_bytes` (per input slot); `training`: with seeds and gradients
/// (ExecLayout::total_elems), else the forward blocks only. Throws pejit::Error for a negative
/// size or a layout that is not the plan's.
/// `values[t]`: template t's floats per row and per group of its graph's own values (the
/// forward graph's with `training` false); empty: not counted.
PlanMemory plan_device_memory(const specializer::Plan& plan, const ExecLayout& layout,
                              const std::vector<int64_t>& input_bytes, bool training,
                              const std::vector<std::pair<int64_t, int64_t>>& values = {});

/// A region table as text, one "KIND NAME offset=O bytes=B" line each (for `--json` and tests).
std::string print_regions(const std::vector<DeviceRegion>& regions);

} // namespace pejit::runtime::cuda
