// The library's own access to a public Session (include/pejit/pejit.h): what in-tree code
// built on a session (the Python extension) needs beyond the public API: the session's module
// (to read data with the model's types) and batches as interpreter values.
#pragma once

#include "pejit/pejit.h"
#include "src/interp/value.h"
#include "src/ir/module.h"

namespace pejit::runtime {

struct SessionAccess {
  static const ir::Module& module(const Session& s);
  static Value wrap(interp::Value v);
  static const interp::Value& unwrap(const Value& v);
};

} // namespace pejit::runtime
