// Every op's gradient rule, written once against ops::Emitter. The eager emitter runs these
// on the generic path; the specializer's graph emitter turns them into graph nodes.
#include "src/ops/emitter.h"

#include "src/util/check.h"

#include <mutex>

namespace pejit::ops {

namespace {

using In = std::span<const Handle>;
using G = std::vector<Handle>;

constexpr Handle kNone = -1;

void g_matmul(Emitter& e, In in, In, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::MatMulGradA, {gout[0], in[0], in[1]}),
         e.grad_op(GradOp::MatMulGradB, {gout[0], in[0], in[1]})};
}

void g_add(Emitter& e, In in, In, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::SumToShape, {gout[0], in[0]}),
         e.grad_op(GradOp::SumToShape, {gout[0], in[1]})};
}

void g_sub(Emitter& e, In in, In, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::SumToShape, {gout[0], in[0]}),
         e.grad_op(GradOp::SumToShape, {e.op(OpId::Neg, {gout[0]}), in[1]})};
}

void g_mul(Emitter& e, In in, In, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::SumToShape, {e.op(OpId::Mul, {gout[0], in[1]}), in[0]}),
         e.grad_op(GradOp::SumToShape, {e.op(OpId::Mul, {gout[0], in[0]}), in[1]})};
}

// y = a / b: da = gy / b, db = -gy * y / b.
void g_div(Emitter& e, In in, In out, In gout, const Attr&, G& gin) {
  Handle q = e.op(OpId::Div, {gout[0], in[1]});
  gin = {e.grad_op(GradOp::SumToShape, {q, in[0]}),
         e.grad_op(GradOp::SumToShape, {e.op(OpId::Neg, {e.op(OpId::Mul, {q, out[0]})}), in[1]})};
}

void g_neg(Emitter& e, In, In, In gout, const Attr&, G& gin) {
  gin = {e.op(OpId::Neg, {gout[0]})};
}
void g_exp(Emitter& e, In, In out, In gout, const Attr&, G& gin) {
  gin = {e.op(OpId::Mul, {gout[0], out[0]})};
}
void g_log(Emitter& e, In in, In, In gout, const Attr&, G& gin) {
  gin = {e.op(OpId::Div, {gout[0], in[0]})};
}
void g_tanh(Emitter& e, In, In out, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::TanhBwd, {out[0], gout[0]})};
}
void g_sigmoid(Emitter& e, In, In out, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::SigmoidBwd, {out[0], gout[0]})};
}
void g_relu(Emitter& e, In in, In, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::ReluBwd, {in[0], gout[0]})};
}
void g_none(Emitter&, In in, In, In, const Attr&, G& gin) {
  gin.assign(in.size(), kNone);
}
// to_f32 is the identity on f32 input; from i32 input nothing flows back (no gradient is
// wanted for integer tensors, so the emitters drop it).
void g_to_f32(Emitter&, In, In, In gout, const Attr&, G& gin) {
  gin = {gout[0]};
}

void g_sum(Emitter& e, In in, In, In gout, const Attr& a, G& gin) {
  if (a.ints.empty())
    gin = {e.grad_op(GradOp::BroadcastTo, {gout[0], in[0]})};
  else
    gin = {e.grad_op(GradOp::UnsumAxis, {gout[0], in[0]}, a)};
}

void g_mean(Emitter& e, In in, In, In gout, const Attr& a, G& gin) {
  auto s = e.shape(in[0]);
  int64_t n = 1;
  if (a.ints.empty()) {
    for (auto d : s)
      n *= d;
  } else {
    int64_t ax = a.ints[0] < 0 ? a.ints[0] + static_cast<int64_t>(s.size()) : a.ints[0];
    n = s[static_cast<size_t>(ax)];
  }
  Handle g = e.op(OpId::Div, {gout[0], e.scalar(static_cast<float>(n))});
  gin = {a.ints.empty() ? e.grad_op(GradOp::BroadcastTo, {g, in[0]})
                        : e.grad_op(GradOp::UnsumAxis, {g, in[0]}, a)};
}

void g_concat(Emitter& e, In in, In, In gout, const Attr&, G& gin) {
  gin.clear();
  int64_t start = 0;
  for (Handle x : in) {
    int64_t w = e.shape(x).back();
    gin.push_back(e.op(OpId::Slice, {gout[0]}, Attr{{start, start + w}}));
    start += w;
  }
}

void g_split(Emitter& e, In in, In out, In gout, const Attr&, G& gin) {
  std::vector<Handle> parts;
  for (size_t i = 0; i < gout.size(); ++i) {
    if (gout[i] != kNone) {
      parts.push_back(gout[i]);
    } else {
      auto s = e.shape(out[i]);
      parts.push_back(e.op(OpId::Zeros, {}, Attr{s}));
    }
  }
  gin = {e.op(OpId::Concat, parts, {})};
}

void g_slice(Emitter& e, In in, In, In gout, const Attr& a, G& gin) {
  gin = {e.grad_op(GradOp::PadSlice, {gout[0], in[0]}, a)};
}
void g_reshape(Emitter& e, In in, In, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::ReshapeLike, {gout[0], in[0]})};
}
void g_transpose(Emitter& e, In, In, In gout, const Attr&, G& gin) {
  gin = {e.op(OpId::Transpose, {gout[0]})};
}
void g_take(Emitter& e, In in, In, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::TakeGrad, {in[1], gout[0], in[0]}), kNone};
}
void g_softmax(Emitter& e, In, In out, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::SoftmaxBwd, {out[0], gout[0]})};
}
void g_log_softmax(Emitter& e, In, In out, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::LogSoftmaxBwd, {out[0], gout[0]})};
}
void g_cross_entropy(Emitter& e, In in, In, In gout, const Attr&, G& gin) {
  gin = {e.grad_op(GradOp::CrossEntropyBwd, {in[0], in[1], gout[0]}), kNone};
}
void g_full(Emitter& e, In, In, In gout, const Attr&, G& gin) {
  gin = {e.op(OpId::Sum, {gout[0]})};
}

// Inverted dropout is linear in x with a diagonal factor (0 or 1 / (1 - p)) that its key fixes:
// the gradient is dropout of gy under the same key and attributes, the mask recomputed from
// the counter rather than stored. Nothing flows to the key.
void g_dropout(Emitter& e, In in, In, In gout, const Attr& attr, G& gin) {
  gin = {gout[0] < 0 ? kNone : e.op(OpId::Dropout, {gout[0], in[1]}, attr), kNone};
}

} // namespace

const GradOpDef& grad_op_def(GradOp g) {
  static const GradOpDef defs[] = {
#define PEJIT_GRAD_OP(Id, nm, row, kernel, shape_only)                                             \
  GradOpDef{GradOp::Id, nm, RowRule::row, KernelClass::kernel, shape_only},
#include "src/ops/grad_ops.def"
#undef PEJIT_GRAD_OP
  };
  static_assert(sizeof(defs) / sizeof(defs[0]) == static_cast<size_t>(GradOp::Count));
  return defs[static_cast<size_t>(g)];
}

const char* grad_op_name(GradOp g) {
  return grad_op_def(g).name;
}

void register_gradients() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto set = [](OpId id, GradFn f) { op_def_mut(id).grad = f; };
    set(OpId::MatMul, g_matmul);
    set(OpId::Add, g_add);
    set(OpId::Sub, g_sub);
    set(OpId::Mul, g_mul);
    set(OpId::Div, g_div);
    set(OpId::Neg, g_neg);
    set(OpId::Exp, g_exp);
    set(OpId::Log, g_log);
    set(OpId::Tanh, g_tanh);
    set(OpId::Sigmoid, g_sigmoid);
    set(OpId::Relu, g_relu);
    set(OpId::ToF32, g_to_f32);
    for (OpId id :
         {OpId::Lt, OpId::Le, OpId::Gt, OpId::Ge, OpId::Eq, OpId::Ne, OpId::ToI32, OpId::Argmax,
          OpId::Zeros, OpId::Ones, OpId::Bernoulli, OpId::Uniform, OpId::Normal})
      set(id, g_none);
    set(OpId::Sum, g_sum);
    set(OpId::Mean, g_mean);
    set(OpId::Concat, g_concat);
    set(OpId::Split, g_split);
    set(OpId::Slice, g_slice);
    set(OpId::Reshape, g_reshape);
    set(OpId::Transpose, g_transpose);
    set(OpId::Take, g_take);
    set(OpId::Softmax, g_softmax);
    set(OpId::LogSoftmax, g_log_softmax);
    set(OpId::CrossEntropy, g_cross_entropy);
    set(OpId::Full, g_full);
    set(OpId::Dropout, g_dropout);
    for (size_t i = 0; i < static_cast<size_t>(OpId::Count); ++i)
      PEJIT_CHECK(op_def(static_cast<OpId>(i)).grad)
          << "no gradient rule for " << op_def(static_cast<OpId>(i)).name;
  });
}

} // namespace pejit::ops
