// `--device` and SessionOptions::device (docs/cuda.md): the accepted forms, the driver probe's
// reasons when there is no usable CUDA device (no driver library, a library that is not the
// driver, the toolkit's stub driver), and a session or `pejit train` asking for CUDA stopping
// with "no CUDA device: ..." instead of crashing or silently running on the CPU. In
// pejit_runtime_tests, with or without PEJIT_CUDA.
#include "pejit/pejit.h"
#include "runtime/cuda/device.h"

#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace tests_cuda_device_test {

using namespace pejit;
using runtime::cuda::parse_device;
using runtime::cuda::probe_cuda_device;

namespace {

const char* kProgram = "type T = L(word: i32[], label: i32[])\n"
                       "param E : f32[10, 2] = normal(0.0, 1.0)\n"
                       "fn f(t: T) -> f32[] { match t { L(w, y) => sum(take(E, w)) } }\n"
                       "entry loss(b: List[T]) -> f32[] { sum_list(map(f, b)) }\n";

// The error text of `f()`, or "" when it does not throw.
template <class F> std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

} // namespace

TEST_SUITE("cuda") {
  TEST_CASE("device: cpu, cuda and cuda:N are accepted, anything else is an error") {
    CHECK(!parse_device("cpu").cuda);
    CHECK(parse_device("cpu").name() == "cpu");
    CHECK(parse_device("cuda").cuda);
    CHECK(parse_device("cuda").name() == "cuda:0");
    CHECK(parse_device("cuda:3").index == 3);
    CHECK(parse_device("cuda:3").name() == "cuda:3");
    for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA", "", "cuda:0:1"}) {
      CAPTURE(bad);
      CHECK(error_of([&] { parse_device(bad); }).find("--device must be cpu, cuda or cuda:N") !=
            std::string::npos);
    }
  }

  TEST_CASE("device: the probe says why there is no CUDA device") {
    auto none = probe_cuda_device(0, "libpejit_no_such_driver.so.1");
    CHECK(!none.ok);
    CHECK(none.why.find("cannot be loaded") != std::string::npos);
    auto libm = probe_cuda_device(0, "libm.so.6");
    CHECK(!libm.ok);
    CHECK(libm.why.find("is not a CUDA driver") != std::string::npos);
    // The toolkit's stub driver links but refuses to initialize.
    const char* stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
    if (std::filesystem::exists(stub)) {
      auto s = probe_cuda_device(0, stub);
      CHECK(!s.ok);
      CHECK(s.why.find("cuInit failed") != std::string::npos);
    }
  }

  TEST_CASE("device: a session or pejit train on a CUDA device that cannot be used stops with "
            "'no CUDA device'") {
    SessionOptions o;
    o.device = "cuda";
    std::string err = error_of([&] { Session::from_source(kProgram, "t.pe", o); });
    auto probe = probe_cuda_device(0);
    if (probe.ok) // a GPU here: refused because no executor runs plans on it
      CHECK(err.find("found, but this pejit cannot run plans on it") != std::string::npos);
    else
      CHECK(err.rfind("no CUDA device: cuda:0: ", 0) == 0);
    o.device = "cuda:x";
    CHECK(error_of([&] { Session::from_source(kProgram, "t.pe", o); }).find("--device") !=
          std::string::npos);
    o.device = "cpu";
    CHECK(error_of([&] { Session::from_source(kProgram, "t.pe", o); }).empty());

    // The CLI: an error message and a failing exit status, before any training.
    std::string cmd = std::string(PEJIT_BINARY_DIR "/pejit train ") + PEJIT_SOURCE_DIR +
                      "/examples/treelstm/treelstm.pe --data " + PEJIT_SOURCE_DIR +
                      "/tests/golden/dump_trees.txt --epochs 1 --device cuda:7 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    std::array<char, 512> buf;
    while (fgets(buf.data(), buf.size(), p) != nullptr)
      out += buf.data();
    int rc = pclose(p);
    CAPTURE(out);
    CHECK(rc != 0);
    CHECK(out.find("cuda:7") != std::string::npos);
    if (!probe.ok)
      CHECK(out.find("no CUDA device: cuda:7: ") != std::string::npos);
  }
}

} // namespace tests_cuda_device_test
