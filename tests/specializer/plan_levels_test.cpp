// The batching schedule's levels (plan.h), checked against a direct computation: every live
// instance sits above its producers; one that feeds a template call sits at the start of its
// window (one above its producers' highest level); one that feeds none (the per-node loss, the
// sums) at the end of its window, depth - its height, where the depth is the live DAG's
// longest path found by a forward ASAP pass (make_plan finds it as the greatest height, with
// no such pass). On the TreeLSTM over trees of every shape and on random programs, with and
// without sums flowing into template calls.
#include "runtime/data/synthetic.h"
#include "tests/specializer/random_batches.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "runtime/train/encode.h"
#include "src/types/check.h"

#include <doctest/doctest.h>

#include <algorithm>

namespace tests_specializer_plan_levels_test {

using namespace pejit;

namespace {

void check_levels(const specializer::Residual& r, const specializer::Plan& p) {
  const size_t n = r.instances.size();
  std::vector<char> live(n, 0), feeds_template(n, 0);
  for (const auto& o : r.outputs)
    if (o.kind == specializer::Ref::Kind::Inst)
      live[static_cast<size_t>(o.index)] = 1;
  std::vector<int> height(n, 0);
  for (size_t i = n; i-- > 0;) {
    if (!live[i])
      continue;
    for (const auto& a : r.args(i))
      if (a.kind == specializer::Ref::Kind::Inst) {
        auto ai = static_cast<size_t>(a.index);
        live[ai] = 1;
        feeds_template[ai] |= r.instances[i].tmpl != specializer::Instance::kSumN;
        height[ai] = std::max(height[ai], height[i] + 1);
      }
  }
  std::vector<int> asap(n, 0);
  int depth = 0;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& a : r.args(i))
      if (a.kind == specializer::Ref::Kind::Inst)
        asap[i] = std::max(asap[i], asap[static_cast<size_t>(a.index)] + 1);
    if (live[i])
      depth = std::max(depth, asap[i]);
  }
  auto level_of = [&](size_t i) {
    REQUIRE(p.group_of[i] >= 0);
    return p.groups[static_cast<size_t>(p.group_of[i])].level;
  };
  for (size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    if (!live[i]) {
      CHECK(p.group_of[i] == -1);
      continue;
    }
    int start = 0;
    for (const auto& a : r.args(i))
      if (a.kind == specializer::Ref::Kind::Inst) {
        int l = level_of(static_cast<size_t>(a.index));
        CHECK(l < level_of(i));
        start = std::max(start, l + 1);
      }
    int want = feeds_template[i] ? start : std::max(start, depth - height[i]);
    CHECK(level_of(i) == want);
    CHECK(level_of(i) <= depth);
  }
}

} // namespace

TEST_CASE("plan levels: the TreeLSTM on trees of every shape") {
  for (auto shape : {data::Shape::Sst, data::Shape::Deep, data::Shape::Balanced}) {
    for (size_t count : {1, 7, 25}) {
      CAPTURE(static_cast<int>(shape));
      CAPTURE(count);
      data::Vocab vocab;
      auto trees = data::gen_sst(count, 3 + count, shape, vocab);
      auto m = std::make_shared<ir::Module>();
      Diagnostics d;
      REQUIRE_MESSAGE(types::add_file(*m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d).ok,
                      d.render());
      auto dims = interp::bind_dims(*m, {{"V", static_cast<int64_t>(vocab.size())}});
      runtime::TreeEncoder enc(*m, "Tree");
      interp::Values xs;
      for (const auto& t : trees)
        xs.push_back(enc.encode(t));
      specializer::TemplateTable tt;
      for (const char* entry : {"loss", "infer"}) {
        CAPTURE(entry);
        auto pe = specializer::partially_evaluate(*m, dims, entry, interp::Value::list(xs), tt);
        REQUIRE(pe.ok);
        check_levels(pe.residual, specializer::make_plan(pe.residual, tt));
      }
    }
  }
}

TEST_CASE("plan levels: random programs, with and without sums flowing into templates") {
  for (bool sums : {false, true}) {
    testgen::Options opt;
    opt.sums_into_templates = sums;
    for (uint64_t seed = 1; seed <= 60; ++seed) {
      CAPTURE(sums);
      CAPTURE(seed);
      auto prog = testgen::generate(seed, opt);
      INFO("program:\n" << prog.source);
      auto m = std::make_shared<ir::Module>();
      Diagnostics d;
      REQUIRE_MESSAGE(types::add_source(*m, prog.source, "random.pe", d).ok, d.render());
      auto dims = interp::bind_dims(*m, {});
      specializer::TemplateTable tt;
      auto pe = specializer::partially_evaluate(*m, dims, "loss", prog.batch, tt);
      REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);
      check_levels(pe.residual, specializer::make_plan(pe.residual, tt));
    }
  }
}

} // namespace tests_specializer_plan_levels_test
