// The driver API through dlsym (driver.h). Entry points are looked up by their versioned names
// (cuMemAlloc_v2, ...: what cuda.h's macros name), called through their C signatures with
// handles as void* and CUdeviceptr as uint64_t, so that no CUDA header is needed.
#include "runtime/cuda/driver.h"

#include "pejit/error.h"
#include "runtime/cuda/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <dlfcn.h>

namespace pejit::runtime::cuda {

struct CudaDriver::Api {
  void* lib = nullptr;
  int (*init)(unsigned) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*primary_retain)(void**, int) = nullptr;
  int (*primary_release)(int) = nullptr;
  int (*ctx_set_current)(void*) = nullptr;
  int (*mem_alloc)(DevicePtr*, size_t) = nullptr;
  int (*mem_free)(DevicePtr) = nullptr;
  int (*htod)(DevicePtr, const void*, size_t) = nullptr;
  int (*dtoh)(void*, DevicePtr, size_t) = nullptr;
  int (*memset8)(DevicePtr, unsigned char, size_t) = nullptr;
  int (*module_load)(void**, const void*) = nullptr;
  int (*module_unload)(void*) = nullptr;
  int (*module_function)(void**, void*, const char*) = nullptr;
  int (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                void**, void**) = nullptr;
  int (*synchronize)() = nullptr;
  int (*error_string)(int, const char**) = nullptr;

  void check(int rc, const char* what) const {
    if (rc == 0)
      return;
    const char* s = nullptr;
    if (error_string != nullptr)
      error_string(rc, &s);
    throw Error(fmt::format("cuda: {} failed: {} (CUresult {})", what, s != nullptr ? s : "?", rc));
  }
};

namespace {

template <class F> void bind(void* lib, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr)
    throw Error(fmt::format("no CUDA device: the driver has no {}", name));
}

} // namespace

CudaDriver::CudaDriver(int index) : api_(std::make_unique<Api>()), device_(index) {
  DeviceProbe probe = probe_cuda_device(index); // loads libcuda.so.1 and says why not
  if (!probe.ok)
    throw Error(fmt::format("no CUDA device: cuda:{}: {}", index, probe.why));
  name_ = probe.name;
  Api& a = *api_;
  a.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); // already loaded: a reference
  if (a.lib == nullptr)
    throw Error("no CUDA device: libcuda.so.1 cannot be loaded");
  bind(a.lib, a.init, "cuInit");
  bind(a.lib, a.device_get, "cuDeviceGet");
  bind(a.lib, a.primary_retain, "cuDevicePrimaryCtxRetain");
  bind(a.lib, a.primary_release, "cuDevicePrimaryCtxRelease_v2");
  bind(a.lib, a.ctx_set_current, "cuCtxSetCurrent");
  bind(a.lib, a.mem_alloc, "cuMemAlloc_v2");
  bind(a.lib, a.mem_free, "cuMemFree_v2");
  bind(a.lib, a.htod, "cuMemcpyHtoD_v2");
  bind(a.lib, a.dtoh, "cuMemcpyDtoH_v2");
  bind(a.lib, a.memset8, "cuMemsetD8_v2");
  bind(a.lib, a.module_load, "cuModuleLoadData");
  bind(a.lib, a.module_unload, "cuModuleUnload");
  bind(a.lib, a.module_function, "cuModuleGetFunction");
  bind(a.lib, a.launch, "cuLaunchKernel");
  bind(a.lib, a.synchronize, "cuCtxSynchronize");
  bind(a.lib, a.error_string, "cuGetErrorString");
  a.check(a.init(0), "cuInit");
  int dev = 0;
  a.check(a.device_get(&dev, index), "cuDeviceGet");
  device_ = dev;
  a.check(a.primary_retain(&context_, dev), "cuDevicePrimaryCtxRetain");
  a.check(a.ctx_set_current(context_), "cuCtxSetCurrent");
}

CudaDriver::~CudaDriver() {
  Api& a = *api_;
  if (a.synchronize != nullptr && context_ != nullptr)
    a.synchronize();
  for (DevicePtr p : allocations_)
    a.mem_free(p);
  for (void* m : modules_)
    a.module_unload(m);
  if (context_ != nullptr)
    a.primary_release(device_);
  if (a.lib != nullptr)
    dlclose(a.lib);
}

const std::string& CudaDriver::device_name() const {
  return name_;
}

DevicePtr CudaDriver::alloc(size_t bytes) {
  DevicePtr p = 0;
  api_->check(api_->mem_alloc(&p, std::max<size_t>(bytes, 1)), "cuMemAlloc");
  allocations_.push_back(p);
  return p;
}

void CudaDriver::free(DevicePtr p) {
  auto it = std::find(allocations_.begin(), allocations_.end(), p);
  if (it == allocations_.end())
    return;
  allocations_.erase(it);
  api_->check(api_->mem_free(p), "cuMemFree");
}

void CudaDriver::upload(DevicePtr dst, const void* src, size_t bytes) {
  api_->check(api_->htod(dst, src, bytes), "cuMemcpyHtoD");
}

void CudaDriver::download(void* dst, DevicePtr src, size_t bytes) {
  api_->check(api_->dtoh(dst, src, bytes), "cuMemcpyDtoH");
}

void CudaDriver::fill_bytes(DevicePtr dst, unsigned char value, size_t bytes) {
  api_->check(api_->memset8(dst, value, bytes), "cuMemsetD8");
}

void* CudaDriver::kernel(const std::string& ptx, const std::string& name) {
  void* m = nullptr;
  api_->check(api_->module_load(&m, ptx.c_str()), "cuModuleLoadData");
  modules_.push_back(m);
  void* fn = nullptr;
  api_->check(api_->module_function(&fn, m, name.c_str()),
              fmt::format("cuModuleGetFunction({})", name).c_str());
  return fn;
}

void CudaDriver::launch(void* fn, uint32_t grid, uint32_t block, std::vector<void*> params) {
  api_->check(api_->launch(fn, grid, 1, 1, block, 1, 1, 0, nullptr, params.data(), nullptr),
              "cuLaunchKernel");
}

void CudaDriver::synchronize() {
  api_->check(api_->synchronize(), "cuCtxSynchronize");
}

} // namespace pejit::runtime::cuda
