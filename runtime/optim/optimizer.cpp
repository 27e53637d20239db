// Optimizer: validation and sorting of each parameter's row-sparse gradient (index), optional
// global-norm clipping, then the in-place updates of every parameter as one list of blocks
// (one fork-join on the workers), each visiting every element, every row (a dense part and
// touched rows) or only the touched rows (sparse-only) and summing the touched rows it needs.
// Dense and sparse-only paths share the per-element rule (update_span), which is what makes a
// sparse step bit-identical to the step of its to_dense() for SGD and Adagrad.
#include "runtime/optim/optimizer.h"

#include "runtime/parallel.h"
#include "src/util/check.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace pejit::optim {

namespace {

constexpr double kTwo24 = 16777216.0;

Tensor encode_count(int64_t t) {
  float hi = static_cast<float>(static_cast<double>(t / (int64_t{1} << 24)));
  float lo = static_cast<float>(static_cast<double>(t % (int64_t{1} << 24)));
  const float v[2] = {hi, lo};
  return Tensor::from_f32(Shape{2}, v);
}

int64_t decode_count(const Tensor& x, const std::string& name) {
  if (!x.defined() || x.dtype() != DType::F32 || x.shape() != Shape{2})
    throw Error("Optimizer::load_state: " + name + " must be f32 [2]");
  double hi = x.f32()[0], lo = x.f32()[1];
  if (!(hi >= 0 && hi < kTwo24 && lo >= 0 && lo < kTwo24) || hi != std::floor(hi) ||
      lo != std::floor(lo))
    throw Error("Optimizer::load_state: " + name + " is not a step count");
  return static_cast<int64_t>(hi) * (int64_t{1} << 24) + static_cast<int64_t>(lo);
}

/// Rows and elements per row of a parameter (a scalar is one row of one element).
std::pair<int64_t, int64_t> row_split(const Tensor& v) {
  if (v.rank() == 0)
    return {1, 1};
  int64_t rows = v.dim(0);
  return {rows, rows == 0 ? 0 : v.numel() / rows};
}

void check_finite_nonneg(float x, const char* what) {
  if (!(x >= 0.0f) || !std::isfinite(x))
    throw Error(std::string("OptimizerOptions: ") + what + " must be finite and >= 0, got " +
                std::to_string(x));
}

/// The least work of a block of the update (about flops per element: a few multiplies, a
/// square root and a division).
constexpr int64_t kElemCost = 8;

} // namespace

// Updates n elements of p (and the state a, b) from gradient g, after clipping (coef) and
// weight decay. The one place where the update rules are written. The arrays never overlap
// (restrict) and this file is built with -O3 -fno-math-errno, so the loops vectorize: the
// lanes compute what the scalar loop would, rounding included (IEEE sqrt and division).
void Optimizer::update_span(const Rule& r, float* __restrict p, const float* __restrict g,
                            float* __restrict a, float* __restrict b, int64_t n) {
  const bool plain = r.coef == 1.0f && r.wd == 0.0f; // the common case, without the extra terms
  auto grad = [&](int64_t k) {
    float gi = g[k];
    if (r.coef != 1.0f)
      gi *= r.coef;
    if (r.wd != 0.0f)
      gi += r.wd * p[k];
    return gi;
  };
  switch (r.kind) {
  case Kind::Sgd:
    for (int64_t k = 0; k < n; ++k)
      p[k] -= r.lr * grad(k);
    break;
  case Kind::Adagrad: {
    auto step = [&](int64_t k, float gi) {
      float s = a[k] + gi * gi;
      a[k] = s;
      p[k] -= r.lr * gi / (std::sqrt(s) + r.eps);
    };
    if (plain)
      for (int64_t k = 0; k < n; ++k)
        step(k, g[k]);
    else
      for (int64_t k = 0; k < n; ++k)
        step(k, grad(k));
    break;
  }
  case Kind::Adam:
    for (int64_t k = 0; k < n; ++k) {
      float gi = grad(k);
      float m = r.b1 * a[k] + r.one_minus_b1 * gi;
      float v = r.b2 * b[k] + r.one_minus_b2 * gi * gi;
      a[k] = m;
      b[k] = v;
      p[k] -= r.step_size * m / (std::sqrt(v) / r.bc2_sqrt + r.eps);
    }
    break;
  }
}

Kind parse_kind(std::string_view name) {
  if (name == "sgd")
    return Kind::Sgd;
  if (name == "adagrad")
    return Kind::Adagrad;
  if (name == "adam")
    return Kind::Adam;
  throw Error("unknown optimizer '" + std::string(name) + "' (expected sgd, adagrad or adam)");
}

const char* kind_name(Kind k) {
  switch (k) {
  case Kind::Sgd:
    return "sgd";
  case Kind::Adagrad:
    return "adagrad";
  case Kind::Adam:
    return "adam";
  }
  return "?";
}

Optimizer::Optimizer(OptimizerOptions o) : opts_(o) {
  check_finite_nonneg(o.lr, "lr");
  check_finite_nonneg(o.weight_decay, "weight_decay");
  check_finite_nonneg(o.clip_norm, "clip_norm");
  check_finite_nonneg(o.adagrad_eps, "adagrad_eps");
  check_finite_nonneg(o.adagrad_init, "adagrad_init");
  check_finite_nonneg(o.adam_eps, "adam_eps");
  if (!(o.beta1 >= 0.0f && o.beta1 < 1.0f) || !(o.beta2 >= 0.0f && o.beta2 < 1.0f))
    throw Error("OptimizerOptions: beta1 and beta2 must lie in [0, 1)");
  for (const auto& [n, v] : o.param_lr)
    check_finite_nonneg(v, ("param_lr of " + n).c_str());
  for (const auto& [n, v] : o.param_weight_decay)
    check_finite_nonneg(v, ("param_weight_decay of " + n).c_str());
}

void Optimizer::set_param_options(std::map<std::string, float> lr,
                                  std::map<std::string, float> wd) {
  for (const auto& [n, v] : lr)
    check_finite_nonneg(v, ("param_lr of " + n).c_str());
  for (const auto& [n, v] : wd)
    check_finite_nonneg(v, ("param_weight_decay of " + n).c_str());
  opts_.param_lr = std::move(lr);
  opts_.param_weight_decay = std::move(wd);
}

void Optimizer::set_lr_scale(float scale) {
  check_finite_nonneg(scale, "lr scale");
  lr_scale_ = scale;
}

void Optimizer::bind(const interp::Params& params) {
  std::set<std::string> seen;
  for (const auto& n : params.names)
    if (!seen.insert(n).second)
      throw Error("Optimizer::step: duplicate parameter name '" + n + "'");
  bound_names_ = params.names;
  bound_.clear();
  for (const auto& n : params.names)
    bound_.push_back(&slots_[n]);
  work_.resize(params.names.size());
}

void Optimizer::index(size_t i, const Tensor& value, const interp::ParamGrad& g) {
  const std::string& name = bound_names_[i];
  Work& w = work_[i];
  w.active = !g.empty();
  w.g = &g;
  w.entries.clear();
  w.uniq.clear();
  w.starts.clear();
  if (!w.active)
    return;
  if (!value.defined() || value.dtype() != DType::F32)
    throw Error("Optimizer::step: parameter '" + name + "' must be a defined f32 tensor");
  if (g.dense.defined() && (g.dense.dtype() != DType::F32 || g.dense.shape() != value.shape()))
    throw Error("Optimizer::step: dense gradient " + g.dense.shape().str() + " of '" + name +
                "' does not match the parameter " + value.shape().str());
  auto [nrows, d] = row_split(value);
  w.nrows = nrows;
  w.row_elems = d;
  for (size_t part = 0; part < g.sparse.size(); ++part) {
    const kernels::RowSparse& s = g.sparse[part];
    bool ok = value.rank() >= 1 && s.num_rows == nrows && s.indices.defined() &&
              s.indices.dtype() == DType::I32 && s.indices.rank() == 1 && s.rows.defined() &&
              s.rows.dtype() == DType::F32 && s.rows.rank() == value.rank() &&
              s.rows.dim(0) == s.indices.numel();
    for (size_t k = 1; ok && k < value.rank(); ++k)
      ok = s.rows.shape()[k] == value.shape()[k];
    if (!ok)
      throw Error("Optimizer::step: row-sparse gradient of '" + name + "' (indices " +
                  s.indices.shape().str() + ", rows " + s.rows.shape().str() + ", num_rows " +
                  std::to_string(s.num_rows) + ") does not match the parameter " +
                  value.shape().str());
    const int32_t* ip = s.indices.i32();
    for (int64_t k = 0; k < s.indices.numel(); ++k) {
      if (ip[k] < 0 || ip[k] >= nrows)
        throw Error("Optimizer::step: row index " + std::to_string(ip[k]) + " of '" + name +
                    "' is outside [0, " + std::to_string(nrows) + ")");
      w.entries.push_back({ip[k], static_cast<int32_t>(part), k});
    }
  }
  // (index, part, pos) order: rows of one index are summed in to_dense()'s order.
  std::sort(w.entries.begin(), w.entries.end(), [](const Work::Entry& x, const Work::Entry& y) {
    if (x.idx != y.idx)
      return x.idx < y.idx;
    if (x.part != y.part)
      return x.part < y.part;
    return x.pos < y.pos;
  });
  for (size_t k = 0; k < w.entries.size(); ++k)
    if (k == 0 || w.entries[k].idx != w.entries[k - 1].idx) {
      w.uniq.push_back(w.entries[k].idx);
      w.starts.push_back(k);
    }
  w.starts.push_back(w.entries.size());
  w.rows.resize(w.uniq.size() * static_cast<size_t>(d));
  // A loaded state must fit its parameter; checked here so that nothing has been written yet.
  const Slot& slot = *bound_[i];
  if ((slot.a.defined() && slot.a.shape() != value.shape()) ||
      (slot.b.defined() && slot.b.shape() != value.shape()))
    throw Error("Optimizer::step: optimizer state of '" + name + "' has shape " +
                (slot.a.defined() ? slot.a : slot.b).shape().str() + " but the parameter is " +
                value.shape().str());
}

void Optimizer::sum_rows(Work& w, size_t j0, size_t j1) const {
  const int64_t d = w.row_elems;
  const float* dense = w.g->dense.defined() ? w.g->dense.f32() : nullptr;
  for (size_t j = j0; j < j1; ++j) {
    float* acc = w.rows.data() + j * static_cast<size_t>(d);
    if (dense)
      std::copy_n(dense + w.uniq[j] * d, d, acc);
    else
      std::fill_n(acc, d, 0.0f);
    for (size_t k = w.starts[j]; k < w.starts[j + 1]; ++k) {
      const Work::Entry& e = w.entries[k];
      const float* src = w.g->sparse[static_cast<size_t>(e.part)].rows.f32() + e.pos * d;
      for (int64_t c = 0; c < d; ++c)
        acc[c] += src[c];
    }
  }
}

double Optimizer::squared_norm(size_t i, const interp::ParamGrad& g) const {
  const Work& w = work_[i];
  double sum = 0.0;
  auto add = [&](const float* x, int64_t n) {
    for (int64_t k = 0; k < n; ++k)
      sum += static_cast<double>(x[k]) * x[k];
  };
  if (!g.dense.defined()) {
    add(w.rows.data(), static_cast<int64_t>(w.rows.size()));
    return sum;
  }
  auto [nrows, d] = row_split(g.dense);
  const float* dense = g.dense.f32();
  size_t j = 0;
  for (int64_t r = 0; r < nrows; ++r) {
    if (j < w.uniq.size() && w.uniq[j] == r)
      add(w.rows.data() + (j++) * static_cast<size_t>(d), d);
    else
      add(dense + r * d, d);
  }
  return sum;
}

void Optimizer::prepare(size_t i, Tensor& value, float coef) {
  Work& w = work_[i];
  Slot& slot = *bound_[i];
  if (!value.unique())
    value = value.clone();
  const std::string& name = bound_names_[i];
  auto lr_it = opts_.param_lr.find(name);
  auto wd_it = opts_.param_weight_decay.find(name);
  const float lr = (lr_it == opts_.param_lr.end() ? opts_.lr : lr_it->second) * lr_scale_;
  const float wd = wd_it == opts_.param_weight_decay.end() ? opts_.weight_decay : wd_it->second;
  Rule r;
  r.kind = opts_.kind;
  r.lr = lr;
  r.wd = wd;
  r.coef = coef;
  switch (opts_.kind) {
  case Kind::Sgd:
    break;
  case Kind::Adagrad:
    r.eps = opts_.adagrad_eps;
    if (!slot.a.defined())
      slot.a = Tensor::full(value.shape(), opts_.adagrad_init);
    break;
  case Kind::Adam: {
    r.eps = opts_.adam_eps;
    if (!slot.a.defined())
      slot.a = Tensor::zeros(DType::F32, value.shape());
    if (!slot.b.defined())
      slot.b = Tensor::zeros(DType::F32, value.shape());
    ++slot.t;
    double t = static_cast<double>(slot.t);
    double bc1 = 1.0 - std::pow(static_cast<double>(opts_.beta1), t);
    double bc2 = 1.0 - std::pow(static_cast<double>(opts_.beta2), t);
    r.b1 = opts_.beta1;
    r.b2 = opts_.beta2;
    r.one_minus_b1 = 1.0f - opts_.beta1;
    r.one_minus_b2 = 1.0f - opts_.beta2;
    r.step_size = static_cast<float>(static_cast<double>(lr) / bc1);
    r.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    break;
  }
  }
  // Copy-on-write for state that a state() snapshot still holds.
  if (slot.a.defined() && !slot.a.unique())
    slot.a = slot.a.clone();
  if (slot.b.defined() && !slot.b.unique())
    slot.b = slot.b.clone();
  w.rule = r;
  w.p = value.f32();
  w.a = slot.a.defined() ? slot.a.f32() : nullptr;
  w.b = slot.b.defined() ? slot.b.f32() : nullptr;
  w.visit = !w.g->dense.defined() ? Visit::Touched : w.uniq.empty() ? Visit::Elements : Visit::Rows;
}

void Optimizer::add_jobs(size_t i, bool sum, bool update, bool split) {
  const Work& w = work_[i];
  const int64_t d = w.row_elems;
  const int64_t touched = static_cast<int64_t>(w.uniq.size());
  // Per touched row, summing its gradient costs about a copy and an add per entry.
  const int64_t sum_cost =
      touched == 0 ? 0 : (1 + static_cast<int64_t>(w.entries.size()) / touched) * d;
  int64_t units = 0, cost = 0, align = 1;
  if (!update) { // the touched rows' sums alone
    units = touched;
    cost = sum_cost;
  } else if (w.visit == Visit::Elements) {
    units = w.nrows * d;
    cost = kElemCost;
    align = 64; // whole vectors of the update loop
  } else if (w.visit == Visit::Rows) {
    units = w.nrows;
    cost = kElemCost * d + (sum ? sum_cost * touched / std::max<int64_t>(1, w.nrows) : 0);
  } else {
    units = touched;
    cost = kElemCost * d + (sum ? sum_cost : 0);
  }
  if (units == 0)
    return;
  cost = std::max<int64_t>(1, cost);
  jobs_work_ += units * cost;
  // Blocks of the least work worth a hand-off, whatever the thread count: every element's
  // update (and every touched row's sum) is its own, so the blocks do not change the bits.
  int64_t step = units;
  if (split) {
    const int64_t least = (workers_->policy().min_block_work + cost - 1) / cost;
    step = std::min(units, (std::max<int64_t>(1, least) + align - 1) / align * align);
  }
  for (int64_t u = 0; u < units; u += step)
    jobs_.push_back(Job{static_cast<uint32_t>(i), sum, update, u, std::min(step, units - u)});
}

void Optimizer::run_job(const Job& j) {
  Work& w = work_[j.param];
  const int64_t d = w.row_elems;
  if (!j.update) {
    sum_rows(w, static_cast<size_t>(j.begin), static_cast<size_t>(j.begin + j.n));
    return;
  }
  const Rule& r = w.rule;
  auto at = [d](float* base, int64_t row) { return base ? base + row * d : nullptr; };
  switch (w.visit) {
  case Visit::Elements:
    update_span(r, w.p + j.begin, w.g->dense.f32() + j.begin, w.a ? w.a + j.begin : nullptr,
                w.b ? w.b + j.begin : nullptr, j.n);
    break;
  case Visit::Rows: {
    const float* dense = w.g->dense.f32();
    auto first = [&](int64_t row) {
      return static_cast<size_t>(std::lower_bound(w.uniq.begin(), w.uniq.end(), row) -
                                 w.uniq.begin());
    };
    size_t k = first(j.begin);
    if (j.sum)
      sum_rows(w, k, first(j.begin + j.n));
    for (int64_t row = j.begin; row < j.begin + j.n; ++row) {
      const float* gr = dense + row * d;
      if (k < w.uniq.size() && w.uniq[k] == row)
        gr = w.rows.data() + (k++) * static_cast<size_t>(d);
      update_span(r, w.p + row * d, gr, at(w.a, row), at(w.b, row), d);
    }
    break;
  }
  case Visit::Touched: {
    const auto k0 = static_cast<size_t>(j.begin), k1 = static_cast<size_t>(j.begin + j.n);
    if (j.sum)
      sum_rows(w, k0, k1);
    for (size_t k = k0; k < k1; ++k) {
      int64_t row = w.uniq[k];
      update_span(r, w.p + row * d, w.rows.data() + k * static_cast<size_t>(d), at(w.a, row),
                  at(w.b, row), d);
    }
    break;
  }
  }
}

void Optimizer::run_jobs() {
  const runtime::Workers* wk = workers_.get();
  // All the parameters' blocks in one fork-join; on the calling thread when one block or the
  // whole is too little to share.
  if (wk != nullptr && jobs_work_ >= 2 * wk->policy().min_block_work)
    wk->for_blocks(
        static_cast<int64_t>(jobs_.size()),
        [&](int64_t b) { run_job(jobs_[static_cast<size_t>(b)]); },
        runtime::SplitTimes::kOptimizerTag);
  else
    for (const Job& j : jobs_)
      run_job(j);
  jobs_.clear();
  jobs_work_ = 0;
}

void Optimizer::step(interp::Params& params, const std::vector<interp::ParamGrad>& grads) {
  size_t n = params.values.size();
  if (params.names.size() != n || grads.size() != n)
    throw Error("Optimizer::step: " + std::to_string(grads.size()) + " gradients for " +
                std::to_string(n) + " parameters (" + std::to_string(params.names.size()) +
                " names)");
  if (bound_names_ != params.names)
    bind(params);
  jobs_.clear();
  jobs_work_ = 0;
  for (size_t i = 0; i < n; ++i)
    index(i, params.values[i], grads[i]);
  const bool split = workers_ != nullptr && workers_->threads() > 1;

  // Clipping needs every touched row's sum before any update: those first, in a fork-join of
  // their own; the norm then sums on this thread in parameter order, as with one thread.
  // Without clipping, a block sums the touched rows it then updates.
  float coef = 1.0f;
  const bool clip = opts_.clip_norm > 0.0f;
  if (clip) {
    for (size_t i = 0; i < n; ++i)
      if (work_[i].active)
        add_jobs(i, true, false, split);
    run_jobs();
    double sq = 0.0;
    for (size_t i = 0; i < n; ++i)
      if (work_[i].active)
        sq += squared_norm(i, grads[i]);
    double c = static_cast<double>(opts_.clip_norm) / (std::sqrt(sq) + 1e-6);
    if (c < 1.0)
      coef = static_cast<float>(c);
  }
  for (size_t i = 0; i < n; ++i)
    if (work_[i].active) {
      prepare(i, params.values[i], coef);
      add_jobs(i, !clip, true, split);
    }
  run_jobs();
  ++steps_;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("steps", encode_count(steps_));
  for (const auto& [name, slot] : slots_) {
    if (opts_.kind == Kind::Adagrad && slot.a.defined()) {
      out.emplace_back("adagrad_sum." + name, slot.a);
    } else if (opts_.kind == Kind::Adam && slot.a.defined()) {
      out.emplace_back("adam_m." + name, slot.a);
      out.emplace_back("adam_v." + name, slot.b);
      out.emplace_back("adam_step." + name, encode_count(slot.t));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  return out;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::map<std::string, Slot> slots;
  int64_t steps = 0;
  std::set<std::string> has_step;
  for (const auto& [key, t] : state) {
    auto dot = key.find('.');
    std::string prefix = key.substr(0, dot);
    std::string name = dot == std::string::npos ? "" : key.substr(dot + 1);
    if (key == "steps") {
      steps = decode_count(t, key);
      continue;
    }
    bool known =
        !name.empty() && ((opts_.kind == Kind::Adagrad && prefix == "adagrad_sum") ||
                          (opts_.kind == Kind::Adam &&
                           (prefix == "adam_m" || prefix == "adam_v" || prefix == "adam_step")));
    if (!known)
      throw Error("Optimizer::load_state: '" + key + "' is not state of a " +
                  kind_name(opts_.kind) + " optimizer");
    Slot& s = slots[name];
    if (prefix == "adam_step") {
      s.t = decode_count(t, key);
      has_step.insert(name);
      continue;
    }
    if (!t.defined() || t.dtype() != DType::F32)
      throw Error("Optimizer::load_state: '" + key + "' must be a defined f32 tensor");
    Tensor& dst = prefix == "adam_v" ? s.b : s.a;
    if (dst.defined())
      throw Error("Optimizer::load_state: duplicate '" + key + "'");
    dst = t.clone();
  }
  for (const auto& [name, s] : slots) {
    bool ok = opts_.kind == Kind::Adagrad ? s.a.defined()
                                          : s.a.defined() && s.b.defined() &&
                                                has_step.count(name) && s.a.shape() == s.b.shape();
    if (!ok)
      throw Error("Optimizer::load_state: incomplete or inconsistent state for '" + name + "'");
  }
  slots_ = std::move(slots);
  steps_ = steps;
  bound_names_.clear(); // rebind to the new slots on the next step
  bound_.clear();
}

} // namespace pejit::optim
