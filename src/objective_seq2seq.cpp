// seq2seq: an encoder-decoder over sentence pairs (in progress).
#include "tfm/error.h"
#include "tfm/objective.h"

namespace tfm {
std::unique_ptr<Objective> make_seq2seq(const Config&, const Checkpoint*, bool, int) {
  throw ConfigError("train.objective: \"seq2seq\" is not built yet");
}
}  // namespace tfm
