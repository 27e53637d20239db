// Embedding pejit in a C++ program through its public header alone: the program keeps its
// own tree structure, converts it into values of the model's `Tree` ADT with Session::make,
// trains a few steps of the TreeLSTM (examples/treelstm/treelstm.pe) and runs `infer`.
//
//   embed_example [path/to/treelstm.pe]
//
// Exits 0 when the loss fell over the steps, 1 when it did not, 2 on an error.
#include <pejit/pejit.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#ifndef EMBED_MODEL_PATH
#define EMBED_MODEL_PATH "treelstm.pe"
#endif

namespace {

// The application's own tree: a word id at the leaves, a label 0..4 at every node.
struct MyTree {
  int word = -1;
  int label = 0;
  std::unique_ptr<MyTree> left, right;
};

std::unique_ptr<MyTree> leaf(int word, int label) {
  auto t = std::make_unique<MyTree>();
  t->word = word;
  t->label = label;
  return t;
}

std::unique_ptr<MyTree> node(std::unique_ptr<MyTree> l, std::unique_ptr<MyTree> r, int label) {
  auto t = std::make_unique<MyTree>();
  t->label = label;
  t->left = std::move(l);
  t->right = std::move(r);
  return t;
}

// MyTree -> the model's `Leaf(word, label) | Node(left, right, label)`.
pejit::Value convert(const pejit::Session& s, const MyTree& t) {
  if (!t.left)
    return s.make("Leaf", {pejit::Value::scalar_i32(t.word), pejit::Value::scalar_i32(t.label)});
  return s.make("Node",
                {convert(s, *t.left), convert(s, *t.right), pejit::Value::scalar_i32(t.label)});
}

} // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : EMBED_MODEL_PATH;
  try {
    pejit::SessionOptions opt;
    opt.dims = {{"V", 16}};
    opt.optimizer = "adagrad";
    opt.lr = 0.05f;
    opt.seed = 7;
    pejit::Session s = pejit::Session::from_file(model, opt);

    // A tiny "sentiment" corpus: words 0..7 are negative (label 1), 8..15 positive (label 3);
    // a node takes the label of its left child.
    std::vector<std::unique_ptr<MyTree>> trees;
    trees.push_back(node(leaf(1, 1), leaf(2, 1), 1));
    trees.push_back(node(leaf(9, 3), leaf(10, 3), 3));
    trees.push_back(node(node(leaf(3, 1), leaf(12, 3), 1), leaf(4, 1), 1));
    trees.push_back(node(leaf(11, 3), node(leaf(13, 3), leaf(5, 1), 3), 3));
    trees.push_back(leaf(6, 1));
    trees.push_back(leaf(14, 3));

    std::vector<pejit::Value> items;
    for (const auto& t : trees)
      items.push_back(convert(s, *t));
    pejit::Value batch = pejit::Value::list(items);

    std::vector<float> losses;
    for (int i = 0; i < 10; ++i) {
      float l = s.step("loss", batch);
      losses.push_back(l);
      std::printf("step %d  loss %.4f\n", i + 1, l);
    }

    pejit::Value pred = s.run("infer", batch);
    int correct = 0;
    std::printf("root predictions:");
    for (size_t i = 0; i < pred.size(); ++i) {
      int p = pred.at(i).item_i32();
      correct += p == trees[i]->label;
      std::printf(" %d(gold %d)", p, trees[i]->label);
    }
    std::printf("\n%d/%zu roots correct\n", correct, pred.size());

    if (!(losses.back() < losses.front())) {
      std::fprintf(stderr, "embed_example: the loss did not fall (%.4f -> %.4f)\n", losses.front(),
                   losses.back());
      return 1;
    }
    std::printf("loss fell %.4f -> %.4f\n", losses.front(), losses.back());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed_example: %s\n", e.what());
    return 2;
  }
}
