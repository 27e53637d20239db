// Value numbering of a residual program (merge_instances.h).
#include "specializer/merge_instances.h"

#include "src/util/check.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

namespace pejit::specializer {

using interp::Value;

namespace {

// The payloads in input slot order (the order of the partial evaluator's scan), each with its
// site: the field of the innermost ADT value or tuple that holds it. Payloads are only compared
// within a site (a word with words, a label with labels): equal values at different sites would
// merge nothing useful, and would make the equality pattern, and so the plan key, differ between
// batches for no gain.
template <class F> void each_payload(const Value& v, uint64_t site, F& f) {
  switch (v.kind()) {
  case Value::Kind::Tensor:
    f(v.as_tensor(), site);
    break;
  case Value::Kind::Tuple:
  case Value::Kind::Adt: {
    const uint64_t outer = v.kind() == Value::Kind::Adt
                               ? (uint64_t{2} << 60) | (static_cast<uint64_t>(v.tag()) << 32)
                               : uint64_t{1} << 60;
    const auto& xs = v.items();
    for (size_t fi = 0; fi < xs.size(); ++fi)
      each_payload(xs[fi], outer | fi, f);
    break;
  }
  case Value::Kind::List:
    for (size_t i = 0; i < v.list_size(); ++i)
      each_payload(v.list_at(i), site, f);
    break;
  default:
    break;
  }
}

uint64_t merge_mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0xff51afd7ed558ccdull;
  return h ^ (h >> 29);
}

/// An open-addressing set of ids for the two lookups below: `n` ids at most, the caller's
/// `same` telling whether the id stored is equal to the one looked up (hashes equal).
/// Kept per thread (reset for each use) so that its storage is not allocated per batch; a
/// slot is empty unless it carries the current generation, so that a reset at the same
/// capacity clears nothing.
class IdTable {
public:
  /// Empty, for `n` ids.
  void reset(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n)
      cap *= 2;
    if (cap != slots_.size() || gen_ == UINT32_MAX) {
      slots_.assign(cap, Slot{});
      gen_ = 0;
    }
    ++gen_;
  }
  /// Gives back the storage of a table made for an unusually large batch, so that a thread
  /// does not keep it for the batches after it.
  void trim() {
    if (slots_.size() > kKeptSlots) {
      std::vector<Slot>().swap(slots_);
      gen_ = 0;
    }
  }
  /// The id already stored that `same` accepts, else `id` (stored now).
  template <class Same> int32_t find_or_add(uint64_t h, int32_t id, Same same) {
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.gen != gen_) {
        s = {h, id, gen_};
        return id;
      }
      if (s.hash == h && same(s.id))
        return s.id;
    }
  }

private:
  struct Slot {
    uint64_t hash = 0;
    int32_t id = -1;
    uint32_t gen = 0; ///< the reset it was stored after (0: none)
  };
  static constexpr size_t kKeptSlots = size_t{1} << 17;
  std::vector<Slot> slots_;
  uint32_t gen_ = 0;
};

// The m < 8 bytes at p as one word, by fixed-size loads: a copy of a variable size calls
// memcpy, once per payload (a word id is a 4-byte payload).
inline uint64_t partial_word(const unsigned char* p, size_t m) {
  uint64_t w = 0;
  if (m & 4) {
    uint32_t x;
    std::memcpy(&x, p, 4);
    w = x;
    p += 4;
  }
  if (m & 2) {
    uint16_t x;
    std::memcpy(&x, p, 2);
    w = (w << 16) | x;
    p += 2;
  }
  if (m & 1)
    w = (w << 8) | *p;
  return w;
}

} // namespace

void batch_payloads(const Value& batch, std::vector<Tensor>& out) {
  auto add = [&out](const Tensor& t, uint64_t) { out.push_back(t); };
  each_payload(batch, 0, add);
}

namespace {

// equal_payload_slots over payloads given one at a time: at(i) is payload i and its site.
template <class At> std::vector<int32_t> equal_slots(size_t count, At at) {
  std::vector<int32_t> rep(count);
  thread_local IdTable table;
  table.reset(count);
  for (size_t i = 0; i < count; ++i) {
    const auto [tp, site] = at(i);
    const Tensor& t = *tp;
    uint64_t h = merge_mix(merge_mix(site, static_cast<uint64_t>(t.dtype())), t.rank());
    for (size_t d = 0; d < t.rank(); ++d)
      h = merge_mix(h, static_cast<uint64_t>(t.dim(d)));
    const size_t n = t.nbytes();
    const auto* b = static_cast<const unsigned char*>(t.raw());
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
      uint64_t w;
      std::memcpy(&w, b + k, 8);
      h = merge_mix(h, w);
    }
    if (k < n) // the last partial word
      h = merge_mix(h, partial_word(b + k, n - k));
    rep[i] = table.find_or_add(h, static_cast<int32_t>(i), [&](int32_t j) {
      const auto [u, usite] = at(static_cast<size_t>(j));
      if (usite != site || u->dtype() != t.dtype() || !(u->shape() == t.shape()))
        return false;
      const void* ub = u->raw();
      return n == 0 || ub == b || std::memcmp(ub, b, n) == 0; // the same storage is equal
    });
  }
  table.trim();
  return rep;
}

} // namespace

std::vector<int32_t> equal_payload_slots(const Value& batch) {
  std::vector<std::pair<const Tensor*, uint64_t>> ps;
  auto add = [&ps](const Tensor& t, uint64_t site) { ps.emplace_back(&t, site); };
  each_payload(batch, 0, add);
  return equal_slots(ps.size(), [&ps](size_t i) { return ps[i]; });
}

std::vector<int32_t> equal_payload_slots(const std::vector<Tensor>& payloads,
                                         const std::vector<uint64_t>& sites) {
  PEJIT_CHECK(payloads.size() == sites.size()) << "equal_payload_slots: a site per payload";
  return equal_slots(payloads.size(), [&](size_t i) {
    return std::pair<const Tensor*, uint64_t>(&payloads[i], sites[i]);
  });
}

uint64_t payload_pattern_hash(const std::vector<int32_t>& slots) {
  uint64_t h = 0;
  for (size_t s = 0; s < slots.size(); ++s)
    if (slots[s] != static_cast<int32_t>(s))
      h = merge_mix(h ^ s, static_cast<uint64_t>(slots[s]) + 1);
  return h;
}

size_t merge_equal_instances(Residual& r, const std::vector<int32_t>& slot_rep) {
  const size_t n = r.instances.size();
  // The payload slots come first; the random key slots after them (Residual::random_slots)
  // are their own representatives: two draws are never the same.
  PEJIT_CHECK(slot_rep.size() + r.random_slots.size() == static_cast<size_t>(r.num_inputs))
      << "merge_equal_instances: " << slot_rep.size() << " payloads and " << r.random_slots.size()
      << " random keys for " << r.num_inputs << " input slots";
  // In place: an instance kept moves to the front (its arguments too, canonicalized as they
  // are read); what is kept before instance i (its arguments included) lies before where i
  // is read, so nothing is overwritten before it is read.
  thread_local std::vector<int32_t> renum; // old instance -> its instance in the merged program
  renum.assign(n, -1);
  Instance* const insts = r.instances.data();
  Ref* const pool = r.arg_pool.data();
  auto canon_index = [&](Ref::Kind kind, int32_t index) {
    if (kind == Ref::Kind::Input && static_cast<size_t>(index) < slot_rep.size())
      return slot_rep[static_cast<size_t>(index)];
    if (kind == Ref::Kind::Inst)
      return renum[static_cast<size_t>(index)];
    return index;
  };
  auto canon = [&](Ref a) {
    a.index = canon_index(a.kind, a.index);
    return a;
  };
  thread_local IdTable table;
  table.reset(n);
  size_t kept = 0;
  uint32_t top = 0; // the kept instances' arguments: pool[0, top)
  for (size_t i = 0; i < n; ++i) {
    const Instance in = insts[i];
    PEJIT_CHECK(in.first_arg >= top) << "merge_equal_instances: arguments out of order";
    const uint32_t first = top;
    uint64_t h = merge_mix(static_cast<uint64_t>(in.tmpl), static_cast<uint64_t>(in.sum_sig));
    // Field by field: a Ref rebuilt in a register-sized temporary and read back whole would
    // make the load wait for the stores of its parts (no store forwarding), once per argument.
    for (uint32_t k = 0; k < in.num_args; ++k) {
      const Ref::Kind kind = pool[in.first_arg + k].kind;
      const int32_t out = pool[in.first_arg + k].out;
      const int32_t old = pool[in.first_arg + k].index;
      PEJIT_CHECK(kind != Ref::Kind::Inst || static_cast<size_t>(old) < i)
          << "merge_equal_instances: instance " << i << " reads a later instance";
      const int32_t index = canon_index(kind, old);
      Ref& c = pool[first + k];
      c.kind = kind;
      c.index = index;
      c.out = out;
      h = merge_mix(h, (static_cast<uint64_t>(kind) << 56) ^ (static_cast<uint64_t>(out) << 32) ^
                     static_cast<uint32_t>(index));
    }
    const Instance mine{in.tmpl, first, in.num_args, in.sum_sig};
    int32_t id = table.find_or_add(h, static_cast<int32_t>(kept), [&](int32_t j) {
      const Instance& o = insts[static_cast<size_t>(j)];
      return o.tmpl == mine.tmpl && o.sum_sig == mine.sum_sig && o.num_args == mine.num_args &&
             std::equal(pool + o.first_arg, pool + o.first_arg + o.num_args, pool + first);
    });
    renum[i] = id;
    if (id == static_cast<int32_t>(kept)) { // else: the same arguments as instance `id`
      insts[kept++] = mine;
      top = first + in.num_args;
    }
  }
  for (Ref& o : r.outputs)
    o = canon(o);
  table.trim();
  if (renum.capacity() > (size_t{1} << 20))
    std::vector<int32_t>().swap(renum);
  r.instances.resize(kept);
  r.arg_pool.resize(top);
  return n - kept;
}

} // namespace pejit::specializer
