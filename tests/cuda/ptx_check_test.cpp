// The offline PTX check (docs/cuda.md): every GPU kernel of the examples' programs (treelstm,
// listops, the LSTM language model) and of random programs becomes PTX that
// `ptxas -arch=sm_90` accepts, run as a subprocess on the emitted text; and what the PTX must
// (not) contain: no fused multiply-add where the CPU kernels round twice, no call of an
// external function (libm's logf), the bad-label report as an atomic. Skipped when ptxas or
// LLVM's NVPTX target is missing.
#include "jit/ptx_codegen.h"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/train/trainer.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "src/types/check.h"
#include "tests/specializer/random_batches.h"
#include "tests/support/skip.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unistd.h>

namespace tests_cuda_ptx_check_test {

using namespace pejit;
namespace fs = std::filesystem;

namespace {

// Why the check cannot run here, or empty.
std::string missing_tools() {
  if (std::string(PEJIT_PTXAS).empty() || access(PEJIT_PTXAS, X_OK) != 0)
    return "ptxas not found (the CUDA toolkit's bin/)";
  if (!jit::PtxCompiler::available())
    return "this LLVM has no NVPTX target";
  return {};
}

// ptxas's verdict on one module: empty when it assembles for sm_90, else its messages.
std::string ptxas(const std::string& ptx, const std::string& name) {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("pejit_ptx_" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
  }();
  fs::path in = dir / (name + ".ptx"), out = dir / (name + ".cubin"), log = dir / (name + ".log");
  std::ofstream(in) << ptx;
  std::string cmd = std::string(PEJIT_PTXAS) + " -arch=sm_90 " + in.string() + " -o " +
                    out.string() + " > " + log.string() + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream l(log);
  std::stringstream msg;
  msg << l.rdbuf();
  fs::remove(in);
  fs::remove(out);
  fs::remove(log);
  return rc == 0 ? std::string() : "ptxas exit " + std::to_string(rc) + ": " + msg.str();
}

struct Counts {
  std::map<std::string, int> by_kind; ///< "chain", "reduce", "gather", ...
  int ptx = 0, cublas = 0, host = 0;
};

std::string kind_of(const runtime::cuda::GpuKernel& k) {
  const char* names[] = {"chain", "reduce", "gather", "segment_sum", "optim", "cublas", "host"};
  return names[k.spec.index()];
}

// Every generated kernel of `ks` through ptxas.
Counts check_kernels(const std::vector<runtime::cuda::GpuKernel>& ks, const jit::PtxCompiler& pc) {
  Counts c;
  for (const auto& k : ks) {
    c.by_kind[kind_of(k)]++;
    if (!k.ptx()) {
      (k.spec.index() == 5 ? c.cublas : c.host)++;
      continue;
    }
    CAPTURE(k.name);
    CAPTURE(k.canonical_text());
    std::string text = runtime::cuda::kernel_ptx(k, pc);
    CHECK(text.find(".entry " + k.name + "(") != std::string::npos);
    CHECK(text.find(".extern") == std::string::npos); // self-contained: no libm call
    std::string err = ptxas(text, k.name);
    CHECK_MESSAGE(err.empty(), err);
    c.ptx++;
  }
  return c;
}

} // namespace

TEST_SUITE("cuda") {
  TEST_CASE("ptx: the CPU kernels' floating point: no contraction, IEEE division and sqrt, "
            "logf inline, bad labels reported by an atomic") {
    if (!jit::PtxCompiler::available()) {
      test::skip("this LLVM has no NVPTX target");
      return;
    }
    jit::PtxCompiler pc;
    // x * y + z: two roundings on the CPU, so no fma here (ptxas may not fuse .rn ops).
    jit::KernelSpec ew;
    ew.width = 150;
    ew.inputs = {jit::InputShape::Full, jit::InputShape::RowBroadcast, jit::InputShape::Full};
    ew.ops = {{jit::ElementwiseOp::Mul, 0, 1},
              {jit::ElementwiseOp::Add, 3, 2},
              {jit::ElementwiseOp::Sigmoid, 4, -1}};
    ew.outputs = {5};
    std::string chain = pc.elementwise(ew, "chain");
    CHECK(chain.find("fma") == std::string::npos);
    CHECK(chain.find("mul.rn.f32") != std::string::npos);
    // sigmoid's 1 / (1 + e^-x), correctly rounded (rcp.rn is 1 / x rounded once).
    CHECK((chain.find("rcp.rn.f32") != std::string::npos ||
           chain.find("div.rn.f32") != std::string::npos));
    CHECK(chain.find("approx") == std::string::npos);
    CHECK(chain.find(".entry chain(") != std::string::npos);

    jit::ReduceSpec ce{.kind = jit::ReduceKind::CrossEntropy, .width = 5};
    std::string loss = pc.reduce(ce, "loss");
    CHECK(loss.find(".extern") == std::string::npos);             // no libm logf
    CHECK(loss.find("atom.global.min.u64") != std::string::npos); // the first bad row
    CHECK(loss.find("fma") == std::string::npos);

    jit::OptimizerStepSpec adam{
        .rule = jit::OptimizerStepSpec::Rule::Adam, .sparse = true, .width = 300};
    std::string step = pc.optimizer_step(adam, "adam");
    CHECK(step.find("sqrt.rn.f32") != std::string::npos);
    CHECK(step.find("div.rn.f32") != std::string::npos);
    CHECK(step.find("fma") == std::string::npos);

    // The same spec, the same text (a PTX cache may key on the spec).
    CHECK(pc.elementwise(ew, "chain") == chain);
    // A malformed spec is an error, not a crash.
    jit::KernelSpec bad = ew;
    bad.ops.push_back({jit::ElementwiseOp::Add, 0, 99});
    CHECK_THROWS(pc.elementwise(bad, "bad"));
    CHECK_THROWS(pc.gather(jit::RowGatherSpec{}, "empty"));

    if (std::string why = missing_tools(); !why.empty())
      return; // the text checks above need no ptxas
    for (auto& [name, text] : std::map<std::string, std::string>{
             {"chain", chain},
             {"loss", loss},
             {"adam", step},
             {"gather", pc.gather(jit::RowGatherSpec{.widths = {150, 150}}, "gather")},
             {"segsum", pc.segment_sum(jit::SegmentSumSpec{.width = 300}, "segsum")},
             {"softmax",
              pc.reduce(jit::ReduceSpec{.kind = jit::ReduceKind::LogSoftmax, .width = 37},
                        "softmax")},
             {"sumrows1", pc.reduce(jit::ReduceSpec{.kind = jit::ReduceKind::SumRows, .width = 1},
                                    "sumrows1")}}) {
      CAPTURE(name);
      std::string err = ptxas(text, name);
      CHECK_MESSAGE(err.empty(), err);
    }
  }

  TEST_CASE("ptx: every GPU kernel of the examples' plans assembles with ptxas -arch=sm_90") {
    if (std::string why = missing_tools(); !why.empty()) {
      test::skip(why);
      return;
    }
    jit::PtxCompiler pc;
    struct Example {
      const char *model, *data;
      int min_ptx;
    };
    for (const Example& e :
         {Example{"examples/treelstm/treelstm.pe", "tests/golden/dump_trees.txt", 15},
          Example{"examples/listops/listops.pe", "tests/golden/dump_listops.txt", 10},
          Example{"examples/rnn/rnn.pe", "tests/golden/dump_sentences.txt", 8}}) {
      CAPTURE(e.model);
      runtime::DumpOptions opt;
      opt.model = std::string(PEJIT_SOURCE_DIR "/") + e.model;
      opt.data = std::string(PEJIT_SOURCE_DIR "/") + e.data;
      opt.batch = 3;
      opt.emit = "ptx";
      std::ostringstream os;
      runtime::dump(opt, os);
      // The dump's modules, split at their "// NAME (WHERE): SPEC" lines.
      std::string text = os.str();
      int modules = 0;
      size_t at = text.find("\n// ");
      while (at != std::string::npos) {
        size_t next = text.find("\n// ", at + 1);
        while (next != std::string::npos &&
               text.compare(next, 27, "\n// Generated by LLVM NVPTX") == 0)
          next = text.find("\n// ", next + 1);
        std::string part = text.substr(at + 1, next == std::string::npos ? next : next - at);
        if (part.find(".entry") != std::string::npos) {
          std::string name = part.substr(3, part.find(' ', 3) - 3);
          CAPTURE(name);
          std::string err = ptxas(part, name);
          CHECK_MESSAGE(err.empty(), err);
          modules++;
        }
        at = next;
      }
      CHECK(modules >= e.min_ptx);
    }
  }

  TEST_CASE("ptx: the kernels of random programs assemble, every kind of step covered") {
    if (std::string why = missing_tools(); !why.empty()) {
      test::skip(why);
      return;
    }
    jit::PtxCompiler pc;
    Counts total;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      CAPTURE(seed);
      testgen::RandomProgram p = testgen::generate(seed);
      auto m = std::make_shared<ir::Module>();
      Diagnostics d;
      REQUIRE_MESSAGE(types::add_source(*m, p.source, "random.pe", d).ok, d.render());
      interp::DimBindings dims = interp::bind_dims(*m, {});
      specializer::TemplateTable tt;
      auto pe = specializer::partially_evaluate(*m, dims, "loss", p.batch, tt);
      REQUIRE(pe.ok);
      specializer::Plan plan = specializer::make_plan(pe.residual, tt);
      Counts c = check_kernels(runtime::cuda::plan_gpu_kernels(*m, dims, plan, pe.residual, tt), pc);
      for (const auto& [k, n] : c.by_kind)
        total.by_kind[k] += n;
      total.ptx += c.ptx;
    }
    MESSAGE("random programs: " << total.ptx << " PTX kernels");
    for (const char* kind : {"chain", "reduce", "optim"})
      CHECK_MESSAGE(total.by_kind[kind] > 0, kind);
  }
}

} // namespace tests_cuda_ptx_check_test
