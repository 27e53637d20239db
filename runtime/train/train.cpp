// The training loop behind `pejit train`, on a public Session: the model and data are read
// first (the vocabulary sizes the model's V), then every batch is a Session::step on `loss`
// with the session's optimizer. Time is measured around the training steps only: data loading
// and evaluation passes are excluded from trees/s, as the benchmark protocol asks of pejit and
// its peers alike (docs/benchmarks.md).
#include "runtime/train/trainer.h"

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cuda/device.h"
#include "runtime/dist/comm.h"
#include "runtime/dist/grad_reducer.h"
#include "runtime/engine.h"
#include "runtime/optim/optimizer.h"
#include "runtime/session_access.h"
#include "runtime/train/common.h"
#include "runtime/train/embeddings.h"
#include "runtime/train/feed.h"
#include "runtime/train/labels.h"
#include "runtime/train/lifecycle.h"
#include "runtime/train/optim_setup.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <optional>
#include <ostream>
#include <unistd.h>

namespace pejit::runtime {

namespace {

nlohmann::json num(double v) {
  return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
}

// The per-epoch counters: the difference of the session's stats over the epoch.
void count_epoch(EpochStats& st, const SessionStats& before, const SessionStats& after) {
  st.specialized_batches = after.specialized_batches - before.specialized_batches;
  st.generic_batches = after.generic_batches - before.generic_batches;
  st.specialized_seconds = after.specialized_seconds - before.specialized_seconds;
  st.generic_seconds = after.generic_seconds - before.generic_seconds;
  st.threads = after.threads;
  st.jit_batches = after.jit_batches - before.jit_batches;
  st.jit_seconds = after.jit_seconds - before.jit_seconds;
  st.interpreted_groups = after.interpreted_groups - before.interpreted_groups;
  st.interpreted_seconds = after.interpreted_seconds - before.interpreted_seconds;
  st.interpreted_templates = after.interpreted_templates;
  st.kernels_compiled = after.kernels_compiled - before.kernels_compiled;
  st.kernels_cached = after.kernels_cached - before.kernels_cached;
  st.compile_ms = after.compile_ms - before.compile_ms;
  auto since_start = [](double s) { return s < 0 ? std::nan("") : s; };
  st.first_planned_s = since_start(after.first_planned_s);
  st.first_jit_s = since_start(after.first_jit_s);
  st.last_compile_s = since_start(after.last_compile_s);
  st.plan_ms = 1e3 * (after.plan_seconds - before.plan_seconds);
  st.background_plan_ms = 1e3 * (after.background_plan_seconds - before.background_plan_seconds);
  st.plan_hits = after.plan_hits - before.plan_hits;
  st.plan_misses = after.plan_misses - before.plan_misses;
  st.plans_prefetched = after.plans_prefetched - before.plans_prefetched;
  st.plan_evictions = after.plan_evictions - before.plan_evictions;
  st.fallbacks = after.fallbacks;
  st.ranks = after.ranks;
  st.grad_reductions = after.grad_reductions - before.grad_reductions;
  st.reductions_overlapped = after.reductions_overlapped - before.reductions_overlapped;
  st.comm_wait_seconds = after.comm_wait_seconds - before.comm_wait_seconds;
  st.comm_dense_bytes = after.comm_dense_bytes - before.comm_dense_bytes;
  st.comm_sparse_bytes = after.comm_sparse_bytes - before.comm_sparse_bytes;
}

// The share of the time on each path that ran on JIT kernels: a planned batch's groups in the
// batching interpreter ran none, so "specialized" alone overstates it.
void print_epoch(const EpochStats& st, std::ostream& os) {
  char buf[600];
  const double total = std::max(st.specialized_seconds + st.generic_seconds, 1e-9);
  std::snprintf(
      buf, sizeof buf,
      "epoch %d: loss/node %.4f  train root %s node %s  dev root %s node %s  "
      "%.1f trees/s  %.2fs  (generic %lld batches %.2fs, specialized %lld %.2fs, "
      "of it on JIT kernels %.2fs and in the batching interpreter %.2fs in %lld groups: %s of "
      "time on JIT kernels, %s specialized)\n",
      st.epoch + 1, st.loss_per_node, fmt_pct(st.root_acc).c_str(), fmt_pct(st.node_acc).c_str(),
      fmt_pct(st.dev_root_acc).c_str(), fmt_pct(st.dev_node_acc).c_str(), st.trees_per_s,
      st.seconds, static_cast<long long>(st.generic_batches), st.generic_seconds,
      static_cast<long long>(st.specialized_batches), st.specialized_seconds, st.jit_seconds,
      st.interpreted_seconds, static_cast<long long>(st.interpreted_groups),
      fmt_pct(st.jit_seconds / total).c_str(), fmt_pct(st.specialized_seconds / total).c_str());
  os << buf << std::flush;
}

void print_summary(const std::vector<EpochStats>& all, std::ostream& os) {
  const EpochStats& last = all.back();
  double trees = 0, seconds = 0, spec = 0, gen = 0, jit = 0, interp = 0;
  for (const auto& e : all) {
    trees += static_cast<double>(e.trees);
    seconds += e.seconds;
    spec += e.specialized_seconds;
    gen += e.generic_seconds;
    jit += e.jit_seconds;
    interp += e.interpreted_seconds;
  }
  const int epochs = static_cast<int>(all.size());
  const double total = std::max(spec + gen, 1e-9);
  char buf[600];
  std::snprintf(buf, sizeof buf,
                "summary: %d epoch%s, %.0f trees in %.2fs of training (%.1f trees/s); final "
                "loss/node %.4f, root accuracy train %s dev %s, all-node accuracy train %s dev "
                "%s; %s of training time ran on JIT kernels, %s in the batching interpreter, "
                "%s specialized\n",
                epochs, epochs == 1 ? "" : "s", trees, seconds, trees / std::max(seconds, 1e-9),
                last.loss_per_node, fmt_pct(last.root_acc).c_str(),
                fmt_pct(last.dev_root_acc).c_str(), fmt_pct(last.node_acc).c_str(),
                fmt_pct(last.dev_node_acc).c_str(), fmt_pct(jit / total).c_str(),
                fmt_pct(interp / total).c_str(), fmt_pct(spec / total).c_str());
  os << buf;
  for (const auto& what : last.interpreted_templates)
    os << "  in the batching interpreter: " << what << "\n";
  os << std::flush;
}

} // namespace

std::string EpochStats::json() const {
  nlohmann::json j;
  j["epoch"] = epoch;
  j["loss"] = num(loss_per_node);
  j["root_acc"] = num(root_acc);
  j["node_acc"] = num(node_acc);
  j["dev_loss"] = num(dev_loss_per_node);
  j["dev_root_acc"] = num(dev_root_acc);
  j["dev_node_acc"] = num(dev_node_acc);
  j["trees"] = trees;
  j["nodes"] = nodes;
  j["trees_per_s"] = trees_per_s;
  j["seconds"] = seconds;
  j["batches"] = batches;
  j["encoded_examples"] = encoded_examples;
  j["threads"] = threads;
  j["shuffle"] = shuffle_name(shuffle);
  j["specialized_batches"] = specialized_batches;
  j["generic_batches"] = generic_batches;
  j["specialized_seconds"] = specialized_seconds;
  j["generic_seconds"] = generic_seconds;
  j["jit_batches"] = jit_batches;
  j["jit_seconds"] = jit_seconds;
  j["interpreted_groups"] = interpreted_groups;
  j["interpreted_seconds"] = interpreted_seconds;
  j["interpreted_templates"] = interpreted_templates;
  j["kernels_compiled"] = kernels_compiled;
  j["kernels_cached"] = kernels_cached;
  j["compile_ms"] = compile_ms;
  j["first_planned_s"] = num(first_planned_s);
  j["first_jit_s"] = num(first_jit_s);
  j["last_compile_s"] = num(last_compile_s);
  j["plan_ms"] = plan_ms;
  j["background_plan_ms"] = background_plan_ms;
  j["plan_cache"] = {{"hits", plan_hits},
                     {"misses", plan_misses},
                     {"prefetched", plans_prefetched},
                     {"evictions", plan_evictions}};
  j["fallbacks"] = fallbacks;
  j["tuned"] = tuned.empty() ? nlohmann::json(nullptr) : nlohmann::json(tuned);
  j["device"] = device;
  j["ranks"] = ranks;
  if (ranks > 1)
    j["comm"] = {{"reductions", grad_reductions},
                 {"overlapped", reductions_overlapped},
                 {"wait_seconds", comm_wait_seconds},
                 {"dense_bytes", comm_dense_bytes},
                 {"sparse_bytes", comm_sparse_bytes}};
  if (kernels) {
    j["kernels"] = nlohmann::json::array();
    for (const auto& k : *kernels)
      j["kernels"].push_back({{"signature", k.signature},
                              {"schedule", k.schedule},
                              {"schedule_source", k.schedule_source},
                              {"compile_ms", k.compile_ms},
                              {"cached", k.cached},
                              {"ir_hash", fmt::format("{:016x}", k.ir_hash)}});
  }
  return j.dump();
}

namespace {

// An output file named by `flag` can be written: its directory exists, is a directory, and
// this process may create files in it. Throws pejit::Error naming the flag and the path.
void check_output_path(const char* flag, const std::string& path) {
  if (path.empty())
    return;
  namespace fs = std::filesystem;
  fs::path p(path);
  if (p.filename().empty())
    throw Error(std::string(flag) + " " + path + ": names a directory, not a file");
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::exists(dir, ec))
    throw Error(std::string(flag) + " " + path + ": the directory '" + dir.string() +
                "' does not exist");
  if (!fs::is_directory(dir, ec))
    throw Error(std::string(flag) + " " + path + ": '" + dir.string() + "' is not a directory");
  if (fs::is_directory(p, ec))
    throw Error(std::string(flag) + " " + path + ": is a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(std::string(flag) + " " + path + ": cannot write into '" + dir.string() + "'");
}

} // namespace

namespace {

// Every parameter of the session is finite: a state worth saving after a failure.
bool finite_params(const Session& s) {
  for (const auto& n : s.param_names())
    for (float v : s.get_param(n))
      if (!std::isfinite(v))
        return false;
  return true;
}

} // namespace

std::vector<EpochStats> train(const TrainOptions& opt, std::ostream& out_to, std::ostream& err_to) {
  (void)parse_mode(opt.session.mode); // a bad mode fails before anything is read
  // Data parallel (docs/distributed.md): rank 0 alone reports and writes checkpoints; every
  // rank trains its slice of each batch. Errors are still reported by each rank (the CLI).
  const int launch_rank = opt.session.distributed == "off" ? 0 : dist::detect_launch().rank;
  const bool writes = launch_rank == 0;
  std::ostream nowhere(nullptr);
  std::ostream& out = writes ? out_to : nowhere;
  std::ostream& err = writes ? err_to : nowhere;
  if (opt.check_replicas < 0)
    throw Error("--check-replicas must be >= 0");
  if (opt.epochs < 1)
    throw Error("--epochs must be >= 1");
  if (opt.batch < 1)
    throw Error("--batch must be >= 1");
  if (opt.eval_batch < 1)
    throw Error("--eval-batch must be >= 1");
  if (opt.save_every < 0)
    throw Error("--save-every must be >= 0");
  if (opt.patience < 0)
    throw Error("--patience must be >= 0");
  if (opt.save_every > 0 && opt.save.empty())
    throw Error("--save-every needs --save (where to write)");
  if (opt.patience > 0 && opt.save_best.empty())
    throw Error("--patience needs --save-best METRIC (what must improve)");
  if (!opt.resume.empty() && !opt.embeddings.empty())
    throw Error("--resume and --embeddings exclude each other (--resume restores the "
                "parameters, the embedding included)");
  if (opt.embeddings.empty() && !opt.embeddings_param.empty())
    throw Error("--embeddings-param needs --embeddings FILE");
  if (!opt.resume.empty() && !opt.init_params.empty())
    throw Error("--resume and --init exclude each other (--resume restores the parameters too)");
  std::optional<Metric> metric;
  if (!opt.save_best.empty()) {
    metric = Metric::parse(opt.save_best);
    if (metric->name.rfind("dev_", 0) == 0 && opt.dev.empty())
      throw Error("--save-best " + metric->name + " needs --dev");
    if ((metric->name == "root_acc" || metric->name == "node_acc") && !opt.train_eval)
      throw Error("--save-best " + metric->name +
                  " needs the training set's accuracy (drop --no-train-eval)");
  }
  // With --save-best, `save` holds the best epoch's model; the latest state goes beside it.
  const std::string latest =
      !writes ? "" : (opt.save.empty() || !metric ? opt.save : opt.save + ".last");
  // Where the results go is checked before any training: a run must not end by failing to
  // write what it computed.
  if (writes) {
    check_output_path("--save", opt.save);
    check_output_path("--trace", opt.session.trace_file);
  }
  SignalGuard signals(opt.handle_signals);
  std::ostream& info = opt.json ? err : out;
  SessionOptions so = opt.session;
  if (!writes)
    so.trace_file.clear();
  // A bad --tuned file fails before anything is read or run.
  if (!opt.tuned.empty())
    so.compile.schedules = ScheduleDB::load(opt.tuned);
  const LabelScheme labels = parse_labels(opt.labels);
  auto m = load_model(opt.model);
  ir::Type elem = batch_element_type(*m, "loss");

  data::Vocab vocab;
  RunState run;
  std::optional<checkpoint::TrainState> resumed;
  std::optional<checkpoint::Checkpoint> init;
  Dataset train_ds;
  if (!opt.resume.empty()) {
    // Resuming keeps the checkpoint's vocabulary exactly: the run's ids must not move.
    checkpoint::Checkpoint ck = checkpoint::load(opt.resume);
    vocab = data::Vocab::from_words(ck.vocab);
    if (!ck.training)
      throw Error("--resume " + opt.resume +
                  ": the checkpoint holds no training state (written by a version 1 pejit or "
                  "by Session::save); --init starts from its parameters");
    resumed = ck.training;
    run = RunState::from(*ck.training, opt.resume);
    train_ds = read_dataset(opt.data, vocab, false, elem);
  } else if (!opt.init_params.empty()) {
    // The data's words are matched to the checkpoint's by text (read_dataset_for_init).
    init = checkpoint::load(opt.init_params);
    vocab = data::Vocab::from_words(init->vocab);
    std::string note;
    train_ds =
        read_dataset_for_init(opt.data, vocab, init->vocab.size(), elem, *m, opt.init_params, note);
    if (!note.empty())
      err << "note: " << note << "\n";
  } else {
    train_ds = read_dataset(opt.data, vocab, true, elem);
  }
  if (labels != LabelScheme::Fine)
    err << describe(apply_labels(train_ds, labels, opt.data), opt.data) << "\n";
  train_ds.limit(opt.limit);
  Dataset dev_ds;
  if (!opt.dev.empty()) {
    dev_ds = read_dataset(opt.dev, vocab, false, elem);
    if (labels != LabelScheme::Fine)
      err << describe(apply_labels(dev_ds, labels, opt.dev), opt.dev) << "\n";
  }
  if (metric && (metric->name.find("acc") != std::string::npos) &&
      (!train_ds.is_trees || !((m->fn("infer") && m->fn("infer")->is_entry) ||
                               (m->fn("infer_nodes") && m->fn("infer_nodes")->is_entry))))
    throw Error("--save-best " + metric->name +
                ": no accuracy to follow (it needs trees and an `infer` or `infer_nodes` entry); "
                "follow a loss instead");
  for (const auto& [name, size] : vocab_dims(*m, vocab))
    so.dims[name] = size;
  // Both data sets are checked against the model (labels, arity) before any training.
  const Encoder enc(*m, train_ds, elem, interp::bind_dims(*m, so.dims),
                    labels == LabelScheme::Binary);
  enc.check(dev_ds);

  int start_epoch = 0;
  size_t start_batch = 0;
  const size_t n = train_ds.size();
  if (resumed) {
    so.seed = run.seed; // the data order (and anything else the seed keys) of the run resumed
    if (run.examples != static_cast<int64_t>(n))
      throw Error("--resume " + opt.resume + ": the run trained on " +
                  std::to_string(run.examples) + " examples, --data (with --limit) gives " +
                  std::to_string(n));
    if (resumed->epoch >= opt.epochs)
      throw Error("--resume " + opt.resume + ": the run has done " +
                  std::to_string(resumed->epoch) +
                  " epochs already; --epochs counts from its start and must be larger");
  } else {
    run.seed = so.seed;
    run.examples = static_cast<int64_t>(n);
    run.batch_size = opt.batch;
    run.shuffle = opt.shuffle;
  }
  so.batches_repeat = so.batches_repeat || run.shuffle != Shuffle::Examples;
  const size_t bs = static_cast<size_t>(run.batch_size);
  const size_t nb = (n + bs - 1) / bs;
  if (resumed) {
    if (resumed->batch > static_cast<int64_t>(nb))
      throw Error("--resume " + opt.resume + ": batch " + std::to_string(resumed->batch) +
                  " of an epoch of " + std::to_string(nb));
    start_epoch = static_cast<int>(resumed->epoch);
    start_batch = static_cast<size_t>(resumed->batch);
  }

  const std::string emb_param =
      opt.embeddings.empty() ? "" : embedding_param(*m, opt.embeddings_param);
  Session session = SessionAccess::from_module(m, so);
  std::string optim_text;
  const optim::LrSchedule schedule = setup_optimizer(session, opt, optim_text);
  if (resumed && run.optim != optim_text)
    throw Error("--resume " + opt.resume + ": the run was trained with optimizer options '" +
                run.optim + "', this one asks for '" + optim_text +
                "' (resume with the same --lr-schedule, --param-lr, --param-decay, "
                "--no-decay-bias and --freeze)");
  run.optim = optim_text;
  if (init)
    init_by_word(session, *m, *init, opt.init_params);
  if (!opt.embeddings.empty())
    err << load_embeddings(session, emb_param, opt.embeddings, vocab, train_ds).str(opt.embeddings)
        << "\n";
  if (resumed) {
    try {
      session.load_training(opt.resume);
    } catch (const Error& e) {
      throw Error("--resume " + opt.resume + ": " + e.what() +
                  " (resume with the model and --optimizer of the run that wrote it)");
    }
    run.restore_random(session); // dropout draws the masks the run would have drawn
    info << "resuming " << opt.resume << " at epoch " << start_epoch + 1 << ", batch "
         << start_batch << "/" << nb << " (seed " << run.seed << ", batch size " << bs
         << (run.shuffle == Shuffle::None      ? ", fixed batches"
             : run.shuffle == Shuffle::Batches ? ", shuffled batches"
                                               : "")
         << ")\n"
         << std::flush;
  }
  warn_schedules(so, err);

  const bool progress = opt.progress < 0 ? isatty(2) : opt.progress > 0;
  BatchOrder batch_order(n, so.seed);
  for (int e = 0; e < start_epoch; ++e) // the orders of the epochs done, replayed
    (void)batch_order.next_epoch(run.shuffle, bs);

  const std::vector<std::string> words = vocab.words();
  const std::map<std::string, std::string> meta = {{"model", opt.model}};
  auto save_to = [&](const std::string& path, int64_t epoch, int64_t batch) {
    session.save_training(path, run.at(epoch, batch, session), words, meta);
  };
  // The signal this process got, or in a data-parallel run any rank got (all stop together).
  auto agreed_signal = [&session]() {
    int sig = SignalGuard::pending();
    if (session.ranks() > 1)
      for (const auto& r : session.gather_ranks({static_cast<double>(sig)}))
        sig = std::max(sig, static_cast<int>(r[0]));
    return sig;
  };
  // Stops the run after a signal: the state (epoch, batch next to run) saved first.
  auto stop_if_signalled = [&](int64_t epoch, size_t batch) {
    int sig = agreed_signal();
    if (sig == 0)
      return;
    if (progress)
      err << "\n";
    std::string where = "at epoch " + std::to_string(epoch + 1) + ", batch " +
                        std::to_string(batch) + "/" + std::to_string(nb);
    if (batch == 0 && epoch > 0)
      where = "after epoch " + std::to_string(epoch);
    std::string msg = "training interrupted by " + signal_name(sig) + " " + where;
    if (!latest.empty()) {
      save_to(latest, epoch, static_cast<int64_t>(batch));
      msg += "; saved the training state to " + latest + " (continue with --resume " + latest + ")";
    } else {
      msg += "; nothing saved (no --save)";
    }
    err << "pejit: " << msg << "\n" << std::flush;
    session.write_trace();
    throw Interrupted(sig, msg);
  };
  // After a failure at `batch`: the state before it is saved when it is worth keeping.
  // Returns what was done, for the error message.
  auto save_failure = [&](int64_t epoch, size_t batch) -> std::string {
    if (latest.empty())
      return "";
    if (!finite_params(session))
      return "; nothing saved: the parameters are no longer finite (an earlier update "
             "overflowed)";
    save_to(latest, epoch, static_cast<int64_t>(batch));
    return "; the last good state (the parameters before that batch) is saved in " + latest;
  };

  // Each training example is encoded once and kept for the later epochs (KeptExamples).
  KeptExamples examples(train_ds, enc);
  // The sets scored after each epoch, encoded on the first scoring and kept for the next ones
  // (the training set's of the examples kept for training); one entry per batch for the loss
  // and the predictions.
  std::optional<EvalSet> train_set, dev_set;
  if (opt.train_eval) {
    train_set.emplace(train_ds, enc, opt.eval_batch, session.rank(), session.ranks(), true);
    train_set->share(examples);
  }
  if (!opt.dev.empty())
    dev_set.emplace(dev_ds, enc, opt.eval_batch, session.rank(), session.ranks(), true);

  std::vector<EpochStats> all;
  // Batches are made `lookahead` ahead of training and handed to the session's pipeline (auto
  // and specialized mode). Without a pipeline (generic) each is made just before its step.
  std::vector<int64_t> loss_nodes(n); // Dataset::nodes of each example, counted once
  for (size_t i = 0; i < n; ++i)
    loss_nodes[i] = train_ds.nodes(i);
  const size_t look =
      parse_mode(so.mode) != Mode::Generic ? static_cast<size_t>(std::max(1, so.lookahead)) : 0;
  int ep = start_epoch;
  for (; ep < opt.epochs; ++ep) {
    const std::vector<size_t>& order = batch_order.next_epoch(run.shuffle, bs);
    const size_t first = ep == start_epoch ? start_batch : 0;
    if (first == 0)
      run.new_epoch();
    EpochStats st;
    st.epoch = ep;
    int64_t trees_here = 0; // stepped by this process (a resumed epoch began elsewhere)
    auto last_print = Clock::now();
    SessionStats before = session.stats();
    const int64_t encoded_before = examples.encoded();
    BatchFeed feed(session, examples, train_ds, order, bs, first, look);
    for (size_t b = first; b < nb; ++b) {
      stop_if_signalled(ep, b);
      size_t lo = b * bs;
      size_t hi = std::min(n, lo + bs);
      float loss = 0;
      auto t0 = Clock::now();
      try {
        pejit::Value v = feed.take(b);
        if (!optim_text.empty()) // the schedule's factor at this batch of the run
          SessionAccess::optimizer(session).set_lr_scale(static_cast<float>(schedule.factor(
              static_cast<int64_t>(ep) * static_cast<int64_t>(nb) + static_cast<int64_t>(b))));
        t0 = Clock::now();
        loss = session.step("loss", v);
        SessionAccess::retire(session, v);
      } catch (const Error&) {
        // The step made no update: the parameters are those before this batch.
        if (progress)
          err << "\n";
        std::string saved = save_failure(ep, b);
        if (!saved.empty())
          err << "pejit: epoch " << ep + 1 << ", batch " << b << " failed" << saved << "\n"
              << std::flush;
        rethrow_located(train_ds, order, lo, hi); // a bad label, at its line and column
      }
      auto t1 = Clock::now();
      double dt = secs(t0, t1);
      st.seconds += dt;
      feed.stepped(b);
      if (opt.explain) {
        std::string why = session.explain("loss");
        if (!why.empty())
          err << "batch " << b << " ran generic: " << why << "\n";
      }
      if (!std::isfinite(loss)) {
        // Session::step made no update for it.
        if (progress)
          err << "\n";
        // The step drew its masks (one random step) but made no update: saved as before it.
        session.set_random(session.random_seed(), session.random_step() - 1);
        std::string saved = save_failure(ep, b);
        std::string msg = "the loss became " + std::to_string(loss) + " at epoch " +
                          std::to_string(ep + 1) + ", batch " + std::to_string(b) +
                          " (try a smaller --lr or --clip)" + saved;
        // Data parallel: the loss is the whole batch's, so every rank stops here together.
        if (session.ranks() > 1)
          throw dist::JobError(msg);
        throw Error(msg);
      }
      run.loss_sum += loss;
      for (size_t i = lo; i < hi; ++i)
        run.nodes += loss_nodes[order[i]];
      run.trees += static_cast<int64_t>(hi - lo);
      trees_here += static_cast<int64_t>(hi - lo);
      run.batches += 1;
      if (opt.check_replicas > 0 && run.batches % opt.check_replicas == 0)
        session.check_replicas();
      if (progress && (secs(last_print, t1) > 0.25 || b + 1 == nb)) {
        last_print = t1;
        double tps = trees_here / std::max(st.seconds, 1e-9);
        double eta = static_cast<double>(n - static_cast<size_t>(run.trees)) / std::max(tps, 1e-9);
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "\repoch %d  batch %zu/%zu  loss %.4f  %.0f trees/s  ETA %.0fs   ", ep + 1,
                      b + 1, nb, run.loss_sum / std::max<int64_t>(1, run.nodes), tps, eta);
        err << buf << std::flush;
      }
    }
    if (progress)
      err << "\n";
    stop_if_signalled(ep, nb);
    session.drain();
    session.check_replicas(); // every rank holds the same parameters (nothing to do alone)
    count_epoch(st, before, session.stats());
    st.tuned = opt.tuned;
    st.shuffle = run.shuffle;
    st.device = cuda::parse_device(opt.session.device).name();
    st.nodes = run.nodes;
    st.trees = run.trees;
    st.batches = run.batches;
    st.loss_per_node = run.loss_sum / std::max<int64_t>(1, run.nodes);
    st.trees_per_s = trees_here / std::max(st.seconds, 1e-9);
    if (opt.train_eval) {
      Scores s = score(session, *train_set);
      st.root_acc = ratio(s.root_ok, s.roots);
      st.node_acc = ratio(s.node_ok, s.labeled);
    }
    st.encoded_examples = examples.encoded() - encoded_before;
    if (!opt.dev.empty()) {
      Scores s = score(session, *dev_set);
      st.dev_loss_per_node = s.loss / std::max<int64_t>(1, s.nodes);
      st.dev_root_acc = ratio(s.root_ok, s.roots);
      st.dev_node_acc = ratio(s.node_ok, s.labeled);
    }
    if (ep + 1 == opt.epochs) {
      st.kernels.emplace();
      for (const auto& k : session.kernels())
        st.kernels->push_back(
            {k.signature, k.schedule, k.schedule_source, k.ir_hash, k.compile_ms, k.cached});
    }
    if (opt.json)
      out << st.json() << "\n" << std::flush;
    print_epoch(st, info);
    all.push_back(st);
    run.new_epoch();
    bool stop_early = false;
    if (metric) {
      double v = metric->of(st);
      if (std::isnan(v))
        throw Error("--save-best " + metric->name + ": the metric is not available");
      if (std::isnan(run.best) || metric->better(v, run.best)) {
        run.best = v;
        run.best_epoch = ep;
        run.bad_epochs = 0;
        if (writes && !opt.save.empty()) {
          save_to(opt.save, ep + 1, 0);
          info << "saved " << opt.save << ": the best " << metric->name << " so far ("
               << metric->show(v) << ", epoch " << ep + 1 << ")\n"
               << std::flush;
        }
      } else if (++run.bad_epochs >= opt.patience && opt.patience > 0) {
        stop_early = true;
        info << "stopping early: " << metric->name << " has not improved for " << run.bad_epochs
             << " epoch" << (run.bad_epochs == 1 ? "" : "s") << " (best " << metric->show(run.best)
             << " at epoch " << run.best_epoch + 1 << ")\n"
             << std::flush;
      }
    }
    if (!latest.empty() && opt.save_every > 0 && (ep + 1) % opt.save_every == 0 &&
        ep + 1 < opt.epochs && !stop_early) {
      save_to(latest, ep + 1, 0);
      info << "saved " << latest << " (epoch " << ep + 1 << ")\n" << std::flush;
    }
    if (stop_early) {
      ++ep;
      break;
    }
    if (ep + 1 < opt.epochs)
      stop_if_signalled(ep + 1, 0);
  }
  if (!all.empty())
    print_summary(all, info);
  session.write_trace();
  if (!latest.empty()) {
    save_to(latest, ep, 0);
    info << "saved " << latest;
    if (metric && !opt.save.empty())
      info << " (the last epoch; the best, epoch " << run.best_epoch + 1 << ", is in " << opt.save
           << ")";
    info << "\n" << std::flush;
  }
  if (int sig = agreed_signal()) {
    std::string msg = signal_name(sig) + " arrived after the last epoch; the run is complete";
    err << "pejit: " << msg << "\n" << std::flush;
    throw Interrupted(sig, msg);
  }
  return all;
}

} // namespace pejit::runtime
