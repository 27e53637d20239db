// The partial evaluator's entry point (one walk over the batch, then the shared evaluator
// over PeBackend, specializer/pe_backend.h) and the skeleton hash. See the design note in
// partial_eval.h; fragments, the memo of inlined calls, have theirs here.
//
// Design note: fragments (polyvariant specialization of inlined calls; pe_backend.h,
// pe_fragments.cpp, fragments.h).
// - What: a call of a function that is not a template (a tree encoder, a loss over a subtree)
//   is evaluated inline; the instances, constants and nested calls it produced are kept as a
//   fragment (specializer/fragments.h) under the key (function, its Int/Bool arguments, the
//   skeleton of each structured argument, the signature id of each tensor argument).
//   The same call later, on a node of any batch with that key, is replayed: its instances are
//   appended with instance numbers, input slots, constants and tensor arguments renumbered, and
//   its result is rebuilt, without running the evaluator. SST subtrees repeat heavily (every
//   leaf, most small subtrees), so most of a shuffled batch is replayed.
// - Why it is exact: a call's evaluation reads only its arguments and the module (no globals
//   but parameters, no mutation, no closures among the arguments), and of its arguments the
//   partial evaluator inspects only structure (tags, Int/Bool fields, list lengths, payload
//   signatures: the skeleton), never payload contents (they are residual: control flow on
//   them is a refusal). The module state and dimension binding are the memo's stamp (PeMemo),
//   so a changed definition drops every fragment. A replay appends exactly the instances, in
//   the same order, the evaluation would have, spends the same fuel, and is taken only where
//   the evaluation would have stayed within the fuel and depth bounds; otherwise the call is
//   evaluated (and then refuses or fails at the same place as without the memo).
// - When it applies (else the call is evaluated as before): a replay needs every structured
//   argument to be a Tuple or ADT node of the batch itself (a PoolNode: its payloads are the
//   consecutive input slots BatchScan gave them), every tensor argument a residual that is not
//   a pending sum (a constant could steer control flow; a pending sum would be materialized
//   inside). Recording also needs the arguments to be told apart unambiguously: structured
//   arguments over disjoint payloads, tensor arguments that are distinct instance results or
//   input slots outside them. A result holding a closure is not recorded (nor what a refusal or
//   an error interrupted); such a key is remembered as not memoizable.
// - Nested calls: a call met while recording becomes a Call step to its own fragment, and a
//   pending sum in a result names the pending sums of nested calls it contains (SumOf) rather
//   than copying their terms, so a fragment holds only its own work: memory is linear in the
//   distinct subtrees seen, and a replay rebuilds a tree's loss sum in O(1) per node. Terms
//   stay in the order the evaluation gave them, so a SumN made later has the same terms.
//   A flat callee (a few instances and nothing else: the encoder on a leaf) is the exception:
//   its instances are copied in as the caller's own steps, so that a replay does not reach
//   every leaf through its own record (the memory is a few steps per leaf).
// - Skeletons are 128 bits of two independent hashes computed bottom-up as BatchScan walks the
//   batch (no table lookup per node): exact up to a 2^-128-per-pair collision, far below the
//   64-bit skeleton key that already identifies a batch's plan.
// - Bounds: PeOptions::fragment_memo_bytes; past it the memo is full: it records nothing more
//   and replays what it holds, until a window of batches gets less than a quarter of its
//   instances from replays (the data moved on); then it is dropped before the next batch
//   (FragmentMemo::stale).
// - Not handled: List arguments at the top of a call (list tails are views; a recursion over a
//   list is evaluated), Int/Bool-only results are memoized but gain little.
//
// Trees taken whole (BatchScan::take_whole, batch_scan.h). A training set's examples are encoded
// once and come back batch after batch as the same values, whose calls replay. The scan of such a
// tree would walk every node (scattered on the heap, mostly out of cache) to rebuild what only its
// root's replay reads: the root's skeleton and its range of input slots. So the memo keeps,
// per tree of a batch's list scanned in full, that skeleton, its payload and value counts,
// its constructor and type (FragmentMemo::trees, by the address of its items, with a weak
// reference that tells whether that address is still the tree: values are immutable, so a
// live tree is unchanged). A later batch takes such a tree whole: its payloads are numbered as
// the scan would number them (the same slots, in the same order), its values counted for the
// fuel, and its node gets placeholder items that nothing may read. That holds because:
// - the entry hands each tree only to calls of global functions (trees_taken_whole, checked
//   on the entry's code: `map(g, batch)`, or a lambda passing its tree only as a call's
//   argument), so the only reader of a tree is inline_begin;
// - inline_begin replays the call (a replay reads the skeleton and the slots, never the
//   items) or, where it would not, throws LazyTree before the body runs: the batch is then
//   evaluated again with every tree scanned, and this memo takes no tree whole any more.
// Only for the engine's partial evaluations (the skeleton given, no payload copies kept).
#include "specializer/partial_eval.h"

#include "specializer/batch_scan.h"
#include "specializer/pe_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

namespace pejit::specializer {

using interp::Value;
using interp::Values;
using pe::flatten_type;
using pe::NodePool;
using pe::PeBackend;
using pe::PoolNode;
using pe::Refused;
using pe::sig_of;
using pe::tensors_only;
using util::hash_mix;

namespace {

uint64_t hash_str(uint64_t h, const std::string& s) {
  for (char c : s)
    h = hash_mix(h, static_cast<uint8_t>(c));
  return hash_mix(h, s.size());
}

void hash_value(uint64_t& h, const Value& v, size_t& count) {
  ++count;
  h = hash_mix(h, static_cast<uint64_t>(v.kind()));
  switch (v.kind()) {
  case Value::Kind::Int:
  case Value::Kind::Bool:
    h = hash_mix(h, static_cast<uint64_t>(v.kind() == Value::Kind::Int ? v.as_int() : v.as_bool()));
    break;
  case Value::Kind::Tensor: {
    h = pe::mix_tensor_sig(h, v.as_tensor());
    break;
  }
  case Value::Kind::Tuple:
  case Value::Kind::Adt:
    if (v.kind() == Value::Kind::Adt)
      h = hash_mix(h, static_cast<uint64_t>(v.tag()));
    h = hash_mix(h, v.items().size());
    for (const auto& x : v.items())
      hash_value(h, x, count);
    break;
  case Value::Kind::List:
    h = hash_mix(h, v.list_size());
    for (size_t i = 0; i < v.list_size(); ++i)
      hash_value(h, v.list_at(i), count);
    break;
  case Value::Kind::Closure:
  case Value::Kind::None:
    break;
  }
}

Value residualize_batch(PeBackend& be, const Value& v) {
  switch (v.kind()) {
  case Value::Kind::Tensor:
    return be.input(v.as_tensor());
  case Value::Kind::Tuple: {
    Values xs;
    for (const auto& x : v.items())
      xs.push_back(residualize_batch(be, x));
    return Value::tuple(std::move(xs));
  }
  case Value::Kind::Adt: {
    Values xs;
    for (const auto& x : v.items())
      xs.push_back(residualize_batch(be, x));
    return Value::adt(v.tag(), std::move(xs));
  }
  case Value::Kind::List: {
    Values xs;
    for (size_t i = 0; i < v.list_size(); ++i)
      xs.push_back(residualize_batch(be, v.list_at(i)));
    return Value::list(std::move(xs));
  }
  default:
    return v;
  }
}

} // namespace

uint64_t skeleton_hash(const Value& batch) {
  uint64_t h = 0x243f6a8885a308d3ull;
  size_t count = 0;
  hash_value(h, batch, count);
  return h;
}

bool is_template_eligible(const ir::FnDecl& f) {
  return interp::template_eligible(f); // the generic path's random contexts use the same rule
}

std::vector<Template> static_templates(const ir::Module& m, const interp::DimBindings& dims) {
  std::vector<Template> out;
  const std::vector<bool> random_ctx = interp::random_context_functions(m);
  for (size_t i = 0; i < m.fns().size(); ++i) {
    const ir::FnDecl& f = *m.fns()[i];
    if (!is_template_eligible(f))
      continue;
    bool all_tensors = true;
    for (const auto& p : f.params)
      all_tensors = all_tensors && p.type->kind == ir::TypeKind::Tensor;
    if (!all_tensors)
      continue;
    Template t; // as PeBackend::call builds it for a call with these argument shapes
    t.kind = Template::Kind::Function;
    t.fn = static_cast<int>(i);
    t.name = f.name;
    for (const auto& p : f.params)
      t.args.push_back(sig_of(p.type, dims));
    std::vector<ir::Type> outs;
    flatten_type(f.ret, outs);
    for (const auto& o : outs)
      t.results.push_back(sig_of(o, dims));
    if (random_ctx[i])
      t.args.push_back(random_key_sig());
    out.push_back(std::move(t));
  }
  return out;
}

namespace {
PeResult partially_evaluate_here(const ir::Module& m, const interp::DimBindings& dims,
                                 const std::string& entry, const Value& batch,
                                 TemplateTable& templates, const PeOptions& opt,
                                 const interp::CallLimit& limit, bool whole);

} // namespace

// The batch's depth is measured first (without recursing) unless the caller gives it: the scan, the
// evaluation and the walks after it run where the native stack has room for it
// (interp/call_limit.h).
PeResult partially_evaluate(const ir::Module& m, const interp::DimBindings& dims,
                            const std::string& entry, const Value& batch, TemplateTable& templates,
                            const PeOptions& opt) {
  const size_t depth =
      opt.depth != PeOptions::kUnknownDepth ? opt.depth : interp::nesting_depth(batch);
  interp::CallLimit limit = interp::CallLimit::of(opt.max_depth, depth, opt.calls_per_level);
  return interp::with_call_limit(limit, [&](const interp::CallLimit& l) {
    try {
      return partially_evaluate_here(m, dims, entry, batch, templates, opt, l, true);
    } catch (const pe::LazyTree&) {
      // A tree taken whole met a call that could not replay: evaluated again, every tree
      // scanned, and none taken whole with this memo any more.
      if (FragmentMemo* fm = templates.pe_memo().fragments.p.get()) {
        fm->trees_off = true;
        fm->trees.clear();
      }
      return partially_evaluate_here(m, dims, entry, batch, templates, opt, l, false);
    }
  });
}

namespace {
PeResult partially_evaluate_here(const ir::Module& m, const interp::DimBindings& dims,
                                 const std::string& entry, const Value& batch,
                                 TemplateTable& templates, const PeOptions& opt,
                                 const interp::CallLimit& limit, bool whole) {
  ops::register_kernels();
  const ir::FnDecl* f = m.fn(entry);
  if (!f || !f->is_entry)
    throw Error("no entry named '" + entry + "' in the module");
  if (f->params.size() != 1)
    throw Error("entry '" + entry + "' must take one argument (the batch) to be specialized");

  // The memo is valid for one module state and dimension binding.
  uint64_t dims_h = 0;
  for (const auto& [name, size] : dims)
    dims_h = hash_mix(hash_str(dims_h, name), static_cast<uint64_t>(size));
  uint64_t stamp = hash_mix(
      hash_mix(hash_mix(0x5bd1e995ull, reinterpret_cast<uintptr_t>(&m)), m.generation()), dims_h);
  PeMemo& memo = templates.pe_memo();
  if (!memo.valid || memo.stamp != stamp)
    memo.reset(stamp);
  uint64_t cone = 0;
  bool have_cone = false;
  for (const auto& [e, v] : memo.cones)
    if (e == entry)
      cone = v, have_cone = true;
  if (!have_cone) {
    cone = m.cone_version(entry); // builds the dependency graph: once per module state
    memo.cones.emplace_back(entry, cone);
  }

  // Fragments, within their memory bound: full past it (nothing more recorded), dropped whole
  // before this batch once stale.
  FragmentMemo* frags = nullptr;
  if (opt.fragment_memo_bytes > 0) {
    auto& fp = memo.fragments.p;
    if (!fp || fp->stale)
      fp = std::make_shared<FragmentMemo>();
    if (!fp->full && fp->bytes() > opt.fragment_memo_bytes)
      fp->full = true;
    frags = fp.get();
    ++frags->run;
  }

  PeResult out;
  std::shared_ptr<NodePool> pool = NodePool::of(memo);
  NodePool::Release release{*pool}; // after every Value below
  std::optional<PeBackend> be(std::in_place, m, dims, templates, out.residual);
  be->set_keep_inputs(opt.keep_inputs);
  be->reserve();
  if (frags)
    be->set_fragments(frags, pool.get());
  const auto scan_start = std::chrono::steady_clock::now();
  // Trees met before are taken whole where nothing but a replayed call can read them.
  whole = whole && frags != nullptr && opt.skeleton.has_value() && !opt.keep_inputs &&
          !frags->trees_off && pe::trees_taken_whole(*f);
  pe::BatchScan scan(*be, m, dims, pool, frags, !opt.skeleton.has_value(), whole);
  Value arg = scan.scan(batch, f->params[0].type);
  out.scan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - scan_start).count();
  uint64_t h = opt.skeleton ? *opt.skeleton : scan.h;
  size_t values = scan.count;
  if (!scan.ok) {
    interp::check_value(batch, f->params[0].type, m, dims, f->params[0].name); // throws
    // The batch is fine after all: the separate walks.
    out.residual = Residual{};
    be.emplace(m, dims, templates, out.residual);
    be->set_keep_inputs(opt.keep_inputs);
    be->reserve();
    if (frags)
      be->set_fragments(frags, pool.get());
    arg = residualize_batch(*be, batch);
    h = skeleton_hash(batch);
    values = 0;
    uint64_t tmp = 0;
    hash_value(tmp, batch, values);
  }
  h = hash_str(h, entry);
  h = hash_mix(h, cone);
  for (const auto& [name, size] : dims)
    h = hash_mix(hash_str(h, name), static_cast<uint64_t>(size));
  out.residual.key = h;

  be->set_fuel(PeOptions::kFuelBase + opt.fuel_per_value * values);
  try {
    interp::Evaluator<PeBackend> ev(m, *be, limit);
    Value result = ev.call_entry(*f, {arg});
    be->collect_outputs(result);
    be->update_hints();
    out.ok = true;
  } catch (const Refused& r) {
    out.ok = false;
    out.where = r.where;
    out.reason = r.reason;
    out.residual.instances.clear();
    out.residual.arg_pool.clear();
    out.residual.sum_sigs.clear();
  }
  out.residual.fuel_used = be->fuel_used();
  out.replayed = be->replayed();
  out.whole_trees = be->lazy_nodes();
  out.recorded = be->recorded();
  if (frags != nullptr && frags->full)
    frags->count_full_run(out.residual.instances.size(), be->replayed_instances());

  return out;
}
} // namespace

} // namespace pejit::specializer
