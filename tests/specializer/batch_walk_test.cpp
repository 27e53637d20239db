// walk_batch (specializer/batch_walk.h) against the separate walks it replaces: the same
// depth as interp::nesting_depth, hash as skeleton_hash, payloads as batch_payloads (the same
// tensors, in the same order) and equal payloads as equal_payload_slots, on awkward batches
// (empty lists, list tails, shared subtrees and payloads, equal payloads at other sites, a
// deep chain) and on the random programs' batches.
#include "specializer/batch_walk.h"
#include "specializer/merge_instances.h"
#include "specializer/partial_eval.h"
#include "tests/specializer/random_batches.h"

#include <doctest/doctest.h>

namespace tests_specializer_batch_walk_test {

using namespace pejit;
using interp::Value;
using interp::Values;

namespace {

Value word(int32_t w) {
  return Value::tensor(Tensor::scalar_i32(w));
}
Value leaf(int32_t w, int32_t y) {
  return Value::adt(0, {word(w), word(y)});
}
Value node(Value l, Value r, int32_t y) {
  return Value::adt(1, {std::move(l), std::move(r), word(y)});
}

void check_same(const Value& batch) {
  specializer::BatchWalk w;
  w.payloads.push_back(Tensor::scalar_i32(9)); // stale contents are cleared
  w.sites.push_back(7);
  specializer::walk_batch(batch, w);
  CHECK(w.depth == interp::nesting_depth(batch));
  CHECK(w.skeleton == specializer::skeleton_hash(batch));
  std::vector<Tensor> ps;
  specializer::batch_payloads(batch, ps);
  REQUIRE(w.payloads.size() == ps.size());
  REQUIRE(w.sites.size() == ps.size());
  for (size_t i = 0; i < ps.size(); ++i)
    CHECK(w.payloads[i].raw() == ps[i].raw());
  CHECK(specializer::equal_payload_slots(w.payloads, w.sites) ==
        specializer::equal_payload_slots(batch));
}

} // namespace

TEST_SUITE("specializer") {
  TEST_CASE("walk_batch: scalars, empty lists and tuples, list tails") {
    check_same(Value::integer(3));
    check_same(Value::boolean(true));
    check_same(Value());
    check_same(Value::list({}));
    check_same(Value::list({Value::list({}), Value::list({Value::list({})})}));
    check_same(Value::tuple({}));
    check_same(Value::tuple({Value::integer(1), Value::boolean(false), Value::list({})}));
    Value xs = Value::list({leaf(1, 2), leaf(3, 4), node(leaf(1, 2), leaf(5, 0), 1)});
    check_same(xs);
    check_same(xs.list_tail());
    check_same(xs.list_tail().list_tail().list_tail()); // empty
    check_same(Value::list({Value::list({word(3), word(3), word(4)}), word(3)}));
  }

  TEST_CASE("walk_batch: shared subtrees and payloads, equal payloads at other sites") {
    Value t = node(leaf(1, 1), leaf(1, 2), 1); // word 1 twice; label 1 equals word 1
    Value dag = t;
    for (int i = 0; i < 8; ++i) // each level holds the level below twice
      dag = node(dag, dag, i % 3);
    check_same(Value::list({t, dag, t}));
    Value shared_word = word(5);
    check_same(Value::list({Value::adt(0, {shared_word, shared_word}), leaf(5, 5)}));
    check_same(Value::tuple({Value::list({leaf(2, 2)}), Value::list({leaf(2, 2)})}));
  }

  TEST_CASE("walk_batch: deep trees and long lists") {
    Value chain = leaf(0, 0);
    for (int i = 0; i < 2000; ++i)
      chain = node(leaf(i % 7, i % 5), std::move(chain), i % 5);
    Value spine = leaf(3, 3);
    for (int i = 0; i < 300; ++i)
      spine = node(std::move(spine), leaf(i % 11, 1), 2);
    Values words;
    for (int i = 0; i < 500; ++i)
      words.push_back(word(i % 13));
    check_same(Value::list({spine, chain, Value::list(words), leaf(1, 1)}));
  }

  TEST_CASE("walk_batch: the random programs' batches") {
    for (uint64_t seed = 1; seed <= 200; ++seed) {
      CAPTURE(seed);
      check_same(testgen::generate(seed).batch);
    }
  }
}

} // namespace tests_specializer_batch_walk_test
