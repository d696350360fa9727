#include <catch2/catch.hpp>
#include <cstring>

#include "model_config.h"
#include "tfm/analysis/attention_maps.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {
ModelConfig two_head_config() {
  return model_config_from({"model.d_model=8", "model.n_layers=2", "model.n_heads=2", "model.n_kv_heads=2",
                            "model.d_ff=16", "model.max_seq_len=6"},
                           11);
}

// Copies head 0's slices of Wq/Wk/Wv (rows) and Wo (columns) and their biases onto head 1.
void make_heads_identical(LanguageModel& m, int layer, int64_t Dk) {
  const std::string p = "blocks." + std::to_string(layer) + ".attn.";
  for (const char* proj : {"wq", "wk", "wv"}) {
    Tensor w = m.find_parameter(p + proj + ".weight")->value;  // (H*Dk, C)
    const int64_t C = w.size(1);
    std::memcpy(w.data() + Dk * C, w.data(), sizeof(float) * Dk * C);
    Tensor b = m.find_parameter(p + proj + ".bias")->value;
    std::memcpy(b.data() + Dk, b.data(), sizeof(float) * Dk);
  }
  Tensor wo = m.find_parameter(p + "wo.weight")->value;  // (C, H*Dk)
  for (int64_t r = 0; r < wo.size(0); ++r)
    std::memcpy(wo.data() + r * wo.size(1) + Dk, wo.data() + r * wo.size(1), sizeof(float) * Dk);
}
}  // namespace

TEST_CASE("attention analysis: probabilities are causal distributions", "[analysis]") {
  LanguageModel m(two_head_config(), 5);
  const std::vector<int32_t> tokens = {1, 4, 2, 9, 3};
  const auto layers = analyze_attention(m, tokens);
  REQUIRE(layers.size() == 2);
  for (const LayerAttention& la : layers) {
    REQUIRE(la.probabilities.shape() == Shape{2, 5, 5});
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 5; ++i) {
        double row = 0.0;
        for (int64_t j = 0; j < 5; ++j) {
          const float p = la.probabilities.at({h, i, j});
          if (j > i) CHECK(p == 0.0f);
          row += p;
        }
        CHECK(row == Approx(1.0).epsilon(1e-5));
      }
    CHECK(la.output_similarity.at({0, 0}) == Approx(1.0f));
    CHECK(la.output_similarity.at({0, 1}) == Approx(la.output_similarity.at({1, 0})));
  }
}

TEST_CASE("attention analysis: identical heads have similarity 1, distinct heads less", "[analysis]") {
  LanguageModel m(two_head_config(), 5);
  const std::vector<int32_t> tokens = {1, 4, 2, 9, 3, 7};
  const auto before = analyze_attention(m, tokens);
  CHECK(before[1].mean_output_similarity < 0.99);
  make_heads_identical(m, 1, 4);
  const auto after = analyze_attention(m, tokens);
  CHECK(after[1].mean_output_similarity == Approx(1.0).epsilon(1e-5));
  CHECK(after[1].mean_pattern_similarity == Approx(1.0).epsilon(1e-5));
  // Layer 0 is untouched.
  CHECK(after[0].mean_output_similarity == Approx(before[0].mean_output_similarity));
  const nlohmann::json j = attention_report_json(after, {"a", "b", "c", "d", "e", "f"});
  CHECK(j["layers"].size() == 2);
  CHECK(j["layers"][1]["probabilities"].size() == 2);
  CHECK(j["layers"][1]["probabilities"][0].size() == 6);
}

TEST_CASE("attention analysis: a text longer than max_seq_len is an error", "[analysis]") {
  LanguageModel m(two_head_config(), 5);
  REQUIRE_THROWS_WITH(analyze_attention(m, std::vector<int32_t>(7, 1)), Catch::Contains("analyze_attention"));
}
