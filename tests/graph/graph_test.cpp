// The tensor graph: hash-consing, shape inference and its errors, the printer, Boost
// analyses, the reference evaluator, and reverse-mode AD through the registry's gradient
// rules, checked differentially against the generic path (the Interpreter's tape AD) on the
// TreeLSTM cell and by random directional derivatives.
#include "graph/boost_adaptor.h"
#include "graph/evaluate.h"
#include "graph/graph.h"
#include "graph/graph_emitter.h"
#include "interp/interpreter.h"
#include "types/check.h"
#include "util/check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace pejit;
using namespace pejit::graph;
using ops::Attr;
using ops::GradOp;
using ops::OpId;

namespace {

ShapeType f32(std::vector<int64_t> d) { return ShapeType{DType::F32, std::move(d)}; }
ShapeType i32(std::vector<int64_t> d) { return ShapeType{DType::I32, std::move(d)}; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no pejit::Error)";
}

/// A fixed, non-uniform tensor (values in about [-0.6, 1.2]).
Tensor weights(const Shape& s, int salt = 0) {
  Tensor t = Tensor::zeros(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = 0.3f + 0.9f * std::sin(1.7f * static_cast<float>(i) + 0.4f + 0.9f * salt);
  return t;
}

float max_abs(const Tensor& t) {
  float m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.f32()[i]));
  return m;
}

/// DESIGN.md §4: max|a-b| <= 1e-4 max|ref| + 1e-6.
void check_agree(const Tensor& got, const Tensor& ref, const std::string& what) {
  INFO(what << ": " << got.str() << " vs " << ref.str());
  REQUIRE(got.shape() == ref.shape());
  float diff = 0;
  for (int64_t i = 0; i < got.numel(); ++i)
    diff = std::max(diff, std::fabs(got.f32()[i] - ref.f32()[i]));
  CHECK(diff <= 1e-4f * max_abs(ref) + 1e-6f);
}

double scalar_loss(const Graph& g, NodeId loss, std::span<const Tensor> inputs) {
  return g.evaluate_placeholder_unused, 0;
}

} // namespace
