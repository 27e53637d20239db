// A template's body as a tensor graph (once per model, not per batch): the function traced
// at its static arguments and argument shapes, differentiated, optimized and partitioned into
// fused kernels. This is what the JIT compiles and what a plan's template groups run.
//
// Design note.
// - Tracing: the shared evaluator (interp/evaluator.h) runs the function body once with a
//   backend whose tensors are graph nodes; Int and Bool values are concrete (the template's
//   statics), nested function calls are inlined, control flow on a tensor is an error
//   naming its location (the partial evaluator only makes templates whose control flow is
//   static, so this is a bug or a misuse). One-op templates are one Op node.
// - Input slots: 0..k-1 are the template's tensor arguments; after them, in order of first
//   use, the module parameters the body reads, non-uniform literal tensors (Const slots,
//   values in `consts`), the seeds (incoming gradients of the results) and constants that
//   folding produced. Uniform f32 constants are Const nodes.
// - Backward: the seeded loss sum_r sum(result_r * seed_r) is differentiated (graph AD
//   through the registry's gradient rules) w.r.t. the f32 arguments and parameters; folding
//   then removes what the seeding adds (x*1, broadcasts of constants).
// - Graph outputs: the results, then one gradient per slot in `grad_slots`; every pass
//   keeps that order, and refresh() re-derives the node ids after each rebuild.
// Not handled: list or ADT arguments and results (templates never have them), parameters
// read only by integer code (no gradient), second-order derivatives.
#pragma once

#include "specializer/kernel_program.h"
#include "specializer/passes/fold_constants.h"
#include "specializer/passes/fuse_kernels.h"
#include "specializer/residual.h"
#include "src/graph/graph.h"
#include "src/interp/params.h"

#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace pejit::specializer {

using graph::NodeId;
using passes::Kernel;

/// What one input slot of a template graph holds.
struct InputSlot {
  enum class Role : uint8_t { Arg, Param, Const, Seed };
  Role role = Role::Arg;
  int index = -1; ///< Arg: argument; Param: module parameter; Seed: result; Const: -1
  graph::ShapeType type;
  /// Arg: the module parameter the argument always is (Template::param_args), read through
  /// a Param slot instead; the argument itself is unread and gets no gradient. -1: none.
  int bound_param = -1;
  /// Arg: the argument is always this constant (Template::const_args), read as a literal
  /// instead; the argument itself is unread and gets no gradient. Undefined: none.
  Tensor bound_const{};
};

struct TemplateGraph {
  graph::Graph g;
  std::vector<InputSlot> slots;     ///< by input slot
  std::vector<Tensor> consts;       ///< by input slot: the values of Const slots
  std::vector<uint32_t> grad_slots; ///< slots differentiated for, in output order

  std::vector<NodeId> args;            ///< per tensor argument (slot i); kNoNode once unread
  std::vector<NodeId> params;          ///< per parameter the graph reads
  std::vector<int> param_index;        ///< module parameter of each `params` entry
  std::vector<NodeId> fwd_outputs;     ///< per result
  std::vector<NodeId> seeds;           ///< per result (kNoNode: i32 result, or no backward)
  std::vector<NodeId> bwd_arg_grads;   ///< per argument (kNoNode: i32 argument)
  std::vector<NodeId> bwd_param_grads; ///< per `params` entry
  std::vector<Kernel> fwd_kernels, bwd_kernels;
  std::string name; ///< the template's
  /// The kernels as the lowering pass decided them (the last pass; a graph changed after it
  /// must be lowered again).
  KernelProgram program;

  /// Tensors by input slot for graph::evaluate: `args` by argument, parameters from
  /// `params`, constants, and `seeds` by result (may be empty: forward only).
  std::vector<Tensor> bind_inputs(std::span<const Tensor> args, const interp::Params& params,
                                  std::span<const Tensor> seeds = {}) const;
  /// Re-derives the node ids above from the slots and the graph's outputs (after a rebuild).
  void refresh();
};

struct TemplateOptions {
  bool optimize = true; ///< false: trace, AD and fusion only
  passes::FoldOptions fold;
  /// Passes after which the graph is dumped (template_pass_names(), or "all").
  std::vector<std::string> dump_after;
  std::ostream* dump = nullptr; ///< where dumps go (null: std::cerr)
  bool verify = true;           ///< check the invariants after every pass
  LowerOptions lower;           ///< the last pass's (kernel steps or reference steps only)
  int max_depth = 4000;         ///< nested calls while tracing
};

/// trace -> fold -> cse -> dce -> ad -> fold.bwd -> cse.bwd -> dce.bwd -> fuse -> lower.
const std::vector<std::string>& template_pass_names();

/// The template's graph, traced and differentiated, unoptimized, with its kernels. Throws
/// pejit::Error for control flow on a tensor value (with the location) and for misuse.
TemplateGraph build_template_graph(const ir::Module& m, const interp::DimBindings& dims,
                                   const Template& t);

/// The whole pipeline (see template_pass_names()), dumping and verifying as asked.
TemplateGraph compile_template(const ir::Module& m, const interp::DimBindings& dims,
                               const Template& t, const TemplateOptions& opt = {});

/// Checks a template graph's invariants (slots and types, output layout, kernels: every
/// computed node the outputs need in exactly one kernel, kernels in dependency order);
/// a violation is a bug (PEJIT_CHECK).
void verify_template_graph(const TemplateGraph& tg);

/// The kernels, one per line: "fwd 0: concat+matmul[300x750]+...:f32 (17 nodes)".
std::string print_kernels(const TemplateGraph& tg);

} // namespace pejit::specializer
