// Types of the pejit language: tensors with static (possibly named) dimensions, Int, Bool,
// tuples, lists, user ADTs and functions. Types are immutable and shared; compare them with
// type_equal, print them with type_str (the printer's syntax, which parses back).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace pejit::ir {

/// Element type of a tensor. (The IR does not know tensors' storage; see src/tensor.)
enum class Elem : uint8_t { F32, I32 };
const char* elem_name(Elem e);

/// One dimension: a constant, or an affine expression over named dimensions (`V`, `2*H`,
/// `H+K+1`) bound when a module is instantiated. Kept in a normal form (terms sorted by name,
/// no zero coefficient), so that equal expressions compare equal: `H+H` is `2*H`.
struct Dim {
  struct Term {
    std::string name;
    int64_t coeff = 1;
    bool operator==(const Term&) const = default;
  };
  int64_t value = 0;        ///< the constant term
  std::vector<Term> terms;  ///< empty: a constant

  static Dim of(int64_t v) { return Dim{v, {}}; }
  static Dim named(std::string n) { return Dim{0, {Term{std::move(n), 1}}}; }
  /// True when the dimension depends on a named dimension (its size is known only when bound).
  bool is_named() const { return !terms.empty(); }
  bool operator==(const Dim& o) const { return value == o.value && terms == o.terms; }
  Dim operator+(const Dim& o) const;
  Dim scaled(int64_t k) const;
  /// This dimension divided by n when every coefficient is divisible, else nullopt.
  std::optional<Dim> divided(int64_t n) const;
  /// The value with every name bound by `lookup` (nullopt where a name is unbound).
  std::optional<int64_t>
  eval(const std::function<std::optional<int64_t>(const std::string&)>& lookup) const;
  /// Source syntax that parses back: `300`, `V`, `2*H`, `2*H+K-1`.
  std::string str() const;
};

enum class TypeKind : uint8_t { Tensor, Int, Bool, Tuple, List, Adt, Func, Error };

struct TypeNode;
using Type = std::shared_ptr<const TypeNode>;

struct TypeNode {
  TypeKind kind = TypeKind::Error;
  Elem elem = Elem::F32;   ///< Tensor
  std::vector<Dim> dims;   ///< Tensor
  std::vector<Type> elems; ///< Tuple elements; List: elems[0]; Func: parameters
  Type result;             ///< Func
  std::string name;        ///< Adt

  bool is_tensor() const { return kind == TypeKind::Tensor; }
  bool is_scalar_tensor() const { return kind == TypeKind::Tensor && dims.empty(); }
  const Type& list_elem() const { return elems[0]; }
};

Type t_tensor(Elem e, std::vector<Dim> dims);
Type t_f32(std::vector<int64_t> dims);
Type t_i32(std::vector<int64_t> dims);
Type t_int();
Type t_bool();
Type t_tuple(std::vector<Type> elems);
Type t_list(Type elem);
Type t_adt(std::string name);
Type t_func(std::vector<Type> params, Type result);
/// The type of an expression that already failed to check; equal to everything, so one
/// mistake gives one diagnostic.
Type t_error();

bool is_error(const Type& t);
/// Structural equality; an error type equals anything.
bool type_equal(const Type& a, const Type& b);
/// True when the type contains no function (entry arguments must be first-order data).
bool is_first_order(const Type& t);
/// Source syntax: `f32[V, 300]`, `List[Tree]`, `(Int, f32[])`, `(f32[3]) -> f32[]`.
std::string type_str(const Type& t);

} // namespace pejit::ir
