// The batching schedule: levels, groups and row maps (see plan.h).
#include "specializer/plan.h"

#include "specializer/key_map.h"
#include "util/check.h"

#include <algorithm>
#include <sstream>

namespace pejit::spec {

namespace {

// Group identity, as a KeyMap key: (level, template, per argument -1 when not shared, else
// kind*2^32 + index); a SumN instance i is its own group (-2 - i in place of the arguments).
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
    if (o.kind == Ref::Kind::Inst)
      live[static_cast<size_t>(o.index)] = 1;
  for (size_t i = n; i-- > 0;)
    if (live[i])
      for (const auto& a : r.instances[i].args)
        if (a.kind == Ref::Kind::Inst)
          live[static_cast<size_t>(a.index)] = 1;
  // Earliest levels (ASAP), and which instances feed a template call.
  std::vector<int32_t> level(n, 0), latest(n, 0);
  std::vector<char> feeds_template(n, 0);
  int32_t max_level = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!live[i])
      continue;
    const Instance& inst = r.instances[i];
    int32_t l = 0;
    for (const auto& a : inst.args)
      if (a.kind == Ref::Kind::Inst) {
        PEJIT_CHECK(static_cast<size_t>(a.index) < i) << "instances out of order";
        l = std::max(l, level[static_cast<size_t>(a.index)] + 1);
        if (inst.tmpl != Instance::kSumN)
          feeds_template[static_cast<size_t>(a.index)] = 1;
      }
    level[i] = l;
    max_level = std::max(max_level, l);
  }
  // Latest levels (ALAP) under the same depth.
  for (size_t i = 0; i < n; ++i)
    latest[i] = max_level;
  for (size_t i = n; i-- > 0;) {
    if (!live[i])
      continue;
    for (const auto& a : r.instances[i].args)
      if (a.kind == Ref::Kind::Inst)
        latest[static_cast<size_t>(a.index)] =
            std::min(latest[static_cast<size_t>(a.index)], latest[i] - 1);
  }
  // Final levels, in instance order so that every consumer follows its producers: an
  // instance that feeds no template call (the per-node loss, the sums) goes to the end of its
  // window, the others to the start.
  for (size_t i = 0; i < n; ++i) {
    if (!live[i])
      continue;
    int32_t l = 0;
    for (const auto& a : r.instances[i].args)
      if (a.kind == Ref::Kind::Inst)
        l = std::max(l, level[static_cast<size_t>(a.index)] + 1);
    level[i] = feeds_template[i] ? l : std::max(l, latest[i]);
  }
  max_level = 0;
  for (size_t i = 0; i < n; ++i)
    if (live[i] && r.instances[i].tmpl != Instance::kSumN)
      max_level = std::max(max_level, level[i]);

  // Group instances, in (level, first appearance) order.
  KeyMap ids;
  std::vector<int64_t> k;
  p.group_of.assign(n, -1);
  p.row_of.assign(n, -1);
  std::vector<Group> groups;
  for (size_t i = 0; i < n; ++i) {
    if (!live[i])
      continue;
    const Instance& inst = r.instances[i];
    k.clear();
    k.push_back(level[i]);
    k.push_back(inst.tmpl);
    if (inst.tmpl == Instance::kSumN) {
      k.push_back(-2 - static_cast<int64_t>(i)); // each sum is its own group
    } else {
      for (const auto& a : inst.args)
        k.push_back(shared_code(a));
    }
    auto [gid, fresh] = ids.emplace(k, static_cast<int32_t>(groups.size()));
    if (fresh) {
      Group g;
      g.tmpl = inst.tmpl;
      g.level = level[i];
      if (inst.tmpl == Instance::kSumN) {
        g.results = {inst.sum_sig};
      } else {
        const Template& t = templates.at(inst.tmpl);
        g.results = t.results;
        g.args.reserve(inst.args.size());
        for (size_t a = 0; a < inst.args.size(); ++a) {
          GroupArg ga;
          ga.shared = k[2 + a] >= 0;
          if (ga.shared)
            ga.shared_ref = inst.args[a];
          ga.sig = t.args[a];
          g.args.push_back(std::move(ga));
        }
      }
      groups.push_back(std::move(g));
    }
    Group& g = groups[static_cast<size_t>(gid)];
    p.group_of[i] = gid;
    p.row_of[i] = static_cast<int32_t>(g.instances.size());
    g.instances.push_back(static_cast<int32_t>(i));
  }

  // Execution order: by level, then by creation.
  std::vector<int32_t> perm(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    perm[g] = static_cast<int32_t>(g);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) {
    return groups[static_cast<size_t>(a)].level < groups[static_cast<size_t>(b)].level;
  });
  std::vector<int32_t> new_id(groups.size());
  for (size_t k = 0; k < perm.size(); ++k)
    new_id[static_cast<size_t>(perm[k])] = static_cast<int32_t>(k);
  for (auto& g : p.group_of)
    if (g >= 0)
      g = new_id[static_cast<size_t>(g)];
  for (int32_t g : perm)
    p.groups.push_back(std::move(groups[static_cast<size_t>(g)]));

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
      g.args.reserve(inst.args.size());
      for (const auto& a : inst.args) {
        GroupArg ga;
        ga.sig = inst.sum_sig;
        ga.rows.push_back(row_ref(a));
        g.args.push_back(std::move(ga));
      }
      continue;
    }
    for (size_t a = 0; a < g.args.size(); ++a) {
      if (g.args[a].shared)
        continue;
      g.args[a].rows.reserve(g.instances.size());
      for (int32_t i : g.instances)
        g.args[a].rows.push_back(row_ref(r.instances[static_cast<size_t>(i)].args[a]));
    }
  }
  p.outputs.reserve(r.outputs.size());
  for (const auto& o : r.outputs)
    p.outputs.push_back(row_ref(o));
  p.levels = max_level + 1;
  return p;
}

std::string Plan::describe(const TemplateTable& t) const {
  std::ostringstream os;
  size_t rows = 0;
  for (const auto& g : groups)
    rows += g.instances.size();
  os << "plan key=" << std::hex << key << std::dec << " groups=" << groups.size()
     << " levels=" << levels << " instances=" << rows << "\n";
  auto name = [&](const Group& g) {
    return g.tmpl == Instance::kSumN ? std::string("sum") : t.at(g.tmpl).name;
  };
  auto kernel = [&](const Group& g, const char* dir) {
    std::string k = name(g) + "." + dir;
    if (g.tmpl == Instance::kSumN)
      k += std::to_string(g.args.size());
    return k;
  };
  for (const auto& g : groups)
    os << "launch fwd " << name(g) << " " << kernel(g, "fwd")
       << " rows=" << (g.tmpl == Instance::kSumN ? g.args.size() : g.instances.size())
       << " level=" << g.level << "\n";
  for (size_t k = groups.size(); k-- > 0;) {
    const auto& g = groups[k];
    os << "launch bwd " << name(g) << " " << kernel(g, "bwd")
       << " rows=" << (g.tmpl == Instance::kSumN ? g.args.size() : g.instances.size())
       << " level=" << g.level << "\n";
  }
  return os.str();
}

} // namespace pejit::spec
