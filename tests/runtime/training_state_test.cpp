// The Session's training state for exact resumes (save_training, load_training) and its
// refusal to update from a non-finite loss, through the public API only.
#include "pejit/pejit.h"
#include "tests/support/nan_model.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace tests_runtime_training_state_test {

namespace {

// The NaN model (tests/support/nan_model.h) over 8 words of width 4.
const std::string kNanModel = pejit::test::nan_model(8, 4);

pejit::Value tree(const pejit::Session& s, int a, int b) {
  auto leaf = [&](int w) {
    return s.make("Leaf", {pejit::Value::scalar_i32(w), pejit::Value::scalar_i32(w % 5)});
  };
  return s.make("Node", {leaf(a), leaf(b), pejit::Value::scalar_i32(2)});
}

pejit::Value batch(const pejit::Session& s, int k) {
  return pejit::Value::list({tree(s, k % 8, (k + 3) % 8), tree(s, (k + 5) % 8, 1)});
}

pejit::Session open(const std::string& optimizer) {
  pejit::SessionOptions o;
  o.optimizer = optimizer;
  o.mode = "specialized";
  o.seed = 3;
  return pejit::Session::from_source(kNanModel, "nan.pe", o);
}

std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("pejit_state_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

} // namespace

TEST_SUITE("session") {
  TEST_CASE("save_training and load_training resume a run exactly, with any optimizer") {
    for (const char* opt : {"adagrad", "adam", "sgd"}) {
      INFO(opt);
      const std::string path = temp(std::string(opt) + ".ckpt");
      pejit::Session straight = open(opt), first = open(opt);
      for (int k = 0; k < 3; ++k)
        CHECK(straight.step("loss", batch(straight, k)) == first.step("loss", batch(first, k)));
      pejit::TrainingState st;
      st.epoch = 1;
      st.batch = 3;
      st.values = {{"seed", "3"}, {"note", "half way"}};
      first.save_training(path, st, {"<unk>", "a"}, {{"model", "nan.pe"}});

      pejit::Session resumed = open(opt);
      std::vector<std::string> vocab;
      pejit::TrainingState back = resumed.load_training(path, &vocab);
      CHECK(back.epoch == 1);
      CHECK(back.batch == 3);
      CHECK(back.values == st.values);
      CHECK(vocab == std::vector<std::string>{"<unk>", "a"});
      // The optimizer state came back too: the next steps are the straight run's, bit for bit.
      for (int k = 3; k < 6; ++k) {
        float a = straight.step("loss", batch(straight, k));
        float b = resumed.step("loss", batch(resumed, k));
        CHECK(std::memcmp(&a, &b, sizeof a) == 0);
      }
      for (const auto& n : straight.param_names())
        CHECK(straight.get_param(n) == resumed.get_param(n));
      std::remove(path.c_str());
    }
  }

  TEST_CASE("load_training refuses a checkpoint without a training state, changing nothing") {
    const std::string path = temp("plain.ckpt");
    pejit::Session s = open("adagrad");
    s.step("loss", batch(s, 0));
    s.save(path);
    pejit::Session t = open("adagrad");
    CHECK_THROWS_WITH_AS(t.load_training(path), doctest::Contains("no training state"),
                         pejit::Error);
    CHECK(t.get_param("emb") == open("adagrad").get_param("emb"));
    CHECK(t.load(path).size() == 1); // load() still takes it
    CHECK(t.get_param("emb") == s.get_param("emb"));
    std::remove(path.c_str());
  }

  TEST_CASE("a step whose loss is not finite changes neither the parameters nor the optimizer") {
    for (const char* opt : {"adagrad", "adam"}) {
      INFO(opt);
      pejit::Session s = open(opt), ref = open(opt);
      s.step("loss", batch(s, 1));
      ref.step("loss", batch(ref, 1));
      // Word 7's embedding overflows exp: every batch holding it has a NaN loss.
      std::vector<float> emb = s.get_param("emb");
      for (int j = 0; j < 4; ++j)
        emb[7 * 4 + j] = 100.0f;
      s.set_param("emb", emb);
      std::vector<float> before_emb = s.get_param("emb"), before_w = s.get_param("W_out");
      pejit::Value bad = pejit::Value::list({tree(s, 7, 2)});
      CHECK(std::isnan(s.step("loss", bad)));
      CHECK(s.get_param("emb") == before_emb);
      CHECK(s.get_param("W_out") == before_w);
      // The optimizer state did not move either: restoring the row, the next step is the
      // reference session's.
      for (int j = 0; j < 4; ++j)
        emb[7 * 4 + j] = ref.get_param("emb")[7 * 4 + j];
      s.set_param("emb", emb);
      float a = s.step("loss", batch(s, 2)), b = ref.step("loss", batch(ref, 2));
      CHECK(std::memcmp(&a, &b, sizeof a) == 0);
      CHECK(s.get_param("W_out") == ref.get_param("W_out"));
    }
  }
}

} // namespace tests_runtime_training_state_test
