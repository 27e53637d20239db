// Helpers shared by the tensor-op tests (ops_test.cpp: forward results, ops_grad_test.cpp:
// gradients): value literals (tensor literals and the fixed constant: tests/support/tensors.h),
// a checked program with its interpreter and parameters, and an element-wise comparison with
// expected numbers.
#pragma once

#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "tests/support/tensors.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace pejit::interp::test {

using pejit::test::F;
using pejit::test::I;
using pejit::test::weights;

inline Value V(Tensor t) {
  return Value::tensor(std::move(t));
}

/// A checked module, its interpreter and its parameters (normal-initialized from seed 1).
struct Prog {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  std::unique_ptr<interp::Interpreter> in;
  interp::Params params;

  explicit Prog(const std::string& src) {
    Diagnostics d;
    auto r = types::add_source(*m, src, "test.pe", d);
    INFO(src);
    INFO(d.render());
    REQUIRE(r.ok);
    auto dims = interp::bind_dims(*m, {});
    in = std::make_unique<interp::Interpreter>(m, dims);
    params = interp::init_params(*m, dims, 1);
  }
  Value run(const std::string& entry, const Values& args) { return in->run(entry, args, params); }
  Tensor& param(const std::string& name) {
    int i = params.index(name);
    REQUIRE(i >= 0);
    return params.values[static_cast<size_t>(i)];
  }
  /// Arguments for `entry`: f32 tensor parameters get weights(), the others come from `given`
  /// in order.
  Values args_for(const std::string& entry, const Values& given) {
    const ir::FnDecl* f = m->fn(entry);
    REQUIRE(f);
    Values out;
    size_t next = 0;
    int salt = 0;
    for (const auto& p : f->params) {
      if (p.type->kind == ir::TypeKind::Tensor && p.type->elem == ir::Elem::F32) {
        out.push_back(V(weights(interp::concrete_shape(p.type, in->dims()), salt++)));
      } else {
        REQUIRE(next < given.size());
        out.push_back(given[next++]);
      }
    }
    REQUIRE(next == given.size());
    return out;
  }
};

inline void check_f32(const Tensor& got, const Shape& s, const std::vector<float>& want,
                      double tol = 1e-5) {
  INFO("got " << got.str());
  REQUIRE(got.defined());
  REQUIRE(got.dtype() == DType::F32);
  REQUIRE(got.shape() == s);
  REQUIRE(static_cast<size_t>(got.numel()) == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(got.f32()[i] - want[i]) <= tol * std::max(1.0, std::fabs(double(want[i]))));
  }
}

} // namespace pejit::interp::test
