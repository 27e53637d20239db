// The list builtin `reverse` (docs/language.md): on the generic path it gives what an
// accumulator recursion gives (tests/runtime/models/reverse_acc.pe), Int lists and a tree's
// words alike, and so the same loss and gradients; a model that reads it has plans that match
// the generic path on every executor (loss and every gradient); and the partial evaluator
// treats it as structure: the same instances as the recursion, for less fuel (no call per
// element). Its type errors are in tests/errors/types/reverse.pe.
#include "runtime/data/synthetic.h"
#include "specializer/partial_eval.h"
#include "src/interp/interpreter.h"
#include "tests/support/batches.h"
#include "tests/support/compare.h"
#include "tests/support/plan_check.h"

#include <doctest/doctest.h>

#include <string>

namespace tests_runtime_reverse_test {

using namespace pejit;

namespace {

const std::string kBuiltin = PEJIT_SOURCE_DIR "/tests/runtime/models/reverse.pe";
const std::string kRecursion = PEJIT_SOURCE_DIR "/tests/runtime/models/reverse_acc.pe";

interp::Value ints(std::initializer_list<int64_t> xs) {
  interp::Values v;
  for (int64_t x : xs)
    v.push_back(interp::Value::integer(x));
  return interp::Value::list(std::move(v));
}

std::vector<int64_t> int_list(const interp::Value& v) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.list_size(); ++i)
    out.push_back(v.list_at(i).as_int());
  return out;
}

// A batch's words per tree, as Int lists.
std::vector<std::vector<int32_t>> word_lists(const interp::Value& v) {
  std::vector<std::vector<int32_t>> out;
  for (size_t s = 0; s < v.list_size(); ++s) {
    auto& ws = out.emplace_back();
    for (size_t i = 0; i < v.list_at(s).list_size(); ++i)
      ws.push_back(v.list_at(s).list_at(i).as_tensor().item_i32());
  }
  return out;
}

} // namespace

TEST_SUITE("list builtins") {
  TEST_CASE("reverse: the generic path gives what the accumulator recursion gives") {
    data::Vocab vocab;
    auto trees = data::gen_sst(8, 3, data::Shape::Sst, vocab);
    test::FileModel b(kBuiltin, static_cast<int64_t>(vocab.size()));
    test::FileModel r(kRecursion, static_cast<int64_t>(vocab.size()));
    interp::Interpreter ib(b.m, b.dims), ir(r.m, r.dims);
    for (auto xs : {ints({}), ints({7}), ints({1, 2, 3, 4})}) {
      std::vector<int64_t> got = int_list(ib.run("ints", {xs}, b.params));
      CHECK(got == int_list(ir.run("ints", {xs}, r.params)));
      std::vector<int64_t> in = int_list(xs);
      CHECK(got == std::vector<int64_t>(in.rbegin(), in.rend()));
    }
    interp::Value batch = test::tree_batch(*b.m, trees);
    auto got = word_lists(ib.run("backwards", {batch}, b.params));
    CHECK(got == word_lists(ir.run("backwards", {batch}, r.params)));
    REQUIRE(got.size() == 8);
    CHECK(got[0].size() > 1);

    // The same loss and gradients: the parameters are declared alike, drawn from one seed.
    auto gb = ib.value_and_grad("loss", {batch}, b.params);
    auto gr = ir.value_and_grad("loss", {batch}, r.params);
    CHECK(test::loss_close(gb.loss, gr.loss));
    for (size_t p = 0; p < b.params.values.size(); ++p) {
      CAPTURE(b.params.names[p]);
      const Shape& s = b.params.values[p].shape();
      test::check_close(gb.grads[p].to_dense(s), gr.grads[p].to_dense(s), b.params.names[p]);
    }
  }

  TEST_CASE("reverse: plans match the generic path on every executor, loss and every gradient") {
    for (auto shape : {data::Shape::Sst, data::Shape::Deep, data::Shape::Balanced}) {
      CAPTURE(data::shape_name(shape));
      data::Vocab vocab;
      auto trees = data::gen_sst(12, 5, shape, vocab);
      test::FileModel md(kBuiltin, static_cast<int64_t>(vocab.size()));
      for (const auto& [mode, st] :
           test::check_plan_matches_generic(md, test::tree_batch(*md.m, trees))) {
        std::string exec = test::exec_name(mode);
        CAPTURE(exec);
        if (mode == test::Exec::Interpreter)
          continue;
        CHECK(st.groups_interpreted == 0);
        CHECK(st.interpreted_seconds == 0);
      }
    }
  }

  TEST_CASE("reverse: the partial evaluator leaves the recursion's instances, for less fuel") {
    data::Vocab vocab;
    auto trees = data::gen_sst(25, 7, data::Shape::Sst, vocab);
    test::FileModel b(kBuiltin, static_cast<int64_t>(vocab.size()));
    test::FileModel r(kRecursion, static_cast<int64_t>(vocab.size()));
    specializer::TemplateTable tb, tr;
    auto pb =
        specializer::partially_evaluate(*b.m, b.dims, "loss", test::tree_batch(*b.m, trees), tb);
    auto pr =
        specializer::partially_evaluate(*r.m, r.dims, "loss", test::tree_batch(*r.m, trees), tr);
    REQUIRE(pb.ok);
    REQUIRE(pr.ok);
    CHECK(pb.residual.instances.size() == pr.residual.instances.size());
    CHECK(tb.size() == tr.size());
    // Two calls per word fewer: well under the recursion's fuel.
    CHECK(pb.residual.fuel_used < pr.residual.fuel_used);
  }
}

} // namespace tests_runtime_reverse_test
