// The label schemes of `pejit train/eval --labels` (labels.h).
#include "runtime/train/labels.h"

#include "runtime/data/tree_io.h"

namespace pejit::runtime {

LabelScheme parse_labels(const std::string& name) {
  if (name == "fine")
    return LabelScheme::Fine;
  if (name == "binary")
    return LabelScheme::Binary;
  throw Error("--labels: unknown scheme '" + name + "' (expected fine or binary)");
}

LabelReport apply_labels(Dataset& ds, LabelScheme scheme, const std::string& path) {
  LabelReport r;
  r.trees_read = static_cast<int64_t>(ds.size());
  if (scheme == LabelScheme::Fine)
    return r;
  if (!ds.is_trees)
    throw Error("--labels binary: '" + path +
                "' holds sentences, which carry no labels to map (the model reads List[i32[]])");
  std::vector<data::ParseTree> kept;
  kept.reserve(ds.trees.size());
  for (auto& t : ds.trees) {
    bool drop = false;
    int64_t unlabeled = 0;
    for (size_t n = 0; n < t.nodes.size(); ++n) {
      int32_t& y = t.nodes[n].label;
      if (y < 0)
        continue;
      if (y > 4)
        throw data::node_error(t, static_cast<int32_t>(n),
                               "label " + std::to_string(y) +
                                   " is not an SST sentiment (0-4), which --labels binary maps");
      if (y == 2) {
        if (static_cast<int32_t>(n) == t.root())
          drop = true;
        y = -1;
        ++unlabeled;
      } else {
        y = y < 2 ? 0 : 1;
      }
    }
    if (drop) {
      ++r.trees_dropped;
      continue;
    }
    r.nodes_unlabeled += unlabeled;
    kept.push_back(std::move(t));
  }
  ds.trees = std::move(kept);
  if (ds.trees.empty())
    throw Error("--labels binary: every tree of '" + path +
                "' has a neutral root (2): no tree is left");
  return r;
}

std::string describe(const LabelReport& r, const std::string& path) {
  return "binary labels: " + path + ": kept " + std::to_string(r.trees_read - r.trees_dropped) +
         " of " + std::to_string(r.trees_read) + " trees (" + std::to_string(r.trees_dropped) +
         " with a neutral root dropped), " + std::to_string(r.nodes_unlabeled) +
         " neutral inner nodes unlabeled";
}

} // namespace pejit::runtime
