// The CUDA driver API, loaded at run time (dlopen of libcuda.so.1, as device.h probes it): the
// few calls that run generated PTX on a device — memory, copies, modules, launches — on device
// N's primary context. Used by the GPU tests of the generated kernels (tests/cuda); the plan
// executor that would enqueue a launch list is not written (docs/cuda.md). Never run by this
// project's sessions: no GPU was lent to them. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pejit::runtime::cuda {

/// A device address (CUdeviceptr).
using DevicePtr = uint64_t;

class CudaDriver {
public:
  /// Loads the driver, initializes it and makes device `index`'s primary context current.
  /// Throws pejit::Error "no CUDA device: ..." (device.h's probe) when that is not possible.
  explicit CudaDriver(int index = 0);
  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  const std::string& device_name() const;

  DevicePtr alloc(size_t bytes); ///< freed by free() or the destructor
  void free(DevicePtr p);
  void upload(DevicePtr dst, const void* src, size_t bytes);
  void download(void* dst, DevicePtr src, size_t bytes);
  void fill_bytes(DevicePtr dst, unsigned char value, size_t bytes);

  /// Loads a PTX module (JIT-compiled by the driver for the device) and returns its kernel
  /// `name`; the module stays loaded until the destructor. Throws pejit::Error with the
  /// driver's message.
  void* kernel(const std::string& ptx, const std::string& name);
  /// Launches `fn` on a 1-D grid; `params[i]` points at the i-th argument's value.
  void launch(void* fn, uint32_t grid, uint32_t block, std::vector<void*> params);
  void synchronize(); ///< waits for every launch; throws on an asynchronous error

private:
  struct Api;
  std::unique_ptr<Api> api_;
  std::string name_;
  int device_ = 0;
  void* context_ = nullptr;
  std::vector<void*> modules_;
  std::vector<DevicePtr> allocations_;
};

} // namespace pejit::runtime::cuda
