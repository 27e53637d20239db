// The data-parallel gradient reduction (grad_reducer.h): one step's protocol, the same
// sequence of collectives on every rank whatever its step did (a failed step sends zeros).
#include "runtime/dist/grad_reducer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace pejit::runtime::dist {

namespace {

enum class Kind : uint8_t { Unknown, Dense, Sparse };

// Per parameter and rank, in the step's all-gather: which parts its gradient had.
constexpr uint8_t kHasDense = 1, kHasSparse = 2;

struct Slot {
  Kind kind = Kind::Unknown;
  Shape shape;
  int64_t numel = 0, padded = 0;
  std::vector<float> send, block, result;
  int rs = -1, ag = -1;
  bool announced = false; // this step: `send` holds this rank's gradient
  uint8_t parts = 0;      // kHasDense | kHasSparse of this rank's gradient this step
};

uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

template <class T> void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Reads what put() wrote; a short buffer is an error (the ranks disagree on the protocol).
struct Reader {
  const std::string& s;
  size_t at = 0;
  template <class T> T get() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  void bytes(void* dst, size_t n) {
    if (s.size() - at < n)
      throw JobError("data-parallel step: a rank sent a malformed message (" +
                     std::to_string(s.size()) + " bytes)");
    std::memcpy(dst, s.data() + at, n);
    at += n;
  }
};

} // namespace

struct GradReducer::Impl {
  Comm& comm;
  std::unique_ptr<Comm::Stream> rs_stream, ag_stream;
  std::vector<Slot> slots;
  uint64_t layout = 0;
  std::vector<bool> skip;
  std::vector<size_t> eager; // dense parameters taking part, in the reduction's fixed order
  size_t next_rs = 0, next_ag = 0;
  Stats stats;

  explicit Impl(Comm& c) : comm(c) {}

  // Last declared first: a model's output layer, whose weight gradient is ready first.
  std::vector<size_t> order() const {
    std::vector<size_t> o(slots.size());
    for (size_t i = 0; i < o.size(); ++i)
      o[i] = o.size() - 1 - i;
    return o;
  }

  void fill(Slot& s, const interp::ParamGrad& g) {
    s.parts = static_cast<uint8_t>((g.dense.defined() ? kHasDense : 0) |
                                   (g.sparse.empty() ? 0 : kHasSparse));
    std::fill(s.send.begin(), s.send.end(), 0.0f);
    if (g.empty())
      return;
    if (g.sparse.empty()) {
      std::memcpy(s.send.data(), g.dense.f32(), static_cast<size_t>(s.numel) * sizeof(float));
    } else {
      Tensor d = g.to_dense(s.shape);
      std::memcpy(s.send.data(), d.f32(), static_cast<size_t>(s.numel) * sizeof(float));
    }
  }

  void issue_rs(Slot& s) {
    s.rs = rs_stream->reduce_scatter(s.send.data(), s.block.data(), s.padded);
    stats.dense_bytes += s.padded * static_cast<int64_t>(sizeof(float));
    stats.reductions += 1;
  }
  void issue_ag(Slot& s) {
    s.ag = ag_stream->allgather(s.block.data(), s.result.data(), s.padded / comm.size());
  }

  // Starts the reduce-scatters announced so far, in order, and the all-gathers of those done.
  void pump(bool during_backward) {
    while (next_rs < eager.size() && slots[eager[next_rs]].announced) {
      issue_rs(slots[eager[next_rs]]);
      stats.overlapped += during_backward ? 1 : 0;
      ++next_rs;
    }
    while (next_ag < next_rs && rs_stream->test(slots[eager[next_ag]].rs)) {
      issue_ag(slots[eager[next_ag]]);
      ++next_ag;
    }
  }

  // Completes every reduction issued: the remaining all-gathers in order, then all waited.
  void drain(const std::vector<size_t>& list, size_t issued, size_t& gathered) {
    for (; gathered < issued; ++gathered) {
      Slot& s = slots[list[gathered]];
      rs_stream->wait(s.rs);
      issue_ag(s);
    }
    for (size_t k = 0; k < issued; ++k)
      ag_stream->wait(slots[list[k]].ag);
  }

  // A dense reduction of `list` now (issued in order, then completed).
  void reduce_now(const std::vector<size_t>& list) {
    for (size_t p : list)
      issue_rs(slots[p]);
    size_t gathered = 0;
    drain(list, list.size(), gathered);
  }

  Tensor result_of(const Slot& s) const {
    Tensor t = Tensor::empty(DType::F32, s.shape);
    std::memcpy(t.f32(), s.result.data(), static_cast<size_t>(s.numel) * sizeof(float));
    return t;
  }
};

GradReducer::GradReducer(Comm& comm) : impl_(std::make_unique<Impl>(comm)) {
  impl_->rs_stream = comm.stream();
  impl_->ag_stream = comm.stream();
}

GradReducer::~GradReducer() = default;

const GradReducer::Stats& GradReducer::stats() const {
  return impl_->stats;
}

void GradReducer::begin(const interp::Params& params, const std::vector<bool>& skip) {
  Impl& I = *impl_;
  uint64_t h = 1469598103934665603ull;
  for (size_t p = 0; p < params.names.size(); ++p) {
    h = fnv(h, params.names[p].data(), params.names[p].size() + 1);
    auto dims = params.values[p].shape().dims();
    h = fnv(h, dims.data(), dims.size() * sizeof(int64_t));
    uint8_t sk = p < skip.size() && skip[p];
    h = fnv(h, &sk, 1);
  }
  if (h != I.layout || I.slots.size() != params.names.size()) {
    // A new model (or a first step): buffers sized anew, kinds learnt again.
    I.layout = h;
    I.slots.assign(params.names.size(), Slot{});
    const int64_t n = I.comm.size();
    for (size_t p = 0; p < params.names.size(); ++p) {
      Slot& s = I.slots[p];
      s.shape = params.values[p].shape();
      s.numel = params.values[p].numel();
      s.padded = (s.numel + n - 1) / n * n;
      s.send.assign(static_cast<size_t>(s.padded), 0.0f);
      s.block.assign(static_cast<size_t>(s.padded / n), 0.0f);
      s.result.assign(static_cast<size_t>(s.padded), 0.0f);
    }
  }
  I.skip.assign(params.names.size(), false);
  for (size_t p = 0; p < skip.size() && p < I.skip.size(); ++p)
    I.skip[p] = skip[p];
  I.eager.clear();
  for (size_t p : I.order())
    if (I.slots[p].kind == Kind::Dense && !I.skip[p])
      I.eager.push_back(p);
  for (auto& s : I.slots) {
    s.announced = false;
    s.parts = 0;
  }
  I.next_rs = I.next_ag = 0;
}

void GradReducer::ready(size_t p, const interp::ParamGrad& g) {
  Impl& I = *impl_;
  if (p >= I.slots.size() || I.skip[p] || I.slots[p].kind != Kind::Dense || I.slots[p].announced)
    return;
  I.fill(I.slots[p], g);
  I.slots[p].announced = true;
  I.pump(true);
}

void GradReducer::restart() {
  Impl& I = *impl_;
  if (I.next_rs > 0)
    throw Error("data-parallel step: the planned run of this batch failed after its gradients "
                "were sent to the other ranks, so the batch cannot be run again on the generic "
                "path");
  for (auto& s : I.slots)
    s.announced = false;
}

float GradReducer::finish(std::vector<interp::ParamGrad>& grads, float loss,
                          const std::string& local_error) {
  Impl& I = *impl_;
  auto t0 = std::chrono::steady_clock::now();
  const size_t np = I.slots.size();
  const bool failed = !local_error.empty();
  grads.resize(np);
  if (failed)
    for (auto& g : grads)
      g = interp::ParamGrad{};
  // 1. What this rank has, for the parameters not announced during its backward pass.
  for (size_t p = 0; p < np; ++p) {
    Slot& s = I.slots[p];
    if (I.skip[p] || s.announced)
      continue;
    if (s.kind == Kind::Dense) {
      I.fill(s, grads[p]);
      s.announced = true;
    } else {
      s.parts = static_cast<uint8_t>((grads[p].dense.defined() ? kHasDense : 0) |
                                     (grads[p].sparse.empty() ? 0 : kHasSparse));
    }
  }
  I.pump(false);
  // 2. Every rank's loss, failure and gradient parts.
  std::string info;
  put(info, static_cast<uint8_t>(failed));
  put(info, static_cast<double>(loss));
  put(info, I.layout);
  for (size_t p = 0; p < np; ++p)
    put(info, I.skip[p] ? uint8_t{0} : I.slots[p].parts);
  info += local_error.substr(0, 4000);
  std::vector<std::string> all = I.comm.allgather(info);
  double total = 0;
  int first_failed = -1;
  std::string why;
  std::vector<uint8_t> any(np, 0);
  for (int r = 0; r < I.comm.size(); ++r) {
    Reader rd{all[static_cast<size_t>(r)]};
    bool f = rd.get<uint8_t>() != 0;
    total += rd.get<double>();
    if (rd.get<uint64_t>() != I.layout) {
      // The ranks' reductions no longer match one another: no clean way on.
      std::fprintf(stderr,
                   "pejit: rank %d of %d trains other parameters than rank %d (another model, "
                   "other dims or other frozen parameters); ending the job\n",
                   r, I.comm.size(), I.comm.rank());
      I.comm.abort(1);
    }
    for (size_t p = 0; p < np; ++p)
      any[p] |= rd.get<uint8_t>();
    if (f && first_failed < 0) {
      first_failed = r;
      why = all[static_cast<size_t>(r)].substr(rd.at);
    }
  }
  // 3. The reductions started during the backward pass, completed on every rank alike.
  I.drain(I.eager, I.next_rs, I.next_ag);
  I.rs_stream->reset();
  I.ag_stream->reset();
  I.stats.steps += 1;
  if (first_failed >= 0) {
    I.stats.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    throw JobError("rank " + std::to_string(first_failed) + " of " +
                   std::to_string(I.comm.size()) + ": " + why);
  }
  // 4. Parameters seen for the first time: dense if any rank had a dense part.
  std::vector<size_t> late; // dense reductions not started yet, in the fixed order
  for (size_t p : I.order()) {
    Slot& s = I.slots[p];
    if (I.skip[p] || any[p] == 0)
      continue;
    if (s.kind == Kind::Unknown) {
      s.kind = (any[p] & kHasDense) ? Kind::Dense : Kind::Sparse;
      if (s.kind == Kind::Dense) {
        I.fill(s, grads[p]);
        late.push_back(p);
      }
    } else if (s.kind == Kind::Sparse && (any[p] & kHasDense)) {
      // A sparse parameter some rank also has a dense part for: that part summed densely.
      interp::ParamGrad d;
      d.dense = grads[p].dense;
      I.fill(s, d);
      late.push_back(p);
    }
  }
  I.reduce_now(late);
  I.rs_stream->reset();
  I.ag_stream->reset();
  // 5. The row-sparse parts: every rank's (ids, rows), one part per rank in rank order.
  std::vector<size_t> sparse;
  for (size_t p : I.order())
    if (!I.skip[p] && I.slots[p].kind == Kind::Sparse && (any[p] & kHasSparse))
      sparse.push_back(p);
  std::vector<std::string> rows_of;
  if (!sparse.empty()) {
    std::string mine;
    for (size_t p : sparse) {
      const Slot& s = I.slots[p];
      const int64_t d = s.numel / std::max<int64_t>(1, s.shape[0]);
      int64_t n = 0;
      for (const auto& part : grads[p].sparse)
        n += part.indices.numel();
      put(mine, n);
      for (const auto& part : grads[p].sparse)
        mine.append(reinterpret_cast<const char*>(part.indices.i32()),
                    static_cast<size_t>(part.indices.numel()) * sizeof(int32_t));
      for (const auto& part : grads[p].sparse)
        mine.append(reinterpret_cast<const char*>(part.rows.f32()),
                    static_cast<size_t>(part.indices.numel() * d) * sizeof(float));
    }
    I.stats.sparse_bytes += static_cast<int64_t>(mine.size());
    rows_of = I.comm.allgather(mine);
  }
  // 6. The sums, the same bits on every rank.
  for (size_t p = 0; p < np; ++p) {
    Slot& s = I.slots[p];
    interp::ParamGrad out;
    if (!I.skip[p] && any[p] != 0) {
      if (s.kind == Kind::Dense || (any[p] & kHasDense))
        out.dense = I.result_of(s);
    }
    grads[p] = std::move(out);
  }
  for (int r = 0; r < I.comm.size() && !sparse.empty(); ++r) {
    Reader rd{rows_of[static_cast<size_t>(r)]};
    for (size_t p : sparse) {
      const Slot& s = I.slots[p];
      const int64_t d = s.numel / std::max<int64_t>(1, s.shape[0]);
      const auto n = rd.get<int64_t>();
      if (n < 0 || n > (1ll << 31))
        throw JobError("data-parallel step: rank " + std::to_string(r) + " sent " +
                       std::to_string(n) + " rows");
      if (n == 0)
        continue;
      kernels::RowSparse part;
      part.num_rows = s.shape[0];
      part.indices = Tensor::empty(DType::I32, Shape{n});
      rd.bytes(part.indices.i32(), static_cast<size_t>(n) * sizeof(int32_t));
      std::vector<int64_t> dims(s.shape.dims().begin(), s.shape.dims().end());
      dims[0] = n;
      part.rows = Tensor::empty(DType::F32, Shape(std::span<const int64_t>(dims)));
      rd.bytes(part.rows.f32(), static_cast<size_t>(n * d) * sizeof(float));
      grads[p].sparse.push_back(std::move(part));
    }
  }
  I.stats.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<float>(total);
}

} // namespace pejit::runtime::dist
