// Overloaded: one visitor from a set of lambdas, for std::visit over the closed sum types
// (kernel steps, kernel families): a family no lambda takes is a compile error.
#pragma once

namespace pejit {

template <class... F> struct Overloaded : F... {
  using F::operator()...;
};
template <class... F> Overloaded(F...) -> Overloaded<F...>;

} // namespace pejit
