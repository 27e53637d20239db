// The public Session (include/pejit/pejit.h) through its own API only: a specialized session
// trains and infers like a generic one (steps and run() both go through the engine), and
// definitions added while it lives invalidate only the entries that depend on them.
#include "pejit/pejit.h"
#include "tests/support/compare.h"
#include "tests/support/skip.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tests_runtime_session_test {

namespace {

const std::string kTreeLstm = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

pejit::Value leaf(const pejit::Session& s, int w, int y) {
  return s.make("Leaf", {pejit::Value::scalar_i32(w), pejit::Value::scalar_i32(y)});
}
pejit::Value node(const pejit::Session& s, pejit::Value l, pejit::Value r, int y) {
  return s.make("Node", {std::move(l), std::move(r), pejit::Value::scalar_i32(y)});
}

pejit::Value batch(const pejit::Session& s) {
  return pejit::Value::list({node(s, leaf(s, 1, 1), leaf(s, 2, 1), 1),
                             node(s, node(s, leaf(s, 3, 4), leaf(s, 4, 3), 3), leaf(s, 5, 2), 3),
                             leaf(s, 6, 0)});
}

pejit::Session open(const std::string& mode) {
  pejit::SessionOptions o;
  o.dims = {{"V", 8}};
  o.seed = 5;
  o.mode = mode;
  // SGD: Adagrad's first step is a sign function of each gradient element, which turns
  // rounding-level differences in near-zero gradients into lr-sized ones (engine_test.cpp).
  o.optimizer = "sgd";
  return pejit::Session::from_file(kTreeLstm, o);
}

} // namespace

TEST_SUITE("session") {
  TEST_CASE("keep_freed_memory: large blocks come from the heap and stay there when freed") {
#if defined(__SANITIZE_ADDRESS__)
    // ASan replaces glibc's malloc (scripts/asan.sh): there is nothing of glibc's to tune.
    pejit::test::skip("AddressSanitizer replaces glibc's malloc");
    return;
#elif defined(__GLIBC__)
    REQUIRE(pejit::keep_freed_memory());
    const size_t n = size_t{24} << 20;
    struct mallinfo2 before = mallinfo2();
    void* p = std::malloc(n);
    REQUIRE(p != nullptr);
    std::memset(p, 1, n);
    struct mallinfo2 during = mallinfo2();
    CHECK(during.hblkhd == before.hblkhd); // not a fresh mapping (glibc's default above 128 KiB)
    // In the heap's use: the heap itself need not grow, since free space that earlier tests
    // of this process left in it (kept, as this function asks) may hold the block.
    CHECK(during.uordblks >= before.uordblks + n);
    std::free(p);
    struct mallinfo2 after = mallinfo2();
    CHECK(after.arena == during.arena); // the heap's top is kept, not given back
#else
    CHECK_FALSE(pejit::keep_freed_memory());
#endif
  }

  TEST_CASE("a specialized session trains and infers like a generic one") {
    pejit::Session g = open("generic"), p = open("specialized");
    pejit::Value bg = batch(g), bp = batch(p);
    for (int i = 0; i < 3; ++i) {
      float lg = g.step("loss", bg), lp = p.step("loss", bp);
      CHECK(std::fabs(lp - lg) <= 1e-5f * std::fabs(lg));
    }
    std::vector<float> ug = g.get_param("U"), up = p.get_param("U");
    REQUIRE(ug.size() == up.size());
    pejit::test::Diff d = pejit::test::diff(up, ug);
    CHECK_MESSAGE(d.close(), d.str());

    // run() goes through the engine too: planned in the specialized session.
    int64_t before = p.stats().specialized_batches;
    pejit::Value pg = g.run("infer_nodes", bg), pp = p.run("infer_nodes", bp);
    CHECK(p.stats().specialized_batches == before + 1);
    CHECK(g.stats().specialized_batches == 0);
    REQUIRE(pp.size() == 3);
    REQUIRE(pg.size() == 3);
    for (size_t t = 0; t < 3; ++t) {
      REQUIRE(pp.at(t).size() == pg.at(t).size());
      for (size_t n = 0; n < pp.at(t).size(); ++n)
        CHECK(pp.at(t).at(n).item_i32() == pg.at(t).at(n).item_i32());
    }
    CHECK(pp.at(1).size() == 5); // every node of the second tree, children before parents
    CHECK(p.entry_status("loss").rfind("specialized:", 0) == 0);
  }

  TEST_CASE("merge_equal: repeated words are planned by their pattern, off: by skeleton alone") {
    // One skeleton; words 1 and 3 repeat in the first batch, all differ in the second.
    auto two = [](const pejit::Session& s, int w) {
      return pejit::Value::list({node(s, leaf(s, 1, 1), leaf(s, w, 1), 1), leaf(s, 3, 0),
                                 node(s, leaf(s, 3, 2), leaf(s, 4, 2), 3)});
    };
    for (bool merge : {true, false}) {
      CAPTURE(merge);
      pejit::SessionOptions o;
      o.dims = {{"V", 8}};
      o.mode = "specialized";
      o.optimizer = "sgd";
      o.merge_equal = merge;
      pejit::Session p = pejit::Session::from_file(kTreeLstm, o);
      o.mode = "generic";
      pejit::Session g = pejit::Session::from_file(kTreeLstm, o);
      for (int w : {1, 5, 1}) {
        float lp = p.step("loss", two(p, w)), lg = g.step("loss", two(g, w));
        CHECK(std::fabs(lp - lg) <= 1e-5f * std::fabs(lg));
      }
      CHECK(p.stats().plan_misses == (merge ? 2 : 1));
      CHECK(p.stats().plan_hits == (merge ? 1 : 2));
    }
  }

  TEST_CASE("added definitions invalidate only their entries, the new entry is planned") {
    pejit::Session p = open("specialized");
    pejit::Value b = batch(p);
    float loss = p.run("loss", b).item_f32();
    auto affected = p.add_source("fn twice(x: f32[]) -> f32[] { x + x }\n"
                                 "entry loss2(batch: List[Tree]) -> f32[] {\n"
                                 "  twice(sum_list(map(fn t => encode(t).2, batch)))\n"
                                 "}\n",
                                 "more.pe");
    CHECK(affected == std::vector<std::string>{"loss2"});
    CHECK(p.entry_status("loss").rfind("specialized:", 0) == 0); // its plans were kept
    CHECK(p.entry_status("loss2") == "not specialized yet");
    float twice = p.run("loss2", b).item_f32();
    CHECK(std::fabs(twice - 2 * loss) <= 1e-5f * std::fabs(loss));
    CHECK(p.entry_status("loss2").rfind("specialized:", 0) == 0);
    // An error leaves the session unchanged.
    CHECK_THROWS_AS(p.add_source("entry bad(b: List[Tree]) -> f32[] { nope }\n", "bad.pe"),
                    pejit::Error);
    CHECK(p.run("loss", b).item_f32() == doctest::Approx(loss));
  }

  TEST_CASE("step with an optimizer of the caller's, init_params restarts from the seed") {
    // The session's own SGD and an explicit Optimizer("sgd", same rate) take the same steps.
    pejit::Session a = open("specialized"), b = open("specialized");
    pejit::Optimizer sgd("sgd", 0.05f);
    for (int i = 0; i < 3; ++i)
      CHECK(a.step("loss", batch(a)) == b.step("loss", batch(b), sgd));
    for (const auto& n : a.param_names())
      CHECK(a.get_param(n) == b.get_param(n));
    // An explicit Adagrad keeps its own state: the session's SGD state is untouched.
    pejit::Optimizer adagrad("adagrad", 0.05f);
    b.step("loss", batch(b), adagrad);
    CHECK(a.get_param("U") != b.get_param("U"));
    // Back to the declared initializers with the session's seed: a fresh session's values.
    b.init_params(5);
    pejit::Session fresh = open("specialized");
    for (const auto& n : b.param_names())
      CHECK(b.get_param(n) == fresh.get_param(n));
    CHECK(b.step("loss", batch(b)) == fresh.step("loss", batch(fresh)));
    CHECK_THROWS_WITH_AS(pejit::Optimizer("rmsprop"), doctest::Contains("rmsprop"), pejit::Error);
    CHECK_THROWS_AS(pejit::Optimizer("sgd", -1.0f), pejit::Error);
  }

  TEST_CASE("what pejit train sets: prefetch and drain, JIT off, a trace, explain, stats") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("pejit_session_" + std::to_string(getpid()));
    fs::create_directories(dir);
    // Auto mode: prefetched batches are planned in the background; drain() waits for them.
    pejit::SessionOptions o;
    o.dims = {{"V", 8}};
    o.mode = "auto";
    o.trace_file = (dir / "trace.json").string();
    pejit::Session a = pejit::Session::from_file(kTreeLstm, o);
    a.prefetch("loss", {batch(a)});
    a.drain();
    pejit::SessionStats st = a.stats();
    CHECK(st.plans_prefetched == 1);
    CHECK(st.background_plan_seconds > 0);
    CHECK(st.plan_misses == 0);
    a.step("loss", batch(a)); // the background's plan
    st = a.stats();
    CHECK(st.plan_hits == 1);
    CHECK(st.specialized_batches == 1);
    CHECK(st.first_planned_s >= 0);
    CHECK(st.fallbacks.empty());
    CHECK(a.explain("loss").empty());
    a.write_trace();
    std::stringstream trace;
    trace << std::ifstream(o.trace_file).rdbuf();
    CHECK(trace.str().find("traceEvents") != std::string::npos);
    CHECK(trace.str().find("\"plan ") != std::string::npos);

    // Specialized mode compiles JIT kernels before its first batch; compile.jit = false runs
    // reference kernels only, with the same loss.
    o.mode = "specialized";
    o.trace_file.clear();
    pejit::Session j = pejit::Session::from_file(kTreeLstm, o);
    o.compile.jit = false;
    pejit::Session r = pejit::Session::from_file(kTreeLstm, o);
    float lj = j.step("loss", batch(j)), lr = r.step("loss", batch(r));
    CHECK(std::fabs(lj - lr) <= 1e-5f * std::fabs(lr));
    CHECK(j.stats().jit_batches == 1);
    CHECK(j.stats().jit_seconds > 0);
    CHECK(j.stats().kernels_compiled > 0);
    CHECK(j.stats().compile_ms > 0);
    CHECK(j.stats().first_jit_s >= 0);
    CHECK(r.stats().jit_batches == 0);
    CHECK(r.stats().kernels_compiled == 0);
    CHECK(r.stats().first_jit_s == -1);
    CHECK(r.kernels().empty());
    CHECK(!j.kernels().empty());
    CHECK(r.stats().specialized_batches == 1);

    // A program whose control depends on tensor values cannot be planned: explain says why,
    // and the reason is counted.
    pejit::SessionOptions g;
    g.mode = "auto";
    pejit::Session d = pejit::Session::from_source(
        "type T = L(word: i32[], label: i32[]) | N(left: T, right: T, label: i32[])\n"
        "param E : f32[10, 2] = normal(0.0, 1.0)\n"
        "fn f(t: T) -> f32[] { match t { L(w, y) => if to_bool(sum(take(E, w)) > 0.0) "
        "{ sum(take(E, w)) } else { 0.0 }, N(l, r, y) => f(l) + f(r) } }\n"
        "entry loss(b: List[T]) -> f32[] { sum_list(map(f, b)) }\n",
        "dynamic.pe", g);
    auto l = [&](int w) {
      return d.make("L", {pejit::Value::scalar_i32(w), pejit::Value::scalar_i32(0)});
    };
    d.step("loss", pejit::Value::list({d.make("N", {l(1), l(2), pejit::Value::scalar_i32(0)})}));
    CHECK(!d.explain("loss").empty());
    CHECK(d.stats().generic_batches == 1);
    CHECK(!d.stats().fallbacks.empty());
    fs::remove_all(dir);
  }

  TEST_CASE("load_params takes a checkpoint's parameters only, load its optimizer state too") {
    namespace fs = std::filesystem;
    const std::string ck =
        (fs::temp_directory_path() / ("pejit_session_" + std::to_string(getpid()) + ".ckpt"))
            .string();
    pejit::SessionOptions o;
    o.dims = {{"V", 8}};
    o.mode = "generic";
    o.optimizer = "adam";
    pejit::Session adam = pejit::Session::from_file(kTreeLstm, o);
    adam.step("loss", batch(adam));
    adam.save(ck, {"<unk>", "a"}, {{"model", "treelstm.pe"}});
    o.optimizer = "adagrad";
    o.seed = 9;
    pejit::Session s = pejit::Session::from_file(kTreeLstm, o);
    pejit::Session t = pejit::Session::from_file(kTreeLstm, o);
    // Adam's moments are no state of an Adagrad optimizer: load() fails and changes nothing.
    CHECK_THROWS_WITH_AS(s.load(ck), doctest::Contains("adam"), pejit::Error);
    CHECK(s.get_param("U") == t.get_param("U"));
    CHECK(s.get_param("U") != adam.get_param("U"));
    CHECK(s.load_params(ck) == std::vector<std::string>{"<unk>", "a"});
    for (const auto& n : s.param_names())
      CHECK(s.get_param(n) == adam.get_param(n));
    // The optimizer kept its (fresh) state: the next step is a fresh Adagrad's from there.
    for (const auto& n : t.param_names())
      t.set_param(n, adam.get_param(n));
    CHECK(s.step("loss", batch(s)) == t.step("loss", batch(t)));
    CHECK(s.get_param("U") == t.get_param("U"));
    // A checkpoint of another model's shapes names the parameter.
    o.dims = {{"V", 9}};
    pejit::Session wide = pejit::Session::from_file(kTreeLstm, o);
    CHECK_THROWS_WITH_AS(wide.load_params(ck), doctest::Contains("the model wants"), pejit::Error);
    std::remove(ck.c_str());
  }

  TEST_CASE("per-entry plan counters, add_source says what it re-specialized and reused") {
    pejit::Session p = open("specialized");
    pejit::Value b = batch(p);
    p.step("loss", b);
    p.step("loss", b);
    p.run("infer", b);
    auto st = p.stats();
    CHECK(st.per_entry.at("loss").batches == 2);
    CHECK(st.per_entry.at("loss").plan_misses == 1);
    CHECK(st.per_entry.at("loss").plan_hits == 1);
    CHECK(st.per_entry.at("loss").plans_cached == 1);
    CHECK(st.per_entry.at("infer").plan_misses == 1);
    // A new entry changes only its own cone; a new `leaf` changes every entry's.
    p.add_source("entry loss2(batch: List[Tree]) -> f32[] { sum_list(map(fn t => encode(t).2, "
                 "batch)) }\n",
                 "more.pe");
    st = p.stats();
    CHECK(st.respecialized == std::vector<std::string>{"loss2"});
    CHECK(st.reused == std::vector<std::string>{"loss", "infer", "infer_nodes"});
    p.add_source("fn leaf(x: f32[300]) -> (f32[150], f32[150]) {\n"
                 "  let (i, o, u) = split3(x @ W_leaf + b_leaf);\n"
                 "  (sigmoid(o) * tanh(u), u)\n"
                 "}\n",
                 "leaf.pe");
    st = p.stats();
    CHECK(st.reused.empty());
    CHECK(st.per_entry.at("loss").respecializations == 1);
    CHECK(st.per_entry.at("loss").plans_cached == 0);
    p.step("loss", b);
    CHECK(p.stats().per_entry.at("loss").plan_misses == 2);
  }

  TEST_CASE("param_data is the parameter's storage: writes are seen, steps keep it") {
    pejit::Session p = open("specialized");
    float* w = p.param_data("b_out");
    std::vector<float> ones(5, 1.0f);
    std::memcpy(w, ones.data(), 5 * sizeof(float));
    CHECK(p.get_param("b_out") == ones);
    p.step("loss", batch(p));
    CHECK(p.param_data("b_out") == w); // updated in place
    CHECK(p.get_param("b_out") == std::vector<float>(w, w + 5));
    CHECK(p.get_param("b_out") != ones);
    CHECK_THROWS_AS(p.param_data("nope"), pejit::Error);
  }

  TEST_CASE("freeze keeps a parameter as it is, with any optimizer, until thawed") {
    for (const char* mode : {"generic", "specialized"}) {
      CAPTURE(mode);
      pejit::Session p = open(mode);
      std::vector<float> emb = p.get_param("emb"), u = p.get_param("U");
      p.freeze("emb"); // a row-sparse gradient
      p.freeze("U");   // a dense one
      CHECK(p.frozen("emb"));
      CHECK_FALSE(p.frozen("W_out"));
      std::vector<float> w_out = p.get_param("W_out");
      p.step("loss", batch(p));
      pejit::Optimizer adam("adam", 1e-2f);
      p.step("loss", batch(p), adam);
      CHECK(p.get_param("emb") == emb);
      CHECK(p.get_param("U") == u);
      CHECK(p.get_param("W_out") != w_out);
      p.freeze("U", false);
      p.step("loss", batch(p));
      CHECK(p.get_param("U") != u);
      CHECK(p.get_param("emb") == emb);
      CHECK_THROWS_WITH_AS(p.freeze("nope"), doctest::Contains("no parameter named 'nope'"),
                           pejit::Error);
    }
  }

  TEST_CASE("a model written with dim H = 150 and 2*H, 5*H computes what the constant one does") {
    std::ifstream in(kTreeLstm);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string src = ss.str();
    auto swap = [&](const std::string& from, const std::string& to) {
      for (size_t at = src.find(from); at != std::string::npos; at = src.find(from, at))
        src.replace(at, from.size(), to), at += to.size();
    };
    swap("dim V = 20000", "dim V = 20000\ndim H = 150");
    swap("f32[300, 750]", "f32[2*H, 5*H]");
    swap("f32[300, 450]", "f32[300, 3*H]");
    swap("f32[450]", "f32[3*H]");
    swap("f32[750]", "f32[H+4*H]");
    swap("f32[150, 5]", "f32[H, 5]");
    swap("f32[150]", "f32[H]");
    REQUIRE(src.find("150]") == std::string::npos);
    for (const char* mode : {"generic", "specialized"}) {
      CAPTURE(mode);
      pejit::SessionOptions o;
      o.dims = {{"V", 8}};
      o.seed = 5;
      o.mode = mode;
      o.optimizer = "sgd";
      pejit::Session c = pejit::Session::from_file(kTreeLstm, o);
      pejit::Session h = pejit::Session::from_source(src, "named.pe", o);
      for (int i = 0; i < 3; ++i)
        CHECK(h.step("loss", batch(h)) == c.step("loss", batch(c)));
      CHECK(h.get_param("U") == c.get_param("U"));
      // H is a dimension like V: bound to another size, the same program is a smaller model.
      o.dims["H"] = 16;
      pejit::Session small = pejit::Session::from_source(src, "named.pe", o);
      CHECK(small.param_shape("U") == std::vector<int64_t>{32, 80});
      CHECK(std::isfinite(small.step("loss", batch(small))));
    }
  }

  TEST_CASE("one seed, one result: JIT kernels, reference kernels and auto give the same bits") {
    // The tiers compute the same bits, so an auto run is fixed by its seed whatever the
    // moment its kernels finish compiling.
    std::vector<float> losses[3];
    std::vector<float> params[3];
    for (int k = 0; k < 3; ++k) {
      pejit::SessionOptions o;
      o.dims = {{"V", 8}};
      o.seed = 5;
      o.mode = k == 2 ? "auto" : "specialized";
      o.compile.jit = k != 1;
      pejit::Session s = pejit::Session::from_file(kTreeLstm, o);
      for (int i = 0; i < 6; ++i)
        losses[k].push_back(s.step("loss", batch(s)));
      params[k] = s.get_param("U");
      if (k == 0)
        CHECK(s.stats().jit_batches == 6);
      if (k == 1)
        CHECK(s.stats().jit_batches == 0);
    }
#ifdef __AVX512F__
    CHECK(losses[0] == losses[1]);
    CHECK(losses[0] == losses[2]);
    CHECK(params[0] == params[1]);
    CHECK(params[0] == params[2]);
#endif
  }
}

} // namespace tests_runtime_session_test
