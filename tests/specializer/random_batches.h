// Random batches for the random programs of random_programs.h: lists of random trees of the
// program's constructors (bounded depth and size), with random payloads, word ids, Ints and
// labels. A batch continues the program generator's random stream, so one seed fixes both.
#pragma once

#include "src/interp/value.h"
#include "tests/specializer/random_programs.h"
#include "src/tensor/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pejit::testgen {

struct RandomProgram {
  std::string source;
  interp::Value batch;
  std::string batch_desc; ///< a readable description of the batch's structure
};

namespace detail {

/// Draws batches for the program a Generator has made (after its run()).
class BatchGenerator {
public:
  explicit BatchGenerator(Generator& g)
      : r_(g.r_), ctors_(g.ctors_), K_(g.K_), V_(g.V_), C_(g.C_) {}

  interp::Value batch(std::string& desc) {
    int n = r_.uni(1, 5);
    interp::Values ts;
    for (int i = 0; i < n; ++i) {
      int budget = r_.uni(0, 12);
      desc += i ? " " : "";
      ts.push_back(tree(0, budget, desc));
    }
    return interp::Value::list(std::move(ts));
  }

private:
  Rng& r_;
  const std::vector<Ctor>& ctors_;
  const int K_, V_, C_;

  interp::Value tree(int depth, int& budget, std::string& desc) {
    std::vector<size_t> choices;
    for (size_t i = 0; i < ctors_.size(); ++i) {
      bool leafy = ctors_[i].kind == Kind::Leaf || ctors_[i].kind == Kind::Seq;
      if (leafy || (depth < 4 && budget > 0))
        choices.push_back(i);
    }
    size_t ci = r_.one(choices);
    const Ctor& c = ctors_[ci];
    budget--;
    desc += c.name;
    interp::Values fs;
    auto sub = [&] {
      desc += "(";
      auto v = tree(depth + 1, budget, desc);
      desc += ")";
      return v;
    };
    switch (c.kind) {
    case Kind::Unary:
      fs.push_back(sub());
      break;
    case Kind::Binary:
      fs.push_back(sub());
      fs.push_back(sub());
      break;
    case Kind::Rose: {
      int n = budget > 0 ? r_.uni(0, 3) : 0;
      interp::Values kids;
      desc += "[";
      for (int k = 0; k < n; ++k)
        kids.push_back(sub());
      desc += "]";
      fs.push_back(interp::Value::list(std::move(kids)));
      break;
    }
    case Kind::Seq: {
      int n = r_.uni(0, 4);
      interp::Values xs;
      for (int k = 0; k < n; ++k)
        xs.push_back(interp::Value::tensor(payload()));
      desc += "<" + S(n) + ">";
      fs.push_back(interp::Value::list(std::move(xs)));
      break;
    }
    default:
      break;
    }
    if (c.word)
      fs.push_back(interp::Value::tensor(Tensor::scalar_i32(r_.uni(0, V_ - 1))));
    if (c.payload)
      fs.push_back(interp::Value::tensor(payload()));
    if (c.num) {
      int n = r_.uni(0, 4);
      desc += "#" + S(n);
      fs.push_back(interp::Value::integer(n));
    }
    if (c.label)
      fs.push_back(interp::Value::tensor(Tensor::scalar_i32(r_.uni(0, C_ - 1))));
    return interp::Value::adt(static_cast<int32_t>(ci), std::move(fs));
  }

  Tensor payload() {
    std::vector<float> v(static_cast<size_t>(K_));
    for (auto& x : v)
      x = r_.real(-1.0f, 1.0f);
    return Tensor::from_f32(Shape{static_cast<int64_t>(K_)}, v);
  }
};

} // namespace detail

/// The program and batch of one seed (deterministic on every machine).
inline RandomProgram generate(uint64_t seed, Options opt = {}) {
  detail::Generator g(seed, opt);
  RandomProgram p;
  p.source = g.run();
  p.batch = detail::BatchGenerator(g).batch(p.batch_desc);
  return p;
}

} // namespace pejit::testgen
