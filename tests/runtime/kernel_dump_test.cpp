// Kernel dumps and determinism (docs/architecture.md): the same plans give the same optimized IR,
// by hash, whether the engine compiles them synchronously (specialized mode), in its
// background pipeline (auto mode, prefetch and drain), or kernel_dump lowers them as
// `pejit dump --emit llvm` does; every kernel records its schedule and where it came from.
#include "jit/jit.h"
#include "runtime/data/synthetic.h"
#include "runtime/engine.h"
#include "runtime/kernel_dump.h"
#include "runtime/train/encode.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "src/types/check.h"

#include <doctest/doctest.h>

#include <map>
#include <set>

namespace tests_runtime_kernel_dump_test {

using namespace pejit;

namespace {

struct Batches {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  std::vector<interp::Value> batches;

  explicit Batches(size_t n) {
    Diagnostics d;
    REQUIRE(types::add_file(*m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d).ok);
    data::Vocab vocab;
    auto trees = data::gen_sst(n * 4, 5, data::Shape::Sst, vocab);
    dims = interp::bind_dims(*m, {{"V", static_cast<int64_t>(vocab.size())}});
    runtime::TreeEncoder enc(*m, "Tree");
    for (size_t b = 0; b < n; ++b) {
      interp::Values xs;
      for (size_t i = b * 4; i < b * 4 + 4; ++i)
        xs.push_back(enc.encode(trees[i]));
      batches.push_back(interp::Value::list(xs));
    }
  }
};

// What the JIT makes of batch `b`'s plan.
std::vector<runtime::KernelDumpTemplate> dump_batch(const Batches& s, size_t b, bool with_ir) {
  specializer::TemplateTable tt;
  auto pe = specializer::partially_evaluate(*s.m, s.dims, "loss", s.batches[b], tt);
  REQUIRE(pe.ok);
  specializer::Plan plan = specializer::make_plan(pe.residual, tt);
  return runtime::dump_kernels(*s.m, s.dims, plan, tt, with_ir);
}

// Trains one step per batch; returns the hashes of the kernels the engine compiled.
std::set<uint64_t> engine_hashes(const Batches& s, runtime::Mode mode) {
  runtime::EngineOptions eo;
  eo.mode = mode;
  runtime::Engine engine(s.m, s.dims, eo);
  interp::Params params = interp::init_params(*s.m, s.dims, 7);
  engine.prefetch("loss", s.batches);
  for (const auto& b : s.batches)
    (void)engine.value_and_grad("loss", b, params);
  engine.drain();
  auto st = engine.stats();
  CHECK(st.specialized_batches == static_cast<int64_t>(s.batches.size()));
  CHECK(st.compile_failures.empty());
  std::set<uint64_t> hs;
  for (const auto& k : engine.kernels()) {
    CAPTURE(k.signature);
    CHECK(k.schedule_source == "default");
    CHECK(k.ir_hash != 0);
    if (k.signature.rfind("gemm ", 0) == 0) { // a weight gradient: its default block
      CHECK(k.signature.find(" tn ") != std::string::npos);
      CHECK(k.signature.find("block=default") != std::string::npos);
      CHECK(k.schedule.find('x') != std::string::npos); // "12x2", "5x4", ...
      CHECK(k.schedule.find_first_not_of("0123456789x") == std::string::npos);
    } else {
      CHECK(k.schedule == "default");
      CHECK(k.signature.find("sched=default") != std::string::npos);
    }
    hs.insert(k.ir_hash);
  }
  CHECK(static_cast<int64_t>(engine.kernels().size()) == st.kernels_compiled);
  return hs;
}

} // namespace

TEST_SUITE("kernel_dump") {
  TEST_CASE("sync compile, the pipeline and the dump give the same IR hashes") {
    Batches s(3);
    std::set<uint64_t> dumped;
    size_t runs = 0, reductions = 0, gemms = 0;
    for (const auto& b : s.batches) {
      specializer::TemplateTable tt;
      auto pe = specializer::partially_evaluate(*s.m, s.dims, "loss", b, tt);
      REQUIRE(pe.ok);
      specializer::Plan plan = specializer::make_plan(pe.residual, tt);
      auto ts = runtime::dump_kernels(*s.m, s.dims, plan, tt, /*with_ir=*/true);
      REQUIRE(!ts.empty());
      for (const auto& t : ts) {
        CAPTURE(t.name);
        CHECK(t.why.empty()); // every template is lowered, the lookup (op.take) too
        CHECK(!t.kernels.empty());
        for (const auto& r : t.runs) {
          CHECK(r.schedule == "default");
          CHECK(r.schedule_source == "default");
          CHECK(r.ir.find("define void @pejit_ew(") != std::string::npos);
          CHECK(r.ir_hash == jit::ir_text_hash(r.ir));
          dumped.insert(r.ir_hash);
          ++runs;
        }
        for (const auto& r : t.reductions) {
          CHECK(r.schedule == "default");
          CHECK(r.ir.find("i64 @pejit_reduce(") != std::string::npos);
          CHECK(r.ir_hash == jit::ir_text_hash(r.ir));
          dumped.insert(r.ir_hash);
          ++reductions;
        }
        for (const auto& g : t.gemms) {
          CHECK(g.schedule_source == "default");
          CHECK(g.ir.find("define void @pejit_gemm(") != std::string::npos);
          CHECK(g.ir_hash == jit::ir_text_hash(g.ir));
          dumped.insert(g.ir_hash);
          ++gemms;
        }
      }
    }
    REQUIRE(runs > 0);
    REQUIRE(reductions > 0);
    REQUIRE(gemms > 0);
    std::set<uint64_t> sync = engine_hashes(s, runtime::Mode::Specialized);
    std::set<uint64_t> pipeline = engine_hashes(s, runtime::Mode::Auto);
    CHECK(!sync.empty());
    CHECK(sync == dumped);
    CHECK(pipeline == dumped);
  }

  TEST_CASE(
      "the gates are read from the GEMM's result in place (their bias added in the run), their "
      "gradients written in place") {
    Batches s(1);
    auto ts = dump_batch(s, 0, /*with_ir=*/false);
    // TreeLSTM: leaf has 3 gates of 150 (a [rows, 450] split), cell 5 (a [rows, 750] split).
    std::map<std::string, int64_t> gates = {{"leaf", 450}, {"cell", 750}};
    int checked = 0;
    for (const auto& t : ts) {
      auto g = gates.find(t.name);
      if (g == gates.end())
        continue;
      CAPTURE(t.name);
      int64_t strided_in = 0, strided_out = 0, bias_rows = 0;
      for (const auto& r : t.runs) {
        for (size_t i = 0; i < r.spec.inputs.size(); ++i) {
          strided_in += r.forward && r.spec.in_stride(i) == g->second;
          bias_rows += r.forward && r.spec.inputs[i] == jit::InputShape::RowBroadcast;
        }
        for (size_t j = 0; j < r.spec.outputs.size(); ++j)
          strided_out += !r.forward && r.spec.out_stride(j) == g->second;
      }
      CHECK(strided_in == g->second / 150);  // every gate read in place
      CHECK(bias_rows == g->second / 150);   // with its columns of the bias added in the run
      CHECK(strided_out == g->second / 150); // every gate gradient written in place
      ++checked;
    }
    CHECK(checked == 2);
  }

  TEST_CASE("the TreeLSTM's loss, its backward and its bias gradients' sums are JIT kernels") {
    Batches s(1);
    auto ts = dump_batch(s, 0, /*with_ir=*/false);
    // Per template, (where, canonical text) of its row reductions.
    std::map<std::string, std::set<std::pair<std::string, std::string>>> got;
    for (const auto& t : ts)
      for (const auto& r : t.reductions) {
        CHECK(r.schedule == "default");
        got[t.name].insert({r.where, r.spec.canonical_text()});
      }
    using P = std::pair<std::string, std::string>;
    CHECK(got["node_loss"] ==
          std::set<P>{{"fwd 1", "reduce f32 cross_entropy w=5 sched=default"},
                      {"bwd 0", "reduce f32 cross_entropy_bwd w=5 sched=default"},
                      {"param grad", "reduce f32 sum_rows w=5 sched=default"}}); // b_out
    CHECK(got["leaf"] == std::set<P>{{"param grad", "reduce f32 sum_rows w=450 sched=default"}});
    CHECK(got["cell"] == std::set<P>{{"param grad", "reduce f32 sum_rows w=750 sched=default"}});
  }

  TEST_CASE("each weight gradient is a generated TN gemm over the step's rows") {
    Batches s(1);
    auto ts = dump_batch(s, 0, /*with_ir=*/false);
    std::map<std::string, std::string> got; // weight -> canonical text
    for (const auto& t : ts)
      for (const auto& g : t.gemms) {
        CHECK(g.schedule_source == "default");
        jit::GemmSpec r = g.spec.resolved(jit::Jit().vector_lanes());
        CHECK(g.schedule == std::to_string(r.mr) + "x" + std::to_string(r.nr));
        got[g.param] = g.spec.canonical_text();
      }
    CHECK(got == std::map<std::string, std::string>{
                     {"W_leaf", "gemm f32 tn m=300 n=450 k=? lda=0 ldb=0 ldc=0 acc=? st=1 "
                                "block=default"},
                     {"U", "gemm f32 tn m=300 n=750 k=? lda=0 ldb=0 ldc=0 acc=? st=1 "
                           "block=default"},
                     {"W_out", "gemm f32 tn m=150 n=5 k=? lda=0 ldb=0 ldc=0 acc=? st=1 "
                               "block=default"}});
    std::string text = runtime::print_kernel_dump(ts);
    CHECK(text.find(" (weight grad U): gemm f32 tn m=300 n=750 ") != std::string::npos);
    auto with_ir = dump_batch(s, 0, /*with_ir=*/true);
    std::string llvm = runtime::print_kernel_llvm(with_ir);
    CHECK(llvm.find("; gemm cell#") != std::string::npos);
    CHECK(llvm.find("(weight grad U) fnv=") != std::string::npos);
  }

  TEST_CASE("the printed dump lists each kernel's runs with their provenance and IR") {
    Batches s(1);
    auto ts = dump_batch(s, 0, /*with_ir=*/false);
    std::string text = runtime::print_kernel_dump(ts);
    CHECK(text.find("template cell#") != std::string::npos);
    CHECK(text.find("  fwd 0: ") != std::string::npos);
    CHECK(text.find("    run 0: ew f32 w=") != std::string::npos);
    CHECK(text.find("      schedule default (source: default)\n") != std::string::npos);
    for (size_t i = 1; i < ts.size(); ++i)
      CHECK(ts[i - 1].id < ts[i].id); // template order
    auto with_ir = dump_batch(s, 0, /*with_ir=*/true);
    std::string llvm = runtime::print_kernel_llvm(with_ir);
    CHECK(llvm.rfind("; kernel ", 0) == 0);
    CHECK(llvm.find(" run 0 fnv=") != std::string::npos);
    CHECK(llvm.find("define void @pejit_ew(") != std::string::npos);
    CHECK(llvm.find("; reduce node_loss#") != std::string::npos);
    CHECK(llvm.find("i64 @pejit_reduce(") != std::string::npos);
  }
}

} // namespace tests_runtime_kernel_dump_test
