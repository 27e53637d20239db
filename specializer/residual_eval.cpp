// Instance-by-instance evaluation of a residual program.
#include "specializer/residual_eval.h"

#include "src/kernels/kernels.h"
#include "src/ops/emitter.h"
#include "src/util/check.h"

#include <functional>

namespace pejit::specializer {

using interp::Value;
using interp::Values;

std::vector<Tensor> evaluate_residual(const Residual& r, const TemplateTable& templates,
                                      interp::Interpreter& in, const interp::Params& params) {
  ops::register_kernels();
  std::vector<std::vector<Tensor>> results(r.instances.size());
  auto get = [&](const Ref& ref) -> const Tensor& {
    switch (ref.kind) {
    case Ref::Kind::Input:
      return r.inputs[static_cast<size_t>(ref.index)];
    case Ref::Kind::Param:
      return params.values[static_cast<size_t>(ref.index)];
    case Ref::Kind::Const:
      return r.consts[static_cast<size_t>(ref.index)];
    case Ref::Kind::Inst:
      return results[static_cast<size_t>(ref.index)][static_cast<size_t>(ref.out)];
    }
    PEJIT_CHECK(false) << "bad ref";
  };
  const ir::Module& m = in.module();
  for (size_t i = 0; i < r.instances.size(); ++i) {
    const Instance& inst = r.instances[i];
    auto iargs = r.args(inst);
    if (inst.tmpl == Instance::kSumN) {
      Tensor acc = get(iargs[0]).clone();
      for (size_t k = 1; k < iargs.size(); ++k)
        kernels::add_inplace(acc, get(iargs[k]));
      results[i] = {acc};
      continue;
    }
    const Template& t = templates.at(inst.tmpl);
    if (t.kind == Template::Kind::Op) {
      std::vector<Tensor> ins;
      for (const auto& a : iargs)
        ins.push_back(get(a));
      ops::op_def(t.op).eval(ins, t.attr, results[i]);
      continue;
    }
    // A function template: its parameters in order, Ints/Bools from the statics.
    const ir::FnDecl& f = *m.fns()[static_cast<size_t>(t.fn)];
    Values args;
    size_t ti = 0, si = 0;
    for (const auto& p : f.params) {
      if (p.type->kind == ir::TypeKind::Int)
        args.push_back(Value::integer(t.statics[si++]));
      else if (p.type->kind == ir::TypeKind::Bool)
        args.push_back(Value::boolean(t.statics[si++] != 0));
      else
        args.push_back(Value::tensor(get(iargs[ti++])));
    }
    Value v = in.call_function(t.fn, args, params);
    std::vector<Tensor> flat;
    std::vector<const Value*> stack{&v};
    // Flatten tuples in order.
    std::function<void(const Value&)> walk = [&](const Value& x) {
      if (x.kind() == Value::Kind::Tensor)
        flat.push_back(x.as_tensor());
      else
        for (const auto& e : x.items())
          walk(e);
    };
    walk(v);
    results[i] = std::move(flat);
  }
  std::vector<Tensor> out;
  for (const auto& o : r.outputs)
    out.push_back(get(o));
  return out;
}

} // namespace pejit::specializer
