// Which class count a model gives the labels of its data: a small flow analysis over the
// checked module that follows the values bound from an ADT's label fields (match binders, let,
// arguments of functions and their results) to the `cross_entropy` calls they feed. The
// encoder checks every label of the data against it before training, so a label outside the
// classes is reported at the data file's line and column instead of failing inside a step.
#pragma once

#include "src/interp/params.h"
#include "src/ir/module.h"

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace pejit::runtime {

/// A field of a constructor: (ADT index, constructor index, field index) in the module.
using FieldKey = std::tuple<int, int, int>;

/// The tightest cross_entropy a label field feeds: its class count and the call.
struct LabelClasses {
  int64_t classes = -1; ///< -1: the field feeds no cross_entropy whose class count is known
  Span at;              ///< the cross_entropy call
};

/// For each of `fields` (label fields of the data's ADTs), the smallest class count of the
/// cross_entropy calls its values reach as the label argument, in any function of `m`. A class
/// axis of a named dimension is resolved by `dims` (unresolved: that call is not counted).
/// Flows the analysis does not follow (through tuples, lists, closures' arguments) only make
/// it miss a call, never invent one: a label it misses is still checked by the kernel at run
/// time.
std::map<FieldKey, LabelClasses> label_classes(const ir::Module& m,
                                               const std::vector<FieldKey>& fields,
                                               const interp::DimBindings& dims);

} // namespace pejit::runtime
