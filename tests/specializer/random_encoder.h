// The random program generator's ADT and its encoder (random_programs.h's Generator): the
// constructors of the program's tree type, its declaration, the recursive encoder over it and
// the `loss` entry. Included at the end of random_programs.h; not on its own.
#pragma once

#include "tests/specializer/random_programs.h"

namespace pejit::testgen::detail {

inline void Generator::make_ctors() {
  int n = r_.uni(2, 4);
  bool has_leaf = false;
  for (int i = 0; i < n; ++i) {
    Ctor c;
    c.name = "C" + S(i);
    int k = r_.pick({4, 3, 4, 1, 1});
    c.kind = static_cast<Kind>(k);
    if (i == n - 1 && !has_leaf)
      c.kind = r_.chance(0.8) ? Kind::Leaf : Kind::Seq;
    if (c.kind == Kind::Leaf || c.kind == Kind::Seq)
      has_leaf = true;
    c.word = r_.chance(c.kind == Kind::Leaf ? 0.6 : 0.2);
    c.payload = r_.chance(0.4) || (c.kind == Kind::Leaf && !c.word);
    c.num = r_.chance(0.4);
    c.label = r_.chance(0.6);
    ctors_.push_back(c);
  }
}

inline std::string Generator::adt_decl() {
  std::string s = "type T = ";
  for (size_t i = 0; i < ctors_.size(); ++i) {
    const Ctor& c = ctors_[i];
    std::vector<std::string> fs;
    switch (c.kind) {
    case Kind::Unary:
      fs.push_back("c: T");
      break;
    case Kind::Binary:
      fs.push_back("l: T");
      fs.push_back("r: T");
      break;
    case Kind::Rose:
      fs.push_back("kids: List[T]");
      break;
    case Kind::Seq:
      fs.push_back("xs: List[f32[" + S(K_) + "]]");
      break;
    default:
      break;
    }
    if (c.word)
      fs.push_back("w: i32[]");
    if (c.payload)
      fs.push_back("x: f32[" + S(K_) + "]");
    if (c.num)
      fs.push_back("n: Int");
    if (c.label)
      fs.push_back("y: i32[]");
    s += (i ? "\n       | " : "") + c.name;
    if (!fs.empty()) {
      s += "(";
      for (size_t k = 0; k < fs.size(); ++k)
        s += (k ? ", " : "") + fs[k];
      s += ")";
    }
  }
  return s + "\n";
}

/// The per-node loss term for hidden `h`.
inline std::string Generator::node_term(const Ctor& c, const std::string& h) {
  if (c.label)
    return "head(" + h + ", y)";
  return "shead(" + h + ")";
}

inline std::string Generator::encoder() {
  std::string s = "fn enc(t: T, d: Int) -> (f32[" + S(H_) + "], f32[]) {\n  match t {\n";
  std::string seq_fns;
  for (size_t i = 0; i < ctors_.size(); ++i) {
    const Ctor& c = ctors_[i];
    std::vector<std::string> binders;
    switch (c.kind) {
    case Kind::Unary:
      binders.push_back("c");
      break;
    case Kind::Binary:
      binders.push_back("l");
      binders.push_back("r");
      break;
    case Kind::Rose:
      binders.push_back("kids");
      break;
    case Kind::Seq:
      binders.push_back("xs");
      break;
    default:
      break;
    }
    if (c.word)
      binders.push_back("w");
    if (c.payload)
      binders.push_back("x");
    if (c.num)
      binders.push_back("n");
    if (c.label)
      binders.push_back("y");
    s += "    " + c.name;
    if (!binders.empty()) {
      s += "(";
      for (size_t k = 0; k < binders.size(); ++k)
        s += (k ? ", " : "") + binders[k];
      s += ")";
    }
    s += " => {\n";
    std::vector<std::string> losses;
    std::vector<std::pair<std::string, int>> inputs; // template vector args: (expr, size)
    switch (c.kind) {
    case Kind::Unary:
      s += "      let (hc, lc) = enc(c, d + 1);\n";
      inputs.push_back({"hc", H_});
      losses.push_back("lc");
      break;
    case Kind::Binary:
      if (r_.chance(0.5)) {
        s += "      let (hl, ll) = enc(l, d + 1);\n      let (hr, lr) = enc(r, d + 1);\n";
      } else {
        s += "      let el = enc(l, d + 1);\n      let er = enc(r, d + 1);\n"
             "      let hl = el.0;\n      let ll = el.1;\n      let hr = er.0;\n      let lr = "
             "er.1;\n";
      }
      if (opt_.sums_into_templates && r_.chance(0.3)) {
        inputs.push_back({"(hl + hr)", H_});
      } else {
        inputs.push_back({"hl", H_});
        inputs.push_back({"hr", H_});
      }
      losses.push_back("ll");
      losses.push_back("lr");
      break;
    case Kind::Rose: {
      std::string comb = "comb" + S(static_cast<int>(i));
      pre_ += define(comb, {{"acc", H_}, {"v", H_}}, "", "", false, false, H_, false, 2, false);
      std::string init = r_.chance(0.5) ? "zeros(" + S(H_) + ")" : param({H_});
      s += "      let rs = map(fn k => enc(k, d + 1), kids);\n";
      s += "      let hs = map(fn e => e.0, rs);\n";
      s += "      let agg = fold(fn (acc, v) => " + comb + "(acc, v), " + init + ", hs);\n";
      s += "      let nk = length(kids);\n";
      inputs.push_back({"agg", H_});
      losses.push_back("sum_list(map(fn e => e.1, rs))");
      break;
    }
    case Kind::Seq: {
      std::string step = "step" + S(static_cast<int>(i));
      pre_ += define(step, {{"x", K_}, {"h", H_}}, "", "", false, false, H_, false, 2, false);
      std::string init = r_.chance(0.5) ? "zeros(" + S(H_) + ")" : param({H_});
      std::string xs = r_.chance(0.25) ? "append(xs, xs)" : "xs";
      switch (r_.uni(0, opt_.sums_into_templates ? 2 : 1)) {
      case 0: {
        std::string run = "run" + S(static_cast<int>(i));
        seq_fns += "fn " + run + "(xs: List[f32[" + S(K_) + "]], h: f32[" + S(H_) + "]) -> f32[" +
                   S(H_) + "] {\n  match xs {\n    [] => h\n    x :: rest => " + run + "(rest, " +
                   step + "(x, h))\n  }\n}\n";
        s += "      let hs = " + run + "(" + xs + ", " + init + ");\n";
        break;
      }
      case 1:
        s +=
            "      let hs = fold(fn (acc, e) => " + step + "(e, acc), " + init + ", " + xs + ");\n";
        break;
      default:
        s += "      let hs = sum_list(map(fn e => " + step + "(e, " + init + "), " + xs + "));\n";
      }
      s += "      let nk = length(xs);\n";
      inputs.push_back({"hs", H_});
      break;
    }
    default:
      break;
    }
    // The constructor's own template.
    bool word_in = false;
    if (c.word) {
      if (r_.chance(0.5)) {
        s += "      let ew = take(" + emb() + ", w);\n";
        inputs.push_back({"ew", E_});
      } else {
        word_in = true;
      }
    }
    if (c.payload)
      inputs.push_back({"x", K_});
    bool int_in = c.num || c.kind != Kind::Leaf || r_.chance(0.3);
    bool bool_in = r_.chance(0.2);
    std::string tname = "node" + S(static_cast<int>(i));
    std::vector<std::pair<std::string, int>> targs;
    for (size_t k = 0; k < inputs.size(); ++k)
      targs.push_back({"a" + S(static_cast<int>(k)), inputs[k].second});
    if (targs.empty()) {
      // A leaf with only a word passed in: give it a parameter vector as well.
      inputs.push_back({param({H_}), H_});
      targs.push_back({"a0", H_});
    }
    bool pair = r_.chance(0.3);
    pre_ += define(tname, targs, word_in ? "wd" : "", "", int_in, bool_in, H_, pair, 3, false);
    std::string callx = tname + "(";
    for (size_t k = 0; k < inputs.size(); ++k)
      callx += (k ? ", " : "") + inputs[k].first;
    if (word_in)
      callx += ", w";
    if (int_in) {
      std::vector<std::string> opts = {"d % 3", "d", "2"};
      if (c.num)
        opts.push_back("n"), opts.push_back("n % 2");
      if (c.kind == Kind::Rose || c.kind == Kind::Seq)
        opts.push_back("nk");
      callx += ", " + one(opts);
    }
    if (bool_in)
      callx += std::string(", ") + (c.num ? "n > 1" : (r_.chance(0.5) ? "d % 2 == 0" : "true"));
    callx += ")";
    if (pair) {
      s += "      let (h, lh) = " + callx + ";\n";
      losses.push_back("lh");
    } else {
      s += "      let h = " + callx + ";\n";
    }
    losses.push_back(node_term(c, "h"));
    std::string l = losses[0];
    for (size_t k = 1; k < losses.size(); ++k)
      l += " + " + losses[k];
    s += "      (h, " + l + ")\n    }\n";
  }
  s += "  }\n}\n";
  return seq_fns + s;
}

inline std::string Generator::entry_fn() {
  std::string s = "entry loss(batch: List[T]) -> f32[] {\n";
  std::string d0 = r_.chance(0.5) ? "0" : "length(batch) % 2";
  switch (r_.uni(0, 3)) {
  case 0:
    s += "  sum_list(map(fn t => enc(t, " + d0 + ").1, batch))\n";
    break;
  case 1:
    s += "  fold(fn (acc, t) => acc + enc(t, " + d0 + ").1, 0.0, batch)\n";
    break;
  case 2: {
    // A closure capturing a tensor and an Int.
    std::string g = param({H_});
    s += "  let g = tanh(" + g + ");\n  let k = " + d0 + ";\n";
    s += "  let f = fn (t: T) => {\n    let (h, l) = enc(t, k);\n    l + shead(h * g)\n  };\n";
    s += r_.chance(0.5) ? "  sum_list(append(map(f, batch), [0.5 * sum(g)]))\n"
                        : "  sum_list(map(f, batch)) + 0.01 * sum(" + g + " * " + g + ")\n";
    break;
  }
  default:
    pre_ += "fn total(ts: List[T], d: Int) -> f32[] {\n  match ts {\n    [] => 0.0\n"
            "    t :: rest => enc(t, d).1 + total(rest, d)\n  }\n}\n";
    s += "  total(batch, " + d0 + ")\n";
  }
  return s + "}\n";
}

} // namespace pejit::testgen::detail
