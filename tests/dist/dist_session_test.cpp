// Data-parallel Sessions under mpirun (tests/dist/CMakeLists.txt runs this executable on 2 and 3
// ranks): every rank steps its slice of a global batch and the result equals one process on
// the whole batch (a local Session each rank runs beside), every rank holds the same bits, and
// a failure on one rank is an error on all of them, after which the job goes on.
#include "pejit/pejit.h"
#include "src/util/native_stack.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace tests_dist_dist_session_test {

namespace {

const std::string kModel = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

pejit::SessionOptions options(const std::string& mode, const std::string& distributed) {
  pejit::SessionOptions o;
  o.dims = {{"V", 40}};
  o.mode = mode;
  o.distributed = distributed;
  o.threads = 1;
  o.seed = 11;
  return o;
}

// Tree `i` of a fixed pseudo-random set: 1..6 leaves, words < 40, labels < 5.
pejit::Value tree(const pejit::Session& s, uint32_t i, int depth = 0) {
  uint32_t h = i * 2654435761u + static_cast<uint32_t>(depth) * 40503u;
  h ^= h >> 13;
  auto label = pejit::Value::scalar_i32(static_cast<int32_t>(h % 5));
  if (depth >= 2 || (h >> 7) % 3 == 0)
    return s.make("Leaf", {pejit::Value::scalar_i32(static_cast<int32_t>((h >> 3) % 40)), label});
  return s.make("Node", {tree(s, i * 7 + 1, depth + 1), tree(s, i * 13 + 5, depth + 1), label});
}

std::vector<pejit::Value> global_batch(const pejit::Session& s, uint32_t first, size_t n) {
  std::vector<pejit::Value> b;
  for (size_t k = 0; k < n; ++k)
    b.push_back(tree(s, first + static_cast<uint32_t>(k)));
  return b;
}

pejit::Value part(const pejit::Session& s, const std::vector<pejit::Value>& all) {
  auto [lo, hi] = s.slice(all.size());
  return pejit::Value::list(std::vector<pejit::Value>(all.begin() + static_cast<long>(lo),
                                                      all.begin() + static_cast<long>(hi)));
}

// Largest |a - b| over every parameter (their values are around 0.1; Adagrad's first steps move
// each element by about the learning rate whatever its gradient's size, so a gradient near zero
// summed in another order moves by more than the rounding).
double param_diff(const pejit::Session& a, const pejit::Session& b) {
  double worst = 0;
  for (const auto& n : b.param_names()) {
    auto x = a.get_param(n), y = b.get_param(n);
    for (size_t i = 0; i < y.size(); ++i)
      worst = std::max(worst, std::abs(double(x[i]) - y[i]));
  }
  return worst;
}

bool same_on_every_rank(const pejit::Session& s, uint64_t h) {
  auto all = s.gather_ranks({double(h >> 32), double(h & 0xffffffffu)});
  for (const auto& r : all)
    if (r != all[0])
      return false;
  return true;
}

} // namespace

TEST_CASE("a data-parallel step equals one process on the global batch, on every path") {
  for (std::string mode : {"generic", "specialized", "auto"}) {
    CAPTURE(mode);
    auto dist = pejit::Session::from_file(kModel, options(mode, "mpi"));
    auto one = pejit::Session::from_file(kModel, options(mode, "off"));
    REQUIRE(dist.ranks() > 1);
    CHECK(one.ranks() == 1);
    CHECK(dist.param_hash() == one.param_hash());
    for (uint32_t step = 0; step < 6; ++step) {
      // 7 trees: slices of unequal sizes on 2 and on 3 ranks.
      auto all = global_batch(dist, 100 * step, 7);
      float l1 = one.step("loss", pejit::Value::list(all));
      float ld = dist.step("loss", part(dist, all));
      CHECK(std::abs(ld - l1) <= 1e-4 * std::abs(l1));
      CHECK(same_on_every_rank(dist, dist.param_hash()));
    }
    MESSAGE("largest parameter difference to one process: " << param_diff(dist, one));
    CHECK(param_diff(dist, one) < 1e-3);
    dist.check_replicas();
    auto st = dist.stats();
    CHECK(st.ranks == dist.ranks());
    CHECK(st.rank == dist.rank());
    CHECK(st.comm_dense_bytes > 0);
    CHECK(st.comm_sparse_bytes > 0); // the embedding's rows
    if (mode == "specialized") // each weight's reduction starts as its GEMM is done
      CHECK(st.reductions_overlapped > 0);
    if (mode == "generic")
      CHECK(st.reductions_overlapped == 0);
  }
}

TEST_CASE("a failing rank fails the step on every rank, and the job goes on") {
  auto s = pejit::Session::from_file(kModel, options("auto", "mpi"));
  auto all = global_batch(s, 5, 6);
  s.step("loss", part(s, all));
  const uint64_t before = s.param_hash();
  const int bad = s.ranks() - 1;
  // The last rank's slice is not a list of trees: its type check fails.
  pejit::Value batch = s.rank() == bad ? pejit::Value::list({pejit::Value::scalar_f32(1.0f)})
                                       : part(s, all);
  std::string what;
  try {
    s.step("loss", batch);
  } catch (const pejit::Error& e) {
    what = e.what();
  }
  CHECK(what.find("rank " + std::to_string(bad) + " of " + std::to_string(s.ranks())) !=
        std::string::npos);
  CHECK(s.param_hash() == before); // no update anywhere
  float loss = s.step("loss", part(s, all));
  CHECK(std::isfinite(loss));
  s.check_replicas();
}

TEST_CASE("a global batch smaller than the job, frozen parameters and a given optimizer") {
  auto dist = pejit::Session::from_file(kModel, options("specialized", "mpi"));
  auto one = pejit::Session::from_file(kModel, options("specialized", "off"));
  dist.freeze("W_out");
  one.freeze("W_out");
  pejit::Optimizer od("adam", 0.01f), oo("adam", 0.01f);
  const auto w_out = one.get_param("W_out");
  for (uint32_t step = 0; step < 3; ++step) {
    auto all = global_batch(dist, 7 + step, 1); // one tree: the other ranks' slices are empty
    float l1 = one.step("loss", pejit::Value::list(all), oo);
    float ld = dist.step("loss", part(dist, all), od);
    CHECK(std::abs(ld - l1) <= 1e-5 * std::abs(l1));
  }
  CHECK(param_diff(dist, one) < 1e-3);
  CHECK(dist.get_param("W_out") == w_out);
  dist.check_replicas();
}

TEST_CASE("a rank with another seed is found before the first step") {
  auto o = options("generic", "mpi");
  auto probe = pejit::Session::from_file(kModel, o);
  o.seed = 11 + static_cast<uint64_t>(probe.rank());
  std::string what;
  try {
    (void)pejit::Session::from_file(kModel, o);
  } catch (const pejit::Error& e) {
    what = e.what();
  }
  CHECK(what.find("the parameters of rank 1 differ from rank 0's") != std::string::npos);
}

TEST_CASE("a deep input's step, run on a thread of its own, reduces like any other") {
  // 1,500 levels: more stack than the calling thread has (interp/call_limit.h: 16 KiB per level
  // past the default bound, 24 MiB here against a main thread's 8), so the step runs on a
  // thread started for it and the gradient reductions start from there (MPI used serialized).
  auto caterpillar = [](const pejit::Session& s, int depth, int word) {
    auto leaf = [&](int w) {
      return s.make("Leaf", {pejit::Value::scalar_i32(w % 40), pejit::Value::scalar_i32(w % 5)});
    };
    pejit::Value t = leaf(word);
    for (int d = 0; d < depth; ++d)
      t = s.make("Node", {t, leaf(word + d), pejit::Value::scalar_i32(d % 5)});
    return t;
  };
  for (std::string mode : {"generic", "specialized"}) {
    CAPTURE(mode);
    // SGD: a step proportional to the gradient (Adagrad's first step is lr * sign(g), and the
    // 1,500 nodes' sums leave elements near zero whose sign the order of the sum decides).
    auto od = options(mode, "mpi"), oo = options(mode, "off");
    od.optimizer = oo.optimizer = "sgd";
    od.lr = oo.lr = 0.01f;
    auto dist = pejit::Session::from_file(kModel, od);
    auto one = pejit::Session::from_file(kModel, oo);
    std::vector<pejit::Value> all;
    for (int k = 0; k < dist.ranks(); ++k)
      all.push_back(caterpillar(dist, 1500, 3 * k + 1));
    float l1 = one.step("loss", pejit::Value::list(all));
    const uint64_t runs = pejit::util::native_stack_runs();
    float ld = dist.step("loss", part(dist, all));
    CHECK(pejit::util::native_stack_runs() > runs); // the step ran on a deep stack's thread
    CHECK(std::abs(ld - l1) <= 1e-4 * std::abs(l1));
    CHECK(param_diff(dist, one) < 1e-3);
    dist.check_replicas();
  }
}

} // namespace tests_dist_dist_session_test
