// Named dimensions in expressions (zeros(H), slice(x, 0, H), ones(2*H), full(0.5, H), H as
// an Int): models whose op arguments name H, instantiated with H bound to a size other than
// the file's, run on the generic path and their plans match it on every executor (the batching
// interpreter, template graphs on reference kernels, JIT-compiled runs), loss and every
// gradient, and so do a Session's steps with H set in SessionOptions::dims; a size that puts a
// slice out of range is an error at its file:line:col when the dimensions are bound, and a
// Session's add_source that meets one leaves the session as it was.
#include "pejit/error.h"
#include "pejit/pejit.h"
#include "runtime/data/synthetic.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "tests/support/batches.h"
#include "tests/support/compare.h"
#include "tests/support/plan_check.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

namespace tests_runtime_named_dims_test {

using namespace pejit;

namespace {

const std::string kInOps = PEJIT_SOURCE_DIR "/tests/runtime/models/dims_in_ops.pe";
const std::string kArith = PEJIT_SOURCE_DIR "/tests/runtime/models/dims_arith.pe";

void check_plans(const std::string& file, int64_t h) {
  for (auto shape : {data::Shape::Sst, data::Shape::Deep}) {
    CAPTURE(data::shape_name(shape));
    data::Vocab vocab;
    auto trees = data::gen_sst(12, 5, shape, vocab);
    test::FileModel md(file, static_cast<int64_t>(vocab.size()), {{"H", h}});
    REQUIRE(md.dims.at("H") == h);
    // The parameters take the bound size, so every op argument that names H must too.
    CHECK(md.params.values[static_cast<size_t>(md.params.index("U"))].shape() == Shape{2 * h, h});
    auto stats = test::check_plan_matches_generic(md, test::tree_batch(*md.m, trees));
    REQUIRE(stats.size() == 3);
    for (const auto& [mode, st] : stats) {
      std::string exec = test::exec_name(mode);
      CAPTURE(exec);
      if (mode == test::Exec::Interpreter)
        continue;
      // Every template on its kernel program: nothing left to the batching interpreter.
      CHECK(st.groups_on_graphs > 0);
      CHECK(st.graph_fallbacks.empty());
      CHECK(st.groups_interpreted == 0);
      CHECK((mode == test::Exec::GraphsJit) == (st.jit_launches > 0));
    }
  }
}

std::shared_ptr<ir::Module> checked(const std::string& src) {
  auto m = std::make_shared<ir::Module>();
  Diagnostics d;
  REQUIRE_MESSAGE(types::add_source(*m, src, "dims.pe", d).ok, d.render());
  return m;
}

} // namespace

TEST_SUITE("named dims") {
  TEST_CASE("zeros(H) and slice(..., 0, H): plans match the generic path with H rebound") {
    for (int64_t h : {6, 3}) {
      CAPTURE(h);
      check_plans(kInOps, h);
    }
  }

  TEST_CASE("2*H, 3*H, H+1 in op arguments and H in a condition: plans match generic") {
    for (int64_t h : {6, 3}) { // 6 > 5 takes the tanh branch, 3 the sigmoid one
      CAPTURE(h);
      check_plans(kArith, h);
    }
  }

  TEST_CASE("Session: H bound by SessionOptions::dims, specialized steps match generic ones") {
    auto open = [](const char* mode) {
      pejit::SessionOptions o;
      o.mode = mode;
      o.dims = {{"V", 20}, {"H", 7}};
      o.seed = 4;
      return pejit::Session::from_file(kArith, o);
    };
    pejit::Session g = open("generic"), p = open("specialized");
    CHECK(p.param_shape("U") == std::vector<int64_t>{14, 7});
    auto batch = [](pejit::Session& s) {
      auto leaf = [&](int w, int y) {
        return s.make("Leaf", {pejit::Value::scalar_i32(w), pejit::Value::scalar_i32(y)});
      };
      auto node = [&](pejit::Value l, pejit::Value r, int y) {
        return s.make("Node", {std::move(l), std::move(r), pejit::Value::scalar_i32(y)});
      };
      return pejit::Value::list({node(leaf(1, 0), node(leaf(2, 1), leaf(3, 2), 3), 4),
                                 node(leaf(4, 1), leaf(19, 2), 0), leaf(5, 3)});
    };
    pejit::Value bg = batch(g), bp = batch(p);
    for (int i = 0; i < 3; ++i) {
      float lg = g.step("loss", bg), lp = p.step("loss", bp);
      CHECK(std::fabs(lp - lg) <= 1e-5f * std::fabs(lg));
    }
    CHECK(p.stats().specialized_batches == 3);
    for (const char* name : {"U", "b", "emb", "W_out"}) {
      CAPTURE(name);
      pejit::test::Diff d = pejit::test::diff(p.get_param(name), g.get_param(name));
      CHECK_MESSAGE(d.close(), d.str());
    }
    // g: compose(x, x) on the bound size.
    std::vector<float> x(7, 0.25f);
    pejit::Value y = p.run("g", pejit::Value::tensor_f32({7}, x));
    CHECK(y.shape() == std::vector<int64_t>{7});
  }

  TEST_CASE("the generic path computes with the bound size, not the file's") {
    auto m = checked(R"(
dim H = 4
param W : f32[H, H] = xavier
entry f(x: f32[H]) -> f32[H] {
  let z = zeros(H);
  slice(concat(x, z), 0, H) @ W
}
entry g(x: f32[H]) -> f32[2*H] { slice(concat(ones(H), x, full(2.0, H)), H, 3*H) }
entry n() -> Int { 2 * H + 1 }
)");
    for (int64_t h : {4, 7}) {
      CAPTURE(h);
      auto dims = interp::bind_dims(*m, {{"H", h}});
      auto params = interp::init_params(*m, dims, 3);
      interp::Interpreter in(m, dims);
      std::vector<float> xs;
      for (int64_t i = 0; i < h; ++i)
        xs.push_back(static_cast<float>(i + 1));
      auto x = interp::Value::tensor(Tensor::from_f32(Shape{h}, xs));
      // f: x @ W, the zeros sliced off.
      Tensor y = in.run("f", {x}, params).as_tensor();
      REQUIRE(y.shape() == Shape{h});
      const Tensor& w = params.values[0];
      for (int64_t j = 0; j < h; ++j) {
        float want = 0;
        for (int64_t i = 0; i < h; ++i)
          want += xs[static_cast<size_t>(i)] * w.f32()[i * h + j];
        CHECK(y.f32()[j] == doctest::Approx(want).epsilon(1e-5));
      }
      // g: [x; 2...2] out of [1...1; x; 2...2].
      Tensor z = in.run("g", {x}, params).as_tensor();
      REQUIRE(z.shape() == Shape{2 * h});
      for (int64_t i = 0; i < h; ++i) {
        CHECK(z.f32()[i] == xs[static_cast<size_t>(i)]);
        CHECK(z.f32()[h + i] == 2.0f);
      }
      CHECK(in.run("n", {}, params).as_int() == 2 * h + 1);
    }
  }

  TEST_CASE("Session::add_source: a definition out of range at the session's sizes is an "
            "error and leaves the session as it was") {
    pejit::SessionOptions o;
    o.dims = {{"K", 4}};
    pejit::Session s = pejit::Session::from_source(R"(dim H = 4
dim K = 2
entry f(x: f32[H]) -> f32[K] { slice(x, H - K, H) }
)",
                                                   "dims.pe", o);
    CHECK_THROWS_WITH_AS(s.add_source("entry g(x: f32[H]) -> f32[K + 1] { slice(x, 0, K + 1) }\n",
                                      "more.pe"),
                         "more.pe:1:36: error: slice: range [0, 5) out of bounds for last "
                         "dimension 4 (with H = 4, K = 4)",
                         pejit::Error);
    CHECK(s.entries() == std::vector<std::string>{"f"});
    // The session goes on: a good definition is added, and f still runs.
    CHECK(s.add_source("entry g(x: f32[H]) -> f32[K] { slice(x, 0, K) }\n", "more.pe") ==
          std::vector<std::string>{"g"});
    pejit::Value x = pejit::Value::tensor_f32({4}, {1, 2, 3, 4});
    CHECK(s.run("f", x).to_f32() == std::vector<float>{1, 2, 3, 4});
  }

  TEST_CASE("a size that puts an op argument out of range is an error at file:line:col") {
    auto m = checked(R"(dim H = 4
dim K = 2
entry f(x: f32[H]) -> f32[K] { slice(x, H - K, H) }
entry g() -> f32[H - K] { zeros(H - K) }
)");
    CHECK_NOTHROW(interp::bind_dims(*m, {{"K", 4}}));
    CHECK_THROWS_WITH_AS(interp::bind_dims(*m, {{"K", 5}}),
                         "dims.pe:3:32: error: slice: range [-1, 4) out of bounds for last "
                         "dimension 4 (with H = 4, K = 5)",
                         pejit::Error);
    auto m2 = checked(R"(dim H = 4
dim K = 2
entry g() -> f32[H - K] { zeros(H - K) }
)");
    CHECK_THROWS_WITH_AS(interp::bind_dims(*m2, {{"K", 6}}),
                         "dims.pe:3:27: error: zeros: dimension H-K is -2 with H = 4, K = 6",
                         pejit::Error);
  }
}

} // namespace tests_runtime_named_dims_test
