// Host data to module values.
#include "runtime/train/encode.h"

#include "src/util/check.h"

namespace pejit::runtime {

using interp::Value;

namespace {
bool is_scalar_i32(const ir::Type& t) {
  return t && t->kind == ir::TypeKind::Tensor && t->elem == ir::Elem::I32 && t->dims.empty();
}
} // namespace

TreeEncoder::TreeEncoder(const ir::Module& m, const std::string& adt) : adt_(adt) {
  const ir::TypeDecl* d = m.adt(adt);
  if (!d)
    throw Error("the model has no type '" + adt + "' to hold trees");
  // A wrapper: one constructor with a tree field (another ADT) and a label.
  if (d->ctors.size() == 1) {
    const auto& c = d->ctors[0];
    CtorMap w;
    w.tag = 0;
    std::string inner;
    for (const auto& f : c.fields) {
      if (f.type->kind == ir::TypeKind::Adt && f.type->name != adt && inner.empty()) {
        w.fields.push_back(FieldKind::Tree);
        inner = f.type->name;
      } else if (is_scalar_i32(f.type) && f.name == "label") {
        w.fields.push_back(FieldKind::RootLabel);
      } else {
        inner.clear();
        break;
      }
    }
    if (!inner.empty()) {
      TreeEncoder in(m, inner);
      leaf_ = in.leaf_;
      node_ = in.node_;
      adt_ = inner;
      wrapper_ = w;
      return;
    }
  }
  for (size_t c = 0; c < d->ctors.size(); ++c) {
    const auto& ctor = d->ctors[c];
    CtorMap map;
    map.tag = static_cast<int>(c);
    int children = 0;
    for (const auto& f : ctor.fields) {
      if (f.type->kind == ir::TypeKind::Adt && f.type->name == adt) {
        map.fields.push_back(FieldKind::Child);
        ++children;
      } else if (is_scalar_i32(f.type) && (f.name == "word" || f.name == "token")) {
        map.fields.push_back(FieldKind::Word);
      } else if (is_scalar_i32(f.type) && f.name == "label") {
        map.fields.push_back(FieldKind::Label);
      } else {
        throw Error("cannot fill field '" + f.name + ": " + ir::type_str(f.type) +
                    "' of constructor " + ctor.name +
                    " from tree data (fields are `word: i32[]`, "
                    "`label: i32[]` and children of type " +
                    adt + ")");
      }
    }
    if (children == 0 && leaf_.tag < 0)
      leaf_ = map;
    else if (children == 2 && node_.tag < 0)
      node_ = map;
  }
  if (leaf_.tag < 0 || node_.tag < 0)
    throw Error("type " + adt + " needs a leaf constructor (no " + adt +
                " fields) and a node constructor (two " + adt + " fields) to hold binary trees");
}

Value TreeEncoder::encode(const data::ParseTree& t) const {
  if (t.nodes.empty())
    throw Error("empty tree");
  if (wrapper_.tag < 0)
    return encode_node(t, t.root());
  interp::Values fields;
  for (FieldKind k : wrapper_.fields) {
    if (k == FieldKind::Tree) {
      fields.push_back(encode_node(t, t.root()));
    } else {
      int32_t y = t.nodes[static_cast<size_t>(t.root())].label;
      if (y < 0)
        throw Error("the tree's root has no label");
      fields.push_back(Value::tensor(Tensor::scalar_i32(y)));
    }
  }
  return Value::adt(wrapper_.tag, std::move(fields));
}

Value TreeEncoder::encode_node(const data::ParseTree& t, int32_t n) const {
  const auto& node = t.nodes[static_cast<size_t>(n)];
  bool leaf = node.children.empty();
  if (!leaf && node.children.size() != 2)
    throw Error("tree node " + std::to_string(n) + " has " + std::to_string(node.children.size()) +
                " children; type " + adt_ + " holds binary trees");
  const CtorMap& map = leaf ? leaf_ : node_;
  interp::Values fields;
  fields.reserve(map.fields.size());
  size_t child = 0;
  for (FieldKind k : map.fields) {
    switch (k) {
    case FieldKind::Word:
      if (node.word < 0)
        throw Error("leaf node " + std::to_string(n) + " has no word");
      fields.push_back(Value::tensor(Tensor::scalar_i32(node.word)));
      break;
    case FieldKind::Label:
      if (node.label < 0)
        throw Error("node " + std::to_string(n) + " has no label, but the model's " + adt_ +
                    " needs one");
      fields.push_back(Value::tensor(Tensor::scalar_i32(node.label)));
      break;
    case FieldKind::Child:
      fields.push_back(encode_node(t, node.children[child++]));
      break;
    case FieldKind::Tree:
    case FieldKind::RootLabel:
      PEJIT_CHECK(false) << "wrapper field inside a tree";
    }
  }
  return Value::adt(map.tag, std::move(fields));
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
