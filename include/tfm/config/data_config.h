// The options of the data: the data.* keys, bound to these members by the config table
// (config/config.h) as train.* keys are to TrainConfig's, so a key's default, type and allowed values
// come from this file; Config::data() gives the resolved struct, and the data's readers take their
// options from it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tfm/data/tokenizer.h"
#include "tfm/engine/enum_names.h"

namespace tfm {

// Each option enum is spelled by enum_names<E>() (engine/enum_names.h), in declaration order.
enum class DataFormat { Text, Pairs };  // "text", "pairs"
enum class BadRecord { Error, Skip };   // "error", "skip": what a JSON Lines record without text does
template <>
const std::vector<std::string>& enum_names<DataFormat>();
template <>
const std::vector<std::string>& enum_names<BadRecord>();

struct DataConfig {
  // A file, folder or glob, or a list of them as the list's JSON text (KeySpec::list_as_text): the
  // corpus readers parse both (data/corpus.h).
  std::string path = "data/tinyshakespeare.txt";
  DataFormat format = DataFormat::Text;  // resolved: pairs for seq2seq
  Tokenizer::Kind tokenizer = Tokenizer::Kind::Char;
  std::optional<std::string> tokenizer_path;  // bpe's file; gpt2's files (unset: GPT-2's own)
  std::optional<std::string> cache_dir;       // unset: .tfm-cache beside the data (data/token_cache.h)
  double val_fraction = 0.1;
  std::string text_field = "text";         // JSON Lines: the field holding a record's text
  std::optional<bool> document_separator;  // unset: resolved from the data (more than one document)
  BadRecord on_bad_record = BadRecord::Error;
  int64_t max_pairs = 0;                           // seq2seq: the first N pairs (0: all)
  int64_t min_freq = 1;                            // seq2seq's word vocabulary
  int64_t max_source_len = 0, max_target_len = 0;  // seq2seq; resolved from model.max_seq_len
};

}  // namespace tfm
