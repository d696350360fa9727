// Text files to token streams, the train/validation split and seeded random windows.
#include "tfm/data/dataset.h"

#include <algorithm>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {
namespace {

// The whole data file (bounded: token ids take 4 bytes per byte of text at worst).
std::string read_data_file(const std::string& path) {
  constexpr uint64_t kMaxDataBytes = uint64_t{1} << 31;
  try {
    return read_file(path, kMaxDataBytes);
  } catch (const IoError& e) {
    if (path.find("tinyshakespeare") == std::string::npos) throw;
    throw IoError(std::string(e.what()) + " (data.path; scripts/get_data.sh fetches it)");
  }
}

Dataset split(const std::string& path, Tokenizer tok, std::vector<int32_t> ids, double val_fraction,
              int64_t seq_len) {
  Dataset d;
  d.path = path;
  d.tokenizer = std::move(tok);
  const int64_t N = static_cast<int64_t>(ids.size());
  // As torch_lm.py: int(len(data) * (1.0 - val_fraction)).
  const int64_t n_train = static_cast<int64_t>(static_cast<double>(N) * (1.0 - val_fraction));
  const int64_t need = seq_len + 2;  // randint(n - T - 1) needs n - T - 1 >= 1
  auto too_short = [&](const char* which, int64_t n) {
    if (n < need)
      throw IoError(path + ": the " + which + " split has " + std::to_string(n) + " tokens (" +
                    std::to_string(N) + " in the file, data.val_fraction = " + std::to_string(val_fraction) +
                    "); one sequence needs train.seq_len + 2 = " + std::to_string(need) +
                    " (use a longer text or a smaller train.seq_len)");
  };
  too_short("training", n_train);
  too_short("validation", N - n_train);
  d.train.assign(ids.begin(), ids.begin() + n_train);
  d.val.assign(ids.begin() + n_train, ids.end());
  return d;
}

}  // namespace

Dataset load_dataset(const std::string& path, const std::string& tokenizer, double val_fraction,
                     int64_t seq_len) {
  const std::string text = read_data_file(path);
  if (text.empty()) throw IoError(path + ": the data file is empty");
  Tokenizer tok = Tokenizer::from_text(Tokenizer::parse_kind(tokenizer), text, path);
  std::vector<int32_t> ids = tok.encode(text, path);
  return split(path, std::move(tok), std::move(ids), val_fraction, seq_len);
}

Dataset load_dataset(const std::string& path, const Tokenizer& tokenizer, double val_fraction,
                     int64_t seq_len) {
  const std::string text = read_data_file(path);
  if (text.empty()) throw IoError(path + ": the data file is empty");
  std::vector<int32_t> ids = tokenizer.encode(text, path);
  return split(path, tokenizer, std::move(ids), val_fraction, seq_len);
}

// ---- BatchSampler ----

void BatchSampler::sample(const std::vector<int32_t>& tokens, int64_t B, int64_t T, std::vector<int32_t>& x,
                          std::vector<int32_t>& y) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  TFM_CHECK(n - T - 1 >= 1, "BatchSampler::sample", "expected at least T + 2 = ", T + 2, " tokens, got ", n);
  x.resize(B * T);
  y.resize(B * T);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = static_cast<int64_t>(rng_.below(static_cast<uint64_t>(n - T - 1)));
    std::copy(tokens.begin() + i, tokens.begin() + i + T, x.begin() + b * T);
    std::copy(tokens.begin() + i + 1, tokens.begin() + i + T + 1, y.begin() + b * T);
  }
}

}  // namespace tfm
