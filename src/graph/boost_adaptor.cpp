// The one file that includes Boost.Graph: a bidirectional adjacency_list copy of a Graph
// (vertex i = node i, one edge operand -> user per operand use) and the analyses of
// boost_adaptor.h on it. Iterative Boost algorithms only, so deep graphs cannot overflow
// the stack.
#include "src/graph/boost_adaptor.h"

#include "src/util/check.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <boost/graph/reverse_graph.hpp>
#include <boost/graph/topological_sort.hpp>

#include <iterator>

namespace pejit::graph {

namespace {

using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

BoostGraph to_boost(const Graph& g) {
  BoostGraph b(g.size());
  for (size_t i = 0; i < g.size(); ++i)
    for (NodeId o : g.nodes()[i].operands)
      boost::add_edge(static_cast<size_t>(o), i, b);
  return b;
}

template <class G> std::vector<bool> reach(const G& bg, size_t n, std::span<const NodeId> roots) {
  std::vector<boost::default_color_type> color(n, boost::white_color);
  auto cmap = boost::make_iterator_property_map(color.begin(), boost::get(boost::vertex_index, bg));
  for (NodeId r : roots) {
    PEJIT_CHECK(r >= 0 && static_cast<size_t>(r) < n) << "bad root " << r;
    if (color[static_cast<size_t>(r)] == boost::white_color)
      boost::depth_first_visit(bg, static_cast<size_t>(r), boost::dfs_visitor<>(), cmap);
  }
  std::vector<bool> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = color[i] != boost::white_color;
  return out;
}

} // namespace

std::vector<NodeId> topological_order(const Graph& g) {
  BoostGraph b = to_boost(g);
  std::vector<size_t> rev;
  rev.reserve(g.size());
  boost::topological_sort(b, std::back_inserter(rev)); // users before operands
  return std::vector<NodeId>(rev.rbegin(), rev.rend());
}

std::vector<bool> reachable_from(const Graph& g, std::span<const NodeId> roots, Direction dir) {
  BoostGraph b = to_boost(g);
  if (dir == Direction::Users)
    return reach(b, g.size(), roots);
  return reach(boost::make_reverse_graph(b), g.size(), roots);
}

std::vector<bool> live(const Graph& g, std::span<const NodeId> outputs) {
  return reachable_from(g, outputs.empty() ? g.outputs() : outputs, Direction::Operands);
}

size_t num_edges(const Graph& g) {
  return boost::num_edges(to_boost(g));
}

} // namespace pejit::graph
