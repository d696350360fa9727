// What the objectives' tests share: a toy translation corpus, a small encoder-decoder config for it,
// and a run's metrics.jsonl read back.
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/engine/random.h"

namespace tfm_test {

inline std::vector<nlohmann::json> read_metrics(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A toy translation task a small encoder-decoder learns in seconds: English number words to French
// ones in reverse order ("one two three" -> "trois deux un"), 2 to 5 words, with a final "." / "!".
inline std::string write_reversal_pairs(const std::string& dir, int n) {
  const char* en[] = {"one", "two", "three", "four", "five", "six", "seven", "eight"};
  const char* fr[] = {"un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit"};
  tfm::Rng rng(11);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/pairs.txt";
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    const int len = 2 + static_cast<int>(rng.below(4));
    std::vector<int> w(static_cast<size_t>(len));
    for (int& x : w) x = static_cast<int>(rng.below(8));
    std::string s, t;
    for (int j = 0; j < len; ++j) s += std::string(j ? " " : "") + en[w[j]];
    for (int j = len - 1; j >= 0; --j) t += std::string(j < len - 1 ? " " : "") + fr[w[j]];
    const bool excl = rng.below(2) == 0;
    out << s << (excl ? "!" : ".") << "\t" << t << (excl ? " !" : ".") << "\tsynthetic\n";
  }
  return path;
}

inline tfm::Config s2s_config(const std::string& dir, const std::string& data,
                              std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"data.path=" + data,
                                   "output.dir=" + dir,
                                   "train.objective=seq2seq",
                                   "data.tokenizer=word",
                                   "data.val_fraction=0.1",
                                   "model.d_model=32",
                                   "model.n_encoder_layers=2",
                                   "model.n_decoder_layers=2",
                                   "model.n_heads=4",
                                   "model.d_ff=64",
                                   "model.max_seq_len=8",
                                   "train.batch_size=32",
                                   "train.max_steps=800",
                                   "train.eval_interval=400",
                                   "train.eval_steps=4",
                                   "train.log_interval=50",
                                   "train.checkpoint_interval=100",
                                   "train.threads=1",
                                   "train.lr_schedule.warmup_steps=50",
                                   "train.optimizer.lr=5e-3",
                                   "train.optimizer.weight_decay=0"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return tfm::resolve_config(nlohmann::json::object(), sets);
}

}  // namespace tfm_test
