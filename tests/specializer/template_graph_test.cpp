// Template graphs: the traced, differentiated and optimized body of each TreeLSTM template
// agrees with the generic path (forward results, and the gradient of every argument and
// parameter under random seeds); fusion partitions the graph into few, deterministic kernels;
// folding and dead-code elimination do what a test can see.
#include "runtime/data/synthetic.h"
#include "runtime/train/encode.h"
#include "specializer/partial_eval.h"
#include "specializer/template_graph.h"
#include "src/graph/boost_adaptor.h"
#include "src/graph/evaluate.h"
#include "src/interp/interpreter.h"
#include "src/types/check.h"
#include "src/util/check.h"
#include "tests/support/compare.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

namespace tests_specializer_template_graph_test {

using namespace pejit;
using graph::NodeId;

namespace {

const std::string kTreeLstm = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Model {
  std::shared_ptr<ir::Module> m = std::make_shared<ir::Module>();
  interp::DimBindings dims;
  interp::Params params;
  Model(const std::string& src, interp::DimBindings over = {}) {
    Diagnostics d;
    auto r = types::add_source(*m, src, "test.pe", d);
    REQUIRE_MESSAGE(r.ok, d.render());
    dims = interp::bind_dims(*m, over);
    params = interp::init_params(*m, dims, 5);
  }
};

struct TreeLstm {
  data::Vocab vocab;
  std::vector<data::ParseTree> trees;
  std::unique_ptr<Model> md;
  specializer::TemplateTable tt;
  TreeLstm() {
    trees = data::gen_sst(4, 11, data::Shape::Sst, vocab);
    md = std::make_unique<Model>(read_file(kTreeLstm),
                                 interp::DimBindings{{"V", static_cast<int64_t>(vocab.size())}});
    runtime::TreeEncoder enc(*md->m, "Tree");
    interp::Values xs;
    for (const auto& t : trees)
      xs.push_back(enc.encode(t));
    auto pe = specializer::partially_evaluate(*md->m, md->dims, "loss",
                                              interp::Value::list(std::move(xs)), tt);
    REQUIRE_MESSAGE(pe.ok, pe.where.str() << ": " << pe.reason);
  }
  const specializer::Template& get(const std::string& name) const {
    for (size_t i = 0; i < tt.size(); ++i)
      if (tt.at(static_cast<int32_t>(i)).name == name)
        return tt.at(static_cast<int32_t>(i));
    FAIL("no template " << name);
    return tt.at(0);
  }
};

Tensor random_tensor(const specializer::TensorSig& s, std::mt19937& rng) {
  Shape sh{std::span<const int64_t>(s.dims)};
  Tensor t = Tensor::zeros(s.dtype, sh);
  if (s.dtype == DType::F32) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.f32()[i] = u(rng);
  } else {
    std::uniform_int_distribution<int32_t> u(0, 4); // a valid label and word id
    for (int64_t i = 0; i < t.numel(); ++i)
      t.i32()[i] = u(rng);
  }
  return t;
}

std::string dims_text(std::span<const int64_t> d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i)
    s += (i ? ", " : "") + std::to_string(d[i]);
  return s;
}

// The generic path's answer for a template: results by calling the function (or the op),
// gradients of every argument and parameter through an added entry
//   entry tg_loss(d: i32[]) -> f32[] { let r = f(TGA0, ..., d); sum(r.0 * TGS0) + ... }
// whose arguments and seeds are parameters, run by the interpreter's tape AD.
struct Reference {
  std::vector<Tensor> results, arg_grads;
  std::vector<Tensor> param_grads; ///< by module parameter of the original module
};

Reference reference(const std::string& base_src, const Model& md, const specializer::Template& t,
                    const std::vector<Tensor>& args, const std::vector<Tensor>& seeds) {
  Reference ref;
  interp::Interpreter in(md.m, md.dims);
  std::string call;
  std::vector<std::string> actuals;
  Tensor int_arg = Tensor::scalar_i32(0);
  size_t a = 0;
  if (t.kind == specializer::Template::Kind::Op) {
    std::vector<Tensor> ins(args.begin(), args.end()), outs;
    ops::op_def(t.op).eval(ins, t.attr, outs);
    ref.results = outs;
    call = ops::op_name(t.op);
    for (size_t i = 0; i < args.size(); ++i)
      actuals.push_back(args[i].dtype() == DType::F32 ? "TGA" + std::to_string(i) : "d");
  } else {
    const ir::FnDecl& f = *md.m->fns()[static_cast<size_t>(t.fn)];
    interp::Values vs;
    for (const auto& x : args)
      vs.push_back(interp::Value::tensor(x));
    interp::Value r = in.call_function(t.fn, vs, md.params);
    if (r.kind() == interp::Value::Kind::Tensor)
      ref.results.push_back(r.as_tensor());
    else
      for (const auto& x : r.items())
        ref.results.push_back(x.as_tensor());
    call = f.name;
    for (const auto& p : f.params) {
      REQUIRE(p.type->kind == ir::TypeKind::Tensor);
      actuals.push_back(args[a].dtype() == DType::F32 ? "TGA" + std::to_string(a) : "d");
      ++a;
    }
  }
  for (const auto& x : args)
    if (x.dtype() == DType::I32)
      int_arg = x;
  std::string extra;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].dtype() == DType::F32)
      extra +=
          "param TGA" + std::to_string(i) + " : f32[" + dims_text(t.args[i].dims) + "] = zeros\n";
  std::string loss;
  for (size_t r = 0; r < t.results.size(); ++r) {
    extra +=
        "param TGS" + std::to_string(r) + " : f32[" + dims_text(t.results[r].dims) + "] = zeros\n";
    std::string v = t.results.size() == 1 ? "r" : "r." + std::to_string(r);
    std::string term = v + " * TGS" + std::to_string(r);
    loss += (r ? " + " : "") + (t.results[r].dims.empty() ? term : "sum(" + term + ")");
  }
  std::string args_text;
  for (size_t i = 0; i < actuals.size(); ++i)
    args_text += (i ? ", " : "") + actuals[i];
  extra += "entry tg_loss(d: i32[]) -> f32[] { let r = " + call + "(" + args_text + "); " + loss +
           " }\n";
  Model gm(base_src + "\n" + extra, md.dims);
  interp::Params p = gm.params.clone();
  for (size_t i = 0; i < md.params.names.size(); ++i)
    p.values[static_cast<size_t>(p.index(md.params.names[i]))] = md.params.values[i];
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].dtype() == DType::F32)
      p.values[static_cast<size_t>(p.index("TGA" + std::to_string(i)))] = args[i];
  for (size_t r = 0; r < seeds.size(); ++r)
    p.values[static_cast<size_t>(p.index("TGS" + std::to_string(r)))] = seeds[r];
  interp::Interpreter gin(gm.m, gm.dims);
  auto g = gin.value_and_grad("tg_loss", {interp::Value::tensor(int_arg)}, p);
  auto dense = [&](const std::string& name) {
    auto i = static_cast<size_t>(p.index(name));
    return g.grads[i].to_dense(p.values[i].shape());
  };
  for (size_t i = 0; i < args.size(); ++i)
    ref.arg_grads.push_back(args[i].dtype() == DType::F32 ? dense("TGA" + std::to_string(i))
                                                          : Tensor());
  for (const auto& name : md.params.names)
    ref.param_grads.push_back(dense(name));
  return ref;
}

// Evaluates the template graph and compares everything with the generic path.
void check_against_generic(const std::string& src, const Model& md, const specializer::Template& t,
                           const specializer::TemplateGraph& tg, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Tensor> args, seeds;
  // An argument the template reads as a parameter (Template::param_args) is that parameter;
  // the reference's gradient of the argument is then the graph's gradient of the parameter.
  auto bound = [&](size_t i) { return i < t.param_args.size() ? t.param_args[i] : -1; };
  for (size_t i = 0; i < t.args.size(); ++i)
    args.push_back(bound(i) >= 0 ? md.params.values[static_cast<size_t>(bound(i))]
                                 : random_tensor(t.args[i], rng));
  for (const auto& s : t.results)
    seeds.push_back(random_tensor(s, rng));
  Reference ref = reference(src, md, t, args, seeds);

  std::vector<NodeId> outs(tg.fwd_outputs.begin(), tg.fwd_outputs.end());
  for (NodeId g : tg.bwd_arg_grads)
    if (g != graph::kNoNode)
      outs.push_back(g);
  outs.insert(outs.end(), tg.bwd_param_grads.begin(), tg.bwd_param_grads.end());
  auto vals = graph::evaluate(tg.g, tg.bind_inputs(args, md.params, seeds), outs);
  size_t k = 0;
  for (size_t r = 0; r < tg.fwd_outputs.size(); ++r)
    test::check_close(vals[k++], ref.results[r], t.name + " result " + std::to_string(r));
  for (size_t i = 0; i < tg.bwd_arg_grads.size(); ++i) {
    if (tg.bwd_arg_grads[i] == graph::kNoNode) {
      CHECK((args[i].dtype() == DType::I32 || bound(i) >= 0));
      continue;
    }
    test::check_close(vals[k++], ref.arg_grads[i], t.name + " d/arg " + std::to_string(i));
  }
  std::vector<bool> covered(md.params.names.size(), false);
  for (size_t p = 0; p < tg.bwd_param_grads.size(); ++p) {
    auto pi = static_cast<size_t>(tg.param_index[p]);
    covered[pi] = true;
    Tensor want = ref.param_grads[pi];
    for (size_t i = 0; i < t.args.size(); ++i)
      if (bound(i) == static_cast<int32_t>(pi)) { // an op template reads no other parameter
        CHECK(test::max_abs(want) == 0.0);
        want = ref.arg_grads[i];
      }
    test::check_close(vals[k++], want, t.name + " d/" + md.params.names[pi]);
  }
  for (size_t pi = 0; pi < covered.size(); ++pi) // what the graph does not read has no gradient
    if (!covered[pi])
      CHECK_MESSAGE(test::max_abs(ref.param_grads[pi]) == 0.0, md.params.names[pi]);
}

size_t count_ops(const graph::Graph& g, ops::OpId id) {
  auto live = graph::live(g);
  size_t c = 0;
  for (size_t i = 0; i < g.size(); ++i)
    c += live[i] && g.nodes()[i].kind == graph::Kind::Op && g.nodes()[i].op() == id;
  return c;
}

bool kernel_has(const specializer::TemplateGraph& tg, const specializer::Kernel& k, ops::OpId id) {
  return std::any_of(k.nodes.begin(), k.nodes.end(), [&](NodeId n) {
    const auto& nd = tg.g.node(n);
    return nd.kind == graph::Kind::Op && nd.op() == id;
  });
}

// Independent of verify_template_graph: every computed live node in exactly one kernel,
// and a kernel reads only leaves, its own earlier nodes and earlier kernels' nodes.
void check_partition(const specializer::TemplateGraph& tg) {
  std::vector<int> where(tg.g.size(), -1);
  int k = 0;
  for (const auto* list : {&tg.fwd_kernels, &tg.bwd_kernels})
    for (const auto& kn : *list) {
      CHECK(std::is_sorted(kn.nodes.begin(), kn.nodes.end()));
      for (NodeId n : kn.nodes) {
        CHECK(where[static_cast<size_t>(n)] == -1);
        where[static_cast<size_t>(n)] = k;
      }
      ++k;
    }
  auto live = graph::live(tg.g);
  for (size_t i = 0; i < tg.g.size(); ++i) {
    const auto& n = tg.g.nodes()[i];
    bool leaf = n.kind == graph::Kind::Input || n.kind == graph::Kind::Const;
    if (!live[i])
      continue;
    CHECK((leaf ? where[i] == -1 : where[i] >= 0));
    for (NodeId o : n.operands) {
      const auto& on = tg.g.node(o);
      if (on.kind == graph::Kind::Input || on.kind == graph::Kind::Const)
        continue;
      CHECK(where[static_cast<size_t>(o)] <= where[i]);
    }
  }
}

std::vector<std::string> keys(const std::vector<specializer::Kernel>& ks, bool full) {
  std::vector<std::string> out;
  for (const auto& k : ks)
    out.push_back(full ? k.key : k.signature);
  return out;
}

} // namespace

TEST_SUITE("specializer") {
  TEST_CASE("template graphs of the TreeLSTM agree with the generic path, forward and backward") {
    TreeLstm tl;
    std::string src = read_file(kTreeLstm);
    for (std::string name : {"leaf", "cell", "node_loss", "op.take"}) {
      CAPTURE(name);
      const specializer::Template& t = tl.get(name);
      for (bool optimize : {false, true}) {
        CAPTURE(optimize);
        specializer::TemplateOptions opt;
        opt.optimize = optimize;
        specializer::TemplateGraph tg =
            specializer::compile_template(*tl.md->m, tl.md->dims, t, opt);
        specializer::verify_template_graph(tg);
        check_partition(tg);
        check_against_generic(src, *tl.md, t, tg, 7);
        if (optimize)
          MESSAGE(name << ": " << tg.fwd_kernels.size() << " fwd + " << tg.bwd_kernels.size()
                       << " bwd kernels\n"
                       << specializer::print_kernels(tg));
      }
    }
  }

  TEST_CASE("the TreeLSTM templates read the parameters they use, and only those") {
    TreeLstm tl;
    auto names = [&](const specializer::TemplateGraph& tg) {
      std::vector<std::string> s;
      for (int p : tg.param_index)
        s.push_back(tl.md->params.names[static_cast<size_t>(p)]);
      std::sort(s.begin(), s.end());
      return s;
    };
    auto cell = specializer::compile_template(*tl.md->m, tl.md->dims, tl.get("cell"));
    CHECK(names(cell) == std::vector<std::string>{"U", "b_node"});
    auto loss = specializer::compile_template(*tl.md->m, tl.md->dims, tl.get("node_loss"));
    CHECK(names(loss) == std::vector<std::string>{"W_out", "b_out"}); // logits() inlined
    CHECK(loss.bwd_arg_grads[1] == graph::kNoNode);                   // the label is i32
    auto take = specializer::compile_template(*tl.md->m, tl.md->dims, tl.get("op.take"));
    CHECK(take.g.size() <= 8);
    CHECK(take.fwd_kernels.size() == 1);
  }

  TEST_CASE("fusion: the cell's forward is one matmul kernel with its gate epilogue") {
    TreeLstm tl;
    auto tg = specializer::compile_template(*tl.md->m, tl.md->dims, tl.get("cell"));
    REQUIRE(tg.fwd_kernels.size() <= 2);
    const auto& k = tg.fwd_kernels[0];
    REQUIRE(k.anchor != graph::kNoNode);
    CHECK(tg.g.node(k.anchor).op() == ops::OpId::MatMul);
    for (auto id : {ops::OpId::Concat, ops::OpId::Add, ops::OpId::Split, ops::OpId::Sigmoid,
                    ops::OpId::Tanh, ops::OpId::Mul})
      CHECK_MESSAGE(kernel_has(tg, k, id), ops::op_name(id));
    CHECK(k.signature.rfind("concat+matmul[300x750]+add+split5+", 0) == 0);
    // Both results and the activations the backward reads are stored by the kernel.
    for (NodeId o : tg.fwd_outputs)
      CHECK(std::find(k.outputs.begin(), k.outputs.end(), o) != k.outputs.end());
    // Backward: the gate gradients (one chain), then dx and dU as two matmul-gradient kernels.
    CHECK(tg.bwd_kernels.size() <= 4);
    size_t grads = 0;
    for (const auto& b : tg.bwd_kernels)
      grads += b.anchor != graph::kNoNode && tg.g.node(b.anchor).kind == graph::Kind::Grad;
    CHECK(grads == 2);
  }

  TEST_CASE("fusion: signatures are deterministic and depend on the static dims") {
    TreeLstm tl;
    for (const char* name : {"leaf", "cell", "node_loss"}) {
      auto a = specializer::compile_template(*tl.md->m, tl.md->dims, tl.get(name));
      auto b = specializer::compile_template(*tl.md->m, tl.md->dims, tl.get(name));
      CHECK(keys(a.fwd_kernels, true) == keys(b.fwd_kernels, true));
      CHECK(keys(a.bwd_kernels, true) == keys(b.bwd_kernels, true));
      CHECK(specializer::print_kernels(a) == specializer::print_kernels(b));
    }
    // concat needs literal widths, so the dims are substituted into the text.
    const std::string text = R"(param U : f32[H2, H5] = xavier
param b : f32[H5] = zeros
fn cell(hl: f32[H], cl: f32[H], hr: f32[H], cr: f32[H]) -> (f32[H], f32[H]) {
  let g = concat(hl, hr) @ U + b;
  let (i, fl, fr, o, u) = split5(g);
  let c = sigmoid(i) * tanh(u) + sigmoid(fl) * cl + sigmoid(fr) * cr;
  (sigmoid(o) * tanh(c), c)
}
)";
    auto with_dims = [&](int64_t h) {
      std::string s = text;
      for (auto [name, v] : {std::pair{"H2", 2 * h}, std::pair{"H5", 5 * h}, std::pair{"H", h}})
        for (size_t at; (at = s.find(name)) != std::string::npos;)
          s.replace(at, std::string(name).size(), std::to_string(v));
      return s;
    };
    auto sigs = [&](int64_t h) {
      std::string src = with_dims(h);
      Model md(src);
      specializer::Template t;
      t.fn = md.m->fn_index("cell");
      t.name = "cell";
      for (int i = 0; i < 4; ++i)
        t.args.push_back({DType::F32, {h}});
      t.results = {{DType::F32, {h}}, {DType::F32, {h}}};
      auto tg = specializer::compile_template(*md.m, md.dims, t);
      check_partition(tg);
      check_against_generic(src, md, t, tg, 3);
      auto s = keys(tg.fwd_kernels, false);
      auto b = keys(tg.bwd_kernels, false);
      s.insert(s.end(), b.begin(), b.end());
      return s;
    };
    auto h4 = sigs(4), h6 = sigs(6);
    REQUIRE(h4.size() == h6.size());
    CHECK(h4[0].find("matmul[8x20]") != std::string::npos);
    CHECK(h6[0].find("matmul[12x30]") != std::string::npos);
    for (size_t i = 0; i < h4.size(); ++i)
      CHECK(h4[i] != h6[i]);
  }

  TEST_CASE(
      "constant folding: literal arithmetic and zeros fold away, the seeded loss leaves no trace") {
    const char* src = R"(fn f(x: f32[4]) -> f32[4] { x * (2.0 + 3.0) + zeros(4) }
fn g(x: f32[4]) -> f32[4] { x * concat(zeros(2), ones(2)) }
)";
    Model md(src);
    auto tmpl = [&](const char* name) {
      specializer::Template t;
      t.fn = md.m->fn_index(name);
      t.name = name;
      t.args = {{DType::F32, {4}}};
      t.results = {{DType::F32, {4}}};
      return t;
    };
    specializer::TemplateOptions off;
    off.optimize = false;
    auto raw = specializer::compile_template(*md.m, md.dims, tmpl("f"), off);
    auto tg = specializer::compile_template(*md.m, md.dims, tmpl("f"));
    CHECK(count_ops(raw.g, ops::OpId::Add) == 2); // 2.0 + 3.0, and + zeros(4)
    CHECK(count_ops(tg.g, ops::OpId::Add) == 0);
    CHECK(count_ops(tg.g, ops::OpId::Zeros) == 0);
    // Forward: x * 5 (one node, one kernel); backward: seed * 5 (one node, one kernel).
    REQUIRE(tg.fwd_kernels.size() == 1);
    CHECK(tg.fwd_kernels[0].nodes.size() == 1);
    CHECK(tg.fwd_kernels[0].key.find("c5:f32[]") != std::string::npos);
    REQUIRE(tg.bwd_kernels.size() == 1);
    CHECK(tg.bwd_kernels[0].nodes.size() == 1);
    CHECK(raw.bwd_kernels[0].nodes.size() > 1);
    check_against_generic(src, md, tmpl("f"), tg, 1);
    check_against_generic(src, md, tmpl("f"), raw, 1);

    // A non-uniform folded constant becomes a known input slot.
    auto cg = specializer::compile_template(*md.m, md.dims, tmpl("g"));
    CHECK(count_ops(cg.g, ops::OpId::Concat) == 0);
    size_t const_slots = 0;
    for (const auto& s : cg.slots)
      const_slots += s.role == specializer::InputSlot::Role::Const;
    CHECK(const_slots == 1);
    CHECK(cg.fwd_kernels.size() == 1);
    check_against_generic(src, md, tmpl("g"), cg, 2);
  }

  TEST_CASE("constant arguments: a template specialized to zeros(4) reads it as a literal, and "
            "zeros @ W folds away with W") {
    const char* src = R"(param W : f32[4, 4] = xavier
fn f(x: f32[4], s: f32[4]) -> f32[4] { x * tanh(s @ W) + s }
)";
    Model md(src);
    auto tmpl = [&](Tensor c) {
      specializer::Template t;
      t.fn = md.m->fn_index("f");
      t.name = "f";
      t.args = {{DType::F32, {4}}, {DType::F32, {4}}};
      t.results = {{DType::F32, {4}}};
      t.const_args = {Tensor(), std::move(c)};
      return t;
    };
    auto zero =
        specializer::compile_template(*md.m, md.dims, tmpl(Tensor::zeros(DType::F32, Shape{4})));
    auto one = specializer::compile_template(*md.m, md.dims, tmpl(Tensor::full(Shape{4}, 1.0f)));
    // The constant argument is unread, and no gradient is asked for it.
    for (const auto* tg : {&zero, &one}) {
      CHECK(tg->args[0] != graph::kNoNode);
      CHECK(tg->args[1] == graph::kNoNode);
      for (uint32_t slot : tg->grad_slots)
        CHECK(slot != 1);
    }
    // zeros @ W is zero: tanh(0) = 0, x * 0 stays (NaN in x), + 0 goes; W is not read.
    CHECK(count_ops(zero.g, ops::OpId::MatMul) == 0);
    CHECK(zero.params.empty());
    CHECK(count_ops(one.g, ops::OpId::MatMul) == 1);
    CHECK(one.params.size() == 1);
    // Two constants are two templates.
    CHECK(tmpl(Tensor::zeros(DType::F32, Shape{4})).key() !=
          tmpl(Tensor::full(Shape{4}, 1.0f)).key());
    CHECK(tmpl(Tensor::zeros(DType::F32, Shape{4}))
              .same_as(tmpl(Tensor::zeros(DType::F32, Shape{4}))));
    CHECK(!tmpl(Tensor::zeros(DType::F32, Shape{4})).same_as(tmpl(Tensor::full(Shape{4}, 1.0f))));
  }

  TEST_CASE("dead-code elimination: an unused value and its parameter disappear, CSE merges") {
    const char* src = R"(param W : f32[4, 4] = xavier
fn f(x: f32[4]) -> f32[4] { let unused = tanh(x @ W); tanh(x * 1.0) + tanh(x) }
)";
    Model md(src);
    specializer::Template t;
    t.fn = md.m->fn_index("f");
    t.name = "f";
    t.args = {{DType::F32, {4}}};
    t.results = {{DType::F32, {4}}};
    specializer::TemplateOptions off;
    off.optimize = false;
    auto raw = specializer::compile_template(*md.m, md.dims, t, off);
    auto tg = specializer::compile_template(*md.m, md.dims, t);
    CHECK(raw.params.size() == 1); // W is read (strict let) ...
    CHECK(tg.params.empty());      // ... but nothing needs it
    size_t matmuls = 0, tanhs = 0;
    for (const auto& n : tg.g.nodes()) {
      matmuls += n.kind == graph::Kind::Op && n.op() == ops::OpId::MatMul;
      tanhs += n.kind == graph::Kind::Op && n.op() == ops::OpId::Tanh;
    }
    CHECK(matmuls == 0);
    CHECK(tanhs == 1); // tanh(x * 1.0) is tanh(x)
    CHECK(tg.g.size() < raw.g.size());
    check_against_generic(src, md, t, tg, 4);
  }

  TEST_CASE("tracing: control flow on a tensor value is an error naming its location") {
    const char* src = R"(fn h(x: f32[]) -> f32[] {
  if to_bool(x > 0.0) { x } else { 0.0 - x }
}
fn k(x: f32[], n: Int) -> f32[] { if n > 0 { k(x * 2.0, n - 1) } else { x } }
)";
    Model md(src);
    specializer::Template t;
    t.fn = md.m->fn_index("h");
    t.name = "h";
    t.args = {{DType::F32, {}}};
    t.results = {{DType::F32, {}}};
    std::string msg;
    try {
      specializer::compile_template(*md.m, md.dims, t);
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK(msg.find("test.pe:2:") != std::string::npos);
    CHECK(msg.find("to_bool") != std::string::npos);

    // Static Int arguments are concrete: recursion on them unrolls (inlined calls).
    specializer::Template u;
    u.fn = md.m->fn_index("k");
    u.name = "k";
    u.statics = {3};
    u.args = {{DType::F32, {}}};
    u.results = {{DType::F32, {}}};
    auto tg = specializer::compile_template(*md.m, md.dims, u);
    Tensor x = Tensor::scalar_f32(1.5f), s = Tensor::scalar_f32(1.0f);
    std::vector<NodeId> outs = {tg.fwd_outputs[0], tg.bwd_arg_grads[0]};
    auto v = graph::evaluate(
        tg.g, tg.bind_inputs(std::vector<Tensor>{x}, md.params, std::vector<Tensor>{s}), outs);
    CHECK(v[0].item_f32() == doctest::Approx(12.0));
    CHECK(v[1].item_f32() == doctest::Approx(8.0));
  }

  TEST_CASE("compile_template dumps the graph after the passes it is asked to") {
    TreeLstm tl;
    std::ostringstream os;
    specializer::TemplateOptions opt;
    opt.dump_after = {"trace", "fuse"};
    opt.dump = &os;
    specializer::compile_template(*tl.md->m, tl.md->dims, tl.get("cell"), opt);
    std::string d = os.str();
    CHECK(d.find("// cell after trace") != std::string::npos);
    CHECK(d.find("// cell after fuse") != std::string::npos);
    CHECK(d.find("// cell after dce") == std::string::npos);
    CHECK(d.find("fwd 0: concat+matmul[300x750]") != std::string::npos);
  }
}

} // namespace tests_specializer_template_graph_test
