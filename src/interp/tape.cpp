// The reverse sweep of the generic path. The eager emitter computes each gradient-rule step
// at once on reference kernels; handles index a per-record table of tensors. Deferred weight
// gradients: for y = a @ W with a 1-D and W a parameter, the rule's MatMulGradB(gy, a, W) is
// not computed as an outer product; (a, gy) rows are kept and summed as one GEMM
// A^T @ GY at the end of the sweep (the same sum, in one pass over W's gradient).
#include "src/interp/tape.h"

#include "src/ops/emitter.h"
#include "src/util/check.h"

#include <cstring>

namespace pejit::interp {

namespace k = kernels;
using ops::GradOp;
using ops::Handle;
using ops::OpId;

Tensor ParamGrad::to_dense(const Shape& shape) const {
  Tensor out = dense.defined() ? dense.clone() : Tensor::zeros(DType::F32, shape);
  for (const auto& s : sparse)
    k::add_rows_inplace(out, s);
  return out;
}

void Tape::reset(std::span<const Tensor> params) {
  vals_.assign(params.begin(), params.end());
  needs_.assign(params.size(), 1);
  recs_.clear();
  ids_.clear();
  nparams_ = params.size();
}

void Tape::record(OpId op, const ops::Attr& attr, std::span<const int32_t> in_ids,
                  std::span<const Tensor> in_vals, std::span<const Tensor> outs, int32_t* out_ids) {
  Rec r{op, attr, static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(in_ids.size()), 0, 0};
  for (size_t i = 0; i < in_ids.size(); ++i) {
    int32_t id = in_ids[i];
    if (id < 0) {
      id = static_cast<int32_t>(vals_.size());
      vals_.push_back(in_vals[i]);
      needs_.push_back(0);
    }
    ids_.push_back(id);
  }
  r.out_begin = static_cast<uint32_t>(ids_.size());
  r.out_count = static_cast<uint32_t>(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    int32_t id = static_cast<int32_t>(vals_.size());
    vals_.push_back(outs[i]);
    needs_.push_back(outs[i].dtype() == DType::F32 ? 1 : 0);
    ids_.push_back(id);
    out_ids[i] = id;
  }
  recs_.push_back(std::move(r));
}

namespace {

// The eager emitter: computes each requested op at once.
class EagerEmitter final : public ops::Emitter {
public:
  struct H {
    Tensor t;
    int32_t tape_id = -1;
    int sparse = -1;   ///< index into sparse_ (a row-sparse gradient)
    int deferred = -1; ///< index into deferred_ (a deferred weight gradient)
  };
  struct Deferred {
    Tensor a, gy; ///< 1-D rows of A and GY
  };

  explicit EagerEmitter(size_t nparams) : nparams_(nparams) {}

  void clear() {
    hs_.clear();
    sparse_.clear();
    deferred_.clear();
  }
  Handle add(Tensor t, int32_t tape_id = -1) {
    hs_.push_back(H{std::move(t), tape_id, -1, -1});
    return static_cast<Handle>(hs_.size() - 1);
  }
  const H& get(Handle h) const { return hs_[static_cast<size_t>(h)]; }
  const k::RowSparse& sparse(int i) const { return sparse_[static_cast<size_t>(i)]; }
  const Deferred& deferred(int i) const { return deferred_[static_cast<size_t>(i)]; }

  Handle op(OpId id, std::span<const Handle> in, const ops::Attr& attr) override {
    ins_.clear();
    for (Handle h : in)
      ins_.push_back(dense(h));
    outs_.clear();
    ops::op_def(id).eval(ins_, attr, outs_);
    return add(std::move(outs_[0]));
  }

  Handle scalar(float v) override { return add(Tensor::scalar_f32(v)); }

  std::vector<int64_t> shape(Handle h) override {
    const H& x = get(h);
    if (x.sparse >= 0) {
      const auto& s = sparse_[static_cast<size_t>(x.sparse)];
      std::vector<int64_t> d{s.num_rows};
      for (size_t i = 1; i < s.rows.rank(); ++i)
        d.push_back(s.rows.shape()[i]);
      return d;
    }
    auto d = x.t.shape().dims();
    return {d.begin(), d.end()};
  }

  Handle grad_op(GradOp g, std::span<const Handle> in, const ops::Attr& attr) override {
    // Kept sparse: take's gradient. Deferred: the weight gradient of a vector-matrix product
    // with a parameter (summed over the whole batch in one GEMM at the end of the sweep).
    if (g == GradOp::MatMulGradB) {
      const H& b = get(in[2]);
      const Tensor& a = dense(in[1]);
      if (a.rank() == 1 && b.tape_id >= 0 && static_cast<size_t>(b.tape_id) < nparams_ &&
          b.t.rank() == 2) {
        deferred_.push_back({a, dense(in[0])});
        hs_.push_back(H{Tensor(), -1, -1, static_cast<int>(deferred_.size() - 1)});
        return static_cast<Handle>(hs_.size() - 1);
      }
    }
    if (g == GradOp::TakeGrad) {
      const Tensor& table = get(in[2]).t;
      sparse_.push_back(k::take_backward(dense(in[0]), dense(in[1]), table.shape()));
      hs_.push_back(H{Tensor(), -1, static_cast<int>(sparse_.size() - 1), -1});
      return static_cast<Handle>(hs_.size() - 1);
    }
    ins_.clear();
    for (Handle h : in)
      ins_.push_back(dense(h));
    return add(ops::eval_grad_op(g, ins_, attr));
  }

  // A dense view of a handle (materializes sparse or deferred ones when an op needs them).
  const Tensor& dense(Handle h) {
    H& x = hs_[static_cast<size_t>(h)];
    if (x.t.defined())
      return x.t;
    if (x.sparse >= 0)
      x.t = sparse_[static_cast<size_t>(x.sparse)].to_dense();
    else if (x.deferred >= 0) {
      const auto& d = deferred_[static_cast<size_t>(x.deferred)];
      Tensor like = Tensor::empty(DType::F32, {d.a.dim(0), d.gy.dim(-1)});
      Tensor in[3] = {d.gy, d.a, like};
      x.t = ops::eval_grad_op(GradOp::MatMulGradB, in, {});
    }
    return x.t;
  }

private:
  size_t nparams_;
  std::vector<H> hs_;
  std::vector<k::RowSparse> sparse_;
  std::vector<Deferred> deferred_;
  std::vector<Tensor> ins_, outs_;
};

void accumulate(Tensor& acc, const Tensor& g) {
  if (!acc.defined())
    acc = g;
  else
    k::add_inplace(acc, g);
}

} // namespace

std::vector<ParamGrad> Tape::backward(int32_t loss_id) {
  if (loss_id < 0)
    return std::vector<ParamGrad>(nparams_); // no parameter reaches the loss
  PEJIT_CHECK(static_cast<size_t>(loss_id) < vals_.size()) << "bad loss id";
  std::pair<int32_t, Tensor> seed{loss_id,
                                  Tensor::full(vals_[static_cast<size_t>(loss_id)].shape(), 1.0f)};
  return backward(std::span<const std::pair<int32_t, Tensor>>(&seed, 1));
}

std::vector<ParamGrad> Tape::backward(std::span<const std::pair<int32_t, Tensor>> seeds) {
  ops::register_gradients();
  ops::register_kernels();
  std::vector<ParamGrad> out(nparams_);
  std::vector<Tensor> grads(vals_.size());
  for (const auto& [id, g] : seeds) {
    if (id < 0)
      continue;
    PEJIT_CHECK(static_cast<size_t>(id) < vals_.size()) << "bad seed id";
    PEJIT_CHECK(g.shape() == vals_[static_cast<size_t>(id)].shape()) << "seed shape mismatch";
    accumulate(grads[static_cast<size_t>(id)], g);
  }

  // Deferred weight-gradient rows per parameter.
  std::vector<std::vector<std::pair<Tensor, Tensor>>> deferred(nparams_);

  EagerEmitter em(nparams_);
  std::vector<Handle> in_h, out_h, gout_h, gin;
  for (size_t ri = recs_.size(); ri-- > 0;) {
    const Rec& r = recs_[ri];
    bool any = false;
    for (uint32_t j = 0; j < r.out_count; ++j)
      any = any || grads[static_cast<size_t>(ids_[r.out_begin + j])].defined();
    if (!any)
      continue;
    bool wanted = false;
    for (uint32_t j = 0; j < r.in_count; ++j)
      wanted = wanted || needs_[ids_[r.in_begin + j]];
    if (!wanted)
      continue;

    em.clear();
    in_h.clear();
    out_h.clear();
    gout_h.clear();
    for (uint32_t j = 0; j < r.in_count; ++j) {
      int32_t id = ids_[r.in_begin + j];
      in_h.push_back(em.add(vals_[static_cast<size_t>(id)], id));
    }
    for (uint32_t j = 0; j < r.out_count; ++j) {
      int32_t id = ids_[r.out_begin + j];
      out_h.push_back(em.add(vals_[static_cast<size_t>(id)], id));
      const Tensor& g = grads[static_cast<size_t>(id)];
      gout_h.push_back(g.defined() ? em.add(g) : -1);
    }
    // A multi-output op whose other outputs have no gradient: rules see -1 there.
    gin.clear();
    ops::op_def(r.op).grad(em, in_h, out_h, gout_h, r.attr, gin);
    PEJIT_CHECK(gin.size() == r.in_count)
        << "gradient rule of " << ops::op_name(r.op) << " returned " << gin.size() << " gradients";
    for (uint32_t j = 0; j < r.in_count; ++j) {
      int32_t id = ids_[r.in_begin + j];
      if (gin[j] < 0 || !needs_[static_cast<size_t>(id)])
        continue;
      const auto& h = em.get(gin[j]);
      bool is_param = static_cast<size_t>(id) < nparams_;
      if (h.sparse >= 0 && is_param) {
        out[static_cast<size_t>(id)].sparse.push_back(em.sparse(h.sparse));
      } else if (h.deferred >= 0 && is_param) {
        const auto& d = em.deferred(h.deferred);
        deferred[static_cast<size_t>(id)].emplace_back(d.a, d.gy);
      } else {
        accumulate(grads[static_cast<size_t>(id)], em.dense(gin[j]));
      }
    }
    // Free what no earlier record can need: this record's outputs' gradients.
    for (uint32_t j = 0; j < r.out_count; ++j)
      grads[static_cast<size_t>(ids_[r.out_begin + j])] = Tensor();
  }

  for (size_t p = 0; p < nparams_; ++p) {
    ParamGrad& pg = out[p];
    if (grads[p].defined())
      pg.dense = grads[p];
    auto& rows = deferred[p];
    if (rows.empty())
      continue;
    // One GEMM: dW[k, n] += A^T @ GY with A [r, k], GY [r, n].
    int64_t kk = rows[0].first.numel(), n = rows[0].second.numel();
    int64_t m = static_cast<int64_t>(rows.size());
    Tensor A = Tensor::empty(DType::F32, {m, kk});
    Tensor GY = Tensor::empty(DType::F32, {m, n});
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(A.f32() + i * kk, rows[static_cast<size_t>(i)].first.f32(), sizeof(float) * kk);
      std::memcpy(GY.f32() + i * n, rows[static_cast<size_t>(i)].second.f32(), sizeof(float) * n);
    }
    if (!pg.dense.defined()) {
      pg.dense = Tensor::empty(DType::F32, {kk, n});
      k::sgemm(true, false, kk, n, m, 1.0f, A.f32(), kk, GY.f32(), n, 0.0f, pg.dense.f32(), n);
    } else {
      if (!pg.dense.unique())
        pg.dense = pg.dense.clone();
      k::sgemm(true, false, kk, n, m, 1.0f, A.f32(), kk, GY.f32(), n, 1.0f, pg.dense.f32(), n);
    }
  }
  return out;
}

} // namespace pejit::interp
