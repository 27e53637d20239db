// Dropout and the random ops end to end (docs/language.md, "Random ops"): a TreeLSTM with
// dropout (examples/treelstm/treelstm_dropout.pe) planned and run on every executor
// configuration draws what the generic path draws with the same seed and step (loss and
// every gradient; reference and JIT kernels bit for bit), the plan's random keys are inputs
// (one plan serves every step), inference turns dropout off, and a Session with a seed is
// reproducible step by step.
#include "jit/jit.h"
#include "jit/kernel_cache.h"
#include "pejit/pejit.h"
#include "runtime/data/synthetic.h"
#include "runtime/exec_layout.h"
#include "runtime/plan_executor.h"
#include "specializer/partial_eval.h"
#include "specializer/plan.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "tests/support/batches.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace tests_runtime_dropout_test {

using namespace pejit;

namespace {

const std::string kDropout = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm_dropout.pe";
const std::string kPlain = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

jit::KernelCache& kernel_cache() {
  static jit::Jit jit;
  static jit::KernelCache cache(jit, 512);
  return cache;
}

// A planned batch of a model file: its residual's random key slots filled per step.
struct Planned {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  interp::Value batch;
  specializer::TemplateTable tt;
  specializer::PeResult pe;
  specializer::Plan plan;
  runtime::ExecLayout layout;
  interp::Params params;

  // `file`, or with `text` the program in it.
  Planned(const std::string& file, size_t n, uint64_t seed, const std::string& text = {}) {
    Diagnostics d;
    if (text.empty())
      REQUIRE(types::add_file(*m, file, d).ok);
    else
      REQUIRE_MESSAGE(types::add_source(*m, text, file, d).ok, d.render());
    data::Vocab vocab;
    auto trees = data::gen_sst(n, seed, data::Shape::Sst, vocab);
    dims = interp::bind_dims(*m, {{"V", static_cast<int64_t>(vocab.size())}});
    batch = test::tree_batch(*m, trees);
    pe = specializer::partially_evaluate(*m, dims, "loss", batch, tt);
    REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);
    plan = specializer::make_plan(pe.residual, tt);
    layout = runtime::make_layout(plan, pe.residual);
    params = interp::init_params(*m, dims, 3);
  }
  specializer::Residual residual(const interp::RandomState& rs) const {
    specializer::Residual r = pe.residual;
    specializer::fill_random_inputs(r, rs, r.inputs);
    return r;
  }
};

struct Step {
  double loss = 0;
  std::vector<Tensor> grads;
};

Step dense(const interp::Interpreter::Gradients& g, const interp::Params& params) {
  Step s{g.loss, {}};
  for (size_t p = 0; p < params.values.size(); ++p)
    s.grads.push_back(g.grads[p].to_dense(params.values[p].shape()));
  return s;
}

Step generic_step(const Planned& b, const interp::RandomState& rs) {
  interp::Interpreter in(b.m, b.dims);
  in.set_random(rs);
  return dense(in.value_and_grad("loss", {b.batch}, b.params), b.params);
}

Step plan_step(runtime::PlanExecutor& ex, const Planned& b, const interp::RandomState& rs) {
  return dense(ex.value_and_grad(b.plan, b.residual(rs), b.tt, b.params, &b.layout), b.params);
}

void check_close(const Step& got, const Step& ref, const interp::Params& params) {
  CHECK(test::loss_close(got.loss, ref.loss));
  for (size_t p = 0; p < params.values.size(); ++p)
    test::check_close(got.grads[p], ref.grads[p], params.names[p]);
}

bool same_bits(const Step& a, const Step& b) {
  bool same = test::same_bits(a.loss, b.loss);
  for (size_t p = 0; p < a.grads.size(); ++p)
    same = same && test::same_bits(a.grads[p], b.grads[p]);
  return same;
}

// The three planned paths of one batch: reference kernels, JIT kernels, the batching
// interpreter.
struct Paths {
  runtime::PlanExecutor graphs, jit, interp;
  Step g, j, i;
};

// Runs `b` at `rs` on the three paths and checks each against the generic step `ref`, and the
// reference and JIT kernels for the same bits.
std::unique_ptr<Paths> run_paths(const Planned& b, const interp::RandomState& rs,
                                 const Step& ref) {
  runtime::ExecOptions graphs, jit, interp_path;
  jit.kernels = &kernel_cache();
  interp_path.graphs = false;
  auto p = std::unique_ptr<Paths>(new Paths{{b.m, b.dims, graphs},
                                            {b.m, b.dims, jit},
                                            {b.m, b.dims, interp_path},
                                            {},
                                            {},
                                            {}});
  p->g = plan_step(p->graphs, b, rs);
  p->j = plan_step(p->jit, b, rs);
  p->i = plan_step(p->interp, b, rs);
  check_close(p->g, ref, b.params);
  check_close(p->j, ref, b.params);
  check_close(p->i, ref, b.params);
  CHECK(same_bits(p->g, p->j));
  return p;
}

} // namespace

TEST_SUITE("runtime") {
  TEST_CASE("dropout: plans on reference and JIT kernels draw what the generic path draws") {
    Planned b(kDropout, 25, 41);
    // The random ops are in the plan: a one-op template per leaf (the word vector's dropout)
    // and the keyed node_loss template, with one key input slot per draw context.
    CHECK(b.pe.residual.random_slots.size() > 25);
    const interp::RandomState rs{1234, 7, true};
    Step ref = generic_step(b, rs);

    // Reference and JIT kernels: the same bits, as without dropout.
    auto p = run_paths(b, rs, ref);
    auto &on_graphs = p->graphs, &on_jit = p->jit;
    const Step& j = p->j;
    for (auto* ex : {&p->graphs, &p->jit, &p->interp}) {
      CHECK(ex->stats().groups_row_by_row == 0);
      CHECK(ex->stats().graph_fallbacks.empty());
    }
    CHECK(on_jit.stats().jit_launches > 0);

    // The step is a run-time input: the same plan at another step draws other masks, and
    // still what the generic path draws there.
    const interp::RandomState next{1234, 8, true};
    Step ref8 = generic_step(b, next);
    CHECK(ref8.loss != ref.loss);
    Step j8 = plan_step(on_jit, b, next), g8 = plan_step(on_graphs, b, next);
    check_close(j8, ref8, b.params);
    CHECK(same_bits(g8, j8));
    // And the seed: another seed, other masks.
    CHECK(generic_step(b, interp::RandomState{99, 7, true}).loss != ref.loss);
    // Reruns are bitwise.
    CHECK(same_bits(plan_step(on_jit, b, rs), j));
    CHECK(same_bits(generic_step(b, rs), ref));
  }

  TEST_CASE("random ops: bernoulli, uniform, normal and dropout, in templates and out") {
    // `noisy` is a template per k with one (k = 0) or two (k = 1) draws in its context; the
    // draws in `enc` (which takes a tree) are contexts of their own.
    const std::string program = R"(
      type Tree = Leaf(word: i32[], label: i32[]) | Node(left: Tree, right: Tree, label: i32[])
      dim V = 100
      param emb : f32[V, 8] = normal(0.0, 0.5)
      param W : f32[16, 8] = xavier
      param W_out : f32[8, 5] = xavier
      fn noisy(x: f32[8], k: Int) -> f32[8] {
        if k > 0 { x * bernoulli(0.7, 8) + normal(8) * 0.1 } else { x + uniform(8) }
      }
      fn enc(t: Tree) -> (f32[8], f32[]) {
        match t {
          Leaf(w, y) => { let h = noisy(take(emb, w), 1); (h, cross_entropy(h @ W_out, y)) }
          Node(l, r, y) => {
            let (hl, ll) = enc(l);
            let (hr, lr) = enc(r);
            let h = tanh(dropout(concat(hl, hr), 0.2) @ W) + uniform(8) * 0.1;
            (h, ll + lr + cross_entropy(noisy(h, 0) @ W_out, y))
          }
        }
      }
      entry loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => enc(t).1, batch)) }
    )";
    Planned b("random_ops.pe", 20, 45, program);
    const interp::RandomState rs{31, 2, true};
    Step ref = generic_step(b, rs);
    auto p = run_paths(b, rs, ref);
    CHECK(p->jit.stats().groups_row_by_row == 0);
    // The sources draw in inference too: run() at another step gives another loss.
    interp::Interpreter in(b.m, b.dims);
    in.set_random(rs);
    float a = in.run("loss", {b.batch}, b.params).as_tensor().item_f32();
    in.set_random(interp::RandomState{31, 3, true});
    CHECK(in.run("loss", {b.batch}, b.params).as_tensor().item_f32() != a);
  }

  TEST_CASE("dropout: its gradient (the same mask on the incoming gradient) passes check_grad") {
    Planned b(kDropout, 3, 47);
    interp::Interpreter in(b.m, b.dims);
    in.set_random(interp::RandomState{8, 1, true});
    auto rep = interp::check_grad(in, "loss", {b.batch}, b.params, 3, 5);
    CHECK_MESSAGE(rep.ok, rep.message);
  }

  TEST_CASE("dropout: the gradient is the forward mask times 1 / (1 - p)") {
    auto mp = std::make_shared<ir::Module>();
    Diagnostics d;
    REQUIRE(types::add_source(*mp,
                              "param w : f32[64] = normal(0.0, 1.0)\n"
                              "entry loss(xs: List[i32[]]) -> f32[] { sum(dropout(w, 0.25)) }\n",
                              "grad.pe", d)
                .ok);
    interp::DimBindings dims = interp::bind_dims(*mp, {});
    interp::Params params = interp::init_params(*mp, dims, 2);
    interp::Interpreter in(mp, dims);
    in.set_random(interp::RandomState{3, 9, true});
    auto g = in.value_and_grad("loss", {interp::Value::list({})}, params);
    Tensor gw = g.grads[0].to_dense(params.values[0].shape());
    // d/dw of sum(dropout(w)) is the mask scaled: 0 where dropped, 1 / 0.75 where kept.
    const float scale = 1.0f / 0.75f;
    int kept = 0, other = 0;
    double loss = 0;
    for (int64_t i = 0; i < 64; ++i) {
      float v = gw.f32()[i];
      kept += v == scale;
      other += v != scale && v != 0.0f;
      loss += static_cast<double>(v) * params.values[0].f32()[i];
    }
    CHECK(other == 0);
    CHECK(kept > 32);
    CHECK(kept < 64);
    CHECK(std::fabs(loss - g.loss) < 1e-4 * (1 + std::fabs(loss))); // the forward's own mask
  }

  TEST_CASE("dropout: off in inference, on the generic path and in plans") {
    Planned drop(kDropout, 12, 43), plain(kPlain, 12, 43);
    REQUIRE(drop.params.names == plain.params.names);
    const interp::RandomState rs{5, 3, true};
    // Without dropout the two models are one: inference (run) of the dropout model gives the
    // plain model's loss, and a training step does not.
    interp::Interpreter in_drop(drop.m, drop.dims), in_plain(plain.m, plain.dims);
    in_drop.set_random(rs);
    float plain_loss = in_plain.run("loss", {plain.batch}, plain.params).as_tensor().item_f32();
    float infer_loss = in_drop.run("loss", {drop.batch}, drop.params).as_tensor().item_f32();
    CHECK(test::same_bits(infer_loss, plain_loss));
    float train_loss = in_drop.value_and_grad("loss", {drop.batch}, drop.params).loss;
    CHECK(train_loss != plain_loss);

    // A plan's forward run with inference keys: the plain model's plan's loss, bit for bit.
    interp::RandomState off = rs;
    off.train = false;
    runtime::ExecOptions jit;
    jit.kernels = &kernel_cache();
    runtime::PlanExecutor ex_drop(drop.m, drop.dims, jit), ex_plain(plain.m, plain.dims, jit);
    auto out_drop = ex_drop.run(drop.plan, drop.residual(off), drop.tt, drop.params, &drop.layout);
    auto out_plain =
        ex_plain.run(plain.plan, plain.pe.residual, plain.tt, plain.params, &plain.layout);
    REQUIRE(out_drop.size() == 1);
    CHECK(test::same_bits(out_drop[0], out_plain[0]));
    CHECK(test::loss_close(out_drop[0].item_f32(), plain_loss));
    auto out_train = ex_drop.run(drop.plan, drop.residual(rs), drop.tt, drop.params, &drop.layout);
    CHECK(out_train[0].item_f32() != out_drop[0].item_f32());
  }

  TEST_CASE("dropout: a Session with a seed is reproducible, specialized or generic") {
    auto open = [](const std::string& mode, bool use_jit) {
      SessionOptions o;
      o.dims = {{"V", 8}};
      o.seed = 11;
      o.mode = mode;
      o.optimizer = "sgd";
      o.compile.jit = use_jit;
      return Session::from_file(kDropout, o);
    };
    auto batch = [](const Session& s) {
      auto leaf = [&](int w, int y) {
        return s.make("Leaf", {Value::scalar_i32(w), Value::scalar_i32(y)});
      };
      auto node = [&](Value l, Value r, int y) {
        return s.make("Node", {std::move(l), std::move(r), Value::scalar_i32(y)});
      };
      return Value::list({node(leaf(1, 1), leaf(2, 1), 1),
                          node(node(leaf(3, 4), leaf(4, 3), 3), leaf(5, 2), 3), leaf(6, 0)});
    };
    Session g = open("generic", true), s1 = open("specialized", true),
            s2 = open("specialized", true), ref = open("specialized", false);
    Value bg = batch(g), b1 = batch(s1), b2 = batch(s2), br = batch(ref);
    std::vector<float> lg, l1, l2, lr;
    for (int i = 0; i < 4; ++i) {
      lg.push_back(g.step("loss", bg));
      l1.push_back(s1.step("loss", b1));
      l2.push_back(s2.step("loss", b2));
      lr.push_back(ref.step("loss", br));
    }
    CHECK(s1.random_step() == 4);
    CHECK(test::same_bits(l1, l2)); // the same seed: the same run
    CHECK(test::same_bits(l1, lr)); // JIT kernels or reference kernels: the same bits
    for (size_t i = 0; i < lg.size(); ++i)
      CHECK(test::loss_close(l1[i], lg[i]));
    // A step replayed: from the same parameters, step 1's masks give another loss than step
    // 0's, and setting the step back to 0 gives step 0's loss again.
    Session again = open("specialized", true);
    Value ba = batch(again);
    CHECK(test::same_bits(again.step("loss", ba), l1[0]));
    again.init_params(11);
    CHECK(again.random_step() == 1);
    CHECK(again.step("loss", ba) != l1[0]);
    again.init_params(11);
    again.set_random(11, 0);
    CHECK(test::same_bits(again.step("loss", ba), l1[0]));
    // Inference draws nothing: run() twice gives the same loss and leaves the step alone.
    float r1 = s1.run("loss", b1).item_f32(), r2 = s1.run("loss", b1).item_f32();
    CHECK(test::same_bits(r1, r2));
    CHECK(s1.random_step() == 4);
  }
}

} // namespace tests_runtime_dropout_test
