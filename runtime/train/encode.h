// Turning host data into the module's values: a parse tree into a value of the model's tree
// ADT (fields matched by name and type: `word` and `label` take the node's word id and label
// as i32[], fields of the ADT's own type take the children in order, one field of type
// List[ADT] takes all of a node's children in order, for n-ary trees), a sentence into a
// List[i32[]]. The mapping is decided once per module from the ADT's declaration. An ADT
// with one constructor holding a tree and a `label: i32[]` (e.g. `Example(tree: Tree, label:
// i32[])`) takes the tree and its root's label: data labeled at the root only, like ListOps.
// A node goes to the constructor with exactly its number of children fields (a leaf, a unary
// or binary node); a constructor with a children list takes every other node. Every error
// about the data names the node at its file:line:col (data::node_error); labels are checked
// against the class count of the cross_entropy they feed (label_classes.h).
#pragma once

#include "runtime/data/tree.h"
#include "src/interp/params.h"
#include "src/interp/value.h"

#include <string>
#include <vector>

namespace pejit::runtime {

class TreeEncoder {
public:
  /// Throws pejit::Error when the ADT cannot represent labeled trees (no constructor for
  /// leaves, none for two-child nodes and no children list, or a field it cannot fill). `dims`
  /// binds the named dimensions (V) a class axis may use.
  TreeEncoder(const ir::Module& m, const std::string& adt, const interp::DimBindings& dims = {});

  /// Throws pejit::Error at the node's file:line:col for a tree the ADT cannot hold: a node
  /// with a number of children no constructor takes, a missing label or word, nodes that do
  /// not form one tree in post-order. Walks the nodes in one loop, children before parents:
  /// any depth encodes. Labels are not compared with the classes here (check() does; the
  /// kernels guard their inputs anyway), so the per-batch path stays as lean as it was.
  interp::Value encode(const data::ParseTree& t) const;

  /// encode()'s checks without building the value, and each label against the class count of
  /// the cross_entropy it feeds, when known (classes()): run once per data set before
  /// training, so that a bad label is an error at its node, not inside a step.
  void check(const data::ParseTree& t) const;

  /// The class count labels of the constructor taking `children` children must be below
  /// (-1: unknown or no label field); children = -1: the wrapper's root label.
  int64_t classes(int children) const;

  /// A node without a label (`-`) where its constructor has a label field encodes as label -1
  /// instead of being an error: for `--labels binary` (neutral inner nodes) and `pejit
  /// predict` (data without labels). A model that trains on such data ignores labels < 0.
  bool allow_unlabeled = false;

  /// From now on, the word ids and labels in [lo, hi) encode as one shared scalar tensor per
  /// value instead of a new one per field: a batch's values are read, never written (a kernel
  /// that would work in place on a tensor copies one that is shared), and a batch of thousands
  /// of nodes then allocates no tensor. Not thread-safe; encode() is, after it.
  void share_scalars(int32_t lo, int32_t hi);

private:
  enum class FieldKind : uint8_t { Word, Label, Child, Children, Tree, RootLabel };
  struct CtorMap {
    int tag = -1;
    std::string name;
    std::vector<FieldKind> fields;
    int64_t classes = -1; ///< the Label (or RootLabel) field's class count; -1: not known
    Span ce;              ///< the cross_entropy that sets `classes`
  };
  std::vector<CtorMap> by_children_; ///< index: the constructor's number of children
  CtorMap list_;    ///< tag >= 0: the constructor with a List[ADT] field, for every other count
  Span decl_;       ///< the tree type's declaration, for the note of an arity error
  CtorMap wrapper_; ///< tag >= 0: the batch element wraps a tree and its root label
  std::string adt_;
  std::vector<Tensor> scalars_; ///< share_scalars(): the tensor of value scalars_lo_ + i
  int64_t scalars_lo_ = 0;
  Tensor scalar(int32_t v) const;
  /// The constructor for a node of `children` children, or null when none takes it.
  const CtorMap* map_for(size_t children) const;
  /// The constructor for node n, after checking its arity, word and label.
  /// `classes`: compare labels with the class counts too.
  const CtorMap& ctor_for(const data::ParseTree& t, int32_t n, bool classes) const;
  void check_label(const data::ParseTree& t, int32_t n, const CtorMap& map, bool root,
                   bool classes) const;
  /// Checks that every child of n is an earlier node not yet taken (`used`), and takes them.
  void take_children(const data::ParseTree& t, int32_t n, std::vector<uint8_t>& used) const;
  void check_all_used(const data::ParseTree& t, const std::vector<uint8_t>& used) const;
};

/// A sentence as a List[i32[]] of word ids.
interp::Value encode_sentence(const std::vector<int32_t>& words);

/// The element type of an entry's single `List[T]` argument (throws pejit::Error otherwise).
ir::Type batch_element_type(const ir::Module& m, const std::string& entry);

} // namespace pejit::runtime
