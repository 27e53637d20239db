// Learning-rate schedules (runtime/optim/schedule.h) and the optimizer's per-parameter learning
// rate and weight decay and its lr scale (runtime/optim/optimizer.h), against hand-computed
// values.
#include "runtime/optim/optimizer.h"
#include "runtime/optim/schedule.h"

#include "src/util/check.h"

#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

namespace tests_runtime_schedule_test {

using namespace pejit;
using namespace pejit::optim;
using pejit::optim::Optimizer; // not pejit::Optimizer (pejit.h), which a unity batch may include

TEST_CASE("lr schedules: factors by step") {
  CHECK(LrSchedule::parse("").factor(1000) == 1.0);
  CHECK(LrSchedule::parse("constant").str() == "constant");
  LrSchedule st = LrSchedule::parse("step:3:0.5");
  CHECK(st.factor(0) == 1.0);
  CHECK(st.factor(2) == 1.0);
  CHECK(st.factor(3) == 0.5);
  CHECK(st.factor(7) == 0.25);
  LrSchedule co = LrSchedule::parse("cosine:4");
  CHECK(co.factor(0) == 1.0);
  CHECK(co.factor(2) == doctest::Approx(0.5));
  CHECK(co.factor(1) == doctest::Approx(0.5 * (1 + std::cos(std::numbers::pi / 4))));
  CHECK(co.factor(4) == doctest::Approx(0.0));
  CHECK(co.factor(9) == doctest::Approx(0.0)); // stays at the end
  LrSchedule wu = LrSchedule::parse("warmup:4");
  CHECK(wu.factor(0) == 0.25);
  CHECK(wu.factor(3) == 1.0);
  CHECK(wu.factor(100) == 1.0);
  LrSchedule wc = LrSchedule::parse("warmup:2,step:1:0.1");
  CHECK(wc.factor(0) == 0.5);
  CHECK(wc.factor(1) == 1.0);
  CHECK(wc.factor(2) == 1.0); // the step schedule from its own 0
  CHECK(wc.factor(3) == doctest::Approx(0.1));
  CHECK(wc.str() == "warmup:2,step:1:0.1");
  for (const char* bad : {"step:3", "step:0:0.5", "step:2:-1", "cosine", "cosine:x", "warmup:0",
                          "warmup:2,warmup:3", "linear:5", "step:2:nan"})
    CHECK_THROWS_WITH_AS(LrSchedule::parse(bad), doctest::Contains("--lr-schedule"), Error);
}

TEST_CASE("optimizer: per-parameter lr and weight decay, and the lr scale") {
  interp::Params p;
  p.names = {"w", "b"};
  const float w0[2] = {1, 2}, b0[2] = {3, 4}, g[2] = {0.5f, -1};
  p.values = {Tensor::from_f32(Shape{2}, w0), Tensor::from_f32(Shape{2}, b0)};
  std::vector<interp::ParamGrad> grads(2);
  grads[0].dense = Tensor::from_f32(Shape{2}, g);
  grads[1].dense = Tensor::from_f32(Shape{2}, g);
  OptimizerOptions oo;
  oo.kind = Kind::Sgd;
  oo.lr = 0.5f;
  oo.weight_decay = 0.25f;
  oo.param_lr["b"] = 0.125f;
  oo.param_weight_decay["b"] = 0.0f;
  Optimizer o(oo);
  o.step(p, grads);
  // w: p -= 0.5 * (g + 0.25 p); b: p -= 0.125 * g.
  CHECK(p.values[0].f32()[0] == 1 - 0.5f * (0.5f + 0.25f * 1));
  CHECK(p.values[0].f32()[1] == 2 - 0.5f * (-1 + 0.25f * 2));
  CHECK(p.values[1].f32()[0] == 3 - 0.125f * 0.5f);
  CHECK(p.values[1].f32()[1] == 4 - 0.125f * -1);
  o.set_lr_scale(0.5f);
  float w = p.values[0].f32()[0], b = p.values[1].f32()[0];
  o.step(p, grads);
  CHECK(p.values[0].f32()[0] == w - 0.25f * (0.5f + 0.25f * w));
  CHECK(p.values[1].f32()[0] == b - 0.0625f * 0.5f);
  CHECK_THROWS_AS(o.set_lr_scale(-1), Error);
  // Set later, the per-parameter options take effect on the next step.
  o.set_lr_scale(1.0f);
  o.set_param_options({{"w", 0.0f}}, {});
  float w2 = p.values[0].f32()[0], b2 = p.values[1].f32()[0];
  o.step(p, grads);
  CHECK(p.values[0].f32()[0] == w2); // lr 0
  CHECK(p.values[1].f32()[0] == b2 - 0.5f * (0.5f + 0.25f * b2));
  CHECK_THROWS_AS(o.set_param_options({{"w", -1.0f}}, {}), Error);
  OptimizerOptions neg;
  neg.param_lr["w"] = -1;
  CHECK_THROWS_AS(Optimizer{neg}, Error);
}

} // namespace tests_runtime_schedule_test
