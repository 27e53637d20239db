// Dimension binding, seeded parameter initialization and value checking.
#include "src/interp/params.h"

#include "src/interp/dim_attrs.h"
#include "src/types/builtins.h"
#include "src/util/check.h"

#include <cmath>
#include <cstdint>

namespace pejit::interp {

DimBindings bind_dims(const ir::Module& m, const DimBindings& overrides) {
  DimBindings out;
  for (const auto& [name, v] : overrides) {
    if (m.dim_index(name) < 0)
      throw Error("no dimension named '" + name + "' in the module");
    if (v < 1)
      throw Error("dimension " + name + " must be >= 1, got " + std::to_string(v));
  }
  for (const auto& d : m.dims()) {
    auto it = overrides.find(d->name);
    if (it != overrides.end())
      out[d->name] = it->second;
    else if (d->default_value)
      out[d->name] = *d->default_value;
    else
      throw Error("dimension " + d->name + " (" + d->span.str() + ") needs a size");
  }
  check_dim_attrs(m, out);
  return out;
}

Shape concrete_shape(const ir::Type& t, const DimBindings& dims) {
  PEJIT_CHECK(t && t->kind == ir::TypeKind::Tensor) << "not a tensor type";
  Shape s;
  for (const auto& d : t->dims) {
    if (!d.is_named()) {
      s.push_back(d.value);
      continue;
    }
    for (const auto& term : d.terms)
      if (!dims.count(term.name))
        throw Error("dimension " + term.name + " is not bound");
    int64_t v = *d.eval([&](const std::string& n) { return std::optional<int64_t>(dims.at(n)); });
    if (v < 0)
      throw Error("dimension " + d.str() + " is " + std::to_string(v) +
                  " with the bound sizes: negative");
    s.push_back(v);
  }
  return s;
}

int Params::index(const std::string& name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return static_cast<int>(i);
  return -1;
}

Params Params::clone() const {
  Params p;
  p.names = names;
  for (const auto& v : values)
    p.values.push_back(v.clone());
  return p;
}

namespace {

// splitmix64: a tiny, well-mixed generator whose output is the same everywhere.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300)
      u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s)
    h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

} // namespace

Params init_params(const ir::Module& m, const DimBindings& dims, uint64_t seed) {
  Params p;
  for (const auto& d : m.params()) {
    Shape s = concrete_shape(d->type, dims);
    Tensor t = Tensor::zeros(DType::F32, s);
    float* x = t.f32();
    Rng rng{seed * 0x9e3779b97f4a7c15ull ^ name_hash(d->name)};
    int64_t n = t.numel();
    switch (d->init.kind) {
    case ir::Init::Kind::Zeros:
      break;
    case ir::Init::Kind::Ones:
      for (int64_t i = 0; i < n; ++i)
        x[i] = 1.0f;
      break;
    case ir::Init::Kind::Normal:
      for (int64_t i = 0; i < n; ++i)
        x[i] = static_cast<float>(d->init.a + d->init.b * rng.normal());
      break;
    case ir::Init::Kind::Uniform:
      for (int64_t i = 0; i < n; ++i)
        x[i] = static_cast<float>(d->init.a + (d->init.b - d->init.a) * rng.uniform());
      break;
    case ir::Init::Kind::Xavier: {
      // Glorot uniform: fan_in = first dim, fan_out = last dim (row-vector convention x @ W).
      double fan_in = s.rank() >= 1 ? static_cast<double>(s[0]) : 1.0;
      double fan_out = s.rank() >= 2 ? static_cast<double>(s[s.rank() - 1]) : fan_in;
      double bound = std::sqrt(6.0 / (fan_in + fan_out));
      for (int64_t i = 0; i < n; ++i)
        x[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
      break;
    }
    }
    p.names.push_back(d->name);
    p.values.push_back(std::move(t));
  }
  return p;
}

// One walk with a work stack (no recursion: a batch may be any depth). Each value met is
// remembered with its parent and its step from it (".field", "[i]", ".i"), so that a mismatch
// names its path; the path itself is built only then.
void check_value(const Value& root, const ir::Type& root_type, const ir::Module& m,
                 const DimBindings& dims, const std::string& root_path) {
  struct Met {
    size_t parent;            // index in `met`; SIZE_MAX at the root
    size_t index;             // list position or tuple element
    const std::string* field; // or the ADT field's name
    bool list;
  };
  struct Pending {
    const Value* v;
    const ir::Type* t;
    Met step;
  };
  std::vector<Met> met;
  std::vector<Pending> todo{{&root, &root_type, {SIZE_MAX, 0, nullptr, false}}};
  while (!todo.empty()) {
    Pending it = todo.back();
    todo.pop_back();
    const Value& v = *it.v;
    const ir::Type& t = *it.t;
    const size_t here = met.size();
    met.push_back(it.step);
    auto fail = [&](const std::string& what) {
      std::vector<const Met*> steps;
      for (size_t i = here; met[i].parent != SIZE_MAX; i = met[i].parent)
        steps.push_back(&met[i]);
      std::string path = root_path;
      for (size_t k = steps.size(); k-- > 0;) {
        const Met& s = *steps[k];
        if (s.field)
          path += "." + *s.field;
        else if (s.list)
          path += "[" + std::to_string(s.index) + "]";
        else
          path += "." + std::to_string(s.index);
      }
      throw Error(path + ": expected " + ir::type_str(t) + ", got " + what);
    };
    switch (t->kind) {
    case ir::TypeKind::Int:
      if (v.kind() != Value::Kind::Int)
        fail(v.describe());
      break;
    case ir::TypeKind::Bool:
      if (v.kind() != Value::Kind::Bool)
        fail(v.describe());
      break;
    case ir::TypeKind::Tensor: {
      if (v.kind() != Value::Kind::Tensor || !v.as_tensor().defined())
        fail(v.describe());
      const Tensor& x = v.as_tensor();
      DType want = t->elem == ir::Elem::F32 ? DType::F32 : DType::I32;
      if (x.dtype() != want || x.shape() != concrete_shape(t, dims))
        fail(v.describe());
      break;
    }
    case ir::TypeKind::Tuple:
      if (v.kind() != Value::Kind::Tuple || v.items().size() != t->elems.size())
        fail(v.describe());
      for (size_t i = t->elems.size(); i-- > 0;) // first element on top: checked first
        todo.push_back({&v.items()[i], &t->elems[i], {here, i, nullptr, false}});
      break;
    case ir::TypeKind::List:
      if (v.kind() != Value::Kind::List)
        fail(v.describe());
      for (size_t i = v.list_size(); i-- > 0;)
        todo.push_back({&v.list_at(i), &t->elems[0], {here, i, nullptr, true}});
      break;
    case ir::TypeKind::Adt: {
      const ir::TypeDecl* adt = m.adt(t->name);
      PEJIT_CHECK(adt) << "unknown ADT " << t->name;
      if (v.kind() != Value::Kind::Adt || v.tag() < 0 ||
          static_cast<size_t>(v.tag()) >= adt->ctors.size())
        fail(v.describe());
      const auto& c = adt->ctors[static_cast<size_t>(v.tag())];
      if (v.items().size() != c.fields.size())
        fail(c.name + " with " + std::to_string(v.items().size()) + " fields");
      for (size_t i = c.fields.size(); i-- > 0;)
        todo.push_back({&v.items()[i], &c.fields[i].type, {here, i, &c.fields[i].name, false}});
      break;
    }
    case ir::TypeKind::Func:
      if (v.kind() != Value::Kind::Closure)
        fail(v.describe());
      break;
    case ir::TypeKind::Error:
      fail("a value of an ill-typed program");
    }
  }
}

} // namespace pejit::interp
