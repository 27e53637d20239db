// The list and conversion builtins that are not tensor ops: map, fold, sum_list, length,
// to_int, to_bool, append, reverse. Nil and Cons are the built-in constructors of List[T] (ADT
// index kListAdt).
#pragma once

#include <optional>
#include <string>

namespace pejit::types {

enum class Builtin : int { Map, Fold, SumList, Length, ToInt, ToBool, Append, Reverse };
std::optional<Builtin> builtin_by_name(const std::string& name);
const char* builtin_name(Builtin b);

/// VarRef::adt of the list constructors; ctor index 0 = Nil, 1 = Cons.
inline constexpr int kListAdt = -2;

} // namespace pejit::types
