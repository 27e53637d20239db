// evaluate(): one pass in id order over the live nodes. Values of nodes no later node needs
// are released as soon as their last user has run, so peak memory follows the graph's width.
// Split results are each computed by running split's kernel and keeping one part.
#include "src/graph/evaluate.h"

#include "src/graph/boost_adaptor.h"
#include "src/kernels/kernels.h"
#include "src/ops/emitter.h"
#include "src/util/check.h"

#include <fmt/format.h>

#include <cstring>

namespace pejit::graph {

namespace {

namespace k = kernels;
using ops::GradOp;

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
      v = ops::eval_grad_op(n.grad_op(), in, n.attr);
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
