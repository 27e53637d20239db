// `pejit train` loses no work: SIGINT and SIGTERM finish the step, save and exit 130/143;
// --save-every keeps a checkpoint that survives a kill; a NaN loss saves the state before its
// batch; --save-best keeps the best epoch and --patience stops; --resume continues a run bit
// for bit. The binary is run as a child process (fork/exec) so that it can be signalled.
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/train/common.h"
#include "tests/support/nan_model.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace tests_cli_train_lifecycle_test {

namespace {

namespace fs = std::filesystem;
using Ms = std::chrono::milliseconds;

const std::string kModel = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

// This process's scratch directory, removed at exit (it holds checkpoints of megabytes).
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("pejit_lifecycle_" + std::to_string(::getpid()));
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::string tmp(const std::string& name) {
  static Scratch scratch;
  fs::create_directories(scratch.dir);
  return (scratch.dir / name).string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A pejit process with stdout and stderr going to files.
struct Child {
  pid_t pid = -1;
  std::string out, err;

  Child(const std::vector<std::string>& args, const std::string& tag)
      : out(tmp(tag + ".out")), err(tmp(tag + ".err")) {
    std::vector<std::string> argv_s = {PEJIT_BINARY_DIR "/pejit"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (o < 0 || e < 0)
        ::_exit(126);
      ::dup2(o, 1);
      ::dup2(e, 2);
      std::vector<char*> argv;
      for (auto& a : argv_s)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }

  // Waits until stderr holds `text` (true), or the process ended or `limit` passed (false).
  bool wait_for_err(const std::string& text, Ms limit = Ms(180000)) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (slurp(err).find(text) != std::string::npos)
        return true;
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return false;
      }
      std::this_thread::sleep_for(Ms(20));
    }
    return false;
  }

  // The exit code, or minus the signal that killed it; kills it after `limit` (-SIGKILL).
  int wait(Ms limit = Ms(180000)) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (pid > 0) {
      int st = 0;
      pid_t r = ::waitpid(pid, &st, WNOHANG);
      if (r == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      }
      if (std::chrono::steady_clock::now() > until) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
        pid = -1;
        return -SIGKILL;
      }
      std::this_thread::sleep_for(Ms(20));
    }
    return -2;
  }

  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

struct Ran {
  int code;
  std::string out, err;
};

Ran run_pejit(const std::vector<std::string>& args) {
  static int n = 0;
  Child c(args, "run" + std::to_string(n++));
  int code = c.wait();
  return {code, slurp(c.out), slurp(c.err)};
}

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> js;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{')
      js.push_back(nlohmann::json::parse(line));
  return js;
}

// The parameters' bytes of a checkpoint, by name.
std::map<std::string, std::string> param_bytes(const std::string& path) {
  auto ck = pejit::checkpoint::load(path);
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < ck.params.names.size(); ++i) {
    const auto& t = ck.params.values[i];
    out[ck.params.names[i]] = std::string(static_cast<const char*>(t.raw()), t.nbytes());
  }
  return out;
}

const std::string& gen(const std::string& name, int trees, int seed) {
  static std::map<std::string, std::string> made;
  auto it = made.find(name);
  if (it != made.end())
    return it->second;
  std::string path = tmp(name);
  REQUIRE(run_pejit({"gen", "sst", "--trees", std::to_string(trees), "--seed", std::to_string(seed),
                     "-o", path})
              .code == 0);
  return made[name] = path;
}

// Interrupts a long run of the TreeLSTM with `sig` once its progress line shows; returns the
// child's exit code and stderr. The checkpoint goes to `ck`.
Ran interrupt(int sig, const std::string& ck, const std::string& tag, bool twice = false) {
  const std::string& data = gen("big.txt", 600, 21);
  Child c({"train", kModel, "--data", data, "--epochs", "1000", "--save", ck, "--progress", "1"},
          tag);
  bool running = c.wait_for_err("batch ");
  INFO(slurp(c.err));
  REQUIRE(running);
  ::kill(c.pid, sig);
  if (twice) {
    // A second signal, most likely during the save: it must not spoil the checkpoint.
    std::this_thread::sleep_for(Ms(5));
    ::kill(c.pid, sig);
  }
  int code = c.wait();
  return {code, slurp(c.out), slurp(c.err)};
}

} // namespace

TEST_SUITE("cli") {
  TEST_CASE("train: SIGINT finishes the step, saves a loadable checkpoint and exits 130") {
    std::string ck = tmp("int.ckpt");
    Ran r = interrupt(SIGINT, ck, "int", /*twice=*/true);
    INFO(r.err);
    CHECK(r.code == 130);
    CHECK(r.err.find("training interrupted by SIGINT at epoch ") != std::string::npos);
    CHECK(r.err.find("saved the training state to " + ck) != std::string::npos);
    auto loaded = pejit::checkpoint::load(ck);
    REQUIRE(loaded.training);
    CHECK(!loaded.optimizer_state.empty());
    CHECK(fs::directory_iterator(fs::path(ck).parent_path()) != fs::directory_iterator());
    for (const auto& e : fs::directory_iterator(fs::path(ck).parent_path()))
      CHECK(e.path().filename().string().find("int.ckpt.tmp.") == std::string::npos);
    Ran ev = run_pejit({"eval", kModel, "--params", ck, "--data", gen("dev.txt", 100, 22)});
    INFO(ev.err);
    CHECK(ev.code == 0);
  }

  TEST_CASE("train: SIGTERM exits 143, the run resumed from its checkpoint is the straight run") {
    std::string ck = tmp("term.ckpt");
    Ran r = interrupt(SIGTERM, ck, "term");
    INFO(r.err);
    CHECK(r.code == 143);
    CHECK(r.err.find("training interrupted by SIGTERM") != std::string::npos);
    auto state = pejit::checkpoint::load(ck).training;
    REQUIRE(state);
    // Interrupted mid-epoch E (or at its end): resume to the end of epoch E + 1 and compare
    // with a run that was never stopped.
    std::string epochs = std::to_string(state->epoch + 2);
    const std::string& data = gen("big.txt", 600, 21);
    std::string straight = tmp("straight.ckpt"), resumed = tmp("resumed.ckpt");
    Ran a = run_pejit(
        {"train", kModel, "--data", data, "--epochs", epochs, "--json", "--save", straight});
    Ran b = run_pejit({"train", kModel, "--data", data, "--epochs", epochs, "--json", "--resume",
                       ck, "--save", resumed});
    INFO(b.err);
    REQUIRE(a.code == 0);
    REQUIRE(b.code == 0);
    auto ja = json_lines(a.out), jb = json_lines(b.out);
    REQUIRE(jb.size() >= 1);
    REQUIRE(ja.size() >= jb.size());
    for (size_t i = 0; i < jb.size(); ++i) {
      const auto& x = ja[ja.size() - jb.size() + i];
      for (const char* k : {"epoch", "loss", "root_acc", "node_acc", "trees", "nodes", "batches"})
        CHECK_MESSAGE(x[k] == jb[i][k], k);
    }
    CHECK(param_bytes(straight) == param_bytes(resumed));
  }

  TEST_CASE("train --resume: 2 epochs straight equal 1 + 1 resumed, bit for bit") {
    const std::string& data = gen("small.txt", 200, 23);
    const std::string& dev = gen("dev.txt", 100, 22);
    std::string two = tmp("two.ckpt"), one = tmp("one.ckpt"), more = tmp("more.ckpt");
    for (const char* optimizer : {"adagrad", "adam"}) {
      INFO(optimizer);
      std::vector<std::string> common = {"train", kModel,        "--data",  data,    "--dev",
                                         dev,     "--optimizer", optimizer, "--json"};
      auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = common;
        a.insert(a.end(), extra.begin(), extra.end());
        return run_pejit(a);
      };
      Ran a = with({"--epochs", "2", "--save", two});
      Ran b = with({"--epochs", "1", "--save", one});
      Ran c = with({"--epochs", "2", "--resume", one, "--save", more});
      INFO(c.err);
      REQUIRE(a.code == 0);
      REQUIRE(b.code == 0);
      REQUIRE(c.code == 0);
      CHECK(c.err.find("resuming " + one + " at epoch 2, batch 0/8") != std::string::npos);
      auto ja = json_lines(a.out), jc = json_lines(c.out);
      REQUIRE(ja.size() == 2);
      REQUIRE(jc.size() == 1);
      for (const char* k : {"epoch", "loss", "root_acc", "node_acc", "dev_loss", "dev_root_acc",
                            "dev_node_acc", "nodes"})
        CHECK_MESSAGE(ja[1][k] == jc[0][k], k);
      CHECK(param_bytes(two) == param_bytes(more));
      auto sa = pejit::checkpoint::load(two), sc = pejit::checkpoint::load(more);
      REQUIRE(sa.optimizer_state.size() == sc.optimizer_state.size());
      for (size_t i = 0; i < sa.optimizer_state.size(); ++i)
        CHECK(std::memcmp(sa.optimizer_state[i].second.raw(), sc.optimizer_state[i].second.raw(),
                          sa.optimizer_state[i].second.nbytes()) == 0);
    }
    // What cannot be resumed is refused before training.
    Ran done = run_pejit({"train", kModel, "--data", data, "--epochs", "2", "--resume", two});
    CHECK(done.code == 1);
    CHECK(done.err.find("must be larger") != std::string::npos);
    Ran both = run_pejit(
        {"train", kModel, "--data", data, "--epochs", "3", "--resume", two, "--init", two});
    CHECK(both.code == 1);
    CHECK(both.err.find("exclude each other") != std::string::npos);
    Ran other = run_pejit(
        {"train", kModel, "--data", data, "--limit", "150", "--epochs", "3", "--resume", two});
    CHECK(other.code == 1);
    CHECK(other.err.find("the run trained on 200 examples") != std::string::npos);
    Ran sgd = run_pejit(
        {"train", kModel, "--data", data, "--epochs", "3", "--resume", two, "--optimizer", "sgd"});
    CHECK(sgd.code == 1);
    CHECK(sgd.err.find("is not state of a sgd optimizer") != std::string::npos);
    // A version 1 file (no training state) still starts a run with --init, not --resume.
    auto v1 = pejit::checkpoint::load(two);
    v1.training.reset();
    std::string old = tmp("old.ckpt");
    pejit::checkpoint::save(old, v1);
    Ran no_state = run_pejit({"train", kModel, "--data", data, "--epochs", "3", "--resume", old});
    CHECK(no_state.code == 1);
    CHECK(no_state.err.find("holds no training state") != std::string::npos);
    CHECK(run_pejit({"train", kModel, "--data", data, "--init", old}).code == 0);
  }

  TEST_CASE("BatchOrder: shuffled batches are the first epoch's batches in a new order") {
    using pejit::runtime::BatchOrder;
    using pejit::runtime::Shuffle;
    const size_t n = 103, batch = 10; // 10 whole batches and a short one of 3
    BatchOrder batches(n, 5), examples(n, 5), again(n, 5);
    const std::vector<size_t> first = batches.next_epoch(Shuffle::Batches, batch);
    CHECK(first == examples.next_epoch(Shuffle::Examples, batch)); // the same first epoch
    CHECK(again.next_epoch(Shuffle::Batches, batch) == first);
    // A batch as the set of its examples.
    auto batch_at = [&](const std::vector<size_t>& o, size_t k) {
      std::vector<size_t> b(o.begin() + static_cast<std::ptrdiff_t>(k * batch),
                            o.begin() + static_cast<std::ptrdiff_t>(std::min(n, (k + 1) * batch)));
      std::sort(b.begin(), b.end());
      return b;
    };
    std::vector<std::vector<size_t>> kept;
    for (size_t k = 0; k < 10; ++k)
      kept.push_back(batch_at(first, k));
    std::vector<size_t> before = first;
    for (int e = 1; e < 4; ++e) {
      const std::vector<size_t> o = batches.next_epoch(Shuffle::Batches, batch);
      CHECK(again.next_epoch(Shuffle::Batches, batch) == o); // the seed's, every epoch
      CHECK(o != before);                                    // a new order of the batches
      CHECK(o != examples.next_epoch(Shuffle::Examples, batch));
      std::vector<std::vector<size_t>> now;
      for (size_t k = 0; k < 10; ++k)
        now.push_back(batch_at(o, k));
      CHECK(std::is_permutation(now.begin(), now.end(), kept.begin()));
      CHECK(batch_at(o, 10) == batch_at(first, 10)); // the short batch stays last
      before = o;
    }
    BatchOrder none(n, 5);
    const std::vector<size_t> fixed = none.next_epoch(Shuffle::None, batch);
    CHECK(none.next_epoch(Shuffle::None, batch) == fixed);
  }

  TEST_CASE("train --shuffle batches: each batch planned in the first epoch only and resumed "
            "bit for bit") {
    const std::string& data = gen("small.txt", 200, 23);
    // 100 batches of 2: more than the plan cache's probation list holds (64), so only plans
    // kept from their first use are all there in the second epoch.
    std::vector<std::string> common = {"train",  kModel,        "--data",  data, "--json",
                                       "--mode", "specialized", "--batch", "2",  "--no-train-eval"};
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> a = common;
      a.insert(a.end(), extra.begin(), extra.end());
      return run_pejit(a);
    };
    std::string three = tmp("batches3.ckpt"), two = tmp("batches2.ckpt"),
                more = tmp("batches_more.ckpt");
    Ran a = with({"--epochs", "3", "--shuffle", "batches", "--save", three});
    Ran ex = with({"--epochs", "2"});
    Ran fixed = with({"--epochs", "2", "--fixed-batches"});
    INFO(a.err);
    REQUIRE(a.code == 0);
    REQUIRE(ex.code == 0);
    REQUIRE(fixed.code == 0);
    auto ja = json_lines(a.out), jex = json_lines(ex.out), jfixed = json_lines(fixed.out);
    REQUIRE(ja.size() == 3);
    REQUIRE(jex.size() == 2);
    REQUIRE(jfixed.size() == 2);
    CHECK(ja[0]["shuffle"] == "batches");
    CHECK(jex[0]["shuffle"] == "examples");
    CHECK(jfixed[0]["shuffle"] == "none");
    CHECK(ja[0]["loss"] == jex[0]["loss"]);    // the same first epoch
    CHECK(ja[1]["loss"] != jex[1]["loss"]);    // then the same batches, not new ones
    CHECK(ja[1]["loss"] != jfixed[1]["loss"]); // in a new order
    CHECK(ja[0]["plan_cache"]["misses"].get<int64_t>() +
              ja[0]["plan_cache"]["prefetched"].get<int64_t>() >=
          50);
    for (size_t e = 1; e < 3; ++e) {
      CHECK(ja[e]["plan_cache"]["misses"] == 0);
      CHECK(ja[e]["plan_cache"]["prefetched"] == 0);
      CHECK(ja[e]["plan_cache"]["hits"] == 100);
    }
    CHECK(jex[1]["plan_cache"]["misses"].get<int64_t>() +
              jex[1]["plan_cache"]["prefetched"].get<int64_t>() >
          0);
    CHECK(jfixed[1]["plan_cache"]["hits"] == 100);
    // The order is part of the training state: a resumed run continues it.
    REQUIRE(with({"--epochs", "2", "--shuffle", "batches", "--save", two}).code == 0);
    CHECK(pejit::checkpoint::load(two).training->values.at("shuffle") == "batches");
    Ran c = with({"--epochs", "3", "--resume", two, "--save", more});
    INFO(c.err);
    REQUIRE(c.code == 0);
    CHECK(c.err.find("shuffled batches") != std::string::npos);
    auto jc = json_lines(c.out);
    REQUIRE(jc.size() == 1);
    CHECK(jc[0]["loss"] == ja[2]["loss"]);
    CHECK(param_bytes(three) == param_bytes(more));
    // A training state with an order pejit does not know is refused, naming it.
    auto bad = pejit::checkpoint::load(two);
    bad.training->values["shuffle"] = "sometimes";
    std::string odd = tmp("batches_odd.ckpt");
    pejit::checkpoint::save(odd, bad);
    Ran refused = with({"--epochs", "3", "--resume", odd});
    CHECK(refused.code == 1);
    CHECK(refused.err.find("training.shuffle: 'sometimes' is not a data order") !=
          std::string::npos);
    Ran both = with({"--epochs", "1", "--shuffle", "none", "--fixed-batches"});
    CHECK(both.code != 0);
    CHECK(both.err.find("excludes") != std::string::npos);
  }

  TEST_CASE("train --save-every: a run killed later keeps the last periodic checkpoint") {
    const std::string& data = gen("small.txt", 200, 23);
    std::string ck = tmp("every.ckpt");
    Child c({"train", kModel, "--data", data, "--epochs", "1000", "--save", ck, "--save-every", "1",
             "--progress", "1"},
            "every");
    bool second = c.wait_for_err("epoch 2  batch");
    INFO(slurp(c.err));
    REQUIRE(second);
    ::kill(c.pid, SIGKILL); // no chance to save anything now
    CHECK(c.wait() == -SIGKILL);
    auto state = pejit::checkpoint::load(ck).training;
    REQUIRE(state);
    CHECK(state->epoch >= 1);
    CHECK(state->batch == 0);
    CHECK(slurp(c.out).find("saved " + ck + " (epoch 1)") != std::string::npos);
    Ran bad = run_pejit({"train", kModel, "--data", data, "--save-every", "1"});
    CHECK(bad.code == 1);
    CHECK(bad.err.find("--save-every needs --save") != std::string::npos);
  }

  TEST_CASE("train: a NaN loss at batch N saves the parameters before batch N, exit 1") {
    // A model whose loss is NaN when a word's embedding overflows exp (inf - inf).
    std::string model = tmp("nan.pe");
    std::ofstream(model) << pejit::test::nan_model(100, 8);
    // 100 trees; tree 63 (batch 6 of 10) holds the word "boom".
    std::string data = tmp("nan.txt");
    {
      std::ofstream f(data);
      for (int i = 0; i < 100; ++i)
        f << "(" << i % 5 << " (" << (i + 1) % 5 << " "
          << (i == 63 ? std::string("boom") : "w" + std::to_string(i % 17)) << ") (" << (i + 2) % 5
          << " w" << i % 7 << "))\n";
    }
    std::string init = tmp("nan_init.ckpt");
    REQUIRE(run_pejit({"train", model, "--data", data, "--lr", "0", "--save", init}).code == 0);
    auto ck = pejit::checkpoint::load(init);
    auto word = std::find(ck.vocab.begin(), ck.vocab.end(), "boom");
    REQUIRE(word != ck.vocab.end());
    float* emb = ck.params.values[static_cast<size_t>(ck.params.index("emb"))].f32();
    for (int j = 0; j < 8; ++j)
      emb[(word - ck.vocab.begin()) * 8 + j] = 100.0f; // exp(100) overflows f32
    pejit::checkpoint::save(init, ck);

    std::vector<std::string> common = {"train",           model,    "--data",     data,
                                       "--init",          init,     "--batch",    "10",
                                       "--fixed-batches", "--mode", "specialized"};
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> a = common;
      a.insert(a.end(), extra.begin(), extra.end());
      return run_pejit(a);
    };
    std::string out = tmp("nan_out.ckpt"), six = tmp("nan_six.ckpt");
    Ran r = with({"--epochs", "2", "--save", out});
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(r.err.find("the loss became") != std::string::npos);
    CHECK(r.err.find("at epoch 1, batch 6") != std::string::npos);
    CHECK(r.err.find("the last good state (the parameters before that batch) is saved in " + out) !=
          std::string::npos);
    auto saved = pejit::checkpoint::load(out); // finite, or load() would refuse it
    REQUIRE(saved.training);
    CHECK(saved.training->epoch == 0);
    CHECK(saved.training->batch == 6);
    CHECK(saved.training->values.at("random_step") == "6"); // batch 6 draws again on resume
    // Exactly the state after the 6 good batches: a run of those alone ends there too.
    REQUIRE(with({"--epochs", "1", "--limit", "60", "--save", six}).code == 0);
    CHECK(param_bytes(out) == param_bytes(six));
    // Without --save it fails the same way, saving nothing.
    Ran bare = with({"--epochs", "2"});
    CHECK(bare.code == 1);
    CHECK(bare.err.find("saved") == std::string::npos);
  }

  TEST_CASE("train --save-best keeps the best epoch's model, --patience stops early") {
    const std::string& data = gen("tiny.txt", 100, 24);
    const std::string& dev = gen("dev.txt", 100, 22);
    std::string best = tmp("best.ckpt");
    Ran r = run_pejit({"train", kModel, "--data", data, "--dev", dev, "--epochs", "6", "--lr",
                       "0.3", "--mode", "specialized", "--json", "--save", best, "--save-best",
                       "dev_loss", "--eval-batch", "40"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto js = json_lines(r.out);
    REQUIRE(js.size() == 6);
    size_t arg = 0;
    for (size_t i = 1; i < js.size(); ++i)
      if (js[i]["dev_loss"].get<double>() < js[arg]["dev_loss"].get<double>())
        arg = i;
    // The best epoch's model is at --save: evaluated in the batches of training's scoring
    // (--eval-batch), it gives that epoch's dev loss; the last state is beside it.
    Ran ev = run_pejit({"eval", kModel, "--params", best, "--data", dev, "--mode", "specialized",
                        "--json", "--batch", "40"});
    REQUIRE(ev.code == 0);
    auto je = json_lines(ev.out);
    REQUIRE(je.size() == 1);
    CHECK(je[0]["loss"].get<double>() == js[arg]["dev_loss"].get<double>());
    MESSAGE("best dev_loss at epoch " << arg + 1 << " of 6");
    CHECK(pejit::checkpoint::load(best).training->epoch == static_cast<int64_t>(arg) + 1);
    CHECK(pejit::checkpoint::load(best + ".last").training->epoch == 6);
    CHECK(r.err.find("saved " + best + ": the best dev_loss so far") != std::string::npos);

    // Nothing improves with lr 0: the first epoch stays the best, two more and it stops.
    std::string flat = tmp("flat.ckpt");
    Ran p = run_pejit({"train", kModel, "--data", data, "--dev", dev, "--epochs", "10", "--lr", "0",
                       "--json", "--save", flat, "--save-best", "dev_loss", "--patience", "2"});
    INFO(p.err);
    REQUIRE(p.code == 0);
    CHECK(json_lines(p.out).size() == 3);
    CHECK(p.err.find("stopping early: dev_loss has not improved for 2 epochs") !=
          std::string::npos);
    CHECK(pejit::checkpoint::load(flat).training->epoch == 1);
    CHECK(pejit::checkpoint::load(flat + ".last").training->epoch == 3);

    Ran bad = run_pejit({"train", kModel, "--data", data, "--save-best", "dev_loss"});
    CHECK(bad.code == 1);
    CHECK(bad.err.find("needs --dev") != std::string::npos);
    Ran unknown = run_pejit({"train", kModel, "--data", data, "--save-best", "accuracy"});
    CHECK(unknown.code == 1);
    CHECK(unknown.err.find("unknown metric 'accuracy'") != std::string::npos);
    Ran lonely = run_pejit({"train", kModel, "--data", data, "--patience", "2"});
    CHECK(lonely.code == 1);
    CHECK(lonely.err.find("--patience needs --save-best") != std::string::npos);
  }
}

} // namespace tests_cli_train_lifecycle_test
