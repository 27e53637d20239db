// The template tracer (a Backend of the shared evaluator that builds graph nodes), the
// seeded backward, and the pass order. See the design note in template_graph.h.
#include "specializer/template_graph.h"

#include "specializer/passes/eliminate_common_subexpressions.h"
#include "specializer/passes/eliminate_dead_code.h"
#include "specializer/passes/lower.h"
#include "specializer/passes/rebuild.h"
#include "src/graph/boost_adaptor.h"
#include "src/graph/evaluate.h"
#include "src/graph/graph_emitter.h"
#include "src/interp/evaluator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <unordered_map>

namespace pejit::specializer {

using graph::kNoNode;
using interp::Value;
using interp::Values;

namespace {

graph::ShapeType shape_type(const TensorSig& s) {
  return graph::ShapeType{s.dtype, s.dims.vec()};
}

void flatten(const Value& v, std::vector<Value>& out) {
  if (v.kind() == Value::Kind::Tensor)
    out.push_back(v);
  else
    for (const auto& x : v.items())
      flatten(x, out);
}

uint32_t add_slot(TemplateGraph& tg, InputSlot s) {
  tg.slots.push_back(std::move(s));
  tg.consts.resize(tg.slots.size());
  return static_cast<uint32_t>(tg.slots.size() - 1);
}

// The tracing backend: a tensor is Value::tensor(undefined, node id); literal tensors that
// the evaluator makes itself (float literals) arrive defined and become constants on use.
class TraceBackend {
public:
  TraceBackend(const ir::Module& m, const interp::DimBindings& dims, TemplateGraph& tg)
      : m_(m), dims_(dims), tg_(tg) {}

  const interp::DimBindings& dims() const { return dims_; }

  Value param(int i) {
    if (auto it = params_.find(i); it != params_.end())
      return it->second;
    const ir::Type& t = m_.params()[static_cast<size_t>(i)]->type;
    Shape sh = interp::concrete_shape(t, dims_);
    auto d = sh.dims();
    graph::ShapeType st{t->elem == ir::Elem::F32 ? DType::F32 : DType::I32,
                        std::vector<int64_t>(d.begin(), d.end())};
    uint32_t slot = add_slot(tg_, InputSlot{InputSlot::Role::Param, i, st});
    Value v = wrap(tg_.g.input(slot, st));
    params_.emplace(i, v);
    return v;
  }

  Value op(ops::OpId id, const ops::Attr& attr, const Value* args, size_t n, const Span& s,
           Values* multi = nullptr) {
    std::vector<NodeId> ins;
    for (size_t i = 0; i < n; ++i)
      ins.push_back(node_of(args[i]));
    try {
      if (multi) {
        multi->clear();
        for (NodeId r : tg_.g.op_results(id, ins, attr))
          multi->push_back(wrap(r));
        return Value();
      }
      return wrap(tg_.g.op(id, ins, attr));
    } catch (const Error& e) {
      throw Error(s.str() + ": error: " + ops::op_error_text(id, e.what()));
    }
  }

  std::optional<Value> call(const ir::FnDecl&, int, const Values&, const Span&) {
    return std::nullopt; // inline: a template is one graph
  }

  // The template's random context (interp/random.h): its key is the template's last argument,
  // and its draws are numbered in evaluation order, as on the generic path.
  void set_random_key(NodeId key) { key_ = key; }
  Value random_key(const Span& s, int64_t& j) {
    if (key_ < 0)
      throw Error(s.str() + ": error: a random op in template '" + tg_.name +
                  "', which has no random key");
    j = next_j_++;
    return wrap(key_);
  }

  Value sum_list(const Value& xs, const ir::Type& type, const Span&) {
    if (xs.list_size() == 0) {
      Shape sh = interp::concrete_shape(type, dims_);
      auto d = sh.dims();
      return wrap(tg_.g.constant(0.0f, std::vector<int64_t>(d.begin(), d.end())));
    }
    std::vector<NodeId> terms;
    for (size_t i = 0; i < xs.list_size(); ++i)
      terms.push_back(node_of(xs.list_at(i)));
    return wrap(tg_.g.sum_n(terms));
  }

  Value to_int(const Value& v, const Span& s) {
    Tensor t = concrete(v, s, "to_int");
    return Value::integer(t.dtype() == DType::I32 ? t.item_i32()
                                                  : static_cast<int64_t>(t.item_f32()));
  }

  Value to_bool(const Value& v, const Span& s) {
    Tensor t = concrete(v, s, "to_bool");
    return Value::boolean(t.dtype() == DType::I32 ? t.item_i32() != 0 : t.item_f32() != 0.0f);
  }

  NodeId node_of(const Value& v) {
    const Tensor& t = v.as_tensor();
    return t.defined() ? const_node(t) : v.tape_id();
  }

private:
  const ir::Module& m_;
  const interp::DimBindings& dims_;
  TemplateGraph& tg_;
  std::map<int, Value> params_;
  std::unordered_map<std::string, NodeId> consts_;
  NodeId key_ = -1;
  int64_t next_j_ = 0;

  static Value wrap(NodeId id) { return Value::tensor(Tensor(), id); }

  NodeId const_node(const Tensor& t) {
    graph::ShapeType st = graph::type_of(t);
    if (t.dtype() == DType::F32 && t.numel() > 0) {
      const float* p = t.f32();
      if (std::all_of(p, p + t.numel(), [&](float x) { return std::memcmp(&x, p, 4) == 0; }))
        return tg_.g.constant(p[0], st.dims);
    }
    std::string key = st.str() + ":";
    key.append(static_cast<const char*>(t.raw()), t.nbytes());
    if (auto it = consts_.find(key); it != consts_.end())
      return it->second;
    uint32_t slot = add_slot(tg_, InputSlot{InputSlot::Role::Const, -1, st});
    tg_.consts[slot] = t;
    NodeId id = tg_.g.input(slot, st);
    consts_.emplace(std::move(key), id);
    return id;
  }

  // The value of a tensor computed from constants only; anything else is control flow on a
  // dynamic value, which a template cannot have.
  Tensor concrete(const Value& v, const Span& s, const char* what) {
    if (v.as_tensor().defined())
      return v.as_tensor();
    NodeId id = v.tape_id();
    auto anc =
        graph::reachable_from(tg_.g, std::span<const NodeId>(&id, 1), graph::Direction::Operands);
    for (size_t i = 0; i < anc.size(); ++i) {
      const graph::Node& n = tg_.g.nodes()[i];
      if (anc[i] && n.kind == graph::Kind::Input && !tg_.consts[n.slot].defined())
        throw Error(s.str() + ": error: " + what + " of a dynamic tensor in template '" + tg_.name +
                    "': control flow on a dynamic value cannot be traced");
    }
    return graph::evaluate(tg_.g, tg_.consts, std::span<const NodeId>(&id, 1))[0];
  }
};
static_assert(interp::EvaluatorBackend<TraceBackend>);

TemplateGraph trace(const ir::Module& m, const interp::DimBindings& dims, const Template& t,
                    int max_depth) {
  ops::register_kernels();
  TemplateGraph tg;
  tg.name = t.name;
  auto bound = [&](size_t i) { return i < t.param_args.size() ? t.param_args[i] : -1; };
  auto constant = [&](size_t i) { return i < t.const_args.size() ? t.const_args[i] : Tensor(); };
  for (size_t i = 0; i < t.args.size(); ++i)
    add_slot(tg, InputSlot{InputSlot::Role::Arg, static_cast<int>(i), shape_type(t.args[i]),
                           bound(i), constant(i)});
  std::vector<NodeId> arg_nodes;
  for (size_t i = 0; i < t.args.size(); ++i)
    arg_nodes.push_back(bound(i) >= 0 || constant(i).defined()
                            ? kNoNode
                            : tg.g.input(static_cast<uint32_t>(i), shape_type(t.args[i])));

  std::vector<NodeId> results;
  if (t.kind == Template::Kind::Op) {
    // An operand that is always one parameter reads it, as a function body does (one slot
    // per parameter, after the arguments).
    for (size_t i = 0; i < t.args.size(); ++i)
      if (const int p = bound(i); p >= 0) {
        uint32_t slot = static_cast<uint32_t>(tg.slots.size());
        for (uint32_t s = 0; s < tg.slots.size(); ++s)
          if (tg.slots[s].role == InputSlot::Role::Param && tg.slots[s].index == p)
            slot = s;
        if (slot == tg.slots.size())
          add_slot(tg, InputSlot{InputSlot::Role::Param, p, shape_type(t.args[i])});
        arg_nodes[i] = tg.g.input(slot, shape_type(t.args[i]));
      }
    // An operand that is always one constant is that literal, as in a function body.
    TraceBackend literals(m, dims, tg);
    for (size_t i = 0; i < t.args.size(); ++i)
      if (constant(i).defined())
        arg_nodes[i] = literals.node_of(Value::tensor(constant(i)));
    results = tg.g.op_results(t.op, arg_nodes, t.attr);
  } else {
    if (t.fn < 0 || static_cast<size_t>(t.fn) >= m.fns().size())
      throw Error("template '" + t.name + "': no function #" + std::to_string(t.fn));
    const ir::FnDecl& f = *m.fns()[static_cast<size_t>(t.fn)];
    Values args;
    size_t si = 0, ai = 0;
    for (const auto& p : f.params) {
      switch (p.type->kind) {
      case ir::TypeKind::Int:
        args.push_back(Value::integer(t.statics.at(si++)));
        break;
      case ir::TypeKind::Bool:
        args.push_back(Value::boolean(t.statics.at(si++) != 0));
        break;
      case ir::TypeKind::Tensor: // a constant argument is the literal (Template::const_args)
        args.push_back(constant(ai).defined() ? Value::tensor(constant(ai))
                                              : Value::tensor(Tensor(), arg_nodes.at(ai)));
        ++ai;
        break;
      default:
        throw Error("template '" + t.name + "': parameter '" + p.name +
                    "' is not a tensor, Int or Bool");
      }
    }
    // A function that opens a random context takes its key as one more argument.
    const bool keyed = ai + 1 == arg_nodes.size() && t.args.back() == random_key_sig();
    PEJIT_CHECK(ai == arg_nodes.size() || keyed)
        << "template " << t.name << " has " << arg_nodes.size()
        << " tensor arguments, its function " << ai;
    TraceBackend be(m, dims, tg);
    if (keyed)
      be.set_random_key(arg_nodes.back());
    interp::Evaluator<TraceBackend> ev(m, be, interp::CallLimit::of(max_depth, 0));
    Value r = ev.call_fn(f, args, f.span);
    std::vector<Value> flat;
    flatten(r, flat);
    for (const auto& v : flat)
      results.push_back(be.node_of(v));
  }
  PEJIT_CHECK(results.size() == t.results.size())
      << "template " << t.name << ": " << results.size() << " results traced, " << t.results.size()
      << " declared";
  for (size_t i = 0; i < results.size(); ++i) {
    PEJIT_CHECK(tg.g.type(results[i]) == shape_type(t.results[i]))
        << "template " << t.name << " result " << i << " traced as " << tg.g.type(results[i]).str()
        << ", declared " << t.results[i].str();
    tg.g.add_output(results[i]);
  }
  tg.refresh();
  return tg;
}

// Seeds, the seeded loss, and its gradient w.r.t. the f32 arguments and parameters.
void add_backward(TemplateGraph& tg) {
  std::vector<NodeId> terms;
  for (size_t r = 0; r < tg.fwd_outputs.size(); ++r) {
    NodeId out = tg.fwd_outputs[r];
    const graph::ShapeType t = tg.g.type(out); // a copy: adding nodes moves the node arena
    if (t.dtype != DType::F32)
      continue;
    uint32_t slot = add_slot(tg, InputSlot{InputSlot::Role::Seed, static_cast<int>(r), t});
    NodeId prod = tg.g.op(ops::OpId::Mul, {out, tg.g.input(slot, t)});
    terms.push_back(t.dims.empty() ? prod : tg.g.op(ops::OpId::Sum, {prod}));
  }
  if (terms.empty())
    return; // nothing differentiable (an integer-valued template)
  std::vector<NodeId> wrt;
  for (uint32_t s = 0; s < tg.slots.size(); ++s) {
    const InputSlot& in = tg.slots[s];
    bool want =
        in.type.dtype == DType::F32 &&
        ((in.role == InputSlot::Role::Arg && in.bound_param < 0 && !in.bound_const.defined()) ||
         (in.role == InputSlot::Role::Param && passes::find_input(tg.g, s) != kNoNode));
    if (!want)
      continue;
    tg.grad_slots.push_back(s);
    wrt.push_back(tg.g.input(s, in.type)); // an unread argument is re-added: its gradient is 0
  }
  NodeId loss = tg.g.sum_n(terms);
  for (NodeId gr : graph::differentiate(tg.g, loss, wrt))
    tg.g.add_output(gr);
  tg.refresh();
}

void fuse(TemplateGraph& tg) {
  tg.fwd_kernels = passes::fuse_kernels(tg.g, tg.fwd_outputs);
  std::vector<NodeId> bwd;
  for (NodeId o : tg.bwd_arg_grads)
    if (o != kNoNode)
      bwd.push_back(o);
  // A parameter read by an integer-valued template (argmax of its scores) has no gradient.
  for (NodeId o : tg.bwd_param_grads)
    if (o != kNoNode)
      bwd.push_back(o);
  if (bwd.empty())
    return; // no backward: no roots (an empty root set would mean the graph's outputs)
  std::vector<bool> done(tg.g.size(), false);
  for (const auto& k : tg.fwd_kernels)
    for (NodeId n : k.nodes)
      done[static_cast<size_t>(n)] = true;
  tg.bwd_kernels = passes::fuse_kernels(tg.g, bwd, done);
}

} // namespace

std::vector<Tensor> TemplateGraph::bind_inputs(std::span<const Tensor> arg_values,
                                               const interp::Params& p,
                                               std::span<const Tensor> seed_values) const {
  std::vector<Tensor> in(slots.size());
  for (size_t s = 0; s < slots.size(); ++s) {
    auto i = static_cast<size_t>(slots[s].index);
    switch (slots[s].role) {
    case InputSlot::Role::Arg:
      in[s] = arg_values[i];
      break;
    case InputSlot::Role::Param:
      in[s] = p.values.at(i);
      break;
    case InputSlot::Role::Const:
      in[s] = consts[s];
      break;
    case InputSlot::Role::Seed:
      if (i < seed_values.size())
        in[s] = seed_values[i];
      break;
    }
  }
  return in;
}

void TemplateGraph::refresh() {
  size_t nargs = 0, nres = 0;
  for (const auto& s : slots)
    nargs += s.role == InputSlot::Role::Arg;
  args.assign(nargs, kNoNode);
  params.clear();
  param_index.clear();
  for (uint32_t s = 0; s < slots.size(); ++s) {
    NodeId id = passes::find_input(g, s);
    const InputSlot& in = slots[s];
    if (in.role == InputSlot::Role::Arg)
      args[static_cast<size_t>(in.index)] = id;
    if (in.role == InputSlot::Role::Param && id != kNoNode) {
      params.push_back(id);
      param_index.push_back(in.index);
    }
  }
  auto outs = g.outputs();
  PEJIT_CHECK(outs.size() >= grad_slots.size()) << "template graph lost outputs";
  nres = outs.size() - grad_slots.size();
  fwd_outputs.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(nres));
  seeds.assign(nres, kNoNode);
  for (uint32_t s = 0; s < slots.size(); ++s)
    if (slots[s].role == InputSlot::Role::Seed)
      seeds[static_cast<size_t>(slots[s].index)] = passes::find_input(g, s);
  bwd_arg_grads.assign(nargs, kNoNode);
  bwd_param_grads.assign(params.size(), kNoNode);
  for (size_t j = 0; j < grad_slots.size(); ++j) {
    const InputSlot& in = slots[grad_slots[j]];
    NodeId gr = outs[nres + j];
    if (in.role == InputSlot::Role::Arg)
      bwd_arg_grads[static_cast<size_t>(in.index)] = gr;
    else
      for (size_t p = 0; p < params.size(); ++p)
        if (param_index[p] == in.index)
          bwd_param_grads[p] = gr;
  }
}

const std::vector<std::string>& template_pass_names() {
  static const std::vector<std::string> names = {"trace",    "fold",    "cse",     "dce",  "ad",
                                                 "fold.bwd", "cse.bwd", "dce.bwd", "fuse", "lower"};
  return names;
}

void verify_template_graph(const TemplateGraph& tg) {
  const graph::Graph& g = tg.g;
  PEJIT_CHECK(tg.consts.size() >= tg.slots.size()) << "consts not by slot";
  for (size_t i = 0; i < g.size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    if (n.kind != graph::Kind::Input)
      continue;
    PEJIT_CHECK(n.slot < tg.slots.size()) << "input #" << n.slot << " has no slot";
    PEJIT_CHECK(n.type == tg.slots[n.slot].type) << "input #" << n.slot << " is " << n.type.str()
                                                 << ", its slot " << tg.slots[n.slot].type.str();
    if (tg.slots[n.slot].role == InputSlot::Role::Const) {
      PEJIT_CHECK(tg.consts[n.slot].defined() && graph::type_of(tg.consts[n.slot]) == n.type)
          << "constant slot #" << n.slot << " has no value of its type";
    }
  }
  PEJIT_CHECK(tg.fwd_outputs.size() + tg.grad_slots.size() == g.outputs().size())
      << "output layout";
  for (size_t j = 0; j < tg.grad_slots.size(); ++j)
    PEJIT_CHECK(g.type(g.outputs()[tg.fwd_outputs.size() + j]) == tg.slots[tg.grad_slots[j]].type)
        << "gradient " << j << " has the wrong type";
  if (tg.fwd_kernels.empty() && tg.bwd_kernels.empty())
    return;
  // Kernels: a partition of the computed nodes the outputs need, in dependency order.
  std::vector<int> where(g.size(), -1);
  int k = 0;
  for (const auto* list : {&tg.fwd_kernels, &tg.bwd_kernels})
    for (const auto& kn : *list) {
      for (NodeId n : kn.nodes) {
        PEJIT_CHECK(where[static_cast<size_t>(n)] < 0) << "%" << n << " in two kernels";
        where[static_cast<size_t>(n)] = k;
      }
      ++k;
    }
  std::vector<bool> need = graph::live(g);
  for (size_t i = 0; i < g.size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    bool leaf = n.kind == graph::Kind::Input || n.kind == graph::Kind::Const;
    if (need[i] && !leaf) {
      PEJIT_CHECK(where[i] >= 0) << "%" << i << " is in no kernel";
    }
    if (where[i] < 0)
      continue;
    for (NodeId o : n.operands) {
      int wo = where[static_cast<size_t>(o)];
      PEJIT_CHECK(wo <= where[i]) << "%" << i << " (kernel " << where[i] << ") reads %" << o
                                  << " of the later kernel " << wo;
    }
  }
}

std::string print_kernels(const TemplateGraph& tg) {
  std::string s;
  for (const auto* list : {&tg.fwd_kernels, &tg.bwd_kernels}) {
    const char* part = list == &tg.fwd_kernels ? "fwd" : "bwd";
    for (size_t i = 0; i < list->size(); ++i)
      s += fmt::format("{} {}: {} ({} nodes)\n", part, i, (*list)[i].signature,
                       (*list)[i].nodes.size());
  }
  return s;
}

TemplateGraph build_template_graph(const ir::Module& m, const interp::DimBindings& dims,
                                   const Template& t) {
  TemplateOptions opt;
  opt.optimize = false;
  return compile_template(m, dims, t, opt);
}

TemplateGraph compile_template(const ir::Module& m, const interp::DimBindings& dims,
                               const Template& t, const TemplateOptions& opt) {
  auto after = [&](TemplateGraph& tg, const std::string& pass) {
    tg.refresh();
    if (opt.verify)
      verify_template_graph(tg);
    bool dump =
        std::find(opt.dump_after.begin(), opt.dump_after.end(), pass) != opt.dump_after.end() ||
        std::find(opt.dump_after.begin(), opt.dump_after.end(), "all") != opt.dump_after.end();
    if (!dump)
      return;
    std::ostream& os = opt.dump ? *opt.dump : std::cerr;
    os << "// " << tg.name << " after " << pass << "\n" << graph::print(tg.g) << "\n";
    if (pass == "fuse")
      os << print_kernels(tg);
    if (pass == "lower")
      os << print_kernel_program(tg, tg.program);
  };
  auto fold = [&](TemplateGraph& tg) {
    tg.g = passes::fold_constants(tg.g, tg.consts, opt.fold);
    for (size_t s = tg.slots.size(); s < tg.consts.size(); ++s)
      tg.slots.push_back(
          InputSlot{InputSlot::Role::Const, -1,
                    tg.consts[s].defined() ? graph::type_of(tg.consts[s]) : graph::ShapeType{}});
  };
  auto optimize = [&](TemplateGraph& tg, const std::string& suffix) {
    if (!opt.optimize)
      return;
    fold(tg);
    after(tg, "fold" + suffix);
    tg.g = passes::eliminate_common_subexpressions(tg.g);
    after(tg, "cse" + suffix);
    tg.g = passes::eliminate_dead_code(tg.g);
    after(tg, "dce" + suffix);
  };

  TemplateGraph tg = trace(m, dims, t, opt.max_depth);
  after(tg, "trace");
  optimize(tg, "");
  add_backward(tg);
  after(tg, "ad");
  optimize(tg, ".bwd");
  fuse(tg);
  after(tg, "fuse");
  tg.program = passes::lower(tg, opt.lower);
  after(tg, "lower");
  return tg;
}

} // namespace pejit::specializer
