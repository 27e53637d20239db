// Host data to module values.
#include "runtime/train/encode.h"

#include "runtime/data/tree_io.h"
#include "runtime/train/label_classes.h"
#include "src/util/check.h"

#include <algorithm>

namespace pejit::runtime {

using interp::Value;

namespace {
bool is_scalar_i32(const ir::Type& t) {
  return t && t->kind == ir::TypeKind::Tensor && t->elem == ir::Elem::I32 && t->dims.empty();
}
} // namespace

TreeEncoder::TreeEncoder(const ir::Module& m, const std::string& adt,
                         const interp::DimBindings& dims)
    : adt_(adt) {
  const ir::TypeDecl* d = m.adt(adt);
  if (!d)
    throw Error("the model has no type '" + adt + "' to hold trees");
  // A wrapper: one constructor with a tree field (another ADT) and a label.
  int label_field = -1;
  if (d->ctors.size() == 1) {
    const auto& c = d->ctors[0];
    CtorMap w;
    w.tag = 0;
    w.name = c.name;
    std::string inner;
    for (size_t i = 0; i < c.fields.size(); ++i) {
      const auto& f = c.fields[i];
      if (f.type->kind == ir::TypeKind::Adt && f.type->name != adt && inner.empty()) {
        w.fields.push_back(FieldKind::Tree);
        inner = f.type->name;
      } else if (is_scalar_i32(f.type) && f.name == "label") {
        w.fields.push_back(FieldKind::RootLabel);
        label_field = static_cast<int>(i);
      } else {
        inner.clear();
        break;
      }
    }
    if (!inner.empty()) {
      TreeEncoder in(m, inner, dims);
      by_children_ = std::move(in.by_children_);
      list_ = std::move(in.list_);
      decl_ = in.decl_;
      adt_ = inner;
      wrapper_ = w;
      if (label_field >= 0) {
        FieldKey key{m.adt_index(adt), 0, label_field};
        auto found = label_classes(m, {key}, dims);
        if (auto it = found.find(key); it != found.end()) {
          wrapper_.classes = it->second.classes;
          wrapper_.ce = it->second.at;
        }
      }
      return;
    }
  }
  decl_ = d->span;
  const int adt_index = m.adt_index(adt);
  std::vector<FieldKey> label_fields;
  // Where each label field's class count goes: by_children_ index, or -1 for the list
  // constructor.
  std::vector<std::pair<int, FieldKey>> label_of;
  for (size_t c = 0; c < d->ctors.size(); ++c) {
    const auto& ctor = d->ctors[c];
    CtorMap map;
    map.tag = static_cast<int>(c);
    map.name = ctor.name;
    size_t children = 0, lists = 0;
    int label = -1;
    for (size_t i = 0; i < ctor.fields.size(); ++i) {
      const auto& f = ctor.fields[i];
      if (f.type->kind == ir::TypeKind::Adt && f.type->name == adt) {
        map.fields.push_back(FieldKind::Child);
        ++children;
      } else if (f.type->kind == ir::TypeKind::List &&
                 f.type->elems[0]->kind == ir::TypeKind::Adt && f.type->elems[0]->name == adt) {
        map.fields.push_back(FieldKind::Children);
        ++lists;
      } else if (is_scalar_i32(f.type) && (f.name == "word" || f.name == "token")) {
        map.fields.push_back(FieldKind::Word);
      } else if (is_scalar_i32(f.type) && f.name == "label") {
        map.fields.push_back(FieldKind::Label);
        label = static_cast<int>(i);
      } else {
        throw Error("cannot fill field '" + f.name + ": " + ir::type_str(f.type) +
                    "' of constructor " + ctor.name +
                    " from tree data (fields are `word: i32[]`, `label: i32[]`, children of "
                    "type " +
                    adt + ", or all of a node's children as one `List[" + adt + "]`)");
      }
    }
    if (lists > 1 || (lists == 1 && children > 0))
      throw Error("constructor " + ctor.name + " of type " + adt +
                  " takes a node's children both as fields of type " + adt + " and as a List[" +
                  adt +
                  "], or as two lists: the children go either to one field each or all to one "
                  "List[" +
                  adt + "]");
    int slot = -1;
    if (lists == 1) {
      if (list_.tag >= 0)
        continue; // the first list constructor takes the nodes no fixed arity takes
      list_ = map;
    } else {
      if (by_children_.size() <= children)
        by_children_.resize(children + 1);
      if (by_children_[children].tag >= 0)
        continue; // the first constructor of an arity takes its nodes
      by_children_[children] = map;
      slot = static_cast<int>(children);
    }
    if (label >= 0) {
      FieldKey key{adt_index, static_cast<int>(c), label};
      label_fields.push_back(key);
      label_of.emplace_back(slot, key);
    }
  }
  auto has = [&](size_t k) { return k < by_children_.size() && by_children_[k].tag >= 0; };
  if (list_.tag < 0 && (!has(0) || !has(2)))
    throw Error("type " + adt + " needs a leaf constructor (no " + adt +
                " fields) and a node constructor (two " + adt +
                " fields) to hold binary trees, or a constructor with a field `children: List[" +
                adt + "]` for trees with any number of children per node");
  if (list_.tag >= 0 && !has(0) &&
      std::find(list_.fields.begin(), list_.fields.end(), FieldKind::Word) == list_.fields.end())
    throw Error("type " + adt +
                " has no constructor for leaves: a node with a word (`word: i32[]`)"
                " and no " +
                adt + " fields, or a word field beside the children's List[" + adt + "]");
  auto found = label_classes(m, label_fields, dims);
  for (const auto& [slot, key] : label_of) {
    if (auto it = found.find(key); it != found.end()) {
      CtorMap& map = slot < 0 ? list_ : by_children_[static_cast<size_t>(slot)];
      map.classes = it->second.classes;
      map.ce = it->second.at;
    }
  }
}

int64_t TreeEncoder::classes(int children) const {
  if (children < 0)
    return wrapper_.classes;
  return map_for(static_cast<size_t>(children)) ? map_for(static_cast<size_t>(children))->classes
                                                : -1;
}

const TreeEncoder::CtorMap* TreeEncoder::map_for(size_t children) const {
  if (children < by_children_.size() && by_children_[children].tag >= 0)
    return &by_children_[children];
  return list_.tag >= 0 ? &list_ : nullptr;
}

void TreeEncoder::check_label(const data::ParseTree& t, int32_t n, const CtorMap& map, bool root,
                              bool classes) const {
  const int32_t y = t.nodes[static_cast<size_t>(n)].label;
  const std::string of = root ? "the tree's root (for " + map.name + ")" : "a " + map.name;
  if (y < 0 && allow_unlabeled)
    return;
  if (y < 0)
    throw data::node_error(t, n,
                           root ? "the tree's root has no label ('-'), but constructor " +
                                      map.name + ", which wraps the tree, needs one"
                                : "the node has no label ('-'), but constructor " + map.name +
                                      " of the model's type " + adt_ + " needs one");
  if (classes && map.classes >= 0 && y >= map.classes)
    throw data::node_error(
        t, n,
        "label " + std::to_string(y) + " is outside the model's classes [0, " +
            std::to_string(map.classes) + ")",
        {{map.ce, "the label of " + of + " is a class of this cross_entropy, over " +
                      std::to_string(map.classes) + " classes"}});
}

const TreeEncoder::CtorMap& TreeEncoder::ctor_for(const data::ParseTree& t, int32_t n,
                                                  bool classes) const {
  const auto& node = t.nodes[static_cast<size_t>(n)];
  const size_t k = node.children.size();
  const CtorMap* found = map_for(k);
  if (!found) {
    std::string takes;
    for (size_t i = 0; i < by_children_.size(); ++i) {
      if (by_children_[i].tag < 0)
        continue;
      takes += (takes.empty() ? "" : ", ") + std::to_string(i) + " (" + by_children_[i].name + ")";
    }
    std::vector<std::pair<Span, std::string>> notes;
    if (decl_.known())
      notes.emplace_back(decl_, "type " + adt_ +
                                    " is declared here: to take trees with any number of "
                                    "children per node, give a constructor a field `children: "
                                    "List[" +
                                    adt_ + "]` (docs/language.md, \"How data meets a model\")");
    throw data::node_error(t, n,
                           "a node with " + std::to_string(k) + " child" + (k == 1 ? "" : "ren") +
                               ", but no constructor of the model's type " + adt_ +
                               " takes that many; its constructors take " + takes + " children",
                           notes);
  }
  const CtorMap& map = *found;
  for (FieldKind f : map.fields) {
    if (f == FieldKind::Word && node.word < 0)
      throw data::node_error(t, n,
                             k == 0
                                 ? "the leaf has no word"
                                 : "the node has children, so no word (a node of the data "
                                   "holds a word or children, never both), but constructor " +
                                       map.name + " of the model's type " + adt_ + " needs a word");
    if (f == FieldKind::Label)
      check_label(t, n, map, false, classes);
  }
  return map;
}

void TreeEncoder::take_children(const data::ParseTree& t, int32_t n,
                                std::vector<uint8_t>& used) const {
  for (int32_t c : t.nodes[static_cast<size_t>(n)].children) {
    if (c < 0 || c >= n || used[static_cast<size_t>(c)])
      throw data::node_error(t, n,
                             "child " + std::to_string(c) + " of node " + std::to_string(n) +
                                 " is not an earlier node of its own: the nodes are not one tree "
                                 "in post-order");
    used[static_cast<size_t>(c)] = 1;
  }
}

void TreeEncoder::check_all_used(const data::ParseTree& t, const std::vector<uint8_t>& used) const {
  for (size_t i = 0; i + 1 < used.size(); ++i)
    if (!used[i])
      throw data::node_error(t, static_cast<int32_t>(i),
                             "node " + std::to_string(i) +
                                 " is not part of the tree of the last node (the root)");
}

void TreeEncoder::check(const data::ParseTree& t) const {
  if (t.nodes.empty())
    throw Error("empty tree");
  std::vector<uint8_t> used(t.nodes.size(), 0);
  for (int32_t n = 0; n <= t.root(); ++n) {
    ctor_for(t, n, true);
    take_children(t, n, used);
  }
  check_all_used(t, used);
  if (wrapper_.tag >= 0)
    for (FieldKind k : wrapper_.fields)
      if (k == FieldKind::RootLabel)
        check_label(t, t.root(), wrapper_, true, true);
}

Value TreeEncoder::encode(const data::ParseTree& t) const {
  if (t.nodes.empty())
    throw Error("empty tree");
  // Children come before their parents: one pass builds every subtree's value from its
  // children's, moved out of `vals` (each is taken once), so no walk recurses on the depth.
  std::vector<Value> vals(t.nodes.size());
  std::vector<uint8_t> used(t.nodes.size(), 0);
  for (int32_t n = 0; n <= t.root(); ++n) {
    const auto& node = t.nodes[static_cast<size_t>(n)];
    const CtorMap& map = ctor_for(t, n, false);
    take_children(t, n, used);
    interp::Values fields;
    fields.reserve(map.fields.size());
    size_t child = 0;
    for (FieldKind k : map.fields) {
      switch (k) {
      case FieldKind::Word:
        fields.push_back(Value::tensor(scalar(node.word)));
        break;
      case FieldKind::Label:
        fields.push_back(Value::tensor(scalar(node.label)));
        break;
      case FieldKind::Child:
        fields.push_back(std::move(vals[static_cast<size_t>(node.children[child++])]));
        break;
      case FieldKind::Children: {
        interp::Values kids;
        kids.reserve(node.children.size());
        for (int32_t c : node.children)
          kids.push_back(std::move(vals[static_cast<size_t>(c)]));
        fields.push_back(Value::list(std::move(kids)));
        break;
      }
      case FieldKind::Tree:
      case FieldKind::RootLabel:
        PEJIT_CHECK(false) << "wrapper field inside a tree";
      }
    }
    vals[static_cast<size_t>(n)] = Value::adt(map.tag, std::move(fields));
  }
  check_all_used(t, used);
  Value root = std::move(vals.back());
  if (wrapper_.tag < 0)
    return root;
  interp::Values fields;
  for (FieldKind k : wrapper_.fields) {
    if (k == FieldKind::Tree) {
      fields.push_back(std::move(root));
    } else {
      check_label(t, t.root(), wrapper_, true, false);
      fields.push_back(Value::tensor(scalar(t.nodes.back().label)));
    }
  }
  return Value::adt(wrapper_.tag, std::move(fields));
}

void TreeEncoder::share_scalars(int32_t lo, int32_t hi) {
  scalars_.clear();
  scalars_lo_ = lo;
  for (int32_t v = lo; v < hi; ++v)
    scalars_.push_back(Tensor::scalar_i32(v));
}

Tensor TreeEncoder::scalar(int32_t v) const {
  const auto i = static_cast<size_t>(static_cast<int64_t>(v) - scalars_lo_);
  return i < scalars_.size() ? scalars_[i] : Tensor::scalar_i32(v);
}

Value encode_sentence(const std::vector<int32_t>& words) {
  interp::Values xs;
  xs.reserve(words.size());
  for (int32_t w : words)
    xs.push_back(Value::tensor(Tensor::scalar_i32(w)));
  return Value::list(std::move(xs));
}

ir::Type batch_element_type(const ir::Module& m, const std::string& entry) {
  const ir::FnDecl* f = m.fn(entry);
  if (!f || !f->is_entry)
    throw Error("the model has no entry '" + entry + "'");
  if (f->params.size() != 1 || f->params[0].type->kind != ir::TypeKind::List)
    throw Error("entry '" + entry +
                "' must take one argument of type List[T] (a batch), it takes " +
                std::to_string(f->params.size()));
  return f->params[0].type->elems[0];
}

} // namespace pejit::runtime
