// The public Session and Value (include/pejit/pejit.h) over the library's internals: batches
// go through the engine (runtime/engine.h), which picks the generic path or a plan per batch
// and plans prefetched batches in the background.
#include "pejit/pejit.h"

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cuda/device.h"
#include "runtime/dist/comm.h"
#include "runtime/dist/grad_reducer.h"
#include "runtime/engine.h"
#include "runtime/optim/optimizer.h"
#include "runtime/parallel.h"
#include "runtime/schedule_api.h"
#include "runtime/session_access.h"
#include "src/interp/interpreter.h"
#include "src/types/builtins.h"
#include "src/types/check.h"
#include "src/util/check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>

namespace pejit {

struct Value::Impl {
  interp::Value v;
};

namespace {
Value wrap(interp::Value v) {
  return Value(std::make_shared<const Value::Impl>(Value::Impl{std::move(v)}));
}
const interp::Value& unwrap(const Value& v) {
  return v.impl().v;
}

Shape to_shape(const std::vector<int64_t>& s) {
  for (auto d : s)
    if (d < 0)
      throw Error("negative dimension in a tensor shape");
  return Shape(std::span<const int64_t>(s));
}
} // namespace

Value::Value() : impl_(std::make_shared<const Impl>()) {}
Value::~Value() = default;
Value::Value(const Value&) = default;
Value& Value::operator=(const Value&) = default;
Value::Value(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
const Value::Impl& Value::impl() const {
  return *impl_;
}

Value Value::integer(int64_t v) {
  return wrap(interp::Value::integer(v));
}
Value Value::boolean(bool v) {
  return wrap(interp::Value::boolean(v));
}
Value Value::scalar_i32(int32_t v) {
  return wrap(interp::Value::tensor(Tensor::scalar_i32(v)));
}
Value Value::scalar_f32(float v) {
  return wrap(interp::Value::tensor(Tensor::scalar_f32(v)));
}
Value Value::tensor_f32(const std::vector<int64_t>& shape, const std::vector<float>& data) {
  return wrap(interp::Value::tensor(Tensor::from_f32(to_shape(shape), data)));
}
Value Value::tensor_i32(const std::vector<int64_t>& shape, const std::vector<int32_t>& data) {
  return wrap(interp::Value::tensor(Tensor::from_i32(to_shape(shape), data)));
}
Value Value::list(const std::vector<Value>& items) {
  interp::Values xs;
  for (const auto& i : items)
    xs.push_back(unwrap(i));
  return wrap(interp::Value::list(std::move(xs)));
}
Value Value::tuple(const std::vector<Value>& items) {
  interp::Values xs;
  for (const auto& i : items)
    xs.push_back(unwrap(i));
  return wrap(interp::Value::tuple(std::move(xs)));
}

bool Value::is_list() const {
  return impl_->v.kind() == interp::Value::Kind::List;
}
bool Value::is_tensor() const {
  return impl_->v.kind() == interp::Value::Kind::Tensor;
}

size_t Value::size() const {
  const auto& v = impl_->v;
  if (v.kind() == interp::Value::Kind::List)
    return v.list_size();
  if (v.kind() == interp::Value::Kind::Tuple || v.kind() == interp::Value::Kind::Adt)
    return v.items().size();
  throw Error("size() of " + v.describe());
}

Value Value::at(size_t i) const {
  if (i >= size())
    throw Error("index " + std::to_string(i) + " out of range");
  const auto& v = impl_->v;
  return wrap(v.kind() == interp::Value::Kind::List ? v.list_at(i) : v.items()[i]);
}

int64_t Value::as_int() const {
  if (impl_->v.kind() != interp::Value::Kind::Int)
    throw Error("not an Int: " + describe());
  return impl_->v.as_int();
}
bool Value::as_bool() const {
  if (impl_->v.kind() != interp::Value::Kind::Bool)
    throw Error("not a Bool: " + describe());
  return impl_->v.as_bool();
}
float Value::item_f32() const {
  if (!is_tensor())
    throw Error("not a tensor: " + describe());
  return impl_->v.as_tensor().item_f32();
}
int32_t Value::item_i32() const {
  if (!is_tensor())
    throw Error("not a tensor: " + describe());
  return impl_->v.as_tensor().item_i32();
}
std::vector<int64_t> Value::shape() const {
  if (!is_tensor())
    throw Error("not a tensor: " + describe());
  auto d = impl_->v.as_tensor().shape().dims();
  return {d.begin(), d.end()};
}
std::vector<float> Value::to_f32() const {
  if (!is_tensor())
    throw Error("not a tensor: " + describe());
  const Tensor& t = impl_->v.as_tensor();
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::F32)
    std::copy(t.f32(), t.f32() + t.numel(), out.begin());
  else
    for (int64_t i = 0; i < t.numel(); ++i)
      out[static_cast<size_t>(i)] = static_cast<float>(t.i32()[i]);
  return out;
}
std::string Value::describe() const {
  return impl_->v.describe();
}

struct Session::Impl {
  std::shared_ptr<ir::Module> module;
  SessionOptions opt;
  interp::DimBindings dims;
  interp::Params params;
  std::shared_ptr<const runtime::Workers> workers; // shared by the engine and the optimizers
  std::unique_ptr<runtime::Engine> engine;
  std::unique_ptr<optim::Optimizer> optimizer;
  // Per-entry counters (SessionStats::per_entry): the engine's plan hits and misses are
  // attributed to the entry whose batch ran since the last look at them.
  std::map<std::string, SessionStats::Entry> per_entry;
  int64_t seen_hits = 0, seen_misses = 0;
  std::vector<std::string> respecialized, reused;
  std::set<std::string> frozen; // parameters step() leaves as they are (Session::freeze)
  // Data parallelism: the job's communicator and this session's gradient reduction (null:
  // not distributed).
  runtime::dist::Comm* comm = nullptr;
  std::unique_ptr<runtime::dist::GradReducer> reducer;
  uint64_t random_seed = 0; // the seed the caller gave (the engine's is keyed by the rank too)

  // The engine's random seed: each rank draws its own numbers (its slice's dropout masks are
  // not the other ranks'), the same ones on every path.
  void set_random(uint64_t seed, uint32_t step) {
    random_seed = seed;
    uint64_t mixed = seed;
    if (comm != nullptr && comm->rank() > 0)
      mixed = seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(comm->rank()));
    engine->set_random(mixed, step);
  }

  // A data-parallel step: this rank's slice, the gradients summed over the ranks (the same
  // sequence of collectives on every rank, even when this rank's part fails), one update.
  float dist_step(const std::string& entry, const interp::Value& batch, optim::Optimizer& opt) {
    std::vector<bool> skip(params.names.size(), false);
    for (size_t i = 0; i < params.names.size(); ++i)
      skip[i] = frozen.count(params.names[i]) != 0;
    reducer->begin(params, skip);
    interp::Interpreter::Gradients g;
    std::string failure;
    try {
      if (batch.kind() == interp::Value::Kind::List && batch.list_size() == 0) {
        // A global batch smaller than the job: nothing here, but the step's draws still count.
        g.loss = 0;
        g.grads.assign(params.names.size(), interp::ParamGrad{});
        auto r = engine->random();
        engine->set_random(r.seed, r.step + 1);
      } else {
        g = engine->value_and_grad(entry, batch, params, reducer.get());
        account(entry);
      }
      drop_frozen(g.grads);
    } catch (const std::exception& e) {
      failure = *e.what() != '\0' ? e.what() : "an unnamed error";
    }
    float loss = reducer->finish(g.grads, g.loss, failure);
    if (std::isfinite(loss))
      opt.step(params, g.grads);
    return loss;
  }

  // The gradients of frozen parameters dropped before an update: an empty gradient is one the
  // optimizers skip.
  void drop_frozen(std::vector<interp::ParamGrad>& grads) const {
    if (frozen.empty())
      return;
    for (size_t i = 0; i < params.names.size() && i < grads.size(); ++i)
      if (frozen.count(params.names[i]) != 0)
        grads[i] = interp::ParamGrad{};
  }

  void account(const std::string& entry) {
    auto s = engine->stats();
    auto& e = per_entry[entry];
    e.batches += 1;
    e.plan_hits += s.plan_hits - seen_hits;
    e.plan_misses += s.plan_misses - seen_misses;
    seen_hits = s.plan_hits;
    seen_misses = s.plan_misses;
  }

  void init_missing_params() {
    interp::Params fresh = interp::init_params(*module, dims, opt.seed);
    interp::Params next;
    for (size_t i = 0; i < fresh.names.size(); ++i) {
      int old = params.index(fresh.names[i]);
      next.names.push_back(fresh.names[i]);
      next.values.push_back(old >= 0 && params.values[old].shape() == fresh.values[i].shape()
                                ? params.values[old]
                                : fresh.values[i]);
    }
    params = std::move(next);
  }
};

struct Optimizer::Impl {
  optim::Optimizer opt;
};

Optimizer::Optimizer(const std::string& kind, float lr, float weight_decay, float clip) {
  optim::OptimizerOptions oo;
  oo.kind = optim::parse_kind(kind);
  oo.lr = lr;
  oo.weight_decay = weight_decay;
  oo.clip_norm = clip;
  impl_ = std::make_unique<Impl>(Impl{optim::Optimizer(oo)});
}
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;
Optimizer::~Optimizer() = default;

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {
void check_distributed(const std::string& d) {
  if (d != "off" && d != "auto" && d != "mpi")
    throw Error("SessionOptions::distributed is '" + d + "' (off, auto or mpi)");
}
} // namespace
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

namespace {
void take_params(interp::Params& params, const checkpoint::Checkpoint& ck, const std::string& path);

// Every parameter of the module, zero, at its shape: the checkpoint's values replace them.
interp::Params zero_params(const ir::Module& m, const interp::DimBindings& dims) {
  interp::Params p;
  for (const auto& d : m.params()) {
    p.names.push_back(d->name);
    p.values.push_back(Tensor::zeros(DType::F32, interp::concrete_shape(d->type, dims)));
  }
  return p;
}
} // namespace

// The one place where SessionOptions become the engine's and the optimizer's options (the
// CLI's train and eval come through here too).
Session runtime::SessionAccess::from_module(std::shared_ptr<ir::Module> m,
                                            const SessionOptions& opt,
                                            const checkpoint::Checkpoint* params,
                                            const std::string& params_path, bool inference) {
  runtime::cuda::require_device(runtime::cuda::parse_device(opt.device));
  check_distributed(opt.distributed);
  runtime::EngineOptions eo;
  eo.mode = runtime::parse_mode(opt.mode);
  eo.lookahead = opt.lookahead;
  eo.max_depth = opt.max_depth;
  eo.trace_file = opt.trace_file;
  eo.merge_equal = opt.merge_equal;
  eo.jit = opt.compile.jit;
  eo.kernel_cache_dir = opt.compile.kernel_cache_dir;
  eo.kernel_cache_max_bytes = opt.compile.kernel_cache_max_bytes;
  eo.inference = inference;
  if (opt.compile.schedules)
    eo.schedules = opt.compile.schedules->impl().db;
  if (opt.threads < 0)
    throw Error("SessionOptions::threads is " + std::to_string(opt.threads) +
                " (0: the CPUs of the affinity mask, or a count >= 1)");
  auto impl = std::make_unique<Session::Impl>();
  impl->workers = std::make_shared<runtime::Workers>(opt.threads);
  eo.workers = impl->workers;
  impl->opt = opt;
  impl->module = std::move(m);
  impl->dims = interp::bind_dims(*impl->module, opt.dims);
  if (params != nullptr) {
    impl->params = zero_params(*impl->module, impl->dims);
    take_params(impl->params, *params, params_path);
  } else {
    impl->params = interp::init_params(*impl->module, impl->dims, opt.seed);
  }
  impl->engine = std::make_unique<runtime::Engine>(impl->module, impl->dims, eo);
  if (opt.distributed == "mpi" ||
      (opt.distributed == "auto" && runtime::dist::detect_launch().size > 1)) {
    impl->comm = &runtime::dist::Comm::world();
    impl->reducer = std::make_unique<runtime::dist::GradReducer>(*impl->comm);
  }
  impl->set_random(opt.seed, 0);
  optim::OptimizerOptions oo;
  oo.kind = optim::parse_kind(opt.optimizer);
  oo.lr = opt.lr;
  oo.weight_decay = opt.weight_decay;
  oo.clip_norm = opt.clip;
  impl->optimizer = std::make_unique<optim::Optimizer>(oo);
  impl->optimizer->set_workers(impl->workers);
  Session s(std::move(impl));
  s.check_replicas(); // another seed, model or dims on some rank shows here, before any step
  return s;
}

const ir::Module& runtime::SessionAccess::module(const Session& s) {
  return *s.impl_->module;
}

optim::Optimizer& runtime::SessionAccess::optimizer(Session& s) {
  return *s.impl_->optimizer;
}

Value runtime::SessionAccess::wrap(interp::Value v) {
  return pejit::wrap(std::move(v));
}

const interp::Value& runtime::SessionAccess::unwrap(const Value& v) {
  return pejit::unwrap(v);
}

Session Session::from_source(const std::string& text, const std::string& name,
                             const SessionOptions& opt) {
  (void)runtime::parse_mode(opt.mode); // a bad mode or device fails before the program is read
  check_distributed(opt.distributed);
  runtime::cuda::require_device(runtime::cuda::parse_device(opt.device));
  auto module = std::make_shared<ir::Module>();
  Diagnostics d;
  auto r = types::add_source(*module, text, name, d);
  if (!r.ok)
    throw ProgramError("the program has errors:\n" + d.render());
  return runtime::SessionAccess::from_module(std::move(module), opt);
}

Session Session::from_file(const std::string& path, const SessionOptions& opt) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    throw Error("cannot read '" + path + "'");
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    text.append(buf, n);
  std::fclose(f);
  return from_source(text, path, opt);
}

Value Session::make(const std::string& ctor, const std::vector<Value>& fields) const {
  interp::Values xs;
  for (const auto& f : fields)
    xs.push_back(unwrap(f));
  if (ctor == "Nil") {
    if (!fields.empty())
      throw Error("Nil takes no fields");
    return wrap(interp::Value::list({}));
  }
  if (ctor == "Cons") {
    if (fields.size() != 2 || !fields[1].is_list())
      throw Error("Cons takes a head and a list");
    interp::Values all{xs[0]};
    const auto& tail = xs[1];
    for (size_t i = 0; i < tail.list_size(); ++i)
      all.push_back(tail.list_at(i));
    return wrap(interp::Value::list(std::move(all)));
  }
  auto [a, c] = impl_->module->ctor(ctor);
  if (a < 0)
    throw Error("the model has no constructor '" + ctor + "'");
  const auto& def = impl_->module->adts()[static_cast<size_t>(a)]->ctors[static_cast<size_t>(c)];
  if (def.fields.size() != fields.size())
    throw Error("constructor " + ctor + " has " + std::to_string(def.fields.size()) +
                " fields, got " + std::to_string(fields.size()));
  interp::Value v = interp::Value::adt(c, std::move(xs));
  // Fields are checked shallowly here; the whole batch is checked against the entry's type.
  for (size_t i = 0; i < def.fields.size(); ++i)
    if (def.fields[i].type->kind == ir::TypeKind::Tensor)
      interp::check_value(v.items()[i], def.fields[i].type, *impl_->module, impl_->dims,
                          ctor + "." + def.fields[i].name);
  return wrap(std::move(v));
}

float Session::step(const std::string& entry, const Value& batch) {
  if (impl_->reducer)
    return impl_->dist_step(entry, unwrap(batch), *impl_->optimizer);
  auto g = impl_->engine->value_and_grad(entry, unwrap(batch), impl_->params);
  impl_->account(entry);
  impl_->drop_frozen(g.grads);
  if (std::isfinite(g.loss)) // a non-finite loss's gradients would ruin every parameter
    impl_->optimizer->step(impl_->params, g.grads);
  return g.loss;
}

float Session::step(const std::string& entry, const Value& batch, Optimizer& optimizer) {
  if (!optimizer.impl_)
    throw Error("Session::step: the optimizer was moved from");
  optimizer.impl_->opt.set_workers(impl_->workers);
  if (impl_->reducer)
    return impl_->dist_step(entry, unwrap(batch), optimizer.impl_->opt);
  auto g = impl_->engine->value_and_grad(entry, unwrap(batch), impl_->params);
  impl_->account(entry);
  impl_->drop_frozen(g.grads);
  if (std::isfinite(g.loss))
    optimizer.impl_->opt.step(impl_->params, g.grads);
  return g.loss;
}

void Session::init_params(uint64_t seed) {
  impl_->params = interp::init_params(*impl_->module, impl_->dims, seed);
  impl_->optimizer = std::make_unique<optim::Optimizer>(impl_->optimizer->options());
  impl_->optimizer->set_workers(impl_->workers);
}

void Session::prefetch(const std::string& entry, const std::vector<Value>& batches) {
  std::vector<interp::Value> vs;
  vs.reserve(batches.size());
  for (const auto& b : batches)
    vs.push_back(unwrap(b));
  impl_->engine->prefetch(entry, std::move(vs));
}

void Session::drain() {
  impl_->engine->drain();
}

std::string Session::explain(const std::string& entry) const {
  return impl_->engine->explain(entry);
}

void Session::write_trace() const {
  impl_->engine->write_trace();
}

std::string Session::entry_status(const std::string& entry) const {
  if (!impl_->module->fn(entry) || !impl_->module->fn(entry)->is_entry)
    throw Error("no entry named '" + entry + "'");
  size_t plans = impl_->engine->cached_plans(entry);
  std::string why = impl_->engine->explain(entry);
  if (!why.empty())
    return "generic: " + why;
  if (plans > 0)
    return "specialized: " + std::to_string(plans) + " plan" + (plans == 1 ? "" : "s") + " cached";
  return "not specialized yet";
}

Value Session::run(const std::string& entry, const Value& batch) {
  Value out = wrap(impl_->engine->run(entry, unwrap(batch), impl_->params));
  impl_->account(entry);
  return out;
}

std::vector<std::string> Session::entries() const {
  return impl_->module->entries();
}

std::vector<std::string> Session::add_source(const std::string& text, const std::string& name) {
  // The engine's background work (planning, compiling) reads the module: let it finish first.
  impl_->engine->drain();
  Diagnostics d;
  auto r = types::add_source(*impl_->module, text, name, d);
  if (!r.ok)
    throw ProgramError("the definitions have errors:\n" + d.render());
  impl_->dims = interp::bind_dims(*impl_->module, impl_->opt.dims);
  impl_->init_missing_params();
  // Only the specializations of entries whose dependency cone changed are dropped.
  impl_->engine->invalidate(r.affected_entries);
  impl_->respecialized = r.affected_entries;
  impl_->reused.clear();
  for (const auto& e : impl_->module->entries()) {
    bool changed = std::find(r.affected_entries.begin(), r.affected_entries.end(), e) !=
                   r.affected_entries.end();
    if (changed)
      impl_->per_entry[e].respecializations += 1;
    else
      impl_->reused.push_back(e);
  }
  return r.affected_entries;
}

std::vector<std::string> Session::param_names() const {
  return impl_->params.names;
}

namespace {
const Tensor& param_of(const interp::Params& p, const std::string& name) {
  int i = p.index(name);
  if (i < 0)
    throw Error("no parameter named '" + name + "'");
  return p.values[static_cast<size_t>(i)];
}
} // namespace

std::vector<int64_t> Session::param_shape(const std::string& name) const {
  auto d = param_of(impl_->params, name).shape().dims();
  return {d.begin(), d.end()};
}

std::vector<float> Session::get_param(const std::string& name) const {
  const Tensor& t = param_of(impl_->params, name);
  return {t.f32(), t.f32() + t.numel()};
}

void Session::set_param(const std::string& name, const std::vector<float>& data) {
  int i = impl_->params.index(name);
  if (i < 0)
    throw Error("no parameter named '" + name + "'");
  Tensor& t = impl_->params.values[static_cast<size_t>(i)];
  if (static_cast<int64_t>(data.size()) != t.numel())
    throw Error("parameter " + name + " has " + std::to_string(t.numel()) + " elements, got " +
                std::to_string(data.size()));
  t = Tensor::from_f32(t.shape(), data);
}

void Session::set_random(uint64_t seed, uint32_t step) {
  impl_->set_random(seed, step);
}
uint64_t Session::random_seed() const {
  return impl_->random_seed;
}
uint32_t Session::random_step() const {
  return impl_->engine->random().step;
}

void Session::freeze(const std::string& name, bool frozen) {
  if (impl_->params.index(name) < 0)
    throw Error("Session::freeze: no parameter named '" + name + "'");
  if (frozen)
    impl_->frozen.insert(name);
  else
    impl_->frozen.erase(name);
}

bool Session::frozen(const std::string& name) const {
  if (impl_->params.index(name) < 0)
    throw Error("Session::frozen: no parameter named '" + name + "'");
  return impl_->frozen.count(name) != 0;
}

namespace {
checkpoint::Checkpoint snapshot(const interp::Params& params, const optim::Optimizer& optimizer,
                                const std::vector<std::string>& vocab,
                                const std::map<std::string, std::string>& meta) {
  checkpoint::Checkpoint ck;
  ck.params = params;
  ck.vocab = vocab;
  if (ck.vocab.empty())
    ck.vocab = {"<unk>"};
  ck.optimizer_state = optimizer.state();
  ck.meta = meta;
  return ck;
}
} // namespace

void Session::save(const std::string& path, const std::vector<std::string>& vocab,
                   const std::map<std::string, std::string>& meta) const {
  checkpoint::save(path, snapshot(impl_->params, *impl_->optimizer, vocab, meta));
}

void Session::save_training(const std::string& path, const TrainingState& state,
                            const std::vector<std::string>& vocab,
                            const std::map<std::string, std::string>& meta) const {
  checkpoint::Checkpoint ck = snapshot(impl_->params, *impl_->optimizer, vocab, meta);
  ck.training = checkpoint::TrainState{state.epoch, state.batch, state.values};
  checkpoint::save(path, ck);
}

namespace {
// Every parameter of `params` from the checkpoint, which must hold each with the same shape
// (it may hold more).
void take_params(interp::Params& params, const checkpoint::Checkpoint& ck,
                 const std::string& path) {
  for (size_t i = 0; i < params.names.size(); ++i) {
    int j = ck.params.index(params.names[i]);
    if (j < 0)
      throw Error("checkpoint '" + path + "' has no parameter " + params.names[i]);
    if (ck.params.values[j].shape() != params.values[i].shape())
      throw Error("checkpoint '" + path + "': parameter " + params.names[i] + " has shape " +
                  ck.params.values[j].shape().str() + ", the model wants " +
                  params.values[i].shape().str());
    params.values[i] = ck.params.values[j];
  }
}
} // namespace

std::vector<std::string> Session::load(const std::string& path) {
  checkpoint::Checkpoint ck = checkpoint::load(path);
  interp::Params next = impl_->params; // unchanged when the optimizer state does not fit
  take_params(next, ck, path);
  if (!ck.optimizer_state.empty())
    impl_->optimizer->load_state(ck.optimizer_state);
  impl_->params = std::move(next);
  return ck.vocab;
}

TrainingState Session::load_training(const std::string& path, std::vector<std::string>* vocab) {
  checkpoint::Checkpoint ck = checkpoint::load(path);
  if (!ck.training)
    throw Error("checkpoint '" + path +
                "' holds no training state to resume from (it was written by a version 1 "
                "pejit or without one); its parameters can still be loaded (load, --init)");
  interp::Params next = impl_->params;
  take_params(next, ck, path);
  impl_->optimizer->load_state(ck.optimizer_state); // empty: a fresh optimizer's state
  impl_->params = std::move(next);
  if (vocab)
    *vocab = ck.vocab;
  return TrainingState{ck.training->epoch, ck.training->batch, ck.training->values};
}

std::vector<std::string> Session::load_params(const std::string& path) {
  checkpoint::Checkpoint ck = checkpoint::load(path);
  take_params(impl_->params, ck, path);
  return ck.vocab;
}

SessionStats Session::stats() const {
  auto s = impl_->engine->stats();
  SessionStats out;
  out.threads = impl_->workers->threads();
  out.generic_batches = s.generic_batches;
  out.specialized_batches = s.specialized_batches;
  out.generic_seconds = s.generic_seconds;
  out.specialized_seconds = s.specialized_seconds;
  out.grad_batches = s.grad_batches;
  out.plan_hits = s.plan_hits;
  out.plan_misses = s.plan_misses;
  out.plans_prefetched = s.plans_prefetched;
  out.plan_evictions = s.plan_evictions;
  out.plan_seconds = s.plan_seconds;
  out.background_plan_seconds = s.background_plan_seconds;
  out.jit_batches = s.jit_batches;
  out.jit_seconds = s.jit_seconds;
  out.interpreted_groups = s.interpreted_groups;
  out.interpreted_seconds = s.interpreted_seconds;
  for (const auto& what : s.interpreted_templates) {
    // "name: why" -> "name (where the function is): why"; an op's template has no function.
    const size_t colon = what.find(": ");
    const ir::FnDecl* f = impl_->module->fn(what.substr(0, colon));
    if (f != nullptr && f->span.known() && colon != std::string::npos)
      out.interpreted_templates.push_back(what.substr(0, colon) + " (" + f->span.str() + ")" +
                                          what.substr(colon));
    else
      out.interpreted_templates.push_back(what);
  }
  out.kernels_compiled = s.kernels_compiled;
  out.compile_ms = s.compile_ms;
  out.kernels_cached = s.kernels_cached;
  out.first_planned_s = s.first_planned_s;
  out.first_jit_s = s.first_jit_s;
  out.last_compile_s = s.last_compile_s;
  out.fallbacks = s.fallbacks;
  if (impl_->reducer) {
    const auto& d = impl_->reducer->stats();
    out.rank = impl_->comm->rank();
    out.ranks = impl_->comm->size();
    out.grad_reductions = d.reductions;
    out.reductions_overlapped = d.overlapped;
    out.comm_wait_seconds = d.wait_seconds;
    out.comm_dense_bytes = d.dense_bytes;
    out.comm_sparse_bytes = d.sparse_bytes;
  }
  out.per_entry = impl_->per_entry;
  for (auto& [name, e] : out.per_entry)
    e.plans_cached = static_cast<int64_t>(impl_->engine->cached_plans(name));
  out.respecialized = impl_->respecialized;
  out.reused = impl_->reused;
  return out;
}

std::vector<KernelInfo> Session::kernels() const {
  std::vector<KernelInfo> out;
  for (const auto& k : impl_->engine->kernels())
    out.push_back({k.signature, k.schedule, k.schedule_source, k.ir_hash, k.compile_ms,
                   k.cached});
  return out;
}

int Session::rank() const {
  return impl_->comm != nullptr ? impl_->comm->rank() : 0;
}

int Session::ranks() const {
  return impl_->comm != nullptr ? impl_->comm->size() : 1;
}

std::pair<size_t, size_t> Session::slice(size_t n) const {
  const auto r = static_cast<size_t>(rank()), k = static_cast<size_t>(ranks());
  return {n * r / k, n * (r + 1) / k};
}

std::vector<std::vector<double>> Session::gather_ranks(const std::vector<double>& values) const {
  if (impl_->comm == nullptr)
    return {values};
  std::string mine(values.size() * sizeof(double), '\0');
  if (!values.empty())
    std::memcpy(mine.data(), values.data(), mine.size());
  std::vector<std::vector<double>> out;
  for (const auto& b : impl_->comm->allgather(mine)) {
    std::vector<double> v(b.size() / sizeof(double));
    if (!v.empty())
      std::memcpy(v.data(), b.data(), v.size() * sizeof(double));
    out.push_back(std::move(v));
  }
  return out;
}

uint64_t Session::param_hash() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  };
  for (size_t i = 0; i < impl_->params.names.size(); ++i) {
    for (char c : impl_->params.names[i])
      mix(static_cast<unsigned char>(c));
    const Tensor& t = impl_->params.values[i];
    const auto* w = reinterpret_cast<const uint32_t*>(t.raw());
    mix(static_cast<uint64_t>(t.numel()));
    for (int64_t k = 0; k < t.numel(); ++k)
      mix(w[k]);
  }
  return h;
}

void Session::check_replicas() const {
  if (impl_->comm == nullptr)
    return;
  const uint64_t h = param_hash();
  // Two halves: a double holds 32 bits exactly.
  auto all = gather_ranks({static_cast<double>(h >> 32), static_cast<double>(h & 0xffffffffu)});
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      throw runtime::dist::JobError(
          "the parameters of rank " + std::to_string(r) + " differ from rank 0's: the ranks do not "
          "train the same model (another --seed, model, data vocabulary or checkpoint)");
}

float* Session::param_data(const std::string& name) {
  int i = impl_->params.index(name);
  if (i < 0)
    throw Error("no parameter named '" + name + "'");
  Tensor& t = impl_->params.values[static_cast<size_t>(i)];
  // A tensor shared with another holder (a checkpoint just loaded) gets storage of its own
  // first: writes through the pointer must reach this session's parameter only.
  if (!t.unique())
    t = t.clone();
  return t.f32();
}

} // namespace pejit
