// What the two text objectives share (causal_lm, masked_lm): a text file split into train and
// validation tokens, one tokenizer, a LanguageModel and a window sampler. Internal to src/.
#pragma once
#include <optional>
#include <string>

#include "objective_parts.h"
#include "tfm/data/dataset.h"
#include "tfm/models/language_model.h"
#include "tfm/objectives/objective.h"
#include "tfm/objectives/text_data.h"

namespace tfm {

class TextObjective : public Objective {
 public:
  // extra_vocab: symbols the model has past the tokenizer's (masked_lm's [MASK]).
  TextObjective(const Config& config, const Vocabulary* vocabulary, const ObjectiveOptions& options,
                int64_t extra_vocab);

  Model& model() override { return model_; }
  LanguageModel& lm() { return model_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  GgufArchitecture gguf_architecture() const override { return tfm::gguf_architecture(model_.config()); }
  Rng& sampler_rng() override { return sampler_.rng(); }
  double train_flops_per_token() const override;
  std::string describe_data() const override;
  // The token cache's hash of the corpus's ids (both splits, documents included).
  uint64_t data_hash() const override { return data_ ? data_->tokens_hash : 0; }
  std::vector<std::string> data_warnings() const override;
  std::string describe_batch() const override {
    return std::to_string(B_) + " x " + std::to_string(T_) + " tokens";
  }
  bool has_data() const override { return data_.has_value(); }
  std::unique_ptr<Model> replica() override;

 protected:
  // The tokens of a split (a view of the mapped token cache); throws when built without data.
  const TokenSpan& split_tokens(const std::string& split) const;
  // The shards of a drawn batch x, y (B, T), both text objectives' loss: the cross-entropy over the
  // positions whose target is not kNotMasked (all of them for causal_lm), each shard scaled by its
  // share of those positions so that the shards' sum is the batch's mean; with model.mtp_heads
  // (causal_lm), the extra heads' loss as the auxiliary term (LanguageModel::mtp_loss), scaled alike.
  BatchShards shards_of(const std::vector<int32_t>& x, const std::vector<int32_t>& y, int parts) const;

  Config config_;
  int64_t B_, T_;
  Tokenizer tokenizer_;
  std::optional<Dataset> data_;
  LanguageModel model_;
  BatchSampler sampler_;
};

}  // namespace tfm
