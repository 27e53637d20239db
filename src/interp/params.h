// Instantiating a module: binding its named dimensions, initializing its parameters
// (deterministically from a seed and each parameter's name), and checking values (such as a
// batch) against declared types, with a path to the offending part in the error.
#pragma once

#include "src/interp/value.h"

#include <map>
#include <string>
#include <vector>

namespace pejit::interp {

/// Sizes of named dimensions.
using DimBindings = std::map<std::string, int64_t>;

/// The module's dimensions: each `dim` default, overridden by `overrides`. Throws pejit::Error
/// for a dimension with neither, for an override of an undeclared name, or a size < 1.
DimBindings bind_dims(const ir::Module& m, const DimBindings& overrides);

/// The concrete shape of a tensor type. Throws pejit::Error for an unbound named dimension.
Shape concrete_shape(const ir::Type& t, const DimBindings& dims);

/// Parameter tensors, indexed like the module's params.
struct Params {
  std::vector<std::string> names;
  std::vector<Tensor> values;
  /// -1 when absent.
  int index(const std::string& name) const;
  Params clone() const;
};

/// Initializes every parameter by its initializer; the same (module, dims, seed) gives the
/// same bits on every machine.
Params init_params(const ir::Module& m, const DimBindings& dims, uint64_t seed);

/// Checks that `v` has type `t` (tensor dtypes and shapes included); throws pejit::Error naming
/// `path` (e.g. "batch[3].left.word") and what was expected.
void check_value(const Value& v, const ir::Type& t, const ir::Module& m, const DimBindings& dims,
                 const std::string& path);

} // namespace pejit::interp
