// The label flow analysis (label_classes.h). A value's taint is the set of label fields it may
// come from, a bit per field; the walk binds names to taints in scope order (so shadowing is
// exact), gathers the taints of each function's parameters and results over all its call
// sites, and repeats until nothing grows. Model sources are small; the walk recurses on the
// expression but gives up (no pre-check, not a crash) past a fixed nesting.
#include "runtime/train/label_classes.h"

#include <string>

namespace pejit::runtime {

namespace {

using Taint = uint64_t;
using Env = std::map<std::string, Taint>;

constexpr int kMaxNesting = 2000;

class Flow {
public:
  Flow(const ir::Module& m, const std::vector<FieldKey>& fields, const interp::DimBindings& dims)
      : m_(m), fields_(fields), dims_(dims), uses_(fields.size()) {
    for (size_t i = 0; i < fields.size(); ++i)
      bit_[fields[i]] = Taint{1} << i;
  }

  /// False when the analysis gave up (too many fields, too deep a model).
  bool run() {
    if (fields_.empty() || fields_.size() > 64)
      return false;
    const auto& fns = m_.fns();
    params_.assign(fns.size(), {});
    rets_.assign(fns.size(), 0);
    for (size_t f = 0; f < fns.size(); ++f)
      params_[f].assign(fns[f] ? fns[f]->params.size() : 0, 0);
    // Each round either grows a taint (at most 64 bits per parameter and result) or ends.
    for (int round = 0; round < 200; ++round) {
      changed_ = false;
      for (size_t f = 0; f < fns.size(); ++f) {
        if (!fns[f] || !fns[f]->body || !fns[f]->checked)
          continue;
        Env env;
        for (size_t p = 0; p < fns[f]->params.size(); ++p)
          bind(env, fns[f]->params[p].name, params_[f][p]);
        grow(rets_[f], walk(fns[f]->body, env, 0));
        if (too_deep_)
          return false;
      }
      if (!changed_)
        return true;
    }
    return false;
  }

  const std::vector<LabelClasses>& uses() const { return uses_; }

private:
  static void bind(Env& env, const std::string& name, Taint t) {
    if (t)
      env[name] = t;
    else
      env.erase(name);
  }

  void grow(Taint& into, Taint t) {
    if ((into | t) != into) {
      into |= t;
      changed_ = true;
    }
  }

  static void unbind_pattern(Env& env, const ir::Pattern& p) {
    if (p.kind == ir::Pattern::Kind::Name)
      env.erase(p.name);
    for (const auto& q : p.elems)
      unbind_pattern(env, q);
  }

  /// The class count of cross_entropy's logits type (its last axis), or -1.
  int64_t classes_of(const ir::Type& t) const {
    if (!t || t->kind != ir::TypeKind::Tensor || t->dims.empty())
      return -1;
    const ir::Dim& d = t->dims.back();
    if (!d.is_named())
      return d.value;
    auto v = d.eval([&](const std::string& name) -> std::optional<int64_t> {
      auto it = dims_.find(name);
      return it == dims_.end() ? std::nullopt : std::optional<int64_t>(it->second);
    });
    return v ? *v : -1;
  }

  void record(Taint labels, const ir::Expr& logits, const Span& at) {
    int64_t c = classes_of(logits->type);
    if (c < 0)
      return;
    for (size_t i = 0; i < fields_.size(); ++i) {
      if (!(labels >> i & 1))
        continue;
      LabelClasses& u = uses_[i];
      if (u.classes < 0 || c < u.classes)
        u = LabelClasses{c, at};
    }
  }

  Taint walk(const ir::Expr& e, const Env& env, int depth) {
    if (!e || too_deep_)
      return 0;
    if (depth > kMaxNesting) {
      too_deep_ = true;
      return 0;
    }
    const int d = depth + 1;
    switch (e->kind) {
    case ir::ExprKind::IntLit:
    case ir::ExprKind::FloatLit:
    case ir::ExprKind::BoolLit:
      return 0;
    case ir::ExprKind::Var: {
      const auto& v = e->cast<ir::Var>();
      if (v.ref.kind != ir::VarRef::Kind::Local && v.ref.kind != ir::VarRef::Kind::Capture)
        return 0;
      auto it = env.find(v.name);
      return it == env.end() ? 0 : it->second;
    }
    case ir::ExprKind::Call: {
      const auto& c = e->cast<ir::Call>();
      std::vector<Taint> args;
      args.reserve(c.args.size());
      for (const auto& a : c.args)
        args.push_back(walk(a, env, d));
      const auto* callee = c.callee ? c.callee->as<ir::Var>() : nullptr;
      if (!callee)
        walk(c.callee, env, d);
      if (c.ref.kind == ir::VarRef::Kind::Global && c.ref.index >= 0 &&
          static_cast<size_t>(c.ref.index) < params_.size()) {
        auto& ps = params_[static_cast<size_t>(c.ref.index)];
        for (size_t i = 0; i < args.size() && i < ps.size(); ++i)
          grow(ps[i], args[i]);
        return rets_[static_cast<size_t>(c.ref.index)];
      }
      if (c.ref.kind == ir::VarRef::Kind::Op && callee && callee->name == "cross_entropy" &&
          c.args.size() == 2 && args[1])
        record(args[1], c.args[0], e->span);
      return 0;
    }
    case ir::ExprKind::Binary: {
      const auto& b = e->cast<ir::Binary>();
      walk(b.lhs, env, d);
      walk(b.rhs, env, d);
      return 0;
    }
    case ir::ExprKind::Unary:
      walk(e->cast<ir::Unary>().operand, env, d);
      return 0;
    case ir::ExprKind::Tuple:
      for (const auto& x : e->cast<ir::Tuple>().elems)
        walk(x, env, d);
      return 0;
    case ir::ExprKind::Proj:
      walk(e->cast<ir::Proj>().tuple, env, d);
      return 0;
    case ir::ExprKind::ListLit:
      for (const auto& x : e->cast<ir::ListLit>().elems)
        walk(x, env, d);
      return 0;
    case ir::ExprKind::Let: {
      const auto& l = e->cast<ir::Let>();
      Taint v = walk(l.value, env, d);
      Env inner = env;
      unbind_pattern(inner, l.pattern);
      if (l.pattern.kind == ir::Pattern::Kind::Name)
        bind(inner, l.pattern.name, v);
      return walk(l.body, inner, d);
    }
    case ir::ExprKind::If: {
      const auto& i = e->cast<ir::If>();
      walk(i.cond, env, d);
      return walk(i.then_e, env, d) | walk(i.else_e, env, d);
    }
    case ir::ExprKind::Match: {
      const auto& mt = e->cast<ir::Match>();
      walk(mt.scrutinee, env, d);
      const ir::Type& st = mt.scrutinee ? mt.scrutinee->type : nullptr;
      const int adt = st && st->kind == ir::TypeKind::Adt ? m_.adt_index(st->name) : -1;
      Taint out = 0;
      for (const auto& arm : mt.arms) {
        Env inner = env;
        for (size_t b = 0; b < arm.binders.size(); ++b) {
          if (arm.binders[b] == "_")
            continue;
          Taint t = 0;
          if (adt >= 0 && arm.ctor_index >= 0) {
            auto it = bit_.find(FieldKey{adt, arm.ctor_index, static_cast<int>(b)});
            if (it != bit_.end())
              t = it->second;
          }
          bind(inner, arm.binders[b], t);
        }
        out |= walk(arm.body, inner, d);
      }
      return out;
    }
    case ir::ExprKind::Lambda: {
      const auto& l = e->cast<ir::Lambda>();
      Env inner = env;
      for (const auto& p : l.params)
        inner.erase(p.name);
      walk(l.body, inner, d);
      return 0;
    }
    }
    return 0;
  }

  const ir::Module& m_;
  const std::vector<FieldKey>& fields_;
  const interp::DimBindings& dims_;
  std::map<FieldKey, Taint> bit_;
  std::vector<std::vector<Taint>> params_;
  std::vector<Taint> rets_;
  std::vector<LabelClasses> uses_;
  bool changed_ = false;
  bool too_deep_ = false;
};

} // namespace

std::map<FieldKey, LabelClasses> label_classes(const ir::Module& m,
                                               const std::vector<FieldKey>& fields,
                                               const interp::DimBindings& dims) {
  Flow flow(m, fields, dims);
  std::map<FieldKey, LabelClasses> out;
  if (!flow.run())
    return out;
  for (size_t i = 0; i < fields.size(); ++i)
    if (flow.uses()[i].classes >= 0)
      out[fields[i]] = flow.uses()[i];
  return out;
}

} // namespace pejit::runtime
