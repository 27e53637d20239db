// The batching schedule: levels, groups and row maps (see plan.h).
#include "specializer/plan.h"

#include "util/check.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace pejit::spec {

namespace {

// Group identity: level, template, and per argument whether and how it is shared.
struct GroupKey {
  int32_t level, tmpl;
  std::vector<int64_t> shared; ///< per arg: -1 not shared, else kind*2^32 + index
  bool operator<(const GroupKey& o) const {
    return std::tie(level, tmpl, shared) < std::tie(o.level, o.tmpl, o.shared);
  }
};

int64_t shared_code(const Ref& r) {
  if (r.kind == Ref::Kind::Param || r.kind == Ref::Kind::Const)
    return (static_cast<int64_t>(r.kind) << 32) + r.index;
  return -1;
}

} // namespace

Plan make_plan(const Residual& r, const TemplateTable& templates) {
  const size_t n = r.instances.size();
  Plan p;
  p.key = r.key;
  // Instances no output depends on are dropped (e.g. the state after a sequence's last step).
  std::vector<char> live(n, 0);
  for (const auto& o : r.outputs)
    if (o.kind == Ref::Kind::Inst) live[static_cast<size_t>(o.index)] = 1;
  for (size_t i = n; i-- > 0;)
    if (live[i])
      for (const auto& a : r.instances[i].args)
        if (a.kind == Ref::Kind::Inst) live[static_cast<size_t>(a.index)] = 1;
  std::vector<int32_t> level(n, 0);
  std::vector<char> feeds_template(n, 0);
  int32_t max_level = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!live[i]) continue;
    const Instance& inst = r.instances[i];
    int32_t l = 0;
    for (const auto& a : inst.args)
      if (a.kind == Ref::Kind::Inst) {
        PEJIT_CHECK(static_cast<size_t>(a.index) < i) << "instances out of order";
        l = std::max(l, level[static_cast<size_t>(a.index)] + 1);
        if (inst.tmpl != Instance::kSumN) feeds_template[static_cast<size_t>(a.index)] = 1;
      }
    level[i] = l;
    if (inst.tmpl != Instance::kSumN) max_level = std::max(max_level, l);
  }
  // Template instances that feed no other template call go to the last level.
  for (size_t i = 0; i < n; ++i)
    if (live[i] && r.instances[i].tmpl != Instance::kSumN && !feeds_template[i]) level[i] = max_level;
  // SumN instances come after every term; keep them after all template levels.
  for (size_t i = 0; i < n; ++i)
    if (live[i] && r.instances[i].tmpl == Instance::kSumN) {
      int32_t l = max_level + 1;
      for (const auto& a : r.instances[i].args)
        if (a.kind == Ref::Kind::Inst) l = std::max(l, level[static_cast<size_t>(a.index)] + 1);
      level[i] = l;
    }

  // Group instances, in (level, first appearance) order.
  std::map<GroupKey, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> order; // (level, group) for sorting
  p.group_of.assign(n, -1);
  p.row_of.assign(n, -1);
  std::vector<Group> groups;
  for (size_t i = 0; i < n; ++i) {
    if (!live[i]) continue;
    const Instance& inst = r.instances[i];
    GroupKey k{level[i], inst.tmpl, {}};
    if (inst.tmpl == Instance::kSumN) {
      k.shared.push_back(-2 - static_cast<int64_t>(i)); // each sum is its own group
    } else {
      for (const auto& a : inst.args) k.shared.push_back(shared_code(a));
    }
    auto [it, fresh] = ids.emplace(k, static_cast<int32_t>(groups.size()));
    if (fresh) {
      Group g;
      g.tmpl = inst.tmpl;
      g.level = level[i];
      if (inst.tmpl == Instance::kSumN) {
        g.results = {inst.sum_sig};
      } else {
        const Template& t = templates.at(inst.tmpl);
        g.results = t.results;
        for (size_t a = 0; a < inst.args.size(); ++a) {
          GroupArg ga;
          ga.shared = k.shared[a] >= 0;
          if (ga.shared) ga.shared_ref = inst.args[a];
          ga.sig = t.args[a];
          g.args.push_back(std::move(ga));
        }
      }
      groups.push_back(std::move(g));
    }
    Group& g = groups[static_cast<size_t>(it->second)];
    p.group_of[i] = it->second;
    p.row_of[i] = static_cast<int32_t>(g.instances.size());
    g.instances.push_back(static_cast<int32_t>(i));
  }

  // Execution order: by level, then by creation.
  std::vector<int32_t> perm(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) perm[g] = static_cast<int32_t>(g);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) {
    return groups[static_cast<size_t>(a)].level < groups[static_cast<size_t>(b)].level;
  });
  std::vector<int32_t> new_id(groups.size());
  for (size_t k = 0; k < perm.size(); ++k) new_id[static_cast<size_t>(perm[k])] = static_cast<int32_t>(k);
  for (auto& g : p.group_of)
    if (g >= 0) g = new_id[static_cast<size_t>(g)];
  for (int32_t g : perm) p.groups.push_back(std::move(groups[static_cast<size_t>(g)]));

  auto row_ref = [&](const Ref& a) {
    RowRef rr;
    rr.kind = a.kind;
    rr.index = a.index;
    if (a.kind == Ref::Kind::Inst) {
      rr.index = p.group_of[static_cast<size_t>(a.index)];
      rr.out = a.out;
      rr.row = p.row_of[static_cast<size_t>(a.index)];
    }
    return rr;
  };
  // Row maps of arguments that are not shared.
  for (auto& g : p.groups) {
    if (g.tmpl == Instance::kSumN) {
      const Instance& inst = r.instances[static_cast<size_t>(g.instances[0])];
      for (const auto& a : inst.args) {
        GroupArg ga;
        ga.sig = inst.sum_sig;
        ga.rows.push_back(row_ref(a));
        g.args.push_back(std::move(ga));
      }
      continue;
    }
    for (size_t a = 0; a < g.args.size(); ++a) {
      if (g.args[a].shared) continue;
      for (int32_t i : g.instances)
        g.args[a].rows.push_back(row_ref(r.instances[static_cast<size_t>(i)].args[a]));
    }
  }
  for (const auto& o : r.outputs) p.outputs.push_back(row_ref(o));
  p.levels = max_level + 1;
  return p;
}

std::string Plan::describe(const TemplateTable& t) const {
  std::ostringstream os;
  size_t rows = 0;
  for (const auto& g : groups) rows += g.instances.size();
  os << "plan key=" << std::hex << key << std::dec << " groups=" << groups.size()
     << " levels=" << levels << " instances=" << rows << "\n";
  auto name = [&](const Group& g) {
    return g.tmpl == Instance::kSumN ? std::string("sum") : t.at(g.tmpl).name;
  };
  auto kernel = [&](const Group& g, const char* dir) {
    std::string k = name(g) + "." + dir;
    if (g.tmpl == Instance::kSumN) k += std::to_string(g.args.size());
    return k;
  };
  for (const auto& g : groups)
    os << "launch fwd " << name(g) << " " << kernel(g, "fwd") << " rows="
       << (g.tmpl == Instance::kSumN ? g.args.size() : g.instances.size()) << " level=" << g.level
       << "\n";
  for (size_t k = groups.size(); k-- > 0;) {
    const auto& g = groups[k];
    os << "launch bwd " << name(g) << " " << kernel(g, "bwd") << " rows="
       << (g.tmpl == Instance::kSumN ? g.args.size() : g.instances.size()) << " level=" << g.level
       << "\n";
  }
  return os.str();
}

} // namespace pejit::spec
