// What the objectives' implementations share (causal_lm, masked_lm, seq2seq): cutting a batch into
// shards, building and replicating their models, honouring a stop request. Internal to src/objectives.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "tfm/objectives/objective.h"

namespace tfm {

// Rows [begin, end) of each of `parts` shards of B rows, as even as can be (the first B % parts get
// one more).
std::vector<std::pair<int64_t, int64_t>> shard_rows(int64_t B, int parts);

// mc, after options.check_model(mc) when it is set: what each objective builds its model from.
inline const ModelConfig& checked_model(const ModelConfig& mc, const ObjectiveOptions& options) {
  if (options.check_model) options.check_model(mc);
  return mc;
}

// replica() for an objective whose model is an M (LanguageModel, Seq2SeqModel): built from the same
// config and seed, then re-seated on `model`'s values.
template <class M>
std::unique_ptr<Model> replica_of(const M& model, uint64_t seed) {
  auto m = std::make_unique<M>(model.config(), seed);
  m->share_values_of(model);
  m->set_training(model.training());
  return m;
}

// Whether a stop request is pending (evaluate() checks it between batches).
inline bool stop_requested(const std::atomic<bool>* stop) {
  return stop != nullptr && stop->load();
}

}  // namespace tfm
