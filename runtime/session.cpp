// The public Session (include/pejit/pejit.h) over the library's internals: batches go
// through the engine (runtime/engine.h), which picks the generic path or a plan per batch and
// plans prefetched batches in the background. Checkpoints are session_checkpoint.cpp,
// statistics and ranks session_info.cpp, Value value.cpp.
#include "runtime/session_impl.h"

namespace pejit {

using runtime::detail::unwrap;
using runtime::detail::wrap;

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
                                            const std::string& params_path, bool inference,
                                            std::shared_ptr<const runtime::FaultHooks> faults) {
  runtime::cuda::require_device(runtime::cuda::parse_device(opt.device));
  check_distributed(opt.distributed);
  runtime::EngineOptions eo;
  eo.mode = runtime::parse_mode(opt.mode);
  eo.lookahead = opt.lookahead;
  eo.max_depth = opt.max_depth;
  eo.trace_file = opt.trace_file;
  eo.merge_equal = opt.merge_equal;
  eo.batches_repeat = opt.batches_repeat;
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
    detail::take_params(impl->params, *params, params_path);
  } else {
    impl->params = interp::init_params(*impl->module, impl->dims, opt.seed);
  }
  impl->engine = std::make_unique<runtime::Engine>(impl->module, impl->dims, eo, std::move(faults));
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

void runtime::SessionAccess::retire(Session& s, Value& v) {
  Value last = v;
  v = Value();
  // The caller's reference is gone: the task below releases the last one, unless the caller
  // holds another copy (then it only drops a count).
  s.impl_->engine->later([last]() mutable { last = Value(); });
}

std::shared_ptr<const runtime::BatchFacts> runtime::SessionAccess::facts(const Session& s,
                                                                         const Value& batch) {
  return std::make_shared<const BatchFacts>(s.impl_->engine->facts(detail::unwrap(batch)));
}

Value runtime::SessionAccess::run(Session& s, const std::string& entry, const Value& batch,
                                  const BatchFacts& facts) {
  Value out =
      detail::wrap(s.impl_->engine->run(entry, detail::unwrap(batch), s.impl_->params, &facts));
  s.impl_->account(entry);
  return out;
}

void runtime::SessionAccess::prefetch(Session& s, const std::string& entry, const Value& batch,
                                      std::shared_ptr<const BatchFacts> facts) {
  s.impl_->engine->prefetch(entry, detail::unwrap(batch), std::move(facts));
}

Value runtime::SessionAccess::wrap(interp::Value v) {
  return detail::wrap(std::move(v));
}

const interp::Value& runtime::SessionAccess::unwrap(const Value& v) {
  return detail::unwrap(v);
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
  return impl_->visible(impl_->module->entries());
}

std::vector<std::string> Session::add_source(const std::string& text, const std::string& name) {
  // The engine's background work (planning, compiling) reads the module: let it finish first.
  impl_->engine->drain();
  // What the module was, for an error after the definitions check: binding the session's
  // sizes may find an op argument out of range in them (interp::bind_dims).
  const ir::Module before = *impl_->module;
  Diagnostics d;
  auto r = types::add_source(*impl_->module, text, name, d);
  if (!r.ok && !impl_->eval_name.empty()) {
    // The evaluation entry's copies of the old loss and predictions may be what no longer
    // checks (a type or function they use changed): set them aside and try again. The entry
    // is made again from the new definitions before its next run.
    if (runtime::set_aside_eval_entry(*impl_->module, impl_->eval_name)) {
      impl_->engine->invalidate({impl_->eval_name});
      impl_->eval_current = false;
      d = Diagnostics();
      r = types::add_source(*impl_->module, text, name, d);
    }
  }
  if (!r.ok) {
    *impl_->module = before; // as it was, the evaluation entry's copies too
    throw ProgramError("the definitions have errors:\n" + d.render());
  }
  try {
    impl_->dims = interp::bind_dims(*impl_->module, impl_->opt.dims);
  } catch (const Error&) {
    *impl_->module = before;
    throw;
  }
  impl_->init_missing_params();
  // Only the specializations of entries whose dependency cone changed are dropped.
  impl_->engine->invalidate(r.affected_entries);
  impl_->note_change(r);
  const std::vector<std::string> affected = impl_->visible(r.affected_entries);
  impl_->respecialized = affected;
  impl_->reused.clear();
  for (const auto& e : entries()) {
    bool changed = std::find(affected.begin(), affected.end(), e) != affected.end();
    if (changed)
      impl_->per_entry[e].respecializations += 1;
    else
      impl_->reused.push_back(e);
  }
  return affected;
}

runtime::EvalEntry runtime::SessionAccess::eval_entry(Session& s) {
  Session::Impl& im = *s.impl_;
  if (im.eval_current)
    return im.eval;
  im.engine->drain(); // as add_source: the background work reads the module
  im.eval = add_eval_entry(*im.module, im.eval_name);
  if (!im.eval.name.empty()) {
    // Made again under its name: the plans of the copies it replaced go.
    if (!im.eval_name.empty())
      im.engine->invalidate({im.eval_name});
    im.eval_name = im.eval.name;
  }
  im.eval_current = true;
  return im.eval;
}

const interp::DimBindings& runtime::SessionAccess::dims(const Session& s) {
  return s.impl_->dims;
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

} // namespace pejit
