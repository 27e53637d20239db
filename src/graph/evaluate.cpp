// evaluate(): one pass in id order over the live nodes. Values of nodes no later node needs
// are released as soon as their last user has run, so peak memory follows the graph's width.
// Split results are each computed by running split's kernel and keeping one part.
#include "graph/evaluate.h"

#include "graph/boost_adaptor.h"
#include "kernels/kernels.h"
#include "ops/emitter.h"
#include "util/check.h"

#include <fmt/format.h>

#include <cstring>

namespace pejit::graph {

namespace {

namespace k = kernels;
using ops::GradOp;

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

Tensor eval_grad(GradOp g, std::span<const Tensor> in, const ops::Attr& attr) {
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

// Copies rows of `src` (first axis) to `out`: out[map[i]] (+)= src[i] or out[i] = src[map[i]].
Tensor eval_rows(const Node& n, const Tensor& src) {
  int64_t rows_in = src.dim(0);
  int64_t w = rows_in == 0 ? 0 : src.numel() / rows_in;
  auto bytes = static_cast<size_t>(w) * 4;
  if (n.kind == Kind::Gather) {
    Tensor out = Tensor::empty(src.dtype(), n.type.shape());
    auto* o = static_cast<char*>(out.raw());
    const auto* s = static_cast<const char*>(src.raw());
    for (size_t i = 0; i < n.index_map.size(); ++i)
      std::memcpy(o + i * bytes, s + static_cast<size_t>(n.index_map[i]) * bytes, bytes);
    return out;
  }
  Tensor out = Tensor::zeros(DType::F32, n.type.shape());
  float* o = out.f32();
  const float* s = src.f32();
  for (size_t i = 0; i < n.index_map.size(); ++i) {
    float* dst = o + static_cast<int64_t>(n.index_map[i]) * w;
    const float* row = s + static_cast<int64_t>(i) * w;
    for (int64_t j = 0; j < w; ++j)
      dst[j] += row[j];
  }
  return out;
}

} // namespace

std::vector<Tensor> evaluate(const Graph& g, std::span<const Tensor> inputs,
                             std::span<const NodeId> outputs) {
  ops::register_kernels();
  if (outputs.empty())
    return {};
  for (NodeId o : outputs)
    (void)g.node(o);
  std::vector<bool> need = live(g, outputs);
  // Remaining uses of each value: by live users, plus one per request as an output.
  std::vector<int32_t> uses(g.size(), 0);
  for (size_t i = 0; i < g.size(); ++i)
    if (need[i])
      for (NodeId o : g.nodes()[i].operands)
        ++uses[static_cast<size_t>(o)];
  for (NodeId o : outputs)
    ++uses[static_cast<size_t>(o)];

  std::vector<Tensor> val(g.size());
  std::vector<Tensor> in, out;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!need[i])
      continue;
    const Node& n = g.nodes()[i];
    in.clear();
    for (NodeId o : n.operands)
      in.push_back(val[static_cast<size_t>(o)]);
    Tensor& v = val[i];
    switch (n.kind) {
    case Kind::Input: {
      if (n.slot >= inputs.size() || !inputs[n.slot].defined())
        throw Error(
            fmt::format("evaluate: no tensor for input #{} ({} given)", n.slot, inputs.size()));
      const Tensor& t = inputs[n.slot];
      if (!(type_of(t) == n.type))
        throw Error(fmt::format("evaluate: input #{} is {}, the graph expects {}", n.slot,
                                type_of(t).str(), n.type.str()));
      v = t;
      break;
    }
    case Kind::Const:
      v = Tensor::full(n.type.shape(), n.value);
      break;
    case Kind::Op:
      out.clear();
      ops::op_def(n.op()).eval(in, n.attr, out);
      v = std::move(out[n.output_index]);
      break;
    case Kind::Grad:
      v = eval_grad(n.grad_op(), in, n.attr);
      break;
    case Kind::Gather:
    case Kind::Scatter:
      v = eval_rows(n, in[0]);
      break;
    case Kind::SumN:
      v = in[0].clone();
      for (size_t j = 1; j < in.size(); ++j)
        k::add_inplace(v, in[j]);
      break;
    }
    PEJIT_CHECK(type_of(v) == n.type)
        << "node %" << i << " computed " << type_of(v).str() << ", its type is " << n.type.str();
    in.clear();
    for (NodeId o : n.operands)
      if (--uses[static_cast<size_t>(o)] == 0)
        val[static_cast<size_t>(o)] = Tensor();
  }
  std::vector<Tensor> res;
  for (NodeId o : outputs)
    res.push_back(val[static_cast<size_t>(o)]);
  return res;
}

} // namespace pejit::graph
