// The one-pass evaluation entry (eval_entry.h): the model's loss and prediction entries copied
// as functions, and an entry that returns both, added as source text through the checker.
#include "runtime/train/eval_entry.h"

#include "src/ir/type.h"
#include "src/types/check.h"

#include <memory>

namespace pejit::runtime {

namespace {

bool taken(const ir::Module& m, const std::string& name) {
  return m.fn_index(name) >= 0 || m.adt_index(name) >= 0 || m.param_index(name) >= 0 ||
         m.dim_index(name) >= 0 || m.ctor(name).first >= 0;
}

const ir::FnDecl* unary_entry(const ir::Module& m, const std::string& name) {
  const ir::FnDecl* f = m.fn(name);
  return f != nullptr && f->is_entry && f->params.size() == 1 ? f : nullptr;
}

// `f` as a plain function named `name`, in source form.
std::string as_function(const ir::FnDecl& f, const std::string& name) {
  auto copy = std::make_shared<ir::FnDecl>(f);
  copy->name = name;
  copy->is_entry = false;
  ir::Decl d;
  d.kind = ir::DeclKind::Fn;
  d.fn = std::move(copy);
  return ir::print_decl(d);
}

} // namespace

std::string eval_loss_name(const std::string& name) {
  return name + "_loss";
}
std::string eval_preds_name(const std::string& name) {
  return name + "_preds";
}

EvalEntry add_eval_entry(ir::Module& m, const std::string& reuse) {
  const ir::FnDecl* loss = unary_entry(m, "loss");
  if (loss == nullptr)
    return {};
  std::string preds = "infer_nodes";
  const ir::FnDecl* pred = unary_entry(m, preds);
  if (pred == nullptr) {
    preds = "infer";
    pred = unary_entry(m, preds);
  }
  if (pred == nullptr || !ir::type_equal(loss->params[0].type, pred->params[0].type))
    return {};
  // The earlier entry's name, or one (and its two helpers' names) that no definition has.
  std::string base = reuse.empty() ? "__eval" : reuse;
  for (int i = 2; reuse.empty() && (taken(m, base) || taken(m, eval_loss_name(base)) ||
                                    taken(m, eval_preds_name(base)));
       ++i)
    base = "__eval" + std::to_string(i);
  const std::string arg = ir::type_str(loss->params[0].type);
  std::string text = as_function(*loss, eval_loss_name(base)) + "\n" +
                     as_function(*pred, eval_preds_name(base)) + "\n" + "entry " + base +
                     "(b: " + arg + ") -> (" + ir::type_str(loss->ret) + ", " +
                     ir::type_str(pred->ret) + ") {\n  (" + eval_loss_name(base) + "(b), " +
                     eval_preds_name(base) + "(b))\n}\n";
  // Copies of checked entries check; should one not (a construct the printer cannot give
  // back), the module is left as it was and the entries run one by one, as they would anyway.
  Diagnostics d;
  if (!types::add_source(m, text, "<pejit eval>", d).ok)
    return {};
  return {base, preds};
}

bool set_aside_eval_entry(ir::Module& m, const std::string& name) {
  // Bodies over a tensor type alone: nothing the model defines, so nothing it changes, is
  // mentioned.
  const std::string text = "fn " + eval_loss_name(name) + "(x: f32[]) -> f32[] { x }\nfn " +
                           eval_preds_name(name) + "(x: f32[]) -> f32[] { x }\nentry " + name +
                           "(x: f32[]) -> f32[] { x }\n";
  Diagnostics d;
  return types::add_source(m, text, "<pejit eval>", d).ok;
}

} // namespace pejit::runtime
