// The run configuration: ONE table of keys (config_keys()) drives the defaults, the validation, the
// `--set` overrides and the documentation (`tfm config --keys`), so none of them can drift apart.
//
// A config is JSON (docs/architecture.md); every key is optional. Resolving it fills in every
// default, so the resolved tree holds every key of the table and nothing else. Errors are
// tfm::ConfigError whose message starts with the key path (or the file) and states expected vs got.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/config/data_config.h"
#include "tfm/config/train_config.h"
#include "tfm/nn/model_config.h"

namespace tfm {

enum class KeyType { Integer, Number, Boolean, String, NumberPair };

// How a key reads and writes the member of an option struct (ModelConfig, TrainConfig) it is bound to.
template <class S>
struct MemberBinding {
  std::function<void(S&, const nlohmann::json&)> set;
  std::function<nlohmann::json(const S&)> get;
};

struct KeySpec {
  std::string path;  // "train.optimizer.lr"
  KeyType type;
  nlohmann::json default_value;  // null: derived from other keys (see `derived`, `rule`)
  std::string derived;           // how a null default is computed, in words: "4 * model.d_model"
  std::function<nlohmann::json(const nlohmann::json& tree)> rule;  // ... and in code, from the tree so far
  double min = 0, max = 0;  // numeric range, used when has_min / has_max
  bool has_min = false, has_max = false;
  bool min_open = false, max_open = false;  // exclusive bounds
  std::vector<std::string> choices;         // allowed strings (empty: any)
  // A string key that also takes a JSON array of non-empty strings (data.path's list of files,
  // directories and globs): the resolved config keeps the list as given, and Config::string reads it as
  // the list's JSON text, which the key's reader parses (as it parses that text given as a string).
  bool list_as_text = false;
  bool resumable = false;  // may change with `train --resume DIR --set ...`
  // model.*: weights trained under one value mean the same under another (dropout, initialisation, an
  // auxiliary loss's weight, the context length), so `--init-from` lets it differ from the file's run.
  bool weights_agnostic = false;
  std::vector<ObjectiveKind> objectives;  // the train.objective values that read it (empty: all)
  bool read_by(ObjectiveKind objective) const {
    return objectives.empty() ||
           std::find(objectives.begin(), objectives.end(), objective) != objectives.end();
  }
  // Read only while the string key only_with_key holds one of only_with_values (train.optimizer.muon_lr:
  // train.optimizer.name "muon"); empty: always.
  std::string only_with_key;
  std::vector<std::string> only_with_values;
  // Set (with only_with_*): a value the choice does not read is warned about (config_warnings), not
  // refused. For keys the shipped configs set for the common choice (AdamW's betas, the decaying
  // schedules' min_lr), so that `--set train.optimizer.name=sgd` works on any of them.
  bool only_with_warns = false;
  // Read only when other keys' values call for it (train.optimizer.muon_momentum_min: with a momentum
  // warmup or cooldown; `read_when` says when, in words): `unread_because(tree)` says what in `tree`
  // leaves it unread ("" when it is read), and a value set away from its default there is warned about
  // (config_warnings). Unset: always read (besides only_with_*).
  std::string read_when;
  std::function<std::string(const nlohmann::json& tree)> unread_because;
  std::string meaning;
  // The member the key is bound to: model.* keys a ModelConfig's (nn/model_config.h), train.* keys a
  // TrainConfig's (config/train_config.h), data.* keys a DataConfig's (config/data_config.h); unset for
  // the others (seed, output.dir).
  MemberBinding<ModelConfig> model;
  MemberBinding<TrainConfig> train;
  MemberBinding<DataConfig> data;
  template <class S>
  const MemberBinding<S>& binding() const;
  template <class S>
  MemberBinding<S>& binding() {
    return const_cast<MemberBinding<S>&>(static_cast<const KeySpec*>(this)->binding<S>());
  }
};
template <>
inline const MemberBinding<ModelConfig>& KeySpec::binding<ModelConfig>() const {
  return model;
}
template <>
inline const MemberBinding<TrainConfig>& KeySpec::binding<TrainConfig>() const {
  return train;
}
template <>
inline const MemberBinding<DataConfig>& KeySpec::binding<DataConfig>() const {
  return data;
}

// Every key, in documentation order.
const std::vector<KeySpec>& config_keys();
const KeySpec* find_key(const std::string& path);

// A resolved, validated configuration.
struct Config {
  nlohmann::json tree;  // every key of the table, nested as in the file

  const nlohmann::json& at(const std::string& path) const;  // throws tfm::Error for unknown paths
  // The value of a key of that type; ConfigError naming the key, what it holds and the getter that reads
  // it when it holds another (a string key read with integer(), a number key with integer(), null).
  int64_t integer(const std::string& path) const;
  double number(const std::string& path) const;  // an integer key too
  bool boolean(const std::string& path) const;
  std::string string(const std::string& path) const;  // a list_as_text key's list: its JSON text

  // The model's part, for a vocabulary of `vocab_size` symbols.
  ModelConfig model(int64_t vocab_size) const;
  // The training part: every train.* key, resolved.
  TrainConfig train() const;
  // The data part: every data.* key, resolved (a key resolved from the data itself, such as
  // data.document_separator, unset until then).
  DataConfig data() const;
};

// Parses JSON text; a syntax error throws ConfigError "SOURCE:LINE:COLUMN: malformed JSON: ...".
nlohmann::json parse_json(const std::string& text, const std::string& source);
// Reads and parses a JSON file (IoError when unreadable).
nlohmann::json read_json_file(const std::string& path);

// Applies "key.path=value" to `tree` (value parsed as JSON, else taken as a string).
void apply_override(nlohmann::json& tree, const std::string& assignment);

// Validates `user` (after the overrides) and fills in every default. All problems are reported in
// one ConfigError, one per line, each starting with its key path.
Config resolve_config(nlohmann::json user, const std::vector<std::string>& overrides = {});
// read_json_file + resolve_config; a default output.dir becomes runs/<file name without .json>. An empty
// path reads no file: the key table's defaults and the overrides (`tfm train --set data.path=notes.txt`),
// output.dir by default runs/<data.path's name without its extension> (runs/notes).
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The keys that may change on `train --resume DIR --set ...`, in key-table order: "a, b, c".
std::string resumable_keys_text();
// On resume: applies `overrides` to a run's resolved config; only resumable keys may change.
Config resume_config(const Config& run, const std::vector<std::string>& overrides);
// The config with its paths absolute, taken from the working directory: data.path's entries,
// data.tokenizer_path, and data.cache_dir (a derived one derived again from the absolute data.path). A
// new run records these, so that its evaluations, samples and resumes find its files from anywhere.
Config with_absolute_paths(const Config& config);
// The config an export publishes (safetensors' "config" metadata, GGUF's tfm.config): its local paths,
// which a run records absolute (with_absolute_paths) and which name users and directories, cut to what
// names the data: data.path's entries and data.tokenizer_path to their last names (corpus_spec_names),
// data.cache_dir and output.dir null. resolve_config reads it (those two derived again).
nlohmann::json exported_config(const Config& config);
// What a valid config sets that nothing reads (an only_with_warns key whose only_with_key holds another
// value: `train.optimizer.momentum` under "adamw", named with what reads it), and a learning-rate schedule
// its own numbers undo (a warmup as long as the run, or into wsd's decay). For the run's log.
std::vector<std::string> config_warnings(const Config& config);

// Keys whose values differ between two resolved configs (for "checkpoint does not match" errors).
std::vector<std::string> differing_keys(const Config& a, const Config& b, const std::string& prefix = "");
// A value of key `k` as configs are compared: a list_as_text key's list, given as a list or as its JSON
// text in a string (how runs recorded a list before), is the list; any other value is itself.
nlohmann::json comparable_value(const KeySpec& k, const nlohmann::json& value);

// The key table as Markdown (for the README): key, type, default, allowed, meaning.
std::string keys_markdown();

// A JSON value as a message shows it: compact, invalid UTF-8 replaced, cut to `max_chars` ("..." marks
// the cut), so that a long or nested value cannot flood a message.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 60);

// Levenshtein distance with a swap of two neighbouring characters as one edit (optimal string
// alignment: "josn" is 1 from "json"), for did-you-mean suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace tfm
