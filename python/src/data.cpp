// Data for training from Python, read and ordered exactly as `pejit train` does: bracket
// trees or sentences with a shared vocabulary, the per-epoch shuffle of the CLI's loop, and
// the scoring pass (loss, root and all-node accuracy) its per-epoch metrics come from.
#include "python/src/ext.h"

#include "runtime/data/tree_io.h"
#include "runtime/session_access.h"
#include "runtime/train/common.h"
#include "src/ir/type.h"
#include "src/types/check.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>

namespace pejit::python {

using runtime::BatchOrder; // the per-epoch order of `pejit train`, shared with it
using runtime::SessionAccess;

namespace {

// Is the model's batch element a tree ADT (true) or a sentence List[i32[]] (false)?
bool element_is_tree(const ir::Type& elem) {
  if (elem->kind == ir::TypeKind::Adt)
    return true;
  if (elem->kind == ir::TypeKind::List && elem->elems[0]->kind == ir::TypeKind::Tensor &&
      elem->elems[0]->elem == ir::Elem::I32 && elem->elems[0]->dims.empty())
    return false;
  throw Error("the model's batch elements have type " + ir::type_str(elem) +
              "; pejit reads trees into an ADT or sentences into List[i32[]]");
}

} // namespace

runtime::EvalSet& PySession::eval_set(const std::shared_ptr<const PyDataset>& ds, int batch) {
  // The entry first: adding it changes the module's generation, which the sets are kept by.
  if (ds->is_trees)
    (void)SessionAccess::eval_entry(s);
  const uint64_t gen = module().generation();
  std::erase_if(scored_, [](const Scored& x) { return x.data.expired(); });
  for (auto it = scored_.begin(); it != scored_.end(); ++it) {
    if (it->data.lock() != ds)
      continue;
    if (it->size == ds->size() && it->batch == batch && it->generation == gen) {
      std::rotate(it, it + 1, scored_.end());
      return *scored_.back().set;
    }
    scored_.erase(it); // another batch size, a limit() since, or a changed model
    break;
  }
  // The data sets of a training loop (its training and dev sets) and a few more.
  constexpr size_t kKept = 4;
  if (scored_.size() >= kKept)
    scored_.erase(scored_.begin());
  const ir::Type elem = batch_element("loss");
  if (ds->is_trees != element_is_tree(elem))
    throw Error("entry 'loss' takes batches of " + ir::type_str(elem) + ", the data set holds " +
                (ds->is_trees ? "trees" : "sentences"));
  Scored x;
  x.data = ds;
  x.size = ds->size();
  x.batch = batch;
  x.generation = gen;
  x.enc = std::make_unique<runtime::Encoder>(module(), *ds, elem, SessionAccess::dims(s));
  x.set = std::make_unique<runtime::EvalSet>(*ds, *x.enc, batch, s.rank(), s.ranks(), true);
  // The examples a training loop's batches (encode()) hold already: shared, not encoded again.
  auto kept = find_kept(ds, "loss", batch_stamp(elem));
  if (kept != kept_.end()) {
    x.examples = kept->examples;
    x.set->share(x.examples->kept);
  }
  scored_.push_back(std::move(x));
  return *scored_.back().set;
}

namespace {

std::shared_ptr<PyDataset> read_dataset(const std::string& path, std::shared_ptr<PyVocab> vocab,
                                        bool grow, bool sentences) {
  auto ds = std::make_shared<PyDataset>();
  ds->vocab = vocab ? std::move(vocab) : std::make_shared<PyVocab>();
  data::ReadOptions ro;
  ro.grow_vocab = grow;
  py::gil_scoped_release nogil;
  ds->is_trees = !sentences;
  if (sentences)
    ds->sents = data::read_sentences(path, ds->vocab->v, ro);
  else
    ds->trees = data::read_trees(path, ds->vocab->v, ro);
  if (ds->size() == 0)
    throw Error("'" + path + "' holds no examples");
  return ds;
}

// A tree from nested tuples: (label, token) is a leaf, (label, child, child, ...) a node;
// a label may be None (no label); tokens are strings (looked up or added in the vocabulary)
// or word ids.
int32_t build_tree(py::handle o, data::ParseTree& t, PyVocab* vocab) {
  if (!py::isinstance<py::tuple>(o) || py::len(o) < 2)
    throw Error("a tree node is a tuple (label, token) or (label, child, child, ...)");
  auto tup = py::reinterpret_borrow<py::tuple>(o);
  int32_t label = tup[0].is_none() ? -1 : tup[0].cast<int32_t>();
  data::ParseTree::Node node;
  node.label = label;
  std::string token;
  if (tup.size() == 2 && !py::isinstance<py::tuple>(tup[1])) {
    if (py::isinstance<py::str>(tup[1])) {
      token = tup[1].cast<std::string>();
      if (!vocab)
        throw Error("a leaf's token '" + token + "' needs a vocabulary (vocab=...) or a word id");
      node.word = vocab->v.add(token);
    } else {
      node.word = tup[1].cast<int32_t>();
      if (node.word < 0)
        throw Error("a leaf's word id must be >= 0");
      token = vocab && static_cast<size_t>(node.word) < vocab->v.size() ? vocab->v.word(node.word)
                                                                        : std::to_string(node.word);
    }
  } else {
    for (size_t i = 1; i < tup.size(); ++i)
      node.children.push_back(build_tree(tup[i], t, vocab));
  }
  t.nodes.push_back(std::move(node));
  t.tokens.push_back(token);
  return static_cast<int32_t>(t.nodes.size() - 1);
}

py::object tree_to_tuple(const data::ParseTree& t, int32_t n) {
  const auto& node = t.nodes[static_cast<size_t>(n)];
  py::object label = node.label < 0 ? py::object(py::none()) : py::object(py::int_(node.label));
  if (node.children.empty())
    return py::make_tuple(label, t.tokens[static_cast<size_t>(n)]);
  py::list xs;
  xs.append(label);
  for (int32_t c : node.children)
    xs.append(tree_to_tuple(t, c));
  return py::tuple(xs);
}

// Loss and accuracy over a data set without gradients, as `pejit train` scores an epoch
// (runtime::score on the session's one-pass entry): `passes` counts the entry runs, and
// `encoded_batches` the batches this call encoded (none when an earlier call kept them all).
py::dict score(PySession& ps, const std::shared_ptr<const PyDataset>& ds, int batch) {
  if (!ds)
    throw Error("score: no data set");
  if (batch < 1)
    throw Error("batch must be >= 1");
  auto lock = ps.lock();
  runtime::Scores s;
  int64_t encoded = 0;
  {
    py::gil_scoped_release nogil;
    runtime::EvalSet& set = ps.eval_set(ds, batch);
    const int64_t before = set.encoded_batches();
    s = runtime::score(ps.s, set);
    encoded = set.encoded_batches() - before;
  }
  auto ratio = [](int64_t a, int64_t b) -> py::object {
    if (b <= 0)
      return py::none();
    return py::float_(static_cast<double>(a) / static_cast<double>(b));
  };
  py::dict d;
  d["loss"] = s.loss;
  d["nodes"] = s.nodes;
  d["loss_per_node"] = s.loss / static_cast<double>(std::max<int64_t>(1, s.nodes));
  d["root_acc"] = ratio(s.root_ok, s.roots);
  d["node_acc"] = ratio(s.node_ok, s.labeled);
  d["passes"] = s.passes;
  d["encoded_batches"] = encoded;
  return d;
}

} // namespace

void bind_data(py::module_& m) {
  py::class_<PyVocab, std::shared_ptr<PyVocab>>(m, "Vocab", "Token <-> id map; id 0 is '<unk>'.")
      .def(py::init<>())
      .def_static(
          "from_words",
          [](std::vector<std::string> words) {
            auto v = std::make_shared<PyVocab>();
            v->v = data::Vocab::from_words(std::move(words));
            return v;
          },
          py::arg("words"))
      .def("__len__", [](const PyVocab& v) { return v.v.size(); })
      .def("add", [](PyVocab& v, const std::string& w) { return v.v.add(w); })
      .def("lookup", [](const PyVocab& v, const std::string& w) { return v.v.lookup(w); })
      .def("word",
           [](const PyVocab& v, int32_t id) {
             if (id < 0 || static_cast<size_t>(id) >= v.v.size())
               throw Error("word id " + std::to_string(id) + " out of range");
             return v.v.word(id);
           })
      .def_property_readonly("words", [](const PyVocab& v) { return v.v.words(); });

  py::class_<PyTree>(m, "Tree", "A labeled parse tree (children before parents).")
      .def_static(
          "from_tuple",
          [](py::handle o, std::shared_ptr<PyVocab> vocab) {
            PyTree t;
            build_tree(o, t.t, vocab.get());
            return t;
          },
          py::arg("tree"), py::arg("vocab") = nullptr,
          "(label, token) is a leaf, (label, child, child) a node; labels may be None.")
      .def_static(
          "parse",
          [](const std::string& line, std::shared_ptr<PyVocab> vocab, bool grow) {
            if (!vocab)
              vocab = std::make_shared<PyVocab>();
            data::ReadOptions ro;
            ro.grow_vocab = grow;
            auto ts = data::parse_trees(line, "<tree>", vocab->v, ro);
            if (ts.size() != 1)
              throw Error("Tree.parse: expected one tree, got " + std::to_string(ts.size()));
            return PyTree{std::move(ts[0])};
          },
          py::arg("text"), py::arg("vocab") = nullptr, py::arg("grow") = true,
          "One bracketed tree: `(3 (2 The) (4 rock))`.")
      .def("to_tuple", [](const PyTree& t) { return tree_to_tuple(t.t, t.t.root()); })
      .def("__len__", [](const PyTree& t) { return t.t.nodes.size(); })
      .def("__str__", [](const PyTree& t) { return data::write_tree(t.t); })
      .def("__repr__",
           [](const PyTree& t) { return "pejit.Tree('" + data::write_tree(t.t) + "')"; });

  py::class_<PyDataset, std::shared_ptr<PyDataset>>(
      m, "Dataset", "Trees or sentences read from a file, as `pejit train` reads them.")
      .def_static("read", &read_dataset, py::arg("path"), py::arg("vocab") = nullptr,
                  py::arg("grow") = true, py::arg("sentences") = false,
                  "Reads bracket trees (or sentences), one per line. grow: unseen words are "
                  "added to the vocabulary (training data); else they map to <unk> (dev data).")
      .def_static(
          "from_trees",
          [](const std::vector<PyTree>& trees, std::shared_ptr<PyVocab> vocab) {
            auto ds = std::make_shared<PyDataset>();
            ds->vocab = vocab ? std::move(vocab) : std::make_shared<PyVocab>();
            for (const auto& t : trees)
              ds->trees.push_back(t.t);
            return ds;
          },
          py::arg("trees"), py::arg("vocab") = nullptr)
      .def("__len__", &PyDataset::size)
      .def("__getitem__",
           [](const PyDataset& ds, size_t i) -> py::object {
             if (i >= ds.size())
               throw py::index_error();
             if (ds.is_trees)
               return py::cast(PyTree{ds.trees[i]});
             return py::cast(ds.sents[i]);
           })
      .def(
          "limit", [](PyDataset& ds, int64_t n) { ds.limit(n); },
          "Keeps the first n examples (n <= 0: all).")
      .def(
          "nodes",
          [](const PyDataset& ds, size_t i) {
            if (i >= ds.size())
              throw py::index_error();
            return ds.nodes(i);
          },
          py::arg("i"), "Nodes of example i that carry a loss.")
      .def_property_readonly("is_trees", [](const PyDataset& ds) { return ds.is_trees; })
      .def_property_readonly("vocab", [](const PyDataset& ds) { return ds.vocab; });

  py::class_<BatchOrder>(m, "BatchOrder",
                         "The order of examples per epoch of `pejit train` for a seed.")
      .def(py::init<size_t, uint64_t>(), py::arg("n"), py::arg("seed"))
      .def(
          "next_epoch",
          [](BatchOrder& b, py::object shuffle, size_t batch) {
            // True and False as before shuffle took a word: examples and none.
            if (!py::isinstance<py::bool_>(shuffle) && !py::isinstance<py::str>(shuffle))
              throw Error("shuffle is 'examples', 'batches', 'none', True or False, not " +
                          std::string(py::str(shuffle)));
            const runtime::Shuffle s =
                py::isinstance<py::bool_>(shuffle)
                    ? (shuffle.cast<bool>() ? runtime::Shuffle::Examples : runtime::Shuffle::None)
                    : runtime::parse_shuffle(shuffle.cast<std::string>(), "shuffle");
            if (s == runtime::Shuffle::Batches && batch < 1)
              throw Error("shuffle='batches' needs the batch size (batch >= 1)");
            const auto& o = b.next_epoch(s, batch);
            py::array_t<int64_t> a(static_cast<py::ssize_t>(o.size()));
            std::copy(o.begin(), o.end(), a.mutable_data());
            return a;
          },
          py::arg("shuffle") = true, py::arg("batch") = 0,
          "The next epoch's order, as `pejit train --shuffle`: 'examples' (or True), 'batches' "
          "(the first epoch's batches of `batch` examples, in a new order) or 'none' (or False: "
          "the previous order, as --fixed-batches).");

  m.def(
      "model_info",
      [](const std::string& path, const std::string& entry) {
        ir::Module mod;
        Diagnostics d;
        if (!types::add_file(mod, path, d).ok)
          throw ProgramError("the model '" + path + "' has errors:\n" + d.render());
        py::dict info;
        info["reads_trees"] = element_is_tree(runtime::batch_element_type(mod, entry));
        py::list dims;
        for (const auto& dim : mod.dims())
          dims.append(dim->name);
        info["dims"] = dims;
        info["entries"] = mod.entries();
        return info;
      },
      py::arg("model"), py::arg("entry") = "loss",
      "What training needs to know of a model file before its session exists (the data is "
      "read first: V is the vocabulary's size): reads_trees (the entry's batches hold trees, "
      "else sentences), its named dims and entries.");
  m.def("score", &score, py::arg("session"), py::arg("data"), py::arg("batch") = 25,
        "Loss and accuracy over a data set without gradients, as `pejit train` scores an "
        "epoch: one pass per batch for the loss and the predictions, the batches encoded on "
        "the first call and kept for the next ones on the same data set (passes, "
        "encoded_batches: this call's entry runs and batches encoded).");
}

} // namespace pejit::python
