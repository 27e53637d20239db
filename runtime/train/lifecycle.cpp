// Signal capture, --save-best metrics and exact number text for `pejit train` (lifecycle.h).
#include "runtime/train/lifecycle.h"

#include "runtime/train/common.h"

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace pejit::runtime {

namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

struct sigaction g_old_int, g_old_term;

extern "C" void on_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig); // the first signal is the one reported
}

// The training state's "shuffle": "1" and "0" as written before batches could be shuffled
// (examples, none), "batches" for Shuffle::Batches.
const char* shuffle_word(Shuffle s) {
  return s == Shuffle::Examples ? "1" : s == Shuffle::None ? "0" : "batches";
}
Shuffle shuffle_of(const std::string& word, const std::string& what) {
  for (Shuffle s : {Shuffle::Examples, Shuffle::Batches, Shuffle::None})
    if (word == shuffle_word(s))
      return s;
  throw Error(what + ": '" + word + "' is not a data order (1, 0 or batches)");
}

} // namespace

SignalGuard::SignalGuard(bool active) : active_(active) {
  g_signal.store(0);
  if (!active_)
    return;
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART; // the engine's threads' system calls carry on
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

SignalGuard::~SignalGuard() {
  if (!active_)
    return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int SignalGuard::pending() {
  return g_signal.load(std::memory_order_relaxed);
}

std::string signal_name(int sig) {
  if (sig == SIGINT)
    return "SIGINT";
  if (sig == SIGTERM)
    return "SIGTERM";
  return "signal " + std::to_string(sig);
}

Metric Metric::parse(const std::string& name) {
  if (name == "loss" || name == "dev_loss")
    return {name, false};
  if (name == "root_acc" || name == "node_acc" || name == "dev_root_acc" || name == "dev_node_acc")
    return {name, true};
  throw Error("--save-best: unknown metric '" + name +
              "' (expected dev_root_acc, dev_node_acc, dev_loss, root_acc, node_acc or loss)");
}

double Metric::of(const EpochStats& st) const {
  if (name == "loss")
    return st.loss_per_node;
  if (name == "dev_loss")
    return st.dev_loss_per_node;
  if (name == "root_acc")
    return st.root_acc;
  if (name == "node_acc")
    return st.node_acc;
  if (name == "dev_root_acc")
    return st.dev_root_acc;
  return st.dev_node_acc;
}

std::string Metric::show(double v) const {
  if (higher_is_better)
    return fmt_pct(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

TrainingState RunState::at(int64_t epoch, int64_t batch, const Session& session) const {
  TrainingState ts;
  ts.epoch = epoch;
  ts.batch = batch;
  ts.values = {{"seed", std::to_string(seed)},
               {"examples", std::to_string(examples)},
               {"batch_size", std::to_string(batch_size)},
               {"shuffle", shuffle_word(shuffle)},
               {"loss_sum", exact(loss_sum)},
               {"nodes", std::to_string(nodes)},
               {"trees", std::to_string(trees)},
               {"batches", std::to_string(batches)},
               {"best", exact(best)},
               {"best_epoch", std::to_string(best_epoch)},
               {"bad_epochs", std::to_string(bad_epochs)},
               {"optim", optim},
               {"random_seed", std::to_string(session.random_seed())},
               {"random_step", std::to_string(session.random_step())}};
  return ts;
}

RunState RunState::from(const checkpoint::TrainState& ts, const std::string& path) {
  auto get = [&](const char* key) -> const std::string& {
    auto it = ts.values.find(key);
    if (it == ts.values.end())
      throw Error("--resume " + path + ": the training state lacks '" + key +
                  "' (not written by pejit train)");
    return it->second;
  };
  auto what = [&](const char* key) { return "--resume " + path + ": training." + key; };
  RunState r;
  auto seed_of = [&](const char* key) {
    const std::string& seed = get(key);
    char* end = nullptr;
    errno = 0;
    uint64_t v = std::strtoull(seed.c_str(), &end, 10);
    if (seed.empty() || seed[0] == '-' || end != seed.c_str() + seed.size() || errno == ERANGE)
      throw Error(what(key) + ": '" + seed + "' is not a seed");
    return v;
  };
  r.seed = seed_of("seed");
  r.examples = parse_int(get("examples"), what("examples"));
  r.batch_size = parse_int(get("batch_size"), what("batch_size"));
  r.shuffle = shuffle_of(get("shuffle"), what("shuffle"));
  r.loss_sum = parse_exact(get("loss_sum"), what("loss_sum"));
  r.nodes = parse_int(get("nodes"), what("nodes"));
  r.trees = parse_int(get("trees"), what("trees"));
  r.batches = parse_int(get("batches"), what("batches"));
  r.best = parse_exact(get("best"), what("best"));
  r.best_epoch = get("best_epoch") == "-1" ? -1 : parse_int(get("best_epoch"), what("best_epoch"));
  r.bad_epochs = parse_int(get("bad_epochs"), what("bad_epochs"));
  if (auto it = ts.values.find("optim"); it != ts.values.end()) // absent before schedules
    r.optim = it->second;
  if (r.batch_size < 1)
    throw Error(what("batch_size") + " must be >= 1");
  if (ts.values.count("random_step")) {
    r.random_seed = seed_of("random_seed");
    int64_t step = parse_int(get("random_step"), what("random_step"));
    if (step > static_cast<int64_t>(UINT32_MAX))
      throw Error(what("random_step") + ": " + std::to_string(step) + " is out of range");
    r.random_step = static_cast<uint32_t>(step);
  } else { // written before the random state was kept: a run from its start, one step a batch
    const int64_t batches = (r.examples + r.batch_size - 1) / r.batch_size;
    r.random_seed = r.seed;
    r.random_step = static_cast<uint32_t>(ts.epoch * batches + ts.batch);
  }
  return r;
}

std::string exact(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

double parse_exact(const std::string& s, const std::string& what) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size())
    throw Error(what + ": '" + s + "' is not a number");
  return v;
}

int64_t parse_int(const std::string& s, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || v < 0)
    throw Error(what + ": '" + s + "' is not a count");
  return v;
}

} // namespace pejit::runtime
