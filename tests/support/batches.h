// A batch of parse trees as the value an entry over `List[Tree]` takes (each tree encoded as
// the model's tree type), for the tests that partially evaluate or plan such entries.
#pragma once

#include "runtime/data/tree.h"
#include "runtime/train/encode.h"
#include "src/interp/value.h"

#include <string>
#include <vector>

namespace pejit::test {

inline interp::Value tree_batch(const ir::Module& m, const std::vector<data::ParseTree>& ts,
                                const std::string& adt = "Tree") {
  runtime::TreeEncoder enc(m, adt);
  interp::Values xs;
  for (const auto& t : ts)
    xs.push_back(enc.encode(t));
  return interp::Value::list(std::move(xs));
}

} // namespace pejit::test
