// The subcommands of the `pejit` CLI: their arguments and entry points. Logic a library user
// would need lives in the libraries; these functions only parse, call and print.
#pragma once

#include "runtime/train/trainer.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace pejit::cli {

struct CheckArgs {
  std::string file;
};
/// Prints diagnostics; returns 0 for a good program, 2 for a bad one.
int run_check(const CheckArgs& a);

struct GenArgs {
  std::string kind;
  size_t trees = 1000;
  uint64_t seed = 1;
  std::string shape = "sst";
  size_t arity = 2; ///< most children per internal node (sst only; 2: binary trees)
  std::string out;
  bool sentences = false; ///< write the leaves of each tree as a plain sentence
};
int run_gen(const GenArgs& a);

using TrainArgs = runtime::TrainOptions;
void add_train_options(CLI::App& app, TrainArgs& a);
int run_train(const TrainArgs& a);

using EvalArgs = runtime::EvalOptions;
void add_eval_options(CLI::App& app, EvalArgs& a);
int run_eval(const EvalArgs& a);

using PredictArgs = runtime::PredictOptions;
void add_predict_options(CLI::App& app, PredictArgs& a);
int run_predict(const PredictArgs& a);

using DumpArgs = runtime::DumpOptions;
void add_dump_options(CLI::App& app, DumpArgs& a);
int run_dump(const DumpArgs& a);

using TuneArgs = runtime::TuneOptions;
void add_tune_options(CLI::App& app, TuneArgs& a);
int run_tune(const TuneArgs& a);

} // namespace pejit::cli
