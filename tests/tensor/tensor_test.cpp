// Tests of Shape, Tensor (construction, sharing, reshaping, checked access) and the storage
// pool's block reuse.
#include "src/tensor/tensor.h"
#include "src/util/asan.h"
#include "src/util/check.h"

#include <doctest/doctest.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace tests_tensor_tensor_test {

using namespace pejit;

TEST_SUITE("tensor") {
  TEST_CASE("shape basics") {
    Shape s{3, 4};
    CHECK(s.rank() == 2);
    CHECK(s.numel() == 12);
    CHECK(s.str() == "[3, 4]");
    CHECK(Shape().numel() == 1);
    CHECK(Shape().str() == "[]");
    CHECK(Shape{0, 5}.numel() == 0);
    s.push_back(2);
    CHECK(s == Shape{3, 4, 2});
    CHECK(s != Shape{3, 4});
    s[0] = 7; // writes the dimension itself: the shape and its size follow
    CHECK(s == Shape{7, 4, 2});
    CHECK(s.numel() == 56);
    std::vector<int64_t> v{1, 2, 3};
    CHECK(Shape(std::span<const int64_t>(v)) == Shape{1, 2, 3});
    int64_t prod = 1;
    for (int64_t d : Shape{2, 3})
      prod *= d;
    CHECK(prod == 6);
    CHECK_THROWS_AS(Shape({1, 2, 3, 4, 5, 6, 7, 8, 9}), Error);
    CHECK_THROWS_AS(Shape({2, -1}), Error);
    CHECK_THROWS_WITH_AS(s.push_back(-3), doctest::Contains("negative dimension -3"), Error);
    Shape full{1, 2, 3, 4, 5, 6, 7, 8};
    CHECK_THROWS_WITH_AS(full.push_back(1), doctest::Contains("more than 8 dimensions"), Error);
    CHECK(s == Shape{7, 4, 2}); // a refused dimension is not appended
  }

  TEST_CASE("construction and access") {
    Tensor u;
    CHECK_FALSE(u.defined());
    CHECK_THROWS_AS(u.f32(), Error);

    Tensor z = Tensor::zeros(DType::I32, {2, 3});
    CHECK(z.dtype() == DType::I32);
    CHECK(z.numel() == 6);
    for (int i = 0; i < 6; ++i)
      CHECK(z.i32()[i] == 0);
    CHECK_THROWS_AS(z.f32(), Error);

    Tensor f = Tensor::full({4}, 2.5f);
    CHECK(f.f32()[3] == 2.5f);
    CHECK(reinterpret_cast<uintptr_t>(f.f32()) % 64 == 0);

    float d[] = {1, 2, 3, 4, 5, 6};
    Tensor t = Tensor::from_f32({2, 3}, d);
    CHECK(t.dim(0) == 2);
    CHECK(t.dim(-1) == 3);
    CHECK_THROWS_AS(t.dim(2), Error);
    CHECK(t.f32()[5] == 6);
    CHECK_THROWS_AS(Tensor::from_f32({2, 2}, d), Error);
    CHECK(t.str() == "f32[2, 3]{1, 2, 3, 4, 5, 6}");

    CHECK(Tensor::scalar_f32(1.5f).item_f32() == 1.5f);
    CHECK(Tensor::scalar_i32(-3).item_i32() == -3);
    CHECK(Tensor::scalar_i32(-3).rank() == 0);
    CHECK_THROWS_AS(t.item_f32(), Error);
    CHECK_THROWS_AS(Tensor::scalar_i32(1).item_f32(), Error);
    CHECK(std::string(dtype_name(DType::F32)) == "f32");
    CHECK(std::string(dtype_name(DType::I32)) == "i32");

    Tensor e = Tensor::empty(DType::F32, {0, 3});
    CHECK(e.defined());
    CHECK(e.numel() == 0);
  }

  TEST_CASE("sharing, clone, reshape, unique") {
    Tensor a = Tensor::full({2, 3}, 1.0f);
    CHECK(a.unique());
    Tensor b = a;
    CHECK_FALSE(a.unique());
    CHECK(a.shares_storage(b));
    b.f32()[0] = 9;
    CHECK(a.f32()[0] == 9);
    Tensor c = a.clone();
    CHECK(c.unique());
    c.f32()[0] = 1;
    CHECK(a.f32()[0] == 9);
    Tensor r = a.reshaped({3, 2});
    CHECK(r.shape() == Shape{3, 2});
    CHECK(r.f32() == a.f32());
    CHECK_THROWS_WITH_AS(a.reshaped({4}), doctest::Contains("[2, 3]"), Error);
    Tensor v = a.view(2, DType::I32, {2, 2});
    CHECK(v.dtype() == DType::I32);
    CHECK(v.i32() == reinterpret_cast<const int32_t*>(a.f32() + 2));
    CHECK(v.numel() == 4);
    CHECK_THROWS_WITH_AS(a.view(3, DType::F32, {2, 2}), doctest::Contains("out of range"), Error);
    CHECK_THROWS_WITH_AS(a.view(-1, DType::F32, {2}), doctest::Contains("at -1"), Error);
    CHECK_THROWS_WITH_AS(v.f32(), doctest::Contains("f32 access to a i32"), Error);
    CHECK_THROWS_WITH_AS(Tensor().view(0, DType::F32, {1}), doctest::Contains("undefined"), Error);
    CHECK_THROWS_WITH_AS(Tensor().reshaped({1}), doctest::Contains("undefined"), Error);
    CHECK_THROWS_WITH_AS(Tensor().i32(), doctest::Contains("undefined"), Error);
    CHECK(Tensor().raw() == nullptr);
    v = Tensor();
    b = Tensor();
    r = Tensor();
    CHECK(a.unique());
    Tensor m = std::move(a);
    CHECK(m.unique());
    CHECK_FALSE(a.defined());
  }

  TEST_CASE("pool reuses freed blocks") {
    const float* first;
    {
      Tensor t = Tensor::empty(DType::F32, {300});
      first = t.f32();
    }
    {
      Tensor t = Tensor::empty(DType::F32, {290}); // same size class
      CHECK(t.f32() == first);
    }
    // A steady-state loop allocating a handful of tensors never reaches the system allocator.
    for (int i = 0; i < 3; ++i) {
      Tensor a = Tensor::empty(DType::F32, {750}), b = Tensor::empty(DType::F32, {1, 150});
      Tensor c = a.clone();
    }
    uint64_t before = tensor_pool_stats().system_allocs;
    for (int i = 0; i < 1000; ++i) {
      Tensor a = Tensor::empty(DType::F32, {750});
      Tensor b = Tensor::empty(DType::F32, {1, 150});
      Tensor c = a.clone();
    }
    CHECK(tensor_pool_stats().system_allocs == before);
    CHECK(tensor_pool_stats().reuses > 2000);
  }

  // Storage of 2 MiB and more is a huge-page mapping of its own (util::map_huge): its block
  // (the 64-byte header, then the data) starts on a 2 MiB boundary, and where the kernel has
  // transparent huge pages on request, /proc/self/smaps marks the mapping eligible for them.
  TEST_CASE("pool: large storage is mapped for huge pages") {
    Tensor t = Tensor::empty(DType::F32, {3, 1 << 20}); // 12 MiB
    const auto data = reinterpret_cast<uintptr_t>(t.raw());
    CHECK((data - 64) % (uintptr_t{2} << 20) == 0);
    std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(mode, modes);
    if (modes.find("[never]") != std::string::npos || modes.empty())
      return; // no huge pages here: the alignment above is all there is to check
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool inside = false, eligible = false, found = false;
    while (std::getline(smaps, line)) {
      uintptr_t lo = 0, hi = 0;
      if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) == 2) { // a mapping
        inside = lo <= data && data < hi;
        continue;
      }
      if (inside && line.rfind("THPeligible:", 0) == 0) {
        found = true;
        eligible = line.find('1') != std::string::npos;
      }
    }
    if (found) // kernels before 4.19 do not say
      CHECK(eligible);
  }

  // Under AddressSanitizer (scripts/asan.sh) the pool hides nothing that the system allocator
  // would report: a block released to the pool is unaddressable until it is handed out again,
  // and the slack past a tensor's data is unaddressable. Elsewhere there is nothing to check.
  TEST_CASE("pool: under AddressSanitizer released storage and slack are poisoned" *
            doctest::skip(!util::kAsan)) {
    Tensor t = Tensor::empty(DType::F32, {10}); // 40 bytes of a 128-byte block (with its header)
    const char* p = static_cast<const char*>(t.raw());
    CHECK_FALSE(util::asan_poisoned(p));
    CHECK_FALSE(util::asan_poisoned(p + 39));
    CHECK(util::asan_poisoned(p + 40));
    t = Tensor(); // back to this thread's cache
    CHECK(util::asan_poisoned(p));
    Tensor u = Tensor::empty(DType::F32, {12}); // the same size class: the same block again
    REQUIRE(static_cast<const char*>(u.raw()) == p);
    CHECK_FALSE(util::asan_poisoned(p + 47));
    CHECK(util::asan_poisoned(p + 48));
  }

  TEST_CASE("pool across threads") {
    // Blocks freed by a finished thread go back to the shared lists; a large block allocated
    // here then freed on another thread is reused after that.
    std::vector<Tensor> made;
    std::thread th([&] {
      for (int i = 0; i < 20; ++i)
        made.push_back(Tensor::empty(DType::F32, {1000}));
    });
    th.join();
    made.clear(); // freed here: 8 to this thread's cache, the rest to the shared list
    uint64_t before = tensor_pool_stats().system_allocs;
    std::thread th2([&] {
      for (int i = 0; i < 12; ++i)
        made.push_back(Tensor::empty(DType::F32, {1000}));
    });
    th2.join();
    CHECK(tensor_pool_stats().system_allocs == before);
    made.clear();
    tensor_pool_trim();
    CHECK(tensor_pool_stats().cached_bytes == 0);
  }
}

} // namespace tests_tensor_tensor_test
