// The TreeLSTM example on the generic path: gradients by check_grad on random trees of every
// shape, and training through the API (plain SGD) lowers the loss.
#include "runtime/data/synthetic.h"
#include "src/interp/interpreter.h"
#include "src/kernels/kernels.h"
#include "runtime/train/encode.h"
#include "src/types/check.h"

#include <doctest/doctest.h>

namespace tests_interp_treelstm_test {

using namespace pejit;

namespace {

struct Fixture {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  interp::Params params;

  explicit Fixture(int64_t vocab) {
    Diagnostics d;
    auto r = types::add_file(*m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d);
    REQUIRE_MESSAGE(r.ok, d.render());
    dims = interp::bind_dims(*m, {{"V", vocab}});
    params = interp::init_params(*m, dims, 7);
  }
};

interp::Value batch_of(const ir::Module& m, const std::vector<data::ParseTree>& ts) {
  runtime::TreeEncoder enc(m, "Tree");
  interp::Values xs;
  for (const auto& t : ts)
    xs.push_back(enc.encode(t));
  return interp::Value::list(std::move(xs));
}

} // namespace

TEST_SUITE("interp") {
  TEST_CASE("TreeLSTM: AD agrees with central differences on random trees of every shape") {
    for (auto shape : {data::Shape::Sst, data::Shape::Deep, data::Shape::Balanced}) {
      data::Vocab vocab;
      auto trees = data::gen_sst(3, 11, shape, vocab);
      Fixture f(static_cast<int64_t>(vocab.size()));
      interp::Interpreter in(f.m, f.dims);
      auto rep = interp::check_grad(in, "loss", {batch_of(*f.m, trees)}, f.params, 3, 5);
      CAPTURE(data::shape_name(shape));
      CHECK_MESSAGE(rep.ok, rep.message);
    }
  }

  TEST_CASE("TreeLSTM: a single-leaf tree") {
    data::Vocab vocab;
    data::ParseTree t;
    t.nodes.push_back({3, vocab.add("word"), {}});
    t.tokens.push_back("word");
    Fixture f(static_cast<int64_t>(vocab.size()));
    interp::Interpreter in(f.m, f.dims);
    auto rep = interp::check_grad(in, "loss", {batch_of(*f.m, {t})}, f.params, 3, 9);
    CHECK_MESSAGE(rep.ok, rep.message);
    auto preds = in.run("infer_nodes", {batch_of(*f.m, {t})}, f.params);
    CHECK(preds.list_size() == 1);
    CHECK(preds.list_at(0).list_size() == 1);
  }

  TEST_CASE("TreeLSTM: the embedding gradient is row-sparse over the batch's words") {
    data::Vocab vocab;
    auto trees = data::gen_sst(4, 3, data::Shape::Sst, vocab);
    Fixture f(static_cast<int64_t>(vocab.size()));
    interp::Interpreter in(f.m, f.dims);
    auto g = in.value_and_grad("loss", {batch_of(*f.m, trees)}, f.params);
    int e = f.params.index("emb");
    REQUIRE(e >= 0);
    const auto& ge = g.grads[static_cast<size_t>(e)];
    CHECK_FALSE(ge.dense.defined());
    size_t leaves = 0;
    for (const auto& t : trees)
      leaves += t.leaves();
    size_t rows = 0;
    for (const auto& s : ge.sparse)
      rows += static_cast<size_t>(s.indices.numel());
    CHECK(rows == leaves);
    // Every other parameter has a dense gradient.
    for (size_t p = 0; p < g.grads.size(); ++p)
      if (static_cast<int>(p) != e)
        CHECK(g.grads[p].dense.defined());
  }

  TEST_CASE("TreeLSTM trains through the API: SGD lowers the loss over a few batches") {
    data::Vocab vocab;
    auto trees = data::gen_sst(40, 21, data::Shape::Sst, vocab);
    Fixture f(static_cast<int64_t>(vocab.size()));
    interp::Interpreter in(f.m, f.dims);
    std::vector<interp::Value> batches;
    for (size_t b = 0; b < trees.size(); b += 10)
      batches.push_back(batch_of(
          *f.m, {trees.begin() + static_cast<long>(b), trees.begin() + static_cast<long>(b + 10)}));
    auto total = [&] {
      double s = 0;
      for (const auto& b : batches)
        s += in.run("loss", {b}, f.params).as_tensor().item_f32();
      return s;
    };
    double before = total();
    for (int epoch = 0; epoch < 3; ++epoch)
      for (const auto& b : batches) {
        auto g = in.value_and_grad("loss", {b}, f.params);
        for (size_t p = 0; p < f.params.values.size(); ++p) {
          if (g.grads[p].empty())
            continue;
          Tensor d = g.grads[p].to_dense(f.params.values[p].shape());
          kernels::scale_inplace(d, -0.01f);
          kernels::add_inplace(f.params.values[p], d);
        }
      }
    double after = total();
    CHECK(after < 0.9 * before);
  }
}

} // namespace tests_interp_treelstm_test
