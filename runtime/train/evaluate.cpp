// `pejit eval`: the scores of saved parameters on a data set, on a public Session (the same
// scoring pass as training's per-epoch accuracy, common.h).
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
  SessionOptions so = opt.session;
  if (!opt.tuned.empty())
    so.compile.schedules = ScheduleDB::load(opt.tuned);
  const LabelScheme labels = parse_labels(opt.labels);
  auto m = load_model(opt.model);
  ir::Type elem = batch_element_type(*m, "loss");
  data::Vocab vocab = data::Vocab::from_words(checkpoint::load(opt.params).vocab);
  Dataset ds = read_dataset(opt.data, vocab, false, elem);
  if (labels != LabelScheme::Fine)
    err << describe(apply_labels(ds, labels, opt.data), opt.data) << "\n";
  ds.limit(opt.limit);
  for (const auto& [name, size] : vocab_dims(*m, vocab))
    so.dims[name] = size;
  const Encoder enc(*m, ds, elem, interp::bind_dims(*m, so.dims), labels == LabelScheme::Binary);
  Session session = SessionAccess::from_module(m, so);
  // The parameters only: evaluation takes no step, whatever optimizer wrote the checkpoint.
  session.load_params(opt.params);
  warn_schedules(so, err);
  auto t0 = Clock::now();
  Scores s = score(session, ds, enc, opt.batch);
  EvalStats st;
  st.device = cuda::parse_device(opt.session.device).name();
  st.seconds = secs(t0, Clock::now());
  SessionStats ss = session.stats();
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
