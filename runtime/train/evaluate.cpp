// `pejit eval`: the scores of saved parameters on a data set, on a public Session (the same
// scoring as training's per-epoch accuracy, common.h), one pass per batch: the loss and every
// prediction from one entry (eval_entry.h).
#include "runtime/train/trainer.h"

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cuda/device.h"
#include "runtime/engine.h"
#include "runtime/session_access.h"
#include "runtime/train/common.h"
#include "runtime/train/labels.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ostream>

namespace pejit::runtime {

namespace {
// The entries the two-pass scoring runs (score()): "loss+infer_nodes", "loss+infer", "loss".
std::string describe_entries(const ir::Module& m) {
  for (const char* e : {"infer_nodes", "infer"})
    if (m.fn(e) != nullptr && m.fn(e)->is_entry)
      return std::string("loss+") + e;
  return "loss";
}
} // namespace

std::string EvalStats::json() const {
  auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  nlohmann::json j;
  j["trees"] = trees;
  j["nodes"] = nodes;
  j["loss"] = num(loss_per_node);
  j["root_acc"] = num(root_acc);
  j["node_acc"] = num(node_acc);
  j["seconds"] = seconds;
  j["trees_per_s"] = trees_per_s;
  j["round_seconds"] = round_seconds;
  j["passes"] = passes;
  j["grad_batches"] = grad_batches;
  j["encoded_batches"] = encoded_batches;
  j["entry"] = entry;
  j["plan_seconds"] = plan_seconds;
  j["specialized_batches"] = specialized_batches;
  j["generic_batches"] = generic_batches;
  j["specialized_seconds"] = specialized_seconds;
  j["generic_seconds"] = generic_seconds;
  j["jit_seconds"] = jit_seconds;
  j["kernels_compiled"] = kernels_compiled;
  j["kernels_cached"] = kernels_cached;
  j["device"] = device;
  j["threads"] = threads;
  return j.dump();
}

EvalStats evaluate(const EvalOptions& opt, std::ostream& out, std::ostream& err) {
  (void)parse_mode(opt.session.mode); // a bad mode fails before anything is read
  if (opt.batch < 1)
    throw Error("--batch must be >= 1");
  if (opt.rounds < 1)
    throw Error("--rounds must be >= 1");
  SessionOptions so = opt.session;
  if (!opt.tuned.empty())
    so.compile.schedules = ScheduleDB::load(opt.tuned);
  const LabelScheme labels = parse_labels(opt.labels);
  auto m = load_model(opt.model);
  ir::Type elem = batch_element_type(*m, "loss");
  const checkpoint::Checkpoint ck = checkpoint::load(opt.params);
  data::Vocab vocab = data::Vocab::from_words(ck.vocab);
  Dataset ds = read_dataset(opt.data, vocab, false, elem);
  if (labels != LabelScheme::Fine)
    err << describe(apply_labels(ds, labels, opt.data), opt.data) << "\n";
  ds.limit(opt.limit);
  for (const auto& [name, size] : vocab_dims(*m, vocab))
    so.dims[name] = size;
  const Encoder enc(*m, ds, elem, interp::bind_dims(*m, so.dims), labels == LabelScheme::Binary);
  // The checkpoint's parameters only: evaluation takes no step, whatever optimizer wrote it.
  // Inference only: the templates compile their forward kernels alone.
  Session session = SessionAccess::from_module(m, so, &ck, opt.params, true);
  warn_schedules(so, err);
  EvalStats st;
  Scores s;
  // Encoded in the first round, the batches are kept for the next ones.
  EvalSet set(ds, enc, opt.batch, session.rank(), session.ranks(), opt.one_pass);
  for (int r = 0; r < opt.rounds; ++r) {
    auto t0 = Clock::now();
    s = score(session, set);
    st.round_seconds.push_back(secs(t0, Clock::now()));
  }
  st.encoded_batches = set.encoded_batches();
  st.device = cuda::parse_device(opt.session.device).name();
  st.seconds = st.round_seconds.front();
  st.passes = s.passes;
  // The session's one-pass entry, made by the first round (an empty name: the model has none).
  const EvalEntry fused = set.one_pass() ? SessionAccess::eval_entry(session) : EvalEntry{};
  st.entry = !fused.name.empty() ? fused.name
             : !ds.is_trees      ? "loss"
                                 : describe_entries(SessionAccess::module(session));
  SessionStats ss = session.stats();
  st.grad_batches = ss.grad_batches;
  st.plan_seconds = ss.plan_seconds + ss.background_plan_seconds;
  st.specialized_batches = ss.specialized_batches;
  st.generic_batches = ss.generic_batches;
  st.specialized_seconds = ss.specialized_seconds;
  st.generic_seconds = ss.generic_seconds;
  st.jit_seconds = ss.jit_seconds;
  st.kernels_compiled = ss.kernels_compiled;
  st.kernels_cached = ss.kernels_cached;
  st.threads = ss.threads;
  st.trees = static_cast<int64_t>(ds.size());
  st.nodes = s.nodes;
  st.loss_per_node = s.loss / std::max<int64_t>(1, s.nodes);
  st.root_acc = ratio(s.root_ok, s.roots);
  st.node_acc = ratio(s.node_ok, s.labeled);
  st.trees_per_s = st.trees / std::max(st.seconds, 1e-9);
  if (opt.json) {
    out << st.json() << "\n";
  } else {
    char buf[300];
    std::snprintf(buf, sizeof buf, "eval: %lld trees  loss/node %.4f  root %s  node %s  %.2fs\n",
                  static_cast<long long>(st.trees), st.loss_per_node, fmt_pct(st.root_acc).c_str(),
                  fmt_pct(st.node_acc).c_str(), st.seconds);
    out << buf;
  }
  return st;
}

} // namespace pejit::runtime
