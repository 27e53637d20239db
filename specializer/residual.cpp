// Template interning and printing helpers of the residual program.
#include "specializer/residual.h"

#include "src/kernels/random.h"

#include "src/util/check.h"

#include <charconv>
#include <cstring>
#include <sstream>

namespace pejit::specializer {

TensorSig random_key_sig() {
  return TensorSig{DType::I32, {kernels::kRandomKeyWidth}};
}

void fill_random_inputs(const Residual& r, const interp::RandomState& rs,
                        std::vector<Tensor>& inputs) {
  if (r.random_slots.empty())
    return;
  inputs.resize(static_cast<size_t>(r.num_inputs));
  for (const RandomSlot& k : r.random_slots)
    inputs[static_cast<size_t>(k.slot)] = interp::random_key_tensor(k.context, k.index, rs);
}

Residual with_payloads(const Residual& planned, std::vector<Tensor> payloads,
                       const interp::RandomState& rs) {
  Residual r;
  r.inputs = std::move(payloads);
  fill_random_inputs(planned, rs, r.inputs);
  r.consts = planned.consts;
  r.outputs = planned.outputs;
  r.key = planned.key;
  return r;
}

std::string TensorSig::str() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (size_t i = 0; i < dims.size(); ++i)
    os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

namespace {

// The bytes of a constant argument (Template::const_args): its signature is in `args`.
uint64_t const_hash(const Tensor& t) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

bool same_consts(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined())
      return false;
    if (a[i].defined() && (a[i].dtype() != b[i].dtype() || a[i].nbytes() != b[i].nbytes() ||
                           std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()) != 0))
      return false;
  }
  return true;
}

} // namespace

std::string Template::key() const {
  // Appends, not a stream: the plan executor asks a key per group of every batch.
  std::string k;
  k.reserve(64);
  auto num = [&k](int64_t v) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof(buf), v);
    k.append(buf, r.ptr);
  };
  if (kind == Kind::Function) {
    k += "fn ";
    num(fn);
    k += ' ';
    k += name;
    for (auto s : statics) {
      k += " #";
      num(s);
    }
  } else {
    k += "op ";
    num(static_cast<int>(op));
    for (auto a : attr.ints) {
      k += " @";
      num(a);
    }
  }
  for (auto p : param_args) {
    k += " =";
    num(p);
  }
  for (size_t i = 0; i < const_args.size(); ++i)
    if (const_args[i].defined()) { // the argument's position and its bytes (a few hundred)
      k += " ~";
      num(static_cast<int64_t>(i));
      k += ':';
      k.append(static_cast<const char*>(const_args[i].raw()), const_args[i].nbytes());
    }
  k += " (";
  for (const auto& a : args) { // TensorSig::str(), then a comma
    k += dtype_name(a.dtype);
    k += '[';
    for (size_t i = 0; i < a.dims.size(); ++i) {
      if (i)
        k += ", ";
      num(a.dims[i]);
    }
    k += "],";
  }
  k += ')';
  return k;
}

uint64_t Template::hash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
  mix(static_cast<uint64_t>(kind));
  mix(static_cast<uint64_t>(fn));
  mix(static_cast<uint64_t>(op));
  for (auto a : attr.ints)
    mix(static_cast<uint64_t>(a));
  mix(0xff);
  for (auto s : statics)
    mix(static_cast<uint64_t>(s));
  mix(0xfe);
  for (auto p : param_args)
    mix(static_cast<uint64_t>(p));
  mix(0xfc);
  for (const auto& c : const_args)
    mix(c.defined() ? const_hash(c) : 0);
  mix(0xfb);
  for (const auto& a : args) {
    mix(static_cast<uint64_t>(a.dtype));
    for (auto d : a.dims)
      mix(static_cast<uint64_t>(d));
    mix(0xfd);
  }
  return h;
}

bool Template::same_as(const Template& o) const {
  return kind == o.kind && fn == o.fn && (kind != Kind::Op || (op == o.op && attr == o.attr)) &&
         statics == o.statics && args == o.args && param_args == o.param_args &&
         same_consts(const_args, o.const_args);
}

int32_t TemplateTable::intern(Template t) {
  uint64_t h = t.hash();
  auto range = ids_.equal_range(h);
  for (auto it = range.first; it != range.second; ++it)
    if (templates_[static_cast<size_t>(it->second)].same_as(t))
      return it->second;
  int32_t id = static_cast<int32_t>(templates_.size());
  ids_.emplace(h, id);
  templates_.push_back(std::move(t));
  return id;
}

size_t Residual::num_results(const TemplateTable& t, size_t inst) const {
  const Instance& i = instances[inst];
  return i.tmpl == Instance::kSumN ? 1 : t.at(i.tmpl).results.size();
}

namespace {

interp::Value build(std::span<const int64_t> shape, size_t& at, std::span<const Tensor> tensors,
                    size_t& next) {
  PEJIT_CHECK(at < shape.size()) << "result shape ends early";
  auto count = [&] {
    PEJIT_CHECK(at < shape.size()) << "result shape ends early";
    return static_cast<size_t>(shape[at++]);
  };
  auto items = [&](size_t n) {
    interp::Values xs;
    xs.reserve(n);
    for (size_t i = 0; i < n; ++i)
      xs.push_back(build(shape, at, tensors, next));
    return xs;
  };
  switch (shape[at++]) {
  case kResultTensor:
    PEJIT_CHECK(next < tensors.size()) << "result has more tensor leaves than outputs";
    return interp::Value::tensor(tensors[next++]);
  case kResultTuple:
    return interp::Value::tuple(items(count()));
  case kResultList:
    return interp::Value::list(items(count()));
  case kResultAdt: {
    auto tag = static_cast<int32_t>(count());
    return interp::Value::adt(tag, items(count()));
  }
  case kResultInt:
    return interp::Value::integer(static_cast<int64_t>(count()));
  case kResultBool:
    return interp::Value::boolean(count() != 0);
  default:
    PEJIT_CHECK(false) << "bad result shape code";
  }
  return {};
}

} // namespace

interp::Value build_result(std::span<const int64_t> result_shape, std::span<const Tensor> tensors) {
  size_t at = 0, next = 0;
  interp::Value v = build(result_shape, at, tensors, next);
  PEJIT_CHECK(at == result_shape.size() && next == tensors.size())
      << "result shape and outputs disagree";
  return v;
}

} // namespace pejit::specializer
