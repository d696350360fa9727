// Sampling from a language model with its KV cache: the filters of sampling.h, a seeded draw, stop
// strings held back while they may still be forming.
#include "tfm/models/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <limits>
#include <sstream>

#include "tfm/engine/gemm.h"
#include "tfm/engine/ops.h"

namespace tfm {

namespace {
std::string bound_text(double v) {  // 0.5, 100, 50257
  std::ostringstream os;
  os << std::setprecision(15) << v;
  return os.str();
}
}  // namespace

bool SampleRange::allows(double value) const {
  if (!std::isfinite(value) || (integer && value != std::floor(value))) return false;
  return (lo_open ? value > lo : value >= lo) && value <= hi;
}

std::string SampleRange::bounds() const {
  if (std::isinf(hi)) return (lo_open ? "> " : ">= ") + bound_text(lo);
  return (lo_open ? "(" : "[") + bound_text(lo) + ", " + bound_text(hi) + "]";
}

std::string SampleRange::expected() const {
  return std::string(integer ? "an integer " : "a number ") + (std::isinf(hi) ? "" : "in ") + bounds();
}

template <>
const std::vector<std::string>& enum_names<SampleOption>() {
  static const std::vector<std::string> names = {"max_new_tokens", "temperature", "top_k",
                                                 "top_p",          "min_p",       "repetition_penalty"};
  return names;
}

SampleRange sample_option_range(SampleOption option) {
  constexpr double kNone = std::numeric_limits<double>::infinity();  // no upper bound
  // {integer, lo, hi, lo_open}, in SampleOption's order. Temperatures above 100 leave every
  // distribution as flat as 100 does; a top_k at or above the vocabulary keeps every token (Hugging
  // Face's and llama.cpp's meaning), so any k >= 0 is one; top_p 0 would keep no token; a repetition
  // penalty of 0 divides by zero, a negative one flips the logits' signs.
  const SampleRange ranges[] = {{true, 0.0, kNone, false},   // max_new_tokens
                                {false, 0.0, 100.0, false},  // temperature
                                {true, 0.0, kNone, false},   // top_k
                                {false, 0.0, 1.0, true},     // top_p
                                {false, 0.0, 1.0, false},    // min_p
                                {false, 0.0, 100.0, true}};  // repetition_penalty
  return ranges[static_cast<size_t>(option)];
}

void SampleOptions::check() const {
  const std::pair<SampleOption, double> values[] = {
      {SampleOption::MaxNewTokens, static_cast<double>(max_new_tokens)},
      {SampleOption::Temperature, temperature},
      {SampleOption::TopK, static_cast<double>(top_k)},
      {SampleOption::TopP, top_p},
      {SampleOption::MinP, min_p},
      {SampleOption::RepetitionPenalty, repetition_penalty}};
  for (const auto& [option, value] : values) {
    const SampleRange range = sample_option_range(option);
    if (!range.allows(value))
      throw ConfigError("SampleOptions: " + name_of(option) + ": expected " + range.expected() + ", got " +
                        (range.integer ? std::to_string(static_cast<int64_t>(value)) : bound_text(value)));
  }
}

std::vector<double> next_token_distribution(const float* logits, int64_t V, const std::vector<bool>& seen,
                                            const SampleOptions& o) {
  TFM_CHECK(V > 0 && logits, "next_token_distribution", "expected the logits of V > 0 tokens, got V = ", V,
            logits ? "" : " and no logits");
  TFM_CHECK(seen.empty() || static_cast<int64_t>(seen.size()) == V, "next_token_distribution", "seen marks ",
            seen.size(), " tokens, expected V = ", V, " or none");
  o.check();
  bool any = false;  // a logit above -infinity: a token that can be drawn
  for (int64_t i = 0; i < V; ++i) {
    TFM_CHECK(!std::isnan(logits[i]) && logits[i] != INFINITY, "next_token_distribution",
              "the logit of token ", i, " is ", logits[i], " (of ", V,
              "): the model's output is not finite (diverged weights?), and there is no distribution to draw "
              "from");
    any = any || logits[i] != -INFINITY;
  }
  TFM_CHECK(any, "next_token_distribution", "every one of the ", V,
            " logits is -inf: there is no distribution to draw from");
  std::vector<double> z(logits, logits + V);  // (V,)
  if (o.repetition_penalty != 1.0 && !seen.empty())
    for (int64_t i = 0; i < V; ++i)
      if (seen[i]) z[i] = z[i] > 0 ? z[i] / o.repetition_penalty : z[i] * o.repetition_penalty;
  std::vector<double> p(V, 0.0);
  if (o.temperature <= 0.0) {  // greedy: every filter below keeps the most likely token
    p[std::max_element(z.begin(), z.end()) - z.begin()] = 1.0;
    return p;
  }
  for (double& v : z) v /= o.temperature;
  if (o.top_k > 0 && o.top_k < V) {  // a k of at least V keeps every token
    std::vector<double> sorted = z;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<double>());
    const double kth = sorted[o.top_k - 1];
    for (double& v : z)
      if (v < kth) v = -INFINITY;
  }
  const double mx = *std::max_element(z.begin(), z.end());
  double sum = 0.0;
  for (int64_t i = 0; i < V; ++i) sum += (p[i] = std::exp(z[i] - mx));
  for (double& v : p) v /= sum;
  double threshold = 0.0;  // tokens below it are dropped
  if (o.top_p < 1.0) {
    std::vector<double> sorted = p;
    std::sort(sorted.begin(), sorted.end(), std::greater<double>());
    double cumulative = 0.0;
    for (const double v : sorted) {  // the smallest prefix reaching top_p; its last value is the boundary
      cumulative += v;
      threshold = v;
      if (cumulative >= o.top_p * (1.0 - 1e-12)) break;
    }
  }
  threshold = std::max(threshold, o.min_p * (1.0 / sum));  // p_max = exp(0) / sum
  if (threshold > 0.0) {
    double kept = 0.0;
    for (double& v : p) kept += (v = v >= threshold ? v : 0.0);
    for (double& v : p) v /= kept;
  }
  return p;
}

int32_t draw_token(const std::vector<double>& probs, Rng& rng) {
  TFM_CHECK(!probs.empty(), "draw_token", "no probabilities to draw from (an empty vocabulary)");
  bool any = false;
  for (size_t i = 0; i < probs.size(); ++i) {
    TFM_CHECK(probs[i] >= 0.0 && probs[i] <= 1.0, "draw_token", "the probability of token ", i, " is ",
              probs[i], " (of ", probs.size(),
              "); expected probabilities in [0, 1], as next_token_distribution's");
    any = any || probs[i] > 0.0;
  }
  TFM_CHECK(any, "draw_token", "none of the ", probs.size(),
            " probabilities is positive: no token can be drawn");
  const double u = static_cast<double>(rng.next_u64() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  double acc = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    acc += probs[i];
    if (u < acc) return static_cast<int32_t>(i);
  }
  size_t last = probs.size() - 1;  // rounding left u above the total: the last kept token
  while (probs[last] == 0.0) --last;
  return static_cast<int32_t>(last);
}

namespace {

// Streams generated text while watching for stop strings: text that may be the start of one is held
// back until the next pieces show whether it is.
class StopWatch {
 public:
  StopWatch(const std::vector<std::string>& stops, const std::function<void(const std::string&)>& emit)
      : emit_(emit) {
    for (const std::string& s : stops)
      if (!s.empty()) stops_.push_back(s);  // "" would stop before anything is generated
  }

  // Adds a piece; returns true (having emitted the text before it) when a stop string is complete.
  bool add(const std::string& piece) {
    pending_ += piece;
    // The earliest occurrence of any stop string. None can have started in text already emitted: that
    // text was never a possible start of one.
    size_t first = std::string::npos;
    for (const std::string& s : stops_) {
      const size_t at = pending_.find(s);
      if (at < first) first = at, stopped_at_ = s;
    }
    if (first != std::string::npos) {
      emit(pending_.substr(0, first));
      pending_.clear();
      return true;
    }
    // The longest end of the pending text that begins some stop string is held back.
    size_t hold = 0;
    for (const std::string& s : stops_)
      for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n)
        if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
          hold = n;
          break;
        }
    emit(pending_.substr(0, pending_.size() - hold));
    pending_.erase(0, pending_.size() - hold);
    return false;
  }
  // The generation ended without a stop string: what was held back is text after all.
  void flush() {
    emit(pending_);
    pending_.clear();
  }
  const std::string& stopped_at() const { return stopped_at_; }

 private:
  void emit(const std::string& text) {
    if (!text.empty()) emit_(text);
  }
  std::vector<std::string> stops_;
  const std::function<void(const std::string&)>& emit_;
  std::string pending_, stopped_at_;
};

}  // namespace

int32_t end_of_text_token(const Tokenizer& tokenizer) {
  if (tokenizer.has_end_of_text()) return tokenizer.end_of_text_id();
  if (const Gpt2Bpe* gpt2 = tokenizer.gpt2(); gpt2 && gpt2->end_of_text() >= 0)
    return static_cast<int32_t>(tokenizer.specials().size()) + gpt2->end_of_text();
  return -1;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, const std::string& prompt,
                                   const std::string& source) {
  return tokenizer.encode_marked(prompt, {{kEndOfText, end_of_text_token(tokenizer)}}, source);
}

int32_t empty_prompt_token(const Tokenizer& tokenizer) {
  if (const int32_t eot = end_of_text_token(tokenizer); eot >= 0) return eot;
  const int32_t S = static_cast<int32_t>(tokenizer.specials().size());
  if (tokenizer.kind() == Tokenizer::Kind::Bpe) return tokenizer.encode("\n", "--prompt").front();
  const auto& s = tokenizer.symbols();  // char and byte: the newline when the vocabulary has one
  const auto nl = std::lower_bound(s.begin(), s.end(), static_cast<uint32_t>('\n'));
  return nl != s.end() && *nl == '\n' ? S + static_cast<int32_t>(nl - s.begin()) : 0;
}

Generation generate(LanguageModel& model, const Tokenizer& tokenizer, const SampleOptions& o, Rng& rng,
                    const std::function<void(const std::string&)>& on_text, bool record) {
  const int64_t L = model.config().max_seq_len, V = model.config().vocab_size;
  // A tokenizer of more ids than the model's would feed it ids past its embedding (and mark them in
  // `seen`), one of fewer could not spell every token drawn.
  TFM_CHECK(tokenizer.size() == V, "generate", "the tokenizer has ", tokenizer.size(),
            " tokens but the model's vocabulary (model.vocab_size) is ", V,
            ": sample with the tokenizer the model was trained with");
  o.check();
  std::vector<int32_t> ids = encode_prompt(tokenizer, o.prompt, "--prompt");
  if (ids.empty()) ids.push_back(empty_prompt_token(tokenizer));
  for (size_t i = 0; i < ids.size(); ++i)
    TFM_CHECK(ids[i] >= 0 && ids[i] < V, "generate", "prompt token ", ids[i], " at position ", i,
              " is outside the model's vocabulary [0, ", V, ")");
  // The model's mode comes back however generation ends (a NaN logit throws mid-way).
  struct ModeRestore {
    LanguageModel& model;
    const bool was_training;
    ~ModeRestore() { model.set_training(was_training); }
  } restore{model, model.training()};
  model.set_training(false);
  NoGradGuard no_grad;
  ThreadInvariantProducts same_bits_any_threads;  // the logits, and so the text, whatever the thread count
  // The repetition penalty's context: every token of the prompt and of the generation so far.
  std::vector<bool> seen;
  if (o.repetition_penalty != 1.0) {
    seen.assign(static_cast<size_t>(V), false);
    for (const int32_t id : ids) seen[id] = true;
  }
  KVCache cache;
  std::vector<float> last(V);
  // (Re)fills the cache with the last `keep` tokens and keeps the logits of the final one.
  auto refill = [&](size_t keep) {
    // What this generation reaches: the window and the tokens still to draw, within the context.
    cache = model.make_cache(1, std::min<int64_t>(L, static_cast<int64_t>(keep) + o.max_new_tokens));
    const std::vector<int32_t> window(ids.end() - static_cast<std::ptrdiff_t>(keep), ids.end());
    const std::vector<float> logits =
        model.forward_cached(cache, window, 1, static_cast<int64_t>(window.size())).to_vector();
    std::copy(logits.end() - V, logits.end(), last.begin());
  };
  const size_t read = std::min<size_t>(ids.size(), static_cast<size_t>(L));
  refill(read);
  Generation out;
  if (record) out.prompt_tokens.assign(ids.end() - static_cast<std::ptrdiff_t>(read), ids.end());
  const std::function<void(const std::string&)> emit = [&](const std::string& text) {
    if (record) out.text += text;
    if (on_text) on_text(text);
  };
  StopWatch watch(o.stop, emit);
  const int32_t end_of_text = o.stop_at_end_of_text ? end_of_text_token(tokenizer) : -1;
  bool stopped = false, ended = false;
  for (int64_t i = 0; i < o.max_new_tokens && !stopped; ++i) {
    const std::vector<double> probs = next_token_distribution(last.data(), V, seen, o);
    const int32_t next = draw_token(probs, rng);  // greedy: the one token with probability 1
    if (record) {
      out.tokens.push_back(next);
      out.logprobs.push_back(std::log(probs[next]));
    }
    if (!seen.empty()) seen[next] = true;
    if (next == end_of_text) {  // the model ends the document: a next one would be another text
      ended = true;
      break;
    }
    ids.push_back(next);
    // Only the last context's tokens are read again: a long generation stays in constant memory.
    if (ids.size() > 2 * static_cast<size_t>(L)) ids.erase(ids.begin(), ids.end() - L);
    stopped = watch.add(tokenizer.decode(next));
    if (stopped || i + 1 == o.max_new_tokens) break;
    if (cache.length >= L) {
      // The context is full: restart from the newest half (amortised O(1) refills per token).
      refill(std::min<size_t>(ids.size(), static_cast<size_t>(std::max<int64_t>(1, L / 2))));
    } else {
      const std::vector<float> logits = model.forward_cached(cache, {next}, 1, 1).to_vector();
      std::copy(logits.end() - V, logits.end(), last.begin());
    }
  }
  if (stopped) {
    out.stopped_at = watch.stopped_at();
  } else {
    watch.flush();
    if (ended) out.stopped_at = kEndOfText;
  }
  return out;
}

std::string generate(LanguageModel& model, const Tokenizer& tokenizer, const SampleOptions& options,
                     const std::function<void(const std::string&)>& on_text) {
  Rng rng(options.seed);
  return generate(model, tokenizer, options, rng, on_text, !on_text).text;
}

}  // namespace tfm
