// The per-op facts that fusion, constant folding and the profile read from the registry
// (src/ops/ops.def, src/ops/grad_ops.def): identities, linearity, kernel classes, and the
// gradient helpers' names that graph dumps and kernel keys print.
#include "src/ops/emitter.h"

#include <doctest/doctest.h>

#include <set>
#include <string>

namespace tests_ops_registry_facts_test {

using namespace pejit;
using ops::GradOp;
using ops::KernelClass;
using ops::OpId;

namespace {

std::set<std::string> ops_of_class(KernelClass k) {
  std::set<std::string> out;
  for (size_t i = 0; i < static_cast<size_t>(OpId::Count); ++i)
    if (ops::op_def(static_cast<OpId>(i)).kernel == k)
      out.insert(ops::op_name(static_cast<OpId>(i)));
  for (size_t i = 0; i < static_cast<size_t>(GradOp::Count); ++i)
    if (ops::grad_op_def(static_cast<GradOp>(i)).kernel == k)
      out.insert(ops::grad_op_name(static_cast<GradOp>(i)));
  return out;
}

} // namespace

TEST_SUITE("ops") {
  TEST_CASE("registry: identity elements that constant folding drops") {
    CHECK(ops::left_identity(OpId::Add) == 0.0f);
    CHECK(ops::right_identity(OpId::Add) == 0.0f);
    CHECK(ops::left_identity(OpId::Mul) == 1.0f);
    CHECK(ops::right_identity(OpId::Mul) == 1.0f);
    CHECK(!ops::left_identity(OpId::Sub));
    CHECK(ops::right_identity(OpId::Sub) == 0.0f);
    CHECK(!ops::left_identity(OpId::Div));
    CHECK(ops::right_identity(OpId::Div) == 1.0f);
    for (OpId id : {OpId::Lt, OpId::MatMul, OpId::Neg, OpId::Concat}) {
      CHECK(!ops::left_identity(id));
      CHECK(!ops::right_identity(id));
    }
    std::set<std::string> shape_only;
    for (size_t i = 0; i < static_cast<size_t>(GradOp::Count); ++i)
      if (ops::grad_op_def(static_cast<GradOp>(i)).shape_only)
        shape_only.insert(ops::grad_op_name(static_cast<GradOp>(i)));
    CHECK(shape_only == std::set<std::string>{"sum_to_shape", "broadcast_to", "reshape_like"});
  }

  TEST_CASE("registry: elementwise and linear ops") {
    std::set<std::string> linear;
    for (size_t i = 0; i < static_cast<size_t>(OpId::Count); ++i) {
      const ops::OpDef& d = ops::op_def(static_cast<OpId>(i));
      CAPTURE(d.name);
      CHECK(d.id == static_cast<OpId>(i));
      CHECK(d.elementwise == (d.row == ops::RowRule::Elementwise));
      CHECK(d.elementwise == (d.kernel == KernelClass::Elementwise));
      if (d.linear)
        linear.insert(d.name);
    }
    CHECK(linear == std::set<std::string>{"add", "sub", "neg"});
  }

  TEST_CASE("registry: kernel classes that fusion and the profile read") {
    // A GEMM may absorb a kernel of pure column moves as its prologue: these only.
    CHECK(ops_of_class(KernelClass::Layout) ==
          std::set<std::string>{"concat", "split", "slice", "reshape", "reshape_like"});
    CHECK(ops_of_class(KernelClass::Expand) == std::set<std::string>{"broadcast_to", "pad_slice"});
    CHECK(ops_of_class(KernelClass::Fill) == std::set<std::string>{"zeros", "ones", "full"});
    // The random ops too: a kernel of their own on every tier (never in a compiled run).
    CHECK(ops_of_class(KernelClass::Rearrange) ==
          std::set<std::string>{"take", "transpose", "take_grad", "dropout", "bernoulli", "uniform",
                                "normal"});
    CHECK(ops_of_class(KernelClass::GemmForward) == std::set<std::string>{"matmul"});
    CHECK(ops_of_class(KernelClass::GemmInputGrad) == std::set<std::string>{"matmul_grad_a"});
    CHECK(ops_of_class(KernelClass::GemmWeightGrad) == std::set<std::string>{"matmul_grad_b"});
    CHECK(ops_of_class(KernelClass::ReduceToShape) == std::set<std::string>{"sum_to_shape"});
  }

  TEST_CASE("registry: gradient helper names, in GradOp order") {
    const char* want[] = {"sigmoid_bwd",     "tanh_bwd",          "relu_bwd",      "softmax_bwd",
                          "log_softmax_bwd", "cross_entropy_bwd", "sum_to_shape",  "broadcast_to",
                          "unsum_axis",      "matmul_grad_a",     "matmul_grad_b", "take_grad",
                          "pad_slice",       "reshape_like"};
    REQUIRE(std::size(want) == static_cast<size_t>(GradOp::Count));
    for (size_t i = 0; i < std::size(want); ++i) {
      CHECK(std::string(ops::grad_op_name(static_cast<GradOp>(i))) == want[i]);
      CHECK(ops::grad_op_def(static_cast<GradOp>(i)).id == static_cast<GradOp>(i));
    }
    CHECK(ops::grad_op_name(GradOp::MatMulGradB) == std::string("matmul_grad_b"));
  }
}

} // namespace tests_ops_registry_facts_test
