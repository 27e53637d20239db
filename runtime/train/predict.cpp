// `pejit predict`: saved parameters' predictions on a data file, one line per tree in the
// file's order: the `infer` entry's class (the root's), or with --nodes every node's class from
// `infer_nodes`, children before parents, the root last. Labels in the file are not needed
// (`-` everywhere is fine) and not used.
#include "runtime/train/trainer.h"

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/engine.h"
#include "runtime/session_access.h"
#include "runtime/train/common.h"

#include <cstdio>
#include <numeric>
#include <ostream>

namespace pejit::runtime {

namespace {

bool has_entry(const ir::Module& m, const char* name) {
  return m.fn(name) && m.fn(name)->is_entry;
}

} // namespace

int64_t predict(const PredictOptions& opt, std::ostream& err) {
  (void)parse_mode(opt.session.mode);
  if (opt.batch < 1)
    throw Error("--batch must be >= 1");
  if (opt.out.empty())
    throw Error("predict needs -o FILE (where the predictions go)");
  SessionOptions so = opt.session;
  if (!opt.tuned.empty())
    so.compile.schedules = ScheduleDB::load(opt.tuned);
  auto m = load_model(opt.model);
  const char* entry = opt.nodes ? "infer_nodes" : "infer";
  if (!has_entry(*m, entry))
    throw Error("the model '" + opt.model + "' has no entry `" + entry + "` (" +
                (opt.nodes ? "--nodes predicts every node with `infer_nodes(batch: List[T]) -> "
                             "List[List[i32[]]]`"
                           : "predictions per tree come from `infer(batch: List[T]) -> "
                             "List[i32[]]`") +
                ", docs/language.md)");
  ir::Type elem = batch_element_type(*m, entry);
  const checkpoint::Checkpoint ck = checkpoint::load(opt.params);
  data::Vocab vocab = data::Vocab::from_words(ck.vocab);
  Dataset ds = read_dataset(opt.data, vocab, false, elem);
  if (!ds.is_trees)
    throw Error("predict reads trees (the model's `" + std::string(entry) +
                "` takes sentences, which it does not predict per tree)");
  ds.limit(opt.limit);
  for (auto& t : ds.trees) // the labels play no part: none is checked against the classes
    for (auto& n : t.nodes)
      n.label = -1;
  // The output is checked before anything runs: a run must not end by failing to write it.
  const std::string tmp = opt.out + ".tmp";
  if (FILE* probe = std::fopen(tmp.c_str(), "wb")) {
    std::fclose(probe);
    std::remove(tmp.c_str());
  } else {
    throw Error("-o " + opt.out + ": cannot write (does its directory exist?)");
  }
  for (const auto& [name, size] : vocab_dims(*m, vocab))
    so.dims[name] = size;
  const Encoder enc(*m, ds, elem, interp::bind_dims(*m, so.dims), true);
  // The checkpoint's parameters, read once; inference only: forward kernels alone compile.
  Session session = SessionAccess::from_module(m, so, &ck, opt.params, true);
  warn_schedules(so, err);

  std::string text;
  std::vector<size_t> idx(ds.size());
  std::iota(idx.begin(), idx.end(), 0);
  for (size_t b = 0; b < ds.size(); b += static_cast<size_t>(opt.batch)) {
    size_t e = std::min(ds.size(), b + static_cast<size_t>(opt.batch));
    pejit::Value res = session.run(entry, SessionAccess::wrap(enc.batch(ds, idx, b, e)));
    // Read in place (no public Value per prediction).
    const interp::Value& out = SessionAccess::unwrap(res);
    if (out.kind() != interp::Value::Kind::List || out.list_size() != e - b)
      throw Error(std::string(entry) + " returned " +
                  (out.kind() == interp::Value::Kind::List ? std::to_string(out.list_size())
                                                           : std::string("no list of")) +
                  " results for a batch of " + std::to_string(e - b) + " trees");
    for (size_t i = b; i < e; ++i) {
      const interp::Value& p = out.list_at(i - b);
      if (!opt.nodes) {
        text += std::to_string(p.as_tensor().item_i32()) + "\n";
        continue;
      }
      const size_t n = ds.trees[i].nodes.size();
      if (p.list_size() != n)
        throw Error("infer_nodes returned " + std::to_string(p.list_size()) +
                    " predictions for the tree of " + opt.data + " line " +
                    std::to_string(ds.trees[i].origin.line) + ", which has " + std::to_string(n) +
                    " nodes");
      for (size_t k = 0; k < n; ++k) {
        if (k)
          text += ' ';
        text += std::to_string(p.list_at(k).as_tensor().item_i32());
      }
      text += "\n";
    }
  }
  // Written whole or not at all: a temporary file beside it, then a rename.
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    throw Error("-o " + opt.out + ": cannot write (does its directory exist?)");
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), opt.out.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("-o " + opt.out + ": cannot write");
  }
  return static_cast<int64_t>(ds.size());
}

} // namespace pejit::runtime
