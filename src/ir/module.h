// Declarations and the Module: named definitions (types, dims, params, functions, entries),
// a version per definition, and the call graph that answers "which entries does a change of
// these definitions touch". A Module is filled by the parser or the builder and checked by
// src/types; `add` of further definitions is incremental (see types/check.h: add_definitions).
#pragma once

#include "src/ir/expr.h"

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace pejit::ir {

struct Field {
  std::string name;
  Type type;
  Span span;
};

struct CtorDef {
  std::string name;
  std::vector<Field> fields;
  Span span;
};

/// `type Tree = Leaf(word: i32[], label: i32[]) | Node(left: Tree, right: Tree, label: i32[])`
struct TypeDecl {
  std::string name;
  std::vector<CtorDef> ctors;
  Span span;
};

/// `dim V` or `dim V = 1000`: a named dimension, bound when the module is instantiated.
struct DimDecl {
  std::string name;
  std::optional<int64_t> default_value;
  Span span;
};

/// Parameter initializers. Seeded by the session's seed and the parameter's name.
struct Init {
  enum class Kind : uint8_t { Zeros, Ones, Normal, Uniform, Xavier };
  Kind kind = Kind::Zeros;
  double a = 0, b = 0; ///< Normal: mean, stddev; Uniform: low, high
};
const char* init_name(Init::Kind k);

/// `param W : f32[300, 450] = xavier`
struct ParamDecl {
  std::string name;
  Type type;
  Init init;
  Span span;
};

struct FnParam {
  std::string name;
  Type type;
  Span span;
};

/// `fn name(params) -> T { body }`, or `entry name(...)` for an entry point.
struct FnDecl {
  std::string name;
  bool is_entry = false;
  std::vector<FnParam> params;
  Type ret;
  Expr body;
  Span span;
  // Checker annotations.
  mutable std::vector<int> param_slots;
  mutable int frame_size = 0;
  mutable bool checked = false;
};

enum class DeclKind : uint8_t { Type, Dim, Param, Fn };

/// One top-level definition. Exactly one of the pointers is set, by `kind`.
struct Decl {
  DeclKind kind = DeclKind::Fn;
  std::shared_ptr<const TypeDecl> type;
  std::shared_ptr<const DimDecl> dim;
  std::shared_ptr<const ParamDecl> param;
  std::shared_ptr<const FnDecl> fn;

  const std::string& name() const;
  const Span& span() const;
};

/// The definitions of a program, in declaration order, with lookup by name.
/// Indices (fn index, ADT index, param index) are stable: a replaced definition keeps its index.
class Module {
public:
  /// Adds a definition or replaces the one of the same name and kind. Returns true when it
  /// was new or its printed form changed (then its version is bumped).
  bool put(const Decl& d);

  const std::vector<std::shared_ptr<const FnDecl>>& fns() const { return fns_; }
  const std::vector<std::shared_ptr<const TypeDecl>>& adts() const { return adts_; }
  const std::vector<std::shared_ptr<const ParamDecl>>& params() const { return params_; }
  const std::vector<std::shared_ptr<const DimDecl>>& dims() const { return dims_; }

  int fn_index(const std::string& name) const;    ///< -1 if none
  int adt_index(const std::string& name) const;   ///< -1 if none
  int param_index(const std::string& name) const; ///< -1 if none
  int dim_index(const std::string& name) const;   ///< -1 if none
  /// Constructor by name: (adt index, ctor index), or (-1, -1).
  std::pair<int, int> ctor(const std::string& name) const;

  const FnDecl* fn(const std::string& name) const;
  const TypeDecl* adt(const std::string& name) const;
  std::vector<std::string> entries() const;

  /// Version of a definition: 1 when first added, +1 each time it is replaced by a different
  /// one. 0 for an unknown name.
  uint64_t version(const std::string& name) const;
  /// Bumped on every change; identifies this state of the module.
  uint64_t generation() const { return generation_; }

  /// Declarations in order (for the printer).
  const std::vector<Decl>& decls() const { return decls_; }

  /// Names each function's body mentions (functions, params, types), filled by the checker.
  void set_uses(const std::string& fn, std::set<std::string> uses);
  const std::set<std::string>& uses(const std::string& fn) const;

  /// The entries whose dependency cone (call graph + params + types, transitively) contains
  /// any of `changed`. Computed on a Boost.Graph of the definitions.
  std::vector<std::string> affected_entries(const std::vector<std::string>& changed) const;
  /// Everything `name` depends on, transitively, itself included.
  std::set<std::string> dependency_cone(const std::string& name) const;
  /// Hash of the versions of every definition in the entry's dependency cone.
  uint64_t cone_version(const std::string& entry) const;

private:
  std::vector<Decl> decls_;
  std::vector<std::shared_ptr<const FnDecl>> fns_;
  std::vector<std::shared_ptr<const TypeDecl>> adts_;
  std::vector<std::shared_ptr<const ParamDecl>> params_;
  std::vector<std::shared_ptr<const DimDecl>> dims_;
  std::map<std::string, int> fn_ix_, adt_ix_, param_ix_, dim_ix_;
  std::map<std::string, std::pair<int, int>> ctor_ix_;
  std::map<std::string, uint64_t> versions_;
  std::map<std::string, std::string> printed_;
  std::map<std::string, std::set<std::string>> uses_;
  uint64_t generation_ = 0;
};

/// Printer (src/ir/printer.cpp): source text that parses back to an equal module.
std::string print_type_decl(const TypeDecl& d);
std::string print_decl(const Decl& d);
std::string print_module(const Module& m);
std::string print_expr(const Expr& e);

} // namespace pejit::ir
