#include "run_state.h"

#include <algorithm>
#include <cmath>

#include "tfm/engine/error.h"
#include "tfm/training/distributed.h"
#include "tfm/training/run_dir.h"

namespace tfm {
using nlohmann::json;

namespace {

json rng_json(const Rng::State& s) {
  return json(std::vector<uint64_t>(s.begin(), s.end()));
}
Rng::State rng_state(const json& j) {
  const auto v = j.get<std::vector<uint64_t>>();
  if (v.size() != 5) throw json::other_error::create(501, "an RNG state has 5 words", nullptr);
  Rng::State s;
  std::copy(v.begin(), v.end(), s.begin());
  return s;
}

}  // namespace

RunState::RunState(const Config& config, Objective& objective, Optimizer& optimizer, int rank, int nranks)
    : config_(config), objective_(objective), optimizer_(optimizer), rank_(rank), nranks_(nranks) {}

void RunState::restore(Checkpoint& ckpt, const std::string& path) {
  Model& model = objective_.model();
  restore_model(model, ckpt, path);
  const int64_t P = model.parameter_count();
  try {
    const json& s = ckpt.state;
    step = s.at("step").get<int64_t>();
    best_val = s.at("best_val_loss").is_number() ? s.at("best_val_loss").get<double>()
                                                 : std::numeric_limits<double>::infinity();
    elapsed_before = s.at("elapsed_s").get<double>();
    stopped = s.contains("stopped") && s.at("stopped").is_string() ? s.at("stopped").get<std::string>() : "";
    // A multi-rank checkpoint holds every rank's streams under rng.ranks (rank 0's also at the top).
    const json& r = nranks_ > 1 ? s.at("rng").at("ranks").at(static_cast<size_t>(rank_)) : s.at("rng");
    objective_.sampler_rng().set_state(rng_state(r.at("sampler")));
    model.dropout_rng().set_state(rng_state(r.at("dropout")));
    const std::string name = s.at("optimizer").at("name").get<std::string>();
    if (enum_from<OptimizerKind>(name) != optimizer_.config().name ||
        ckpt.optimizer.size() != optimizer_.state().size())
      throw IoError(path + ": the checkpoint's optimizer state is for \"" + name + "\", the config uses \"" +
                    name_of(optimizer_.config().name) + "\"");
    for (size_t i = 0; i < ckpt.optimizer.size(); ++i) {
      // (P,) for AdamW and SGD; Muon's buffers hold its own part of the parameters (optim.h).
      const size_t expected = optimizer_.state()[i].size();
      if (ckpt.optimizer[i].size() != expected)
        throw IoError(path + ": optimizer state " + std::to_string(i) + " has " +
                      std::to_string(ckpt.optimizer[i].size()) + " values, expected " +
                      std::to_string(expected) + " (the model has " + std::to_string(P) + " parameters)");
      optimizer_.state()[i] = std::move(ckpt.optimizer[i]);
    }
    optimizer_.set_steps_taken(s.at("optimizer").at("steps").get<int64_t>());
    // A checkpoint saved with the EMA in the model (best.ckpt under train.ema_decay): the raw weights
    // are in the EMA buffer.
    if (s.value("ema_in_model", false)) {
      float* ema = optimizer_.ema();
      if (!ema)
        throw IoError(path +
                      ": the checkpoint holds an EMA of the weights, the config has no train.ema_decay");
      float* w = model.flat_values().data();
      std::swap_ranges(w, w + P, ema);
    }
    if (step < 0) throw IoError(path + ": negative step in the checkpoint");
  } catch (const json::exception& e) {
    throw IoError(path + ": corrupt checkpoint state (" + e.what() + ")");
  }
}

void RunState::gather_streams() {
  if (nranks_ == 1) return;
  std::vector<uint64_t> mine;
  for (const Rng::State& s : {objective_.sampler_rng().state(), objective_.model().dropout_rng().state()})
    mine.insert(mine.end(), s.begin(), s.end());
  rank_streams_ = dist::allgather(mine);
}

json RunState::streams_json() const {
  json rng = {{"sampler", rng_json(objective_.sampler_rng().state())},
              {"dropout", rng_json(objective_.model().dropout_rng().state())}};
  if (nranks_ == 1) return rng;
  json ranks = json::array();
  for (int r = 0; r < nranks_; ++r) {
    const auto w = rank_streams_.begin() + 10 * r;
    ranks.push_back(
        {{"sampler", std::vector<uint64_t>(w, w + 5)}, {"dropout", std::vector<uint64_t>(w + 5, w + 10)}});
  }
  rng["ranks"] = std::move(ranks);
  return rng;
}

void RunState::save(const std::string& path, double elapsed) const {
  json state = {
      {"step", step},
      {"best_val_loss", std::isfinite(best_val) ? json(best_val) : json(nullptr)},
      {"elapsed_s", elapsed},
      {"rng", streams_json()},
      {"optimizer", {{"name", name_of(optimizer_.config().name)}, {"steps", optimizer_.steps_taken()}}}};
  if (nranks_ > 1) state["ranks"] = nranks_;
  if (!stopped.empty()) state["stopped"] = stopped;
  if (ema_in_model) state["ema_in_model"] = true;
  const Model& model = objective_.model();
  save_checkpoint(path,
                  CheckpointView{config_.tree, objective_.tokenizer(), state, model.flat_values().data(),
                                 static_cast<size_t>(model.parameter_count()), optimizer_.state(),
                                 objective_.target_tokenizer()});
}

}  // namespace tfm
