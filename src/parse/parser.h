// Parser of the pejit language (docs/language.md): recursive descent over the lexer's tokens,
// precedence climbing for binary operators. Builds the source IR of src/ir with a span on
// every node. Never throws or aborts on bad input: every mistake is a diagnostic.
#pragma once

#include "src/ir/module.h"
#include "src/util/diagnostics.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pejit::parse {

/// Parses a program. Never throws or aborts on bad input: errors go to `diags` as
/// `file:line:col: error: ...` with precise spans; recovers at declaration boundaries so that
/// several errors are reported per run; returns the declarations that parsed.
std::vector<ir::Decl> parse_program(std::shared_ptr<const SourceFile> file, Diagnostics& diags);
/// Convenience: wraps text in a SourceFile named `name`.
std::vector<ir::Decl> parse_program(std::string_view text, const std::string& name,
                                    Diagnostics& diags);
/// Parses one expression (the whole text). Returns null when it has errors (see `diags`).
ir::Expr parse_expression(std::string_view text, const std::string& name, Diagnostics& diags);

/// Nesting deeper than this (parentheses, blocks, types, operators chained to the right) is a
/// diagnostic, so that no later recursive pass can overflow the stack.
inline constexpr int kMaxNesting = 256;
/// Longest left-associative operator chain or let sequence in one block (the IR nests them).
inline constexpr int kMaxChain = 4096;

} // namespace pejit::parse
