// Resolving and checking op attributes that name dimensions (see dim_attrs.h).
#include "src/interp/dim_attrs.h"

#include "src/kernels/random.h"
#include "src/ops/op.h"
#include "src/util/check.h"

#include <set>

namespace pejit::interp {

namespace {

std::optional<int64_t> bound(const ir::Dim& d, const DimBindings& dims) {
  return d.eval([&](const std::string& n) -> std::optional<int64_t> {
    auto it = dims.find(n);
    return it == dims.end() ? std::nullopt : std::optional(it->second);
  });
}

[[noreturn]] void fail_at(const Span& at, const std::string& msg) {
  throw Error(at.str() + ": error: " + msg);
}

int64_t resolve(const ir::Dim& d, const DimBindings& dims, const Span& at) {
  auto v = bound(d, dims);
  if (!v) {
    for (const auto& t : d.terms)
      if (!dims.count(t.name))
        fail_at(at, "dimension " + t.name + " is not bound");
  }
  return *v;
}

// "H = 4, K = 2": the sizes of the names a call's attributes and operand types mention.
std::string sizes_of(const ir::Call& c, const DimBindings& dims) {
  std::set<std::string> names;
  for (const auto& d : c.attr_dims)
    for (const auto& t : d.terms)
      names.insert(t.name);
  for (int i = 0; i < c.tensor_args; ++i) {
    const ir::Type& t = c.args[static_cast<size_t>(i)]->type;
    if (t && t->is_tensor())
      for (const auto& d : t->dims)
        for (const auto& term : d.terms)
          names.insert(term.name);
  }
  std::string s;
  for (const auto& n : names) {
    auto it = dims.find(n);
    s +=
        (s.empty() ? "" : ", ") + n + " = " + (it == dims.end() ? "?" : std::to_string(it->second));
  }
  return s;
}

void check_call(const ir::Call& c, const DimBindings& dims) {
  auto id = static_cast<ops::OpId>(c.ref.index);
  std::vector<int64_t> ints = c.attr_ints;
  resolve_attr_dims(c, dims, ints);
  std::vector<ir::Type> args;
  for (int i = 0; i < c.tensor_args; ++i) {
    const ir::Expr& a = c.args[static_cast<size_t>(i)];
    if (!a->type || !a->type->is_tensor())
      return; // not a checked tensor operand: nothing to say here
    std::vector<ir::Dim> concrete;
    for (const auto& d : a->type->dims)
      concrete.push_back(ir::Dim::of(resolve(d, dims, a->span)));
    args.push_back(ir::t_tensor(a->type->elem, std::move(concrete)));
  }
  if (ops::is_random(id))
    args.push_back(ir::t_i32({kernels::kRandomKeyWidth}));
  for (size_t k = ops::is_random(id) ? 1 : 0; k < ints.size(); ++k)
    if (ints[k] < 0 && id != ops::OpId::Slice)
      fail_at(c.span, std::string(ops::op_name(id)) + ": dimension " + c.attr_dims[k].str() +
                          " is " + std::to_string(ints[k]) + " with " + sizes_of(c, dims));
  auto r = ops::op_result_type(id, args, ops::Attr{ints});
  if (!r.ok())
    fail_at(c.span, r.error + " (with " + sizes_of(c, dims) + ")");
}

} // namespace

int64_t dim_value(const ir::Module& m, int index, const DimBindings& dims, const Span& at) {
  PEJIT_CHECK(index >= 0 && static_cast<size_t>(index) < m.dims().size()) << "bad dim index";
  const std::string& n = m.dims()[static_cast<size_t>(index)]->name;
  auto it = dims.find(n);
  if (it == dims.end())
    fail_at(at, "dimension " + n + " is not bound");
  return it->second;
}

void resolve_attr_dims(const ir::Call& c, const DimBindings& dims, std::vector<int64_t>& ints) {
  for (size_t k = 0; k < c.attr_dims.size() && k < ints.size(); ++k)
    if (c.attr_dims[k].is_named())
      ints[k] = resolve(c.attr_dims[k], dims, c.span);
}

void check_dim_attrs(const ir::Module& m, const DimBindings& dims) {
  // Every expression of every checked function in source order (the first bad call is the
  // one reported), on an explicit stack (bodies nest deeply): children are pushed in order
  // into `kids`, then onto the stack reversed.
  std::vector<const ir::ExprNode*> todo, kids;
  for (auto f = m.fns().rbegin(); f != m.fns().rend(); ++f)
    if (*f && (*f)->checked && (*f)->body)
      todo.push_back((*f)->body.get());
  auto push = [&](const ir::Expr& e) {
    if (e)
      kids.push_back(e.get());
  };
  while (!todo.empty()) {
    const ir::ExprNode* e = todo.back();
    todo.pop_back();
    kids.clear();
    switch (e->kind) {
    case ir::ExprKind::Call: {
      const auto& c = e->cast<ir::Call>();
      if (!c.attr_dims.empty() && c.ref.kind == ir::VarRef::Kind::Op)
        check_call(c, dims);
      push(c.callee);
      for (const auto& a : c.args)
        push(a);
      break;
    }
    case ir::ExprKind::Binary:
      push(e->cast<ir::Binary>().lhs);
      push(e->cast<ir::Binary>().rhs);
      break;
    case ir::ExprKind::Unary:
      push(e->cast<ir::Unary>().operand);
      break;
    case ir::ExprKind::Tuple:
      for (const auto& x : e->cast<ir::Tuple>().elems)
        push(x);
      break;
    case ir::ExprKind::Proj:
      push(e->cast<ir::Proj>().tuple);
      break;
    case ir::ExprKind::Let:
      push(e->cast<ir::Let>().value);
      push(e->cast<ir::Let>().body);
      break;
    case ir::ExprKind::If:
      push(e->cast<ir::If>().cond);
      push(e->cast<ir::If>().then_e);
      push(e->cast<ir::If>().else_e);
      break;
    case ir::ExprKind::Match:
      push(e->cast<ir::Match>().scrutinee);
      for (const auto& arm : e->cast<ir::Match>().arms)
        push(arm.body);
      break;
    case ir::ExprKind::Lambda:
      push(e->cast<ir::Lambda>().body);
      break;
    case ir::ExprKind::ListLit:
      for (const auto& x : e->cast<ir::ListLit>().elems)
        push(x);
      break;
    case ir::ExprKind::IntLit:
    case ir::ExprKind::FloatLit:
    case ir::ExprKind::BoolLit:
    case ir::ExprKind::Var:
      break;
    }
    todo.insert(todo.end(), kids.rbegin(), kids.rend());
  }
}

} // namespace pejit::interp
