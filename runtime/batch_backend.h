// The plan executor's batching backend (plan_executor.cpp's only user): runs a template's ops
// eagerly on all of a group's rows at once. A per-row tensor is a Value::batched_tensor with
// the rows first; its rules: elementwise ops align a batched operand's per-row dimensions with
// the other operand's trailing ones; `x @ W` with a per-row vector x is one GEMM; reductions,
// reshape and the last-axis ops (concat, split, slice, softmax, argmax, cross_entropy) shift by
// the row dimension; take from a shared table gathers all rows' ids at once. Anything else
// throws NotBatchable and the group runs row by row.
#pragma once

#include "src/interp/evaluator.h"
#include "src/interp/params.h"
#include "src/interp/recorded_op.h"
#include "src/interp/value.h"
#include "src/ops/emitter.h"

#include <string>
#include <vector>

namespace pejit::runtime::detail {

using interp::Value;
using interp::Values;

struct NotBatchable {
  std::string why;
};

// Runs ops eagerly, recording on a tape (when given); knows which values are batched.
class BatchBackend {
public:
  BatchBackend(const interp::Params& params, interp::Tape* tape, int32_t param_base,
               const interp::DimBindings& dims, int64_t rows)
      : params_(params), tape_(tape), param_base_(param_base), dims_(dims), rows_(rows) {}

  Value param(int i) const {
    return Value::tensor(params_.values[static_cast<size_t>(i)], tape_ ? param_base_ + i : -1);
  }

  Value op(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
           Values* multi = nullptr) {
    bool any = false;
    for (size_t i = 0; i < n; ++i)
      any = any || args[i].batched();
    if (!any)
      return run(id, attr, args, n, s, false, multi);
    using ops::OpId;
    switch (id) {
    case OpId::Add:
    case OpId::Sub:
    case OpId::Mul:
    case OpId::Div:
    case OpId::Lt:
    case OpId::Le:
    case OpId::Gt:
    case OpId::Ge:
    case OpId::Eq:
    case OpId::Ne: {
      Value a[2] = {args[0], args[1]};
      size_t ra = per_row_rank(a[0]), rb = per_row_rank(a[1]);
      size_t r = std::max(ra, rb);
      for (auto& v : a)
        if (v.batched() && per_row_rank(v) < r)
          v = expand(v, r, s);
      return run(id, attr, a, 2, s, true, multi);
    }
    case OpId::Neg:
    case OpId::Exp:
    case OpId::Log:
    case OpId::Tanh:
    case OpId::Sigmoid:
    case OpId::Relu:
    case OpId::ToF32:
    case OpId::ToI32:
    case OpId::Softmax:
    case OpId::LogSoftmax:
    case OpId::Argmax:
    case OpId::Split:
    case OpId::Slice:
      return run(id, attr, args, n, s, true, multi);
    case OpId::Concat: {
      // Shared parts are broadcast to every row (an add of per-row zeros, so that their
      // gradients are summed over the rows).
      Values parts(args, args + n);
      for (auto& v : parts)
        if (!v.batched()) {
          const Tensor& t = v.as_tensor();
          Shape sh{rows_};
          for (auto d : t.shape().dims())
            sh.push_back(d);
          Value two[2] = {Value::batched_tensor(Tensor::zeros(t.dtype(), sh)), v};
          v = op(OpId::Add, {}, two, 2, s);
        }
      return run(id, attr, parts.data(), n, s, true, multi);
    }
    case OpId::MatMul:
      if (args[0].batched() && !args[1].batched() && args[0].as_tensor().rank() == 2 &&
          args[1].as_tensor().rank() == 2)
        return run(id, attr, args, n, s, true, multi);
      throw NotBatchable{"matmul other than per-row vector @ shared matrix"};
    case OpId::Sum:
    case OpId::Mean: {
      const Tensor& t = args[0].as_tensor();
      if (attr.ints.empty()) {
        if (t.rank() == 1)
          return id == OpId::Sum ? args[0] : args[0];
        Value flat = reshape(args[0], {rows_, t.numel() / std::max<int64_t>(rows_, 1)}, s);
        return run(id, ops::Attr{{1}}, &flat, 1, s, true, multi);
      }
      int64_t ax = attr.ints[0];
      int64_t r = static_cast<int64_t>(t.rank()) - 1;
      if (ax < 0)
        ax += r;
      return run(id, ops::Attr{{ax + 1}}, args, n, s, true, multi);
    }
    case OpId::Reshape: {
      ops::Attr a;
      a.ints.push_back(rows_);
      a.ints.insert(a.ints.end(), attr.ints.begin(), attr.ints.end());
      return run(id, a, args, n, s, true, multi);
    }
    case OpId::Take:
      if (!args[0].batched() && args[1].batched())
        return run(id, attr, args, n, s, true, multi);
      throw NotBatchable{"take from a per-row table"};
    case OpId::CrossEntropy:
      if (args[0].batched() && args[1].batched())
        return run(id, attr, args, n, s, true, multi);
      throw NotBatchable{"cross_entropy of shared logits or labels"};
    default:
      throw NotBatchable{std::string("no batching rule for ") + ops::op_name(id)};
    }
  }

  std::optional<Value> call(const ir::FnDecl&, int, const Values&, const Span&) {
    return std::nullopt; // template bodies are inlined
  }

  Value sum_list(const Value& xs, const ir::Type& type, const Span& s) {
    return interp::sum_left_to_right(*this, xs, type, dims_, s);
  }

  Value to_int(const Value& v, const Span& s) {
    if (v.batched())
      throw NotBatchable{"to_int of a per-row value (" + s.str() + ")"};
    const Tensor& t = v.as_tensor();
    return Value::integer(t.dtype() == DType::I32 ? t.item_i32()
                                                  : static_cast<int64_t>(t.item_f32()));
  }
  Value to_bool(const Value& v, const Span& s) {
    if (v.batched())
      throw NotBatchable{"to_bool of a per-row value (" + s.str() + ")"};
    const Tensor& t = v.as_tensor();
    return Value::boolean(t.dtype() == DType::I32 ? t.item_i32() != 0 : t.item_f32() != 0.0f);
  }

private:
  const interp::Params& params_;
  interp::Tape* tape_;
  int32_t param_base_;
  const interp::DimBindings& dims_;
  int64_t rows_;
  interp::RecordedOp op_;

  static size_t per_row_rank(const Value& v) {
    size_t r = v.as_tensor().rank();
    return v.batched() ? r - 1 : r;
  }

  Value reshape(const Value& v, std::vector<int64_t> dims, const Span& s) {
    return run(ops::OpId::Reshape, ops::Attr{std::move(dims)}, &v, 1, s, true, nullptr);
  }

  // [rows, d...] -> [rows, 1, ..., 1, d...] with per-row rank r.
  Value expand(const Value& v, size_t r, const Span& s) {
    const Tensor& t = v.as_tensor();
    std::vector<int64_t> dims{t.dim(0)};
    for (size_t k = per_row_rank(v); k < r; ++k)
      dims.push_back(1);
    for (size_t k = 1; k < t.rank(); ++k)
      dims.push_back(t.shape()[k]);
    return reshape(v, dims, s);
  }

  Value run(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
            bool batched, Values* multi) {
    return op_.run(tape_, id, attr, args, n, s, batched, multi);
  }
};
static_assert(interp::EvaluatorBackend<BatchBackend>);

} // namespace pejit::runtime::detail
