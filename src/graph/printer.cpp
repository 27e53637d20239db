// Text and GraphViz forms of a Graph, for golden tests, --dump-after and debugging.
//   %2 = input #1 : f32[300, 450]       %0 = const 1 : f32[]
//   %7 = add(%3, %5) : f32[150]         %4 = split[5]#2(%3) : f32[150]
//   %9 = gather[0 2 1](%4) : f32[3, 150]
#include "src/graph/graph.h"

#include <fmt/format.h>

namespace pejit::graph {

namespace {

std::string head(const Node& n) {
  switch (n.kind) {
  case Kind::Input:
    return fmt::format("input #{}", n.slot);
  case Kind::Const:
    return fmt::format("const {}", n.value);
  case Kind::Op:
  case Kind::Grad: {
    std::string s = n.kind == Kind::Op ? ops::op_name(n.op()) : ops::grad_op_name(n.grad_op());
    if (!n.attr.ints.empty())
      s += fmt::format("[{}]", fmt::join(n.attr.ints, " "));
    if (n.kind == Kind::Op && ops::op_num_results(n.op(), n.attr) > 1)
      s += fmt::format("#{}", n.output_index);
    return s;
  }
  case Kind::Gather:
  case Kind::Scatter:
    return fmt::format("{}[{}]", kind_name(n.kind), fmt::join(n.index_map, " "));
  case Kind::SumN:
    return "sum_n";
  }
  return "?";
}

std::string operands(const Node& n) {
  if (n.operands.empty())
    return "";
  std::string s = "(";
  for (size_t i = 0; i < n.operands.size(); ++i)
    s += fmt::format("{}%{}", i ? ", " : "", n.operands[i]);
  return s + ")";
}

} // namespace

std::string print_node(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return fmt::format("%{} = {}{} : {}", id, head(n), operands(n), n.type.str());
}

std::string print(const Graph& g) {
  std::string s;
  for (size_t i = 0; i < g.size(); ++i)
    s += print_node(g, static_cast<NodeId>(i)) + "\n";
  if (!g.outputs().empty()) {
    s += "return";
    for (size_t i = 0; i < g.outputs().size(); ++i)
      s += fmt::format("{} %{}", i ? "," : "", g.outputs()[i]);
    s += "\n";
  }
  return s;
}

std::string to_dot(const Graph& g) {
  std::vector<bool> is_out(g.size());
  for (NodeId o : g.outputs())
    is_out[static_cast<size_t>(o)] = true;
  std::string s = "digraph pejit {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    std::string label = head(n);
    for (char& c : label)
      if (c == '"')
        c = '\'';
    s += fmt::format("  n{} [label=\"%{} {}\\n{}\"{}];\n", i, i, label, n.type.str(),
                     is_out[i] ? ", peripheries=2" : "");
  }
  for (size_t i = 0; i < g.size(); ++i)
    for (NodeId o : g.nodes()[i].operands)
      s += fmt::format("  n{} -> n{};\n", o, i);
  return s + "}\n";
}

} // namespace pejit::graph
