// Binding-time analysis (docs/language.md): static = derived only from an entry's input structure
// (constructor tags, list spines, Int/Bool fields), literals and shapes; dynamic = parameters,
// tensor payloads and anything computed from them. Run after type checking, over the whole
// module (it is cheap): it records a BT on every expression and warns where an entry's
// control flow depends on a dynamic value (that entry will never specialize).
#pragma once

#include "src/ir/module.h"
#include "src/util/diagnostics.h"

namespace pejit::types {

/// Annotates every expression of every checked function with its binding time and adds a
/// warning per `if`/`match` on a dynamic value reachable from an entry.
void analyze_binding_times(const ir::Module& m, Diagnostics& diags);

} // namespace pejit::types
