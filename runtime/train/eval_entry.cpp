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

EvalEntry add_eval_entry(ir::Module& m) {
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
  // A name (and its two helpers' names) that no definition of the model has.
  std::string base = "__eval";
  for (int i = 2; taken(m, base) || taken(m, base + "_loss") || taken(m, base + "_preds"); ++i)
    base = "__eval" + std::to_string(i);
  const std::string arg = ir::type_str(loss->params[0].type);
  std::string text = as_function(*loss, base + "_loss") + "\n" +
                     as_function(*pred, base + "_preds") + "\n" + "entry " + base + "(b: " + arg +
                     ") -> (" + ir::type_str(loss->ret) + ", " + ir::type_str(pred->ret) +
                     ") {\n  (" + base + "_loss(b), " + base + "_preds(b))\n}\n";
  // Copies of checked entries check; should one not (a construct the printer cannot give
  // back), the module is left as it was and the entries run one by one, as they would anyway.
  Diagnostics d;
  if (!types::add_source(m, text, "<pejit eval>", d).ok)
    return {};
  return {base, preds};
}

} // namespace pejit::runtime
