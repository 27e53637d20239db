// Label schemes for SST-style data: `--labels fine` keeps the labels as read; `--labels binary`
// makes the binary task of Tai et al. 2015 from the 5-class one (0-1 negative, 3-4 positive,
// neutral 2 out): a tree whose root is neutral leaves the data set, a neutral inner node
// becomes unlabeled (`-`), counted in neither loss nor node accuracy.
#pragma once

#include "runtime/train/common.h"

#include <cstdint>
#include <string>

namespace pejit::runtime {

enum class LabelScheme { Fine, Binary };

/// "fine" or "binary"; throws pejit::Error naming both otherwise.
LabelScheme parse_labels(const std::string& name);

/// What apply_labels changed, for the note on stderr.
struct LabelReport {
  int64_t trees_read = 0;      ///< trees before
  int64_t trees_dropped = 0;   ///< neutral roots
  int64_t nodes_unlabeled = 0; ///< neutral inner nodes of the trees kept
};

/// Maps the labels of `ds` (read from `path`) by `scheme`. Binary: 0, 1 -> 0; 3, 4 -> 1; a
/// neutral (2) root drops its tree; a neutral inner node becomes unlabeled (-1); unlabeled
/// nodes stay so. Throws pejit::Error at the node's file:line:col for a label outside 0-4
/// (binary), and naming `path` for a file of sentences (no labels) or one left empty.
LabelReport apply_labels(Dataset& ds, LabelScheme scheme, const std::string& path);

/// "binary labels: FILE: kept K of N trees (D with a neutral root dropped), U neutral inner
/// nodes unlabeled".
std::string describe(const LabelReport& r, const std::string& path);

} // namespace pejit::runtime
