// Turning host data into the module's values: a parse tree into a value of the model's tree
// ADT (fields matched by name and type: `word` and `label` take the node's word id and label
// as i32[], fields of the ADT's own type take the children in order), a sentence into a
// List[i32[]]. The mapping is decided once per module from the ADT's declaration. An ADT
// with one constructor holding a tree and a `label: i32[]` (e.g. `Example(tree: Tree, label:
// i32[])`) takes the tree and its root's label: data labeled at the root only, like ListOps.
#pragma once

#include "runtime/data/tree.h"
#include "src/interp/value.h"

#include <string>
#include <vector>

namespace pejit::runtime {

class TreeEncoder {
public:
  /// Throws pejit::Error when the ADT cannot represent binary labeled trees (no constructor
  /// for leaves or for two-child nodes, or a field it cannot fill).
  TreeEncoder(const ir::Module& m, const std::string& adt);

  /// Throws pejit::Error naming the node for a tree the ADT cannot hold (a missing label, a
  /// node that is not binary).
  interp::Value encode(const data::ParseTree& t) const;

private:
  enum class FieldKind : uint8_t { Word, Label, Child, Tree, RootLabel };
  struct CtorMap {
    int tag = -1;
    std::vector<FieldKind> fields;
  };
  CtorMap leaf_, node_;
  CtorMap wrapper_; ///< tag >= 0: the batch element wraps a tree and its root label
  std::string adt_;
  interp::Value encode_node(const data::ParseTree& t, int32_t n) const;
};

/// A sentence as a List[i32[]] of word ids.
interp::Value encode_sentence(const std::vector<int32_t>& words);

/// The element type of an entry's single `List[T]` argument (throws pejit::Error otherwise).
ir::Type batch_element_type(const ir::Module& m, const std::string& entry);

} // namespace pejit::runtime
