// The model, data set and scoring helpers shared by train, eval, dump and tune (common.h).
#include "runtime/train/common.h"

#include "runtime/session_access.h"
#include "src/types/check.h"
#include "src/util/check.h"

#include <cstdio>
#include <numeric>
#include <ostream>

namespace pejit::runtime {

using interp::Value;
using interp::Values;

std::string fmt_pct(double v) {
  if (std::isnan(v))
    return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * v);
  return buf;
}

void warn_schedules(const SessionOptions& so, std::ostream& err) {
  if (so.compile.schedules && so.compile.jit && !so.compile.schedules->warning().empty())
    err << "warning: " << so.compile.schedules->warning() << "\n";
}

std::shared_ptr<ir::Module> load_model(const std::string& path) {
  Diagnostics d;
  auto m = std::make_shared<ir::Module>();
  auto r = types::add_file(*m, path, d);
  if (!r.ok)
    throw ProgramError("the model '" + path + "' has errors:\n" + d.render());
  return m;
}

int64_t Dataset::nodes(size_t i) const {
  if (!is_trees)
    return static_cast<int64_t>(sents[i].size());
  int64_t n = 0;
  for (const auto& nd : trees[i].nodes)
    n += nd.label >= 0;
  return n;
}

void Dataset::limit(int64_t n) {
  if (n <= 0)
    return;
  if (is_trees && trees.size() > static_cast<size_t>(n))
    trees.resize(static_cast<size_t>(n));
  if (!is_trees && sents.size() > static_cast<size_t>(n))
    sents.resize(static_cast<size_t>(n));
}

Dataset read_dataset(const std::string& path, data::Vocab& vocab, bool grow, const ir::Type& elem) {
  Dataset ds;
  data::ReadOptions ro;
  ro.grow_vocab = grow;
  if (elem->kind == ir::TypeKind::Adt) {
    ds.trees = data::read_trees(path, vocab, ro);
  } else if (elem->kind == ir::TypeKind::List && elem->elems[0]->kind == ir::TypeKind::Tensor &&
             elem->elems[0]->elem == ir::Elem::I32 && elem->elems[0]->dims.empty()) {
    ds.is_trees = false;
    ds.sents = data::read_sentences(path, vocab, ro);
  } else {
    throw Error("the model's batch elements have type " + ir::type_str(elem) +
                "; pejit reads trees into an ADT or sentences into List[i32[]]");
  }
  if (ds.size() == 0)
    throw Error("'" + path + "' holds no examples");
  return ds;
}

interp::DimBindings vocab_dims(const ir::Module& m, const data::Vocab& vocab) {
  interp::DimBindings over;
  if (m.dim_index("V") >= 0)
    over["V"] = static_cast<int64_t>(vocab.size());
  return over;
}

Encoder::Encoder(const ir::Module& m, const Dataset& ds, const ir::Type& elem) {
  if (ds.is_trees)
    trees.emplace(m, elem->name);
}

Value Encoder::batch(const Dataset& ds, const std::vector<size_t>& idx, size_t b, size_t e) const {
  Values xs;
  xs.reserve(e - b);
  for (size_t i = b; i < e; ++i)
    xs.push_back(ds.is_trees ? trees->encode(ds.trees[idx[i]]) : encode_sentence(ds.sents[idx[i]]));
  return Value::list(std::move(xs));
}

namespace {
// infer_nodes returns a tree's predictions children before parents, the root last (the order
// the data's nodes are in). An order that cannot be seen from the lengths (pre-order: the root
// first) would score every node against another node's label; where the model also has
// `infer`, its root predictions show it on the first batch: they match the first element and
// not the last for many trees. (A near-tie may flip an argmax between the two entries' plans,
// hence a tenth of the batch and at least two trees, not any one.)
void check_node_order(const pejit::Value& roots_v, const Value& preds, const Dataset& ds,
                      size_t n) {
  const Value& roots = SessionAccess::unwrap(roots_v);
  size_t last_ok = 0, first_only = 0;
  for (size_t i = 0; i < n; ++i) {
    const Value& p = preds.list_at(i);
    if (p.list_size() == 0 || p.list_size() != ds.trees[i].nodes.size())
      return; // the length check below reports it
    int32_t r = roots.list_at(i).as_tensor().item_i32();
    bool last = p.list_at(p.list_size() - 1).as_tensor().item_i32() == r;
    last_ok += last;
    first_only += !last && p.list_at(0).as_tensor().item_i32() == r;
  }
  if (first_only >= 2 && first_only * 10 >= n)
    throw Error("infer_nodes must return each tree's predictions children before parents, the "
                "root last (docs/language.md, \"Entries the CLI uses\"): on " +
                std::to_string(first_only) + " of " + std::to_string(n) +
                " trees, infer's root prediction matches infer_nodes' first prediction and not "
                "its last (" + std::to_string(last_ok) + " match the last)");
}
} // namespace

Scores score(Session& session, const Dataset& ds, const Encoder& enc, int batch) {
  Scores s;
  const ir::Module& m = SessionAccess::module(session);
  const bool has_nodes = m.fn("infer_nodes") && m.fn("infer_nodes")->is_entry;
  const bool has_infer = m.fn("infer") && m.fn("infer")->is_entry;
  std::vector<size_t> idx(ds.size());
  std::iota(idx.begin(), idx.end(), 0);
  for (size_t b = 0; b < ds.size(); b += static_cast<size_t>(batch)) {
    size_t e = std::min(ds.size(), b + static_cast<size_t>(batch));
    pejit::Value v = SessionAccess::wrap(enc.batch(ds, idx, b, e));
    s.loss += session.run("loss", v).item_f32();
    for (size_t i = b; i < e; ++i)
      s.nodes += ds.nodes(i);
    if (!ds.is_trees)
      continue;
    if (has_nodes) {
      pejit::Value out = session.run("infer_nodes", v);
      const Value& preds = SessionAccess::unwrap(out);
      if (b == 0 && has_infer)
        check_node_order(session.run("infer", v), preds, ds, e);
      for (size_t i = b; i < e; ++i) {
        const auto& t = ds.trees[i];
        const Value& p = preds.list_at(i - b);
        if (p.list_size() != t.nodes.size())
          throw Error("infer_nodes returned " + std::to_string(p.list_size()) +
                      " predictions for a tree of " + std::to_string(t.nodes.size()) + " nodes");
        for (size_t n = 0; n < t.nodes.size(); ++n) {
          if (t.nodes[n].label < 0)
            continue;
          bool ok = p.list_at(n).as_tensor().item_i32() == t.nodes[n].label;
          s.node_ok += ok;
          s.labeled += 1;
          if (static_cast<int32_t>(n) == t.root()) {
            s.root_ok += ok;
            s.roots += 1;
          }
        }
      }
    } else if (has_infer) {
      pejit::Value out = session.run("infer", v);
      const Value& preds = SessionAccess::unwrap(out);
      for (size_t i = b; i < e; ++i) {
        const auto& t = ds.trees[i];
        int32_t y = t.nodes[static_cast<size_t>(t.root())].label;
        if (y < 0)
          continue;
        s.root_ok += preds.list_at(i - b).as_tensor().item_i32() == y;
        s.roots += 1;
      }
    }
  }
  return s;
}

} // namespace pejit::runtime
