// The next-token filters of sampling.h against their formulas on fixed logits, and stop strings in
// generate(): what is streamed and what is kept end where the stop string begins.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "model_config.h"
#include "tfm/models/sampling.h"

using namespace tfm;

namespace {

// Logits whose softmax is `probs` (log p: the softmax of log-probabilities gives them back).
std::vector<float> sampling_test_logits(const std::vector<double>& probs) {
  std::vector<float> z;
  for (const double p : probs) z.push_back(static_cast<float>(std::log(p)));
  return z;
}

std::vector<double> sampling_test_distribution(const std::vector<float>& logits, const SampleOptions& o,
                                               const std::vector<bool>& seen = {}) {
  return next_token_distribution(logits.data(), static_cast<int64_t>(logits.size()), seen, o);
}

// `want` (unnormalised, 0 = dropped) renormalised, checked against `got` entry by entry.
void sampling_test_expect(const std::vector<double>& got, std::vector<double> want) {
  REQUIRE(got.size() == want.size());
  double sum = 0.0;
  for (const double w : want) sum += w;
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("token " << i);
    if (want[i] == 0.0)
      CHECK(got[i] == 0.0);
    else
      CHECK(got[i] == Approx(want[i] / sum).epsilon(1e-6));
  }
}

}  // namespace

TEST_CASE("sampling: top-p keeps the smallest set reaching p, ties at the boundary included", "[sampling]") {
  const std::vector<float> z = sampling_test_logits({0.4, 0.2, 0.2, 0.1, 0.1});
  SampleOptions o;
  o.top_p = 1.0;
  sampling_test_expect(sampling_test_distribution(z, o), {0.4, 0.2, 0.2, 0.1, 0.1});
  o.top_p = 0.3;  // 0.4 alone reaches it
  sampling_test_expect(sampling_test_distribution(z, o), {1, 0, 0, 0, 0});
  o.top_p = 0.4;  // reached exactly by the first token
  sampling_test_expect(sampling_test_distribution(z, o), {1, 0, 0, 0, 0});
  o.top_p = 0.5;  // 0.4 + 0.2 reaches it; the other 0.2 ties with the boundary
  sampling_test_expect(sampling_test_distribution(z, o), {0.4, 0.2, 0.2, 0, 0});
  o.top_p = 0.75;
  sampling_test_expect(sampling_test_distribution(z, o), {0.4, 0.2, 0.2, 0, 0});
  o.top_p = 0.85;  // needs a 0.1, and both are tied
  sampling_test_expect(sampling_test_distribution(z, o), {0.4, 0.2, 0.2, 0.1, 0.1});
  // The order of the tokens does not matter, only their probabilities.
  const std::vector<float> shuffled = sampling_test_logits({0.1, 0.2, 0.4, 0.1, 0.2});
  o.top_p = 0.5;
  sampling_test_expect(sampling_test_distribution(shuffled, o), {0, 0.2, 0.4, 0, 0.2});
}

TEST_CASE("sampling: min-p drops tokens below min_p times the largest probability", "[sampling]") {
  const std::vector<float> z = sampling_test_logits({0.4, 0.2, 0.2, 0.12, 0.08});
  SampleOptions o;
  o.min_p = 0.0;
  sampling_test_expect(sampling_test_distribution(z, o), {0.4, 0.2, 0.2, 0.12, 0.08});
  o.min_p = 0.25;  // threshold 0.1
  sampling_test_expect(sampling_test_distribution(z, o), {0.4, 0.2, 0.2, 0.12, 0});
  o.min_p = 0.45;  // threshold 0.18
  sampling_test_expect(sampling_test_distribution(z, o), {0.4, 0.2, 0.2, 0, 0});
  o.min_p = 0.55;  // threshold 0.22
  sampling_test_expect(sampling_test_distribution(z, o), {1, 0, 0, 0, 0});
  o.min_p = 1.0;  // only the most likely
  sampling_test_expect(sampling_test_distribution(z, o), {1, 0, 0, 0, 0});
  // The threshold is relative: a temperature that flattens the distribution keeps more tokens.
  o.min_p = 0.45;
  o.temperature = 2.0;  // probabilities become sqrt(p) renormalised: relative to the largest, 0.12 -> 0.548
                        // and 0.08 -> 0.447, so 0.12 is kept now and 0.08 is still dropped
  sampling_test_expect(sampling_test_distribution(z, o),
                       {std::sqrt(0.4), std::sqrt(0.2), std::sqrt(0.2), std::sqrt(0.12), 0});
}

TEST_CASE("sampling: the repetition penalty divides positive logits and multiplies negative ones",
          "[sampling]") {
  const std::vector<float> z = {2.0f, -1.0f, 0.5f, -0.5f};
  const std::vector<bool> seen = {true, true, false, false};
  SampleOptions o;
  o.repetition_penalty = 2.0;
  std::vector<double> want = {std::exp(1.0), std::exp(-2.0), std::exp(0.5), std::exp(-0.5)};
  sampling_test_expect(sampling_test_distribution(z, o, seen), want);
  o.repetition_penalty = 0.5;  // below 1 it favours repeats
  want = {std::exp(4.0), std::exp(-0.5), std::exp(0.5), std::exp(-0.5)};
  sampling_test_expect(sampling_test_distribution(z, o, seen), want);
  // No token seen, or a penalty of 1: the plain softmax.
  o.repetition_penalty = 2.0;
  want = {std::exp(2.0), std::exp(-1.0), std::exp(0.5), std::exp(-0.5)};
  sampling_test_expect(sampling_test_distribution(z, o, std::vector<bool>(4, false)), want);
  o.repetition_penalty = 1.0;
  sampling_test_expect(sampling_test_distribution(z, o, seen), want);
  // It comes before the temperature: (2 / 2) / 0.5 = 2, (-1 * 2) / 0.5 = -4.
  o.repetition_penalty = 2.0;
  o.temperature = 0.5;
  want = {std::exp(2.0), std::exp(-4.0), std::exp(1.0), std::exp(-1.0)};
  sampling_test_expect(sampling_test_distribution(z, o, seen), want);
  // Greedy takes the penalised logits: token 0's 2.0 becomes 0.25 (penalty 8), below token 2's 0.5.
  o.temperature = 0.0;
  o.repetition_penalty = 8.0;
  sampling_test_expect(sampling_test_distribution(z, o, seen), {0, 0, 1, 0});
}

TEST_CASE("sampling: top-k then top-p renormalises between them", "[sampling]") {
  const std::vector<float> z = sampling_test_logits({0.35, 0.25, 0.2, 0.12, 0.08});
  SampleOptions o;
  o.top_k = 3;
  sampling_test_expect(sampling_test_distribution(z, o), {0.35, 0.25, 0.2, 0, 0});
  o.top_k = 0;
  o.top_p = 0.7;  // alone: 0.35 + 0.25 + 0.2 reaches 0.7
  sampling_test_expect(sampling_test_distribution(z, o), {0.35, 0.25, 0.2, 0, 0});
  o.top_k = 3;  // after top-k the three are 0.4375, 0.3125, 0.25: the first two reach 0.7
  sampling_test_expect(sampling_test_distribution(z, o), {0.35, 0.25, 0, 0, 0});
  // Top-k keeps every token tied with the k-th.
  o.top_p = 1.0;
  o.top_k = 2;
  sampling_test_expect(sampling_test_distribution(sampling_test_logits({0.4, 0.2, 0.2, 0.1, 0.1}), o),
                       {0.4, 0.2, 0.2, 0, 0});
  // A k at or above the vocabulary keeps every token, as Hugging Face's and llama.cpp's do.
  for (const int64_t k : {5, 6, 1000}) {
    o.top_k = k;
    sampling_test_expect(sampling_test_distribution(z, o), {0.35, 0.25, 0.2, 0.12, 0.08});
  }
}

TEST_CASE("sampling: greedy with every filter is plain greedy", "[sampling]") {
  Rng rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> z(17);
    for (float& v : z) v = 3.0f * rng.normal();
    const int64_t argmax = std::max_element(z.begin(), z.end()) - z.begin();
    SampleOptions o;
    o.temperature = 0.0;
    o.top_k = 1 + trial % 5;
    o.top_p = 0.05 + 0.9 * (trial % 7) / 6.0;
    o.min_p = (trial % 4) / 3.0;
    const std::vector<double> p = sampling_test_distribution(z, o);
    for (int64_t i = 0; i < 17; ++i) CHECK(p[i] == (i == argmax ? 1.0 : 0.0));
    Rng draw(static_cast<uint64_t>(trial));
    CHECK(draw_token(p, draw) == argmax);
  }
}

TEST_CASE("sampling: draws follow the distribution and a seed repeats them", "[sampling]") {
  const std::vector<double> p = {0.5, 0.0, 0.3, 0.2};
  Rng a(9), b(9);
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 20000; ++i) {
    const int32_t t = draw_token(p, a);
    CHECK(t == draw_token(p, b));
    ++counts[t];
  }
  CHECK(counts[1] == 0);
  CHECK(counts[0] / 20000.0 == Approx(0.5).margin(0.02));
  CHECK(counts[2] / 20000.0 == Approx(0.3).margin(0.02));
}

TEST_CASE("sampling: a stop string ends generation and is neither streamed nor kept", "[sampling]") {
  ModelConfig c = tfm_test::model_config_from(
      {"model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=16"}, 4);
  LanguageModel model(c, 7);
  const Tokenizer tok(Tokenizer::Kind::Char, {'\n', 'a', 'b', 'c'});
  SampleOptions o;
  o.prompt = "ab";
  o.max_new_tokens = 60;  // beyond the context: the window slides
  o.seed = 3;
  Rng r1(o.seed);
  const Generation all = generate(model, tok, o, r1, {}, true);
  REQUIRE(all.text.size() == 60);
  REQUIRE(all.tokens.size() == 60);
  REQUIRE(all.stopped_at.empty());
  for (size_t i = 0; i < all.tokens.size(); ++i) {
    CHECK(all.logprobs[i] <= 0.0);
    CHECK(all.logprobs[i] > std::log(1e-3));  // a near-uniform model over 4 tokens
  }
  // Stop strings taken from the middle of that text: the same draws, cut where the first one begins.
  o.stop = {all.text.substr(20, 3), all.text.substr(40, 4)};
  const size_t first = all.text.find(o.stop[0]), second = all.text.find(o.stop[1]);
  const std::string stop = second < first ? o.stop[1] : o.stop[0];
  const size_t cut = std::min(first, second);
  std::string streamed;
  Rng r2(o.seed);
  const Generation g = generate(
      model, tok, o, r2, [&](const std::string& s) { streamed += s; }, true);
  CHECK(g.text == all.text.substr(0, cut));
  CHECK(streamed == g.text);
  CHECK(g.stopped_at == stop);
  CHECK(g.tokens.size() == cut + stop.size());  // a char model: one token a character
  CHECK(std::vector<int32_t>(all.tokens.begin(), all.tokens.begin() + g.tokens.size()) == g.tokens);
  // A stop string that never occurs holds text back only until it is known not to start one.
  o.stop = {"aX", "bcX"};  // 'X' is no token: held back at every "a", "b" and "bc", never matched
  streamed.clear();
  Rng r3(o.seed);
  const Generation none = generate(
      model, tok, o, r3, [&](const std::string& s) { streamed += s; }, false);
  CHECK(streamed == all.text);
  CHECK(none.text.empty());  // not recorded
  CHECK(none.stopped_at.empty());
  // Several samples from one generator differ from one another; the first is the single sample's.
  o.stop.clear();
  Rng r4(o.seed);
  const Generation s1 = generate(model, tok, o, r4, {}, true), s2 = generate(model, tok, o, r4, {}, true);
  CHECK(s1.text == all.text);
  CHECK(s2.text != s1.text);
  CHECK(generate(model, tok, o) == all.text);
}

TEST_CASE("sampling: a long model.max_seq_len costs only the positions a generation reaches", "[sampling]") {
  // Sinusoidal positions have no parameters: the same seed gives the same weights at any context length.
  const auto config = [](const std::string& context) {
    return tfm_test::model_config_from(
        {"model.d_model=16", "model.n_layers=2", "model.n_heads=2", "model.positional_encoding=sinusoidal",
         "model.max_seq_len=" + context},
        4);
  };
  LanguageModel small(config("64"), 7), huge(config("1073741824"), 7);
  CHECK(small.make_cache(1).keys[0].size(1) == 64);
  CHECK(huge.make_cache(1, 10).keys[0].size(1) == 10);
  CHECK_THROWS_WITH(small.make_cache(1, 65), Catch::Contains("positions 65"));
  // A full cache of 2^30 positions would be 64 GiB a layer: generation sizes it to prompt + new tokens.
  const Tokenizer tok(Tokenizer::Kind::Char, {'\n', 'a', 'b', 'c'});
  SampleOptions o;
  o.prompt = "abc";
  o.max_new_tokens = 30;
  Rng r1(o.seed), r2(o.seed);
  const Generation a = generate(small, tok, o, r1, {}, true), b = generate(huge, tok, o, r2, {}, true);
  REQUIRE(a.tokens.size() == 30);
  CHECK(a.tokens == b.tokens);
  CHECK(a.logprobs == b.logprobs);
}

TEST_CASE("sampling: an empty prompt starts from the end-of-text token, else a newline", "[sampling]") {
  const Tokenizer chars = Tokenizer::from_text(Tokenizer::Kind::Char, "ab\nc", "test");  // \n a b c
  CHECK(empty_prompt_token(chars) == 0);
  CHECK(empty_prompt_token(chars.with_end_of_text()) == 4);  // the separator, past the characters
  CHECK(empty_prompt_token(Tokenizer::from_text(Tokenizer::Kind::Char, "abc", "test")) == 0);  // no newline
  const Tokenizer chars_specials = chars.with_specials({"<pad>", "<unk>"});
  CHECK(empty_prompt_token(chars_specials) == 2);  // the newline, shifted past the specials
  CHECK(empty_prompt_token(Tokenizer::from_text(Tokenizer::Kind::Byte, "x", "test")) == '\n');
  const Tokenizer bpe(BpeTokenizer({{'a', 'b'}}));
  CHECK(empty_prompt_token(bpe) == '\n');
  CHECK(empty_prompt_token(bpe.with_end_of_text()) == 257);
  // GPT-2's convention: a gpt2 vocabulary starts from <|endoftext|> with or without a separator.
  const Tokenizer gpt2 = Tokenizer::load_gpt2("");
  CHECK(empty_prompt_token(gpt2) == 50256);
  CHECK(empty_prompt_token(gpt2.with_end_of_text()) == 50256);
}

TEST_CASE("sampling: <|endoftext|> in a prompt is the end-of-text token when the vocabulary has one",
          "[sampling]") {
  // As Hugging Face's GPT-2 tokenizer reads it: "Hello" 15496, "<|endoftext|>" 50256, "World" 10603.
  const Tokenizer gpt2 = Tokenizer::load_gpt2("");
  CHECK(encode_prompt(gpt2, "Hello<|endoftext|>World", "p") == std::vector<int32_t>{15496, 50256, 10603});
  CHECK(encode_prompt(gpt2, "<|endoftext|><|endoftext|>", "p") == std::vector<int32_t>{50256, 50256});
  CHECK(encode_prompt(gpt2, "Hello World", "p") == gpt2.encode("Hello World", "p"));
  CHECK(gpt2.encode("<|endoftext|>", "p").size() > 1);  // a corpus's characters stay text
  // A char vocabulary's separator (the last id); without one the characters are text.
  const Tokenizer chars = Tokenizer::from_text(Tokenizer::Kind::Char, "ab<|endoftext|>", "test");
  const int32_t eot = static_cast<int32_t>(chars.size());
  CHECK(encode_prompt(chars.with_end_of_text(), "a<|endoftext|>b", "p") ==
        std::vector<int32_t>{chars.encode("a", "p")[0], eot, chars.encode("b", "p")[0]});
  CHECK(encode_prompt(chars, "a<|endoftext|>b", "p") == chars.encode("a<|endoftext|>b", "p"));
  CHECK(encode_prompt(chars.with_end_of_text(), "<|endoftext", "p") == chars.encode("<|endoftext", "p"));
  // An error counts its offset in the whole prompt, past the marker.
  const Tokenizer small =
      Tokenizer::from_text(Tokenizer::Kind::Char, "ab\u00e9\nc", "test").with_end_of_text();
  CHECK_THROWS_WITH(encode_prompt(small, "a\u00e9<|endoftext|>z", "--prompt"),
                    Catch::StartsWith("--prompt: character 'z' (U+007A) at character 15 (counted from 0)"));
}

TEST_CASE("sampling: the end-of-text token ends a sample unless told to draw on", "[sampling]") {
  ModelConfig c = tfm_test::model_config_from(
      {"model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=16"}, 5);
  LanguageModel model(c, 7);
  const Tokenizer tok = Tokenizer(Tokenizer::Kind::Char, {'\n', 'a', 'b', 'c'}).with_end_of_text();
  REQUIRE(end_of_text_token(tok) == 4);
  CHECK(end_of_text_token(Tokenizer(Tokenizer::Kind::Char, {'\n', 'a'})) == -1);
  CHECK(end_of_text_token(Tokenizer::load_gpt2("")) == 50256);
  SampleOptions o;
  o.prompt = "ab";
  o.max_new_tokens = 200;
  o.stop_at_end_of_text = false;
  Rng r1(o.seed);
  const Generation on = generate(model, tok, o, r1, {}, true);  // a near-uniform model: <|endoftext|> comes
  const auto first = std::find(on.tokens.begin(), on.tokens.end(), 4);
  REQUIRE(first != on.tokens.end());
  CHECK(on.tokens.size() == 200);
  CHECK(on.text.find(kEndOfText) != std::string::npos);
  o.stop_at_end_of_text = true;
  std::string streamed;
  Rng r2(o.seed);
  const Generation ended = generate(
      model, tok, o, r2, [&](const std::string& s) { streamed += s; }, true);
  CHECK(ended.stopped_at == kEndOfText);
  CHECK(ended.tokens == std::vector<int32_t>(on.tokens.begin(), first + 1));  // the same draws, to its end
  CHECK(ended.text == on.text.substr(0, on.text.find(kEndOfText)));
  CHECK(streamed == ended.text);
}

TEST_CASE("sampling: generate refuses a tokenizer other than the model's before an id passes its vocabulary",
          "[sampling]") {
  ModelConfig c = tfm_test::model_config_from(
      {"model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=16"}, 4);
  LanguageModel model(c, 7);
  SampleOptions o;
  o.max_new_tokens = 5;
  o.repetition_penalty = 1.3;  // marks the prompt's ids in a table of the model's vocabulary
  // More ids than the model has: a prompt id past its vocabulary, or one within it.
  const Tokenizer more(Tokenizer::Kind::Char, {'\n', 'a', 'b', 'c', 'd', 'e'});
  const auto refused = [&](const Tokenizer& tok, const std::string& prompt, int64_t size) {
    o.prompt = prompt;
    INFO("prompt \"" << prompt << "\", " << size << " tokens");
    REQUIRE_THROWS_AS(generate(model, tok, o), Error);
    REQUIRE_THROWS_WITH(generate(model, tok, o),
                        "generate: the tokenizer has " + std::to_string(size) +
                            " tokens but the model's vocabulary (model.vocab_size) is 4: sample with the "
                            "tokenizer the model was trained with");
  };
  refused(more, "e", 6);
  refused(more, "ab", 6);
  // Fewer: a token drawn past them could not be spelled.
  refused(Tokenizer(Tokenizer::Kind::Char, {'\n', 'a', 'b'}), "ab", 3);
  model.set_training(true);
  refused(more, "ab", 6);
  CHECK(model.training());  // a refusal leaves the model's mode as it was
  // The penalty's table of seen tokens has the vocabulary's size, or none.
  const std::vector<float> logits = {1, 2, 3};
  REQUIRE_THROWS_WITH(next_token_distribution(logits.data(), 3, {true}, SampleOptions()),
                      "next_token_distribution: seen marks 1 tokens, expected V = 3 or none");
  CHECK(generate(model, Tokenizer(Tokenizer::Kind::Char, {'\n', 'a', 'b', 'c'}), o).size() == 5);
}

TEST_CASE("sampling: options out of range, non-finite logits and nothing to draw are refused by name",
          "[sampling]") {
  ModelConfig c = tfm_test::model_config_from(
      {"model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=16"}, 4);
  LanguageModel model(c, 7);
  const Tokenizer tok(Tokenizer::Kind::Char, {'\n', 'a', 'b', 'c'});
  struct Case {
    std::function<void(SampleOptions&)> set;
    std::string message;
  };
  const std::vector<Case> bad = {
      {[](SampleOptions& o) { o.temperature = -1; }, "temperature: expected a number in [0, 100], got -1"},
      {[](SampleOptions& o) { o.temperature = NAN; }, "temperature: expected a number in [0, 100], got nan"},
      {[](SampleOptions& o) { o.temperature = 101; }, "temperature: expected a number in [0, 100], got 101"},
      {[](SampleOptions& o) { o.top_p = 0; }, "top_p: expected a number in (0, 1], got 0"},
      {[](SampleOptions& o) { o.top_p = 1.5; }, "top_p: expected a number in (0, 1], got 1.5"},
      {[](SampleOptions& o) { o.min_p = -0.1; }, "min_p: expected a number in [0, 1], got -0.1"},
      {[](SampleOptions& o) { o.min_p = INFINITY; }, "min_p: expected a number in [0, 1], got inf"},
      {[](SampleOptions& o) { o.repetition_penalty = 0; },
       "repetition_penalty: expected a number in (0, 100], got 0"},
      {[](SampleOptions& o) { o.repetition_penalty = -2; },
       "repetition_penalty: expected a number in (0, 100], got -2"},
      {[](SampleOptions& o) { o.top_k = -1; }, "top_k: expected an integer >= 0, got -1"},
      {[](SampleOptions& o) { o.max_new_tokens = -1; }, "max_new_tokens: expected an integer >= 0, got -1"},
  };
  for (const Case& b : bad) {
    SampleOptions o;
    o.prompt = "ab";
    o.max_new_tokens = 3;
    b.set(o);
    INFO(b.message);
    REQUIRE_THROWS_AS(generate(model, tok, o), ConfigError);
    REQUIRE_THROWS_WITH(generate(model, tok, o), "SampleOptions: " + b.message);
    const std::vector<float> logits = {1, 2, 3, 4};
    REQUIRE_THROWS_WITH(next_token_distribution(logits.data(), 4, {}, o), "SampleOptions: " + b.message);
  }
  // The edges are accepted.
  const std::vector<Case> edges = {
      {[](SampleOptions& o) { o.temperature = 0; }, ""},
      {[](SampleOptions& o) { o.temperature = 100; }, ""},
      {[](SampleOptions& o) { o.top_p = 1e-9; }, ""},
      {[](SampleOptions& o) { o.top_p = 1; }, ""},
      {[](SampleOptions& o) { o.min_p = 1; }, ""},
      {[](SampleOptions& o) { o.top_k = 4; }, ""},
      {[](SampleOptions& o) { o.top_k = 5; }, ""},  // more than the vocabulary: every token
      {[](SampleOptions& o) { o.top_k = std::numeric_limits<int64_t>::max(); }, ""},
      {[](SampleOptions& o) { o.repetition_penalty = 100; }, ""},
      {[](SampleOptions& o) { o.max_new_tokens = 0; }, ""},
  };
  for (const Case& e : edges) {
    SampleOptions o;
    o.prompt = "ab";
    o.max_new_tokens = 3;
    e.set(o);
    CHECK_NOTHROW(generate(model, tok, o));
  }
  // A NaN or +inf logit is a diverged model, not token 0; -inf is a token that cannot be drawn.
  const SampleOptions o;
  const std::vector<float> nan_logit = {1, NAN, 3}, inf_logit = {1, 2, INFINITY};
  const std::vector<float> all_masked = {-INFINITY, -INFINITY}, one_masked = {-INFINITY, 0};
  REQUIRE_THROWS_WITH(next_token_distribution(nan_logit.data(), 3, {}, o),
                      Catch::StartsWith("next_token_distribution: the logit of token 1 is nan (of 3)"));
  REQUIRE_THROWS_WITH(next_token_distribution(inf_logit.data(), 3, {}, o),
                      Catch::StartsWith("next_token_distribution: the logit of token 2 is inf (of 3)"));
  REQUIRE_THROWS_WITH(next_token_distribution(all_masked.data(), 2, {}, o),
                      Catch::StartsWith("next_token_distribution: every one of the 2 logits is -inf"));
  CHECK(next_token_distribution(one_masked.data(), 2, {}, o) == std::vector<double>{0.0, 1.0});
  // draw_token draws from a distribution or says there is none.
  Rng rng(1);
  REQUIRE_THROWS_WITH(draw_token({}, rng), "draw_token: no probabilities to draw from (an empty vocabulary)");
  REQUIRE_THROWS_WITH(draw_token({0.0, 0.0}, rng),
                      "draw_token: none of the 2 probabilities is positive: no token can be drawn");
  REQUIRE_THROWS_WITH(draw_token({0.5, NAN}, rng),
                      Catch::StartsWith("draw_token: the probability of token 1 is nan"));
  REQUIRE_THROWS_WITH(draw_token({-0.5, 1.5}, rng),
                      Catch::StartsWith("draw_token: the probability of token 0 is -0.5"));
  CHECK(draw_token({0.0, 1.0, 0.0}, rng) == 1);
}
