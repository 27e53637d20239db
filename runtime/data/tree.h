// Host-side data for tree-structured models: a flat labeled parse tree (SST, ListOps) and the
// word vocabulary that maps tokens to embedding rows. These are plain values; the runtime turns
// them into ADT Values for the interpreter and into skeleton keys for the specializer. A tree
// read from text remembers where each node was written, so that any later stage (the encoder,
// the label check) reports a data error at the file's line and column.
#pragma once

#include "src/util/diagnostics.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace pejit::data {

/// A labeled tree, binary or with any number of children per node, flat; children before
/// parents; root = nodes.back().
/// The readers and generators produce nodes in depth-first post-order with children left to
/// right; a tree in that order round-trips exactly through write_tree and parse_trees.
struct ParseTree {
  struct Node {
    int32_t label = -1;            ///< class label; -1 = no label (written as `-`)
    int32_t word = -1;             ///< vocabulary id for leaves, -1 for internal nodes
    std::vector<int32_t> children; ///< indices into nodes, each below this node's; empty for leaves

    bool operator==(const Node&) const = default;
  };
  std::vector<Node> nodes;
  std::vector<std::string> tokens; ///< token text per node ("" for internal nodes)

  /// Where a tree read from text was written: one line of `file` (shared by every tree of the
  /// file), and the column of each node's '('. Empty (`file` null) for a tree built in memory.
  /// Not part of the tree's value: operator== ignores it.
  struct Origin {
    std::shared_ptr<const SourceFile> file;
    uint32_t line = 0;          ///< 1-based
    size_t offset = 0;          ///< byte offset of the line in file->text
    std::vector<uint32_t> cols; ///< per node, 1-based byte column of its '('
  };
  Origin origin;

  /// Index of the root, nodes.size() - 1; the tree must not be empty.
  int32_t root() const;
  /// Number of leaves (nodes without children).
  size_t leaves() const;
  /// Nodes on the longest root-to-leaf path: 1 for a one-word sentence, 0 for an empty tree.
  size_t depth() const;
  /// True when every internal node has exactly two children.
  bool is_binary() const;
  /// The leaves' tokens in left-to-right order (the sentence).
  std::vector<std::string> sentence() const;

  bool operator==(const ParseTree& o) const { return nodes == o.nodes && tokens == o.tokens; }
};

/// Token <-> id map. Id 0 is "<unk>"; built from the training trees and kept with checkpoints.
class Vocab {
public:
  /// The unknown-word token, always id 0.
  static constexpr const char* kUnk = "<unk>";

  /// A vocabulary holding only "<unk>".
  Vocab();
  /// The id of `w`, adding it first if it is new.
  int32_t add(const std::string& w);
  /// The id of `w`, or 0 ("<unk>") if it is unknown.
  int32_t lookup(const std::string& w) const;
  /// The token of id `id`; `id` must be in [0, size()).
  const std::string& word(int32_t id) const;
  /// Number of ids, "<unk>" included.
  size_t size() const { return words_.size(); }
  /// Every token, indexed by id.
  const std::vector<std::string>& words() const { return words_; }
  /// Rebuilds a vocabulary (from a checkpoint). Throws pejit::Error unless words[0] is "<unk>"
  /// and no word repeats.
  static Vocab from_words(std::vector<std::string> words);

  bool operator==(const Vocab& o) const { return words_ == o.words_; }

private:
  std::vector<std::string> words_;
  std::unordered_map<std::string, int32_t> ids_;
};

} // namespace pejit::data
