// Session's checkpoints (include/pejit/pejit.h): parameters, optimizer state and training
// state saved and loaded through runtime/checkpoint (docs/checkpoints.md).
#include "runtime/session_impl.h"

namespace pejit {

using runtime::detail::take_params;

namespace {
checkpoint::Checkpoint snapshot(const interp::Params& params, const optim::Optimizer& optimizer,
                                const std::vector<std::string>& vocab,
                                const std::map<std::string, std::string>& meta) {
  checkpoint::Checkpoint ck;
  ck.params = params;
  ck.vocab = vocab;
  if (ck.vocab.empty())
    ck.vocab = {"<unk>"};
  ck.optimizer_state = optimizer.state();
  ck.meta = meta;
  return ck;
}
} // namespace

void Session::save(const std::string& path, const std::vector<std::string>& vocab,
                   const std::map<std::string, std::string>& meta) const {
  checkpoint::save(path, snapshot(impl_->params, *impl_->optimizer, vocab, meta));
}

void Session::save_training(const std::string& path, const TrainingState& state,
                            const std::vector<std::string>& vocab,
                            const std::map<std::string, std::string>& meta) const {
  checkpoint::Checkpoint ck = snapshot(impl_->params, *impl_->optimizer, vocab, meta);
  ck.training = checkpoint::TrainState{state.epoch, state.batch, state.values};
  checkpoint::save(path, ck);
}

void runtime::detail::take_params(interp::Params& params, const checkpoint::Checkpoint& ck,
                                  const std::string& path) {
  for (size_t i = 0; i < params.names.size(); ++i) {
    int j = ck.params.index(params.names[i]);
    if (j < 0)
      throw Error("checkpoint '" + path + "' has no parameter " + params.names[i]);
    if (ck.params.values[j].shape() != params.values[i].shape())
      throw Error("checkpoint '" + path + "': parameter " + params.names[i] + " has shape " +
                  ck.params.values[j].shape().str() + ", the model wants " +
                  params.values[i].shape().str());
    params.values[i] = ck.params.values[j];
  }
}

std::vector<std::string> Session::load(const std::string& path) {
  checkpoint::Checkpoint ck = checkpoint::load(path);
  interp::Params next = impl_->params; // unchanged when the optimizer state does not fit
  take_params(next, ck, path);
  if (!ck.optimizer_state.empty())
    impl_->optimizer->load_state(ck.optimizer_state);
  impl_->params = std::move(next);
  return ck.vocab;
}

TrainingState Session::load_training(const std::string& path, std::vector<std::string>* vocab) {
  checkpoint::Checkpoint ck = checkpoint::load(path);
  if (!ck.training)
    throw Error("checkpoint '" + path +
                "' holds no training state to resume from (it was written by a version 1 "
                "pejit or without one); its parameters can still be loaded (load, --init)");
  interp::Params next = impl_->params;
  take_params(next, ck, path);
  impl_->optimizer->load_state(ck.optimizer_state); // empty: a fresh optimizer's state
  impl_->params = std::move(next);
  if (vocab)
    *vocab = ck.vocab;
  return TrainingState{ck.training->epoch, ck.training->batch, ck.training->values};
}

std::vector<std::string> Session::load_params(const std::string& path) {
  checkpoint::Checkpoint ck = checkpoint::load(path);
  take_params(impl_->params, ck, path);
  return ck.vocab;
}

} // namespace pejit
