// A seeded generator of well-typed random pejit programs, for the differential test generic
// path == specialized path (random_programs_test.cpp); its ADT and encoder are in
// random_encoder.h. random_batches.h draws a matching batch for each program, and its
// generate() makes both from one seed.
//
// Every program has the same outline, with random choices everywhere inside it:
//   type T = random constructors with 0, 1 or 2 children (and, by chance, a List[T] child or a
//            List[f32[K]] sequence), Int fields, i32[] word ids (through take(emb, w)), f32[K]
//            payloads and i32[] labels;
//   params of random small shapes (dims 1..8), created on demand by the expression generator;
//   utility functions u0..uk: tensor-only (templates), random signatures (vectors, i32[], a
//            static Int or Bool), random bodies that may call earlier ones (templates in
//            templates), use closures, splits and destructuring lets, constants, `if` on a
//            static Int, and by chance a self-recursive one on a static Int;
//   per constructor a template (leaf or cell) and a generic encoder enc(t: T, d: Int) recursing
//            over the tree with a static depth counter, rose children through map/fold/
//            sum_list/length, sequences through `h :: t` recursion, fold or map + sum_list
//            (and append);
//   heads: cross_entropy on labels, or a bounded positive scalar (so losses do not cancel);
//   entry loss(batch: List[T]) -> f32[]: sum_list(map(...)), fold, or a recursion over the
//            list, with closures capturing tensors and Ints.
// Values stay bounded (tanh/sigmoid around matmuls, exp only of bounded values, log and div
// only of values >= 0.5), and relu is never used, so the two paths agree within the
// invariant's tolerances unless there is a bug.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace pejit::testgen {

struct Options {
  /// Let symbolic sums (`a + b` of residual tensors, sum_list) outside templates flow into a
  /// template call (a SumN instance feeding a template).
  bool sums_into_templates = true;
};

namespace detail {

class Rng {
public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 0x1234567ull) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [lo, hi].
  int uni(int lo, int hi) {
    return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool chance(double p) { return static_cast<double>(next() % 1000000) / 1e6 < p; }
  float real(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(next() % 1000000) / 1e6f;
  }
  /// An index drawn by weight.
  size_t pick(const std::vector<int>& w) {
    int total = 0;
    for (int x : w)
      total += x;
    int r = uni(0, total - 1);
    for (size_t i = 0; i < w.size(); ++i) {
      if (r < w[i])
        return i;
      r -= w[i];
    }
    return w.size() - 1;
  }

  /// A uniformly chosen element of `xs` (not empty).
  template <class T> const T& one(const std::vector<T>& xs) {
    return xs[static_cast<size_t>(uni(0, static_cast<int>(xs.size()) - 1))];
  }

private:
  uint64_t s_;
};

inline std::string S(int v) {
  return std::to_string(v);
}

struct Var {
  std::string name;
  int n; ///< vector size; -1: a scalar f32[]
};

struct Env {
  std::vector<Var> vars;
  std::vector<std::string> words;  ///< i32[] word ids (< V)
  std::vector<std::string> labels; ///< i32[] labels (< C)
  std::vector<std::string> ints;   ///< static Int names (small, >= 0)
  std::vector<std::string> bools;  ///< static Bool names
};

/// A callable template: vector params, optional i32[] word param, optional Int and Bool.
struct Helper {
  std::string name;
  std::vector<int> args; ///< vector sizes
  bool word = false, has_int = false, has_bool = false;
  int ret;           ///< vector size of the result
  bool pair = false; ///< returns (f32[ret], f32[])
};

enum class Kind { Leaf, Unary, Binary, Rose, Seq };

struct Ctor {
  std::string name;
  Kind kind;
  bool word = false, payload = false, num = false, label = false;
};

class BatchGenerator; // random_batches.h

class Generator {
public:
  Generator(uint64_t seed, Options opt) : r_(seed), opt_(opt) {}

  /// The program's source; a BatchGenerator on this generator then draws a batch for it.
  std::string run() {
    H_ = r_.uni(1, 8);
    E_ = r_.uni(1, 8);
    K_ = r_.uni(1, 8);
    C_ = r_.uni(2, 6);
    V_ = r_.uni(3, 9);
    make_ctors();

    std::string fns;
    int nutil = r_.uni(0, 4);
    for (int i = 0; i < nutil; ++i)
      fns += utility(i);
    if (r_.chance(0.4))
      fns += repeat_fn();
    fns += heads();
    std::string enc = encoder(); // also emits the per-constructor templates into pre_
    std::string entry = entry_fn();

    std::string src = "// random program\n";
    src += adt_decl();
    src += "dim V = " + S(V_) + "\n";
    for (const auto& [name, decl] : params_)
      src += decl;
    src += fns + pre_ + enc + entry;
    return src;
  }

private:
  friend class BatchGenerator; // continues r_ and reads the constructors and sizes

  Rng r_;
  Options opt_;
  int H_ = 4, E_ = 4, K_ = 4, C_ = 3, V_ = 5;
  std::vector<Ctor> ctors_;
  std::map<std::string, std::string> params_; ///< name -> declaration (sorted by name)
  std::map<std::vector<int>, std::vector<std::string>> by_shape_;
  std::vector<Helper> helpers_;
  std::string pre_; ///< templates of the constructors, emitted before the encoder
  bool has_rep_ = false;
  int rep_n_ = 0;
  bool emb_used_ = false;
  int fresh_ = 0;

  std::string fresh(const std::string& base) { return "q" + base + S(fresh_++); }

  // ---------------------------------------------------------------- parameters
  std::string param(std::vector<int> dims) {
    auto& pool = by_shape_[dims];
    if (!pool.empty() && r_.chance(0.6))
      return pool[static_cast<size_t>(r_.uni(0, static_cast<int>(pool.size()) - 1))];
    std::string name = "p" + S(static_cast<int>(params_.size()));
    std::string ty = "f32[";
    for (size_t i = 0; i < dims.size(); ++i)
      ty += (i ? ", " : "") + S(dims[i]);
    ty += "]";
    static const char* inits[] = {"normal(0.0, 0.5)", "xavier", "uniform(-0.6, 0.6)",
                                  "normal(0.1, 0.3)", "zeros"};
    int k = r_.uni(0, dims.size() == 1 ? 4 : 3);
    if (dims.empty() && k == 1)
      k = 0;
    params_[name] = "param " + name + " : " + ty + " = " + inits[k] + "\n";
    pool.push_back(name);
    return name;
  }
  std::string emb() {
    if (!emb_used_) {
      params_["emb"] = "param emb : f32[V, " + S(E_) + "] = normal(0.0, 0.5)\n";
      emb_used_ = true;
    }
    return "emb";
  }

  // ---------------------------------------------------------------- expressions
  static std::vector<const Var*> vars_of(const Env& env, int n) {
    std::vector<const Var*> out;
    for (const auto& v : env.vars)
      if (v.n == n)
        out.push_back(&v);
    return out;
  }
  template <class T> const T& one(const std::vector<T>& xs) { return r_.one(xs); }

  std::string lit() {
    static const char* ls[] = {"0.5", "2.0", "-1.5", "0.25", "1.0", "-0.75", "3.0"};
    return ls[r_.uni(0, 6)];
  }

  std::string leaf_vec(int n, const Env& env) {
    auto same = vars_of(env, n);
    std::vector<const Var*> vecs;
    for (const auto& v : env.vars)
      if (v.n > 0)
        vecs.push_back(&v);
    std::vector<int> w = {same.empty() ? 0 : 6, vecs.empty() ? 0 : 3, 1,
                          (!env.words.empty() && n == E_) ? 2 : 0, 1};
    switch (r_.pick(w)) {
    case 0:
      return one(same)->name;
    case 1: {
      const Var* v = one(vecs);
      return "(" + v->name + " @ " + param({v->n, n}) + ")";
    }
    case 2:
      return param({n});
    case 3:
      return "take(" + emb() + ", " + one(env.words) + ")";
    default:
      return r_.chance(0.5) ? "full(" + lit() + ", " + S(n) + ")"
                            : "(ones(" + S(n) + ") * " + param({}) + ")";
    }
  }

  std::string vec(int n, int depth, const Env& env) {
    if (depth <= 0 || r_.chance(0.2))
      return leaf_vec(n, env);
    int d = depth - 1;
    std::vector<const Helper*> hs;
    for (const auto& h : helpers_)
      if (h.ret == n && (!h.word || !env.words.empty()))
        hs.push_back(&h);
    std::vector<int> w = {/*unary*/ 5,
                          /*binary*/ 5,
                          /*scale*/ 2,
                          /*matmul*/ 5,
                          /*concat*/ n >= 2 ? 2 : 0,
                          /*slice*/ 2,
                          /*split*/ 2,
                          /*div*/ 1,
                          /*helper*/ hs.empty() ? 0 : 4,
                          /*consts*/ 1,
                          /*matrix*/ 1,
                          /*closure*/ 1,
                          /*if*/ env.ints.empty() && env.bools.empty() ? 0 : 2,
                          /*destructure*/ 1,
                          /*list*/ 1,
                          /*repeat*/ has_rep_ && n == rep_n_ ? 1 : 0,
                          /*constant if*/ 1};
    switch (r_.pick(w)) {
    case 0: {
      static const char* fs[] = {"tanh(",     "sigmoid(", "-(",
                                 "exp(tanh(", "softmax(", "log_softmax("};
      int k = r_.uni(0, 5);
      std::string in = vec(n, d, env);
      return std::string(fs[k]) + in + (k == 3 ? "))" : ")");
    }
    case 1: {
      static const char* ops[] = {" + ", " - ", " * "};
      return "(" + vec(n, d, env) + ops[r_.uni(0, 2)] + vec(n, d, env) + ")";
    }
    case 2:
      if (r_.chance(0.5))
        return "(" + scal(d, env) + " * " + vec(n, d, env) + ")";
      return "(" + vec(n, d, env) + " * " + lit() + ")";
    case 3: {
      int m = r_.uni(1, 8);
      std::string e = "(" + vec(m, d, env) + " @ " + param({m, n}) + ")";
      if (r_.chance(0.5))
        e = "(" + e + " + " + param({n}) + ")";
      return r_.chance(0.5) ? "tanh(" + e + ")" : e;
    }
    case 4: {
      int p = r_.uni(1, n - 1);
      if (n >= 3 && r_.chance(0.3)) {
        int q = r_.uni(1, n - p - 1 >= 1 ? n - p - 1 : 1);
        if (p + q < n)
          return "concat(" + vec(p, d, env) + ", " + vec(q, d, env) + ", " +
                 vec(n - p - q, d, env) + ")";
      }
      return "concat(" + vec(p, d, env) + ", " + vec(n - p, d, env) + ")";
    }
    case 5: {
      int m = n + r_.uni(1, 4);
      int s = r_.uni(0, m - n);
      return "slice(" + vec(m, d, env) + ", " + S(s) + ", " + S(s + n) + ")";
    }
    case 6: {
      int k = r_.uni(2, 3);
      return "split" + S(k) + "(" + vec(k * n, d, env) + ")." + S(r_.uni(0, k - 1));
    }
    case 7:
      return "(" + vec(n, d, env) + " / (sigmoid(" + vec(n, d, env) + ") + 0.5))";
    case 8:
      return call(*one(hs), d, env);
    case 9:
      switch (r_.uni(0, 2)) {
      case 0:
        return "(" + vec(n, d, env) + " + zeros(" + S(n) + "))";
      case 1:
        return "(full(" + lit() + ", " + S(n) + ") * " + vec(n, d, env) + ")";
      default:
        return "(" + vec(n, d, env) + " * (ones(" + S(n) + ") + ones(" + S(n) + ")))";
      }
    case 10: {
      int a = r_.uni(1, 3), b = r_.uni(1, 3);
      return "sum(reshape(" + vec(a * b, d, env) + ", " + S(a) + ", " + S(b) + ") @ " +
             param({b, n}) + ", 0)";
    }
    case 11: {
      // A closure capturing what is in scope (tensors, static Ints), applied twice.
      std::string v = fresh("v"), f = fresh("f");
      Env inner = env;
      inner.vars.push_back({v, n});
      std::string body = vec(n, d, inner);
      return "{ let " + f + " = fn (" + v + ": f32[" + S(n) + "]) => " + body + "; " + f + "(" +
             (r_.chance(0.5) ? f + "(" + vec(n, d, env) + ")" : vec(n, d, env)) + ") }";
    }
    case 12: {
      std::string c;
      if (!env.ints.empty() && (env.bools.empty() || r_.chance(0.6)))
        c = one(env.ints) + (r_.chance(0.5) ? " > " + S(r_.uni(0, 2)) : " % 2 == 0");
      else
        c = (r_.chance(0.3) ? "!" : "") + one(env.bools);
      return "(if " + c + " { " + vec(n, d, env) + " } else { " + vec(n, d, env) + " })";
    }
    case 13: {
      std::string a = fresh("a"), b = fresh("b");
      Env inner = env;
      inner.vars.push_back({a, n});
      inner.vars.push_back({b, n});
      return "{ let (" + a + ", " + b + ") = split2(" + vec(2 * n, d, env) + "); " +
             vec(n, d, inner) + " }";
    }
    case 14: {
      std::string x = fresh("x");
      Env inner = env;
      inner.vars.push_back({x, n});
      return "sum_list(map(fn " + x + " => " + vec(n, d, inner) + ", [" + vec(n, d, env) + ", " +
             vec(n, d, env) + "]))";
    }
    case 15:
      return "rep(" + vec(n, d, env) + ", " + S(r_.uni(0, 3)) + ")";
    default:
      // Control flow on a known constant tensor: folds on both paths.
      return "(if to_bool(sum(ones(2)) > " + lit() + ") { " + vec(n, d, env) + " } else { " +
             vec(n, d, env) + " })";
    }
  }

  std::string scal(int depth, const Env& env) {
    std::vector<const Var*> ss = vars_of(env, -1);
    if (depth <= 0 || r_.chance(0.2)) {
      std::vector<int> w = {ss.empty() ? 0 : 3, 2, 1, 1};
      switch (r_.pick(w)) {
      case 0:
        return one(ss)->name;
      case 1:
        return "sum(" + leaf_vec(r_.uni(1, 8), env) + ")";
      case 2:
        return param({});
      default:
        return lit();
      }
    }
    int d = depth - 1;
    int m = r_.uni(1, 8);
    std::vector<int> w = {3, 2, 2, 2, 2, 2, env.labels.empty() ? 0 : 2, 1, 1};
    switch (r_.pick(w)) {
    case 0:
      return "sum(" + vec(m, d, env) + ")";
    case 1:
      return "mean(" + vec(m, d, env) + ")";
    case 2:
      return "(" + vec(m, d, env) + " @ " + vec(m, d, env) + ")";
    case 3:
      return "tanh(" + scal(d, env) + ")";
    case 4:
      return "(" + scal(d, env) + " * " + scal(d, env) + ")";
    case 5:
      return "(" + scal(d, env) + (r_.chance(0.5) ? " + " : " - ") + scal(d, env) + ")";
    case 6:
      return "cross_entropy(" + vec(C_, d, env) + ", " + one(env.labels) + ")";
    case 7:
      return "sum(softmax(" + vec(m, d, env) + ") * " + vec(m, d, env) + ")";
    default:
      return "log(exp(tanh(" + scal(d, env) + ")) + 1.0)";
    }
  }

  /// A call of a helper with generated arguments (statics from the env or literals).
  std::string call(const Helper& h, int depth, const Env& env) {
    std::string s = h.name + "(";
    bool first = true;
    auto sep = [&] {
      if (!first)
        s += ", ";
      first = false;
    };
    for (int n : h.args) {
      sep();
      s += vec(n, depth, env);
    }
    if (h.word) {
      sep();
      s += one(env.words);
    }
    if (h.has_int) {
      sep();
      s += !env.ints.empty() && r_.chance(0.6)
               ? "(" + one(env.ints) + " + " + S(r_.uni(0, 1)) + ") % 4"
               : S(r_.uni(0, 3));
    }
    if (h.has_bool) {
      sep();
      s += !env.bools.empty() && r_.chance(0.5) ? one(env.bools)
                                                : (r_.chance(0.5) ? "true" : "false");
    }
    s += ")";
    if (h.pair)
      s += ".0";
    return s;
  }

  // ---------------------------------------------------------------- functions
  /// A tensor-only function with a random body; registered as a helper after its definition.
  std::string define(const std::string& name, const std::vector<std::pair<std::string, int>>& vargs,
                     const std::string& word, const std::string& lbl, bool has_int, bool has_bool,
                     int ret, bool pair, int depth, bool register_it) {
    Env env;
    std::string sig = "fn " + name + "(";
    bool first = true;
    auto sep = [&] {
      if (!first)
        sig += ", ";
      first = false;
    };
    Helper h{name, {}, !word.empty(), has_int, has_bool, ret, pair};
    for (const auto& [n, sz] : vargs) {
      sep();
      sig += n + ": f32[" + S(sz) + "]";
      env.vars.push_back({n, sz});
      h.args.push_back(sz);
    }
    if (!word.empty()) {
      sep();
      sig += word + ": i32[]";
      env.words.push_back(word);
    }
    if (!lbl.empty()) {
      sep();
      sig += lbl + ": i32[]";
      env.labels.push_back(lbl);
    }
    if (has_int) {
      sep();
      sig += "n: Int";
      env.ints.push_back("n");
    }
    if (has_bool) {
      sep();
      sig += "b: Bool";
      env.bools.push_back("b");
    }
    sig += ") -> " + std::string(pair ? "(f32[" + S(ret) + "], f32[])" : "f32[" + S(ret) + "]");
    std::string body;
    int lets = r_.uni(0, 2);
    for (int i = 0; i < lets; ++i) {
      std::string t = fresh("t");
      if (r_.chance(0.25)) {
        body += "  let " + t + " = " + scal(depth - 1, env) + ";\n";
        env.vars.push_back({t, -1});
      } else {
        int m = r_.uni(1, 8);
        body += "  let " + t + " = " + vec(m, depth - 1, env) + ";\n";
        env.vars.push_back({t, m});
      }
    }
    std::string res = vec(ret, depth, env);
    if (pair)
      res = "(" + res + ", " + positive(depth - 1, env) + ")";
    std::string out = sig + " {\n" + body + "  " + res + "\n}\n";
    if (register_it)
      helpers_.push_back(h);
    return out;
  }

  /// A bounded positive scalar depending on the env.
  std::string positive(int depth, const Env& env) {
    if (!env.labels.empty() && r_.chance(0.6))
      return "cross_entropy(" + vec(C_, depth, env) + ", " + one(env.labels) + ")";
    std::string s = scal(depth, env);
    switch (r_.uni(0, 2)) {
    case 0:
      return "log(exp(tanh(" + s + ")) + 1.0)";
    case 1:
      return "(sigmoid(" + s + ") * 2.0)";
    default:
      return "(tanh(" + s + ") + 1.5)";
    }
  }

  std::string utility(int i) {
    int na = r_.uni(1, 3);
    std::vector<std::pair<std::string, int>> vargs;
    for (int k = 0; k < na; ++k)
      vargs.push_back({"x" + S(k), r_.uni(1, 8)});
    bool word = r_.chance(0.2), has_int = r_.chance(0.35), has_bool = r_.chance(0.15);
    return define("u" + S(i), vargs, word ? "w" : "", "", has_int, has_bool, r_.uni(1, 8),
                  r_.chance(0.2), 3, true);
  }

  /// A template that calls itself on a smaller static Int.
  std::string repeat_fn() {
    has_rep_ = true;
    rep_n_ = r_.uni(1, 8);
    std::string P = param({rep_n_, rep_n_});
    std::string n = S(rep_n_);
    return "fn rep(x: f32[" + n + "], k: Int) -> f32[" + n +
           "] {\n  if k > 0 { tanh(rep(x, k - 1) @ " + P + ") + x * 0.5 } else { x }\n}\n";
  }

  std::string heads() {
    std::string s;
    Env e;
    e.vars.push_back({"h", H_});
    e.labels.push_back("y");
    s += "fn head(h: f32[" + S(H_) + "], y: i32[]) -> f32[] {\n  ";
    switch (r_.uni(0, 2)) {
    case 0:
      s += "cross_entropy(h @ " + param({H_, C_}) + " + " + param({C_}) + ", y)";
      break;
    case 1:
      s += "cross_entropy(" + vec(C_, 2, e) + " + " + param({C_}) + ", y)";
      break;
    default:
      s += "let z = tanh(h @ " + param({H_, C_}) + ");\n  cross_entropy(" +
           vec(C_, 1, with(e, "z", C_)) + ", y) + 0.1 * " + positive(1, e);
    }
    s += "\n}\n";
    Env f;
    f.vars.push_back({"h", H_});
    s += "fn shead(h: f32[" + S(H_) + "]) -> f32[] {\n  let s = sum(h * " + param({H_}) + ") + " +
         scal(1, f) + ";\n  ";
    switch (r_.uni(0, 2)) {
    case 0:
      s += "log(exp(tanh(s)) + 1.0)";
      break;
    case 1:
      s += "sigmoid(s) * 2.0";
      break;
    default:
      s += "(tanh(s) + 1.5) * (tanh(s) + 1.5)";
    }
    s += "\n}\n";
    return s;
  }

  static Env with(Env e, const std::string& n, int sz) {
    e.vars.push_back({n, sz});
    return e;
  }

  // ---------------------------------------------------------------- the ADT and its encoder
  // (random_encoder.h)
  void make_ctors();
  std::string adt_decl();
  /// The per-node loss term for hidden `h`.
  std::string node_term(const Ctor& c, const std::string& h);
  std::string encoder();
  std::string entry_fn();
};

} // namespace detail

} // namespace pejit::testgen

#include "tests/specializer/random_encoder.h" // the members declared above
