// Python objects to pejit values and back, directed by the model's types: the same Python int
// is an i32 scalar in a `word: i32[]` field and an Int where the language wants an Int.
#include "python/src/ext.h"

#include "runtime/session_access.h"
#include "src/ir/type.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>

namespace pejit::python {

using interp::Value;
using runtime::SessionAccess;

std::unique_lock<std::recursive_mutex> PySession::lock() {
  std::unique_lock<std::recursive_mutex> l(mu_, std::try_to_lock);
  if (!l.owns_lock()) {
    py::gil_scoped_release nogil;
    l.lock();
  }
  return l;
}

const ir::Module& PySession::module() const {
  return SessionAccess::module(s);
}

ir::Type PySession::batch_element(const std::string& entry) const {
  return runtime::batch_element_type(module(), entry);
}

const runtime::TreeEncoder& PySession::encoder(const std::string& adt) {
  if (!enc_ || enc_adt_ != adt || enc_gen_ != module().generation()) {
    enc_.emplace(module(), adt);
    enc_adt_ = adt;
    enc_gen_ = module().generation();
  }
  return *enc_;
}

std::string PySession::batch_stamp(const ir::Type& elem) const {
  std::string stamp = ir::type_str(elem);
  for (const auto& adt : module().adts())
    stamp += " " + adt->name + "#" + std::to_string(module().version(adt->name));
  return stamp;
}

std::vector<PySession::Kept>::iterator
PySession::find_kept(const std::shared_ptr<const PyDataset>& ds, const std::string& entry,
                     const std::string& stamp) {
  std::erase_if(kept_, [](const Kept& x) { return x.data.expired(); });
  auto it = std::find_if(kept_.begin(), kept_.end(),
                         [&](const Kept& x) { return x.data.lock() == ds && x.entry == entry; });
  if (it != kept_.end() && (it->size != ds->size() || it->stamp != stamp)) {
    kept_.erase(it); // a limit() since, or a changed batch type
    it = kept_.end();
  }
  return it;
}

Value PySession::encode(const std::shared_ptr<const PyDataset>& ds, const int64_t* idx, size_t n,
                        const std::string& entry) {
  if (!ds)
    throw Error("batch: no data set");
  std::vector<size_t> at(n);
  for (size_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || static_cast<size_t>(idx[i]) >= ds->size())
      throw Error("example index " + std::to_string(idx[i]) + " out of range (the data set has " +
                  std::to_string(ds->size()) + ")");
    at[i] = static_cast<size_t>(idx[i]);
  }
  const ir::Type elem = batch_element(entry);
  if (ds->is_trees && elem->kind != ir::TypeKind::Adt)
    throw Error("entry '" + entry + "' takes batches of " + ir::type_str(elem) +
                ", the data set holds trees");
  const std::string stamp = batch_stamp(elem);
  auto it = find_kept(ds, entry, stamp);
  if (it == kept_.end()) {
    // The data sets of a training loop and a few more.
    constexpr size_t kKept = 4;
    if (kept_.size() >= kKept)
      kept_.erase(kept_.begin());
    Kept x;
    x.data = ds;
    x.size = ds->size();
    x.stamp = stamp;
    x.entry = entry;
    x.examples =
        std::make_shared<Examples>(module(), *ds, elem, SessionAccess::dims(s), retired_encoded_);
    kept_.push_back(std::move(x));
    it = kept_.end() - 1;
  }
  std::rotate(it, it + 1, kept_.end());
  return kept_.back().examples->kept.batch(at, 0, n);
}

int64_t PySession::encoded_examples() const {
  std::vector<const Examples*> live; // each once: a scoring set may share encode()'s
  for (const Kept& k : kept_)
    live.push_back(k.examples.get());
  for (const Scored& x : scored_)
    if (x.examples)
      live.push_back(x.examples.get());
  std::sort(live.begin(), live.end());
  live.erase(std::unique(live.begin(), live.end()), live.end());
  int64_t n = retired_encoded_;
  for (const Examples* e : live)
    n += e->kept.encoded();
  return n;
}

namespace {

template <typename T> Tensor to_tensor(py::handle o, const ir::Type& t, const std::string& where) {
  auto a = py::array_t < T, py::array::c_style | py::array::forcecast > ::ensure(o);
  if (!a)
    throw Error(where + ": expected a " + ir::type_str(t) + " (a number or an array), got " +
                std::string(py::str(py::type::of(o).attr("__name__"))));
  std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
  if (shape.size() != t->dims.size())
    throw Error(where + ": expected a " + ir::type_str(t) + ", got an array of rank " +
                std::to_string(shape.size()));
  std::span<const T> data(a.data(), static_cast<size_t>(a.size()));
  Shape s{std::span<const int64_t>(shape)};
  if constexpr (std::is_same_v<T, float>)
    return Tensor::from_f32(s, data);
  else
    return Tensor::from_i32(s, data);
}

std::string type_name(py::handle o) {
  return py::str(py::type::of(o).attr("__name__"));
}

} // namespace

Value to_value(PySession& ps, py::handle o, const ir::Type& t, const std::string& where) {
  if (py::isinstance<PyValue>(o))
    return SessionAccess::unwrap(o.cast<PyValue&>().v);
  switch (t->kind) {
  case ir::TypeKind::Tensor:
    if (py::isinstance<py::bool_>(o))
      throw Error(where + ": expected a " + ir::type_str(t) + ", got a bool");
    if (t->elem == ir::Elem::F32)
      return Value::tensor(to_tensor<float>(o, t, where));
    if (py::isinstance<py::float_>(o))
      throw Error(where + ": expected a " + ir::type_str(t) + " (integers), got a float");
    return Value::tensor(to_tensor<int32_t>(o, t, where));
  case ir::TypeKind::Int:
    if (!py::isinstance<py::int_>(o) || py::isinstance<py::bool_>(o))
      throw Error(where + ": expected an Int, got " + type_name(o));
    return Value::integer(o.cast<int64_t>());
  case ir::TypeKind::Bool:
    if (!py::isinstance<py::bool_>(o))
      throw Error(where + ": expected a Bool, got " + type_name(o));
    return Value::boolean(o.cast<bool>());
  case ir::TypeKind::Tuple: {
    if (!py::isinstance<py::tuple>(o) && !py::isinstance<py::list>(o))
      throw Error(where + ": expected a tuple " + ir::type_str(t) + ", got " + type_name(o));
    auto seq = py::reinterpret_borrow<py::sequence>(o);
    if (seq.size() != t->elems.size())
      throw Error(where + ": expected a tuple of " + std::to_string(t->elems.size()) +
                  " elements, got " + std::to_string(seq.size()));
    interp::Values xs;
    for (size_t i = 0; i < seq.size(); ++i)
      xs.push_back(to_value(ps, seq[i], t->elems[i], where + "." + std::to_string(i)));
    return Value::tuple(std::move(xs));
  }
  case ir::TypeKind::List: {
    if (py::isinstance<py::str>(o) || !py::isinstance<py::sequence>(o))
      throw Error(where + ": expected a list " + ir::type_str(t) + ", got " + type_name(o));
    auto seq = py::reinterpret_borrow<py::sequence>(o);
    interp::Values xs;
    xs.reserve(seq.size());
    for (size_t i = 0; i < seq.size(); ++i)
      xs.push_back(to_value(ps, seq[i], t->elems[0], where + "[" + std::to_string(i) + "]"));
    return Value::list(std::move(xs));
  }
  case ir::TypeKind::Adt: {
    if (py::isinstance<PyTree>(o))
      return ps.encoder(t->name).encode(o.cast<PyTree&>().t);
    // ("Ctor", field, ...): a constructor by name, its fields converted by their types.
    if (py::isinstance<py::tuple>(o)) {
      auto tup = py::reinterpret_borrow<py::tuple>(o);
      if (tup.size() >= 1 && py::isinstance<py::str>(tup[0])) {
        std::string ctor = tup[0].cast<std::string>();
        auto [a, c] = ps.module().ctor(ctor);
        if (a < 0)
          throw Error(where + ": the model has no constructor '" + ctor + "'");
        const auto& decl = *ps.module().adts()[static_cast<size_t>(a)];
        if (decl.name != t->name)
          throw Error(where + ": expected a " + t->name + ", constructor " + ctor + " makes a " +
                      decl.name);
        const auto& def = decl.ctors[static_cast<size_t>(c)];
        if (def.fields.size() + 1 != tup.size())
          throw Error(where + ": constructor " + ctor + " has " +
                      std::to_string(def.fields.size()) + " fields, got " +
                      std::to_string(tup.size() - 1));
        std::vector<pejit::Value> fields;
        for (size_t i = 0; i < def.fields.size(); ++i)
          fields.push_back(SessionAccess::wrap(
              to_value(ps, tup[i + 1], def.fields[i].type, where + "." + def.fields[i].name)));
        return SessionAccess::unwrap(ps.s.make(ctor, fields));
      }
    }
    throw Error(where + ": expected a " + t->name +
                " (a pejit.Value from Session.make, a pejit.Tree, or a tuple (\"Ctor\", "
                "fields...)), got " +
                type_name(o));
  }
  default:
    throw Error(where + ": values of type " + ir::type_str(t) + " cannot come from Python");
  }
}

py::object from_value(const Value& v) {
  switch (v.kind()) {
  case Value::Kind::Int:
    return py::int_(v.as_int());
  case Value::Kind::Bool:
    return py::bool_(v.as_bool());
  case Value::Kind::Tensor: {
    const Tensor& t = v.as_tensor();
    auto d = t.shape().dims();
    if (d.empty())
      return t.dtype() == DType::F32 ? py::object(py::float_(t.item_f32()))
                                     : py::object(py::int_(t.item_i32()));
    std::vector<py::ssize_t> shape(d.begin(), d.end());
    if (t.dtype() == DType::F32) {
      py::array_t<float> a(shape);
      std::copy(t.f32(), t.f32() + t.numel(), a.mutable_data());
      return a;
    }
    py::array_t<int32_t> a(shape);
    std::copy(t.i32(), t.i32() + t.numel(), a.mutable_data());
    return a;
  }
  case Value::Kind::Tuple: {
    py::tuple out(v.items().size());
    for (size_t i = 0; i < v.items().size(); ++i)
      out[i] = from_value(v.items()[i]);
    return out;
  }
  case Value::Kind::List: {
    py::list out(v.list_size());
    for (size_t i = 0; i < v.list_size(); ++i)
      out[i] = from_value(v.list_at(i));
    return out;
  }
  default:
    return py::cast(PyValue{SessionAccess::wrap(v)});
  }
}

} // namespace pejit::python
