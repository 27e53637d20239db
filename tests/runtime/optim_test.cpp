// Tests of runtime/optim: the first steps of SGD, Adagrad and Adam against hand-computed
// values (dense, row-sparse with duplicates, mixed, weight decay, clipping), sparse steps equal
// to the dense step of to_dense(), lazy Adam, state round trips and steady-state allocation.
#include "runtime/optim/optimizer.h"

#include "src/kernels/kernels.h"
#include "src/util/check.h"
#include "tests/support/compare.h"
#include "tests/support/tensors.h"

#include <doctest/doctest.h>

#include <random>

namespace tests_runtime_optim_test {

using namespace pejit;
using namespace pejit::optim;
using pejit::optim::Optimizer; // not pejit::Optimizer (pejit.h), which a unity batch may include
using interp::ParamGrad;
using interp::Params;
using kernels::RowSparse;

namespace {

RowSparse sparse(std::vector<int32_t> idx, const Shape& rows_shape, std::vector<float> rows,
                 int64_t num_rows) {
  RowSparse r;
  r.indices = Tensor::from_i32(Shape{static_cast<int64_t>(idx.size())}, idx);
  r.rows = Tensor::from_f32(rows_shape, rows);
  r.num_rows = num_rows;
  return r;
}

ParamGrad dense_grad(Tensor g) {
  ParamGrad pg;
  pg.dense = std::move(g);
  return pg;
}

ParamGrad sparse_grad(std::vector<RowSparse> parts) {
  ParamGrad pg;
  pg.sparse = std::move(parts);
  return pg;
}

Params one_param(const std::string& name, Tensor v) {
  Params p;
  p.names = {name};
  p.values = {std::move(v)};
  return p;
}

void check_values(const Tensor& t, std::vector<float> expect) {
  REQUIRE(t.numel() == static_cast<int64_t>(expect.size()));
  for (size_t i = 0; i < expect.size(); ++i) {
    INFO("element " << i);
    CHECK(t.f32()[i] == doctest::Approx(expect[i]).epsilon(1e-6));
  }
}

OptimizerOptions opts(Kind k, float lr) {
  OptimizerOptions o;
  o.kind = k;
  o.lr = lr;
  return o;
}

Tensor random_tensor(std::mt19937& rng, const Shape& s) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor t = Tensor::empty(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = nd(rng);
  return t;
}

/// A row-sparse gradient of a [rows, d] table over `idx` (duplicates allowed), random rows.
RowSparse random_sparse(std::mt19937& rng, std::vector<int32_t> idx, int64_t rows, int64_t d) {
  RowSparse r;
  r.indices = Tensor::from_i32(Shape{static_cast<int64_t>(idx.size())}, idx);
  r.rows = random_tensor(rng, Shape{static_cast<int64_t>(idx.size()), d});
  r.num_rows = rows;
  return r;
}

} // namespace

TEST_SUITE("optim") {

  TEST_CASE("parse_kind") {
    CHECK(parse_kind("sgd") == Kind::Sgd);
    CHECK(parse_kind("adagrad") == Kind::Adagrad);
    CHECK(parse_kind("adam") == Kind::Adam);
    CHECK_THROWS_AS(parse_kind("Adam"), Error);
    CHECK_THROWS_WITH_AS(parse_kind("rmsprop"), doctest::Contains("rmsprop"), Error);
    OptimizerOptions bad;
    bad.lr = -1;
    CHECK_THROWS_AS(Optimizer{bad}, Error);
    bad = {};
    bad.beta2 = 1.0f;
    CHECK_THROWS_AS(Optimizer{bad}, Error);
  }

  TEST_CASE("dense steps: SGD, Adagrad, Adam") {
    ParamGrad g1 = dense_grad(test::F(Shape{2}, {0.5f, -1.0f}));
    {
      Params p = one_param("w", test::F(Shape{2}, {1, 2}));
      Optimizer o(opts(Kind::Sgd, 0.1f));
      o.step(p, {g1});
      check_values(p.values[0], {0.95f, 2.1f});
      o.step(p, {g1});
      check_values(p.values[0], {0.9f, 2.2f});
      CHECK(o.steps() == 2);
    }
    {
      Params p = one_param("w", test::F(Shape{2}, {1, 2}));
      Optimizer o(opts(Kind::Adagrad, 0.1f));
      o.step(p, {g1}); // sum = g^2, so the first step is lr * sign(g)
      check_values(p.values[0], {0.9f, 2.1f});
      o.step(p, {g1}); // sum = 2 g^2
      check_values(p.values[0], {0.8292893f, 2.1707107f});
      auto st = o.state();
      REQUIRE(st.size() == 2);
      CHECK(st[0].first == "adagrad_sum.w");
      check_values(st[0].second, {0.5f, 2.0f});
      CHECK(st[1].first == "steps");
      check_values(st[1].second, {0.0f, 2.0f});
    }
    {
      Params p = one_param("w", test::F(Shape{1}, {1}));
      Optimizer o(opts(Kind::Adam, 0.1f));
      o.step(p, {dense_grad(test::F(Shape{1}, {0.5f}))});
      check_values(p.values[0], {0.9f});
      o.step(p, {dense_grad(test::F(Shape{1}, {-1.0f}))});
      check_values(p.values[0], {0.93661035f});
    }
  }

  TEST_CASE("Adagrad initial accumulator and eps") {
    OptimizerOptions o = opts(Kind::Adagrad, 0.1f);
    o.adagrad_init = 0.75f;
    o.adagrad_eps = 0.5f;
    Params p = one_param("w", test::F(Shape{1}, {1}));
    Optimizer opt(o);
    opt.step(p, {dense_grad(test::F(Shape{1}, {0.5f}))}); // sum = 1, p -= 0.1*0.5/1.5
    check_values(p.values[0], {1.0f - 0.05f / 1.5f});
  }

  TEST_CASE("sparse steps with duplicate indices touch only their rows") {
    Tensor init = test::F(Shape{4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
    // indices [2, 0, 2]: row 0 gets [2, -2], row 2 gets [1, 1] + [3, 0] = [4, 1].
    ParamGrad g1 = sparse_grad({sparse({2, 0, 2}, Shape{3, 2}, {1, 1, 2, -2, 3, 0}, 4)});
    ParamGrad g2 = sparse_grad({sparse({3, 2}, Shape{2, 2}, {1, 0, -4, 1}, 4)});
    {
      Params p = one_param("emb", init.clone());
      Optimizer o(opts(Kind::Sgd, 0.5f));
      o.step(p, {g1});
      check_values(p.values[0], {0, 3, 3, 4, 3, 5.5f, 7, 8});
    }
    {
      Params p = one_param("emb", init.clone());
      Optimizer o(opts(Kind::Adagrad, 0.1f));
      o.step(p, {g1});
      check_values(p.values[0], {0.9f, 2.1f, 3, 4, 4.9f, 5.9f, 7, 8});
      o.step(p, {g2}); // row 3: g = [1, 0] (a zero gradient does not move); row 2: sum = [32, 2]
      check_values(p.values[0], {0.9f, 2.1f, 3, 4, 4.9707107f, 5.8292893f, 6.9f, 8});
      check_values(o.state()[0].second, {4, 4, 0, 0, 32, 2, 1, 0});
    }
  }

  TEST_CASE("mixed dense + sparse gradient on one parameter") {
    ParamGrad g = dense_grad(test::F(Shape{3, 1}, {1, 1, 1}));
    g.sparse.push_back(sparse({1, 1}, Shape{2, 1}, {2, 3}, 3));
    Params p = one_param("w", test::F(Shape{3, 1}, {0, 0, 0}));
    Optimizer o(opts(Kind::Sgd, 0.1f));
    o.step(p, {g}); // g = [1, 6, 1]
    check_values(p.values[0], {-0.1f, -0.6f, -0.1f});
    o.step(p, {g});
    check_values(p.values[0], {-0.2f, -1.2f, -0.2f});
  }

  TEST_CASE("weight decay, dense and sparse") {
    OptimizerOptions oo = opts(Kind::Sgd, 0.5f);
    oo.weight_decay = 0.1f;
    Params p = one_param("w", test::F(Shape{2}, {1, 2}));
    Optimizer o(oo);
    ParamGrad g = dense_grad(test::F(Shape{2}, {0, 1}));
    o.step(p, {g}); // g' = [0.1, 1.2]
    check_values(p.values[0], {0.95f, 1.4f});
    o.step(p, {g}); // g' = [0.095, 1.14]
    check_values(p.values[0], {0.9025f, 0.83f});

    // Sparse: decay applies to the touched row only.
    Params q = one_param("emb", test::F(Shape{3, 1}, {1, 2, 3}));
    Optimizer os(oo);
    os.step(q, {sparse_grad({sparse({1}, Shape{1, 1}, {1}, 3)})}); // g' = 1 + 0.2
    check_values(q.values[0], {1, 1.4f, 3});
  }

  TEST_CASE("global norm clipping counts coalesced sparse rows") {
    OptimizerOptions oo = opts(Kind::Sgd, 1.0f);
    oo.clip_norm = 1.0f;
    Params p;
    p.names = {"a", "b", "c"};
    p.values = {test::F(Shape{1}, {0}), test::F(Shape{2, 1}, {0, 0}), test::F(Shape{1}, {7})};
    // a: 3; b: row 0 gets 2 + 2 = 4; c: no gradient. Norm 5 (not sqrt(17): duplicates summed).
    std::vector<ParamGrad> g = {dense_grad(test::F(Shape{1}, {3})),
                                sparse_grad({sparse({0, 0}, Shape{2, 1}, {2, 2}, 2)}),
                                {}};
    Optimizer o(oo);
    o.step(p, g);
    check_values(p.values[0], {-0.6f});
    check_values(p.values[1], {-0.8f, 0});
    check_values(p.values[2], {7});

    oo.clip_norm = 10.0f; // above the norm: no scaling
    Params q = p.clone();
    Optimizer o2(oo);
    o2.step(q, g);
    check_values(q.values[0], {-3.6f});
    check_values(q.values[1], {-4.8f, 0});
  }

  TEST_CASE("sparse step == dense step of to_dense() for SGD and Adagrad (bit-exact)") {
    for (Kind k : {Kind::Sgd, Kind::Adagrad}) {
      CAPTURE(kind_name(k));
      std::mt19937 rng(7);
      Tensor init = random_tensor(rng, Shape{6, 3});
      Params ps = one_param("emb", init.clone()), pd = one_param("emb", init.clone());
      OptimizerOptions oo = opts(k, 0.3f);
      oo.weight_decay = 0.0f;
      Optimizer os(oo), od(oo);
      for (int step = 0; step < 3; ++step) {
        ParamGrad g = sparse_grad(
            {random_sparse(rng, {4, 1, 4, 0, 1}, 6, 3), random_sparse(rng, {1, 5}, 6, 3)});
        if (step == 2)
          g.dense = random_tensor(rng, Shape{6, 3}); // mixed
        os.step(ps, {g});
        od.step(pd, {dense_grad(g.to_dense(Shape{6, 3}))});
        CHECK(test::same_bits(ps.values[0], pd.values[0]));
      }
      if (k == Kind::Adagrad)
        CHECK(test::same_bits(os.state()[0].second, od.state()[0].second));
      // Rows 2 and 3 had no gradient until the mixed step.
    }
  }

  TEST_CASE("lazy Adam: equals dense Adam on rows touched every step, leaves others alone") {
    std::mt19937 rng(11);
    Tensor init = random_tensor(rng, Shape{5, 2});
    Params ps = one_param("emb", init.clone()), pd = one_param("emb", init.clone());
    Optimizer os(opts(Kind::Adam, 0.01f)), od(opts(Kind::Adam, 0.01f));
    auto row = [](const Tensor& t, int r) {
      return std::vector<float>(t.f32() + 2 * r, t.f32() + 2 * r + 2);
    };
    for (int step = 0; step < 2; ++step) {
      ParamGrad g = sparse_grad({random_sparse(rng, {1, 2, 4, 2}, 5, 2)});
      os.step(ps, {g});
      od.step(pd, {dense_grad(g.to_dense(Shape{5, 2}))});
      CHECK(test::same_bits(ps.values[0], pd.values[0])); // untouched rows: m = v = 0, no move
    }
    for (int r : {0, 3})
      CHECK(row(ps.values[0], r) == row(init, r));
    // Step 3 touches row 1 only: dense Adam still moves rows 2 and 4 (decayed moments), lazy
    // Adam does not.
    ParamGrad g = sparse_grad({random_sparse(rng, {1}, 5, 2)});
    Tensor before = ps.values[0].clone();
    os.step(ps, {g});
    od.step(pd, {dense_grad(g.to_dense(Shape{5, 2}))});
    CHECK(row(ps.values[0], 1) == row(pd.values[0], 1));
    for (int r : {2, 4}) {
      CHECK(row(ps.values[0], r) == row(before, r));
      CHECK(row(pd.values[0], r) != row(before, r));
    }
  }

  TEST_CASE("an empty gradient leaves the parameter and its Adam state alone") {
    ParamGrad g = dense_grad(test::F(Shape{1}, {0.5f}));
    Params a = one_param("w", test::F(Shape{1}, {1})), b = a.clone();
    Optimizer oa(opts(Kind::Adam, 0.1f)), ob(opts(Kind::Adam, 0.1f));
    oa.step(a, {g});
    oa.step(a, {ParamGrad{}});
    CHECK(a.values[0].item_f32() == doctest::Approx(0.9f));
    oa.step(a, {g});
    ob.step(b, {g});
    ob.step(b, {g});
    CHECK(test::same_bits(a.values[0], b.values[0]));
    auto st = oa.state();
    REQUIRE(st.size() == 4); // adam_m.w, adam_step.w, adam_v.w, steps
    CHECK(st[1].first == "adam_step.w");
    check_values(st[1].second, {0, 2});
    check_values(st[3].second, {0, 3});
  }

  TEST_CASE("state round trip continues bit-exactly, bad state is rejected") {
    for (Kind k : {Kind::Adagrad, Kind::Adam}) {
      CAPTURE(kind_name(k));
      std::mt19937 rng(3);
      Params p;
      p.names = {"emb", "w"};
      p.values = {random_tensor(rng, Shape{4, 2}), random_tensor(rng, Shape{3})};
      auto grads = [&] {
        return std::vector<ParamGrad>{sparse_grad({random_sparse(rng, {0, 3, 0}, 4, 2)}),
                                      dense_grad(random_tensor(rng, Shape{3}))};
      };
      Optimizer o1(opts(k, 0.05f));
      o1.step(p, grads());
      o1.step(p, grads());
      Optimizer o2(opts(k, 0.05f));
      o2.load_state(o1.state());
      CHECK(o2.steps() == 2);
      Params p2 = p.clone();
      auto g = grads();
      o1.step(p, g);
      o2.step(p2, g);
      for (size_t i = 0; i < 2; ++i)
        CHECK(test::same_bits(p.values[i], p2.values[i]));
    }
    Optimizer adam(opts(Kind::Adam, 0.1f));
    CHECK_THROWS_WITH_AS(adam.load_state({{"adagrad_sum.w", Tensor::zeros(DType::F32, Shape{1})}}),
                         doctest::Contains("adagrad_sum.w"), Error);
    CHECK_THROWS_AS(adam.load_state({{"adam_m.w", Tensor::zeros(DType::F32, Shape{1})}}), Error);
    Optimizer ada(opts(Kind::Adagrad, 0.1f));
    ada.load_state({{"adagrad_sum.w", Tensor::zeros(DType::F32, Shape{5})}});
    Params p = one_param("w", test::F(Shape{2}, {1, 2}));
    CHECK_THROWS_WITH_AS(ada.step(p, {dense_grad(test::F(Shape{2}, {1, 1}))}),
                         doctest::Contains("[5]"), Error);
    check_values(p.values[0], {1, 2});
  }

  TEST_CASE("bad gradients throw before anything is modified") {
    Params p;
    p.names = {"a", "emb"};
    p.values = {test::F(Shape{1}, {1}), test::F(Shape{2, 1}, {1, 2})};
    Optimizer o(opts(Kind::Sgd, 0.1f));
    std::vector<ParamGrad> g = {dense_grad(test::F(Shape{1}, {1})),
                                sparse_grad({sparse({2}, Shape{1, 1}, {1}, 2)})};
    CHECK_THROWS_WITH_AS(o.step(p, g), doctest::Contains("outside [0, 2)"), Error);
    check_values(p.values[0], {1});
    g[1] = dense_grad(test::F(Shape{3}, {1, 1, 1}));
    CHECK_THROWS_WITH_AS(o.step(p, g), doctest::Contains("does not match"), Error);
    CHECK_THROWS_AS(o.step(p, {g[0]}), Error);
    check_values(p.values[0], {1});
    CHECK(o.steps() == 0);
  }

  TEST_CASE("shared storage is copied before writing, steady state allocates no tensors") {
    Tensor v = test::F(Shape{8, 4}, std::vector<float>(32, 1.0f));
    Params p = one_param("emb", v);
    Optimizer o(opts(Kind::Adam, 0.1f));
    std::mt19937 rng(5);
    ParamGrad g = sparse_grad({random_sparse(rng, {1, 6, 1}, 8, 4)});
    g.dense = random_tensor(rng, Shape{8, 4});
    ParamGrad gs = sparse_grad({random_sparse(rng, {7, 0, 7, 3}, 8, 4)});
    o.step(p, {g});
    CHECK(v.f32()[0] == 1.0f); // the caller's handle kept its values
    CHECK(!p.values[0].shares_storage(v));
    o.step(p, {gs});
    auto before = tensor_pool_stats();
    for (int i = 0; i < 5; ++i) {
      o.step(p, {g});
      o.step(p, {gs});
    }
    auto after = tensor_pool_stats();
    CHECK(after.system_allocs == before.system_allocs);
    CHECK(after.reuses == before.reuses);
    // A state() snapshot is not changed by later steps.
    auto snap = o.state();
    Tensor m = snap[0].second.clone();
    o.step(p, {g});
    CHECK(test::same_bits(snap[0].second, m));
  }
}

} // namespace tests_runtime_optim_test
