// Helpers shared by the parser tests and the golden-file tests: reading test data, parsing into
// a Module and printing it, and the first difference between a golden file and an output.
#pragma once

#include "src/ir/module.h"
#include "src/parse/parser.h"

#include <algorithm>
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

/// A diff-like message: the first differing line with its neighbours.
inline std::string first_difference(const std::string& want, const std::string& got) {
  auto lines = [](const std::string& s) {
    std::vector<std::string> v;
    std::istringstream is(s);
    for (std::string l; std::getline(is, l);)
      v.push_back(l);
    return v;
  };
  auto a = lines(want), b = lines(got);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i])
    ++i;
  std::ostringstream os;
  os << "first difference at line " << i + 1 << ":\n";
  for (size_t k = i >= 2 ? i - 2 : 0; k < i; ++k)
    os << "  " << a[k] << "\n";
  for (size_t k = i; k < std::min(a.size(), i + 3); ++k)
    os << "- " << a[k] << "\n";
  for (size_t k = i; k < std::min(b.size(), i + 3); ++k)
    os << "+ " << b[k] << "\n";
  return os.str();
}

} // namespace pejit::testing
