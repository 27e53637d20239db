// Template interning and printing helpers of the residual program.
#include "specializer/residual.h"

#include "util/check.h"

#include <sstream>

namespace pejit::spec {

std::string TensorSig::str() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

std::string Template::key() const {
  std::ostringstream os;
  if (kind == Kind::Function) {
    os << "fn " << fn << " " << name;
    for (auto s : statics) os << " #" << s;
  } else {
    os << "op " << static_cast<int>(op);
    for (auto a : attr.ints) os << " @" << a;
  }
  os << " (";
  for (const auto& a : args) os << a.str() << ",";
  os << ")";
  return os.str();
}

int32_t TemplateTable::intern(Template t) {
  auto [it, fresh] = ids_.emplace(t.key(), static_cast<int32_t>(templates_.size()));
  if (fresh) templates_.push_back(std::move(t));
  return it->second;
}

size_t Residual::num_results(const TemplateTable& t, size_t inst) const {
  const Instance& i = instances[inst];
  return i.tmpl == Instance::kSumN ? 1 : t.at(i.tmpl).results.size();
}

} // namespace pejit::spec
