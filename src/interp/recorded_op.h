// One registry op run eagerly on tensor Values and, when a tape is given and an input needs a
// gradient, recorded on it: what every eager backend (the generic path's, the plan
// executor's batching backend) does for an op. Keeps its scratch buffers across calls.
#pragma once

#include "src/interp/tape.h"
#include "src/interp/value.h"
#include "src/util/check.h"
#include "src/util/diagnostics.h"

#include <string>
#include <vector>

namespace pejit::interp {

class RecordedOp {
public:
  /// Runs `id` on `args`; results are batched (one row per instance) when `batched`. With
  /// `multi`, every result goes there and an empty Value is returned.
  Value run(Tape* tape, ops::OpId id, const ops::Attr& attr, const Value* args, size_t n,
            const Span& s, bool batched = false, Values* multi = nullptr) {
    ins_.clear();
    in_ids_.clear();
    bool record = false;
    for (size_t i = 0; i < n; ++i) {
      ins_.push_back(args[i].as_tensor());
      in_ids_.push_back(args[i].tape_id());
      record = record || args[i].tape_id() >= 0;
    }
    outs_.clear();
    try {
      ops::op_def(id).eval(ins_, attr, outs_);
    } catch (const Error& e) {
      throw Error(s.str() + ": error: " + ops::op_error_text(id, e.what()));
    }
    out_ids_.assign(outs_.size(), -1);
    if (record && tape)
      tape->record(id, attr, in_ids_, ins_, outs_, out_ids_.data());
    auto wrap = [&](size_t k) {
      return batched ? Value::batched_tensor(outs_[k], out_ids_[k])
                     : Value::tensor(outs_[k], out_ids_[k]);
    };
    if (multi) {
      multi->clear();
      for (size_t k = 0; k < outs_.size(); ++k)
        multi->push_back(wrap(k));
      return Value();
    }
    return wrap(0);
  }

private:
  std::vector<Tensor> ins_, outs_;
  std::vector<int32_t> in_ids_, out_ids_;
};

} // namespace pejit::interp
