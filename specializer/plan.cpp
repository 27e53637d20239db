// The batching schedule: levels and groups (see plan.h).
#include "specializer/plan.h"

#include "src/util/check.h"

#include <algorithm>
#include <span>
#include <sstream>

namespace pejit::specializer {

namespace {

// A shared argument's identity: kind*2^32 + index for a parameter or a constant (the same
// tensor for every row), -1 for an argument gathered row by row.
int64_t shared_code(const Ref& r) {
  if (r.kind == Ref::Kind::Param || r.kind == Ref::Kind::Const)
    return (static_cast<int64_t>(r.kind) << 32) + r.index;
  return -1;
}

// make_plan's working arrays, kept per thread and reused from plan to plan: planning a batch
// allocates only what the Plan keeps.
struct Scratch {
  std::vector<uint8_t> flags;
  std::vector<int32_t> level, latest, next_variant, perm, new_id, counts, heads, sum_heads;
  std::vector<const TensorSig*> sum_kinds;
  std::vector<Group> groups;
};

} // namespace

// Cost: a few linear passes over the instances and their arguments and one
// table lookup per instance, indexed by (level, template) only (no instance's final level
// exceeds the live instances' highest ASAP level, see below): instances of one template at
// one level whose shared arguments differ are told apart by walking that key's few groups.
// SumN instances are grouped by (level, sum signature) through a table of their own.
Plan make_plan(const Residual& r, const TemplateTable& templates) {
  const size_t n = r.instances.size();
  const Instance* insts = r.instances.data();
  const Ref* pool = r.arg_pool.data();
  auto args_of = [&](size_t i) {
    return std::span<const Ref>(pool + insts[i].first_arg, insts[i].num_args);
  };
  thread_local Scratch sc;
  Plan p;
  p.key = r.key;
  // Instances no output depends on are dropped (e.g. the state after a sequence's last step).
  enum : uint8_t { kLive = 1, kFeedsTemplate = 2 };
  // The working arrays through plain pointers: a store to the flags (bytes) may alias
  // anything, so the loops below would otherwise reload each thread_local vector's data
  // pointer after every flag they set.
  sc.flags.assign(n, 0);
  uint8_t* const flags = sc.flags.data();
  sc.level.resize(n);
  sc.latest.assign(n, 0); // heights, until the depth is known
  int32_t* const level = sc.level.data();
  int32_t* const latest = sc.latest.data();
  // One backward pass: liveness, which instances feed a template call, and each live
  // instance's height (its longest chain of live consumers; final when the pass reaches it,
  // since its consumers come after it). The depth, the live instances' highest ASAP level, is
  // the longest path among them, so their greatest height: every instance's latest level
  // (ALAP) under it is depth - height, with no forward pass for the ASAP levels.
  for (const auto& o : r.outputs)
    if (o.kind == Ref::Kind::Inst)
      flags[static_cast<size_t>(o.index)] = kLive;
  int32_t max_level = 0;
  for (size_t i = n; i-- > 0;) {
    if (!(flags[i] & kLive))
      continue;
    max_level = std::max(max_level, latest[i]);
    const uint8_t feeds =
        insts[i].tmpl == Instance::kSumN ? uint8_t{kLive} : uint8_t{kLive | kFeedsTemplate};
    for (const auto& a : args_of(i))
      if (a.kind == Ref::Kind::Inst) {
        auto ai = static_cast<size_t>(a.index);
        PEJIT_CHECK(ai < i) << "instances out of order";
        flags[ai] |= feeds;
        latest[ai] = std::max(latest[ai], latest[i] + 1);
      }
  }
  for (size_t i = 0; i < n; ++i)
    latest[i] = max_level - latest[i];

  // Final levels, in instance order so that every consumer follows its producers: an
  // instance that feeds no template call (the per-node loss, the sums) goes to the end of its
  // window, the others to the start, 1 + its producers' highest final level: a template
  // instance's producers feed a template, so they are at their own window's start (by
  // induction, their ASAP level unless a sum that was moved feeds a template upstream, and
  // then the start of the window that sum leaves them). In the same pass, instances are
  // grouped in (level, first appearance) order.
  // The first group of each (level, template): an instance's final level is at most
  // max_level - its height (by induction in instance order: a producer's height exceeds its
  // consumer's), so a table of (max_level + 1) x templates covers every key.
  const size_t num_tmpl = templates.size();
  const size_t num_levels = static_cast<size_t>(max_level) + 1;
  sc.heads.assign(num_levels * num_tmpl, -1);
  int32_t* const heads = sc.heads.data();
  // The SumN group of each (level, sum signature), by the signatures met so far (a few: a
  // node's state, the loss); a sum is at most at max_level + 1 (one past its highest term),
  // or, feeding no template, at its latest level.
  const size_t sum_levels = num_levels + 1;
  std::vector<const TensorSig*>& sum_kinds = sc.sum_kinds;
  sum_kinds.clear();
  sc.sum_heads.clear();
  auto sum_slot_of = [&](const Instance& inst, int32_t lv) -> int32_t* {
    if (lv < 0 || static_cast<size_t>(lv) >= sum_levels)
      return nullptr;
    const TensorSig& sig = r.sum_sigs[static_cast<size_t>(inst.sum_sig)];
    size_t k = 0;
    while (k < sum_kinds.size() && !(*sum_kinds[k] == sig))
      ++k;
    if (k == sum_kinds.size()) {
      sum_kinds.push_back(&sig);
      sc.sum_heads.resize(sc.sum_heads.size() + sum_levels, -1);
    }
    return &sc.sum_heads[k * sum_levels + static_cast<size_t>(lv)];
  };
  std::vector<Group>& groups = sc.groups;
  groups.clear();
  // Per group: the next group of its (level, template), and its instances so far.
  std::vector<int32_t>&next_variant = sc.next_variant, &counts = sc.counts;
  next_variant.clear();
  counts.clear();
  p.group_of.assign(n, -1);
  p.row_of.assign(n, -1);
  int32_t* const group_of = p.group_of.data();
  int32_t* const row_of = p.row_of.data();
  max_level = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!(flags[i] & kLive))
      continue;
    const Instance& inst = insts[i];
    auto args = args_of(i);
    const bool sum = inst.tmpl == Instance::kSumN;
    int32_t l = 0;
    for (const auto& a : args)
      if (a.kind == Ref::Kind::Inst)
        l = std::max(l, level[static_cast<size_t>(a.index)] + 1);
    level[i] = (flags[i] & kFeedsTemplate) ? l : std::max(l, latest[i]);
    if (!sum)
      max_level = std::max(max_level, level[i]);
    // This instance's group: of its (level, template), the one whose shared arguments are
    // its shared arguments.
    int32_t gid = -1, head = -1;
    int32_t* head_slot = nullptr;
    int32_t* sum_slot = sum ? sum_slot_of(inst, level[i]) : nullptr;
    if (sum_slot != nullptr)
      gid = *sum_slot;
    if (!sum) {
      PEJIT_CHECK(static_cast<size_t>(level[i]) < num_levels &&
                  static_cast<size_t>(inst.tmpl) < num_tmpl)
          << "instance level or template out of range";
      head_slot = &heads[static_cast<size_t>(level[i]) * num_tmpl + static_cast<size_t>(inst.tmpl)];
      head = *head_slot;
      for (int32_t g = head; g >= 0 && gid < 0; g = next_variant[static_cast<size_t>(g)]) {
        const auto& gargs = groups[static_cast<size_t>(g)].args;
        bool same = true;
        for (size_t a = 0; a < args.size() && same; ++a) {
          int64_t c = shared_code(args[a]);
          same = gargs[a].shared ? c >= 0 && gargs[a].shared_ref == args[a] : c < 0;
        }
        if (same)
          gid = g;
      }
    }
    if (gid < 0) {
      gid = static_cast<int32_t>(groups.size());
      Group& g = groups.emplace_back();
      g.tmpl = inst.tmpl;
      g.level = level[i];
      if (sum) {
        g.results = {r.sum_sigs[static_cast<size_t>(inst.sum_sig)]};
      } else {
        const Template& t = templates.at(inst.tmpl);
        g.results = t.results;
        g.args.resize(args.size());
        for (size_t a = 0; a < args.size(); ++a) {
          GroupArg& ga = g.args[a];
          ga.shared = shared_code(args[a]) >= 0;
          if (ga.shared)
            ga.shared_ref = args[a];
          ga.sig = t.args[a];
        }
      }
      next_variant.push_back(-1);
      counts.push_back(0);
      if (sum_slot != nullptr)
        *sum_slot = gid;
      if (!sum) {
        if (head < 0) {
          *head_slot = gid;
        } else { // second in its chain
          next_variant.back() = next_variant[static_cast<size_t>(head)];
          next_variant[static_cast<size_t>(head)] = gid;
        }
      }
    }
    group_of[i] = gid;
    row_of[i] = counts[static_cast<size_t>(gid)]++;
  }
  // Each group's instances, its rows in order, in one allocation.
  for (size_t g = 0; g < groups.size(); ++g)
    groups[g].instances.resize(static_cast<size_t>(counts[g]));
  for (size_t i = 0; i < n; ++i)
    if (group_of[i] >= 0)
      groups[static_cast<size_t>(group_of[i])].instances[static_cast<size_t>(row_of[i])] =
          static_cast<int32_t>(i);

  // Execution order: by level, then by creation.
  std::vector<int32_t>& perm = sc.perm;
  perm.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    perm[g] = static_cast<int32_t>(g);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) {
    return groups[static_cast<size_t>(a)].level < groups[static_cast<size_t>(b)].level;
  });
  std::vector<int32_t>& new_id = sc.new_id;
  new_id.resize(groups.size());
  for (size_t k = 0; k < perm.size(); ++k)
    new_id[static_cast<size_t>(perm[k])] = static_cast<int32_t>(k);
  for (size_t i = 0; i < n; ++i)
    if (group_of[i] >= 0)
      group_of[i] = new_id[static_cast<size_t>(group_of[i])];
  p.groups.reserve(groups.size());
  for (int32_t g : perm)
    p.groups.push_back(std::move(groups[static_cast<size_t>(g)]));

  // A SumN group's terms: one argument each (its signature; the rows are read from the
  // residual, GroupArg), row k's terms after row k - 1's: hundreds for a batch's loss, so a
  // scalar's empty dims are not copied term by term.
  for (auto& g : p.groups) {
    if (g.tmpl != Instance::kSumN)
      continue;
    const Instance& first = insts[static_cast<size_t>(g.instances[0])];
    const TensorSig& sig = r.sum_sigs[static_cast<size_t>(first.sum_sig)];
    size_t terms = 0;
    for (int32_t i : g.instances)
      terms += insts[static_cast<size_t>(i)].num_args;
    g.args.resize(terms);
    g.segments.resize(g.instances.size() + 1);
    size_t at = 0;
    for (size_t k = 0; k < g.instances.size(); ++k) {
      g.segments[k] = static_cast<int32_t>(at);
      const size_t end = at + insts[static_cast<size_t>(g.instances[k])].num_args;
      for (; at < end; ++at) {
        g.args[at].sig.dtype = sig.dtype;
        if (!sig.dims.empty())
          g.args[at].sig.dims = sig.dims;
      }
    }
    g.segments.back() = static_cast<int32_t>(at);
  }
  p.outputs.reserve(r.outputs.size());
  for (const auto& o : r.outputs)
    p.outputs.push_back(row_ref(p, o));
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

} // namespace pejit::specializer
