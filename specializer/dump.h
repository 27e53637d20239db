// Text forms of what specialization made of one batch, for `pejit dump` and golden tests:
// the templates, the instance DAG (one line per instance), and a GraphViz graph of it.
#pragma once

#include "src/ir/module.h"
#include "specializer/plan.h"
#include "specializer/residual.h"

#include <string>

namespace pejit::specializer {

/// Each template once: name, static arguments, argument and result signatures, and how many
/// instances of it this residual program has.
std::string dump_templates(const Residual& r, const TemplateTable& t, const ir::Module& m);
/// `%7 = cell(%3.0, %3.1, %6.0, %6.1)`, inputs as `in#k`, params by name, constants as `c#k`.
std::string dump_instances(const Residual& r, const TemplateTable& t, const ir::Module& m);
/// The instance DAG in GraphViz.
std::string dump_dot(const Residual& r, const TemplateTable& t, const ir::Module& m);
/// Counts: instances, groups and rows per template, bytes of the groups' results.
std::string dump_counts(const Residual& r, const Plan& p, const TemplateTable& t);

} // namespace pejit::specializer
