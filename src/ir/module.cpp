// Module bookkeeping: definitions by name, versions, and dependency queries over a
// Boost.Graph of the definitions (an edge f -> g when f's body or signature mentions g).
#include "src/ir/module.h"

#include "src/util/check.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/reverse_graph.hpp>

#include <functional>

namespace pejit::ir {

const char* init_name(Init::Kind k) {
  switch (k) {
  case Init::Kind::Zeros:
    return "zeros";
  case Init::Kind::Ones:
    return "ones";
  case Init::Kind::Normal:
    return "normal";
  case Init::Kind::Uniform:
    return "uniform";
  case Init::Kind::Xavier:
    return "xavier";
  }
  return "?";
}

const std::string& Decl::name() const {
  switch (kind) {
  case DeclKind::Type:
    return type->name;
  case DeclKind::Dim:
    return dim->name;
  case DeclKind::Param:
    return param->name;
  case DeclKind::Fn:
    return fn->name;
  }
  PEJIT_CHECK(false) << "bad decl kind";
}

const Span& Decl::span() const {
  switch (kind) {
  case DeclKind::Type:
    return type->span;
  case DeclKind::Dim:
    return dim->span;
  case DeclKind::Param:
    return param->span;
  case DeclKind::Fn:
    return fn->span;
  }
  PEJIT_CHECK(false) << "bad decl kind";
}

namespace {
template <class T>
void put_indexed(std::vector<std::shared_ptr<const T>>& vec, std::map<std::string, int>& ix,
                 const std::string& name, std::shared_ptr<const T> p) {
  auto it = ix.find(name);
  if (it == ix.end()) {
    ix[name] = static_cast<int>(vec.size());
    vec.push_back(std::move(p));
  } else {
    vec[it->second] = std::move(p);
  }
}
} // namespace

bool Module::put(const Decl& d) {
  const std::string& name = d.name();
  std::string printed = print_decl(d);
  auto pv = printed_.find(name);
  bool changed = pv == printed_.end() || pv->second != printed;
  printed_[name] = printed;
  if (changed) {
    versions_[name] += 1;
    ++generation_;
  }
  bool replaced = false;
  for (auto& old : decls_)
    if (old.name() == name) {
      old = d;
      replaced = true;
    }
  if (!replaced)
    decls_.push_back(d);
  switch (d.kind) {
  case DeclKind::Type:
    put_indexed(adts_, adt_ix_, name, d.type);
    for (size_t c = 0; c < d.type->ctors.size(); ++c)
      ctor_ix_[d.type->ctors[c].name] = {adt_ix_[name], static_cast<int>(c)};
    break;
  case DeclKind::Dim:
    put_indexed(dims_, dim_ix_, name, d.dim);
    break;
  case DeclKind::Param:
    put_indexed(params_, param_ix_, name, d.param);
    break;
  case DeclKind::Fn:
    put_indexed(fns_, fn_ix_, name, d.fn);
    break;
  }
  return changed;
}

namespace {
int find_ix(const std::map<std::string, int>& m, const std::string& n) {
  auto it = m.find(n);
  return it == m.end() ? -1 : it->second;
}
} // namespace

int Module::fn_index(const std::string& n) const {
  return find_ix(fn_ix_, n);
}
int Module::adt_index(const std::string& n) const {
  return find_ix(adt_ix_, n);
}
int Module::param_index(const std::string& n) const {
  return find_ix(param_ix_, n);
}
int Module::dim_index(const std::string& n) const {
  return find_ix(dim_ix_, n);
}

std::pair<int, int> Module::ctor(const std::string& n) const {
  auto it = ctor_ix_.find(n);
  return it == ctor_ix_.end() ? std::pair{-1, -1} : it->second;
}

const FnDecl* Module::fn(const std::string& n) const {
  int i = fn_index(n);
  return i < 0 ? nullptr : fns_[i].get();
}

const TypeDecl* Module::adt(const std::string& n) const {
  int i = adt_index(n);
  return i < 0 ? nullptr : adts_[i].get();
}

std::vector<std::string> Module::entries() const {
  std::vector<std::string> out;
  for (const auto& f : fns_)
    if (f->is_entry)
      out.push_back(f->name);
  return out;
}

uint64_t Module::version(const std::string& n) const {
  auto it = versions_.find(n);
  return it == versions_.end() ? 0 : it->second;
}

void Module::set_uses(const std::string& fn, std::set<std::string> uses) {
  uses_[fn] = std::move(uses);
}

const std::set<std::string>& Module::uses(const std::string& fn) const {
  static const std::set<std::string> kNone;
  auto it = uses_.find(fn);
  return it == uses_.end() ? kNone : it->second;
}

namespace {
using DepGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

struct Indexed {
  DepGraph g;
  std::vector<std::string> names;
  std::map<std::string, size_t> ix;
  size_t id(const std::string& n) {
    auto [it, fresh] = ix.emplace(n, names.size());
    if (fresh) {
      names.push_back(n);
      boost::add_vertex(g);
    }
    return it->second;
  }
};

class Collect : public boost::default_bfs_visitor {
public:
  explicit Collect(std::vector<size_t>& out) : out_(&out) {}
  void discover_vertex(size_t v, const DepGraph&) const { out_->push_back(v); }
  void discover_vertex(size_t v, const boost::reverse_graph<DepGraph>&) const {
    out_->push_back(v);
  }

private:
  std::vector<size_t>* out_;
};

// Edges from each definition to what it mentions: function bodies (from the checker), and
// the ADTs named by parameter, field and signature types.
Indexed build_graph(const Module& m) {
  Indexed ix;
  std::function<void(size_t, const Type&)> type_edges = [&](size_t from, const Type& t) {
    if (!t)
      return;
    if (t->kind == TypeKind::Adt)
      boost::add_edge(from, ix.id(t->name), ix.g);
    if (t->kind == TypeKind::Tensor)
      for (const auto& d : t->dims)
        for (const auto& term : d.terms)
          boost::add_edge(from, ix.id(term.name), ix.g);
    for (const auto& e : t->elems)
      type_edges(from, e);
    type_edges(from, t->result);
  };
  for (const auto& d : m.decls())
    ix.id(d.name());
  for (const auto& d : m.decls()) {
    size_t v = ix.id(d.name());
    switch (d.kind) {
    case DeclKind::Type:
      for (const auto& c : d.type->ctors)
        for (const auto& f : c.fields)
          type_edges(v, f.type);
      break;
    case DeclKind::Dim:
      break;
    case DeclKind::Param:
      type_edges(v, d.param->type);
      break;
    case DeclKind::Fn:
      for (const auto& p : d.fn->params)
        type_edges(v, p.type);
      type_edges(v, d.fn->ret);
      for (const auto& u : m.uses(d.name()))
        boost::add_edge(v, ix.id(u), ix.g);
      break;
    }
  }
  return ix;
}
} // namespace

std::set<std::string> Module::dependency_cone(const std::string& name) const {
  Indexed ix = build_graph(*this);
  std::set<std::string> out;
  auto it = ix.ix.find(name);
  if (it == ix.ix.end())
    return out;
  std::vector<size_t> seen;
  boost::breadth_first_search(ix.g, it->second, boost::visitor(Collect(seen)));
  for (size_t v : seen)
    out.insert(ix.names[v]);
  return out;
}

std::vector<std::string> Module::affected_entries(const std::vector<std::string>& changed) const {
  Indexed ix = build_graph(*this);
  auto rev = boost::make_reverse_graph(ix.g);
  std::set<size_t> hit;
  for (const auto& c : changed) {
    auto it = ix.ix.find(c);
    if (it == ix.ix.end())
      continue;
    std::vector<size_t> seen;
    boost::breadth_first_search(rev, it->second, boost::visitor(Collect(seen)));
    hit.insert(seen.begin(), seen.end());
  }
  std::vector<std::string> out;
  for (const auto& e : entries())
    if (hit.count(ix.id(e)))
      out.push_back(e);
  return out;
}

uint64_t Module::cone_version(const std::string& entry) const {
  uint64_t h = 1469598103934665603ull;
  for (const auto& n : dependency_cone(entry)) {
    for (char c : n)
      h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    h = (h ^ version(n)) * 1099511628211ull;
  }
  return h;
}

} // namespace pejit::ir
