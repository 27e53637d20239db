// Lowering: a template graph's fused kernels to a KernelProgram (specializer/kernel_program.h),
// the backend-neutral description of the kernels that compute them on all rows of a group.
//
// Design note.
// - Row classes, decided once per graph (classify_rows): a node is Shared, Rows or Summed.
//   Each op has a rule saying which classes it takes and how its operands line up (a per-row
//   value of lower rank is expanded after the row axis; axis attributes shift by one). A graph
//   with a node no rule covers is not supported: an executor runs that template through the
//   batching interpreter instead (KernelProgram::why).
// - Kernel steps (with LowerOptions::kernels): a fused kernel's maximal runs of f32
//   elementwise nodes over rows of one width get a JIT kernel spec each (the gate epilogue of
//   a TreeLSTM cell, its backward chain). Cross-entropy and its backward, the sums over the
//   rows and the reductions along each row get a row-reduction spec each. Every other node
//   (GEMMs through the library, layout ops, other reductions) is a reference step.
// - Panels: a run that reads the rows of an x·W (its gate epilogue), or whose output is the
//   dY of a dY·W^T (its gate-gradient chain), gets a GEMM core: the executor's panel kernel
//   walks the rows in panels of 48, gathers per panel the rows the GEMM reads (and the chain's
//   ungathered argument rows), computes those rows of the product and runs the chain on them.
// - Weight gradients x^T·gy that are a parameter's whole gradient are deferrable: a caller
//   sums every group's rows in one TN GEMM per weight. The embedding gradient (a TakeGrad of
//   per-row ids) stays row-sparse.
// - A take of per-row ids from a shared table (the embedding lookup, in a function body or as
//   the op template `take(emb, w)`, whose table is a parameter it reads: Template::param_args)
//   is a row gather, written straight into the caller's block when it is a result.
// Not handled (not supported): arguments shared by all rows of a group other than a
// parameter an op template reads, matmuls whose per-row operand is a matrix, take from a
// per-row table, gathers/scatters inside a template.
#pragma once

#include "specializer/kernel_program.h"
#include "specializer/template_graph.h"

namespace pejit::specializer::passes {

/// The kernel program of `tg` (its graph fused: tg.fwd_kernels and tg.bwd_kernels).
KernelProgram lower(const TemplateGraph& tg, const LowerOptions& opt = {});

} // namespace pejit::specializer::passes
