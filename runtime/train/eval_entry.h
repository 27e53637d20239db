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
/// `reuse`: the name of an entry this function added to `m` earlier, whose three definitions
/// are replaced (copies of the entries as they are now) instead of new ones being added, so
/// that a model changed again and again does not pile up hidden entries.
EvalEntry add_eval_entry(ir::Module& m, const std::string& reuse = {});

/// Replaces the three definitions of the entry `name` that add_eval_entry() added with ones
/// that mention nothing else in `m`: their copies of the model's old bodies may no longer
/// check once the model's types or functions change (a Session sets them aside and tries a
/// change again; the entry is made again, with add_eval_entry(m, name), before its next run).
/// Returns false, `m` unchanged, should that not check.
bool set_aside_eval_entry(ir::Module& m, const std::string& name);

/// The names of the functions that add_eval_entry() adds beside the entry `name`.
std::string eval_loss_name(const std::string& name);
std::string eval_preds_name(const std::string& name);

} // namespace pejit::runtime
