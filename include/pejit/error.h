// pejit's exception for a user's mistake found at run time: bad input data, a shape that
// does not match, misuse of the API. Bad program text is reported as diagnostics instead.
#pragma once

#include <stdexcept>

namespace pejit {

/// A user's mistake detected at run time (shape mismatch, bad API call, bad data file).
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A program (model text) with errors; the message holds the rendered diagnostics.
class ProgramError : public Error {
public:
  using Error::Error;
};

} // namespace pejit
