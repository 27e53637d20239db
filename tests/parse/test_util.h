// Helpers shared by the parser tests: reading test data, parsing into a Module and printing
// it, and the print(parse(print(M))) == print(M) round-trip check.
#pragma once

#include "ir/module.h"
#include "parse/parser.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pejit::testing {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

inline std::string source_path(const std::string& rel) {
  return std::string(PEJIT_SOURCE_DIR) + "/" + rel;
}

/// The declarations as a Module keeps them (a later one of the same name replaces the earlier).
inline std::vector<ir::Decl> module_decls(const std::vector<ir::Decl>& decls) {
  ir::Module m;
  for (const auto& d : decls)
    m.put(d);
  return m.decls();
}

inline std::string print_decls(const std::vector<ir::Decl>& decls) {
  ir::Module m;
  for (const auto& d : decls)
    m.put(d);
  return ir::print_module(m);
}

} // namespace pejit::testing
