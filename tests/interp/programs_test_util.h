// Helpers shared by the whole-program tests of the generic path (programs_test.cpp: programs
// and their gradients; evaluator_test.cpp: the evaluator's errors and reuse): a checked
// program with its interpreter and parameters, tensor and value literals, and the message of
// the pejit::Error a call throws.
#pragma once

#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "src/util/check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pejit::interp::programs_test {

inline Tensor F(const Shape& s, std::vector<float> v) {
  return Tensor::from_f32(s, v);
}
inline Value V(Tensor t) {
  return Value::tensor(std::move(t));
}

struct Prog {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  std::unique_ptr<interp::Interpreter> in;
  interp::Params params;

  explicit Prog(const std::string& src, interp::InterpreterOptions opt = {}) {
    Diagnostics d;
    auto r = types::add_source(*m, src, "test.pe", d);
    INFO(d.render());
    REQUIRE(r.ok);
    auto dims = interp::bind_dims(*m, {});
    in = std::make_unique<interp::Interpreter>(m, dims, opt);
    params = interp::init_params(*m, dims, 3);
  }
  Value run(const std::string& entry, const Values& args) { return in->run(entry, args, params); }
  Tensor& param(const std::string& name) {
    int i = params.index(name);
    REQUIRE(i >= 0);
    return params.values[static_cast<size_t>(i)];
  }
  void grad_ok(const std::string& entry, const Values& args) {
    auto g = in->value_and_grad(entry, args, params);
    for (size_t i = 0; i < g.grads.size(); ++i) {
      INFO("parameter " << params.names[i]);
      CHECK_FALSE(g.grads[i].empty());
    }
    auto rep = interp::check_grad(*in, entry, args, params);
    INFO(rep.message);
    CHECK(rep.ok);
    double biggest = 0;
    for (double x : rep.numeric)
      biggest = std::max(biggest, std::fabs(x));
    CHECK(biggest > 1e-2);
  }
};

/// Message of the pejit::Error that `f` throws ("" and a failed check if none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL_CHECK("no pejit::Error thrown");
  return "";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

} // namespace pejit::interp::programs_test
