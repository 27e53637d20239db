// The partial evaluator's output for one batch: an instance DAG over templates. A template is
// a tensor-only function specialized to its static arguments and argument shapes (or a single
// registry op); an instance is one call of a template whose tensor arguments are references
// to batch payloads (input slots), parameters, constants or other instances' results. Sums of
// many residual tensors (losses over nodes and trees) are one n-ary SumN instance.
//
// Invariants: instances are in a topological order (every Ref::Inst points to an earlier
// instance); a template's argument and result shapes are per instance (no batch dimension);
// the DAG and its templates depend only on the batch's static structure, never on payload
// values, so two batches with the same skeleton key have equal DAGs.
#pragma once

#include "specializer/key_map.h"
#include "src/interp/random.h"
#include "src/interp/value.h"
#include "src/ops/op.h"
#include "src/tensor/tensor.h"
#include "src/util/diagnostics.h"

#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace pejit::specializer {

struct FragmentMemo;

/// Where a residual tensor comes from.
struct Ref {
  enum class Kind : uint8_t { Input, Param, Const, Inst };
  Kind kind = Kind::Const;
  int32_t index = -1; ///< Input: slot; Param: module param index; Const: constant; Inst: instance
  int32_t out = 0;    ///< Inst: which result of the instance

  bool operator==(const Ref& o) const { return kind == o.kind && index == o.index && out == o.out; }
};

/// A signature's dimensions: a Shape (inline, at most Shape::kMaxRank, as every tensor's;
/// a plan copies its templates' signatures into each group, and a batch has hundreds of
/// groups), with the part of std::vector's interface that signatures use.
class SigDims : public Shape {
public:
  using Shape::Shape;
  SigDims() = default;
  /// Throws pejit::Error past Shape::kMaxRank dimensions.
  template <std::input_iterator It> SigDims(It b, It e) {
    for (; b != e; ++b)
      push_back(*b);
  }
  size_t size() const { return rank(); }
  bool empty() const { return rank() == 0; }
  int64_t front() const { return (*this)[0]; }
  int64_t back() const { return (*this)[rank() - 1]; }
  const int64_t* data() const { return begin(); }
  operator std::span<const int64_t>() const { return dims(); }
  /// A copy as a vector, for the interfaces that take one.
  std::vector<int64_t> vec() const { return {begin(), end()}; }
};

/// dtype and per-instance dimensions of a tensor.
struct TensorSig {
  DType dtype = DType::F32;
  SigDims dims;
  bool operator==(const TensorSig& o) const { return dtype == o.dtype && dims == o.dims; }
  std::string str() const;
};

/// The signature of a random op's key operand (interp::random_key_tensor): i32[6].
TensorSig random_key_sig();

/// An input slot that holds a random key rather than a batch payload: whoever runs the plan
/// fills it with interp::random_key_tensor(context, index, the step's RandomState)
/// (fill_random_inputs).
struct RandomSlot {
  int32_t slot = -1;
  uint32_t context = 0, index = 0;
};

/// What a template computes. Templates are interned in a TemplateTable, which is shared
/// across batches: the same function at the same static arguments and shapes is one
/// template for the whole run.
struct Template {
  enum class Kind : uint8_t { Function, Op };
  Kind kind = Kind::Function;
  int fn = -1;                  ///< Function: index in the module
  ops::OpId op{};               ///< Op
  ops::Attr attr;               ///< Op
  std::vector<int64_t> statics; ///< Function: values of its Int/Bool parameters, in order
  std::vector<TensorSig> args;  ///< its tensor parameters, in order
  std::vector<TensorSig> results;
  std::string name; ///< "cell", "leaf", "op.take", ...
  /// Op: per argument, the module parameter that argument always is (-1: any value), empty
  /// when none is. An op on a parameter and per-row values (the embedding lookup
  /// `take(emb, w)`) reads the parameter in its template graph, as a function body does,
  /// instead of taking it as an argument shared by every row; the instances still list it.
  std::vector<int32_t> param_args;
  /// Per argument, the constant that argument always is (undefined: any value), empty when
  /// none is. A call or op that passes a small constant beside per-row values (the zero state
  /// `step(x, zeros(64), zeros(64))` of a recurrence, `logits(zeros(64))`) is specialized to
  /// it: its template graph reads the constant, which folding and the lowering treat as any
  /// literal, instead of an argument shared by every row. The instances still list it.
  std::vector<Tensor> const_args;
  /// Op: the call site it was first made for (one template serves every site of its key, so
  /// this is not part of it), named where it is reported; a function's declaration says where
  /// its template is. Unknown: none.
  Span where;

  /// Equal templates have equal keys.
  std::string key() const;
  /// A hash of everything key() covers, without building a string.
  uint64_t hash() const;
  bool same_as(const Template& o) const;
};

/// What the partial evaluator remembers across batches (partial_eval.cpp), so that a call or
/// op it has seen before costs one hash lookup instead of building and interning a Template:
/// interned tensor signatures (small ids), the template and result signatures that each
/// specialization key (callee or op, static arguments, argument signature ids) resolved to,
/// and each entry's Module::cone_version. Valid for one module state and dimension binding
/// (`stamp`: the module's address and generation, and the dims); reset when it changes.
struct PeMemo {
  struct Entry {
    int32_t tmpl;
    uint32_t first, count; ///< its result signature ids: result_sigs[first, first + count)
  };
  uint64_t stamp = 0;
  bool valid = false;
  std::vector<TensorSig> sigs; ///< by signature id
  KeyMap sig_ids;              ///< (dtype, dims...) -> signature id
  KeyMap keys;                 ///< specialization key -> index in entries
  std::vector<Entry> entries;
  std::vector<int32_t> result_sigs;
  std::vector<std::pair<std::string, uint64_t>> cones; ///< entry -> cone version
  /// interp::random_functions and random_context_functions of the module (empty: not yet).
  std::vector<bool> random_fns, random_ctx;
  /// Constants a template is specialized to (Template::const_args), by id: a call's key has
  /// -1 - id for such an argument. Only constants of at most kMaxConstArgBytes are.
  static constexpr size_t kMaxConstArgBytes = 4096;
  KeyMap const_ids; ///< (dtype, dims..., the bytes in 8-byte words) -> id
  std::vector<Tensor> const_vals;
  /// The largest residual seen: what the next batch reserves.
  size_t hint_instances = 0, hint_args = 0, hint_inputs = 0, hint_rvals = 0, hint_parts = 0;
  /// Memory the partial evaluator reuses from batch to batch (BatchScan, batch_scan.h: the vectors
  /// of a batch's rebuilt structure). A copy of the memo starts without it.
  struct Scratch {
    std::shared_ptr<void> p;
    Scratch() = default;
    Scratch(const Scratch&) {}
    Scratch& operator=(const Scratch&) { return *this; }
  } scratch;
  /// Residual fragments of inlined calls (specializer/fragments.h), made on first use. Not
  /// copied either: a copy of the memo replays nothing until it has recorded again.
  struct Fragments {
    std::shared_ptr<FragmentMemo> p;
    Fragments() = default;
    Fragments(const Fragments&) {}
    Fragments& operator=(const Fragments&) { return *this; }
  } fragments;

  std::vector<int64_t> const_key_; ///< const_id's scratch

  void reset(uint64_t new_stamp) {
    *this = PeMemo{}; // keeps scratch and fragments (their assignment does nothing)
    fragments.p.reset();
    stamp = new_stamp;
    valid = true;
  }
  /// The id of constant `t` (interned on first sight); -1 when it is too big to specialize to.
  int32_t const_id(const Tensor& t) {
    if (t.nbytes() > kMaxConstArgBytes)
      return -1;
    const_key_.assign(1, static_cast<int64_t>(t.dtype()));
    for (auto d : t.shape().dims())
      const_key_.push_back(d);
    const size_t at = const_key_.size();
    const_key_.resize(at + (t.nbytes() + 7) / 8, 0);
    std::memcpy(const_key_.data() + at, t.raw(), t.nbytes());
    auto [id, fresh] = const_ids.emplace(const_key_, static_cast<int32_t>(const_vals.size()));
    if (fresh)
      const_vals.push_back(t);
    return id;
  }
  int32_t sig_id(DType dt, std::span<const int64_t> dims) {
    int64_t buf[Shape::kMaxRank + 2];
    std::vector<int64_t> big;
    int64_t* k = buf;
    if (dims.size() + 1 > std::size(buf)) {
      big.resize(dims.size() + 1);
      k = big.data();
    }
    k[0] = static_cast<int64_t>(dt);
    for (size_t i = 0; i < dims.size(); ++i)
      k[i + 1] = dims[i];
    std::span<const int64_t> key(k, dims.size() + 1);
    int32_t id = sig_ids.find(key);
    if (id >= 0)
      return id;
    id = static_cast<int32_t>(sigs.size());
    sig_ids.emplace(key, id);
    sigs.push_back(TensorSig{dt, SigDims(dims.begin(), dims.end())});
    return id;
  }
};

class TemplateTable {
public:
  /// The id of an equal template, adding it first if new.
  int32_t intern(Template t);
  const Template& at(int32_t id) const { return templates_[static_cast<size_t>(id)]; }
  size_t size() const { return templates_.size(); }
  /// The partial evaluator's memo (see PeMemo); it lives here because it caches interned ids.
  PeMemo& pe_memo() { return memo_; }

private:
  std::vector<Template> templates_;
  std::unordered_multimap<uint64_t, int32_t> ids_;
  PeMemo memo_;
};

enum : int64_t {
  kResultTensor = 0,
  kResultTuple = 1,
  kResultList = 2,
  kResultAdt = 3,
  kResultInt = 4,
  kResultBool = 5,
};

/// The entry's result as a Value: `result_shape` with its tensor leaves taken in order from
/// `tensors` (a plan's outputs). Throws pejit::InternalError on a malformed shape.
interp::Value build_result(std::span<const int64_t> result_shape, std::span<const Tensor> tensors);

/// One template call (tmpl >= 0), or an n-ary sum of same-shaped f32 tensors (tmpl == kSumN).
/// Its arguments (a SumN's terms) are a range of the residual's flat argument pool, so that
/// appending an instance allocates nothing (Residual::args).
struct Instance {
  static constexpr int32_t kSumN = -1;
  int32_t tmpl = kSumN;
  uint32_t first_arg = 0, num_args = 0; ///< Residual::arg_pool[first_arg, first_arg + num_args)
  /// kSumN: the shape of every term and of the result, Residual::sum_sigs[sum_sig]. An index,
  /// so that an Instance is 16 bytes: a batch appends thousands, and planning walks them.
  int32_t sum_sig = -1;
};

/// The residual program of one batch.
struct Residual {
  std::vector<Instance> instances;
  std::vector<Ref> arg_pool;       ///< every instance's arguments, in instance order
  std::vector<TensorSig> sum_sigs; ///< SumN instances' signatures (Instance::sum_sig)
  /// Payload tensors of this batch, by input slot (a preorder walk of the batch); empty when
  /// partial evaluation ran without PeOptions::keep_inputs.
  std::vector<Tensor> inputs;
  int32_t num_inputs = 0;     ///< input slots (inputs.size() when they are kept)
  std::vector<Tensor> consts; ///< constants the program folded
  /// Input slots of random keys, after every payload slot (static for a skeleton).
  std::vector<RandomSlot> random_slots;
  /// The entry's result, flattened: one Ref per tensor leaf, in order.
  std::vector<Ref> outputs;
  /// The result's structure in preorder (static for a skeleton): kResultTensor for a tensor
  /// leaf (the next of `outputs`); kResultTuple, n; kResultList, n; kResultAdt, tag, n;
  /// kResultInt, v; kResultBool, v. See build_result.
  std::vector<int64_t> result_shape;
  uint64_t key = 0; ///< skeleton key
  size_t fuel_used = 0;

  /// The arguments of instance `inst` (a SumN's terms), in order.
  std::span<const Ref> args(size_t inst) const { return args(instances[inst]); }
  std::span<const Ref> args(const Instance& i) const {
    return {arg_pool.data() + i.first_arg, i.num_args};
  }
  size_t num_results(const TemplateTable& t, size_t inst) const;
};

/// Sets the random key slots of `r` in `inputs` (resized to r.num_inputs; the payload slots
/// before them are left as they are) for the random state `rs`.
void fill_random_inputs(const Residual& r, const interp::RandomState& rs,
                        std::vector<Tensor>& inputs);

/// What a plan made from `planned` runs on for one batch: that batch's payloads as the inputs
/// (with the random key slots filled for `rs`), and `planned`'s constants, outputs and key. The
/// instance list is left out: a plan runs on its layout (runtime::make_layout), made from the
/// whole residual when the plan was made.
Residual with_payloads(const Residual& planned, std::vector<Tensor> payloads,
                       const interp::RandomState& rs);

} // namespace pejit::specializer
