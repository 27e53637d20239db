// Schedules (docs/architecture.md): the text of each family's parameters; every elementwise
// schedule computes the same bits as the default and forces its vector width; the kernel cache
// picks the default unless a tuned database has an entry for this CPU (an entry for another CPU is
// not used), and records where each schedule came from; bad database files are clear errors
// naming the file (and entry); the tuner's entries are what the cache then uses.
#include "jit/kernel_cache.h"
#include "jit/schedule.h"
#include "jit/tuner.h"
#include "pejit/error.h"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace tests_jit_schedule_test {

using namespace pejit::jit;

namespace {

std::string tmp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("pejit_sched_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// A TreeLSTM-like gate epilogue: sigmoid(x + b) * tanh(y).
KernelSpec gate(int64_t width) {
  return KernelSpec{.width = width,
                    .inputs = {InputShape::Full, InputShape::RowBroadcast, InputShape::Full},
                    .ops = {{ElementwiseOp::Add, 0, 1},
                            {ElementwiseOp::Sigmoid, 3},
                            {ElementwiseOp::Tanh, 2},
                            {ElementwiseOp::Mul, 4, 5}},
                    .outputs = {6, 4}};
}

// Runs `k` on seeded inputs of `rows` rows; returns all outputs, concatenated.
std::vector<float> run_ew(const CompiledKernel& k, const KernelSpec& spec, int64_t rows) {
  std::mt19937 rng(static_cast<uint32_t>(rows * 7 + spec.width));
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<std::vector<float>> in, out;
  std::vector<float*> ip, op;
  for (InputShape s : spec.inputs) {
    size_t n = s == InputShape::Full           ? static_cast<size_t>(rows * spec.width)
               : s == InputShape::RowBroadcast ? static_cast<size_t>(spec.width)
                                               : 1;
    std::vector<float> v(n);
    for (float& x : v)
      x = dist(rng);
    in.push_back(std::move(v));
  }
  out.assign(spec.outputs.size(), std::vector<float>(static_cast<size_t>(rows * spec.width), -7));
  for (auto& v : in)
    ip.push_back(v.data());
  for (auto& v : out)
    op.push_back(v.data());
  k.fn(ip.data(), op.data(), rows);
  std::vector<float> all;
  for (auto& v : out)
    all.insert(all.end(), v.begin(), v.end());
  return all;
}

ScheduleEntry entry(const std::string& signature, const std::string& cpu,
                    const std::string& schedule) {
  ScheduleEntry e;
  e.signature = signature;
  e.cpu = cpu;
  e.schedule = schedule;
  return e;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A one-entry database for `cpu`, saved to `name`.
std::string db_with(const std::string& name, const std::string& signature, const std::string& cpu,
                    const std::string& schedule) {
  ScheduleDB db;
  db.put(entry(signature, cpu, schedule));
  std::string path = tmp_path(name);
  db.save(path);
  return path;
}

std::string load_error(const std::string& path) {
  try {
    (void)ScheduleDB::load(path);
  } catch (const pejit::Error& e) {
    return e.what();
  }
  return "(no error)";
}

} // namespace

TEST_CASE("schedule text: defaults, valid parameters, and clear rejections") {
  CHECK(parse_elementwise_schedule("default").is_default());
  ElementwiseSchedule s = parse_elementwise_schedule("v16x2");
  CHECK(s.vector_width == 16);
  CHECK(s.interleave == 2);
  CHECK(elementwise_schedule_text(s) == "v16x2");
  for (const char* bad : {"v3x1", "v16", "16x2", "v16x0", "v128x1", "v8x17", "fast", ""})
    CHECK_THROWS_WITH_AS(parse_elementwise_schedule(bad),
                         doctest::Contains(doctest::String((std::string("'") + bad + "'").c_str())),
                         pejit::Error);
  int mr = -1, nr = -1;
  parse_gemm_schedule("default", mr, nr);
  CHECK((mr == 0 && nr == 0));
  parse_gemm_schedule("6x4", mr, nr);
  CHECK((mr == 6 && nr == 4));
  for (const char* bad : {"6x5", "0x4", "x4", "40x1", "6*4"})
    CHECK_THROWS_AS(parse_gemm_schedule(bad, mr, nr), pejit::Error);
  // A spec with a bad schedule does not validate, so it never reaches the lowering.
  KernelSpec k = gate(8);
  k.schedule = "v5x1";
  CHECK_THROWS_AS(k.validate(), pejit::Error);
}

TEST_CASE("signatures leave the schedule out, canonical texts keep it") {
  KernelSpec k = gate(150);
  k.schedule = "v8x2";
  CHECK(k.canonical_text() == k.signature() + " sched=v8x2");
  CHECK(k.signature().find("sched") == std::string::npos);
  GemmSpec g{.layout = GemmLayout::NT, .n = 300, .k = 750, .mr = 4, .nr = 6};
  CHECK(g.canonical_text() == g.signature() + " block=4x6");
  CHECK(g.signature() == "gemm f32 nt m=? n=300 k=750 lda=0 ldb=0 ldc=0 acc=0");
}

TEST_CASE("every elementwise candidate computes the default's bits, width is forced") {
  Jit jit;
  int lanes = jit.vector_lanes();
  for (int64_t width : {1, 17, 150}) {
    KernelSpec def = gate(width);
    CompiledKernel d = jit.compile(def);
    for (const std::string& cand : tune_candidates(def, lanes)) {
      CAPTURE(width);
      CAPTURE(cand);
      KernelSpec s = def;
      s.schedule = cand;
      CompiledKernel k = jit.compile(s);
      for (int64_t rows : {1, 2, 25}) {
        std::vector<float> a = run_ew(d, def, rows), b = run_ew(k, s, rows);
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
      }
      jit.remove(k.handle);
    }
    jit.remove(d.handle);
  }
  // The schedule is in the IR: a forced width of 4 gives <4 x float> vectors and no wider.
  KernelSpec narrow = gate(150);
  narrow.schedule = "v4x1";
  std::string ir = jit.optimized_ir(narrow);
  CHECK(ir.find("<4 x float>") != std::string::npos);
  CHECK(ir.find("<8 x float>") == std::string::npos);
  CHECK(ir.find("<16 x float>") == std::string::npos);
  KernelSpec wide = gate(150);
  wide.schedule = "v16x2";
  CHECK(jit.optimized_ir(wide).find("<16 x float>") != std::string::npos);
  CHECK(jit.optimized_ir(wide) != jit.optimized_ir(gate(150)));
}

TEST_CASE("schedule databases round-trip through JSON") {
  ScheduleDB db;
  ScheduleEntry measured = entry(gate(150).signature(), "cpu-a", "v16x2");
  measured.rows = {16, 128};
  measured.default_us = 3.5;
  measured.best_us = 2.5;
  measured.candidates = 8;
  db.put(measured);
  db.put(entry(GemmSpec{.n = 450, .k = 300}.signature(), "cpu-a", "8x3"));
  db.put(entry(gate(150).signature(), "cpu-a", "v8x1")); // replaces
  CHECK(db.size() == 2);
  CHECK_THROWS_AS(db.put(entry(gate(3).signature(), "x", "6x4")), pejit::Error);
  std::string path = tmp_path("roundtrip.json");
  db.save(path);
  ScheduleDB back = ScheduleDB::load(path);
  CHECK(back.path() == path);
  REQUIRE(back.size() == 2);
  size_t index = 99;
  const ScheduleEntry* e = back.find(gate(150).signature(), "cpu-a", &index);
  REQUIRE(e != nullptr);
  CHECK(e->schedule == "v8x1");
  CHECK(e->family == "elementwise");
  CHECK(back.entries()[index].signature == gate(150).signature());
  CHECK(back.find(gate(150).signature(), "cpu-b") == nullptr);
  const ScheduleEntry* g = back.find(GemmSpec{.n = 450, .k = 300}.signature(), "cpu-a");
  REQUIRE(g != nullptr);
  CHECK(g->family == "gemm");
  CHECK(back.cpu_warning("cpu-a").empty());
  std::string w = back.cpu_warning("cpu-b");
  CHECK(w.find(path) != std::string::npos);
  CHECK(w.find("cpu-b") != std::string::npos);
  CHECK(w.find("cpu-a") != std::string::npos);
}

TEST_CASE("schedule selection: default without a database, tuned for this CPU only") {
  Jit jit;
  const std::string cpu = jit.target_cpu();
  KernelSpec spec = gate(150);

  KernelCache plain(jit, 16);
  auto d = plain.get(spec);
  CHECK(d->schedule == "default");
  CHECK(d->schedule_source == "default");
  CHECK(d->ir_hash == ir_text_hash(jit.optimized_ir(spec)));

  // An entry for this CPU: the cache compiles its schedule and says where it came from.
  std::string mine = db_with("mine.json", spec.signature(), cpu, "v4x2");
  KernelCache tuned(jit, 16, std::make_shared<ScheduleDB>(ScheduleDB::load(mine)));
  auto t = tuned.get(spec);
  CHECK(t->schedule == "v4x2");
  CHECK(t->schedule_source == "tuned " + mine + " entry 0");
  CHECK(std::get<ElementwiseKernel>(t->family).spec.schedule == "v4x2");
  CHECK(t->key == spec.signature() + " sched=v4x2 cpu=" + cpu);
  KernelSpec resolved = spec;
  resolved.schedule = "v4x2";
  CHECK(t->ir_hash == ir_text_hash(jit.optimized_ir(resolved)));
  CHECK(t->ir_hash != d->ir_hash);
  CHECK(run_ew(t->elementwise(), spec, 25) == run_ew(d->elementwise(), spec, 25));
  // Another kernel has no entry: default.
  auto other = tuned.get(gate(17));
  CHECK(other->schedule == "default");
  CHECK(other->schedule_source == "default");
  // A schedule the caller names wins over the database.
  KernelSpec given = spec;
  given.schedule = "v8x1";
  CHECK(tuned.get(given)->schedule_source == "given");

  // The same entry measured on another CPU is not used.
  std::string foreign = db_with("foreign.json", spec.signature(), cpu + "-other", "v4x2");
  auto fdb = std::make_shared<ScheduleDB>(ScheduleDB::load(foreign));
  CHECK(fdb->cpu_warning(cpu).find(foreign) != std::string::npos);
  KernelCache elsewhere(jit, 16, fdb);
  auto f = elsewhere.get(spec);
  CHECK(f->schedule == "default");
  CHECK(f->schedule_source == "default");
  CHECK(f->ir_hash == d->ir_hash);
}

TEST_CASE("gemm kernels: default block, tuned block for this CPU, foreign entry unused") {
  Jit jit;
  const std::string cpu = jit.target_cpu();
  GemmSpec spec{.layout = GemmLayout::NN, .n = 40, .k = 24};
  KernelCache plain(jit, 8);
  auto d = plain.get_gemm(spec);
  GemmSpec r = spec.resolved(jit.vector_lanes());
  CHECK(std::holds_alternative<GemmKernel>(d->family));
  CHECK(d->schedule == std::to_string(r.mr) + "x" + std::to_string(r.nr));
  CHECK(d->schedule_source == "default");
  CHECK(plain.get_gemm(spec).get() == d.get()); // cached

  std::string mine = db_with("gemm.json", spec.signature(), cpu, "2x1");
  KernelCache tuned(jit, 8, std::make_shared<ScheduleDB>(ScheduleDB::load(mine)));
  auto t = tuned.get_gemm(spec);
  CHECK(t->schedule == "2x1");
  CHECK(t->schedule_source == "tuned " + mine + " entry 0");
  CHECK(std::get<GemmKernel>(t->family).spec.mr == 2);
  CHECK(t->ir_hash != d->ir_hash);
  // Same results, bit for bit (the block never changes the order of a sum over k).
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> a(7 * 24), b(24 * 40), c1(7 * 40), c2(7 * 40);
  for (float& x : a)
    x = dist(rng);
  for (float& x : b)
    x = dist(rng);
  d->gemm().fn(a.data(), b.data(), c1.data(), 7);
  t->gemm().fn(a.data(), b.data(), c2.data(), 7);
  CHECK(c1 == c2);
  double ref = 0;
  for (int p = 0; p < 24; ++p)
    ref += double(a[p]) * b[p * 40];
  CHECK(c2[0] == doctest::Approx(ref).epsilon(1e-5));

  std::string foreign = db_with("gemm_foreign.json", spec.signature(), "not-" + cpu, "2x1");
  KernelCache elsewhere(jit, 8, std::make_shared<ScheduleDB>(ScheduleDB::load(foreign)));
  CHECK(elsewhere.get_gemm(spec)->schedule_source == "default");
  CHECK(elsewhere.get_gemm(spec)->ir_hash == d->ir_hash);
}

TEST_CASE("bad database files are clear errors naming the file and the entry") {
  std::string missing = tmp_path("does_not_exist.json");
  CHECK(load_error(missing).find("'" + missing + "': cannot read") != std::string::npos);

  std::string corrupt = tmp_path("corrupt.json");
  write_file(corrupt, "{\"format\": \"pejit-schedules\", \"version\": 1, \"entries\": [");
  CHECK(load_error(corrupt).find("'" + corrupt + "': not valid JSON") != std::string::npos);

  std::string empty = tmp_path("empty.json");
  write_file(empty, "");
  CHECK(load_error(empty).find("'" + empty + "': not valid JSON") != std::string::npos);

  std::string other = tmp_path("other.json");
  write_file(other, "{\"name\": \"something else\"}");
  CHECK(load_error(other).find("'" + other + "': not a pejit schedule database") !=
        std::string::npos);

  std::string version = tmp_path("version.json");
  write_file(version, R"({"format": "pejit-schedules", "version": 7, "entries": []})");
  CHECK(load_error(version).find("unsupported version 7") != std::string::npos);

  const std::string head = R"({"format": "pejit-schedules", "version": 1, "entries": [)";
  const std::string good = R"({"signature": "ew f32 w=4 in=F ops=neg(0) out=1", "cpu": "c",
                               "family": "elementwise", "schedule": "v8x1"})";
  std::string e = tmp_path("entries.json");
  struct Case {
    std::string entry, expect;
  };
  for (const Case& c : {
           Case{R"({"cpu": "c", "family": "gemm", "schedule": "6x4"})",
                "entry 1: \"signature\" must be a non-empty string"},
           Case{R"({"signature": "ew f32 w=8 in=F ops=neg(0) out=1", "cpu": "c",
                    "family": "elementwise", "schedule": "v3x1"})",
                "entry 1 (ew f32 w=8 in=F ops=neg(0) out=1): elementwise schedule 'v3x1'"},
           Case{R"({"signature": "gemm f32 nn m=? n=8 k=8 lda=0 ldb=0 ldc=0 acc=0", "cpu": "c",
                    "family": "gemm", "schedule": "40x40"})",
                "gemm schedule '40x40'"},
           Case{R"({"signature": "gemm f32 nn m=? n=8 k=8 lda=0 ldb=0 ldc=0 acc=0", "cpu": "c",
                    "family": "elementwise", "schedule": "v8x1"})",
                "family 'elementwise' does not match the signature"},
           Case{good, "entry 1 (ew f32 w=4 in=F ops=neg(0) out=1): a second entry for CPU 'c'"},
           Case{"42", "entry 1: not an object"},
       }) {
    CAPTURE(c.entry);
    write_file(e, head + good + ", " + c.entry + "]}");
    std::string msg = load_error(e);
    CHECK(msg.find("tuned schedule database '" + e + "'") != std::string::npos);
    CHECK(msg.find(c.expect) != std::string::npos);
  }
  write_file(e, head + good + "]}");
  CHECK(ScheduleDB::load(e).size() == 1);
}

TEST_CASE("the tuner measures candidates and its entry is what the cache then compiles") {
  Jit jit;
  TuneTiming opt{.rows = {1, 33}, .min_ms = 0.05, .repeats = 1};
  KernelSpec spec = gate(150);
  ScheduleEntry e = tune_kernel(jit, spec, opt);
  CHECK(e.signature == spec.signature());
  CHECK(e.cpu == jit.target_cpu());
  CHECK(e.family == "elementwise");
  CHECK(e.candidates == static_cast<int>(tune_candidates(spec, jit.vector_lanes()).size()));
  CHECK(e.rows == opt.rows);
  CHECK(e.best_us > 0);
  CHECK(e.best_us <= e.default_us);
  CHECK_NOTHROW(parse_elementwise_schedule(e.schedule));
  CHECK(jit.live_kernels() == 0); // every candidate's code was freed

  GemmSpec g{.layout = GemmLayout::NT, .n = 30, .k = 40};
  ScheduleEntry ge = tune_kernel(jit, g, opt);
  CHECK(ge.family == "gemm");
  CHECK(ge.candidates > 1);
  CHECK(ge.best_us <= ge.default_us);
  GemmSpec tn{.layout = GemmLayout::TN, .m = 12, .n = 20, .accumulate = true};
  CHECK(tune_kernel(jit, tn, opt).candidates > 1);

  ScheduleDB db;
  db.put(e);
  db.put(ge);
  std::string path = tmp_path("tuned.json");
  db.save(path);
  KernelCache cache(jit, 8, std::make_shared<ScheduleDB>(ScheduleDB::load(path)));
  CHECK(cache.get(spec)->schedule == e.schedule);
  CHECK(cache.get(spec)->schedule_source.rfind("tuned " + path + " entry ", 0) == 0);
  CHECK(cache.get_gemm(g)->schedule_source.rfind("tuned " + path + " entry ", 0) == 0);

  KernelSpec named = spec;
  named.schedule = "v8x1";
  CHECK_THROWS_AS(tune_kernel(jit, named, opt), pejit::Error);
  CHECK_THROWS_WITH_AS(tune_kernel(jit, spec, TuneTiming{.rows = {8, -1}}),
                       doctest::Contains("row count -1"), pejit::Error);
  CHECK_THROWS_AS(tune_kernel(jit, g, TuneTiming{.rows = {}}), pejit::Error);
}

TEST_CASE("the tuner sizes strided arrays by their stride: every candidate of a strided spec "
          "gives the default's bits") {
  // A split's part read in place (stride 450) and a concat's part written in place: arrays of
  // rows x stride floats. Sized rows x width, the kernels read and wrote past them, the
  // candidates disagreed and were dropped.
  Jit jit;
  TuneTiming opt{.rows = {8, 64}, .min_ms = 0.02, .repeats = 1};
  KernelSpec spec = gate(150);
  spec.in_strides = {450, 0, 450};
  spec.out_strides = {300, 0};
  ScheduleEntry e = tune_kernel(jit, spec, opt);
  CHECK(e.candidates == static_cast<int>(tune_candidates(spec, jit.vector_lanes()).size()));
}

} // namespace tests_jit_schedule_test
