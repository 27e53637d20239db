// The pejit command line. Each subcommand is a thin layer over the library: check (parse +
// type and binding-time check), gen (built-in data sets), train, eval and predict (runtime/train,
// on a pejit::Session), dump, and tune (schedules measured on this machine).
#include "runtime/cli/commands.h"

#include "pejit/error.h"
#include "pejit/pejit.h"
#include "runtime/dist/comm.h"
#include "runtime/dist/grad_reducer.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>

int main(int argc, char** argv) {
  CLI::App app{"pejit: a specializing JIT for tree-structured and recursive models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pejit 0.1.0");

  pejit::cli::CheckArgs check;
  auto* c = app.add_subcommand("check", "Parse and check a program; exit 2 on errors");
  c->add_option("file", check.file, "program (.pe)")->required();

  pejit::cli::GenArgs gen;
  auto* g = app.add_subcommand("gen", "Write a built-in data set (bracketed trees, one a line)");
  g->add_option("kind", gen.kind, "sst or listops")
      ->required()
      ->check(CLI::IsMember({"sst", "listops"}));
  g->add_option("--trees", gen.trees, "number of trees")->capture_default_str();
  g->add_option("--seed", gen.seed, "random seed")->capture_default_str();
  g->add_option("--shape", gen.shape, "sst, deep or balanced (sst data only)")
      ->check(CLI::IsMember({"sst", "deep", "balanced"}))
      ->capture_default_str();
  g->add_option("--arity", gen.arity,
                "most children per internal node (sst data only): 2 makes binary trees, K > 2 "
                "n-ary trees whose internal nodes take 2..K children")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  g->add_option("--out,-o", gen.out, "output file (default: standard output)");
  g->add_flag("--sentences", gen.sentences, "write each tree's words as a plain sentence");

  pejit::cli::TrainArgs train;
  auto* t = app.add_subcommand("train", "Train a model's `loss` entry on a data set");
  pejit::cli::add_train_options(*t, train);

  pejit::cli::EvalArgs eval;
  auto* e = app.add_subcommand("eval", "Evaluate saved parameters on a data set");
  pejit::cli::add_eval_options(*e, eval);

  pejit::cli::PredictArgs predict;
  auto* p = app.add_subcommand("predict", "Write saved parameters' predictions, one line a tree");
  pejit::cli::add_predict_options(*p, predict);

  pejit::cli::DumpArgs dump;
  auto* d = app.add_subcommand("dump", "Show what specialization makes of one batch");
  pejit::cli::add_dump_options(*d, dump);

  pejit::cli::TuneArgs tune;
  auto* u = app.add_subcommand(
      "tune", "Measure schedules for the kernels a model needs on a data set; write a database");
  pejit::cli::add_tune_options(*u, tune);

  pejit::keep_freed_memory(); // a training loop's megabytes stay in the process
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    return app.exit(err) == 0 ? 0 : 2;
  }
  try {
    if (*c)
      return pejit::cli::run_check(check);
    if (*g)
      return pejit::cli::run_gen(gen);
    if (*t)
      return pejit::cli::run_train(train);
    if (*e)
      return pejit::cli::run_eval(eval);
    if (*p)
      return pejit::cli::run_predict(predict);
    if (*d)
      return pejit::cli::run_dump(dump);
    if (*u)
      return pejit::cli::run_tune(tune);
  } catch (const pejit::runtime::dist::JobError& ex) {
    // Every rank of the job has it: the first says why, and all end cleanly.
    auto* job = pejit::runtime::dist::Comm::started();
    if (job == nullptr || job->rank() == 0)
      std::fprintf(stderr, "pejit: error: %s\n", ex.what());
    return 1;
  } catch (const pejit::ProgramError& ex) {
    std::fprintf(stderr, "pejit: %s\n", ex.what());
    return 2;
  } catch (const std::exception& ex) {
    // A located message ("FILE:LINE:COL: error: ...") says "error" already.
    std::string_view what = ex.what();
    bool located = what.substr(0, what.find('\n')).find(": error: ") != std::string_view::npos;
    auto* job = pejit::runtime::dist::Comm::started();
    std::string rank = job != nullptr && job->size() > 1
                           ? "rank " + std::to_string(job->rank()) + " of " +
                                 std::to_string(job->size()) + ": "
                           : "";
    std::fprintf(stderr, located ? "pejit: %s%s\n" : "pejit: %serror: %s\n", rank.c_str(),
                 ex.what());
    // The other ranks wait for this one in a collective: the whole job ends now.
    if (!rank.empty())
      job->abort(1);
    return 1;
  }
  return 0;
}
