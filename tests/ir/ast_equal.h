// Test helper: structural equality of source-IR trees and declarations, ignoring spans and
// checker annotations. Returns an empty string when equal, else a path to the first
// difference, so a failing test says where two trees part.
#pragma once

#include "src/ir/module.h"

#include <string>
#include <vector>

namespace pejit::testing {

/// "" when equal; otherwise a description of the first difference.
std::string expr_diff(const ir::Expr& a, const ir::Expr& b);
/// "" when equal; otherwise a description of the first difference.
std::string decl_diff(const ir::Decl& a, const ir::Decl& b);
/// "" when equal; otherwise a description of the first difference.
std::string decls_diff(const std::vector<ir::Decl>& a, const std::vector<ir::Decl>& b);

} // namespace pejit::testing
