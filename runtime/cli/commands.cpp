// Implementations of the CLI subcommands.
#include "runtime/cli/commands.h"

#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"
#include "src/ir/module.h"
#include "src/types/check.h"
#include "src/util/check.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace pejit::cli {

int run_check(const CheckArgs& a) {
  Diagnostics d;
  ir::Module m;
  auto r = types::add_file(m, a.file, d);
  std::fputs(d.render().c_str(), stderr);
  if (!r.ok) {
    std::fprintf(stderr, "%zu error%s\n", d.error_count(), d.error_count() == 1 ? "" : "s");
    return 2;
  }
  std::printf("%s: ok (%zu functions, %zu entries: ", a.file.c_str(), m.fns().size(),
              m.entries().size());
  bool first = true;
  for (const auto& e : m.entries()) {
    std::printf("%s%s", first ? "" : ", ", e.c_str());
    first = false;
  }
  std::printf(")\n");
  return 0;
}

int run_gen(const GenArgs& a) {
  data::Vocab vocab;
  std::vector<data::ParseTree> trees;
  if (a.kind == "sst") {
    trees = data::gen_sst(a.trees, a.seed, data::parse_shape(a.shape), vocab, a.arity);
  } else {
    if (a.arity != 2)
      throw Error("--arity is for sst data: listops trees are binarized as the original "
                  "generator does");
    trees = data::gen_listops(a.trees, a.seed, vocab);
  }
  if (a.sentences) {
    std::string text;
    for (const auto& t : trees) {
      auto words = t.sentence();
      for (size_t i = 0; i < words.size(); ++i)
        text += (i ? " " : "") + words[i];
      text += "\n";
    }
    if (a.out.empty()) {
      std::fputs(text.c_str(), stdout);
    } else {
      std::string tmp = a.out + ".tmp";
      FILE* f = std::fopen(tmp.c_str(), "wb");
      if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0)
        throw Error("cannot write '" + a.out + "'");
      if (std::rename(tmp.c_str(), a.out.c_str()) != 0)
        throw Error("cannot write '" + a.out + "'");
    }
  } else if (a.out.empty()) {
    for (const auto& t : trees)
      std::printf("%s\n", data::write_tree(t).c_str());
  } else {
    data::write_trees(a.out, trees);
  }
  return 0;
}

namespace {
// --labels, which train and eval share.
void add_labels_option(CLI::App& app, std::string& labels) {
  app.add_option("--labels", labels,
                 "fine: labels as read; binary: SST binary (0-1 -> 0, 3-4 -> 1; a tree with a "
                 "neutral root dropped, neutral inner nodes unlabeled)")
      ->check(CLI::IsMember({"fine", "binary"}))
      ->capture_default_str();
}

// The execution flags train and eval share, bound to the session's options.
void add_session_options(CLI::App& app, SessionOptions& s) {
  app.add_option("--mode", s.mode, "execution path")
      ->check(CLI::IsMember({"generic", "specialized", "auto"}))
      ->capture_default_str();
  app.add_option("--device", s.device, "where plans run: cpu, cuda or cuda:N (docs/cuda.md)")
      ->capture_default_str();
  app.add_flag("!--no-jit", s.compile.jit,
               "run planned batches on reference kernels only (no LLVM)");
  app.add_option("--max-depth", s.max_depth,
                 "nested calls a batch may recurse into besides 4 per level of its depth")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--threads", s.threads,
                 "threads a step's work is split across (0: the CPUs of the affinity mask); the "
                 "same results for any count")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_flag("!--no-merge", s.merge_equal,
               "run every instance of a batch, also those that compute what another does (the "
               "same template on equal arguments)");
  app.add_option("--kernel-cache", s.compile.kernel_cache_dir,
                 "keep compiled kernels in this directory (created when missing) and link those "
                 "found there instead of compiling them; runs may share it (docs/cli.md)");
  app.add_option_function<double>(
         "--kernel-cache-max-mb",
         [&s](double mb) {
           s.compile.kernel_cache_max_bytes =
               static_cast<uint64_t>(std::max(1.0, mb * 1024.0 * 1024.0));
         },
         "bound on --kernel-cache's directory in MiB (the least recently used kernels go; "
         "default 256)")
      ->check(CLI::PositiveNumber);
}
} // namespace

void add_train_options(CLI::App& app, TrainArgs& a) {
  app.add_option("model", a.model, "model program (.pe)")->required();
  app.add_option("--data", a.data, "training data: bracketed trees or sentences, one a line")
      ->required();
  app.add_option("--dev", a.dev, "development data, evaluated after each epoch");
  app.add_option("--epochs", a.epochs)->capture_default_str();
  app.add_option("--batch", a.batch, "trees per batch")->capture_default_str();
  app.add_option("--limit", a.limit, "use the first N training examples (0: all)")
      ->capture_default_str();
  app.add_option("--optimizer", a.session.optimizer)
      ->check(CLI::IsMember({"adagrad", "sgd", "adam"}))
      ->capture_default_str();
  app.add_option("--lr", a.session.lr, "learning rate")->capture_default_str();
  app.add_option("--weight-decay", a.session.weight_decay)->capture_default_str();
  app.add_option("--clip", a.session.clip, "clip the global gradient norm (0: off)")
      ->capture_default_str();
  app.add_option("--lr-schedule", a.lr_schedule,
                 "constant, step:EVERY:GAMMA, cosine:TOTAL or warmup:STEPS[,THEN]: a factor on "
                 "the learning rate by the batch's index in the run (docs/cli.md)");
  app.add_option("--param-lr", a.param_lr, "NAME=LR: this parameter's learning rate (repeatable)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--param-decay", a.param_decay,
                 "NAME=WD: this parameter's weight decay (repeatable)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--no-decay-bias", a.no_decay_bias,
               "no weight decay on biases (parameters of rank 0 or 1)");
  app.add_option("--seed", a.session.seed, "seed of initialization and shuffling")
      ->capture_default_str();
  auto* shuffle =
      app.add_option_function<std::string>(
             "--shuffle",
             [&a](const std::string& w) { a.shuffle = runtime::parse_shuffle(w, "--shuffle"); },
             "examples: a new order of the examples every epoch; batches: the first epoch's "
             "batches, in a new order every epoch (each batch's plan is made once, then reused); "
             "none: the data file's order in every epoch")
          ->check(CLI::IsMember({"examples", "batches", "none"}))
          ->default_str("examples");
  app.add_flag_callback(
         "--fixed-batches", [&a] { a.shuffle = runtime::Shuffle::None; },
         "do not shuffle between epochs (--shuffle none)")
      ->excludes(shuffle);
  add_labels_option(app, a.labels);
  app.add_option("--save", a.save,
                 "write the checkpoint (parameters, vocabulary, optimizer and training state) "
                 "here at the end, on SIGINT/SIGTERM and before a failing batch");
  app.add_option("--save-every", a.save_every, "also save every N epochs (0: never)")
      ->capture_default_str();
  app.add_option("--save-best", a.save_best,
                 "keep the best epoch by this metric (dev_root_acc, dev_node_acc, dev_loss, "
                 "root_acc, node_acc, loss) at --save; the last state goes to SAVE.last");
  app.add_option("--patience", a.patience,
                 "stop after N epochs without --save-best's metric improving (0: never)")
      ->capture_default_str();
  app.add_option("--init", a.init_params, "start from this checkpoint's parameters");
  app.add_option("--freeze", a.freeze,
                 "keep this parameter fixed: no update, no optimizer state (repeatable)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--embeddings", a.embeddings,
                 "word vectors (GloVe/word2vec text, .gz too) for the vocabulary's words; the "
                 "others keep their initialization");
  app.add_option("--embeddings-param", a.embeddings_param,
                 "the parameter --embeddings fills (default: the 2-D one over V)");
  app.add_option("--resume", a.resume,
                 "continue the run that wrote this checkpoint where it stopped (--epochs counts "
                 "from that run's start)");
  app.add_flag("--json", a.json, "one JSON object per epoch on stdout");
  add_session_options(app, a.session);
  a.session.distributed = "auto";
  app.add_option("--distributed", a.session.distributed,
                 "data-parallel training on MPI (docs/distributed.md): auto (when launched by "
                 "mpirun or srun with several processes), mpi, or off")
      ->check(CLI::IsMember({"auto", "mpi", "off"}))
      ->capture_default_str();
  app.add_option("--check-replicas", a.check_replicas,
                 "data parallel: check every N steps that all ranks hold the same parameters "
                 "(0: at each epoch's end only)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("!--no-train-eval", a.train_eval, "skip accuracy on the training set");
  app.add_option("--eval-batch", a.eval_batch,
                 "trees per batch of the scoring after each epoch (--dev, and the training set "
                 "unless --no-train-eval), one pass per batch as in `pejit eval`")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lookahead", a.session.lookahead, "batches the background pipeline plans ahead")
      ->capture_default_str();
  app.add_option("--trace", a.session.trace_file,
                 "write a Chrome trace (chrome://tracing, Perfetto) here");
  app.add_flag("--explain", a.explain, "say why each batch that ran generic did");
  app.add_option("--tuned", a.tuned,
                 "tuned schedule database (`pejit tune`); without it every kernel gets its "
                 "default schedule");
  app.add_option("--progress", a.progress,
                 "progress line: 1 on, 0 off (default: when stderr is a terminal)")
      ->expected(0, 1)
      ->default_str("-1");
}

int run_train(const TrainArgs& a) {
  TrainArgs args = a;
  args.handle_signals = true; // SIGINT/SIGTERM: finish the step, save, exit 128 + signal
  try {
    runtime::train(args, std::cout, std::cerr);
  } catch (const runtime::Interrupted& e) {
    return 128 + e.signal; // the message is out already
  }
  return 0;
}

void add_eval_options(CLI::App& app, EvalArgs& a) {
  app.add_option("model", a.model, "model program (.pe)")->required();
  app.add_option("--params", a.params, "checkpoint written by `pejit train --save`")->required();
  app.add_option("--data", a.data, "data to evaluate")->required();
  app.add_option("--batch", a.batch,
                 "trees per batch (one pass each: the loss and every prediction)")
      ->capture_default_str();
  app.add_option("--limit", a.limit)->capture_default_str();
  add_labels_option(app, a.labels);
  app.add_flag("--json", a.json, "one JSON object on stdout");
  app.add_flag("!--two-pass", a.one_pass,
               "run the loss entry and the prediction entry separately on each batch (the same "
               "scores; for comparisons)");
  app.add_option("--rounds", a.rounds,
                 "evaluate the data this many times in one session (timing: later rounds find "
                 "their plans and kernels made); round_seconds in --json")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_session_options(app, a.session);
  app.add_option("--tuned", a.tuned,
                 "tuned schedule database (`pejit tune`); without it every kernel gets its "
                 "default schedule");
}

void add_predict_options(CLI::App& app, PredictArgs& a) {
  app.add_option("model", a.model, "model program (.pe)")->required();
  app.add_option("--params", a.params, "checkpoint written by `pejit train --save`")->required();
  app.add_option("--data", a.data, "trees to predict (their labels are not used; `-` is fine)")
      ->required();
  app.add_option("--out,-o", a.out, "where the predictions go, one line per tree")->required();
  app.add_flag("--nodes", a.nodes,
               "every node's prediction (infer_nodes), children before parents, the root last");
  app.add_option("--batch", a.batch)->capture_default_str();
  app.add_option("--limit", a.limit)->capture_default_str();
  add_session_options(app, a.session);
  app.add_option("--tuned", a.tuned, "tuned schedule database (`pejit tune`)");
}

int run_predict(const PredictArgs& a) {
  int64_t n = runtime::predict(a, std::cerr);
  std::cerr << "predicted " << n << " trees" << (a.nodes ? " (every node)" : "") << " to " << a.out
            << "\n";
  return 0;
}

void add_dump_options(CLI::App& app, DumpArgs& a) {
  app.add_option("model", a.model, "model program (.pe)")->required();
  app.add_option("--data", a.data, "data file")->required();
  app.add_option("--entry", a.entry, "entry to specialize")->capture_default_str();
  app.add_option("--batch", a.batch)->capture_default_str();
  app.add_option("--batch-index", a.batch_index, "which batch of the file (unshuffled)")
      ->capture_default_str();
  app.add_option("--emit", a.emit)
      ->check(CLI::IsMember(
          {"templates", "instances", "plan", "dot", "kernels", "kernel-program", "llvm", "ptx"}))
      ->capture_default_str();
  app.add_option("--tuned", a.tuned,
                 "resolve the kernels' schedules against this tuned database, as train does");
  app.add_flag("!--no-merge", a.merge,
               "plan every instance, also those that compute what another does (train merges "
               "them)");
}

int run_dump(const DumpArgs& a) {
  runtime::dump(a, std::cout, &std::cerr);
  return 0;
}

void add_tune_options(CLI::App& app, TuneArgs& a) {
  app.add_option("model", a.model, "model program (.pe)")->required();
  app.add_option("--data", a.data, "data whose batches decide which kernels are tuned")->required();
  app.add_option("--out", a.out, "database to write (JSON; entries already there are kept)")
      ->required();
  app.add_option("--batch", a.batch, "trees per batch, as in train")->capture_default_str();
  app.add_option("--limit", a.limit, "use the first N examples (0: all)")->capture_default_str();
  app.add_option("--rows", a.rows, "run-time row counts each candidate is timed at")
      ->capture_default_str();
  app.add_option("--min-ms", a.min_ms, "each timing lasts at least this long")
      ->capture_default_str();
  app.add_option("--repeats", a.repeats, "timings per candidate and row count (fastest counts)")
      ->capture_default_str();
}

int run_tune(const TuneArgs& a) {
  runtime::tune(a, std::cout);
  return 0;
}

int run_eval(const EvalArgs& a) {
  runtime::evaluate(a, std::cout, std::cerr);
  return 0;
}

} // namespace pejit::cli
