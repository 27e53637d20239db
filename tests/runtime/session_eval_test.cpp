// The session's one-pass evaluation entry (SessionAccess::eval_entry): added on first use and
// hidden from what the session lists, made again under its own name when add_source changes
// the loss (its copies of the entries' bodies would otherwise be stale), and set aside when a
// change would no longer check against those copies.
#include "runtime/session_access.h"
#include "src/interp/value.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace tests_runtime_session_eval_test {

namespace {

using pejit::runtime::SessionAccess;

const std::string kModel = R"(
type Tree = Leaf(word: i32[], label: i32[])
          | Node(left: Tree, right: Tree, label: i32[])

dim V = 20

param emb   : f32[V, 4] = normal(0.0, 0.5)
param U     : f32[8, 4] = xavier
param W_out : f32[4, 3] = xavier

fn cell(l: f32[4], r: f32[4]) -> f32[4] { tanh(concat(l, r) @ U) }

fn node_loss(h: f32[4], y: i32[]) -> f32[] { cross_entropy(h @ W_out, y) }

fn encode(t: Tree) -> (f32[4], f32[]) {
  match t {
    Leaf(w, y) => { let h = tanh(take(emb, w)); (h, node_loss(h, y)) }
    Node(l, r, y) => {
      let (hl, ll) = encode(l);
      let (hr, lr) = encode(r);
      let h = cell(hl, hr);
      (h, ll + lr + node_loss(h, y))
    }
  }
}

fn predict(t: Tree) -> (f32[4], List[i32[]]) {
  match t {
    Leaf(w, y) => { let h = tanh(take(emb, w)); (h, [argmax(h @ W_out)]) }
    Node(l, r, y) => {
      let (hl, pl) = predict(l);
      let (hr, pr) = predict(r);
      let h = cell(hl, hr);
      (h, append(append(pl, pr), [argmax(h @ W_out)]))
    }
  }
}

entry loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => encode(t).1, batch)) }

entry infer_nodes(batch: List[Tree]) -> List[List[i32[]]] { map(fn t => predict(t).1, batch) }
)";

pejit::Session open() {
  pejit::SessionOptions o;
  o.seed = 3;
  o.mode = "specialized";
  return pejit::Session::from_source(kModel, "model.pe", o);
}

pejit::Value batch(const pejit::Session& s) {
  auto i = [](int v) { return pejit::Value::scalar_i32(v); };
  auto leaf = [&](int w, int y) { return s.make("Leaf", {i(w), i(y)}); };
  auto node = [&](pejit::Value l, pejit::Value r, int y) { return s.make("Node", {l, r, i(y)}); };
  return pejit::Value::list({node(leaf(1, 0), leaf(2, 1), 2),
                             node(node(leaf(3, 2), leaf(4, 1), 0), leaf(5, 2), 1), leaf(6, 0)});
}

// The loss and the predictions from one run of the evaluation entry.
std::pair<float, std::vector<int32_t>> run_eval(pejit::Session& s, const pejit::Value& b) {
  const std::string name = SessionAccess::eval_entry(s).name;
  REQUIRE(!name.empty());
  pejit::Value out = s.run(name, b);
  const pejit::interp::Value& both = SessionAccess::unwrap(out);
  std::vector<int32_t> preds;
  const pejit::interp::Value& trees = both.items()[1];
  for (size_t t = 0; t < trees.list_size(); ++t)
    for (size_t n = 0; n < trees.list_at(t).list_size(); ++n)
      preds.push_back(trees.list_at(t).list_at(n).as_tensor().item_i32());
  return {both.items()[0].as_tensor().item_f32(), preds};
}

std::vector<int32_t> infer_nodes(pejit::Session& s, const pejit::Value& b) {
  pejit::Value out = s.run("infer_nodes", b);
  const pejit::interp::Value& trees = SessionAccess::unwrap(out);
  std::vector<int32_t> preds;
  for (size_t t = 0; t < trees.list_size(); ++t)
    for (size_t n = 0; n < trees.list_at(t).list_size(); ++n)
      preds.push_back(trees.list_at(t).list_at(n).as_tensor().item_i32());
  return preds;
}

const std::vector<std::string> kEntries{"loss", "infer_nodes"};

} // namespace

TEST_SUITE("session") {
  TEST_CASE("eval_entry: added once, hidden, both results of one run") {
    pejit::Session s = open();
    pejit::Value b = batch(s);
    const uint64_t before = SessionAccess::module(s).generation();
    pejit::runtime::EvalEntry e = SessionAccess::eval_entry(s);
    CHECK(e.name == "__eval");
    CHECK(e.preds == "infer_nodes");
    CHECK(SessionAccess::module(s).generation() != before);
    auto [loss, preds] = run_eval(s, b);
    CHECK(loss == doctest::Approx(s.run("loss", b).item_f32()).epsilon(1e-5));
    CHECK(preds == infer_nodes(s, b));
    // A second call finds it: nothing added.
    const uint64_t made = SessionAccess::module(s).generation();
    CHECK(SessionAccess::eval_entry(s).name == "__eval");
    CHECK(SessionAccess::module(s).generation() == made);
    // Hidden: not an entry of the session's, nor in its statistics.
    CHECK(s.entries() == kEntries);
    CHECK(s.stats().per_entry.count("__eval") == 0);
    CHECK(s.stats().per_entry.at("loss").batches == 1);
  }

  TEST_CASE("eval_entry: made again under its name when add_source changes the loss") {
    pejit::Session s = open();
    pejit::Value b = batch(s);
    const float old = run_eval(s, b).first;
    // Twice the loss (each tree's loss added to itself: exact).
    auto changed = s.add_source("entry loss(batch: List[Tree]) -> f32[] {\n"
                                "  sum_list(map(fn t => encode(t).1 + encode(t).1, batch))\n}\n",
                                "double.pe");
    CHECK(changed == std::vector<std::string>{"loss"});
    CHECK(s.stats().respecialized == std::vector<std::string>{"loss"});
    CHECK(s.stats().reused == std::vector<std::string>{"infer_nodes"});
    auto [loss, preds] = run_eval(s, b);
    CHECK(SessionAccess::eval_entry(s).name == "__eval");
    CHECK(SessionAccess::module(s).fn("__eval2") == nullptr);
    CHECK(loss == doctest::Approx(2 * old).epsilon(1e-5));
    CHECK(loss == doctest::Approx(s.run("loss", b).item_f32()).epsilon(1e-5));
    CHECK(preds == infer_nodes(s, b));
    CHECK(s.entries() == kEntries);

    // A change to what the copies and the entries call (the cell) needs no new copies, and
    // none are made: the entry's cone changed, and its plans were dropped with the others'.
    changed = s.add_source("fn cell(l: f32[4], r: f32[4]) -> f32[4] { sigmoid(concat(l, r) @ U) }",
                           "cell.pe");
    CHECK(changed == kEntries);
    const uint64_t gen = SessionAccess::module(s).generation();
    std::tie(loss, preds) = run_eval(s, b);
    CHECK(SessionAccess::module(s).generation() == gen);
    CHECK(loss == doctest::Approx(s.run("loss", b).item_f32()).epsilon(1e-5));
    CHECK(preds == infer_nodes(s, b));
  }

  TEST_CASE("eval_entry: a change its old copies would not check against sets them aside") {
    pejit::Session s = open();
    pejit::Value b = batch(s);
    const float old = run_eval(s, b).first;
    // encode's results swap places: the old copy of `loss` (encode(t).1) would sum vectors.
    s.add_source(R"(
fn encode(t: Tree) -> (f32[], f32[4]) {
  match t {
    Leaf(w, y) => { let h = tanh(take(emb, w)); (node_loss(h, y), h) }
    Node(l, r, y) => {
      let (ll, hl) = encode(l);
      let (lr, hr) = encode(r);
      let h = cell(hl, hr);
      (ll + lr + node_loss(h, y), h)
    }
  }
}
entry loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => encode(t).0, batch)) }
)",
                 "swap.pe");
    CHECK(s.entries() == kEntries);
    auto [loss, preds] = run_eval(s, b);
    CHECK(SessionAccess::eval_entry(s).name == "__eval");
    CHECK(loss == doctest::Approx(old).epsilon(1e-5));
    CHECK(preds == infer_nodes(s, b));
    // An error of the caller's own is still one, and the session still scores.
    CHECK_THROWS_AS(s.add_source("entry loss(batch: List[Tree]) -> f32[] { nope }", "bad.pe"),
                    pejit::ProgramError);
    CHECK(run_eval(s, b).first == doctest::Approx(old).epsilon(1e-5));
  }

  TEST_CASE("eval_entry: a definition of the caller's under its name is the caller's") {
    pejit::Session s = open();
    pejit::Value b = batch(s);
    const float old = run_eval(s, b).first;
    s.add_source("entry __eval(batch: List[Tree]) -> f32[] { loss_of(batch) }\n"
                 "fn loss_of(batch: List[Tree]) -> f32[] { sum_list(map(fn t => encode(t).1, "
                 "batch)) }\n",
                 "mine.pe");
    CHECK(s.entries() == std::vector<std::string>{"loss", "infer_nodes", "__eval"});
    CHECK(s.run("__eval", b).item_f32() == doctest::Approx(old).epsilon(1e-5));
    CHECK(SessionAccess::eval_entry(s).name == "__eval2");
    CHECK(run_eval(s, b).first == doctest::Approx(old).epsilon(1e-5));
    CHECK(s.entries() == std::vector<std::string>{"loss", "infer_nodes", "__eval"});
  }
}

} // namespace tests_runtime_session_eval_test
