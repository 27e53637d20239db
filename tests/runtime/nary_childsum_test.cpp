// The child-sum TreeLSTM (examples/childsum/childsum.pe) on n-ary trees: its plans match the
// generic path (docs/architecture.md: loss within a relative 1e-5, every gradient within
// 1e-4 * max|ref| + 1e-6) on every executor (the batching interpreter, the template graphs on
// reference kernels, and with JIT-compiled runs), on trees of every shape and arity; and its
// generic loss is the paper's equations computed by hand on a small tree.
#include "jit/kernel_cache.h"
#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"
#include "runtime/plan_executor.h"
#include "runtime/train/encode.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "tests/support/batches.h"
#include "tests/support/compare.h"
#include "tests/support/plan_check.h"

#include <doctest/doctest.h>

#include <cmath>

namespace tests_runtime_nary_childsum_test {

using namespace pejit;

namespace {

const std::string kChildSum = PEJIT_SOURCE_DIR "/examples/childsum/childsum.pe";

using test::Exec;

// Generic path vs plan on every executor configuration (on n-ary data every parameter is
// used: U_f by the forget gates, U_iou by the nodes), and where the groups ran.
void check_same(test::FileModel& md, const interp::Value& batch) {
  for (const auto& [mode, st] : test::check_plan_matches_generic(md, batch)) {
    std::string exec = test::exec_name(mode);
    CAPTURE(exec);
    for (const auto& why : st.row_by_row_reasons)
      MESSAGE("row by row: " << why);
    for (const auto& why : st.graph_fallbacks)
      MESSAGE("graph fallback: " << why);
    if (mode != Exec::Interpreter)
      CHECK(st.groups_on_graphs > 0);
    else
      CHECK(st.groups_on_graphs == 0);
    if (mode != Exec::GraphsJit)
      CHECK(st.jit_launches == 0);
  }
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

// v (1 x n) @ W (n x m) + b, from the parameter tensors.
std::vector<float> affine(const std::vector<float>& v, const Tensor& W, const Tensor& b) {
  const int64_t n = W.shape()[0], m = W.shape()[1];
  REQUIRE(static_cast<int64_t>(v.size()) == n);
  std::vector<float> out(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) {
    double s = b.f32()[j];
    for (int64_t i = 0; i < n; ++i)
      s += static_cast<double>(v[static_cast<size_t>(i)]) * W.f32()[i * m + j];
    out[static_cast<size_t>(j)] = static_cast<float>(s);
  }
  return out;
}

} // namespace

TEST_SUITE("examples") {
  TEST_CASE("child-sum TreeLSTM: plans == generic path on n-ary trees of every shape") {
    for (size_t arity : {4, 2, 6}) {
      for (auto shape : {data::Shape::Sst, data::Shape::Deep, data::Shape::Balanced}) {
        CAPTURE(arity);
        CAPTURE(data::shape_name(shape));
        data::Vocab vocab;
        auto trees = data::gen_sst(16, 13, shape, vocab, arity);
        test::FileModel md(kChildSum, static_cast<int64_t>(vocab.size()));
        check_same(md, test::tree_batch(*md.m, trees));
      }
    }
    // Single-word sentences only (no forget gate, no U), and unary chains.
    data::Vocab vocab;
    auto ts = data::parse_trees("(1 a)\n(3 b)\n(2 (4 (1 c)) (0 d) (3 e))\n", "t.txt", vocab);
    test::FileModel md(kChildSum, static_cast<int64_t>(vocab.size()));
    check_same(md, test::tree_batch(*md.m, ts));
  }

  TEST_CASE("child-sum TreeLSTM: the generic loss is Tai et al.'s section 3.1 by hand") {
    data::Vocab vocab;
    auto ts = data::parse_trees("(3 (1 a) (4 b) (0 c))\n", "t.txt", vocab);
    test::FileModel md(kChildSum, static_cast<int64_t>(vocab.size()));
    interp::Interpreter in(md.m, md.dims);
    auto ref = in.value_and_grad("loss", {test::tree_batch(*md.m, ts)}, md.params);
    auto P = [&](const char* n) -> const Tensor& {
      int i = md.params.index(n);
      REQUIRE(i >= 0);
      return md.params.values[static_cast<size_t>(i)];
    };
    const size_t H = 150;
    auto loss_of = [&](const std::vector<float>& h, int32_t y) {
      std::vector<float> z = affine(h, P("W_out"), P("b_out"));
      double mx = z[0], s = 0;
      for (float v : z)
        mx = std::max<double>(mx, v);
      for (float v : z)
        s += std::exp(v - mx);
      return std::log(s) + mx - z[static_cast<size_t>(y)];
    };
    double want = 0;
    std::vector<std::vector<float>> hs, cs;
    for (int k = 0; k < 3; ++k) {
      const Tensor& emb = P("emb");
      std::vector<float> x(emb.f32() + ts[0].nodes[k].word * 300,
                           emb.f32() + ts[0].nodes[k].word * 300 + 300);
      std::vector<float> g = affine(x, P("W_iou"), P("b_iou"));
      std::vector<float> h(H), c(H);
      for (size_t j = 0; j < H; ++j) {
        c[j] = sigmoid(g[j]) * std::tanh(g[2 * H + j]);
        h[j] = sigmoid(g[H + j]) * std::tanh(c[j]);
      }
      want += loss_of(h, ts[0].nodes[k].label);
      hs.push_back(h);
      cs.push_back(c);
    }
    std::vector<float> hsum(H, 0.0f), fc(H, 0.0f);
    for (int k = 0; k < 3; ++k) {
      std::vector<float> f = affine(hs[k], P("U_f"), P("b_f"));
      for (size_t j = 0; j < H; ++j) {
        hsum[j] += hs[k][j];
        fc[j] += sigmoid(f[j]) * cs[k][j];
      }
    }
    std::vector<float> g = affine(hsum, P("U_iou"), P("b_iou"));
    std::vector<float> h(H);
    for (size_t j = 0; j < H; ++j) {
      float c = sigmoid(g[j]) * std::tanh(g[2 * H + j]) + fc[j];
      h[j] = sigmoid(g[H + j]) * std::tanh(c);
    }
    want += loss_of(h, 3);
    CHECK(ref.loss == doctest::Approx(want).epsilon(1e-5));
  }
}

} // namespace tests_runtime_nary_childsum_test
