// The partial evaluator's fragments: recording an inlined call's residual and replaying it
// (PeBackend's inline_begin/inline_end, the evaluator's memo of inlined calls). The design
// note, with the conditions under which a replay is exact, is at the top of partial_eval.cpp.
#include "specializer/pe_backend.h"

// GCC 12 reports a std::string copy inlined into the flattened replay() as a memcpy of 2^63
// bytes that may overlap (-Wrestrict): a known false positive of its range analysis after
// inlining; no string here is that long or overlaps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace pejit::specializer::pe {

[[gnu::flatten]] int32_t PeBackend::inline_memo(const ir::FnDecl& f, int fn_index,
                                                const Values& args, int depth_left, Values& out,
                                                bool flat) {
  if (!frags_)
    return -1;
  int8_t& cand = memo_fn_[static_cast<size_t>(fn_index)];
  if (cand < 0)
    cand = memo_candidate(f) && !random_fns()[static_cast<size_t>(fn_index)] ? 1 : 0;
  if (!cand)
    return -1;
  // The key, and the arguments as a replay sees them (frames_[frame, ...)).
  fkey_.clear();
  fkey_.push_back(fn_index);
  const size_t frame = frames_.size();
  for (size_t i = 0; i < f.params.size(); ++i) {
    const Value& a = args[i];
    switch (f.params[i].type->kind) {
    case ir::TypeKind::Int:
      fkey_.push_back(a.as_int());
      break;
    case ir::TypeKind::Bool:
      fkey_.push_back(a.as_bool() ? 1 : 0);
      break;
    case ir::TypeKind::Tensor:
      if (is_const(a) || rv(a).sum >= 0)
        return drop_frame(frame);
      // A parameter is keyed as itself: an op on it makes another template than on a per-row
      // value (Template::param_args), so a replay must not mix the two.
      fkey_.push_back(rv(a).ref.kind == Ref::Kind::Param ? -1 - int64_t{rv(a).ref.index}
                                                         : int64_t{rv(a).sig});
      frames_.push_back(FrameArg{rv(a).ref, 0, false});
      break;
    default: {
      const PoolNode* p = nullptr;
      if (a.kind() == Value::Kind::Adt || a.kind() == Value::Kind::Tuple)
        p = pool_->find(&a.items());
      if (!p || !p->known)
        return drop_frame(frame);
      fkey_.push_back(static_cast<int64_t>(p->h1));
      fkey_.push_back(static_cast<int64_t>(p->h2));
      frames_.push_back(FrameArg{Ref{Ref::Kind::Input, p->first_slot, 0}, p->slots, true});
    }
    }
  }
  FragmentMemo& fm = *frags_;
  using State = FragmentMemo::Fragment::State;
  int32_t id = -1;
  if (fm.full) { // replays what it holds; records nothing
    id = fm.keys.find(fkey_);
    if (id < 0 || fm.fragments[static_cast<size_t>(id)].state != State::Ok)
      return drop_frame(frame);
  } else {
    auto [at, fresh] = fm.keys.emplace(fkey_, static_cast<int32_t>(fm.fragments.size()));
    id = at;
    if (fresh)
      fm.fragments.emplace_back();
  }
  const FragmentMemo::Fragment& fr = fm.fragments[static_cast<size_t>(id)];
  if (fr.state == State::Ok) {
    // Taken only where the evaluation would stay within the bounds: else it runs, and
    // refuses or fails where it would have.
    if (used_ + fr.fuel > fuel_ || fr.depth > depth_left)
      return drop_frame(frame);
    int64_t uid = -1;
    if (!recs_.empty()) {
      uid = ++call_uids_;
      raw_.push_back(RawStep{
          FragmentMemo::Step::Kind::Call, id, static_cast<int32_t>(res_.instances.size()),
          static_cast<uint32_t>(frame), static_cast<uint32_t>(frames_.size() - frame), uid});
    }
    replay_call(id, frame, out, flat, uid);
    ++replayed_;
    replayed_instances_ += fr.instances;
    used_ += fr.fuel;
    if (recs_.empty())
      frames_.resize(frame);
    return interp::kInlineReplayed;
  }
  if (fr.state == State::No || (fr.state == State::Recording && fr.run == fm.run) ||
      !recordable(frame))
    return drop_frame(frame);
  FragmentMemo::Fragment& w = fm.fragments[static_cast<size_t>(id)];
  w.state = State::Recording;
  w.run = fm.run;
  recs_.push_back(Rec{id, static_cast<uint32_t>(res_.instances.size()), used_, raw_.size(), frame,
                      static_cast<uint32_t>(frames_.size() - frame)});
  if (f.params.size() == 1 && fkey_.size() == 3)
    prefetch_child_keys(fn_index, args[0]);
  return static_cast<int32_t>(recs_.size() - 1);
}

// A recursion over a structure (a tree encoder) calls itself on the node's children next: the
// lookups of those calls' keys (the same function on each child's skeleton) miss the cache
// (the memo's table is megabytes), so ask for their slots now, while the body is evaluated.
// Only a hint: a call of another form looks its key up as any other.
void PeBackend::prefetch_child_keys(int fn_index, const Value& node) {
  int64_t key[3] = {fn_index, 0, 0};
  for (const Value& x : node.items()) {
    if (x.kind() != Value::Kind::Adt && x.kind() != Value::Kind::Tuple)
      continue;
    const PoolNode* p = pool_->find(&x.items());
    if (!p || !p->known)
      continue;
    key[1] = static_cast<int64_t>(p->h1);
    key[2] = static_cast<int64_t>(p->h2);
    frags_->keys.prefetch(key);
  }
}

void PeBackend::inline_end(int32_t token, const Value* results, size_t n, bool flat, int depth) {
  PEJIT_CHECK(token == static_cast<int32_t>(recs_.size()) - 1) << "fragments out of order";
  const Rec r = recs_.back();
  recs_.pop_back();
  FragmentMemo& fm = *frags_;
  const size_t s0 = fm.steps.size(), r0 = fm.refs.size(), n0 = fm.nodes.size(),
               t0 = fm.tensors.size();
  sum_ids_.clear();
  call_of_.clear();
  for (size_t i = r.first_raw; i < raw_.size(); ++i)
    if (raw_[i].kind == FragmentMemo::Step::Kind::Call && !inlined(raw_[i].id))
      call_of_.push_back(raw_[i].uid);
  bool ok = convert_steps(r);
  if (ok && flat)
    fm.nodes.push_back(
        FragmentMemo::Node{FragmentMemo::Node::Kind::Tuple, 0, static_cast<int32_t>(n), -1, 0});
  for (size_t i = 0; i < n && ok; ++i)
    ok = describe(results[i], r);
  FragmentMemo::Fragment& fr = fm.fragments[static_cast<size_t>(r.frag)];
  if (ok) {
    fr.state = FragmentMemo::Fragment::State::Ok;
    ++recorded_;
    fr.first_step = static_cast<uint32_t>(s0);
    fr.num_steps = static_cast<uint32_t>(fm.steps.size() - s0);
    fr.first_node = static_cast<uint32_t>(n0);
    fr.num_nodes = static_cast<uint32_t>(fm.nodes.size() - n0);
    fr.instances = static_cast<uint32_t>(res_.instances.size() - r.i0);
    fr.num_sums = static_cast<uint32_t>(sum_ids_.size());
    fr.fuel = used_ - r.used0;
    fr.depth = depth;
    fr.flat = fr.num_sums == 0 && fr.num_steps <= kInlineSteps &&
              std::all_of(fm.steps.begin() + static_cast<ptrdiff_t>(s0), fm.steps.end(),
                          [](const FragmentMemo::Step& st) {
                            return st.kind == FragmentMemo::Step::Kind::Inst;
                          });
  } else {
    fm.steps.resize(s0);
    fm.refs.resize(r0);
    fm.nodes.resize(n0);
    fm.tensors.resize(t0);
    fr.state = FragmentMemo::Fragment::State::No;
  }
  if (!recs_.empty()) {
    if (ok) { // the enclosing recording replays it; a failed one's steps become its own
      raw_.resize(r.first_raw);
      int64_t uid = ++call_uids_;
      raw_.push_back(RawStep{FragmentMemo::Step::Kind::Call, r.frag, static_cast<int32_t>(r.i0),
                             static_cast<uint32_t>(r.frame), r.num_frame, uid});
      for (const auto& [rid, k] : sum_ids_) { // its result's pending sums, as describe saw them
        SumPart& p = parts_[static_cast<size_t>(rvals_[static_cast<size_t>(rid)].sum)];
        p.origin = uid;
        p.tag = k;
      }
    }
  } else {
    raw_.clear();
    frames_.resize(r.frame);
  }
}

bool PeBackend::recordable(size_t frame) const {
  for (size_t i = frame; i < frames_.size(); ++i) {
    const FrameArg& a = frames_[i];
    for (size_t j = frame; j < i; ++j) {
      const FrameArg& b = frames_[j];
      if (a.structured && b.structured) {
        if (a.slots && b.slots && a.ref.index < b.ref.index + b.slots &&
            b.ref.index < a.ref.index + a.slots)
          return false;
      } else if (!a.structured && !b.structured) {
        if (a.ref == b.ref)
          return false;
      } else {
        const FrameArg& s = a.structured ? a : b;
        const FrameArg& d = a.structured ? b : a;
        if (d.ref.kind == Ref::Kind::Input && d.ref.index >= s.ref.index &&
            d.ref.index < s.ref.index + s.slots)
          return false;
      }
    }
    if (!a.structured && a.ref.kind != Ref::Kind::Inst && a.ref.kind != Ref::Kind::Input)
      return false;
  }
  return true;
}

bool PeBackend::local(const Ref& a, const Rec& r, LocalRef& out) const {
  using K = LocalRef::Kind;
  switch (a.kind) {
  case Ref::Kind::Inst:
    if (a.index >= static_cast<int32_t>(r.i0)) {
      out = LocalRef{K::Inst, a.index - static_cast<int32_t>(r.i0), a.out};
      return true;
    }
    break;
  case Ref::Kind::Input:
    for (uint32_t k = 0; k < r.num_frame; ++k) {
      const FrameArg& f = frames_[r.frame + k];
      if (f.structured && a.index >= f.ref.index && a.index < f.ref.index + f.slots) {
        out = LocalRef{K::Slot, a.index - f.ref.index, static_cast<int32_t>(k)};
        return true;
      }
    }
    break;
  case Ref::Kind::Param:
    out = LocalRef{K::Param, a.index, 0};
    return true;
  case Ref::Kind::Const:
    for (size_t c = 0; c < local_consts_.size(); ++c)
      if (local_consts_[c] == a.index) {
        out = LocalRef{K::Const, static_cast<int32_t>(c), 0};
        return true;
      }
    return false;
  }
  for (uint32_t k = 0; k < r.num_frame; ++k) {
    const FrameArg& f = frames_[r.frame + k];
    if (!f.structured && f.ref == a) {
      out = LocalRef{K::Arg, static_cast<int32_t>(k), 0};
      return true;
    }
  }
  return false;
}

[[gnu::flatten]] bool PeBackend::convert_steps(const Rec& r) {
  FragmentMemo& fm = *frags_;
  using K = FragmentMemo::Step::Kind;
  local_consts_.clear();
  for (size_t i = r.first_raw; i < raw_.size(); ++i) {
    const RawStep rs = raw_[i];
    FragmentMemo::Step st{rs.kind, rs.id, -1, static_cast<uint32_t>(fm.refs.size()), 0};
    if (rs.kind == K::Const) {
      if (std::find(local_consts_.begin(), local_consts_.end(), rs.id) != local_consts_.end())
        continue;
      local_consts_.push_back(rs.id);
      st.id = static_cast<int32_t>(fm.tensors.size());
      fm.tensors.push_back(res_.consts[static_cast<size_t>(rs.id)]);
    } else if (rs.kind == K::Inst) {
      if (!convert_inst(r, rs.id, rs.sig, st))
        return false;
    } else if (inlined(rs.id)) {
      // The callee's instances as this fragment's own (they are in the residual from rs.sig
      // on, one per step of the callee), so that a replay does not jump to the callee.
      const FragmentMemo::Fragment& callee = fm.fragments[static_cast<size_t>(rs.id)];
      for (uint32_t k = 0; k < callee.num_steps; ++k) {
        FragmentMemo::Step in{K::Inst, 0, -1, static_cast<uint32_t>(fm.refs.size()), 0};
        if (!convert_inst(r, rs.sig + static_cast<int32_t>(k),
                          fm.steps[callee.first_step + k].sum_sig, in))
          return false;
        in.count = static_cast<uint32_t>(fm.refs.size() - in.first);
        fm.steps.push_back(in);
      }
      continue;
    } else {
      const FragmentMemo::Fragment& callee = fm.fragments[static_cast<size_t>(rs.id)];
      st.callee_step = callee.first_step;
      st.callee_ref = callee.num_steps ? fm.steps[callee.first_step].first : 0;
      for (uint32_t k = 0; k < rs.count; ++k) {
        const FrameArg& f = frames_[rs.first + k];
        LocalRef l{LocalRef::Kind::Slot, 0, -1}; // no payloads: any slot
        if (!f.structured) {
          if (!local(f.ref, r, l))
            return false;
        } else if (f.slots > 0) {
          if (!local(f.ref, r, l) || l.kind != LocalRef::Kind::Slot ||
              !within(frames_[r.frame + static_cast<size_t>(l.aux)], f))
            return false;
        }
        fm.refs.push_back(l);
      }
    }
    st.count = static_cast<uint32_t>(fm.refs.size() - st.first);
    fm.steps.push_back(st);
  }
  return true;
}

bool PeBackend::convert_inst(const Rec& r, int32_t index, int32_t sum_sig, FragmentMemo::Step& st) {
  const Instance& inst = res_.instances[static_cast<size_t>(index)];
  st.id = inst.tmpl;
  st.sum_sig = sum_sig;
  for (const Ref& a : res_.args(inst)) {
    LocalRef l;
    if (!local(a, r, l))
      return false;
    frags_->refs.push_back(l);
  }
  return true;
}

bool PeBackend::inlined(int32_t frag) const {
  const FragmentMemo::Fragment& c = frags_->fragments[static_cast<size_t>(frag)];
  return c.state == FragmentMemo::Fragment::State::Ok && c.flat;
}

bool PeBackend::describe(const Value& v, const Rec& r) {
  FragmentMemo& fm = *frags_;
  using N = FragmentMemo::Node;
  switch (v.kind()) {
  case Value::Kind::Int:
  case Value::Kind::Bool:
    fm.nodes.push_back(N{v.kind() == Value::Kind::Int ? N::Kind::Int : N::Kind::Bool, 0, 0, -1,
                         v.kind() == Value::Kind::Int ? v.as_int() : v.as_bool()});
    return true;
  case Value::Kind::Tensor: {
    if (is_const(v)) {
      fm.nodes.push_back(N{N::Kind::Value, 0, 0, -1, static_cast<int64_t>(fm.tensors.size())});
      fm.tensors.push_back(v.as_tensor());
      return true;
    }
    const RVal& rvl = rv(v);
    N nd{N::Kind::Ref, 0, 0, rvl.sig, static_cast<int64_t>(fm.refs.size())};
    if (rvl.sum < 0) {
      LocalRef l;
      if (!local(rvl.ref, r, l))
        return false;
      fm.refs.push_back(l);
      fm.nodes.push_back(nd);
      return true;
    }
    nd.kind = N::Kind::Sum;
    for (const auto& [rid, k] : sum_ids_)
      if (rid == v.tape_id()) { // the same pending sum again: one on replay too
        nd.tag = k;
        fm.nodes.push_back(nd);
        return true;
      }
    nd.tag = static_cast<int32_t>(sum_ids_.size());
    sum_ids_.emplace_back(v.tape_id(), nd.tag);
    if (!describe_sum(rvl.sum, r))
      return false;
    nd.n = static_cast<int32_t>(fm.refs.size() - static_cast<size_t>(nd.v));
    fm.nodes.push_back(nd);
    return true;
  }
  case Value::Kind::Tuple:
  case Value::Kind::Adt:
  case Value::Kind::List: {
    bool list = v.kind() == Value::Kind::List;
    size_t n = list ? v.list_size() : v.items().size();
    fm.nodes.push_back(N{v.kind() == Value::Kind::Tuple ? N::Kind::Tuple
                         : list                         ? N::Kind::List
                                                        : N::Kind::Adt,
                         list || v.kind() == Value::Kind::Tuple ? 0 : v.tag(),
                         static_cast<int32_t>(n), -1, 0});
    for (size_t i = 0; i < n; ++i)
      if (!describe(list ? v.list_at(i) : v.items()[i], r))
        return false;
    return true;
  }
  default:
    return false;
  }
}

[[gnu::flatten]] void PeBackend::replay(int32_t id, size_t frame, size_t c0) {
  const FragmentMemo& fm = *frags_;
  const FragmentMemo::Fragment& fr = fm.fragments[static_cast<size_t>(id)];
  const uint32_t i0 = static_cast<uint32_t>(res_.instances.size());
  const size_t calls0 = rcalls_.size(), sums0 = rsums_.size();
  const FragmentMemo::Step* st = fm.steps.data() + fr.first_step;
  // The memo is megabytes, read here at random: ask for the nested calls' records, steps and
  // references (and their result nodes, in replay's first lines) before walking the first of
  // them, so that their misses overlap.
  if (fr.num_nodes)
    __builtin_prefetch(fm.nodes.data() + fr.first_node);
  for (uint32_t k = 0; k < fr.num_steps; ++k)
    if (st[k].kind == FragmentMemo::Step::Kind::Call) {
      __builtin_prefetch(fm.fragments.data() + st[k].id);
      const char* cs = reinterpret_cast<const char*>(fm.steps.data() + st[k].callee_step);
      __builtin_prefetch(cs);
      __builtin_prefetch(cs + 64);
      const char* cr = reinterpret_cast<const char*>(fm.refs.data() + st[k].callee_ref);
      __builtin_prefetch(cr);
      __builtin_prefetch(cr + 64);
      __builtin_prefetch(cr + 128);
    }
  for (uint32_t k = 0; k < fr.num_steps; ++k, ++st) {
    const LocalRef* refs = fm.refs.data() + st->first;
    switch (st->kind) {
    case FragmentMemo::Step::Kind::Const:
      rconsts_.push_back(const_ref(fm.tensors[static_cast<size_t>(st->id)]).index);
      break;
    case FragmentMemo::Step::Kind::Inst: {
      Instance& inst = res_.instances.emplace_back();
      inst.tmpl = st->id;
      inst.first_arg = static_cast<uint32_t>(res_.arg_pool.size());
      inst.num_args = st->count;
      if (st->id == Instance::kSumN) {
        inst.sum_sig = static_cast<int32_t>(res_.sum_sigs.size());
        res_.sum_sigs.push_back(memo_.sigs[static_cast<size_t>(st->sum_sig)]);
      }
      for (uint32_t a = 0; a < st->count; ++a)
        res_.arg_pool.push_back(resolve(refs[a], i0, frame, c0));
      break;
    }
    case FragmentMemo::Step::Kind::Call: {
      size_t child = frames_.size();
      for (uint32_t a = 0; a < st->count; ++a)
        frames_.push_back(FrameArg{resolve(refs[a], i0, frame, c0), 0, false});
      size_t cc = rconsts_.size();
      rcalls_.push_back(rsums_.size());
      replay(st->id, child, cc);
      rconsts_.resize(cc);
      frames_.resize(child);
      break;
    }
    }
  }
  PEJIT_CHECK(res_.instances.size() - i0 == fr.instances) << "fragment replayed unequal";
  // Its result's pending sums replace its nested calls' on rsums_.
  if (fr.num_sums)
    build_sums(fr, i0, frame, c0, calls0);
  rcalls_.resize(calls0);
  rsums_.resize(sums0);
  if (fr.num_sums)
    rsums_.insert(rsums_.end(), sum_tmp_.end() - fr.num_sums, sum_tmp_.end());
  sum_tmp_.resize(sum_tmp_.size() - fr.num_sums);
}

[[gnu::flatten]] void PeBackend::build_sums(const FragmentMemo::Fragment& fr, uint32_t i0,
                                            size_t frame, size_t c0, size_t calls0) {
  const FragmentMemo& fm = *frags_;
  const FragmentMemo::Node* nd = fm.nodes.data() + fr.first_node;
  for (uint32_t k = 0; k < fr.num_nodes; ++k, ++nd) {
    if (nd->kind != FragmentMemo::Node::Kind::Sum || nd->n == 0)
      continue;
    // The terms in order: runs of own terms as one range part each, nested sums as they are.
    int32_t part = -1;
    auto add = [&](int32_t p) { part = part < 0 ? p : join(part, p); };
    const LocalRef* refs = fm.refs.data() + nd->v;
    for (int32_t i = 0; i < nd->n;) {
      if (refs[i].kind == LocalRef::Kind::SumOf) {
        size_t at = rcalls_[calls0 + static_cast<size_t>(refs[i].index)];
        add(rsums_[at + static_cast<size_t>(refs[i].aux)]);
        ++i;
        continue;
      }
      int32_t t0 = static_cast<int32_t>(terms_.size());
      for (; i < nd->n && refs[i].kind != LocalRef::Kind::SumOf; ++i)
        terms_.push_back(resolve(refs[i], i0, frame, c0));
      parts_.push_back(
          SumPart{-2, t0, Ref{Ref::Kind::Const, static_cast<int32_t>(terms_.size()) - t0, 0}});
      add(static_cast<int32_t>(parts_.size() - 1));
    }
    sum_tmp_.push_back(part);
  }
}

bool PeBackend::describe_sum(int32_t part, const Rec& r) {
  stack_.clear();
  stack_.push_back(part);
  while (!stack_.empty()) {
    const SumPart& p = parts_[static_cast<size_t>(stack_.back())];
    stack_.pop_back();
    bool named = false;
    if (p.origin >= 0) // a nested call's pending sum: named, not copied
      for (size_t c = 0; c < call_of_.size() && !named; ++c)
        if (call_of_[c] == p.origin) {
          frags_->refs.push_back(LocalRef{LocalRef::Kind::SumOf, static_cast<int32_t>(c), p.tag});
          named = true;
        }
    if (named)
      continue;
    LocalRef l;
    if (p.l == -1) {
      if (!local(p.leaf, r, l))
        return false;
      frags_->refs.push_back(l);
    } else if (p.l == -2) {
      for (int32_t i = 0; i < p.leaf.index; ++i) {
        if (!local(terms_[static_cast<size_t>(p.r + i)], r, l))
          return false;
        frags_->refs.push_back(l);
      }
    } else {
      stack_.push_back(p.r);
      stack_.push_back(p.l);
    }
  }
  return true;
}

void PeBackend::replay_call(int32_t id, size_t frame, Values& out, bool flat, int64_t uid) {
  replaying_ = true;
  const uint32_t i0 = static_cast<uint32_t>(res_.instances.size());
  const size_t c0 = rconsts_.size();
  const size_t sums0 = rsums_.size();
  replay(id, frame, c0);
  const FragmentMemo::Fragment& fr = frags_->fragments[static_cast<size_t>(id)];
  if (uid >= 0) // an enclosing recording names these sums by its Call step
    tag_sums(sums0, fr.num_sums, uid);
  sums_built_.assign(fr.num_sums, -1);
  sums0_ = sums0;
  size_t node = fr.first_node;
  if (flat) {
    const FragmentMemo::Node& t = frags_->nodes[node++];
    PEJIT_CHECK(t.kind == FragmentMemo::Node::Kind::Tuple) << "flat result of no tuple";
    for (int32_t k = 0; k < t.n; ++k)
      out.push_back(rebuild_result(node, i0, frame, c0));
  } else {
    out.push_back(rebuild_result(node, i0, frame, c0));
  }
  rconsts_.resize(c0);
  rsums_.resize(sums0);
  replaying_ = false;
}

Value PeBackend::rebuild_result(size_t& node, uint32_t i0, size_t frame, size_t c0) {
  const FragmentMemo& fm = *frags_;
  const FragmentMemo::Node nd = fm.nodes[node++];
  using N = FragmentMemo::Node;
  switch (nd.kind) {
  case N::Kind::Int:
    return Value::integer(nd.v);
  case N::Kind::Bool:
    return Value::boolean(nd.v != 0);
  case N::Kind::Value:
    return Value::tensor(fm.tensors[static_cast<size_t>(nd.v)]);
  case N::Kind::Ref:
    return residual(resolve(fm.refs[static_cast<size_t>(nd.v)], i0, frame, c0), nd.sig);
  case N::Kind::Sum: {
    int32_t& built = sums_built_[static_cast<size_t>(nd.tag)];
    if (built >= 0)
      return Value::undefined_tensor(built);
    Value s = sum_value(rsums_[sums0_ + static_cast<size_t>(nd.tag)], nd.sig);
    built = s.tape_id();
    return s;
  }
  default: {
    Values xs;
    xs.reserve(static_cast<size_t>(nd.n));
    for (int32_t k = 0; k < nd.n; ++k)
      xs.push_back(rebuild_result(node, i0, frame, c0));
    if (nd.kind == N::Kind::Tuple)
      return Value::tuple(std::move(xs));
    if (nd.kind == N::Kind::List)
      return Value::list(std::move(xs));
    return Value::adt(nd.tag, std::move(xs));
  }
  }
}

} // namespace pejit::specializer::pe
