// The generic path's AD tape and its reverse sweep. The forward pass records each op
// application whose inputs need gradients; backward() walks the records in reverse and runs
// each op's gradient rule (ops/grads.cpp) through an eager emitter, accumulating gradients.
// Two things keep it fast: the embedding gradient stays row-sparse (take's rule), and the
// weight gradients of vector-matrix products are deferred and merged into one GEMM per
// weight per backward pass instead of one outer product per node.
#pragma once

#include "src/kernels/kernels.h"
#include "src/ops/op.h"
#include "src/tensor/tensor.h"

#include <cstdint>
#include <vector>

namespace pejit::interp {

/// The gradient of one parameter: dense, row-sparse parts, or both (then summed).
struct ParamGrad {
  Tensor dense;                           ///< undefined when there is no dense part
  std::vector<kernels::RowSparse> sparse; ///< row-sparse parts (take), not coalesced
  bool empty() const { return !dense.defined() && sparse.empty(); }
  /// dense + all sparse parts as one dense tensor of `shape` (zeros if empty).
  Tensor to_dense(const Shape& shape) const;
};

class Tape {
public:
  /// Starts a new recording whose first ids are the parameters.
  void reset(std::span<const Tensor> params);
  size_t num_params() const { return nparams_; }

  /// Records `op(in) = out`; returns the ids of the outputs. `in_ids` are ids or -1 for
  /// constants (their values are kept too, as the gradient rules may need them).
  void record(ops::OpId op, const ops::Attr& attr, std::span<const int32_t> in_ids,
              std::span<const Tensor> in_vals, std::span<const Tensor> outs, int32_t* out_ids);

  /// Reverse sweep from `loss_id` (seed 1). Returns one gradient per parameter.
  std::vector<ParamGrad> backward(int32_t loss_id);
  /// Reverse sweep from several outputs, each seeded with its gradient.
  std::vector<ParamGrad> backward(std::span<const std::pair<int32_t, Tensor>> seeds);

  size_t size() const { return recs_.size(); }

private:
  struct Rec {
    ops::OpId op;
    ops::Attr attr;
    uint32_t in_begin, in_count, out_begin, out_count; ///< ranges in ids_
  };
  std::vector<Tensor> vals_;   ///< by id
  std::vector<uint8_t> needs_; ///< by id: gradient wanted
  std::vector<Rec> recs_;
  std::vector<int32_t> ids_; ///< inputs and outputs of the records
  size_t nparams_ = 0;
};

} // namespace pejit::interp
