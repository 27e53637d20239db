// Device choice and the CUDA driver probe (device.h). The driver's few entry points are looked
// up with dlsym and called through their C signatures (CUresult is an int, CUdevice an int),
// so that no CUDA header or library is needed to build or run this file.
#include "runtime/cuda/device.h"

#include "pejit/error.h"

#include <fmt/format.h>

#include <charconv>
#include <dlfcn.h>

namespace pejit::runtime::cuda {

std::string DeviceChoice::name() const {
  return cuda ? fmt::format("cuda:{}", index) : "cpu";
}

DeviceChoice parse_device(std::string_view text) {
  DeviceChoice d;
  if (text == "cpu")
    return d;
  d.cuda = true;
  if (text == "cuda")
    return d;
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    std::string_view n = text.substr(5);
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), d.index);
    if (ec == std::errc() && end == n.data() + n.size() && d.index >= 0)
      return d;
  }
  throw Error(fmt::format("--device must be cpu, cuda or cuda:N (N >= 0), not '{}'", text));
}

namespace {

using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetName = int (*)(char*, int, int);
using CuGetErrorString = int (*)(int, const char**);

std::string cu_error(CuGetErrorString str, int rc) {
  const char* s = nullptr;
  if (str != nullptr && str(rc, &s) == 0 && s != nullptr)
    return fmt::format("{} (CUresult {})", s, rc);
  return fmt::format("CUresult {}", rc);
}

} // namespace

DeviceProbe probe_cuda_device(int index, const char* library) {
  DeviceProbe p;
  const char* lib = library != nullptr ? library : "libcuda.so.1";
  // Kept loaded: the driver does not support being unloaded and loaded again in a process.
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    p.why = fmt::format("{} cannot be loaded ({}): no NVIDIA driver on this machine", lib,
                        e != nullptr ? e : "unknown error");
    return p;
  }
  auto sym = [&](const char* name) { return dlsym(h, name); };
  auto init = reinterpret_cast<CuInit>(sym("cuInit"));
  auto count = reinterpret_cast<CuDeviceGetCount>(sym("cuDeviceGetCount"));
  auto get = reinterpret_cast<CuDeviceGet>(sym("cuDeviceGet"));
  auto name = reinterpret_cast<CuDeviceGetName>(sym("cuDeviceGetName"));
  auto err = reinterpret_cast<CuGetErrorString>(sym("cuGetErrorString"));
  if (init == nullptr || count == nullptr || get == nullptr || name == nullptr) {
    p.why = fmt::format("{} is not a CUDA driver (cuInit, cuDeviceGetCount, cuDeviceGet or "
                        "cuDeviceGetName missing)",
                        lib);
    return p;
  }
  if (int rc = init(0); rc != 0) {
    p.why = fmt::format("cuInit failed: {}", cu_error(err, rc));
    return p;
  }
  int n = 0;
  if (int rc = count(&n); rc != 0) {
    p.why = fmt::format("cuDeviceGetCount failed: {}", cu_error(err, rc));
    return p;
  }
  if (index >= n) {
    p.why = n == 0 ? std::string("the driver sees no device")
                   : fmt::format("device {} asked for, the driver sees {}", index, n);
    return p;
  }
  int dev = 0;
  char buf[256] = {};
  if (int rc = get(&dev, index); rc != 0) {
    p.why = fmt::format("cuDeviceGet({}) failed: {}", index, cu_error(err, rc));
    return p;
  }
  if (int rc = name(buf, sizeof buf - 1, dev); rc != 0) {
    p.why = fmt::format("cuDeviceGetName failed: {}", cu_error(err, rc));
    return p;
  }
  p.ok = true;
  p.name = buf;
  return p;
}

void require_device(const DeviceChoice& choice) {
  if (!choice.cuda)
    return;
#ifndef PEJIT_HAVE_CUDA
  throw Error(fmt::format("no CUDA device: {}: this pejit was built without the CUDA backend "
                          "(PEJIT_CUDA=OFF)",
                          choice.name()));
#else
  DeviceProbe p = probe_cuda_device(choice.index);
  if (!p.ok)
    throw Error(fmt::format("no CUDA device: {}: {}", choice.name(), p.why));
  throw Error(fmt::format("{} ({}) found, but this pejit cannot run plans on it yet: the CUDA "
                          "executor is not built (docs/cuda.md); use --device cpu",
                          choice.name(), p.name));
#endif
}

} // namespace pejit::runtime::cuda
