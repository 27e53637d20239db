// IR hashes (docs/architecture.md): a compiled kernel records the hash of the optimized IR it
// linked, equal to the hash of optimized_ir() for the same spec from another Jit, and the kernel
// cache lists its entries' hashes.
#include "jit/kernel_cache.h"

#include <doctest/doctest.h>

#include <thread>
#include <vector>

namespace tests_jit_ir_hash_test {

using namespace pejit::jit;

namespace {

KernelSpec gate(int64_t width) {
  return KernelSpec{
      .width = width,
      .inputs = {InputShape::Full, InputShape::RowBroadcast, InputShape::Full},
      .ops = {{ElementwiseOp::Add, 0, 1}, {ElementwiseOp::Sigmoid, 3}, {ElementwiseOp::Mul, 4, 2}},
      .outputs = {5, 4}};
}

} // namespace

TEST_CASE("a compiled kernel's ir_hash is the hash of optimized_ir, from any Jit") {
  Jit a, b;
  for (int64_t w : {1, 7, 150}) {
    CAPTURE(w);
    std::string ir = b.optimized_ir(gate(w));
    CHECK(ir.find("define void @pejit_ew(") != std::string::npos);
    uint64_t h = ir_text_hash(ir);
    CHECK(a.compile(gate(w)).ir_hash == h);
    CHECK(a.compile(gate(w)).ir_hash == h); // a second copy, under another unique name
    CHECK(a.optimized_ir(gate(w)) == ir);
  }
  CHECK(ir_text_hash("") == 0xcbf29ce484222325ull); // FNV-1a 64 offset basis
  CHECK(ir_text_hash("a") == 0xaf63dc4c8601ec8cull);
  GemmSpec g{.m = 0, .n = 16, .k = 8};
  CHECK(a.compile_gemm(g).ir_hash == ir_text_hash(b.optimized_ir(g)));
}

TEST_CASE("concurrent compiles each get their own kernel's hash") {
  Jit jit(JitOptions{.compile_threads = 2});
  std::vector<uint64_t> want, got(8);
  for (int64_t w = 1; w <= 8; ++w)
    want.push_back(ir_text_hash(jit.optimized_ir(gate(w))));
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] { got[static_cast<size_t>(i)] = jit.compile(gate(i + 1)).ir_hash; });
  for (auto& t : ts)
    t.join();
  CHECK(got == want);
}

TEST_CASE("the kernel cache lists its entries' keys and ir hashes, by key") {
  Jit jit;
  KernelCache cache(jit, 8);
  auto k1 = cache.get(gate(3));
  auto k2 = cache.get(gate(2));
  CHECK(k1->ir_hash == k1->elementwise().ir_hash);
  CHECK(k1->ir_hash == ir_text_hash(jit.optimized_ir(gate(3))));
  auto hs = cache.ir_hashes();
  REQUIRE(hs.size() == 2);
  CHECK(hs[0].first < hs[1].first);
  for (const auto& [key, h] : hs)
    CHECK(h == (key == cache.key(gate(3)) ? k1->ir_hash : k2->ir_hash));
  CHECK(cache.entries().size() == 2);
}

TEST_CASE("a reduce kernel's ir_hash is the hash of optimized_ir, from any Jit") {
  Jit a, b;
  for (ReduceKind kind :
       {ReduceKind::SumRows, ReduceKind::CrossEntropy, ReduceKind::CrossEntropyBwd})
    for (int64_t w : {1, 5, 150}) {
      CAPTURE(reduce_kind_name(kind));
      CAPTURE(w);
      ReduceSpec s{.kind = kind, .width = w};
      std::string ir = b.optimized_ir(s);
      CHECK(ir.find("i64 @pejit_reduce(") != std::string::npos);
      uint64_t h = ir_text_hash(ir);
      CHECK(a.compile_reduce(s).ir_hash == h);
      CHECK(a.compile_reduce(s).ir_hash == h); // a second copy, under another unique name
      CHECK(a.optimized_ir(s) == ir);
    }
  // Specs that differ compile to different code.
  CHECK(a.optimized_ir(ReduceSpec{.kind = ReduceKind::SumRows, .width = 5}) !=
        a.optimized_ir(ReduceSpec{.kind = ReduceKind::SumRows, .width = 6}));
}

} // namespace tests_jit_ir_hash_test
