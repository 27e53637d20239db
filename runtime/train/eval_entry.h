// The one-pass evaluation entry: scoring a data set needs the loss and every prediction, and
// the model says them in two entries (`loss`, and `infer_nodes` or `infer`) that walk the same
// trees through the same cells. add_eval_entry() adds an entry returning both at once, so one
// plan serves the whole evaluation: partial evaluation walks the batch once per entry body
// inside it, and value numbering (specializer/merge_instances.h) runs the cells they share
// once (docs/cli.md, "pejit eval").
#pragma once

#include "src/ir/module.h"

#include <string>

namespace pejit::runtime {

/// What add_eval_entry() added: the entry's name (empty: none; score the model's entries one
/// by one) and which entry gives its second result (`infer_nodes` or `infer`).
struct EvalEntry {
  std::string name;
  std::string preds;
};

/// Adds to `m`, which must be checked, an entry `(loss(b), infer_nodes(b))` (or with `infer`
/// when the model has no `infer_nodes`) under a name no definition of `m` has, with copies of
/// the two entries' bodies as functions (entries cannot be called). Nothing is added, and
/// EvalEntry::name is empty, when the model has no `loss` entry of one argument, no prediction
/// entry, or the two take different types (or, should it happen, the copies do not check).
EvalEntry add_eval_entry(ir::Module& m);

} // namespace pejit::runtime
