// fuse_kernels: greedy partition into anchor + epilogue kernels; see fuse_kernels.h.
#include "specializer/passes/fuse_kernels.h"

#include "src/graph/boost_adaptor.h"
#include "src/util/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <set>

namespace pejit::specializer::passes {

using graph::Graph;
using graph::Kind;
using graph::kNoNode;
using graph::Node;
using graph::NodeId;
using ops::OpId;

namespace {

enum class Role : uint8_t { Leaf, Anchor, Fusible };

// The registry's kernel class of an op or gradient helper node.
std::optional<ops::KernelClass> kernel_class(const Node& n) {
  if (n.kind == Kind::Op)
    return ops::op_def(n.op()).kernel;
  if (n.kind == Kind::Grad)
    return ops::grad_op_def(n.grad_op()).kernel;
  return std::nullopt;
}

// Moves whole column blocks of rows: a matmul may absorb a kernel of these as its prologue.
bool is_layout(const Node& n) {
  return kernel_class(n) == ops::KernelClass::Layout;
}

Role role_of(const Graph& g, const Node& n) {
  switch (n.kind) {
  case Kind::Input:
  case Kind::Const:
    return Role::Leaf;
  case Kind::SumN:
    return Role::Fusible;
  case Kind::Gather:
  case Kind::Scatter:
    return Role::Anchor;
  case Kind::Op:
  case Kind::Grad:
    break;
  }
  switch (*kernel_class(n)) {
  case ops::KernelClass::Elementwise:
  case ops::KernelClass::Layout:
  case ops::KernelClass::Expand:
  case ops::KernelClass::Fill:
    return Role::Fusible;
  case ops::KernelClass::ReduceToShape: // a reduction unless it only reshapes
    return g.type(n.operands[0]).numel() == n.type.numel() ? Role::Fusible : Role::Anchor;
  case ops::KernelClass::Rearrange:
  case ops::KernelClass::Reduction:
  case ops::KernelClass::GemmForward:
  case ops::KernelClass::GemmInputGrad:
  case ops::KernelClass::GemmWeightGrad:
    return Role::Anchor;
  }
  return Role::Anchor;
}

bool is_matmul_like(const Node& n) {
  auto k = kernel_class(n);
  return k == ops::KernelClass::GemmForward || k == ops::KernelClass::GemmInputGrad ||
         k == ops::KernelClass::GemmWeightGrad;
}

std::string dims_str(const std::vector<int64_t>& d) {
  return fmt::format("[{}]", fmt::join(d, "x"));
}

std::string name_of(const Node& n) {
  switch (n.kind) {
  case Kind::Op: {
    std::string s = ops::op_name(n.op());
    if (n.op() == OpId::Split)
      return s + std::to_string(n.attr.ints.at(0));
    if (!n.attr.ints.empty())
      s += fmt::format("{{{}}}", fmt::join(n.attr.ints, ","));
    return s;
  }
  case Kind::Grad: {
    std::string s = ops::grad_op_name(n.grad_op());
    if (!n.attr.ints.empty())
      s += fmt::format("{{{}}}", fmt::join(n.attr.ints, ","));
    return s;
  }
  default:
    return graph::kind_name(n.kind);
  }
}

class Fuser {
public:
  Fuser(const Graph& g, std::span<const NodeId> roots, const std::vector<bool>& available)
      : g_(g), roots_(roots.begin(), roots.end()) {
    std::vector<bool> need = graph::live(g, roots);
    in_set_.assign(g.size(), false);
    for (size_t i = 0; i < g.size(); ++i) {
      bool avail = i < available.size() && available[i];
      in_set_[i] = need[i] && !avail && role_of(g, g.nodes()[i]) != Role::Leaf;
    }
    users_.resize(g.size());
    std::vector<bool> all_live = graph::live(g);
    for (size_t i = 0; i < g.size(); ++i)
      if (all_live[i] || need[i])
        for (NodeId o : g.nodes()[i].operands)
          users_[static_cast<size_t>(o)].push_back(static_cast<NodeId>(i));
    kernel_of_.assign(g.size(), -1);
  }

  std::vector<Kernel> run() {
    for (size_t i = 0; i < g_.size(); ++i) {
      if (!in_set_[i])
        continue;
      auto id = static_cast<NodeId>(i);
      const Node& n = g_.node(id);
      if (role_of(g_, n) == Role::Anchor) {
        int k = open(id, id);
        if (is_matmul_like(n))
          absorb_prologues(k, n);
      } else {
        place_fusible(id, n);
      }
    }
    return finish();
  }

private:
  struct Group {
    std::vector<NodeId> nodes;
    NodeId anchor = kNoNode;
    bool alive = true;
  };

  const Graph& g_;
  std::vector<NodeId> roots_;
  std::vector<bool> in_set_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<int> kernel_of_;
  std::vector<Group> groups_;

  int open(NodeId first, NodeId anchor) {
    groups_.push_back(Group{{first}, anchor, true});
    int k = static_cast<int>(groups_.size() - 1);
    kernel_of_[static_cast<size_t>(first)] = k;
    return k;
  }

  int kernel(NodeId id) const {
    return in_set_[static_cast<size_t>(id)] ? kernel_of_[static_cast<size_t>(id)] : -1;
  }

  // Kernels that read a value of kernel k (direct successors).
  std::set<int> successors(int k) const {
    std::set<int> s;
    for (NodeId n : groups_[static_cast<size_t>(k)].nodes)
      for (NodeId u : users_[static_cast<size_t>(n)]) {
        int ku = kernel(u);
        if (ku >= 0 && ku != k)
          s.insert(ku);
      }
    return s;
  }

  // Every kernel reachable from `from` (itself excluded unless on a cycle).
  std::set<int> descendants(int from) const {
    std::set<int> seen;
    std::vector<int> work{from};
    while (!work.empty()) {
      int k = work.back();
      work.pop_back();
      for (int s : successors(k))
        if (seen.insert(s).second)
          work.push_back(s);
    }
    return seen;
  }

  bool reaches(int from, int to) const { return descendants(from).count(to) > 0; }

  // Whether merging kernels a and b keeps the kernel graph acyclic: no third kernel on a
  // path between them, either way.
  bool can_merge(int a, int b) const {
    for (auto [x, y] : {std::pair{a, b}, std::pair{b, a}})
      for (int m : descendants(x))
        if (m != y && reaches(m, y))
          return false;
    return true;
  }

  void merge(int from, int into) {
    Group& f = groups_[static_cast<size_t>(from)];
    Group& t = groups_[static_cast<size_t>(into)];
    for (NodeId n : f.nodes) {
      kernel_of_[static_cast<size_t>(n)] = into;
      t.nodes.push_back(n);
    }
    std::sort(t.nodes.begin(), t.nodes.end());
    if (t.anchor == kNoNode)
      t.anchor = f.anchor;
    f.nodes.clear();
    f.alive = false;
  }

  bool is_pure(int k, bool layout_only) const {
    const Group& gr = groups_[static_cast<size_t>(k)];
    if (gr.anchor != kNoNode)
      return false;
    if (!layout_only)
      return true;
    return std::all_of(gr.nodes.begin(), gr.nodes.end(),
                       [&](NodeId n) { return is_layout(g_.node(n)); });
  }

  void absorb_prologues(int k, const Node& n) {
    for (NodeId o : n.operands) {
      int c = kernel(o);
      if (c >= 0 && c != k && is_pure(c, true) && can_merge(c, k))
        merge(c, k);
    }
  }

  void place_fusible(NodeId id, const Node& n) {
    // Candidate kernels, the one holding the latest operand first.
    std::vector<int> cands;
    std::vector<NodeId> ops = n.operands;
    std::sort(ops.rbegin(), ops.rend());
    for (NodeId o : ops) {
      int k = kernel(o);
      if (k >= 0 && std::find(cands.begin(), cands.end(), k) == cands.end())
        cands.push_back(k);
    }
    for (int k : cands) {
      bool ok = true;
      for (int c : cands)
        if (c != k && reaches(k, c))
          ok = false;
      if (!ok)
        continue;
      kernel_of_[static_cast<size_t>(id)] = k;
      groups_[static_cast<size_t>(k)].nodes.push_back(id);
      for (int c : cands)
        if (c != k && groups_[static_cast<size_t>(c)].alive && is_pure(c, false) && can_merge(c, k))
          merge(c, k);
      return;
    }
    if (cands.empty()) {
      if (int k = sibling_kernel(id, n); k >= 0) {
        kernel_of_[static_cast<size_t>(id)] = k;
        groups_[static_cast<size_t>(k)].nodes.push_back(id);
        return;
      }
    }
    open(id, kNoNode);
  }

  // An elementwise node that reads no kernel's value (only inputs, and in a backward the
  // forward's values) and that no kernel reads (a result or a gradient) would be a chain of
  // its own: the first standalone chain that holds an elementwise node of its shape and reads
  // one of its operands of that shape (not a constant) takes it instead (one pass over the
  // shared values and one launch, not two; the child-sum forget gate's dc = dy * f beside the
  // gate gradient that reads dy).
  // It adds no edge between kernels, so their order and the other fusions stay as they were.
  // A node that a kernel reads is left to join its reader's kernel as before. -1: none.
  int sibling_kernel(NodeId id, const Node& n) const {
    if (kernel_class(n) != ops::KernelClass::Elementwise)
      return -1;
    for (NodeId u : users_[static_cast<size_t>(id)])
      if (in_set_[static_cast<size_t>(u)])
        return -1;
    for (NodeId o : n.operands) {
      if (g_.node(o).kind == Kind::Const || g_.node(o).type.dims != n.type.dims)
        continue;
      for (NodeId u : users_[static_cast<size_t>(o)]) {
        const int k = u < id ? kernel(u) : -1;
        if (k < 0 || !groups_[static_cast<size_t>(k)].alive || !is_pure(k, false))
          continue;
        for (NodeId m : groups_[static_cast<size_t>(k)].nodes)
          if (kernel_class(g_.node(m)) == ops::KernelClass::Elementwise &&
              g_.node(m).type.dims == n.type.dims && g_.node(m).type.dtype == n.type.dtype)
            return k;
      }
    }
    return -1;
  }

  std::vector<Kernel> finish() {
    // Topological order of the live kernels, ties by their smallest node id.
    std::vector<int> live;
    for (size_t k = 0; k < groups_.size(); ++k)
      if (groups_[k].alive)
        live.push_back(static_cast<int>(k));
    std::map<int, int> indeg;
    for (int k : live)
      indeg[k] = 0;
    for (int k : live)
      for (int s : successors(k))
        ++indeg[s];
    auto first = [&](int k) { return groups_[static_cast<size_t>(k)].nodes.front(); };
    auto later = [&](int a, int b) { return first(a) > first(b); };
    std::priority_queue<int, std::vector<int>, decltype(later)> ready(later);
    for (int k : live)
      if (indeg[k] == 0)
        ready.push(k);
    std::vector<Kernel> out;
    while (!ready.empty()) {
      int k = ready.top();
      ready.pop();
      out.push_back(describe(groups_[static_cast<size_t>(k)]));
      for (int s : successors(k))
        if (--indeg[s] == 0)
          ready.push(s);
    }
    PEJIT_CHECK(out.size() == live.size()) << "fusion produced a cycle among kernels";
    return out;
  }

  // The order a kernel's nodes run in: id order, except in a kernel anchored on an input
  // gradient's GEMM (dY·W^T). There the fusible nodes the GEMM does not need (gate gradients
  // of other parts, met in id order before it) run after the GEMM and the slices of its
  // product, next to the nodes that read the product: one elementwise run instead of two,
  // and the run before the GEMM is then the chain that makes dY alone (a panel kernel's
  // prologue, lower_panels.cpp).
  std::vector<NodeId> execution_order(const Group& gr) const {
    const NodeId a = gr.anchor;
    if (a == kNoNode || kernel_class(g_.node(a)) != ops::KernelClass::GemmInputGrad)
      return gr.nodes;
    std::set<NodeId> mine(gr.nodes.begin(), gr.nodes.end()), cone{a};
    std::vector<NodeId> work{a};
    while (!work.empty()) {
      NodeId n = work.back();
      work.pop_back();
      for (NodeId o : g_.node(n).operands)
        if (mine.count(o) && cone.insert(o).second)
          work.push_back(o);
    }
    std::vector<NodeId> order, moved;
    size_t i = 0;
    for (; i < gr.nodes.size() && gr.nodes[i] <= a; ++i)
      (cone.count(gr.nodes[i]) ? order : moved).push_back(gr.nodes[i]);
    // The product's own slices and split parts stay right after it.
    for (; i < gr.nodes.size(); ++i) {
      const Node& n = g_.node(gr.nodes[i]);
      if (!is_layout(n) || n.operands.size() != 1 || n.operands[0] != a)
        break;
      order.push_back(gr.nodes[i]);
    }
    order.insert(order.end(), moved.begin(), moved.end());
    order.insert(order.end(), gr.nodes.begin() + static_cast<std::ptrdiff_t>(i), gr.nodes.end());
    return order;
  }

  Kernel describe(const Group& gr) const {
    Kernel kn;
    kn.nodes = execution_order(gr);
    kn.anchor = gr.anchor;
    std::set<NodeId> mine(gr.nodes.begin(), gr.nodes.end());
    std::map<NodeId, std::string> local;
    std::vector<std::string> chain;
    std::set<NodeId> split_seen; // one "splitN" per split application in the chain
    std::string key;
    for (size_t j = 0; j < kn.nodes.size(); ++j) {
      NodeId id = kn.nodes[j];
      const Node& n = g_.node(id);
      local[id] = "n" + std::to_string(j);
      std::string nm = name_of(n);
      bool repeat =
          n.kind == Kind::Op && n.op() == OpId::Split && !split_seen.insert(n.operands[0]).second;
      if (id == gr.anchor || (gr.anchor == kNoNode && j == 0)) {
        // The static dims that pick the code: a matmul's weight, a gradient helper's
        // result, any other op's first operand.
        NodeId dims_of = id;
        if (is_matmul_like(n))
          dims_of = n.operands[n.kind == Kind::Op ? 1 : 2];
        else if (n.kind != Kind::Grad && !n.operands.empty())
          dims_of = n.operands[0];
        nm += dims_str(g_.type(dims_of).dims);
      }
      if (!repeat)
        chain.push_back(nm);
      key += local[id] + "=" + nm + "(";
      for (size_t a = 0; a < n.operands.size(); ++a) {
        NodeId o = n.operands[a];
        const Node& on = g_.node(o);
        if (a)
          key += ",";
        if (mine.count(o)) {
          key += local[o];
        } else if (on.kind == Kind::Const) {
          key += fmt::format("c{}:{}", on.value, on.type.str());
        } else {
          auto it = std::find(kn.inputs.begin(), kn.inputs.end(), o);
          if (it == kn.inputs.end()) {
            kn.inputs.push_back(o);
            it = kn.inputs.end() - 1;
          }
          key += fmt::format("x{}:{}", it - kn.inputs.begin(), on.type.str());
        }
      }
      key += "):" + n.type.str() +
             (n.kind == Kind::Op && n.output_index ? fmt::format("#{}", n.output_index) : "") + ";";
      bool out = std::find(roots_.begin(), roots_.end(), id) != roots_.end();
      for (NodeId u : users_[static_cast<size_t>(id)])
        out = out || !mine.count(u);
      if (out)
        kn.outputs.push_back(id);
    }
    NodeId head = gr.anchor != kNoNode ? gr.anchor : gr.nodes.front();
    kn.signature = fmt::format("{}:{}", fmt::join(chain, "+"), dtype_name(g_.type(head).dtype));
    // Outputs are part of the code (what is stored).
    key += "out";
    for (NodeId o : kn.outputs)
      key += " " + local[o];
    kn.key = std::move(key);
    return kn;
  }
};

} // namespace

std::vector<Kernel> fuse_kernels(const Graph& g, std::span<const NodeId> roots,
                                 const std::vector<bool>& available) {
  return Fuser(g, roots, available).run();
}

} // namespace pejit::specializer::passes
