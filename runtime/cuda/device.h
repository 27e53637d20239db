// Which device a session runs on (`--device cpu|cuda[:N]`, SessionOptions::device), and the
// probe of a CUDA device through the driver API, loaded at run time (dlopen of libcuda.so.1):
// the binary links no CUDA library, runs on machines without the driver, and says why a CUDA
// device cannot be used ("no CUDA device: ...") instead of failing to start. Built whatever
// PEJIT_CUDA says; without it every CUDA device is refused with that reason.
#pragma once

#include <string>
#include <string_view>

namespace pejit::runtime::cuda {

struct DeviceChoice {
  bool cuda = false;
  int index = 0; ///< the CUDA device ordinal
  /// "cpu" or "cuda:N": what `--json` reports.
  std::string name() const;
};

/// "cpu", "cuda" (device 0) or "cuda:N". Throws pejit::Error naming the accepted forms.
DeviceChoice parse_device(std::string_view text);

/// What the driver says about CUDA device `index`: its name, or why there is none.
struct DeviceProbe {
  bool ok = false;
  std::string name; ///< e.g. "NVIDIA H200" (ok)
  std::string why;  ///< e.g. "libcuda.so.1 cannot be loaded: ..." (not ok)
};
/// Loads the driver (once per process; `library` overrides libcuda.so.1, for tests) and asks
/// for device `index`. Never throws for a missing driver or device: that is `why`.
DeviceProbe probe_cuda_device(int index, const char* library = nullptr);

/// Checks that `choice` can run here: nothing for the CPU; for CUDA, throws pejit::Error
/// "no CUDA device: WHY" when the probe fails, and otherwise because this pejit runs plans on
/// the CPU only (the CUDA executor is not built: docs/cuda.md), naming the device found.
void require_device(const DeviceChoice& choice);

} // namespace pejit::runtime::cuda
