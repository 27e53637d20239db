// Differential test against the PyTorch peer (bench/torch): on the same batch of trees and the
// same weights, pejit's generic path and PyTorch (naive and level-batched) give the same loss
// and the same gradients (tests/support/compare.h tolerances). Runs when /usr/bin/python3 has torch
// (`scripts/setup.sh --bench` installs it); otherwise the case reports itself skipped.
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"
#include "runtime/train/encode.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "tests/support/compare.h"
#include "tests/support/skip.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>

namespace tests_peer_torch_peer_test {

using namespace pejit;

namespace {

bool have_torch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

std::string capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p)
    return out;
  std::array<char, 4096> buf;
  size_t k;
  while ((k = fread(buf.data(), 1, buf.size(), p)) > 0)
    out.append(buf.data(), k);
  pclose(p);
  return out;
}

} // namespace

TEST_SUITE("peer") {
  TEST_CASE("TreeLSTM loss and gradients agree with PyTorch on the same batch and weights") {
    if (!have_torch()) {
      test::skip("/usr/bin/python3 has no torch (scripts/setup.sh --bench installs it)");
      return;
    }
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("pejit_peer_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::string data = (dir / "trees.txt").string(), ck = (dir / "init.ckpt").string(),
                grads = (dir / "torch_grads.ckpt").string();

    data::Vocab vocab;
    auto trees = data::gen_sst(25, 77, data::Shape::Sst, vocab);
    data::write_trees(data, trees);

    auto m = std::make_shared<ir::Module>();
    Diagnostics d;
    REQUIRE(types::add_file(*m, PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe", d).ok);
    auto dims = interp::bind_dims(*m, {{"V", static_cast<int64_t>(vocab.size())}});
    auto params = interp::init_params(*m, dims, 3);
    checkpoint::Checkpoint c;
    c.params = params;
    c.vocab = vocab.words();
    checkpoint::save(ck, c);

    std::string out =
        capture("/usr/bin/python3 " PEJIT_SOURCE_DIR
                "/bench/torch/treelstm_torch.py --loss-only --checkpoint " +
                ck + " --data " + data + " --batch 25 --batch-index 0 --grads-out " + grads);
    INFO(out);
    auto j = nlohmann::json::parse(out.substr(out.find('{')));

    runtime::TreeEncoder enc(*m, "Tree");
    interp::Values xs;
    for (const auto& t : trees)
      xs.push_back(enc.encode(t));
    interp::Interpreter in(m, dims);
    auto g = in.value_and_grad("loss", {interp::Value::list(xs)}, params);
    for (const char* style : {"loss_naive", "loss_batched"}) {
      double ref = j[style].get<double>();
      CAPTURE(style);
      CHECK(test::loss_close(g.loss, ref));
    }

    checkpoint::Checkpoint tg = checkpoint::load(grads);
    for (size_t p = 0; p < params.names.size(); ++p) {
      int k = tg.params.index(params.names[p]);
      REQUIRE(k >= 0);
      Tensor mine = g.grads[p].to_dense(params.values[p].shape());
      const Tensor& ref = tg.params.values[static_cast<size_t>(k)];
      test::check_close(mine, ref, params.names[p]);
    }
    fs::remove_all(dir);
  }
}

} // namespace tests_peer_torch_peer_test
