// A small tree model whose loss is NaN for a word whose embedding makes exp overflow
// (exp(x) - exp(x) is then inf - inf) and finite otherwise: for the tests of what a run does
// with a non-finite loss (no update, the last good state saved).
#pragma once

#include <string>

namespace pejit::test {

/// The model's text, with a vocabulary of `vocab` words and hidden vectors of `width`.
inline std::string nan_model(int vocab, int width) {
  const std::string v = std::to_string(vocab), w = std::to_string(width);
  return R"(
type Tree = Leaf(word: i32[], label: i32[])
          | Node(left: Tree, right: Tree, label: i32[])
dim V = )" + v + R"(
param emb   : f32[V, )" + w + R"(] = normal(0.0, 0.1)
param W_out : f32[)" + w + R"(, 5] = xavier
fn enc(t: Tree) -> (f32[)" + w + R"(], f32[]) {
  match t {
    Leaf(w, y) => {
      let x = take(emb, w);
      let h = tanh(x) * (exp(x) - exp(x) + 1.0);
      (h, cross_entropy(h @ W_out, y))
    }
    Node(l, r, y) => {
      let (hl, ll) = enc(l);
      let (hr, lr) = enc(r);
      let h = tanh(hl + hr);
      (h, ll + lr + cross_entropy(h @ W_out, y))
    }
  }
}
entry loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => enc(t).1, batch)) }
)";
}

} // namespace pejit::test
