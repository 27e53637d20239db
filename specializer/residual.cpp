// Template interning and printing helpers of the residual program.
#include "specializer/residual.h"

#include "util/check.h"

#include <sstream>

namespace pejit::spec {

std::string TensorSig::str() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (size_t i = 0; i < dims.size(); ++i)
    os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

std::string Template::key() const {
  std::ostringstream os;
  if (kind == Kind::Function) {
    os << "fn " << fn << " " << name;
    for (auto s : statics)
      os << " #" << s;
  } else {
    os << "op " << static_cast<int>(op);
    for (auto a : attr.ints)
      os << " @" << a;
  }
  os << " (";
  for (const auto& a : args)
    os << a.str() << ",";
  os << ")";
  return os.str();
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
         statics == o.statics && args == o.args;
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

} // namespace pejit::spec
