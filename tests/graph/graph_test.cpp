// The tensor graph: hash-consing, shape inference and its errors, the printer, Boost
// analyses, the reference evaluator, and reverse-mode AD through the registry's gradient
// rules, checked differentially against the generic path (the Interpreter's tape AD) on the
// TreeLSTM cell and by random directional derivatives.
#include "src/graph/boost_adaptor.h"
#include "src/graph/evaluate.h"
#include "src/graph/graph.h"
#include "src/graph/graph_emitter.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "src/util/check.h"
#include "tests/support/compare.h"
#include "tests/support/tensors.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tests_graph_graph_test {

using namespace pejit;
using namespace pejit::graph;
using ops::Attr;
using ops::GradOp;
using ops::OpId;

namespace {

ShapeType f32(std::vector<int64_t> d) {
  return ShapeType{DType::F32, std::move(d)};
}
ShapeType i32(std::vector<int64_t> d) {
  return ShapeType{DType::I32, std::move(d)};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no pejit::Error)";
}

/// The loss's value at `inputs`.
double loss_at(const Graph& g, NodeId loss, std::span<const Tensor> inputs) {
  return evaluate(g, inputs, std::span<const NodeId>(&loss, 1))[0].item_f32();
}

/// Random directional derivatives: for a few random directions d over the `wrt` input slots,
/// the central difference of the loss along d against <grad, d>.
void check_directional(const Graph& g, NodeId loss, const std::vector<Tensor>& inputs,
                       const std::vector<uint32_t>& slots, const std::vector<Tensor>& grads,
                       int directions = 2) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<double>(s >> 11) / 9007199254740992.0;
  };
  const double eps = 1e-2, per = 1.0 / std::sqrt(static_cast<double>(slots.size()));
  for (int d = 0; d < directions; ++d) {
    std::vector<std::vector<double>> dir(slots.size());
    double analytic = 0;
    for (size_t p = 0; p < slots.size(); ++p) {
      dir[p].resize(static_cast<size_t>(grads[p].numel()));
      double norm = 0;
      for (auto& x : dir[p]) {
        x = 2 * next() - 1;
        norm += x * x;
      }
      for (size_t i = 0; i < dir[p].size(); ++i) {
        dir[p][i] *= per / std::sqrt(norm);
        analytic += dir[p][i] * grads[p].f32()[i];
      }
    }
    auto shifted = [&](double h) {
      std::vector<Tensor> in = inputs;
      for (size_t p = 0; p < slots.size(); ++p) {
        Tensor& t = in[slots[p]];
        t = t.clone();
        for (size_t i = 0; i < dir[p].size(); ++i)
          t.f32()[i] += static_cast<float>(h * dir[p][i]);
      }
      return loss_at(g, loss, in);
    };
    double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
    INFO("direction " << d << ": numeric " << numeric << ", analytic " << analytic);
    CHECK(std::fabs(numeric - analytic) <= 2e-2 * std::max(std::fabs(numeric), 1e-1));
  }
}

const char* kCellSrc = R"(
param hl : f32[150] = normal(0.0, 1.0)
param cl : f32[150] = normal(0.0, 1.0)
param hr : f32[150] = normal(0.0, 1.0)
param cr : f32[150] = normal(0.0, 1.0)
param U  : f32[300, 750] = normal(0.0, 0.1)
param b  : f32[750] = normal(0.0, 0.5)
param K  : f32[150] = normal(0.0, 1.0)
param K2 : f32[150] = normal(0.0, 1.0)

entry L() -> f32[] {
  let g = concat(hl, hr) @ U + b;
  let (i, fl, fr, o, u) = split5(g);
  let c = sigmoid(i) * tanh(u) + sigmoid(fl) * cl + sigmoid(fr) * cr;
  let h = sigmoid(o) * tanh(c);
  sum(h * K) + sum(c * K2)
}
)";

/// The same TreeLSTM cell body as a graph over input slots 0..7 (kCellSrc's parameter order).
NodeId build_cell(Graph& g) {
  NodeId hl = g.input(0, f32({150})), cl = g.input(1, f32({150}));
  NodeId hr = g.input(2, f32({150})), cr = g.input(3, f32({150}));
  NodeId U = g.input(4, f32({300, 750})), b = g.input(5, f32({750}));
  NodeId K = g.input(6, f32({150})), K2 = g.input(7, f32({150}));
  NodeId x = g.op(OpId::Concat, {hl, hr});
  NodeId gates = g.op(OpId::Add, {g.op(OpId::MatMul, {x, U}), b});
  auto p = g.op_results(OpId::Split, std::vector{gates}, Attr{{5}});
  auto sig = [&](NodeId v) { return g.op(OpId::Sigmoid, {v}); };
  auto mul = [&](NodeId a, NodeId c) { return g.op(OpId::Mul, {a, c}); };
  auto add = [&](NodeId a, NodeId c) { return g.op(OpId::Add, {a, c}); };
  NodeId c =
      add(add(mul(sig(p[0]), g.op(OpId::Tanh, {p[4]})), mul(sig(p[1]), cl)), mul(sig(p[2]), cr));
  NodeId h = mul(sig(p[3]), g.op(OpId::Tanh, {c}));
  return add(g.op(OpId::Sum, {mul(h, K)}), g.op(OpId::Sum, {mul(c, K2)}));
}

} // namespace

TEST_SUITE("graph") {

  TEST_CASE("hash-consing: equal nodes share an id, any difference makes a new one") {
    Graph g;
    NodeId x = g.input(0, f32({3})), y = g.input(1, f32({3}));
    NodeId a = g.op(OpId::Add, {x, y});
    size_t n = g.size();
    CHECK(g.op(OpId::Add, {x, y}) == a);
    CHECK(g.input(0, f32({3})) == x);
    CHECK(g.size() == n);
    CHECK(g.op(OpId::Add, {y, x}) != a); // operand order matters (no canonicalization)
    CHECK(g.op(OpId::Sub, {x, y}) != a);
    NodeId s = g.op(OpId::Sum, {x});
    CHECK(g.op(OpId::Sum, {x}, Attr{{0}}) != s);
    CHECK(g.op(OpId::Sum, {x}, Attr{{0}}) == g.op(OpId::Sum, {x}, Attr{{0}}));
    CHECK(g.constant(1.0f) == g.constant(1.0f));
    CHECK(g.constant(1.0f) != g.constant(2.0f));
    CHECK(g.constant(1.0f) != g.constant(1.0f, {3}));
    CHECK(g.gather(x, {0, 2}) == g.gather(x, {0, 2}));
    CHECK(g.gather(x, {0, 2}) != g.gather(x, {2, 0}));
    CHECK(g.scatter(x, {0, 1, 1}, 2) != g.scatter(x, {0, 1, 1}, 3));
    auto p = g.op_results(OpId::Split, std::vector{x}, Attr{{3}});
    REQUIRE(p.size() == 3);
    CHECK(p[0] != p[1]);
    CHECK(g.op(OpId::Split, {x}, Attr{{3}}) == p[0]); // output_index 0
    CHECK(g.sum_n(std::vector{x, y}) == g.sum_n(std::vector{x, y}));
    CHECK(g.sum_n(std::vector{x}) == x);
    CHECK(g.input(2, f32({3})) != x); // inputs are distinct per slot
    CHECK(g.num_inputs() == 3);
    CHECK(error_of([&] { g.input(0, f32({4})); }).find("input #0 used as f32[3] and as f32[4]") !=
          std::string::npos);
  }

  TEST_CASE("shapes are inferred on add, mismatches are clear pejit::Errors") {
    Graph g;
    NodeId A = g.input(0, f32({2, 3})), B = g.input(1, f32({3, 4})), v = g.input(2, f32({4}));
    CHECK(g.type(g.op(OpId::MatMul, {A, B})) == f32({2, 4}));
    CHECK(g.type(g.op(OpId::Add, {g.op(OpId::MatMul, {A, B}), v})) == f32({2, 4}));
    auto p = g.op_results(OpId::Split, std::vector{B}, Attr{{2}});
    CHECK(g.type(p[1]) == f32({3, 2}));
    CHECK(g.type(g.gather(A, {1, 1, 0, 1})) == f32({4, 3}));
    CHECK(g.type(g.scatter(A, {4, 0}, 5)) == f32({5, 3}));
    NodeId idx = g.input(3, i32({2, 2}));
    CHECK(g.type(g.op(OpId::Take, {B, idx})) == f32({2, 2, 4}));
    CHECK(g.type(g.grad(GradOp::MatMulGradB, {g.op(OpId::MatMul, {A, B}), A, B})) == f32({3, 4}));
    CHECK(g.type(g.grad(GradOp::SumToShape, {g.op(OpId::MatMul, {A, B}), v})) == f32({4}));

    auto has = [](const std::string& msg, const std::string& part) {
      INFO(msg);
      CHECK(msg.find(part) != std::string::npos);
    };
    has(error_of([&] { g.op(OpId::Add, {A, v}); }),
        "add: shapes [2, 3] and [4] do not broadcast (operands f32[2, 3], f32[4])");
    has(error_of([&] { g.op(OpId::MatMul, {B, A}); }), "matmul: inner dimensions differ");
    has(error_of([&] { g.op(OpId::Split, {B}, Attr{{3}}); }), "not divisible into 3 parts");
    has(error_of([&] { g.op(OpId::Split, {B}, Attr{{2}}, 2); }), "split has 2 results, not 3");
    has(error_of([&] { g.op(OpId::Add, {A, 99}); }), "operand %99 does not exist");
    has(error_of([&] { g.gather(A, {0, 2}); }), "gather: index 2 out of range for f32[2, 3]");
    has(error_of([&] { g.scatter(A, {0}, 4); }), "scatter: 1 indices for the 2 rows of f32[2, 3]");
    has(error_of([&] { g.scatter(A, {0, 4}, 4); }), "scatter: index 4 out of range for 4 rows");
    has(error_of([&] { g.sum_n(std::vector{A, B}); }), "sum_n: operands differ in type");
    has(error_of([&] { g.grad(GradOp::SigmoidBwd, {A, B}); }),
        "sigmoid_bwd: operands 1 and 2 differ: f32[2, 3] vs f32[3, 4]");
    has(error_of([&] { g.grad(GradOp::MatMulGradA, {v, A, B}); }),
        "matmul_grad_a: gradient f32[4] does not match matmul's result f32[2, 4]");
    has(error_of([&] { g.grad(GradOp::TanhBwd, {A}); }), "tanh_bwd: takes 2 operands, got 1");
  }

  TEST_CASE("printer: one node per line, and GraphViz") {
    Graph g;
    NodeId x = g.input(0, f32({2, 4})), w = g.input(1, f32({4}));
    NodeId m = g.op(OpId::MatMul, {x, w});
    NodeId ga = g.gather(x, {1, 0, 1});
    NodeId part = g.op(OpId::Split, {ga}, Attr{{2}}, 1);
    NodeId sc = g.scatter(part, {2, 0, 2}, 3);
    NodeId half = g.constant(0.5f);
    NodeId out = g.op(OpId::Mul, {g.sum_n(std::vector{sc, sc}), half});
    g.grad(GradOp::SigmoidBwd, {w, w});
    g.op(OpId::Sum, {x}, Attr{{-1}});
    g.add_output(out);
    g.add_output(m);
    CHECK(print(g) == "%0 = input #0 : f32[2, 4]\n"
                      "%1 = input #1 : f32[4]\n"
                      "%2 = matmul(%0, %1) : f32[2]\n"
                      "%3 = gather[1 0 1](%0) : f32[3, 4]\n"
                      "%4 = split[2]#1(%3) : f32[3, 2]\n"
                      "%5 = scatter[2 0 2](%4) : f32[3, 2]\n"
                      "%6 = const 0.5 : f32[]\n"
                      "%7 = sum_n(%5, %5) : f32[3, 2]\n"
                      "%8 = mul(%7, %6) : f32[3, 2]\n"
                      "%9 = sigmoid_bwd(%1, %1) : f32[4]\n"
                      "%10 = sum[-1](%0) : f32[2]\n"
                      "return %8, %2\n");
    std::string dot = to_dot(g);
    CHECK(dot.find("digraph") == 0);
    CHECK(dot.find("n0 -> n2;") != std::string::npos);
    CHECK(dot.find("n8 [label=\"%8 mul\\nf32[3, 2]\", peripheries=2]") != std::string::npos);
  }

  TEST_CASE("Boost analyses: topological order, reachability, liveness") {
    Graph g;
    NodeId x = g.input(0, f32({3})), y = g.input(1, f32({3}));
    NodeId a = g.op(OpId::Mul, {x, x});
    NodeId dead = g.op(OpId::Tanh, {y});
    NodeId b = g.op(OpId::Add, {a, y});
    g.add_output(b);
    auto order = topological_order(g);
    REQUIRE(order.size() == g.size());
    std::vector<size_t> pos(g.size());
    for (size_t i = 0; i < order.size(); ++i)
      pos[static_cast<size_t>(order[i])] = i;
    for (size_t i = 0; i < g.size(); ++i)
      for (NodeId o : g.nodes()[i].operands)
        CHECK(pos[static_cast<size_t>(o)] < pos[i]);
    CHECK(num_edges(g) == 5); // mul uses x twice
    auto l = live(g);
    CHECK(l[static_cast<size_t>(b)]);
    CHECK(l[static_cast<size_t>(x)]);
    CHECK_FALSE(l[static_cast<size_t>(dead)]);
    auto users_of_x = reachable_from(g, std::vector{x}, Direction::Users);
    CHECK(users_of_x[static_cast<size_t>(a)]);
    CHECK(users_of_x[static_cast<size_t>(b)]);
    CHECK_FALSE(users_of_x[static_cast<size_t>(y)]);
    CHECK_FALSE(users_of_x[static_cast<size_t>(dead)]);
  }

  TEST_CASE("gather, scatter (duplicates add) and sum_n: forward and gradients") {
    Graph g;
    NodeId x = g.input(0, f32({4, 2})), K = g.input(1, f32({3, 2}));
    NodeId ga = g.gather(x, {2, 0, 2});      // rows x2, x0, x2
    NodeId sc = g.scatter(ga, {1, 1, 0}, 3); // row0 = x2, row1 = x2 + x0, row2 = 0
    NodeId t = g.sum_n(std::vector{sc, sc, g.op(OpId::Mul, {sc, K})});
    NodeId loss = g.op(OpId::Sum, {g.op(OpId::Mul, {t, K})});
    std::vector<Tensor> in = {test::weights({4, 2}, 1), test::weights({3, 2}, 2)};
    const float* X = in[0].f32();
    const float* k = in[1].f32();
    auto v = evaluate(g, in, std::vector{sc, t});
    std::vector<float> want_sc = {X[4], X[5], X[4] + X[0], X[5] + X[1], 0, 0};
    for (int i = 0; i < 6; ++i) {
      CHECK(v[0].f32()[i] == doctest::Approx(want_sc[static_cast<size_t>(i)]));
      CHECK(v[1].f32()[i] ==
            doctest::Approx(want_sc[static_cast<size_t>(i)] * (2 + k[i])).epsilon(1e-6));
    }
    auto grads = differentiate(g, loss, std::vector{x, K});
    auto gv = evaluate(g, in, grads);
    // dL/dsc = K (2 + K) = s; dx row 2 gets s0 + s1 (via rows 0 and 1), row 0 gets s1.
    std::vector<float> s(6), want_dx(8, 0.0f);
    for (int i = 0; i < 6; ++i)
      s[static_cast<size_t>(i)] = k[i] * (2 + k[i]);
    for (int j = 0; j < 2; ++j) {
      want_dx[static_cast<size_t>(4 + j)] =
          s[static_cast<size_t>(j)] + s[static_cast<size_t>(2 + j)];
      want_dx[static_cast<size_t>(j)] = s[static_cast<size_t>(2 + j)];
    }
    for (int i = 0; i < 8; ++i)
      CHECK(gv[0].f32()[i] == doctest::Approx(want_dx[static_cast<size_t>(i)]).epsilon(1e-6));
    check_directional(g, loss, in, {0, 1}, gv);
    // The backward of a gather is a scatter by the same map, and vice versa.
    std::string text = print(g);
    CHECK(text.find("scatter[2 0 2]") != std::string::npos);
    CHECK(text.find("gather[1 1 0]") != std::string::npos);
  }

  TEST_CASE("take and its dense TakeGrad, no gradient for the indices") {
    Graph g;
    NodeId table = g.input(0, f32({5, 3})), idx = g.input(1, i32({4})), K = g.input(2, f32({4, 3}));
    NodeId loss = g.op(OpId::Sum, {g.op(OpId::Mul, {g.op(OpId::Take, {table, idx}), K})});
    auto grads = differentiate(g, loss, std::vector{table, K});
    std::vector<Tensor> in = {test::weights({5, 3}, 1),
                              Tensor::from_i32({4}, std::vector<int32_t>{1, 3, 1, 0}),
                              test::weights({4, 3}, 2)};
    auto gv = evaluate(g, in, grads);
    const float* k = in[2].f32();
    std::vector<float> want(15, 0.0f);
    int rows[] = {1, 3, 1, 0};
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j)
        want[static_cast<size_t>(rows[i] * 3 + j)] += k[i * 3 + j];
    for (int i = 0; i < 15; ++i)
      CHECK(gv[0].f32()[i] == doctest::Approx(want[static_cast<size_t>(i)]).epsilon(1e-6));
    for (int i = 0; i < 12; ++i) // dL/dK = take(table, idx)
      CHECK(gv[1].f32()[i] == in[0].f32()[rows[i / 3] * 3 + i % 3]);
    CHECK(print(g).find("take_grad(%1, ") != std::string::npos);
  }

  TEST_CASE("fan-out is summed once per node, differentiation is idempotent by hash-consing") {
    Graph g;
    NodeId x = g.input(0, f32({5}));
    NodeId loss = g.op(OpId::Add, {g.op(OpId::Sum, {g.op(OpId::Mul, {x, x})}),
                                   g.op(OpId::Sum, {g.op(OpId::Tanh, {x})})});
    auto d1 = differentiate(g, loss, std::vector{x});
    size_t n = g.size();
    auto d2 = differentiate(g, loss, std::vector{x});
    CHECK(d1 == d2);
    CHECK(g.size() == n);
    const Node& gx = g.node(d1[0]);
    CHECK(gx.kind == Kind::SumN);
    CHECK(gx.operands.size() == 3); // x * x contributes twice, tanh once
    Tensor xv = test::weights({5}, 3);
    auto gv = evaluate(g, std::vector{xv}, d1);
    for (int i = 0; i < 5; ++i) {
      float t = std::tanh(xv.f32()[i]);
      CHECK(gv[0].f32()[i] == doctest::Approx(2 * xv.f32()[i] + 1 - t * t).epsilon(1e-5));
    }
  }

  TEST_CASE("split with an unused result, unrelated inputs get zeros, no second order") {
    Graph g;
    NodeId x = g.input(0, f32({6})), K = g.input(1, f32({2})), z = g.input(2, f32({2}));
    NodeId p0 = g.op(OpId::Split, {x}, Attr{{3}}, 0);
    NodeId p2 = g.op(OpId::Split, {x}, Attr{{3}}, 2);
    NodeId loss =
        g.op(OpId::Add, {g.op(OpId::Sum, {g.op(OpId::Mul, {p0, K})}), g.op(OpId::Sum, {p2})});
    auto d = differentiate(g, loss, std::vector{x, z});
    std::vector<Tensor> in = {test::weights({6}), Tensor::from_f32({2}, std::vector<float>{3, -2}),
                              test::weights({2})};
    auto gv = evaluate(g, in, d);
    std::vector<float> want = {3, -2, 0, 0, 1, 1};
    for (int i = 0; i < 6; ++i)
      CHECK(gv[0].f32()[i] == want[static_cast<size_t>(i)]);
    CHECK(g.node(d[1]).kind == Kind::Const);
    CHECK(gv[1].f32()[0] == 0.0f);

    NodeId s = g.op(OpId::Sigmoid, {x});
    NodeId second = g.op(OpId::Sum, {g.grad(GradOp::SigmoidBwd, {s, x})});
    CHECK(error_of([&] { differentiate(g, second, std::vector{x}); }).find("second-order") !=
          std::string::npos);
    CHECK(error_of([&] {
            evaluate(g, std::vector{test::weights({5})}, std::vector{p0});
          }).find("input #0 is f32[5], the graph expects f32[6]") != std::string::npos);
  }

  TEST_CASE("TreeLSTM cell: graph AD agrees with the generic path and with finite differences") {
    auto m = std::make_shared<ir::Module>();
    Diagnostics diag;
    auto r = types::add_source(*m, kCellSrc, "cell.pe", diag);
    INFO(diag.render());
    REQUIRE(r.ok);
    auto dims = interp::bind_dims(*m, {});
    interp::Interpreter interp(m, dims);
    interp::Params params = interp::init_params(*m, dims, 7);
    auto ref = interp.value_and_grad("L", {}, params);

    Graph g;
    NodeId loss = build_cell(g);
    std::vector<NodeId> wrt(8, kNoNode);
    for (size_t i = 0; i < g.size(); ++i)
      if (g.nodes()[i].kind == Kind::Input)
        wrt[g.nodes()[i].slot] = static_cast<NodeId>(i);
    size_t forward_size = g.size();
    auto grads = differentiate(g, loss, wrt);
    CHECK(g.size() > forward_size);

    std::vector<NodeId> outs = {loss};
    outs.insert(outs.end(), grads.begin(), grads.end());
    auto v = evaluate(g, params.values, outs);
    CHECK(v[0].item_f32() == doctest::Approx(ref.loss).epsilon(1e-5));
    std::vector<Tensor> gv(v.begin() + 1, v.end());
    for (size_t i = 0; i < 8; ++i) {
      Tensor want = ref.grads[i].to_dense(params.values[i].shape());
      CHECK(test::max_abs(want) > 1e-3); // every input matters
      test::check_close(gv[i], want, params.names[i]);
    }
    check_directional(g, loss, params.values, {0, 1, 2, 3, 4, 5, 6, 7}, gv);
    // AD only appends: the loss still needs exactly the forward nodes. Split's rule runs once
    // with every result's gradient (one backward concat beside the forward one).
    auto fwd = live(g, std::vector{loss});
    for (size_t i = 0; i < g.size(); ++i)
      CHECK(fwd[i] == (i < forward_size));
    size_t concats = 0;
    for (const Node& n : g.nodes())
      concats += n.kind == Kind::Op && n.op() == OpId::Concat;
    CHECK(concats == 2);
  }
}

} // namespace tests_graph_graph_test
