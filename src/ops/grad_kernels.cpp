// Reference kernels of the gradient-only operations (ops::GradOp), dense: what the graph
// evaluator runs and what the eager emitter runs for every GradOp it does not keep sparse or
// deferred (take's row-sparse gradient, vector-matrix weight gradients).
#include "src/kernels/kernels.h"
#include "src/ops/emitter.h"
#include "src/tensor/tensor.h"
#include "src/util/check.h"

#include <cstring>

namespace pejit::ops {

namespace {

namespace k = kernels;

Shape keep_dim_1(const Shape& s, int axis) {
  Shape keep = s;
  if (axis < 0)
    axis += static_cast<int>(s.rank());
  keep[static_cast<size_t>(axis)] = 1;
  return keep;
}

// The eager emitter's matmul gradients (1-D and 2-D operands).
Tensor matmul_grad_a(const Tensor& gy, const Tensor& a, const Tensor& b) {
  if (a.rank() == 1 && b.rank() == 1)
    return k::binary(k::Binary::Mul, gy, b);
  Tensor out = Tensor::empty(DType::F32, a.shape());
  if (b.rank() == 1) { // y[m] = a[m,k] @ b[k]: da = outer(gy, b)
    int64_t m = a.dim(0), kk = a.dim(1);
    k::sgemm(false, false, m, kk, 1, 1.0f, gy.f32(), 1, b.f32(), kk, 0.0f, out.f32(), kk);
    return out;
  }
  int64_t kk = b.dim(0), n = b.dim(1), m = a.rank() == 1 ? 1 : a.dim(0);
  k::sgemm(false, true, m, kk, n, 1.0f, gy.f32(), n, b.f32(), n, 0.0f, out.f32(), kk);
  return out;
}

Tensor matmul_grad_b(const Tensor& gy, const Tensor& a, const Tensor& b) {
  if (a.rank() == 1 && b.rank() == 1)
    return k::binary(k::Binary::Mul, gy, a);
  Tensor out = Tensor::empty(DType::F32, b.shape());
  if (b.rank() == 1) { // y[m] = a[m,k] @ b[k]: db = a^T @ gy
    int64_t m = a.dim(0), kk = a.dim(1);
    k::sgemm(true, false, kk, 1, m, 1.0f, a.f32(), kk, gy.f32(), 1, 0.0f, out.f32(), 1);
    return out;
  }
  int64_t kk = b.dim(0), n = b.dim(1), m = a.rank() == 1 ? 1 : a.dim(0);
  k::sgemm(true, false, kk, n, m, 1.0f, a.f32(), kk, gy.f32(), n, 0.0f, out.f32(), n);
  return out;
}

} // namespace

Tensor eval_grad_op(GradOp g, std::span<const Tensor> in, const Attr& attr) {
  switch (g) {
  case GradOp::SigmoidBwd:
    return k::sigmoid_backward(in[0], in[1]);
  case GradOp::TanhBwd:
    return k::tanh_backward(in[0], in[1]);
  case GradOp::ReluBwd:
    return k::relu_backward(in[0], in[1]);
  case GradOp::SoftmaxBwd: { // y * (gy - sum(gy * y))
    Tensor s = k::sum_axis(k::binary(k::Binary::Mul, in[1], in[0]), -1);
    Tensor d = k::binary(k::Binary::Sub, in[1], s.reshaped(keep_dim_1(in[0].shape(), -1)));
    return k::binary(k::Binary::Mul, in[0], d);
  }
  case GradOp::LogSoftmaxBwd: { // gy - exp(y) * sum(gy)
    Tensor s = k::sum_axis(in[1], -1);
    Tensor p = k::unary(k::Unary::Exp, in[0]);
    return k::binary(k::Binary::Sub, in[1],
                     k::binary(k::Binary::Mul, p, s.reshaped(keep_dim_1(in[0].shape(), -1))));
  }
  case GradOp::CrossEntropyBwd:
    return k::cross_entropy_backward(in[0], in[1], in[2]);
  case GradOp::SumToShape:
    return in[0].shape() == in[1].shape() ? in[0] : k::sum_to_shape(in[0], in[1].shape());
  case GradOp::BroadcastTo:
    return k::broadcast_to(in[0], in[1].shape());
  case GradOp::UnsumAxis: {
    const Shape& like = in[1].shape();
    return k::broadcast_to(in[0].reshaped(keep_dim_1(like, static_cast<int>(attr.ints[0]))), like);
  }
  case GradOp::MatMulGradA:
    return matmul_grad_a(in[0], in[1], in[2]);
  case GradOp::MatMulGradB:
    return matmul_grad_b(in[0], in[1], in[2]);
  case GradOp::TakeGrad:
    return k::take_backward(in[0], in[1], in[2].shape()).to_dense();
  case GradOp::PadSlice: {
    const Tensor &gy = in[0], &x = in[1];
    Tensor out = Tensor::zeros(DType::F32, x.shape());
    int64_t w = x.dim(-1), gw = gy.dim(-1), start = attr.ints[0];
    int64_t rows = w == 0 ? 0 : x.numel() / w;
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out.f32() + r * w + start, gy.f32() + r * gw,
                  static_cast<size_t>(gw) * sizeof(float));
    return out;
  }
  case GradOp::ReshapeLike:
    return in[0].reshaped(in[1].shape());
  case GradOp::Count:
    break;
  }
  PEJIT_CHECK(false) << "unknown gradient op";
}

} // namespace pejit::ops
