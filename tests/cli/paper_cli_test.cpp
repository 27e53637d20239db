// CLI tests of what a TreeLSTM paper run needs (issue 23): `--labels binary` on train and eval,
// `pejit predict`, `--freeze` and `--embeddings`, learning-rate schedules and per-parameter
// options.
#include "runtime/checkpoint/checkpoint.h"
#include "tests/cli/cli_util.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tests_cli_paper_cli_test {

using namespace pejit::cli_test;

namespace {

const std::string kBinary = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm_binary.pe";

std::string write_file(const std::string& name, const std::string& text) {
  std::string p = tmp(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

const char* kSst = "(3 (2 a) (4 (2 b) (1 c)))\n"
                   "(2 (3 a) (1 b))\n"
                   "(0 (2 c) (2 d))\n"
                   "(4 (3 a) (2 (1 b) (0 c)))\n"
                   "(1 (0 d) (2 a))\n";

} // namespace

TEST_CASE("cli labels binary: train and eval count the trees kept and their labeled nodes") {
  std::string data = write_file("paper_sst.txt", kSst);
  std::string ck = tmp("paper_bin.ckpt");
  Run t = run_pejit("train " + kBinary + " --data " + data + " --dev " + data +
                    " --labels binary --epochs 1 --batch 2 --mode generic --json --save " + ck);
  REQUIRE_MESSAGE(t.code == 0, t.err);
  CHECK(t.err.find("binary labels: " + data +
                   ": kept 4 of 5 trees (1 with a neutral root dropped), 6 neutral inner nodes "
                   "unlabeled") != std::string::npos);
  auto js = json_lines(t.out);
  REQUIRE(js.size() == 1);
  CHECK(js[0]["trees"] == 4);
  CHECK(js[0]["nodes"] == 10);
  Run e = run_pejit("eval " + kBinary + " --params " + ck + " --data " + data +
                    " --labels binary --json --mode generic");
  REQUIRE_MESSAGE(e.code == 0, e.err);
  auto ej = json_lines(e.out);
  REQUIRE(ej.size() == 1);
  CHECK(ej[0]["trees"] == 4);
  CHECK(ej[0]["nodes"] == 10);
  double root = ej[0]["root_acc"], node = ej[0]["node_acc"];
  CHECK(root * 4 == doctest::Approx(std::round(root * 4)));
  CHECK(node * 10 == doctest::Approx(std::round(node * 10)));
  CHECK(root == doctest::Approx(js[0]["dev_root_acc"].get<double>()));
  // Without --labels binary the same checkpoint reads 5 trees of labels up to 4: outside the
  // model's 2 classes, at the first such node.
  Run f = run_pejit("eval " + kBinary + " --params " + ck + " --data " + data + " --mode generic");
  CHECK(f.code == 1);
  CHECK(f.err.find(":1:4: error: label 2 is outside the model's classes [0, 2)") !=
        std::string::npos);
  // A 5-class model whose loss takes every node's label stops at the first unlabeled node.
  Run u = run_pejit("train " + kModel + " --data " + data + " --labels binary --mode generic");
  CHECK(u.code == 1);
  CHECK(u.err.find(":3:4: error: the node has no label") != std::string::npos);
  Run bad = run_pejit("train " + kBinary + " --data " + data + " --labels ternary");
  CHECK(bad.code == 2);
}

namespace {

std::vector<std::vector<int>> read_lines(const std::string& path) {
  std::vector<std::vector<int>> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<int> row;
    for (int v; ls >> v;)
      row.push_back(v);
    rows.push_back(row);
  }
  return rows;
}

} // namespace

TEST_CASE("cli predict: a class per tree, or per node children first, matching eval's scores") {
  std::string data = write_file("paper_pred.txt", kSst);
  std::string ck = tmp("paper_pred.ckpt");
  Run t = run_pejit("train " + kBinary + " --data " + data +
                    " --labels binary --epochs 2 --batch 2 --mode generic --save " + ck);
  REQUIRE_MESSAGE(t.code == 0, t.err);
  std::string roots = tmp("paper_roots.txt"), nodes = tmp("paper_nodes.txt");
  Run p = run_pejit("predict " + kBinary + " --params " + ck + " --data " + data + " -o " + roots);
  REQUIRE_MESSAGE(p.code == 0, p.err);
  CHECK(p.err.find("predicted 5 trees to " + roots) != std::string::npos);
  Run q = run_pejit("predict " + kBinary + " --params " + ck + " --data " + data + " -o " + nodes +
                    " --nodes --batch 2");
  REQUIRE_MESSAGE(q.code == 0, q.err);
  auto r = read_lines(roots), n = read_lines(nodes);
  // Every tree of the file, in its order (labels play no part: the neutral root is kept).
  REQUIRE(r.size() == 5);
  REQUIRE(n.size() == 5);
  const std::vector<size_t> sizes = {5, 3, 3, 5, 3};
  for (size_t i = 0; i < 5; ++i) {
    REQUIRE(r[i].size() == 1);
    CHECK((r[i][0] == 0 || r[i][0] == 1));
    CHECK(n[i].size() == sizes[i]);
    CHECK(n[i].back() == r[i][0]); // the root last
  }
  // eval --labels binary scores the same predictions against the mapped labels (post-order;
  // -1: unlabeled) of the trees kept.
  const std::vector<std::vector<int>> gold = {
      {-1, -1, 0, 1, 1}, {}, {-1, -1, 0}, {1, 0, 0, -1, 1}, {0, -1, 0}};
  int root_ok = 0, node_ok = 0, labeled = 0;
  for (size_t i = 0; i < 5; ++i) {
    if (gold[i].empty())
      continue; // dropped: neutral root
    for (size_t k = 0; k < gold[i].size(); ++k) {
      if (gold[i][k] < 0)
        continue;
      labeled += 1;
      node_ok += n[i][k] == gold[i][k];
      if (k + 1 == gold[i].size())
        root_ok += n[i][k] == gold[i][k];
    }
  }
  CHECK(labeled == 10);
  Run e = run_pejit("eval " + kBinary + " --params " + ck + " --data " + data +
                    " --labels binary --json --mode generic");
  REQUIRE_MESSAGE(e.code == 0, e.err);
  auto ej = json_lines(e.out);
  REQUIRE(ej.size() == 1);
  CHECK(ej[0]["root_acc"].get<double>() == doctest::Approx(root_ok / 4.0));
  CHECK(ej[0]["node_acc"].get<double>() == doctest::Approx(node_ok / 10.0));

  // Unlabeled data predicts too.
  std::string unl = write_file("paper_unl.txt", "(- (- a) (- (- b) (- zz)))\n");
  Run u = run_pejit("predict " + kBinary + " --params " + ck + " --data " + unl + " -o " + roots +
                    " --nodes");
  REQUIRE_MESSAGE(u.code == 0, u.err);
  CHECK(read_lines(roots).at(0).size() == 5);

  // Bad inputs: located or named errors, nothing half written.
  Run dir = run_pejit("predict " + kBinary + " --params " + ck + " --data " + data +
                      " -o /nonexistent-dir/p.txt");
  CHECK(dir.code == 1);
  CHECK(dir.err.find("-o /nonexistent-dir/p.txt: cannot write") != std::string::npos);
  std::string bad = write_file("paper_bad.txt", "(1 (0 a) (1 b))\n(1 (0 a) (1 b)\n");
  Run b = run_pejit("predict " + kBinary + " --params " + ck + " --data " + bad + " -o " + roots);
  CHECK(b.code == 1);
  CHECK(b.err.find(bad + ":2:") != std::string::npos);
  Run l = run_pejit("predict " PEJIT_SOURCE_DIR "/examples/listops/listops.pe --params " + ck +
                    " --data " + data + " -o " + roots + " --nodes");
  CHECK(l.code == 1);
  CHECK(l.err.find("has no entry `infer_nodes`") != std::string::npos);
  CHECK(run_pejit("predict " + kBinary + " --params " + ck + " --data " + data).code == 2);
}

namespace {

// A tensor of a checkpoint by name (empty when absent).
std::vector<float> tensor_of(const pejit::checkpoint::Checkpoint& ck, const std::string& name) {
  int i = ck.params.index(name);
  if (i < 0)
    return {};
  const auto& t = ck.params.values[static_cast<size_t>(i)];
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

bool has_state(const pejit::checkpoint::Checkpoint& ck, const std::string& name) {
  for (const auto& [n, t] : ck.optimizer_state)
    if (n == name)
      return true;
  return false;
}

// Word `w`'s vector in the generated file: distinct per word and column.
float vec(int w, int k) {
  return 0.5f + 0.25f * static_cast<float>(w) + 0.001f * static_cast<float>(k);
}

} // namespace

TEST_CASE("cli --embeddings fills the vocabulary rows, plain and gzip, and --freeze keeps them") {
  std::string data = write_file("paper_emb.txt", kSst);
  // Vocabulary of the data: <unk> a b c d (ids in order of appearance).
  std::string text = "3 300\n";
  const char* words[] = {"a", "b", "zz"};
  for (int w = 0; w < 3; ++w) {
    text += words[w];
    for (int k = 0; k < 300; ++k) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " %.3f", static_cast<double>(vec(w, k)));
      text += buf;
    }
    text += "\n";
  }
  std::string vecs = write_file("paper_vecs.txt", text);
  REQUIRE(std::system(("gzip -kf " + vecs).c_str()) == 0);
  std::string base = "train " + kBinary + " --data " + data +
                     " --labels binary --mode generic --epochs 1 --batch 2 --seed 3 ";
  std::string ck0 = tmp("paper_e0.ckpt"), ck1 = tmp("paper_e1.ckpt"), ck2 = tmp("paper_e2.ckpt");
  Run r0 = run_pejit(base + "--freeze emb --freeze b_out --save " + ck0);
  REQUIRE_MESSAGE(r0.code == 0, r0.err);
  Run r1 = run_pejit(base + "--freeze emb --freeze b_out --embeddings " + vecs + " --save " + ck1);
  REQUIRE_MESSAGE(r1.code == 0, r1.err);
  CHECK(r1.err.find("embeddings " + vecs +
                    " -> emb: 2 of 5 vocabulary words found (40.0%), covering 50.0% of the "
                    "training tokens") != std::string::npos);
  Run r2 = run_pejit(base + "--freeze emb --freeze b_out --embeddings " + vecs + ".gz --save " +
                     ck2 + " --embeddings-param emb");
  REQUIRE_MESSAGE(r2.code == 0, r2.err);
  auto c0 = pejit::checkpoint::load(ck0), c1 = pejit::checkpoint::load(ck1),
       c2 = pejit::checkpoint::load(ck2);
  auto e0 = tensor_of(c0, "emb"), e1 = tensor_of(c1, "emb"), e2 = tensor_of(c2, "emb");
  REQUIRE(e1.size() == 5 * 300);
  CHECK(e1 == e2); // gzip reads as plain
  for (int k = 0; k < 300; ++k) {
    CHECK(e1[1 * 300 + k] == doctest::Approx(vec(0, k))); // a, kept by --freeze
    CHECK(e1[2 * 300 + k] == doctest::Approx(vec(1, k))); // b
  }
  // <unk>, c and d keep the initialization (the seed's), frozen too.
  for (int row : {0, 3, 4})
    for (int k = 0; k < 300; ++k)
      CHECK(e1[static_cast<size_t>(row * 300 + k)] == e0[static_cast<size_t>(row * 300 + k)]);
  // Frozen: no optimizer state; b_out stays its zeros; the rest trained.
  CHECK(!has_state(c1, "adagrad_sum.emb"));
  CHECK(!has_state(c1, "adagrad_sum.b_out"));
  CHECK(has_state(c1, "adagrad_sum.W_out"));
  CHECK(tensor_of(c1, "b_out") == std::vector<float>{0.0f, 0.0f});
  // Not frozen, the embedding's rows of the batch's words move.
  std::string ck3 = tmp("paper_e3.ckpt");
  REQUIRE(run_pejit(base + "--embeddings " + vecs + " --save " + ck3).code == 0);
  auto c3 = pejit::checkpoint::load(ck3);
  CHECK(tensor_of(c3, "emb") != e1);
  CHECK(has_state(c3, "adagrad_sum.emb"));

  // Errors at the file's line (and column).
  std::string short_v = write_file("paper_short.txt", "a 0.1 0.2\n");
  Run s = run_pejit(base + "--embeddings " + short_v);
  CHECK(s.code == 1);
  CHECK(
      s.err.find(short_v + ":1: error: the vector of 'a' has 2 values, but emb has rows of 300") !=
      std::string::npos);
  std::string hdr = write_file("paper_hdr.txt", "3 50\n");
  Run h = run_pejit(base + "--embeddings " + hdr);
  CHECK(h.err.find(hdr + ":1: error: the word2vec header says 50 dimensions") != std::string::npos);
  std::string nan_v = write_file("paper_nan.txt", text.substr(0, text.find('\n', 7)) + " x\n");
  Run n = run_pejit(base + "--embeddings " + nan_v);
  CHECK(n.err.find(nan_v + ":2:") != std::string::npos);
  Run f = run_pejit(base + "--freeze nope");
  CHECK(f.code == 1);
  CHECK(f.err.find("--freeze nope: the model has no parameter nope") != std::string::npos);
  Run p = run_pejit(base + "--embeddings " + vecs + " --embeddings-param W_out");
  CHECK(p.err.find("has rows of 2") != std::string::npos);
}

TEST_CASE("cli --lr-schedule and per-parameter options: they change training, resume bitwise") {
  std::string data = write_file("paper_sched.txt", kSst);
  std::string base = "train " + kBinary + " --data " + data +
                     " --labels binary --mode generic --batch 1 --weight-decay 0.001 ";
  std::string opts = "--lr-schedule warmup:3,step:2:0.5 --param-lr emb=0.1 --no-decay-bias ";
  std::string plain = tmp("paper_s0.ckpt"), two = tmp("paper_s2.ckpt"), one = tmp("paper_s1.ckpt"),
              resumed = tmp("paper_s11.ckpt");
  REQUIRE(run_pejit(base + "--epochs 2 --save " + plain).code == 0);
  Run a = run_pejit(base + opts + "--epochs 2 --save " + two);
  REQUIRE_MESSAGE(a.code == 0, a.err);
  Run b = run_pejit(base + opts + "--epochs 1 --save " + one);
  REQUIRE_MESSAGE(b.code == 0, b.err);
  Run c = run_pejit(base + opts + "--epochs 2 --resume " + one + " --save " + resumed);
  REQUIRE_MESSAGE(c.code == 0, c.err);
  auto p0 = pejit::checkpoint::load(plain), p2 = pejit::checkpoint::load(two),
       p11 = pejit::checkpoint::load(resumed);
  // The schedule and the options are in effect...
  CHECK(tensor_of(p2, "W_out") != tensor_of(p0, "W_out"));
  // ...and 2 epochs straight equal 1 + 1 resumed, bit for bit, the schedule included.
  for (const auto& n : {"emb", "W_leaf", "b_leaf", "U", "b_node", "W_out", "b_out"})
    CHECK_MESSAGE(tensor_of(p2, n) == tensor_of(p11, n), n);
  REQUIRE(p2.optimizer_state.size() == p11.optimizer_state.size());
  for (size_t i = 0; i < p2.optimizer_state.size(); ++i) {
    const auto& x = p2.optimizer_state[i].second;
    const auto& y = p11.optimizer_state[i].second;
    CHECK(std::vector<float>(x.f32(), x.f32() + x.numel()) ==
          std::vector<float>(y.f32(), y.f32() + y.numel()));
  }
  // Resuming with other options is refused, naming them.
  Run d = run_pejit(base + "--epochs 2 --resume " + one + " --save " + tmp("paper_s12.ckpt"));
  CHECK(d.code == 1);
  CHECK(
      d.err.find("the run was trained with optimizer options 'lr_schedule=warmup:3,step:2:0.5;") !=
      std::string::npos);
  Run d2 = run_pejit(base + opts + "--freeze W_out --epochs 2 --resume " + one + " --save " +
                     tmp("paper_s13.ckpt"));
  CHECK(d2.code == 1);
  CHECK(d2.err.find("freeze=W_out,;'") != std::string::npos);
  Run e = run_pejit(base + "--lr-schedule cosine:0");
  CHECK(e.code == 1);
  CHECK(e.err.find("--lr-schedule 'cosine:0': TOTAL must be a whole number >= 1") !=
        std::string::npos);
  Run f = run_pejit(base + "--param-decay nope=1");
  CHECK(f.err.find("--param-decay nope=1: the model has no parameter nope") != std::string::npos);
}

TEST_CASE("cli --resume restores the random state: a dropout model's 1 + 1 equal 2 straight") {
  const std::string model = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm_dropout.pe";
  std::string data = write_file("paper_drop.txt", kSst);
  std::string base = "train " + model + " --data " + data + " --batch 2 --json --seed 5 ";
  std::string two = tmp("paper_d2.ckpt"), one = tmp("paper_d1.ckpt"), more = tmp("paper_d11.ckpt");
  Run a = run_pejit(base + "--epochs 2 --save " + two);
  REQUIRE_MESSAGE(a.code == 0, a.err);
  Run b = run_pejit(base + "--epochs 1 --save " + one);
  REQUIRE_MESSAGE(b.code == 0, b.err);
  // 5 trees in batches of 2: the first epoch drew 3 random steps.
  auto p1 = pejit::checkpoint::load(one);
  REQUIRE(p1.training);
  CHECK(p1.training->values.at("random_seed") == "5");
  CHECK(p1.training->values.at("random_step") == "3");
  auto bits = [](const pejit::checkpoint::Checkpoint& ck) {
    std::string out;
    for (const auto& t : ck.params.values)
      out.append(static_cast<const char*>(t.raw()), t.nbytes());
    for (const auto& [name, t] : ck.optimizer_state)
      out.append(static_cast<const char*>(t.raw()), t.nbytes());
    return out;
  };
  auto resume = [&](const std::string& from, const std::string& to) {
    Run c = run_pejit(base + "--epochs 2 --resume " + from + " --save " + to);
    REQUIRE_MESSAGE(c.code == 0, c.err);
    auto ja = json_lines(a.out), jc = json_lines(c.out);
    REQUIRE(ja.size() == 2);
    REQUIRE(jc.size() == 1);
    return ja[1]["loss"] == jc[0]["loss"] &&
           bits(pejit::checkpoint::load(two)) == bits(pejit::checkpoint::load(to));
  };
  CHECK(resume(one, more)); // the epoch-2 loss and every parameter and state, bit for bit
  // A checkpoint from before the random state was kept: a run from its start is assumed.
  auto old = p1;
  old.training->values.erase("random_seed");
  old.training->values.erase("random_step");
  std::string old_path = tmp("paper_d1_old.ckpt");
  pejit::checkpoint::save(old_path, old);
  CHECK(resume(old_path, tmp("paper_d11_old.ckpt")));
  // The masks matter: resumed at another random step, the run is another one.
  auto off = p1;
  off.training->values["random_step"] = "0";
  std::string off_path = tmp("paper_d1_off.ckpt");
  pejit::checkpoint::save(off_path, off);
  CHECK_FALSE(resume(off_path, tmp("paper_d11_off.ckpt")));
  off.training->values["random_step"] = "x";
  pejit::checkpoint::save(off_path, off);
  Run bad = run_pejit(base + "--epochs 2 --resume " + off_path);
  CHECK(bad.code == 1);
  CHECK(bad.err.find("training.random_step: 'x' is not a count") != std::string::npos);
}

TEST_CASE("cli --kernel-cache: a second train and an eval link the kernels the first compiled") {
  std::string data = write_file("paper_kc.txt", kSst);
  std::string dir = tmp("paper_kcache");
  std::string base = "train " + kModel + " --data " + data + " --json --mode specialized ";
  Run a = run_pejit(base + "--kernel-cache " + dir + " --save " + tmp("paper_kc.ckpt"));
  REQUIRE_MESSAGE(a.code == 0, a.err);
  Run b = run_pejit(base + "--kernel-cache " + dir + " --kernel-cache-max-mb 64");
  REQUIRE_MESSAGE(b.code == 0, b.err);
  auto ja = json_lines(a.out), jb = json_lines(b.out);
  REQUIRE(ja.size() == 1);
  REQUIRE(jb.size() == 1);
  CHECK(ja[0]["kernels_compiled"].get<int>() > 0);
  CHECK(ja[0]["kernels_cached"] == 0);
  CHECK(jb[0]["kernels_compiled"] == 0);
  CHECK(jb[0]["kernels_cached"] == ja[0]["kernels_compiled"]);
  CHECK(jb[0]["loss"] == ja[0]["loss"]);
  // Each kernel of the last epoch says whether it was linked from the directory.
  REQUIRE(!ja[0]["kernels"].empty());
  for (const auto& k : ja[0]["kernels"])
    CHECK(k["cached"] == false);
  REQUIRE(!jb[0]["kernels"].empty());
  for (const auto& k : jb[0]["kernels"])
    CHECK(k["cached"] == true);
  // eval runs the forward kernels, which training compiled.
  Run e = run_pejit("eval " + kModel + " --params " + tmp("paper_kc.ckpt") + " --data " + data +
                    " --json --mode specialized --kernel-cache " + dir);
  REQUIRE_MESSAGE(e.code == 0, e.err);
  auto je = json_lines(e.out);
  REQUIRE(je.size() == 1);
  CHECK(je[0]["kernels_compiled"] == 0);
  CHECK(je[0]["kernels_cached"].get<int>() > 0);
  // Without the flag nothing is cached.
  Run c = run_pejit(base);
  REQUIRE(c.code == 0);
  CHECK(json_lines(c.out)[0]["kernels_cached"] == 0);
  Run bad = run_pejit(base + "--kernel-cache " + data);
  CHECK(bad.code == 1);
  CHECK(bad.err.find("kernel cache directory '" + data + "'") != std::string::npos);
  // Two runs at once on a fresh directory: both write every entry; the entries are whole (a
  // third run links every kernel) and the losses equal.
  std::string shared = tmp("paper_kcache_shared");
  std::string one = std::string(PEJIT_BINARY_DIR "/pejit ") + base + "--kernel-cache " + shared;
  std::string both = "(" + one + " > " + tmp("kc1.out") + " 2>/dev/null & " + one + " > " +
                     tmp("kc2.out") + " 2>/dev/null & wait)";
  REQUIRE(std::system(both.c_str()) == 0);
  auto read = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return json_lines(ss.str());
  };
  auto j1 = read(tmp("kc1.out")), j2 = read(tmp("kc2.out"));
  REQUIRE(j1.size() == 1);
  REQUIRE(j2.size() == 1);
  CHECK(j1[0]["loss"] == ja[0]["loss"]);
  CHECK(j2[0]["loss"] == ja[0]["loss"]);
  Run third = run_pejit(base + "--kernel-cache " + shared);
  REQUIRE(third.code == 0);
  CHECK(json_lines(third.out)[0]["kernels_compiled"] == 0);
  CHECK(json_lines(third.out)[0]["kernels_cached"] == ja[0]["kernels_compiled"]);
  Run zero = run_pejit(base + "--kernel-cache " + dir + " --kernel-cache-max-mb 0");
  CHECK(zero.code != 0);
  CHECK(zero.err.find("--kernel-cache-max-mb") != std::string::npos);
}

} // namespace tests_cli_paper_cli_test
