// What train, eval, dump and tune share: the model, a data set of trees or sentences read
// with the model's types, its encoding into batch values, the scoring pass over a session, and
// small formatting helpers for their summaries.
#pragma once

#include "pejit/pejit.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/tree_io.h"
#include "runtime/train/encode.h"
#include "runtime/train/eval_entry.h"
#include "runtime/train/trainer.h"
#include "src/interp/params.h"
#include "src/ir/module.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pejit::runtime {

struct BatchFacts;

using Clock = std::chrono::steady_clock;

inline double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline double ratio(int64_t a, int64_t b) {
  return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : NAN;
}

/// "12.3%", or "n/a" for NaN.
std::string fmt_pct(double v);

/// The tuned database's warning, when it has no entry for this CPU and kernels are compiled.
void warn_schedules(const SessionOptions& so, std::ostream& err);

/// Loads and checks the model file. Throws pejit::ProgramError with the diagnostics.
std::shared_ptr<ir::Module> load_model(const std::string& path);

/// The order of the training examples, epoch by epoch: a xorshift64 stream seeded from the
/// training seed, and a Fisher-Yates shuffle of the same index vector each epoch. `pejit
/// train` and the Python package's loop both take it, so they see the same batches.
///
/// Shuffle::Batches: the first epoch shuffles the examples as Shuffle::Examples does; each
/// later epoch shuffles, from the same stream, the order of that epoch's whole batches of
/// `batch` examples (a short last batch stays last), so every epoch runs the same batches and
/// each batch's plan is made once and then reused.
class BatchOrder {
public:
  BatchOrder(size_t n, uint64_t seed)
      : order_(n), rng_(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) {
    for (size_t i = 0; i < n; ++i)
      order_[i] = i;
  }
  /// The next epoch's order, with batches of `batch` examples (only Shuffle::Batches reads
  /// it; it must stay the same from epoch to epoch). Shuffle::None: the order stays as it is,
  /// the stream unused.
  const std::vector<size_t>& next_epoch(Shuffle shuffle, size_t batch);

private:
  uint64_t next() {
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    return rng_;
  }
  std::vector<size_t> order_, scratch_;
  uint64_t rng_;
  bool first_ = true;
};

/// A data set of trees or sentences, with what is needed to encode and score it.
struct Dataset {
  bool is_trees = true;
  std::vector<data::ParseTree> trees;
  std::vector<std::vector<int32_t>> sents;

  size_t size() const { return is_trees ? trees.size() : sents.size(); }
  /// Nodes that carry a loss: labeled nodes of a tree, or the words of a sentence.
  int64_t nodes(size_t i) const;
  /// What example i is made of: a tree's nodes, or a sentence's words (the bounds on what the
  /// encoded sets keep count these).
  int64_t size_of(size_t i) const {
    return static_cast<int64_t>(is_trees ? trees[i].nodes.size() : sents[i].size());
  }
  /// Keeps the first n examples (n <= 0: all).
  void limit(int64_t n);
  /// Calls f(word id) for every token: each leaf of each tree, each word of each sentence.
  template <class F> void for_each_token(F&& f) const {
    if (is_trees) {
      for (const auto& t : trees)
        for (const auto& n : t.nodes)
          if (n.children.empty())
            f(n.word);
    } else {
      for (const auto& s : sents)
        for (int32_t w : s)
          f(w);
    }
  }
};

/// Reads trees (the batch element is an ADT) or sentences (List[i32[]]) from `path`; `grow`
/// adds unseen words to the vocabulary. Throws pejit::Error for another element type, an
/// empty file, or a file in the other format (plain sentences for a tree model, bracketed
/// trees for a sentence model), at the file's line and column.
Dataset read_dataset(const std::string& path, data::Vocab& vocab, bool grow, const ir::Type& elem);

/// The size of the model's dimension V, the vocabulary's, when the model has one.
interp::DimBindings vocab_dims(const ir::Module& m, const data::Vocab& vocab);

/// Reads the training data of `pejit train --init CKPT` (whose vocabulary `vocab` holds, the
/// first `ckpt_words` ids). Words are matched by their text: a word of the checkpoint keeps
/// its id (its embedding row). When the model sizes its vocabulary by a dimension V, the
/// data's new words are added after the checkpoint's (init_by_word gives them new rows);
/// otherwise they read as "<unk>". Either way, when the data has words the checkpoint lacks,
/// `note` gets a line saying how many, and what share of the tokens, naming the checkpoint.
Dataset read_dataset_for_init(const std::string& path, data::Vocab& vocab, size_t ckpt_words,
                              const ir::Type& elem, const ir::Module& m, const std::string& ckpt,
                              std::string& note);

/// Loads the parameters of checkpoint `ck` (read from `path`) into `session` by word: a
/// parameter with the model's shape is taken as it is; one that has a V axis the vocabulary
/// grew on (read_dataset_for_init) gets the checkpoint's values at the checkpoint's ids and
/// keeps its fresh initialization at the new ones. Throws pejit::Error, naming the file and
/// the parameter, for a missing parameter or another shape.
void init_by_word(Session& session, const ir::Module& m, const checkpoint::Checkpoint& ck,
                  const std::string& path);

/// Encodes examples as one batch value (a List).
struct Encoder {
  std::optional<TreeEncoder> trees;
  /// Checks every example of `ds` as check() does. `dims` binds the module's named dimensions
  /// (vocab_dims) for the labels' class counts. `allow_unlabeled`: TreeEncoder's.
  Encoder(const ir::Module& m, const Dataset& ds, const ir::Type& elem,
          const interp::DimBindings& dims = {}, bool allow_unlabeled = false);
  /// Checks every tree of `ds` (a dev set) before any is encoded: each that the model cannot
  /// hold is an error at its node's file:line:col (TreeEncoder::check).
  void check(const Dataset& ds) const;
  /// Examples idx[b], ..., idx[e - 1].
  interp::Value batch(const Dataset& ds, const std::vector<size_t>& idx, size_t b, size_t e) const;
  /// Example i of `ds`, as an element of batch().
  interp::Value example(const Dataset& ds, size_t i) const;
};

/// The training set's examples for the training loop's batches (BatchFeed): each encoded on
/// its first use and kept for the next epochs, whose batches share it (an encoded example is
/// an immutable value), so that an epoch after the first encodes nothing. What is kept is
/// bounded by `max_nodes` (tree nodes or sentence words, summed in the data set's order): the
/// examples past it are encoded again for each batch that holds them. `ds` and `enc` must
/// outlive it; it is used from one thread.
class KeptExamples {
public:
  /// The default bound, EvalSet's: all of SST's training set, several times.
  static constexpr int64_t kMaxNodes = int64_t{2} << 20;

  KeptExamples(const Dataset& ds, const Encoder& enc, int64_t max_nodes = kMaxNodes);
  /// Examples idx[b], ..., idx[e - 1] as one batch value: Encoder::batch's.
  interp::Value batch(const std::vector<size_t>& idx, size_t b, size_t e);
  /// Examples encoded so far, over all batches: each kept one counts once.
  int64_t encoded() const { return encoded_; }

private:
  const Dataset* ds_;
  const Encoder* enc_;
  std::vector<interp::Value> kept_; // example i once encoded, where keep_[i]
  std::vector<bool> keep_;          // within the bound
  int64_t encoded_ = 0;
};

/// Called in a handler for an error of a step or a run on examples idx[lo], ..., idx[hi - 1]
/// of `ds`: rethrows a kernel's "label L at position P is outside [0, C)" (a label the
/// check before training could not compare, its class count unknown there) as the error of the
/// first node of those trees labelled L, at the data file's line and column, the kernel's
/// message kept as a note; rethrows anything else as it is.
[[noreturn]] void rethrow_located(const Dataset& ds, const std::vector<size_t>& idx, size_t lo,
                                  size_t hi);

struct Scores {
  double loss = 0;
  int64_t nodes = 0, root_ok = 0, roots = 0, node_ok = 0, labeled = 0;
  /// Entry runs over the data (this rank's): one per batch with the one-pass entry, else one
  /// per batch and entry. The first batch's order check of infer_nodes is not counted.
  int64_t passes = 0;
};

/// Adds to `s` the all-node and root accuracy of trees[b..e) given infer_nodes' predictions
/// for them (a list per tree, children before parents; a count that does not match the tree's
/// nodes is an error).
void score_nodes(const interp::Value& preds, const std::vector<data::ParseTree>& trees, size_t b,
                 size_t e, Scores& s);
/// Adds to `s` the root accuracy of trees[b..e) given infer's predictions for them.
void score_roots(const interp::Value& preds, const std::vector<data::ParseTree>& trees, size_t b,
                 size_t e, Scores& s);

/// A data set made ready to be scored again and again (each round of `pejit eval`, the dev set
/// after each training epoch): split into batches of `batch` examples, this rank's share of
/// them (every ranks()-th from its rank on), each batch encoded on its first scoring and kept
/// for the next ones, so that a later scoring runs the entries and counts, nothing else.
/// `one_pass`: a batch of trees runs the session's one-pass evaluation entry
/// (SessionAccess::eval_entry) where the model has one, instead of its entries one by one. What
/// is kept is bounded by `max_nodes` (tree nodes or sentence words, summed): the batches past
/// it are encoded again on each scoring. `ds` and `enc` must outlive the set.
class EvalSet {
public:
  /// The default bound on the nodes kept encoded: KeptExamples'.
  static constexpr int64_t kMaxNodes = KeptExamples::kMaxNodes;

  EvalSet(const Dataset& ds, const Encoder& enc, int batch, int rank = 0, int ranks = 1,
          bool one_pass = false, int64_t max_nodes = kMaxNodes);

  const Dataset& data() const { return *ds_; }
  const Encoder& encoder() const { return *enc_; }
  bool one_pass() const { return one_pass_; }
  /// This rank's batches: examples [begin(i), end(i)) of the data set.
  size_t batches() const { return bounds_.size(); }
  size_t begin(size_t i) const { return bounds_[i].first; }
  size_t end(size_t i) const { return bounds_[i].second; }
  /// Batch i, encoded (kept from an earlier call where the bound allowed).
  pejit::Value batch(size_t i);
  /// Makes the batches of what `ex` (of the same data set) keeps, rather than encoding the
  /// examples again: the training set's scoring then shares the training loop's examples.
  void share(KeptExamples& ex) { examples_ = &ex; }
  /// Session::run of `entry` on batch i, `v` (batch(i)). A kept batch runs with what walking
  /// it finds (its nesting depth, plan key and payloads: SessionAccess::facts), found on its
  /// first run and kept with it; the set must then be run on that one session.
  pejit::Value run(Session& session, const std::string& entry, size_t i, const pejit::Value& v);
  /// Hands batch i (`v`, batch(i)) of `entry` to the session's planning pipeline, to be
  /// planned while the batch before it runs (SessionAccess::prefetch, with the facts run()
  /// keeps). A batch not kept is planned when it runs.
  void prefetch(Session& session, const std::string& entry, size_t i, const pejit::Value& v);
  /// The nodes that carry a loss in batch i (Dataset::nodes summed).
  int64_t nodes(size_t i) const { return nodes_[i]; }
  /// Batches encoded so far, over all scorings: batches() after any number of them when every
  /// batch is kept.
  int64_t encoded_batches() const { return encoded_; }
  /// Whether infer_nodes' order has been checked (check_node_order: once per set).
  bool order_checked = false;

private:
  const Dataset* ds_;
  const Encoder* enc_;
  KeptExamples* examples_ = nullptr; // share()
  bool one_pass_;
  std::vector<std::pair<size_t, size_t>> bounds_;
  std::vector<int64_t> nodes_;
  std::vector<pejit::Value> kept_; // batch i when held[i]
  std::vector<bool> held_;
  /// Batch i's facts, found on its first run or prefetch (a kept batch's).
  const std::shared_ptr<const BatchFacts>& facts(Session& session, size_t i, const pejit::Value& v);

  std::vector<std::shared_ptr<const BatchFacts>> facts_; // of kept batches, once run
  const Session* facts_of_ = nullptr;                    // the session they were found on
  std::vector<bool> keep_;                               // within the bound
  std::vector<size_t> idx_; // 0, 1, ..., size - 1 (Encoder::batch's index)
  int64_t encoded_ = 0;
};

/// Loss and accuracy over a data set (the entries `loss`, and `infer_nodes` or `infer` when
/// the model has them), without gradients, on the session (plans where its mode allows, the
/// generic path otherwise). With a one-pass set, a batch of trees runs the session's evaluation
/// entry instead (SessionAccess::eval_entry: added to the session's module on the first
/// scoring): one pass for the loss and the predictions. The set's rank and ranks must be the
/// session's.
Scores score(Session& session, EvalSet& set);

/// score() on a set made for this one scoring (nothing kept for another).
Scores score(Session& session, const Dataset& ds, const Encoder& enc, int batch,
             bool one_pass = false);

} // namespace pejit::runtime
