// Printing of templates, instances and plans.
#include "specializer/dump.h"

#include <map>
#include <sstream>

namespace pejit::specializer {

namespace {

std::string ref_str(const Ref& r, const ir::Module& m) {
  switch (r.kind) {
  case Ref::Kind::Input:
    return "in#" + std::to_string(r.index);
  case Ref::Kind::Param:
    return m.params()[static_cast<size_t>(r.index)]->name;
  case Ref::Kind::Const:
    return "c#" + std::to_string(r.index);
  case Ref::Kind::Inst:
    return "%" + std::to_string(r.index) + "." + std::to_string(r.out);
  }
  return "?";
}

std::string inst_name(const Instance& i, const TemplateTable& t) {
  return i.tmpl == Instance::kSumN ? "sum" : t.at(i.tmpl).name;
}

} // namespace

std::string dump_templates(const Residual& r, const TemplateTable& t, const ir::Module& m) {
  std::map<int32_t, int> uses;
  for (const auto& i : r.instances)
    uses[i.tmpl]++;
  std::ostringstream os;
  os << "templates: " << t.size() << "\n";
  for (size_t k = 0; k < t.size(); ++k) {
    const Template& tp = t.at(static_cast<int32_t>(k));
    os << "template " << tp.name;
    if (!tp.statics.empty()) {
      os << " [";
      for (size_t s = 0; s < tp.statics.size(); ++s)
        os << (s ? ", " : "") << tp.statics[s];
      os << "]";
    }
    os << "(";
    for (size_t a = 0; a < tp.args.size(); ++a)
      os << (a ? ", " : "") << tp.args[a].str();
    os << ") -> (";
    for (size_t a = 0; a < tp.results.size(); ++a)
      os << (a ? ", " : "") << tp.results[a].str();
    os << ")  instances=" << uses[static_cast<int32_t>(k)] << "\n";
  }
  if (uses.count(Instance::kSumN))
    os << "sum (n-ary)  instances=" << uses[Instance::kSumN] << "\n";
  (void)m;
  return os.str();
}

std::string dump_instances(const Residual& r, const TemplateTable& t, const ir::Module& m) {
  std::ostringstream os;
  os << "instances: " << r.instances.size() << ", inputs: " << r.inputs.size()
     << ", constants: " << r.consts.size() << "\n";
  for (size_t i = 0; i < r.instances.size(); ++i) {
    const Instance& inst = r.instances[i];
    os << "%" << i << " = " << inst_name(inst, t) << "(";
    auto args = r.args(inst);
    for (size_t a = 0; a < args.size(); ++a)
      os << (a ? ", " : "") << ref_str(args[a], m);
    os << ")\n";
  }
  os << "return";
  for (size_t k = 0; k < r.outputs.size(); ++k)
    os << (k ? ", " : " ") << ref_str(r.outputs[k], m);
  os << "\n";
  return os.str();
}

std::string dump_dot(const Residual& r, const TemplateTable& t, const ir::Module& m) {
  std::ostringstream os;
  os << "digraph residual {\n  rankdir=BT;\n";
  for (size_t i = 0; i < r.instances.size(); ++i) {
    const Instance& inst = r.instances[i];
    os << "  n" << i << " [label=\"%" << i << " " << inst_name(inst, t) << "\"];\n";
    for (const auto& a : r.args(inst)) {
      if (a.kind == Ref::Kind::Inst)
        os << "  n" << a.index << " -> n" << i << ";\n";
      else if (a.kind == Ref::Kind::Param)
        os << "  \"" << ref_str(a, m) << "\" [shape=box];\n  \"" << ref_str(a, m) << "\" -> n" << i
           << ";\n";
    }
  }
  os << "}\n";
  return os.str();
}

std::string dump_counts(const Residual& r, const Plan& p, const TemplateTable& t) {
  std::map<std::string, std::pair<int, int64_t>> per; // groups, rows
  int64_t bytes = 0;
  for (const auto& g : p.groups) {
    std::string n = g.tmpl == Instance::kSumN ? "sum" : t.at(g.tmpl).name;
    per[n].first++;
    per[n].second +=
        static_cast<int64_t>(g.tmpl == Instance::kSumN ? g.args.size() : g.instances.size());
    for (const auto& res : g.results) {
      int64_t e = 1;
      for (auto d : res.dims)
        e *= d;
      bytes += e * 4 * static_cast<int64_t>(g.instances.size());
    }
  }
  std::ostringstream os;
  os << "instances=" << r.instances.size() << " groups=" << p.groups.size()
     << " levels=" << p.levels << " launches_fwd=" << p.groups.size()
     << " launches_bwd=" << p.groups.size() << " result_bytes=" << bytes << "\n";
  for (const auto& [n, c] : per)
    os << "  " << n << ": groups(fwd)=" << c.first << " groups(bwd)=" << c.first
       << " rows=" << c.second << "\n";
  return os.str();
}

} // namespace pejit::specializer
