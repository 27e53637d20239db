// End-to-end tests of the `pejit` command: exit codes, diagnostics, `--json` output, a short
// training run on generated data that must beat the majority class, checkpoints and eval.
#include "runtime/data/tree_io.h"
#include "tests/cli/cli_util.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <sys/wait.h>

namespace tests_cli_cli_test {

using namespace pejit::cli_test;

TEST_SUITE("cli") {
  TEST_CASE("check: a good program exits 0, a bad one 2 with file:line:col and a caret") {
    Run ok = run_pejit("check " + kModel);
    CHECK(ok.code == 0);
    CHECK(ok.out.find("ok") != std::string::npos);

    std::string bad = tmp("bad.pe");
    std::ofstream(bad) << "fn f(x: f32[3]) -> f32[3] {\n  x @ x\n}\nfn g() -> Int { true }\n";
    Run r = run_pejit("check " + bad);
    CHECK(r.code == 2);
    CHECK(r.err.find(bad + ":2:3: error: function f returns f32[3]") != std::string::npos);
    CHECK(r.err.find("  x @ x\n") != std::string::npos);
    CHECK(r.err.find(":4:17: error:") != std::string::npos);
    CHECK(r.err.find("2 errors") != std::string::npos);

    Run missing = run_pejit("check " + tmp("no_such_file.pe"));
    CHECK(missing.code == 2);
    CHECK(missing.err.find("cannot read") != std::string::npos);

    CHECK(run_pejit("").code == 2);           // no subcommand
    CHECK(run_pejit("train").code == 2);      // missing model and data
    CHECK(run_pejit("frobnicate").code == 2); // unknown subcommand
  }

  TEST_CASE("gen: deterministic for a seed, shapes, sentences") {
    Run a = run_pejit("gen sst --trees 20 --seed 5");
    Run b = run_pejit("gen sst --trees 20 --seed 5");
    Run c = run_pejit("gen sst --trees 20 --seed 6");
    CHECK(a.code == 0);
    CHECK(a.out == b.out);
    CHECK(a.out != c.out);
    CHECK(std::count(a.out.begin(), a.out.end(), '\n') == 20);
    CHECK(run_pejit("gen listops --trees 5 --seed 1").code == 0);
    CHECK(run_pejit("gen sst --trees 5 --shape deep").code == 0);
    CHECK(run_pejit("gen sst --trees 5 --shape bogus").code == 2);
    Run s = run_pejit("gen sst --trees 3 --sentences");
    CHECK(s.out.find('(') == std::string::npos);
  }

  TEST_CASE("train: --json lines, dev accuracy beats the majority class, save and eval") {
    std::string train = tmp("train.txt"), dev = tmp("dev.txt"), ck = tmp("model.ckpt");
    REQUIRE(run_pejit("gen sst --trees 800 --seed 11 -o " + train).code == 0);
    REQUIRE(run_pejit("gen sst --trees 300 --seed 12 -o " + dev).code == 0);
    Run r = run_pejit("train " + kModel + " --data " + train + " --dev " + dev +
                      " --epochs 2 --json --save " + ck);
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto js = json_lines(r.out);
    REQUIRE(js.size() == 2);
    for (const char* f : {"epoch", "loss", "root_acc", "node_acc", "dev_root_acc", "dev_node_acc",
                          "trees", "trees_per_s", "seconds", "batches", "specialized_batches",
                          "generic_batches", "specialized_seconds", "generic_seconds"})
      CHECK_MESSAGE(js[1].contains(f), f);
    CHECK(js[0]["epoch"] == 0);
    CHECK(js[1]["trees"] == 800);
    CHECK(js[1]["batches"] == 32);
    CHECK(js[1]["generic_batches"].get<int>() + js[1]["specialized_batches"].get<int>() == 32);
    CHECK(js[1]["loss"].get<double>() < js[0]["loss"].get<double>());
    // Each example encoded once, in the first epoch, for its batch and the scoring alike.
    CHECK(js[0]["encoded_examples"] == 800);
    CHECK(js[1]["encoded_examples"] == 0);

    // Majority class of the dev roots.
    pejit::data::Vocab v;
    auto trees = pejit::data::read_trees(dev, v);
    std::map<int, int> counts;
    for (const auto& t : trees)
      counts[t.nodes[static_cast<size_t>(t.root())].label]++;
    int most = 0;
    for (auto [k, c] : counts)
      most = std::max(most, c);
    double majority = static_cast<double>(most) / static_cast<double>(trees.size());
    CHECK(js[1]["dev_root_acc"].get<double>() > majority + 0.1);

    Run e = run_pejit("eval " + kModel + " --params " + ck + " --data " + dev + " --json");
    INFO(e.err);
    REQUIRE(e.code == 0);
    auto ej = json_lines(e.out);
    REQUIRE(ej.size() == 1);
    CHECK(ej[0]["trees"] == 300);
    // eval after training reproduces the last epoch's dev accuracy.
    CHECK(ej[0]["root_acc"].get<double>() == doctest::Approx(js[1]["dev_root_acc"].get<double>()));
    // eval runs through the engine: planned (and JIT) in specialized mode, the same scores as
    // the generic path.
    Run es = run_pejit("eval " + kModel + " --params " + ck + " --data " + dev +
                       " --json --mode specialized");
    Run eg = run_pejit("eval " + kModel + " --params " + ck + " --data " + dev +
                       " --json --mode generic");
    REQUIRE(es.code == 0);
    REQUIRE(eg.code == 0);
    auto sj = json_lines(es.out), gj = json_lines(eg.out);
    REQUIRE(sj.size() == 1);
    REQUIRE(gj.size() == 1);
    CHECK(sj[0]["generic_batches"] == 0);
    CHECK(sj[0]["specialized_batches"].get<int>() > 0);
    CHECK(sj[0]["jit_seconds"].get<double>() > 0);
    CHECK(gj[0]["specialized_batches"] == 0);
    // (Rounding-level differences could flip an argmax tie: at most one tree's worth.)
    CHECK(std::fabs(sj[0]["root_acc"].get<double>() - gj[0]["root_acc"].get<double>()) <=
          1.0 / 300 + 1e-9);
    CHECK(std::fabs(sj[0]["node_acc"].get<double>() - gj[0]["node_acc"].get<double>()) <= 0.002);
    CHECK(sj[0]["loss"].get<double>() ==
          doctest::Approx(gj[0]["loss"].get<double>()).epsilon(1e-5));
  }

  TEST_CASE("train --init starts from a checkpoint's parameters, whatever optimizer wrote it") {
    std::string train = tmp("init_train.txt"), ck = tmp("init_adam.ckpt");
    REQUIRE(run_pejit("gen sst --trees 100 --seed 21 -o " + train).code == 0);
    const std::string common = "train " + kModel + " --data " + train +
                               " --epochs 1 --json --no-train-eval --mode generic --batch 20";
    Run a = run_pejit(common + " --optimizer adam --lr 0.01 --save " + ck);
    INFO(a.err);
    REQUIRE(a.code == 0);
    // The checkpoint's header (its first line): the model it was trained from, Adam's state.
    std::ifstream in(ck);
    std::string header;
    std::getline(in, header);
    nlohmann::json h = nlohmann::json::parse(header);
    CHECK(h["meta"]["model"] == kModel);
    REQUIRE(h.contains("optimizer_state"));
    CHECK(h["optimizer_state"].dump().find("adam_m.") != std::string::npos);
    // Adagrad at rate 0 from those parameters (Adam's state is not loaded: it is no Adagrad
    // state): its loss is the checkpoint's, as eval computes it.
    Run init = run_pejit(common + " --optimizer adagrad --lr 0 --init " + ck);
    Run fresh = run_pejit(common + " --optimizer adagrad --lr 0");
    Run ev = run_pejit("eval " + kModel + " --params " + ck + " --data " + train +
                       " --json --mode generic --batch 20");
    INFO(init.err);
    REQUIRE(init.code == 0);
    REQUIRE(fresh.code == 0);
    REQUIRE(ev.code == 0);
    auto ij = json_lines(init.out), fj = json_lines(fresh.out), ej = json_lines(ev.out);
    REQUIRE(ij.size() == 1);
    REQUIRE(fj.size() == 1);
    REQUIRE(ej.size() == 1);
    CHECK(ij[0]["loss"].get<double>() ==
          doctest::Approx(ej[0]["loss"].get<double>()).epsilon(1e-5));
    CHECK(fj[0]["loss"].get<double>() != doctest::Approx(ej[0]["loss"].get<double>()));
    // A checkpoint whose parameters do not fit the model names the parameter.
    std::string other = tmp("init_other.pe");
    std::ofstream(other) << "type Tree = Leaf(word: i32[], label: i32[]) | Node(left: Tree, "
                            "right: Tree, label: i32[])\n"
                            "param W : f32[3] = normal(0.0, 1.0)\n"
                            "fn f(t: Tree) -> f32[] { match t { Leaf(w, y) => sum(W), "
                            "Node(l, r, y) => f(l) + f(r) } }\n"
                            "entry loss(b: List[Tree]) -> f32[] { sum_list(map(f, b)) }\n";
    Run bad = run_pejit("train " + other + " --data " + train + " --init " + ck);
    CHECK(bad.code == 1);
    CHECK(bad.err.find("checkpoint '" + ck + "' has no parameter W") != std::string::npos);
  }

  TEST_CASE("train: bad data and bad options are clear errors") {
    std::string bad = tmp("bad_trees.txt");
    std::ofstream(bad) << "(3 (2 a) (2 b))\n(3 (2 a) (2 b)\n";
    Run r = run_pejit("train " + kModel + " --data " + bad);
    CHECK(r.code == 1);
    CHECK(r.err.find(bad + ":2:15: error:") != std::string::npos);

    std::string prog = tmp("broken.pe");
    std::ofstream(prog) << "entry loss(b: List[Int]) -> f32[] { 1 }\n";
    Run p = run_pejit("train " + prog + " --data " + bad);
    CHECK(p.code == 2);
    CHECK(p.err.find(prog + ":1:") != std::string::npos);

    std::string good = tmp("good_trees.txt");
    std::ofstream(good) << "(3 (2 a) (2 b))\n";
    CHECK(run_pejit("train " + kModel + " --data " + good + " --mode turbo").code == 2);
    CHECK(run_pejit("train " + kModel + " --data " + good + " --optimizer rmsprop").code == 2);
    Run z = run_pejit("train " + kModel + " --data " + good + " --batch 0");
    CHECK(z.code == 1);
  }

  TEST_CASE("train: an output path that cannot be written fails before training") {
    std::string good = tmp("good_trees_out.txt");
    std::ofstream(good) << "(3 (2 a) (2 b))\n";
    std::string nodir = tmp("no_such_dir") + "/model.ckpt";
    Run r = run_pejit("train " + kModel + " --data " + good + " --save " + nodir + " --json");
    CHECK(r.code == 1);
    CHECK(r.err.find("--save " + nodir + ": the directory") != std::string::npos);
    CHECK(r.err.find("does not exist") != std::string::npos);
    CHECK(json_lines(r.out).empty()); // no epoch ran
    Run t = run_pejit("train " + kModel + " --data " + good + " --trace " + tmp("") + " --json");
    CHECK(t.code == 1);
    CHECK(t.err.find("--trace") != std::string::npos);
    CHECK(json_lines(t.out).empty());
  }

  TEST_CASE("train --threads N: --json says N, the same losses bit for bit as one thread") {
    std::string train = tmp("threads_train.txt");
    REQUIRE(run_pejit("gen sst --trees 120 --seed 7 -o " + train).code == 0);
    std::string common = "train " + kModel + " --data " + train +
                         " --epochs 2 --json --no-train-eval --mode specialized --batch 60";
    Run one = run_pejit(common + " --threads 1");
    Run three = run_pejit(common + " --threads 3");
    INFO(one.err << three.err);
    REQUIRE(one.code == 0);
    REQUIRE(three.code == 0);
    auto oj = json_lines(one.out), tj = json_lines(three.out);
    REQUIRE(oj.size() == 2);
    REQUIRE(tj.size() == 2);
    for (int e = 0; e < 2; ++e) {
      CHECK(oj[e]["threads"] == 1);
      CHECK(tj[e]["threads"] == 3);
      CHECK(oj[e]["loss"].get<double>() == tj[e]["loss"].get<double>());
      CHECK(oj[e]["root_acc"] == tj[e]["root_acc"]);
    }
    Run bad = run_pejit(common + " --threads -2");
    CHECK(bad.code != 0);
    CHECK(bad.err.find("--threads") != std::string::npos);
  }

  TEST_CASE("train --mode specialized runs every batch on plans and matches generic") {
    std::string train = tmp("spec_train.txt");
    REQUIRE(run_pejit("gen sst --trees 200 --seed 31 -o " + train).code == 0);
    std::string common =
        "train " + kModel + " --data " + train + " --epochs 2 --json --no-train-eval";
    Run g = run_pejit(common + " --mode generic");
    Run s = run_pejit(common + " --mode specialized");
    INFO(g.err << s.err);
    REQUIRE(g.code == 0);
    REQUIRE(s.code == 0);
    auto gj = json_lines(g.out), sj = json_lines(s.out);
    REQUIRE(gj.size() == 2);
    REQUIRE(sj.size() == 2);
    for (int e = 0; e < 2; ++e) {
      CHECK(sj[e]["specialized_batches"] == 8);
      CHECK(sj[e]["generic_batches"] == 0);
      CHECK(sj[e]["specialized_seconds"].get<double>() > 0);
      CHECK(gj[e]["specialized_batches"] == 0);
      // Same data order and updates: the losses agree to float rounding.
      double a = gj[e]["loss"].get<double>(), b = sj[e]["loss"].get<double>();
      CHECK(std::fabs(a - b) <= 1e-4 * std::fabs(a));
    }
  }

  TEST_CASE("train: the LSTM language model on one 3,000-token sentence, in every mode") {
    // One call deeper per token: far past what an ordinary native stack holds
    // (docs/architecture.md, "Deep inputs").
    std::string text = tmp("long_sentence.txt");
    {
      std::ofstream f(text);
      for (int i = 0; i < 3000; ++i)
        f << (i ? " " : "") << "w" << (i * 7 + 3) % 40;
      f << "\n";
    }
    std::map<std::string, double> loss;
    for (std::string mode : {"generic", "specialized", "auto"}) {
      Run r = run_pejit("train " PEJIT_SOURCE_DIR "/examples/rnn/rnn.pe --data " + text +
                        " --batch 1 --epochs 1 --json --no-train-eval --mode " + mode);
      INFO(mode << ": " << r.err);
      REQUIRE(r.code == 0);
      auto js = json_lines(r.out);
      REQUIRE(js.size() == 1);
      CHECK(js[0]["generic_batches"] == (mode == "generic" ? 1 : 0));
      loss[mode] = js[0]["loss"].get<double>();
      CHECK(std::isfinite(loss[mode]));
    }
    CHECK(std::fabs(loss["specialized"] - loss["generic"]) <= 1e-4 * loss["generic"]);
    CHECK(std::fabs(loss["auto"] - loss["generic"]) <= 1e-4 * loss["generic"]);
  }

  TEST_CASE("train in auto mode (the default): planned in the background, traced") {
    std::string train = tmp("auto_train.txt"), trace = tmp("trace.json");
    REQUIRE(run_pejit("gen sst --trees 150 --seed 8 -o " + train).code == 0);
    Run a = run_pejit("train " + kModel + " --data " + train +
                      " --epochs 2 --json --no-train-eval --trace " + trace);
    INFO(a.err);
    REQUIRE(a.code == 0);
    auto js = json_lines(a.out);
    REQUIRE(js.size() == 2);
    for (const auto& j : js) {
      CHECK(j["specialized_batches"].get<int>() + j["generic_batches"].get<int>() == 6);
      CHECK(j["specialized_batches"].get<int>() == 6);
      CHECK(j["plan_cache"]["hits"].get<int>() + j["plan_cache"]["misses"].get<int>() == 6);
      CHECK(j.contains("jit_seconds"));
      CHECK(j.contains("plan_ms"));
    }
    CHECK(a.err.find("of training time ran on JIT kernels") != std::string::npos);
    std::ifstream tf(trace);
    std::stringstream ss;
    ss << tf.rdbuf();
    auto tj = nlohmann::json::parse(ss.str());
    REQUIRE(tj.contains("traceEvents"));
    bool saw_plan = false, saw_step = false;
    for (const auto& e : tj["traceEvents"]) {
      std::string n = e["name"];
      saw_plan = saw_plan || n.rfind("plan ", 0) == 0;
      saw_step = saw_step || n.rfind("step ", 0) == 0;
    }
    CHECK(saw_plan);
    CHECK(saw_step);
  }

  TEST_CASE("auto mode on one core (no TBB worker threads) finishes") {
    std::string train = tmp("one_core.txt");
    REQUIRE(run_pejit("gen sst --trees 60 --seed 2 -o " + train).code == 0);
    std::string cmd = std::string("taskset -c 0 ") + PEJIT_BINARY_DIR "/pejit train " + kModel +
                      " --data " + train + " --epochs 2 --json --no-train-eval 2>/dev/null";
    std::string out;
    FILE* p = popen(("timeout 120 " + cmd).c_str(), "r");
    REQUIRE(p);
    std::array<char, 4096> buf;
    size_t k;
    while ((k = fread(buf.data(), 1, buf.size(), p)) > 0)
      out.append(buf.data(), k);
    int st = pclose(p);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
    auto js = json_lines(out);
    REQUIRE(js.size() == 2);
    CHECK(js[1]["specialized_batches"] == 3);
  }

  TEST_CASE(
      "dump --emit kernels|llvm: runs with their provenance, IR whose hashes training links") {
    std::string data = tmp("dump_kernels_trees.txt");
    REQUIRE(run_pejit("gen sst --trees 20 --seed 6 -o " + data).code == 0);
    Run k = run_pejit("dump " + kModel + " --data " + data + " --batch 10 --emit kernels");
    INFO(k.err);
    REQUIRE(k.code == 0);
    CHECK(k.out.find("template cell#") != std::string::npos);
    // The gate epilogues run fused with their GEMMs (generated: the x·W and dY·W^T cores),
    // per panel of 48 rows.
    CHECK(k.out.find(" sched=default panel=48 core=first scratch=0,2,4,7,10 gemm=750x300 "
                     "gather=150,150 fill=6,9\n      schedule default (source: default)\n") !=
          std::string::npos);
    CHECK(k.out.find(" sched=default panel=48 core=last gemm=300x750\n") != std::string::npos);
    CHECK(
        k.out.find(" out=2 sched=default panel=48 core=first scratch=0 gemm=5x150 gather=150\n") !=
        std::string::npos); // the classifier's logits = h·W + b
    // The loss and its backward, and the bias gradients' sums over the rows, on their kernels.
    CHECK(k.out.find("(fwd 1): reduce f32 cross_entropy w=5 sched=default\n") != std::string::npos);
    CHECK(k.out.find("(bwd 0): reduce f32 cross_entropy_bwd w=5 sched=default\n") !=
          std::string::npos);
    CHECK(k.out.find("(param grad): reduce f32 sum_rows w=750 sched=default\n") !=
          std::string::npos);
    Run l = run_pejit("dump " + kModel + " --data " + data + " --batch 10 --emit llvm");
    REQUIRE(l.code == 0);
    CHECK(l.out.find("\ndefine void @pejit_ew(") != std::string::npos);
    std::set<std::string> dumped;
    std::istringstream lines(l.out);
    for (std::string line; std::getline(lines, line);)
      if ((line.rfind("; kernel ", 0) == 0 || line.rfind("; reduce ", 0) == 0 ||
           line.rfind("; gemm ", 0) == 0) &&
          line.find(" fnv=") != std::string::npos)
        dumped.insert(line.substr(line.find(" fnv=") + 5));
    REQUIRE(!dumped.empty());
    // The same batch trained (one batch, so the same plan): the final epoch's JSON lists the
    // kernels compiled, with the IR hashes the dump printed. One thread: with more, training
    // also links column blocks of the weight-gradient kernels, which a dump does not list.
    Run t = run_pejit("train " + kModel + " --data " + data +
                      " --batch 20 --limit 10 --epochs 2 --json --mode specialized "
                      "--no-train-eval --fixed-batches --threads 1");
    REQUIRE(t.code == 0);
    auto js = json_lines(t.out);
    REQUIRE(js.size() == 2);
    CHECK(!js[0].contains("kernels"));
    REQUIRE(js[1].contains("kernels"));
    std::set<std::string> trained;
    for (const auto& kj : js[1]["kernels"]) {
      // A GEMM (the weight gradients) records the register block its default is.
      bool gemm = kj["signature"].get<std::string>().rfind("gemm ", 0) == 0;
      if (gemm)
        CHECK(std::regex_match(kj["schedule"].get<std::string>(), std::regex("[0-9]+x[0-9]+")));
      else
        CHECK(kj["schedule"] == "default");
      CHECK(kj["schedule_source"] == "default");
      CHECK(kj["ir_hash"].get<std::string>().size() == 16);
      trained.insert(kj["ir_hash"].get<std::string>());
    }
    CHECK(trained == dumped);
  }

  TEST_CASE("dump: plan lines, templates, instances, refusal") {
    std::string data = tmp("dump_trees.txt");
    REQUIRE(run_pejit("gen sst --trees 30 --seed 4 -o " + data).code == 0);
    Run p =
        run_pejit("dump " + kModel + " --data " + data + " --batch 10 --batch-index 1 --emit plan");
    INFO(p.err);
    REQUIRE(p.code == 0);
    CHECK(p.out.find("launch fwd op.take op.take.fwd rows=") != std::string::npos);
    CHECK(p.out.find("launch bwd cell cell.bwd rows=") != std::string::npos);
    CHECK(p.out.find("partial evaluation") != std::string::npos);
    Run t = run_pejit("dump " + kModel + " --data " + data + " --emit templates");
    CHECK(t.out.find("template cell(f32[150], f32[150], f32[150], f32[150])") != std::string::npos);
    Run i = run_pejit("dump " + kModel + " --data " + data + " --batch 2 --emit instances");
    CHECK(i.out.find("= sum(") != std::string::npos);
    Run kp = run_pejit("dump " + kModel + " --data " + data + " --emit kernel-program");
    CHECK(kp.code == 0);
    CHECK(kp.out.find("template cell#") != std::string::npos);
    CHECK(kp.out.find("core of run 0") != std::string::npos);
    CHECK(run_pejit("dump " + kModel + " --data " + data + " --batch-index 99").code == 1);
    std::string prog = tmp("dynamic.pe");
    std::ofstream(prog)
        << "type T = L(word: i32[], label: i32[]) | N(left: T, right: T, label: i32[])\n"
           "param E : f32[100, 2] = normal(0.0, 1.0)\n"
           "fn f(t: T) -> f32[] { match t { L(w, y) => if to_bool(sum(take(E, w)) > 0.0) "
           "{ 1.0 } else { 0.0 }, N(l, r, y) => f(l) + f(r) } }\n"
           "entry loss(b: List[T]) -> f32[] { sum_list(map(f, b)) }\n";
    Run r = run_pejit("dump " + prog + " --data " + data);
    CHECK(r.code == 1);
    CHECK(r.err.find(prog + ":3:") != std::string::npos);
    CHECK(r.err.find("cannot be specialized") != std::string::npos);
  }

  TEST_CASE("--no-merge: dump, train and eval plan every instance, with the same results") {
    std::string data = tmp("repeats.txt"); // "the" and "film" repeat, (film the) twice
    std::ofstream(data) << "(3 (2 the) (4 (2 film) (2 the)))\n(1 (2 film) (0 bad))\n"
                           "(4 (2 film) (2 the))\n";
    Run m = run_pejit("dump " + kModel + " --data " + data + " --emit plan");
    Run n = run_pejit("dump " + kModel + " --data " + data + " --emit plan --no-merge");
    REQUIRE(m.code == 0);
    REQUIRE(n.code == 0);
    CHECK(m.out.find(", 14 instances merged into equal ones\n") != std::string::npos);
    CHECK(m.out.find("  leaf: groups(fwd)=1 groups(bwd)=1 rows=3\n") != std::string::npos);
    CHECK(n.out.find(", 0 instances merged into equal ones\n") != std::string::npos);
    CHECK(n.out.find("  leaf: groups(fwd)=1 groups(bwd)=1 rows=7\n") != std::string::npos);
    const std::string train = "train " + kModel + " --data " + data +
                              " --epochs 2 --json --mode specialized --no-train-eval "
                              "--fixed-batches --optimizer sgd --save " +
                              tmp("merged.ckpt");
    Run a = run_pejit(train), b = run_pejit(train + " --no-merge");
    REQUIRE(a.code == 0);
    REQUIRE(b.code == 0);
    auto ja = json_lines(a.out), jb = json_lines(b.out);
    REQUIRE(ja.size() == 2);
    REQUIRE(jb.size() == 2);
    for (size_t e = 0; e < 2; ++e)
      CHECK(std::fabs(ja[e]["loss"].get<double>() - jb[e]["loss"].get<double>()) <=
            1e-5 * std::fabs(jb[e]["loss"].get<double>()));
    Run ev = run_pejit("eval " + kModel + " --params " + tmp("merged.ckpt") + " --data " + data +
                       " --mode specialized --no-merge --json");
    CHECK(ev.code == 0);
  }

  TEST_CASE("tune writes a database, train and dump use it only when --tuned names it") {
    std::string data = tmp("tune_trees.txt");
    REQUIRE(run_pejit("gen sst --trees 40 --seed 8 -o " + data).code == 0);
    std::string db = tmp("tuned.json");
    Run u = run_pejit("tune " + kModel + " --data " + data +
                      " --limit 20 --batch 10 --rows 8 --rows 64 --min-ms 0.05 --repeats 1 --out " +
                      db);
    INFO(u.err);
    REQUIRE(u.code == 0);
    CHECK(u.out.find("wrote " + db) != std::string::npos);
    nlohmann::json j = nlohmann::json::parse(std::ifstream(db));
    CHECK(j["format"] == "pejit-schedules");
    REQUIRE(!j["entries"].empty());
    std::map<std::string, std::string> chosen; // signature -> schedule
    std::string cpu = j["entries"][0]["cpu"];
    for (const auto& e : j["entries"]) {
      CHECK(e["cpu"] == cpu);
      CHECK(e["measured"]["rows"] == nlohmann::json::array({8, 64}));
      chosen[e["signature"]] = e["schedule"];
    }

    // One thread: with more, training also links column blocks of the weight-gradient
    // kernels (their register block is the whole kernel's; the database has no entry of theirs).
    const std::string train = "train " + kModel + " --data " + data +
                              " --batch 10 --limit 10 --epochs 1 --json --mode specialized "
                              "--no-train-eval --fixed-batches --threads 1";
    // Without --tuned: defaults, whatever databases exist.
    Run plain = run_pejit(train);
    REQUIRE(plain.code == 0);
    auto pj = json_lines(plain.out);
    REQUIRE(pj.size() == 1);
    CHECK(pj[0]["tuned"].is_null());
    std::set<std::string> default_hashes;
    for (const auto& k : pj[0]["kernels"]) {
      CHECK(k["schedule_source"] == "default");
      default_hashes.insert(k["ir_hash"].get<std::string>());
    }
    // With it: each kernel gets its entry's schedule, and says which entry.
    Run t = run_pejit(train + " --tuned " + db);
    INFO(t.err);
    REQUIRE(t.code == 0);
    auto tj = json_lines(t.out);
    REQUIRE(tj.size() == 1);
    CHECK(tj[0]["tuned"] == db);
    REQUIRE(!tj[0]["kernels"].empty());
    for (const auto& k : tj[0]["kernels"]) {
      std::string key = k["signature"];
      bool gemm = key.rfind("gemm ", 0) == 0; // the weight gradients: "... block=B cpu=C"
      std::string sig = key.substr(0, key.find(gemm ? " block=" : " sched="));
      if (sig.rfind("reduce ", 0) == 0) { // row reductions and losses: one schedule, not tuned
        CHECK(k["schedule_source"] == "default");
        continue;
      }
      REQUIRE(chosen.count(sig) == 1);
      CHECK(k["schedule"] == chosen[sig]);
      CHECK(k["schedule_source"].get<std::string>().rfind("tuned " + db + " entry ", 0) == 0);
    }
    CHECK(tj[0]["loss"] == pj[0]["loss"]); // schedules change speed, never results

    // The weight gradients' GEMMs are tuned too.
    size_t gemm_entries = 0;
    for (const auto& e : j["entries"])
      gemm_entries += e["family"] == "gemm";
    CHECK(gemm_entries == 3); // W_leaf, U, W_out

    // Every entry forced to one schedule (the GEMMs to a block that is not their default):
    // dump shows it, and its IR is what training links.
    nlohmann::json forced = j;
    for (auto& e : forced["entries"])
      e["schedule"] = e["family"] == "gemm" ? "6x2" : "v8x2";
    std::string fdb = tmp("forced.json");
    std::ofstream(fdb) << forced.dump(2);
    Run k = run_pejit("dump " + kModel + " --data " + data + " --batch 10 --emit kernels --tuned " +
                      fdb);
    REQUIRE(k.code == 0);
    CHECK(k.out.find(" sched=v8x2 panel=48 core=first scratch=0,2,4 gemm=450x300 gather=300\n"
                     "      schedule v8x2 (source: tuned " +
                     fdb + " entry ") != std::string::npos);
    CHECK(k.out.find("      schedule default (source: default)") == std::string::npos); // no run
    Run l =
        run_pejit("dump " + kModel + " --data " + data + " --batch 10 --emit llvm --tuned " + fdb);
    REQUIRE(l.code == 0);
    std::set<std::string> dumped;
    std::istringstream lines(l.out);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("; kernel ", 0) == 0 || line.rfind("; gemm ", 0) == 0)
        dumped.insert(line.substr(line.find(" fnv=") + 5));
    CHECK(k.out.find(" (weight grad U): gemm f32 tn m=300 n=750 k=? lda=0 ldb=0 ldc=0 acc=? st=1 "
                     "block=6x2\n    schedule 6x2 (source: tuned " +
                     fdb + " entry ") != std::string::npos);
    Run ft = run_pejit(train + " --tuned " + fdb);
    REQUIRE(ft.code == 0);
    std::set<std::string> trained;
    auto fj = json_lines(ft.out);
    REQUIRE(fj.size() == 1);
    for (const auto& kj : fj[0]["kernels"]) {
      if (kj["signature"].get<std::string>().rfind("reduce ", 0) == 0)
        continue; // one schedule: the same IR as without the database
      bool gemm = kj["signature"].get<std::string>().rfind("gemm ", 0) == 0;
      CHECK(kj["schedule"] == (gemm ? "6x2" : "v8x2"));
      trained.insert(kj["ir_hash"].get<std::string>());
    }
    CHECK(trained == dumped);
    for (const auto& h : trained)
      CHECK(default_hashes.count(h) == 0);

    // A database tuned on another CPU: a warning naming it, and default schedules.
    nlohmann::json other = forced;
    for (auto& e : other["entries"])
      e["cpu"] = "some-other-cpu";
    std::string odb = tmp("other_cpu.json");
    std::ofstream(odb) << other.dump(2);
    Run o = run_pejit(train + " --tuned " + odb);
    REQUIRE(o.code == 0);
    CHECK(o.err.find("warning: tuned schedule database '" + odb + "' has no entry for this CPU (" +
                     cpu + ") (it was tuned on some-other-cpu)") != std::string::npos);
    auto oj = json_lines(o.out);
    REQUIRE(oj.size() == 1);
    REQUIRE(!oj[0]["kernels"].empty());
    for (const auto& kj : oj[0]["kernels"])
      CHECK(kj["schedule_source"] == "default");
    Run od = run_pejit("dump " + kModel + " --data " + data + " --emit kernels --tuned " + odb);
    CHECK(od.code == 0);
    CHECK(od.err.find("warning: tuned schedule database '" + odb + "'") != std::string::npos);

    // tune again into the same file: this CPU's entries are replaced, the others kept.
    Run again = run_pejit("tune " + kModel + " --data " + data +
                          " --limit 10 --batch 10 --rows 8 --min-ms 0.02 --repeats 1 --out " + odb);
    REQUIRE(again.code == 0);
    nlohmann::json merged = nlohmann::json::parse(std::ifstream(odb));
    std::set<std::string> cpus;
    for (const auto& e : merged["entries"])
      cpus.insert(e["cpu"]);
    CHECK(cpus == std::set<std::string>{cpu, "some-other-cpu"});
  }

  TEST_CASE("missing, corrupt or malformed tuned databases are clear errors naming the file") {
    std::string data = tmp("tune_err_trees.txt");
    REQUIRE(run_pejit("gen sst --trees 5 --seed 2 -o " + data).code == 0);
    const std::string train = "train " + kModel + " --data " + data + " --mode specialized";
    std::string missing = tmp("no_such_db.json");
    Run m = run_pejit(train + " --tuned " + missing);
    CHECK(m.code == 1);
    CHECK(m.err.find("tuned schedule database '" + missing + "': cannot read the file") !=
          std::string::npos);
    std::string corrupt = tmp("corrupt_db.json");
    std::ofstream(corrupt) << "{\"format\": \"pejit-schedules\", \"version\": 1, \"entr";
    Run c = run_pejit(train + " --tuned " + corrupt);
    CHECK(c.code == 1);
    CHECK(c.err.find("tuned schedule database '" + corrupt + "': not valid JSON") !=
          std::string::npos);
    std::string bad = tmp("bad_entry_db.json");
    std::ofstream(bad) << R"({"format": "pejit-schedules", "version": 1, "entries": [
      {"signature": "ew f32 w=150 in=F ops=neg(0) out=1", "cpu": "x", "family": "elementwise",
       "schedule": "v7x1"}]})";
    Run b = run_pejit("dump " + kModel + " --data " + data + " --emit kernels --tuned " + bad);
    CHECK(b.code == 1);
    CHECK(b.err.find("tuned schedule database '" + bad +
                     "': entry 0 (ew f32 w=150 in=F ops=neg(0) out=1): elementwise schedule "
                     "'v7x1'") != std::string::npos);
    Run e = run_pejit("eval " + kModel + " --params " + missing + " --data " + data + " --tuned " +
                      corrupt);
    CHECK(e.code == 1);
    CHECK(e.err.find("tuned schedule database '" + corrupt + "': not valid JSON") !=
          std::string::npos);
    // tune never overwrites a database it cannot read.
    Run u = run_pejit("tune " + kModel + " --data " + data + " --rows 4 --min-ms 0.02 --out " +
                      corrupt);
    CHECK(u.code == 1);
    CHECK(u.err.find("'" + corrupt + "': not valid JSON") != std::string::npos);
    std::ifstream still(corrupt);
    std::string text((std::istreambuf_iterator<char>(still)), std::istreambuf_iterator<char>());
    CHECK(text == "{\"format\": \"pejit-schedules\", \"version\": 1, \"entr");
    CHECK(run_pejit("tune " + kModel + " --data " + data).code == 2); // --out is required
  }
}

} // namespace tests_cli_cli_test
