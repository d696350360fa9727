#include "run_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tfm/engine/error.h"
#include "tfm/training/distributed.h"
#include "tfm/training/run_dir.h"

namespace tfm {

RunState::RunState(const Config& config, Objective& objective, Optimizer& optimizer, int rank, int nranks)
    : config_(config), objective_(objective), optimizer_(optimizer), rank_(rank), nranks_(nranks) {}

void RunState::restore(Checkpoint& ckpt, const std::string& path) {
  Model& model = objective_.model();
  restore_model(model, ckpt, path);
  const int64_t P = model.parameter_count();
  const CheckpointState& s = ckpt.state;  // its fields checked where it was read (checkpoint.h)
  step = s.step;
  best_val = s.best_val_loss;
  elapsed_before = s.elapsed_s;
  training_before = s.training_s;
  stopped = s.stopped;
  restored_data_hash = s.data_hash;
  restored_unlogged = s.unlogged;
  // Every rank's streams (the caller checked that the run had as many ranks as this job).
  const RankStreams& streams = s.streams.at(static_cast<size_t>(rank_));
  objective_.sampler_rng().set_state(streams.sampler);
  model.dropout_rng().set_state(streams.dropout);
  if (enum_from<OptimizerKind>(s.optimizer) != optimizer_.config().name)
    throw IoError(path + ": the checkpoint's optimizer state is for \"" + s.optimizer +
                  "\", the config uses \"" + name_of(optimizer_.config().name) + "\"");
  if (ckpt.optimizer.size() != optimizer_.state().size())
    throw IoError(path + ": " + std::to_string(ckpt.optimizer.size()) +
                  " optimizer state section(s) (optim.N), expected " +
                  std::to_string(optimizer_.state().size()) + " for \"" + s.optimizer + "\"");
  for (size_t i = 0; i < ckpt.optimizer.size(); ++i) {
    // (P,) for AdamW and SGD; Muon's buffers hold its own part of the parameters (optim.h).
    const size_t expected = optimizer_.state()[i].size();
    if (ckpt.optimizer[i].size() != expected)
      throw IoError(path + ": optimizer state " + std::to_string(i) + " has " +
                    std::to_string(ckpt.optimizer[i].size()) + " values, expected " +
                    std::to_string(expected) + " (the model has " + std::to_string(P) + " parameters)");
    // A NaN there makes the resumed run's updates NaN (its first step then stops it with a message about
    // the loss, not the file); an infinite second moment silently freezes its parameter (m / sqrt(inf)
    // is 0). Refused here, naming the section.
    const std::vector<float>& buffer = ckpt.optimizer[i];
    const int64_t bad = first_nonfinite(buffer.data(), static_cast<int64_t>(buffer.size()));
    if (bad < static_cast<int64_t>(buffer.size()))
      throw IoError(path + ": optimizer state optim." + std::to_string(i) + " holds " +
                    nonfinite_name(buffer[bad]) + " at value " + std::to_string(bad) + " of " +
                    std::to_string(buffer.size()) +
                    ": a resume from it would train with NaN updates or frozen parameters (saved from a run "
                    "that diverged, or the file is damaged)");
    optimizer_.state()[i] = std::move(ckpt.optimizer[i]);
  }
  optimizer_.set_steps_taken(s.optimizer_steps);
  // A checkpoint saved with the EMA in the model (best.ckpt under train.ema_decay): the raw weights
  // are in the EMA buffer.
  if (s.ema_in_model) {
    float* ema = optimizer_.ema();
    if (!ema)
      throw IoError(path + ": the checkpoint holds an EMA of the weights, the config has no train.ema_decay");
    float* w = model.flat_values().data();
    std::swap_ranges(w, w + P, ema);
  }
}

void RunState::gather_streams() {
  if (nranks_ == 1) return;
  std::vector<uint64_t> mine;
  for (const Rng::State& s : {objective_.sampler_rng().state(), objective_.model().dropout_rng().state()})
    mine.insert(mine.end(), s.begin(), s.end());
  rank_streams_ = dist::allgather(mine);
}

std::vector<RankStreams> RunState::streams() const {
  const RankStreams mine{objective_.sampler_rng().state(), objective_.model().dropout_rng().state()};
  if (nranks_ == 1) return {mine};
  std::vector<RankStreams> all;
  for (int r = 0; r < nranks_; ++r) {
    const auto w = rank_streams_.begin() + 10 * r;
    RankStreams s;
    std::copy(w, w + 5, s.sampler.begin());
    std::copy(w + 5, w + 10, s.dropout.begin());
    all.push_back(s);
  }
  return all;
}

std::string RunState::data_hash() const {
  const uint64_t h = objective_.data_hash();
  return h == 0 ? "" : fmt::format("{:016x}", h);
}

void RunState::save(const std::string& path, double elapsed, double training,
                    const UnloggedSteps& unlogged) const {
  CheckpointState state;
  state.step = step;
  state.best_val_loss = best_val;
  state.elapsed_s = elapsed;
  state.training_s = training;
  state.streams = streams();
  state.optimizer = name_of(optimizer_.config().name);
  state.optimizer_steps = optimizer_.steps_taken();
  state.stopped = stopped;
  state.ema_in_model = ema_in_model;
  state.data_hash = data_hash();
  state.unlogged = unlogged;
  const Model& model = objective_.model();
  save_checkpoint(path,
                  CheckpointView{config_.tree, objective_.tokenizer(), state, model.flat_values().data(),
                                 static_cast<size_t>(model.parameter_count()), optimizer_.state(),
                                 objective_.target_tokenizer()});
}

}  // namespace tfm
