// The model, data set and scoring helpers shared by train, eval, dump and tune (common.h).
#include "runtime/train/common.h"

#include "runtime/dist/grad_reducer.h"
#include "runtime/session_access.h"
#include "src/types/check.h"
#include "src/util/check.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <ostream>
#include <regex>

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

Shuffle parse_shuffle(const std::string& word, const std::string& what) {
  for (Shuffle s : {Shuffle::Examples, Shuffle::Batches, Shuffle::None})
    if (word == shuffle_name(s))
      return s;
  throw Error(what + ": '" + word + "' is not a shuffle (examples, batches or none)");
}

const char* shuffle_name(Shuffle s) {
  switch (s) {
  case Shuffle::Examples:
    return "examples";
  case Shuffle::Batches:
    return "batches";
  case Shuffle::None:
    return "none";
  }
  return "?";
}

const std::vector<size_t>& BatchOrder::next_epoch(Shuffle shuffle, size_t batch) {
  const bool first = std::exchange(first_, false);
  if (shuffle == Shuffle::None)
    return order_;
  if (shuffle == Shuffle::Examples || first) {
    for (size_t i = order_.size(); i > 1; --i)
      std::swap(order_[i - 1], order_[next() % i]);
    return order_;
  }
  if (batch == 0)
    throw Error("shuffling batches needs a batch size of at least 1");
  // The whole batches in a new order; their examples, and a short last batch, stay as they are.
  const size_t whole = order_.size() / batch;
  std::vector<size_t> at(whole); // the new order's k-th batch is the old one's at[k]
  for (size_t k = 0; k < whole; ++k)
    at[k] = k;
  for (size_t k = whole; k > 1; --k)
    std::swap(at[k - 1], at[next() % k]);
  scratch_.assign(order_.begin(), order_.end());
  for (size_t k = 0; k < whole; ++k)
    std::copy_n(scratch_.begin() + static_cast<std::ptrdiff_t>(at[k] * batch), batch,
                order_.begin() + static_cast<std::ptrdiff_t>(k * batch));
  return order_;
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

namespace {

// A tree model given a file of plain sentences: the reader would stop at the first line with
// "expected '('"; say instead what the model reads. Looks at the first non-blank line only.
void refuse_sentences(const std::string& path, const ir::Type& elem) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  for (uint32_t no = 1; std::getline(in, line); ++no) {
    std::string_view l = line;
    if (no == 1 && l.starts_with("\xef\xbb\xbf"))
      l.remove_prefix(3);
    size_t i = l.find_first_not_of(" \t\r\v\f");
    if (i == std::string_view::npos)
      continue;
    if (l[i] == '(' || l[i] == ')')
      return; // a tree, or a malformed one the reader reports
    throw Error(path + ":" + std::to_string(no) + ":" + std::to_string(i + 1) +
                ": error: the model reads bracketed trees (its batch element is " +
                ir::type_str(elem) +
                "), one per line such as `(3 (2 The) (4 (2 Rock) (2 rocks)))`, but this line "
                "is not one: a file of plain sentences is for a model over List[i32[]]");
  }
}

} // namespace

Dataset read_dataset(const std::string& path, data::Vocab& vocab, bool grow, const ir::Type& elem) {
  Dataset ds;
  data::ReadOptions ro;
  ro.grow_vocab = grow;
  if (elem->kind == ir::TypeKind::Adt) {
    refuse_sentences(path, elem);
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

Dataset read_dataset_for_init(const std::string& path, data::Vocab& vocab, size_t ckpt_words,
                              const ir::Type& elem, const ir::Module& m, const std::string& ckpt,
                              std::string& note) {
  const bool grow = m.dim_index("V") >= 0;
  // Read growing a copy, to count the words the checkpoint lacks whether or not they are kept.
  data::Vocab seen = vocab;
  Dataset ds = read_dataset(path, seen, true, elem);
  int64_t tokens = 0, fresh = 0;
  auto count = [&](int32_t w) {
    ++tokens;
    fresh += w >= static_cast<int32_t>(ckpt_words);
  };
  ds.for_each_token(count);
  if (fresh > 0) {
    char share[32];
    std::snprintf(share, sizeof share, "%.1f%%",
                  100.0 * static_cast<double>(fresh) / static_cast<double>(tokens));
    note = std::to_string(seen.size() - ckpt_words) + " words of '" + path + "' (" +
           std::to_string(fresh) + " of its " + std::to_string(tokens) + " tokens, " + share +
           ") are not in the vocabulary of '" + ckpt + "' (" + std::to_string(ckpt_words) +
           " words): " +
           (grow ? "they are added to it, with new embedding rows (the checkpoint's words keep "
                   "theirs)"
                 : "they read as <unk> (the model has no dimension V to grow)");
  }
  if (grow) {
    vocab = std::move(seen);
    return ds;
  }
  return read_dataset(path, vocab, false, elem);
}

void init_by_word(Session& session, const ir::Module& m, const checkpoint::Checkpoint& ck,
                  const std::string& path) {
  for (const std::string& name : session.param_names()) {
    int j = ck.params.index(name);
    if (j < 0)
      throw Error("checkpoint '" + path + "' has no parameter " + name);
    const Tensor& old = ck.params.values[static_cast<size_t>(j)];
    const std::vector<int64_t> want = session.param_shape(name);
    const Shape& have = old.shape();
    const ir::ParamDecl* decl = m.params()[static_cast<size_t>(m.param_index(name))].get();
    // Axes on which the checkpoint may be smaller: those of the vocabulary's dimension.
    bool fits = have.rank() == want.size();
    bool same = fits;
    for (size_t a = 0; fits && a < want.size(); ++a) {
      int64_t h = have[a];
      bool vocab_axis = a < decl->type->dims.size() && decl->type->dims[a] == ir::Dim::named("V");
      same = same && h == want[a];
      fits = h == want[a] || (vocab_axis && h < want[a]);
    }
    if (!fits) {
      std::string w = "[";
      for (size_t a = 0; a < want.size(); ++a)
        w += (a ? ", " : "") + std::to_string(want[a]);
      throw Error("checkpoint '" + path + "': parameter " + name + " has shape " + have.str() +
                  ", the model wants " + w + "]");
    }
    const float* src = old.f32();
    if (same) {
      session.set_param(name, std::vector<float>(src, src + old.numel()));
      continue;
    }
    // Copy element by element at the same multi-index: old ids keep their rows (or columns).
    std::vector<float> data = session.get_param(name);
    std::vector<int64_t> idx(want.size(), 0);
    for (int64_t k = 0; k < old.numel(); ++k) {
      int64_t flat = 0;
      for (size_t a = 0; a < want.size(); ++a)
        flat = flat * want[a] + idx[a];
      data[static_cast<size_t>(flat)] = src[k];
      for (size_t a = want.size(); a-- > 0;) {
        if (++idx[a] < have[a])
          break;
        idx[a] = 0;
      }
    }
    session.set_param(name, data);
  }
}

Encoder::Encoder(const ir::Module& m, const Dataset& ds, const ir::Type& elem,
                 const interp::DimBindings& dims, bool allow_unlabeled) {
  if (ds.is_trees) {
    trees.emplace(m, elem->name, dims);
    trees->allow_unlabeled = allow_unlabeled;
  }
  check(ds);
  if (trees) {
    // The data's word ids and labels (-1: unlabeled) as shared tensors; a value past the
    // bound (an odd label) gets its own, so that the table stays the vocabulary's size.
    constexpr int32_t kBound = 1 << 22;
    int32_t hi = 0;
    for (const auto& t : ds.trees)
      for (const auto& n : t.nodes)
        for (int32_t v : {n.word, n.label})
          if (v < kBound)
            hi = std::max(hi, v + 1);
    trees->share_scalars(-1, hi);
  }
}

void Encoder::check(const Dataset& ds) const {
  if (!ds.is_trees || !trees)
    return;
  for (const auto& t : ds.trees)
    trees->check(t);
}

Value Encoder::batch(const Dataset& ds, const std::vector<size_t>& idx, size_t b, size_t e) const {
  Values xs;
  xs.reserve(e - b);
  for (size_t i = b; i < e; ++i)
    xs.push_back(example(ds, idx[i]));
  return Value::list(std::move(xs));
}

Value Encoder::example(const Dataset& ds, size_t i) const {
  return ds.is_trees ? trees->encode(ds.trees[i]) : encode_sentence(ds.sents[i]);
}

KeptExamples::KeptExamples(const Dataset& ds, const Encoder& enc, int64_t max_nodes)
    : ds_(&ds), enc_(&enc), kept_(ds.size()), keep_(ds.size()) {
  int64_t held = 0;
  for (size_t i = 0; i < ds.size(); ++i) {
    const int64_t size = ds.size_of(i);
    keep_[i] = held + size <= max_nodes;
    if (keep_[i])
      held += size;
  }
}

Value KeptExamples::batch(const std::vector<size_t>& idx, size_t b, size_t e) {
  Values xs;
  xs.reserve(e - b);
  for (size_t k = b; k < e; ++k) {
    const size_t i = idx[k];
    if (!keep_[i]) {
      xs.push_back(enc_->example(*ds_, i));
      ++encoded_;
      continue;
    }
    if (kept_[i].kind() == Value::Kind::None) {
      kept_[i] = enc_->example(*ds_, i);
      ++encoded_;
    }
    xs.push_back(kept_[i]);
  }
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
                "its last (" +
                std::to_string(last_ok) + " match the last)");
}
} // namespace

void rethrow_located(const Dataset& ds, const std::vector<size_t>& idx, size_t lo, size_t hi) {
  try {
    throw;
  } catch (const Error& e) {
    if (!ds.is_trees)
      throw;
    static const std::regex kLabel(
        R"(label (-?[0-9]+) at position [0-9]+ is outside \[0, ([0-9]+)\))");
    const std::string what = e.what();
    const std::string first = what.substr(0, what.find('\n'));
    std::smatch mt;
    if (!std::regex_search(first, mt, kLabel))
      throw;
    const std::string label = mt[1].str(), classes = mt[2].str();
    for (size_t i = lo; i < hi && i < idx.size(); ++i) {
      const data::ParseTree& t = ds.trees[idx[i]];
      for (size_t n = 0; n < t.nodes.size(); ++n) {
        if (std::to_string(t.nodes[n].label) != label)
          continue;
        std::string note = first;
        if (size_t at = note.find(": error: "); at != std::string::npos)
          note.replace(at, 9, ": note: the kernel's error: ");
        else
          note = "note: the kernel's error: " + note;
        const std::string why =
            label == "-1"
                ? "the node has no label (`-`, or neutral under --labels binary), but "
                  "the model's cross_entropy takes it: the model must ignore labels "
                  "< 0 (examples/treelstm/treelstm_binary.pe masks them)"
                : "label " + label + " is outside the model's classes [0, " + classes + ")";
        throw Error(std::string(data::node_error(t, static_cast<int32_t>(n), why).what()) + "\n" +
                    note);
      }
    }
    throw;
  }
}

void score_nodes(const interp::Value& preds, const std::vector<data::ParseTree>& trees, size_t b,
                 size_t e, Scores& s) {
  for (size_t i = b; i < e; ++i) {
    const auto& t = trees[i];
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
}

void score_roots(const interp::Value& preds, const std::vector<data::ParseTree>& trees, size_t b,
                 size_t e, Scores& s) {
  for (size_t i = b; i < e; ++i) {
    const auto& t = trees[i];
    int32_t y = t.nodes[static_cast<size_t>(t.root())].label;
    if (y < 0)
      continue;
    s.root_ok += preds.list_at(i - b).as_tensor().item_i32() == y;
    s.roots += 1;
  }
}

namespace {

// Trees of the first batch whose root predictions check infer_nodes' order (check_node_order):
// a small batch of their own, so that the check costs little whatever the batch size.
constexpr size_t kOrderCheckTrees = 25;

} // namespace

EvalSet::EvalSet(const Dataset& ds, const Encoder& enc, int batch, int rank, int ranks,
                 bool one_pass, int64_t max_nodes)
    : ds_(&ds), enc_(&enc), one_pass_(one_pass && ds.is_trees), idx_(ds.size()) {
  if (batch < 1)
    throw Error("the evaluation batch must be >= 1");
  std::iota(idx_.begin(), idx_.end(), 0);
  // Sentence data are scored by the loss alone: no one-pass entry for them (one_pass_).
  const auto bs = static_cast<size_t>(batch);
  const size_t step = bs * static_cast<size_t>(ranks);
  int64_t held = 0;
  for (size_t b = bs * static_cast<size_t>(rank); b < ds.size(); b += step) {
    const size_t e = std::min(ds.size(), b + bs);
    int64_t n = 0, size = 0;
    for (size_t i = b; i < e; ++i) {
      n += ds.nodes(i);
      size += ds.size_of(i);
    }
    bounds_.emplace_back(b, e);
    nodes_.push_back(n);
    keep_.push_back(held + size <= max_nodes);
    if (keep_.back())
      held += size;
  }
  kept_.resize(bounds_.size());
  held_.assign(bounds_.size(), false);
  facts_.resize(bounds_.size());
}

const std::shared_ptr<const BatchFacts>& EvalSet::facts(Session& session, size_t i,
                                                        const pejit::Value& v) {
  if (facts_of_ == nullptr)
    facts_of_ = &session;
  if (facts_of_ != &session)
    throw Error("internal: an evaluation set's batches were run on another session");
  if (!facts_[i])
    facts_[i] = SessionAccess::facts(session, v);
  return facts_[i];
}

pejit::Value EvalSet::run(Session& session, const std::string& entry, size_t i,
                          const pejit::Value& v) {
  if (!held_[i])
    return session.run(entry, v);
  return SessionAccess::run(session, entry, v, *facts(session, i, v));
}

void EvalSet::prefetch(Session& session, const std::string& entry, size_t i,
                       const pejit::Value& v) {
  if (held_[i])
    SessionAccess::prefetch(session, entry, v, facts(session, i, v));
}

pejit::Value EvalSet::batch(size_t i) {
  if (held_[i])
    return kept_[i];
  pejit::Value v = SessionAccess::wrap(examples_ ? examples_->batch(idx_, begin(i), end(i))
                                                 : enc_->batch(*ds_, idx_, begin(i), end(i)));
  encoded_ += 1;
  if (keep_[i]) {
    kept_[i] = v;
    held_[i] = true;
  }
  return v;
}

namespace {

// The scores of the set's batches (this rank's).
Scores score_shard(Session& session, EvalSet& set) {
  Scores s;
  const Dataset& ds = set.data();
  const EvalEntry fused = set.one_pass() ? SessionAccess::eval_entry(session) : EvalEntry{};
  const ir::Module& m = SessionAccess::module(session);
  const bool has_nodes = m.fn("infer_nodes") && m.fn("infer_nodes")->is_entry;
  const bool has_infer = m.fn("infer") && m.fn("infer")->is_entry;
  // One pass per batch where the session has the one-pass entry (and the data are trees: a
  // sentence model is scored by its loss alone).
  const bool one_pass = !fused.name.empty();
  const std::string pred_entry = one_pass ? fused.preds : has_nodes ? "infer_nodes" : "infer";
  std::vector<size_t> idx;
  // Each batch's plans are made on the planning pipeline while the batch before it runs (a
  // pass's batches are large, and planned from the second pass on only where the plan cache
  // did not keep them).
  auto prefetch = [&](size_t k, const pejit::Value& v) {
    set.prefetch(session, one_pass ? fused.name : "loss", k, v);
    if (!one_pass && ds.is_trees && (has_nodes || has_infer))
      set.prefetch(session, pred_entry, k, v);
  };
  pejit::Value next = set.batches() > 0 ? set.batch(0) : pejit::Value();
  for (size_t k = 0; k < set.batches(); ++k) {
    const size_t b = set.begin(k), e = set.end(k);
    pejit::Value v = std::move(next);
    if (k + 1 < set.batches()) {
      next = set.batch(k + 1);
      prefetch(k + 1, next);
    }
    pejit::Value out; // holds what `preds` refers to
    const Value* preds = nullptr;
    try {
      if (one_pass) {
        out = set.run(session, fused.name, k, v);
        const Value& both = SessionAccess::unwrap(out);
        s.loss += both.items()[0].as_tensor().item_f32();
        preds = &both.items()[1];
      } else {
        s.loss += set.run(session, "loss", k, v).item_f32();
      }
      s.passes += 1;
    } catch (const Error&) {
      if (idx.empty()) {
        idx.resize(ds.size());
        std::iota(idx.begin(), idx.end(), 0);
      }
      rethrow_located(ds, idx, b, e);
    }
    s.nodes += set.nodes(k);
    if (!ds.is_trees)
      continue;
    if (!one_pass && (has_nodes || has_infer)) {
      out = set.run(session, pred_entry, k, v);
      preds = &SessionAccess::unwrap(out);
      s.passes += 1;
    }
    if (preds == nullptr)
      continue;
    if (pred_entry == "infer_nodes") {
      // Once per set: the trees and the model do not change between its scorings.
      if (b == 0 && has_infer && !set.order_checked) {
        const size_t n = std::min(e, kOrderCheckTrees);
        std::vector<size_t> head(n);
        std::iota(head.begin(), head.end(), 0);
        pejit::Value hv = n == e ? v : SessionAccess::wrap(set.encoder().batch(ds, head, 0, n));
        check_node_order(session.run("infer", hv), *preds, ds, n);
        set.order_checked = true;
      }
      score_nodes(*preds, ds.trees, b, e, s);
    } else {
      score_roots(*preds, ds.trees, b, e, s);
    }
  }
  return s;
}

} // namespace

Scores score(Session& session, const Dataset& ds, const Encoder& enc, int batch, bool one_pass) {
  EvalSet set(ds, enc, batch, session.rank(), session.ranks(), one_pass);
  return score(session, set);
}

Scores score(Session& session, EvalSet& set) {
  if (session.ranks() == 1)
    return score_shard(session, set);
  // Data parallel: each rank its share of the batches, the counts summed in rank order (the
  // same on every rank), and a failure on one rank ends the evaluation on all of them.
  Scores s;
  double failed = 0;
  try {
    s = score_shard(session, set);
  } catch (const Error& e) {
    std::fprintf(stderr, "pejit: rank %d of %d: error: %s\n", session.rank(), session.ranks(),
                 e.what());
    failed = 1;
  }
  auto all = session.gather_ranks({failed, s.loss, static_cast<double>(s.nodes),
                                   static_cast<double>(s.root_ok), static_cast<double>(s.roots),
                                   static_cast<double>(s.node_ok), static_cast<double>(s.labeled)});
  Scores sum;
  sum.passes = s.passes;
  for (size_t r = 0; r < all.size(); ++r) {
    const auto& x = all[r];
    if (x[0] != 0)
      throw dist::JobError("rank " + std::to_string(r) + " of " + std::to_string(all.size()) +
                           " failed to evaluate (its message is above)");
    sum.loss += x[1];
    sum.nodes += static_cast<int64_t>(x[2]);
    sum.root_ok += static_cast<int64_t>(x[3]);
    sum.roots += static_cast<int64_t>(x[4]);
    sum.node_ok += static_cast<int64_t>(x[5]);
    sum.labeled += static_cast<int64_t>(x[6]);
  }
  return sum;
}

} // namespace pejit::runtime
