// Named dimensions in expressions: `zeros(H)`, `slice(x, 0, 2*H)`, `let n = H`. The checker
// keeps such op attributes symbolic (ir::Call::attr_dims); their values exist only once a
// module is instantiated with its dimensions bound. bind_dims checks every such call with the
// bound sizes (a slice out of range is an error at its file:line:col then, not mid-batch), and
// the evaluator resolves the attributes before any backend sees the op, so that the graphs,
// plans and kernels recorded from it hold plain integers.
#pragma once

#include "src/interp/params.h"

#include <cstdint>
#include <vector>

namespace pejit::interp {

/// The size bound to the module's dimension number `index` (ir::VarRef::Kind::Dim).
int64_t dim_value(const ir::Module& m, int index, const DimBindings& dims, const Span& at);

/// `ints` (the call's attr_ints) with each attribute that names a dimension set from `dims`.
void resolve_attr_dims(const ir::Call& c, const DimBindings& dims, std::vector<int64_t>& ints);

/// Checks every op call whose attributes or bounds depend on named dimensions by its shape
/// rule on the bound sizes; throws pejit::Error at the call's file:line:col, naming the sizes.
void check_dim_attrs(const ir::Module& m, const DimBindings& dims);

} // namespace pejit::interp
