// Construction, equality and printing of types.
#include "src/ir/type.h"

#include <sstream>

namespace pejit::ir {

const char* elem_name(Elem e) {
  return e == Elem::F32 ? "f32" : "i32";
}

Dim Dim::operator+(const Dim& o) const {
  Dim r{value + o.value, {}};
  size_t i = 0, j = 0;
  while (i < terms.size() || j < o.terms.size()) {
    if (j == o.terms.size() || (i < terms.size() && terms[i].name < o.terms[j].name)) {
      r.terms.push_back(terms[i++]);
    } else if (i == terms.size() || o.terms[j].name < terms[i].name) {
      r.terms.push_back(o.terms[j++]);
    } else {
      int64_t c = terms[i].coeff + o.terms[j].coeff;
      if (c != 0)
        r.terms.push_back(Term{terms[i].name, c});
      ++i, ++j;
    }
  }
  return r;
}

Dim Dim::scaled(int64_t k) const {
  if (k == 0)
    return Dim::of(0);
  Dim r{value * k, terms};
  for (auto& t : r.terms)
    t.coeff *= k;
  return r;
}

std::optional<Dim> Dim::divided(int64_t n) const {
  if (n == 0 || value % n != 0)
    return std::nullopt;
  Dim r{value / n, terms};
  for (auto& t : r.terms) {
    if (t.coeff % n != 0)
      return std::nullopt;
    t.coeff /= n;
  }
  return r;
}

std::optional<int64_t>
Dim::eval(const std::function<std::optional<int64_t>(const std::string&)>& lookup) const {
  int64_t v = value;
  for (const auto& t : terms) {
    auto x = lookup(t.name);
    if (!x)
      return std::nullopt;
    v += t.coeff * *x;
  }
  return v;
}

std::string Dim::str() const {
  std::string s;
  for (const auto& t : terms) {
    if (t.coeff < 0)
      s += "-";
    else if (!s.empty())
      s += "+";
    int64_t c = t.coeff < 0 ? -t.coeff : t.coeff;
    if (c != 1)
      s += std::to_string(c) + "*";
    s += t.name;
  }
  if (s.empty())
    return std::to_string(value);
  if (value > 0)
    s += "+" + std::to_string(value);
  else if (value < 0)
    s += "-" + std::to_string(-value);
  return s;
}

namespace {
Type make(TypeKind k) {
  auto t = std::make_shared<TypeNode>();
  t->kind = k;
  return t;
}
} // namespace

Type t_tensor(Elem e, std::vector<Dim> dims) {
  auto t = std::make_shared<TypeNode>();
  t->kind = TypeKind::Tensor;
  t->elem = e;
  t->dims = std::move(dims);
  return t;
}

Type t_f32(std::vector<int64_t> dims) {
  std::vector<Dim> d;
  for (auto v : dims)
    d.push_back(Dim::of(v));
  return t_tensor(Elem::F32, std::move(d));
}

Type t_i32(std::vector<int64_t> dims) {
  std::vector<Dim> d;
  for (auto v : dims)
    d.push_back(Dim::of(v));
  return t_tensor(Elem::I32, std::move(d));
}

Type t_int() {
  static const Type t = make(TypeKind::Int);
  return t;
}
Type t_bool() {
  static const Type t = make(TypeKind::Bool);
  return t;
}
Type t_error() {
  static const Type t = make(TypeKind::Error);
  return t;
}

Type t_tuple(std::vector<Type> elems) {
  auto t = std::make_shared<TypeNode>();
  t->kind = TypeKind::Tuple;
  t->elems = std::move(elems);
  return t;
}

Type t_list(Type elem) {
  auto t = std::make_shared<TypeNode>();
  t->kind = TypeKind::List;
  t->elems = {std::move(elem)};
  return t;
}

Type t_adt(std::string name) {
  auto t = std::make_shared<TypeNode>();
  t->kind = TypeKind::Adt;
  t->name = std::move(name);
  return t;
}

Type t_func(std::vector<Type> params, Type result) {
  auto t = std::make_shared<TypeNode>();
  t->kind = TypeKind::Func;
  t->elems = std::move(params);
  t->result = std::move(result);
  return t;
}

bool is_error(const Type& t) {
  return !t || t->kind == TypeKind::Error;
}

bool type_equal(const Type& a, const Type& b) {
  if (is_error(a) || is_error(b))
    return true;
  if (a == b)
    return true;
  if (a->kind != b->kind)
    return false;
  switch (a->kind) {
  case TypeKind::Tensor:
    return a->elem == b->elem && a->dims == b->dims;
  case TypeKind::Int:
  case TypeKind::Bool:
  case TypeKind::Error:
    return true;
  case TypeKind::Adt:
    return a->name == b->name;
  case TypeKind::Func:
    if (!type_equal(a->result, b->result))
      return false;
    [[fallthrough]];
  case TypeKind::Tuple:
  case TypeKind::List:
    if (a->elems.size() != b->elems.size())
      return false;
    for (size_t i = 0; i < a->elems.size(); ++i)
      if (!type_equal(a->elems[i], b->elems[i]))
        return false;
    return true;
  }
  return false;
}

bool is_first_order(const Type& t) {
  if (!t)
    return true;
  if (t->kind == TypeKind::Func)
    return false;
  for (const auto& e : t->elems)
    if (!is_first_order(e))
      return false;
  return true;
}

std::string type_str(const Type& t) {
  if (!t)
    return "<none>";
  std::ostringstream os;
  switch (t->kind) {
  case TypeKind::Tensor: {
    os << elem_name(t->elem) << "[";
    for (size_t i = 0; i < t->dims.size(); ++i)
      os << (i ? ", " : "") << t->dims[i].str();
    os << "]";
    break;
  }
  case TypeKind::Int:
    return "Int";
  case TypeKind::Bool:
    return "Bool";
  case TypeKind::Error:
    return "<error>";
  case TypeKind::Adt:
    return t->name;
  case TypeKind::List:
    return "List[" + type_str(t->elems[0]) + "]";
  case TypeKind::Tuple:
    os << "(";
    for (size_t i = 0; i < t->elems.size(); ++i)
      os << (i ? ", " : "") << type_str(t->elems[i]);
    if (t->elems.size() == 1)
      os << ",";
    os << ")";
    break;
  case TypeKind::Func:
    os << "(";
    for (size_t i = 0; i < t->elems.size(); ++i)
      os << (i ? ", " : "") << type_str(t->elems[i]);
    os << ") -> " << type_str(t->result);
    break;
  }
  return os.str();
}

} // namespace pejit::ir
