// Fragments, the partial evaluator's memo of inlined calls (partial_eval.cpp): a residual made
// with fragments (recorded, replayed, or both in one batch) equals the one made by evaluating
// every call, instance for instance, on seeded random trees and random programs; calls where
// a replay would be wrong or unbounded (closures, constants, overlapping arguments, fuel and
// depth bounds) are evaluated, with the same outcome as without fragments.
// Also: without PeOptions::keep_inputs, the same residual with no payload copies; and trees
// met before taken whole (BatchScan) give the same residual as trees scanned.
#include "pejit/error.h"
#include "runtime/data/synthetic.h"
#include "runtime/train/encode.h"
#include "specializer/fragments.h"
#include "specializer/partial_eval.h"
#include "src/types/check.h"
#include "tests/specializer/random_batches.h"
#include "tests/support/batches.h"

#include <doctest/doctest.h>

#include <sstream>
#include <thread>

namespace tests_specializer_fragments_test {

using namespace pejit;

namespace {

struct Model {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  explicit Model(const std::string& src, bool is_path, interp::DimBindings over = {}) {
    Diagnostics d;
    auto r = is_path ? types::add_file(*m, src, d) : types::add_source(*m, src, "test.pe", d);
    REQUIRE_MESSAGE(r.ok, d.render());
    dims = interp::bind_dims(*m, over);
  }
};

/// Everything a residual says, with templates by key (ids depend on the table's history).
std::string canonical(const specializer::PeResult& pe, const specializer::TemplateTable& t) {
  std::ostringstream os;
  const specializer::Residual& r = pe.residual;
  os << "ok " << pe.ok << " where " << pe.where.str() << " " << pe.reason << "\nkey " << r.key
     << " fuel " << r.fuel_used << " inputs " << r.num_inputs << " consts " << r.consts.size()
     << "\n";
  auto ref = [&](const specializer::Ref& a) {
    os << " " << static_cast<int>(a.kind) << ":" << a.index << "." << a.out;
  };
  for (size_t i = 0; i < r.instances.size(); ++i) {
    const auto& in = r.instances[i];
    os << (in.tmpl == specializer::Instance::kSumN ? "sum " + r.sum_sigs[in.sum_sig].str()
                                                   : t.at(in.tmpl).key());
    for (const auto& a : r.args(i))
      ref(a);
    os << "\n";
  }
  os << "outputs";
  for (const auto& o : r.outputs)
    ref(o);
  os << "\nshape";
  for (auto s : r.result_shape)
    os << " " << s;
  for (size_t i = 0; i < r.inputs.size(); ++i)
    os << (i % 16 ? " " : "\n") << r.inputs[i].shape().str();
  return os.str();
}

// Values of the small programs' `type T = L(x: f32[2]) | N(l: T, r: T)`: a leaf whose x is
// all v, and a node.
interp::Value leaf(float v) {
  return interp::Value::adt(0, {interp::Value::tensor(Tensor::full({2}, v))});
}
interp::Value node(interp::Value l, interp::Value r) {
  return interp::Value::adt(1, {std::move(l), std::move(r)});
}

// `trees` in batches of 10, in order (a last partial batch left out).
std::vector<interp::Value> batches_of_10(const Model& md,
                                         const std::vector<data::ParseTree>& trees) {
  std::vector<interp::Value> batches;
  for (size_t b = 0; b + 10 <= trees.size(); b += 10)
    batches.push_back(test::tree_batch(*md.m, {trees.begin() + b, trees.begin() + b + 10}));
  return batches;
}

specializer::PeOptions no_fragments() {
  specializer::PeOptions o;
  o.fragment_memo_bytes = 0;
  return o;
}

const std::string kTreeLstm = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

// One batch through `warm` with `with` and through `cold` with the same options but no
// fragments: the same residual. Returns the first.
specializer::PeResult same_as_evaluation(const Model& md, const std::string& entry,
                                         const interp::Value& batch,
                                         specializer::TemplateTable& warm,
                                         specializer::TemplateTable& cold,
                                         const specializer::PeOptions& with) {
  specializer::PeOptions without = with;
  without.fragment_memo_bytes = 0;
  auto a = specializer::partially_evaluate(*md.m, md.dims, entry, batch, warm, with);
  auto c = specializer::partially_evaluate(*md.m, md.dims, entry, batch, cold, without);
  CHECK(c.replayed == 0);
  CHECK(c.whole_trees == 0);
  REQUIRE(canonical(a, warm) == canonical(c, cold));
  return a;
}

// Runs every batch through one table with fragments and through another without, comparing
// each residual; returns the calls replayed in all.
size_t check_same(const Model& md, const std::string& entry,
                  const std::vector<interp::Value>& batches, specializer::PeOptions with = {}) {
  specializer::TemplateTable warm, cold;
  size_t replayed = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    CAPTURE(b);
    replayed += same_as_evaluation(md, entry, batches[b], warm, cold, with).replayed;
  }
  return replayed;
}

// Runs every batch with and without PeOptions::keep_inputs (one table each, so that both
// replay alike): the same residual but for the payload copies, which only the first keeps.
void check_inputs_dropped(const Model& md, const std::string& entry,
                          const std::vector<interp::Value>& batches,
                          specializer::PeOptions with = {}) {
  specializer::TemplateTable kept_t, dropped_t;
  specializer::PeOptions drop = with;
  drop.keep_inputs = false;
  for (size_t b = 0; b < batches.size(); ++b) {
    CAPTURE(b);
    auto kept = specializer::partially_evaluate(*md.m, md.dims, entry, batches[b], kept_t, with);
    auto dropped =
        specializer::partially_evaluate(*md.m, md.dims, entry, batches[b], dropped_t, drop);
    CHECK(dropped.residual.inputs.empty());
    CHECK(kept.residual.inputs.size() == static_cast<size_t>(kept.residual.num_inputs));
    CHECK(dropped.replayed == kept.replayed);
    kept.residual.inputs.clear();
    REQUIRE(canonical(dropped, dropped_t) == canonical(kept, kept_t));
  }
}

// Every Call step of the table's fragments names where its callee's steps and their
// references start (what a replay asks the cache for ahead), and calls no flat fragment (one
// whose instances a recording takes as its own); returns the Call steps checked.
size_t check_call_steps(specializer::TemplateTable& tt) {
  const auto* fm = tt.pe_memo().fragments.p.get();
  REQUIRE(fm != nullptr);
  size_t calls = 0;
  for (const auto& fr : fm->fragments) {
    if (fr.state != specializer::FragmentMemo::Fragment::State::Ok)
      continue;
    for (uint32_t k = 0; k < fr.num_steps; ++k) {
      const auto& st = fm->steps[fr.first_step + k];
      if (st.kind != specializer::FragmentMemo::Step::Kind::Call)
        continue;
      const auto& callee = fm->fragments[static_cast<size_t>(st.id)];
      REQUIRE(callee.state == specializer::FragmentMemo::Fragment::State::Ok);
      CHECK(!callee.flat);
      CHECK(st.callee_step == callee.first_step);
      if (callee.num_steps > 0)
        CHECK(st.callee_ref == fm->steps[callee.first_step].first);
      ++calls;
    }
  }
  return calls;
}

// Partial evaluation as the engine runs it (SpecializerService::make): the skeleton given, as
// walk_batch finds it, and no payload copies; what lets a tree met before be taken whole.
specializer::PeOptions as_engine(const interp::Value& batch) {
  specializer::PeOptions o;
  o.keep_inputs = false;
  o.skeleton = specializer::skeleton_hash(batch);
  return o;
}

// Batches of `n` of `trees` (the same values: a tree recurs as itself, as a training set's
// kept examples do), in order, then in `rounds` seeded shuffles.
std::vector<interp::Value> rebatched(const interp::Values& trees, size_t n, int rounds) {
  std::vector<size_t> order(trees.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::vector<interp::Value> batches;
  uint64_t x = 12345;
  for (int r = 0; r <= rounds; ++r) {
    for (size_t b = 0; b + n <= order.size(); b += n) {
      interp::Values xs;
      for (size_t i = b; i < b + n; ++i)
        xs.push_back(trees[order[i]]);
      batches.push_back(interp::Value::list(std::move(xs)));
    }
    for (size_t i = order.size(); i > 1; --i) { // Fisher-Yates on a fixed LCG
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(order[i - 1], order[(x >> 33) % i]);
    }
  }
  return batches;
}

interp::Values elements(const interp::Value& list) {
  interp::Values xs;
  for (size_t i = 0; i < list.list_size(); ++i)
    xs.push_back(list.list_at(i));
  return xs;
}

// `batch`, its trees reversed, and each of its trees twice (the same values).
std::vector<interp::Value> reordered(const interp::Value& batch) {
  const interp::Values xs = elements(batch);
  interp::Values twice = xs;
  twice.insert(twice.end(), xs.begin(), xs.end());
  return {batch, interp::Value::list(interp::Values(xs.rbegin(), xs.rend())),
          interp::Value::list(std::move(twice))};
}

// Runs every batch as the engine does through one table (trees met before taken whole) and,
// as the engine does too, through another without fragments: the same residuals. Returns the
// trees taken whole in all.
size_t check_whole(const Model& md, const std::string& entry,
                   const std::vector<interp::Value>& batches, specializer::TemplateTable& warm) {
  specializer::TemplateTable cold;
  size_t whole = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    CAPTURE(b);
    whole +=
        same_as_evaluation(md, entry, batches[b], warm, cold, as_engine(batches[b])).whole_trees;
  }
  return whole;
}

} // namespace

TEST_SUITE("specializer") {
  TEST_CASE("trees taken whole: a tree met before is not scanned again and the residual is the "
            "same") {
    data::Vocab vocab;
    auto parsed = data::gen_sst(60, 5, data::Shape::Sst, vocab);
    Model md(kTreeLstm, true, {{"V", static_cast<int64_t>(vocab.size())}});
    const interp::Values trees = elements(test::tree_batch(*md.m, parsed));
    const std::vector<interp::Value> batches = rebatched(trees, 10, 2);
    for (std::string entry : {"loss", "infer", "infer_nodes"}) {
      CAPTURE(entry);
      specializer::TemplateTable tt;
      // The first pass meets every tree once; the shuffled ones take every tree whole.
      CHECK(check_whole(md, entry, batches, tt) == 2 * trees.size());
      CHECK(!tt.pe_memo().fragments.p->trees_off);
    }
    // A tree that is a new value (the same tree encoded again) is scanned.
    specializer::TemplateTable tt;
    check_whole(md, "loss", {batches[0]}, tt);
    const interp::Value again = test::tree_batch(*md.m, {parsed.begin(), parsed.begin() + 10});
    CHECK(specializer::partially_evaluate(*md.m, md.dims, "loss", again, tt, as_engine(again))
              .whole_trees == 0);
  }

  TEST_CASE("trees taken whole: none where the entry reads a tree itself or a call cannot "
            "replay") {
    Model md(R"(type T = L(x: f32[2]) | N(l: T, r: T)
fn f(t: T) -> f32[] { match t { L(x) => sum(x) N(l, r) => f(l) + f(r) } }
fn two(a: T, b: T) -> f32[] { f(a) + f(b) }
entry direct(ts: List[T]) -> f32[] {
  sum_list(map(fn t => match t { L(x) => sum(x) N(l, r) => f(l) + f(r) }, ts))
}
entry aliased(ts: List[T]) -> f32[] { sum_list(map(fn t => { let u = t; f(u) }, ts)) }
entry twice(ts: List[T]) -> f32[] { sum_list(map(fn t => two(t, t), ts)) }
entry mapped(ts: List[T]) -> f32[] { sum_list(map(f, ts)) }
)",
             false);
    const interp::Values trees{node(leaf(1), node(leaf(2), leaf(3))),
                               node(node(leaf(4), leaf(5)), leaf(6)), leaf(7)};
    const std::vector<interp::Value> batches = rebatched(trees, 3, 2);
    // The entry reads its trees itself (a match, a let): never taken whole.
    for (std::string entry : {"direct", "aliased"}) {
      CAPTURE(entry);
      specializer::TemplateTable tt;
      CHECK(check_whole(md, entry, batches, tt) == 0);
    }
    // A call handed the same tree twice is never replayed: the second batch takes its trees
    // whole, meets that call, and is evaluated again with every tree scanned; after that no
    // tree is taken whole with this memo.
    specializer::TemplateTable tt;
    CHECK(check_whole(md, "twice", batches, tt) == 0);
    CHECK(tt.pe_memo().fragments.p->trees_off);
    CHECK(tt.pe_memo().fragments.p->trees.empty());
    specializer::TemplateTable mapped;
    CHECK(check_whole(md, "mapped", batches, mapped) == 2 * trees.size());
    // Batches of new trees, gone after their batch: their facts are swept as the table grows.
    for (int i = 0; i < 1500; ++i) {
      const interp::Value fresh = interp::Value::list(
          {node(leaf(static_cast<float>(i)), leaf(1)), node(leaf(2), leaf(static_cast<float>(i)))});
      REQUIRE(
          specializer::partially_evaluate(*md.m, md.dims, "mapped", fresh, mapped, as_engine(fresh))
              .ok);
    }
    CHECK(mapped.pe_memo().fragments.p->trees.size() <= 1100);
  }

  TEST_CASE("trees taken whole: a model whose encoder draws random numbers (dropout) replays "
            "nothing and is evaluated again") {
    data::Vocab vocab;
    auto parsed = data::gen_sst(20, 3, data::Shape::Sst, vocab);
    Model md(PEJIT_SOURCE_DIR "/examples/treelstm/treelstm_dropout.pe", true,
             {{"V", static_cast<int64_t>(vocab.size())}});
    const interp::Values trees = elements(test::tree_batch(*md.m, parsed));
    specializer::TemplateTable tt;
    CHECK(check_whole(md, "loss", rebatched(trees, 10, 1), tt) == 0);
    CHECK(tt.pe_memo().fragments.p->trees_off);
  }

  TEST_CASE("partial evaluation without keep_inputs: the same input slots, no payload copies") {
    data::Vocab vocab;
    auto trees = data::gen_sst(40, 11, data::Shape::Sst, vocab);
    Model md(kTreeLstm, true, {{"V", static_cast<int64_t>(vocab.size())}});
    std::vector<interp::Value> batches = batches_of_10(md, trees);
    batches.push_back(batches[1]);
    for (std::string entry : {"loss", "infer"}) {
      CAPTURE(entry);
      check_inputs_dropped(md, entry, batches);
      check_inputs_dropped(md, entry, batches, no_fragments());
    }
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      CAPTURE(seed);
      auto p = testgen::generate(seed);
      Model rp(p.source, false);
      check_inputs_dropped(rp, "loss", {p.batch, p.batch});
    }
  }

  TEST_CASE("fragments: TreeLSTM residuals equal evaluating every call, on seeded random trees") {
    data::Vocab vocab;
    auto trees = data::gen_sst(120, 7, data::Shape::Sst, vocab);
    Model md(kTreeLstm, true, {{"V", static_cast<int64_t>(vocab.size())}});
    std::vector<interp::Value> batches = batches_of_10(md, trees);
    batches.push_back(batches[0]); // a batch seen before: whole trees replayed
    for (std::string entry : {"loss", "infer", "infer_nodes"}) {
      CAPTURE(entry);
      CHECK(check_same(md, entry, batches) > 0);
    }
    // The first batch records, the next ones replay most of their calls.
    specializer::TemplateTable tt;
    auto first = specializer::partially_evaluate(*md.m, md.dims, "loss", batches[0], tt);
    auto second = specializer::partially_evaluate(*md.m, md.dims, "loss", batches[1], tt);
    auto again = specializer::partially_evaluate(*md.m, md.dims, "loss", batches[0], tt);
    CHECK(first.recorded > 0);
    CHECK(second.replayed > 0);
    CHECK(again.recorded == 0);
    CHECK(again.replayed == 10); // one per tree
    CHECK(check_call_steps(tt) > 0);
    // A tree encoder on a leaf is flat: the fragments of the nodes above leaves hold the
    // leaves' instances themselves.
    size_t flat = 0;
    for (const auto& fr : tt.pe_memo().fragments.p->fragments)
      flat += fr.flat ? 1 : 0;
    CHECK(flat > 0);
  }

  TEST_CASE("fragments: a Call step names where its callee's steps and references start") {
    for (uint64_t seed = 1; seed <= 30; ++seed) {
      CAPTURE(seed);
      auto p = testgen::generate(seed);
      Model rp(p.source, false);
      specializer::TemplateTable tt;
      for (int i = 0; i < 2; ++i)
        (void)specializer::partially_evaluate(*rp.m, rp.dims, "loss", p.batch, tt);
      if (tt.pe_memo().fragments.p)
        check_call_steps(tt);
    }
  }

  TEST_CASE("fragments: random programs on permuted and repeated batches equal evaluation, "
            "their trees taken whole too") {
    int replaying = 0, taking = 0;
    for (uint64_t seed = 1; seed <= 60; ++seed) {
      CAPTURE(seed);
      auto p = testgen::generate(seed);
      INFO("program:\n" << p.source);
      Model md(p.source, false);
      std::vector<interp::Value> batches = reordered(p.batch);
      batches.push_back(p.batch);
      replaying += check_same(md, "loss", batches) > 0;
      specializer::TemplateTable warm; // as the engine runs it: trees met before taken whole
      taking += check_whole(md, "loss", batches, warm) > 0;
    }
    CHECK(replaying > 20); // most programs have recursive encoders that replay
    CHECK(taking >= 3);    // the programs whose entries hand their trees to calls only
  }

  TEST_CASE("fragments: calls a replay could get wrong are evaluated") {
    // A closure argument, a constant argument, the same tree twice (overlapping payloads) and
    // a parameter passed as a tensor argument: each evaluated or recorded without ambiguity.
    Model md(R"(param W : f32[2] = normal(0.0, 1.0)
type T = L(x: f32[2]) | N(l: T, r: T)
fn walk(t: T, k: f32[2]) -> f32[] {
  match t { L(x) => sum(x * k) N(l, r) => walk(l, k) + walk(r, k * W) }
}
fn pair(a: T, b: T) -> f32[] { walk(a, W) + walk(b, W) }
fn apply(f: (T) -> f32[], t: T) -> f32[] { f(t) }
fn const_arg(t: T) -> f32[] { walk(t, zeros(2) + 1.0) }
fn sib(t: T) -> f32[] { match t { L(x) => pair(t, t) N(l, r) => pair(l, r) } }
entry loss(ts: List[T]) -> f32[] {
  sum_list(map(fn t => sib(t) + pair(t, t) + apply(fn u => walk(u, W), t) + const_arg(t), ts))
}
)",
             false);
    interp::Value t1 = node(leaf(1), node(leaf(2), leaf(3)));
    interp::Value t2 = node(node(leaf(4), leaf(5)), leaf(6));
    std::vector<interp::Value> batches{
        interp::Value::list({leaf(7), node(leaf(8), leaf(9))}), interp::Value::list({t1, t2}),
        interp::Value::list({t2, t1, t1}), interp::Value::list({t1})};
    check_same(md, "loss", batches);
  }

  TEST_CASE("fragments: a replay is not taken past the fuel or the depth bound") {
    Model md(R"(type T = L(x: f32[2]) | N(l: T, r: T)
fn grow(n: Int) -> Int { if n == 0 { 1 } else { grow(n - 1) + grow(n - 1) } }
fn f(t: T) -> f32[] { match t { L(x) => sum(x) N(l, r) => f(l) + f(r) } }
entry loss(ts: List[T]) -> f32[] { sum_list(map(f, ts)) }
entry work(ts: List[T]) -> f32[] { let k = grow(40); sum_list(map(f, ts)) }
)",
             false);
    const interp::Value one = leaf(1);
    interp::Value chain = one;
    for (int i = 0; i < 60; ++i)
      chain = node(one, chain);
    interp::Value batch = interp::Value::list({chain});
    // Fuel: grow's fragments replay exponential work in bulk; the refusal comes where the
    // evaluation would have run out, with the same fuel spent.
    specializer::PeOptions small;
    small.fuel_per_value = 50;
    check_same(md, "work", {batch, batch}, small);
    // Depth: recorded under a loose bound, the chain's fragment is not replayed under a
    // tighter one: that batch fails as it does without fragments.
    specializer::TemplateTable tt;
    auto loose = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
    REQUIRE(loose.ok);
    CHECK(loose.recorded > 0);
    specializer::PeOptions tight;
    tight.max_depth = 30;
    tight.calls_per_level = 0; // 30 whatever the batch's depth
    CHECK_THROWS_WITH_AS(specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt, tight),
                         doctest::Contains("recursion deeper than"), pejit::Error);
    auto o = no_fragments();
    o.max_depth = 30;
    o.calls_per_level = 0;
    specializer::TemplateTable cold;
    CHECK_THROWS_WITH_AS(specializer::partially_evaluate(*md.m, md.dims, "loss", batch, cold, o),
                         doctest::Contains("recursion deeper than"), pejit::Error);
    auto again = specializer::partially_evaluate(*md.m, md.dims, "loss", batch, tt);
    CHECK(again.replayed == 1); // under the loose bound the whole chain replays
  }

  TEST_CASE("fragments: past the memory bound the memo records nothing more and keeps "
            "replaying what it holds") {
    data::Vocab vocab;
    auto trees = data::gen_sst(40, 11, data::Shape::Sst, vocab);
    Model md(kTreeLstm, true, {{"V", static_cast<int64_t>(vocab.size())}});
    std::vector<interp::Value> batches = batches_of_10(md, trees);
    specializer::PeOptions tiny; // full after the first batch's recording
    tiny.fragment_memo_bytes = 1;
    specializer::TemplateTable tt, cold;
    auto first = specializer::partially_evaluate(*md.m, md.dims, "loss", batches[0], tt, tiny);
    REQUIRE(first.recorded > 0);
    const specializer::FragmentMemo* fm = tt.pe_memo().fragments.p.get();
    REQUIRE(fm != nullptr);
    const size_t held = fm->fragments.size(), bytes = fm->bytes();
    // Batches never seen record nothing (the memo is the same object, no bigger); the first
    // batch, seen again, replays every tree whole. Each residual is evaluation's.
    for (size_t k = 0; k < 2 * specializer::FragmentMemo::kFullWindow; ++k) {
      CAPTURE(k);
      const size_t b = k % 2 == 0 ? 0 : 1 + (k / 2) % (batches.size() - 1);
      auto a = specializer::partially_evaluate(*md.m, md.dims, "loss", batches[b], tt, tiny);
      CHECK(a.recorded == 0);
      if (b == 0)
        CHECK(a.replayed == 10);
      if (k < 4) {
        auto c = specializer::partially_evaluate(*md.m, md.dims, "loss", batches[b], cold,
                                                 no_fragments());
        REQUIRE(canonical(a, tt) == canonical(c, cold));
      }
      REQUIRE(tt.pe_memo().fragments.p.get() == fm); // still paying: kept
    }
    CHECK(fm->full);
    CHECK(fm->fragments.size() == held);
    CHECK(fm->bytes() == bytes);
  }

  TEST_CASE("fragments: a full memo that stops paying (the batches moved on) is dropped after "
            "a window, and recording starts again") {
    // Two entries over the same trees through two encoders: a memo filled by `left` holds
    // nothing that `right` can replay.
    Model md(R"(param W : f32[2] = normal(0.0, 1.0)
type T = L(x: f32[2]) | N(l: T, r: T)
fn enc_l(t: T) -> f32[2] { match t { L(x) => tanh(x) N(l, r) => tanh(enc_l(l) * W + enc_l(r)) } }
fn enc_r(t: T) -> f32[2] { match t { L(x) => sigmoid(x) N(l, r) => sigmoid(enc_r(l) + enc_r(r)) } }
entry left(ts: List[T]) -> f32[] { sum_list(map(fn t => sum(enc_l(t)), ts)) }
entry right(ts: List[T]) -> f32[] { sum_list(map(fn t => sum(enc_r(t)), ts)) }
)",
             false);
    interp::Value batch = interp::Value::list(
        {node(leaf(1), node(leaf(2), leaf(3))), node(node(leaf(4), leaf(5)), leaf(6))});
    specializer::PeOptions tiny;
    tiny.fragment_memo_bytes = 1;
    specializer::TemplateTable tt;
    REQUIRE(specializer::partially_evaluate(*md.m, md.dims, "left", batch, tt, tiny).recorded > 0);
    const specializer::FragmentMemo* full = tt.pe_memo().fragments.p.get();
    // The first `right` run finds the memo full: from then on a window of runs replays
    // nothing, and the memo is dropped before the run after it, which records.
    for (uint32_t k = 0; k < specializer::FragmentMemo::kFullWindow; ++k) {
      CAPTURE(k);
      auto r = specializer::partially_evaluate(*md.m, md.dims, "right", batch, tt, tiny);
      REQUIRE(r.ok);
      CHECK(r.replayed == 0);
      CHECK(r.recorded == 0);
      REQUIRE(tt.pe_memo().fragments.p.get() == full);
    }
    auto again = specializer::partially_evaluate(*md.m, md.dims, "right", batch, tt, tiny);
    CHECK(again.recorded > 0);
    CHECK(tt.pe_memo().fragments.p.get() != full);
  }

  TEST_CASE("partial evaluation after a refusal or an error on the same thread equals one on a "
            "fresh thread (the per-thread scratch of the backend and the evaluator)") {
    data::Vocab vocab;
    auto trees = data::gen_sst(30, 5, data::Shape::Sst, vocab);
    Model md(kTreeLstm, true, {{"V", static_cast<int64_t>(vocab.size())}});
    auto a = test::tree_batch(*md.m, {trees.begin(), trees.begin() + 10});
    auto b = test::tree_batch(*md.m, {trees.begin() + 10, trees.begin() + 20});
    // The reference: batch b twice through one table (recorded, then replayed whole), on a
    // thread that never ran partial evaluation before.
    auto b_twice = [&] {
      specializer::TemplateTable t;
      std::string s = canonical(specializer::partially_evaluate(*md.m, md.dims, "loss", b, t), t);
      auto again = specializer::partially_evaluate(*md.m, md.dims, "loss", b, t);
      CHECK(again.replayed > 0);
      return s + "\n--\n" + canonical(again, t);
    };
    std::string want;
    std::thread([&] { want = b_twice(); }).join();
    // Here: a batch, a refusal in the middle of an evaluation, a batch that fails the entry's
    // type in the middle of the scan, then b; each stops with the scratch in use.
    specializer::TemplateTable ta;
    (void)specializer::partially_evaluate(*md.m, md.dims, "loss", a, ta);
    Model bad("type T = L(word: i32[], label: i32[]) | N(left: T, right: T, label: i32[])\n"
              "param E : f32[100, 2] = normal(0.0, 1.0)\n"
              "fn f(t: T) -> f32[] { match t { L(w, y) => if to_bool(sum(take(E, w)) > 0.0) "
              "{ 1.0 } else { 0.0 }, N(l, r, y) => f(l) + f(r) } }\n"
              "entry loss(b: List[T]) -> f32[] { sum_list(map(f, b)) }\n",
              false);
    specializer::TemplateTable tb;
    auto refused = specializer::partially_evaluate(
        *bad.m, bad.dims, "loss", test::tree_batch(*bad.m, {trees[0], trees[1]}, "T"), tb);
    CHECK(!refused.ok);
    interp::Values mixed = {test::tree_batch(*md.m, {trees[2]}).list_at(0),
                            interp::Value::integer(3)};
    CHECK_THROWS_AS(specializer::partially_evaluate(*md.m, md.dims, "loss",
                                                    interp::Value::list(std::move(mixed)), ta),
                    pejit::Error);
    CHECK(b_twice() == want);
  }
}

} // namespace tests_specializer_fragments_test
