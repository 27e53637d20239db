// The plan executor's batching backend (plan_executor.cpp's only user): runs a template's ops
// eagerly on all of a group's rows at once. A per-row tensor is a Value::batched_tensor with
// the rows first. Each op acts on the rows by its registry batching rule (ops::RowRule):
// elementwise ops align a batched operand's per-row dimensions with the other operand's
// trailing ones; `x @ W` with a per-row vector x is one GEMM; reductions and reshape shift by
// the row dimension; the last-axis ops act on each row; take from a shared table gathers all
// rows' ids at once. What ops::batched_row_class refuses (the template-graph runner's decision
// too) throws NotBatchable and the group runs row by row.
#pragma once

#include "src/interp/evaluator.h"
#include "src/interp/params.h"
#include "src/interp/recorded_op.h"
#include "src/interp/value.h"
#include "src/ops/batch_rules.h"

#include <array>
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
    using ops::RowRule;
    const RowRule rule = ops::op_def(id).row;
    if (rule == RowRule::None)
      throw NotBatchable{std::string("no batching rule for ") + ops::op_name(id)};
    refuse_unless_batchable(id, args, n);
    switch (rule) {
    case RowRule::Elementwise: {
      if (n != 2)
        return run(id, attr, args, n, s, true, multi);
      Value a[2] = {args[0], args[1]};
      size_t ra = per_row_rank(a[0]), rb = per_row_rank(a[1]);
      size_t r = std::max(ra, rb);
      for (auto& v : a)
        if (v.batched() && per_row_rank(v) < r)
          v = expand(v, r, s);
      return run(id, attr, a, 2, s, true, multi);
    }
    case RowRule::LastAxis: {
      bool shared = false;
      for (size_t i = 0; i < n; ++i)
        shared = shared || !args[i].batched();
      if (!shared)
        return run(id, attr, args, n, s, true, multi);
      // Shared parts (of a concat) are broadcast to every row (an add of per-row zeros, so
      // that their gradients are summed over the rows).
      Values parts(args, args + n);
      for (auto& v : parts)
        if (!v.batched())
          v = on_every_row(v, s);
      return run(id, attr, parts.data(), n, s, true, multi);
    }
    case RowRule::Loss: { // per-row logits and labels, or one of them shared by every row
      Values parts(args, args + n);
      for (auto& v : parts)
        if (!v.batched())
          v = on_every_row(v, s);
      return run(id, attr, parts.data(), n, s, true, multi);
    }
    case RowRule::Reduce: {
      const Tensor& t = args[0].as_tensor();
      if (attr.ints.empty()) {
        if (t.rank() == 1)
          return args[0]; // the sum or mean of one number per row
        Value flat = reshape(args[0], {rows_, t.numel() / std::max<int64_t>(rows_, 1)}, s);
        return run(id, ops::Attr{{1}}, &flat, 1, s, true, multi);
      }
      int64_t ax = attr.ints[0];
      int64_t r = static_cast<int64_t>(t.rank()) - 1;
      if (ax < 0)
        ax += r;
      return run(id, ops::Attr{{ax + 1}}, args, n, s, true, multi);
    }
    case RowRule::Reshape: {
      ops::Attr a;
      a.ints.push_back(rows_);
      a.ints.insert(a.ints.end(), attr.ints.begin(), attr.ints.end());
      return run(id, a, args, n, s, true, multi);
    }
    case RowRule::MatMul: // per-row vector @ shared matrix: one GEMM
    case RowRule::Take:   // shared table, per-row ids: one gather
    case RowRule::Random: // per-row keys: each row's own numbers
      return run(id, attr, args, n, s, true, multi);
    default: // the gradient helpers' rules: no registry op has one
      throw NotBatchable{std::string("no batching rule for ") + ops::op_name(id)};
    }
  }

  std::optional<Value> call(const ir::FnDecl&, int, const Values&, const Span&) {
    return std::nullopt; // template bodies are inlined
  }

  // A random template's key rows (its last argument) and its draws in evaluation order, as the
  // template tracer numbers them (interp/random.h).
  void set_random_key(Value key) {
    key_ = std::move(key);
    next_j_ = 0;
  }
  const interp::DimBindings& dims() const { return dims_; }

  Value random_key(const Span& s, int64_t& j) {
    if (key_.kind() == Value::Kind::None)
      throw NotBatchable{"a random op outside a random template (" + s.str() + ")"};
    j = next_j_++;
    return key_;
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
  Value key_;
  int64_t next_j_ = 0;

  // Throws the refusal of the rule GraphRunner's classification applies, if any.
  static void refuse_unless_batchable(ops::OpId id, const Value* args, size_t n) {
    constexpr size_t kInline = 8;
    std::array<ops::RowClass, kInline> cls_inline;
    std::array<size_t, kInline> rank_inline;
    std::vector<ops::RowClass> cls_heap;
    std::vector<size_t> rank_heap;
    ops::RowClass* cls = cls_inline.data();
    size_t* rank = rank_inline.data();
    if (n > kInline) {
      cls_heap.resize(n);
      rank_heap.resize(n);
      cls = cls_heap.data();
      rank = rank_heap.data();
    }
    for (size_t i = 0; i < n; ++i) {
      cls[i] = args[i].batched() ? ops::RowClass::Rows : ops::RowClass::Shared;
      rank[i] = per_row_rank(args[i]);
    }
    ops::RowRuleResult r = ops::batched_row_class(ops::RowNode::op(id), {cls, n}, {rank, n});
    if (!r.ok())
      throw NotBatchable{r.refusal};
  }

  // A shared value on every row: an add of per-row zeros, so that its gradient is summed over
  // the rows.
  Value on_every_row(const Value& v, const Span& s) {
    const Tensor& t = v.as_tensor();
    Shape sh{rows_};
    for (auto d : t.shape().dims())
      sh.push_back(d);
    Value two[2] = {Value::batched_tensor(Tensor::zeros(t.dtype(), sh)), v};
    return op(ops::OpId::Add, {}, two, 2, s);
  }

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
