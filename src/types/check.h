// The checker: types with shape inference (through the op registry's shape rules), name
// resolution into frame slots and captures, and then binding times (types/binding_time.h).
// Adding definitions is incremental and transactional: only new or changed definitions and
// the functions that mention them are re-checked, and a module with errors is left unchanged.
#pragma once

#include "src/ir/module.h"
#include "src/util/diagnostics.h"

#include <string>
#include <string_view>
#include <vector>

namespace pejit::types {

struct AddResult {
  std::vector<std::string> changed;          ///< definitions that were new or differ
  std::vector<std::string> checked;          ///< functions whose bodies were (re)checked
  std::vector<std::string> affected_entries; ///< entries whose dependency cone changed
  bool ok = false;
};

/// Adds (or replaces) definitions in `m` and checks what changed. On an error, `m` is left as
/// it was and the diagnostics say why.
AddResult add_definitions(ir::Module& m, const std::vector<ir::Decl>& decls, Diagnostics& diags);

/// Parses `text` (named `name` in diagnostics) and adds its definitions.
AddResult add_source(ir::Module& m, std::string_view text, const std::string& name,
                     Diagnostics& diags);

/// Reads and adds a file; a missing file is a diagnostic.
AddResult add_file(ir::Module& m, const std::string& path, Diagnostics& diags);

} // namespace pejit::types
