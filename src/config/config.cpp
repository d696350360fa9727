#include "tfm/config/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "table.h"
#include "tfm/data/corpus.h"
#include "tfm/data/tokenizer.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {
using nlohmann::json;

namespace {

using T = KeyType;

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream is(path);
  while (std::getline(is, part, '.')) parts.push_back(part);
  return parts;
}

}  // namespace

const json* lookup(const json& tree, const std::string& path) {
  const json* node = &tree;
  for (const auto& part : split_path(path)) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(part);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

namespace {

// Removes the key at `path` from `tree` (nothing when it is not there).
void erase_key(json& tree, const std::string& path) {
  const auto parts = split_path(path);
  json* node = &tree;
  for (size_t p = 0; p + 1 < parts.size() && node; ++p)
    node = node->is_object() && node->contains(parts[p]) ? &(*node)[parts[p]] : nullptr;
  if (node && node->is_object()) node->erase(parts.back());
}

void assign(json& tree, const std::string& path, json value) {
  json* node = &tree;
  for (const auto& part : split_path(path)) {
    if (!node->is_object()) *node = json::object();
    node = &(*node)[part];
  }
  *node = std::move(value);
}

std::string number_str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

bool is_section(const std::string& path) {
  for (const auto& k : config_keys())
    if (k.path.size() > path.size() && k.path.compare(0, path.size(), path) == 0 &&
        k.path[path.size()] == '.')
      return true;
  return false;
}

std::string describe_range(const KeySpec& k) {
  if (k.has_min && k.has_max)
    return std::string("in ") + (k.min_open ? "(" : "[") + number_str(k.min) + ", " + number_str(k.max) +
           (k.max_open ? ")" : "]");
  if (k.has_min) return (k.min_open ? "> " : ">= ") + number_str(k.min);
  if (k.has_max) return (k.max_open ? "< " : "<= ") + number_str(k.max);
  return "";
}

std::string describe_choices(const KeySpec& k) {
  std::string s;
  for (size_t i = 0; i < k.choices.size(); ++i) s += (i ? ", \"" : "\"") + k.choices[i] + "\"";
  return s;
}

std::string describe_expected(const KeySpec& k) {
  const std::string range = describe_range(k);
  switch (k.type) {
    case T::Integer:
      return "an integer" + (range.empty() ? "" : " " + range);
    case T::Number:
      return "a number" + (range.empty() ? "" : " " + range);
    case T::Boolean:
      return "true or false";
    case T::String:
      if (k.list_as_text) return "a string or a non-empty list of non-empty strings";
      return k.choices.empty() ? "a string" : "one of " + describe_choices(k);
    case T::NumberPair:
      return "two numbers [a, b], each " + range;
  }
  return "";
}

bool in_range(const KeySpec& k, double v) {
  if (!std::isfinite(v)) return false;
  if (k.has_min && (k.min_open ? v <= k.min : v < k.min)) return false;
  if (k.has_max && (k.max_open ? v >= k.max : v > k.max)) return false;
  return true;
}

// Checks one given value against its row; returns the normalised value or pushes an error.
bool check_value(const KeySpec& k, const json& v, json& out, std::vector<std::string>& errors) {
  auto fail = [&] {
    std::string hint;
    // "--set lr=.1" is no JSON number, so it arrives as the string ".1": say how to write it.
    if ((k.type == T::Number || k.type == T::Integer) && v.is_string()) {
      const std::string text = v.get<std::string>();
      char* end = nullptr;
      const double d = std::strtod(text.c_str(), &end);
      if (!text.empty() && *end == '\0' && std::isfinite(d))
        hint = " (a JSON number starts with a digit or '-': write " + number_str(d) + ")";
    }
    errors.push_back(k.path + ": expected " + describe_expected(k) + ", got " + json_excerpt(v) + hint);
    return false;
  };
  switch (k.type) {
    case T::Integer: {
      if (!v.is_number()) return fail();
      const double d = v.get<double>();
      // 2e3 is accepted as 2000; 2.5 is not an integer.
      if (!v.is_number_integer() && (!std::isfinite(d) || std::floor(d) != d)) return fail();
      // Sizes beyond 2^31 would only ever be typos: every integer stays in int range. A value past it
      // (a seed of 2^64, d_model = 1e23) is an integer out of range, not a non-integer.
      constexpr double kIntegerLimit = static_cast<double>(int64_t{1} << 31);
      const bool beyond =
          v.is_number_unsigned() ? v.get<uint64_t>() > (uint64_t{1} << 31) : std::fabs(d) > kIntegerLimit;
      if (beyond) {
        const double lo = k.has_min ? k.min + (k.min_open ? 1 : 0) : -kIntegerLimit;
        const double hi = k.has_max ? std::min(k.max - (k.max_open ? 1 : 0), kIntegerLimit) : kIntegerLimit;
        const std::string value = v.is_number_float() ? number_str(d) : v.dump();
        errors.push_back(k.path + ": " + value + " is out of range: expected an integer in [" +
                         std::to_string(static_cast<int64_t>(lo)) + ", " +
                         std::to_string(static_cast<int64_t>(hi)) + "] (at most 2^31)");
        return false;
      }
      const int64_t i = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(d);
      if (!in_range(k, static_cast<double>(i))) return fail();
      out = i;
      return true;
    }
    case T::Number:
      if (!v.is_number() || !in_range(k, v.get<double>())) return fail();
      out = v.get<double>();
      return true;
    case T::Boolean:
      if (!v.is_boolean()) return fail();
      out = v;
      return true;
    case T::String:
      if (k.list_as_text && v.is_array()) {  // kept a list; Config::string gives its JSON text
        if (v.empty()) return fail();
        for (const json& e : v)
          if (!e.is_string() || e.get<std::string>().empty() ||
              e.get<std::string>().find('\0') != std::string::npos)
            return fail();
        out = v;
        return true;
      }
      if (!v.is_string()) return fail();
      if (!k.choices.empty() &&
          std::find(k.choices.begin(), k.choices.end(), v.get<std::string>()) == k.choices.end())
        return fail();
      if (k.choices.empty() && v.get<std::string>().empty()) {
        errors.push_back(k.path + ": expected a non-empty string, got \"\"");
        return false;
      }
      if (v.get<std::string>().find('\0') != std::string::npos) {  // the OS would cut a path there
        errors.push_back(k.path + ": " + json_excerpt(v) +
                         " holds a NUL byte (\\u0000), which no path or name can contain");
        return false;
      }
      out = v;
      return true;
    case T::NumberPair:
      if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number() ||
          !in_range(k, v[0].get<double>()) || !in_range(k, v[1].get<double>()))
        return fail();
      out = json::array({v[0].get<double>(), v[1].get<double>()});
      return true;
  }
  return fail();
}

// What nanoGPT (and GPT-2's Hugging Face config) call the keys tfm names otherwise, by last component.
const std::map<std::string, std::string>& other_frameworks_names() {
  static const std::map<std::string, std::string> names = {
      {"n_embd", "model.d_model"},
      {"block_size", "model.max_seq_len"},
      {"n_layer", "model.n_layers"},
      {"n_head", "model.n_heads"},
      {"n_positions", "model.max_seq_len"},
      {"learning_rate", "train.optimizer.lr"},
      {"max_iters", "train.max_steps"},
      {"eval_iters", "train.eval_steps"},
      {"warmup_iters", "train.lr_schedule.warmup_steps"},
      {"gradient_accumulation_steps", "train.grad_accum_steps"},
      {"min_lr", "train.lr_schedule.min_lr"},
      {"grad_clip", "train.grad_clip"}};
  return names;
}

std::string suggestion(const std::string& path) {
  // Another framework's name: its tfm key, when that key exists.
  if (const auto it = other_frameworks_names().find(split_path(path).back());
      it != other_frameworks_names().end() && find_key(it->second))
    return it->second;
  // A name cut short ("warmup" for "warmup_steps"): the one key of the same section it begins.
  {
    std::string only;
    int matches = 0;
    for (const auto& k : config_keys())
      if (k.path.size() > path.size() && k.path.compare(0, path.size(), path) == 0 &&
          k.path[path.size()] == '_')
        only = k.path, ++matches;
    if (matches == 1) return only;
  }
  std::vector<std::string> candidates;
  for (const auto& k : config_keys()) {
    candidates.push_back(k.path);
    const auto parts = split_path(k.path);
    std::string prefix;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      prefix += (i ? "." : "") + parts[i];
      candidates.push_back(prefix);
    }
  }
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(path, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (best_d <= std::max<size_t>(2, path.size() / 4)) return best;
  // The right name in the wrong section ("lr" at the top level): suggest by the last component.
  const std::string last = split_path(path).back();
  for (const auto& k : config_keys())
    if (split_path(k.path).back() == last) return k.path;
  return "";
}

void check_unknown(const json& node, const std::string& prefix, std::vector<std::string>& errors) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string& name = it.key();
    if (!name.empty() && name[0] == '_') continue;  // "_comment" keys are comments
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (find_key(path)) continue;  // type-checked by its row
    if (is_section(path)) {
      if (it->is_object()) {
        check_unknown(*it, path, errors);
      } else {
        errors.push_back(path + ": expected an object (a section of keys), got " + json_excerpt(*it));
      }
      continue;
    }
    const std::string s = suggestion(path);
    errors.push_back(path + ": unknown key" + (s.empty() ? "" : "; did you mean " + s + "?") +
                     " (`tfm config --keys` lists every key)");
  }
}

void cross_checks(const json& t, std::vector<std::string>& errors) {
  auto i = [&](const char* p) { return lookup(t, p)->get<int64_t>(); };
  const TrainConfig train = from_tree<TrainConfig>(t);
  const ModelConfig model = from_tree<ModelConfig>(t);
  const DataConfig data = from_tree<DataConfig>(t);
  if (data.tokenizer == Tokenizer::Kind::Bpe && !data.tokenizer_path)
    errors.push_back(
        "data.tokenizer_path: required when data.tokenizer = \"bpe\" (make one with tfm tokenizer train)");
  // What the model's options need of each other (nn/model_config.h: heads dividing d_model, top-k, ...).
  for (const std::string& e : model_config_errors(model)) errors.push_back(e);
  if (train.seq_len > model.max_seq_len)
    errors.push_back("train.seq_len: expected at most model.max_seq_len = " +
                     std::to_string(model.max_seq_len) + ", got " + std::to_string(train.seq_len));
  if (model.mtp_heads >= train.seq_len)
    errors.push_back("model.mtp_heads: expected fewer than train.seq_len = " + std::to_string(train.seq_len) +
                     " (head k predicts token t+1+k inside the window), got " +
                     std::to_string(model.mtp_heads));
  if (model.mtp_heads == 0 && train.mtp_weight != TrainConfig{}.mtp_weight)
    errors.push_back(
        "train.mtp_weight: only read with model.mtp_heads > 0; this config has 0 (remove the "
        "key or set model.mtp_heads)");
  if (train.data_parallel > train.batch_size)
    errors.push_back(
        "train.data_parallel: expected at most train.batch_size = " + std::to_string(train.batch_size) +
        " workers (each takes whole rows), got " + std::to_string(train.data_parallel));
  // What the objectives need of the model and the data (docs/architecture.md, "Objectives").
  const ObjectiveKind objective = train.objective;
  const bool seq2seq = objective == ObjectiveKind::Seq2Seq;
  if (objective == ObjectiveKind::CausalLm && !model.causal)
    errors.push_back(
        "model.causal: train.objective \"causal_lm\" needs model.causal = true (a bidirectional "
        "model trained on the next token reads the answer through attention; for an encoder use "
        "train.objective \"masked_lm\")");
  if (objective == ObjectiveKind::MaskedLm && model.causal)
    errors.push_back(
        "model.causal: train.objective \"masked_lm\" needs model.causal = false (a causal model "
        "cannot see the tokens after a [MASK])");
  if (seq2seq != (data.format == DataFormat::Pairs))
    errors.push_back("data.format: train.objective \"" + name_of(objective) + "\" reads " +
                     (seq2seq ? "\"pairs\"" : "\"text\"") + ", got \"" + name_of(data.format) + "\"");
  if (!seq2seq && data.tokenizer == Tokenizer::Kind::Word)
    errors.push_back(
        "data.tokenizer: \"word\" is for train.objective \"seq2seq\" (sentence pairs); a text "
        "objective uses \"char\", \"byte\", \"bpe\" or \"gpt2\"");
  if (seq2seq)
    for (const char* side : {"data.max_source_len", "data.max_target_len"})
      if (i(side) + 1 > model.max_seq_len)
        errors.push_back(std::string(side) + ": expected at most model.max_seq_len - 1 = " +
                         std::to_string(model.max_seq_len - 1) + " (room for <bos>/<eos>), got " +
                         std::to_string(i(side)));
  // Muon's momentum rises from muon_momentum_min over its warmup and falls back to it over its cooldown
  // (modded-nanogpt: 0.85 -> 0.95 -> 0.85): a "minimum" above the momentum turns both around.
  const OptimizerConfig& o = train.optimizer;
  if (o.name == OptimizerKind::Muon &&
      (o.muon_momentum_warmup_steps > 0 || o.muon_momentum_cooldown_steps > 0) &&
      o.muon_momentum_min > o.muon_momentum)
    errors.push_back(
        "train.optimizer.muon_momentum_min: expected at most train.optimizer.muon_momentum = " +
        number_str(o.muon_momentum) +
        " (the momentum rises from it over the warmup and falls back to it over the cooldown), got " +
        number_str(o.muon_momentum_min));
  const double lr = train.optimizer.lr, min_lr = train.lr_schedule.min_lr;
  const ScheduleKind schedule = train.lr_schedule.name;
  if ((schedule == ScheduleKind::Cosine || schedule == ScheduleKind::Wsd) && min_lr > lr)
    errors.push_back("train.lr_schedule.min_lr: expected at most train.optimizer.lr = " + number_str(lr) +
                     ", got " + number_str(min_lr));
}

// Whether the objective reads key k (a key of no particular objective: every one).
// Whether `k` holds its default in `tree` (a derived key: what its rule gives).
bool at_default(const KeySpec& k, const json& tree) {
  return *lookup(tree, k.path) == (k.default_value.is_null() ? k.rule(tree) : k.default_value);
}

// "\"a\" or \"b\"": the values a message names as the ones that read a key.
std::string quoted_or(const std::vector<std::string>& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "\"" : " or \"") + v + "\"";
  return out;
}

// For a key read only with some values of another (only_with_key): that key's value when it holds none
// of them while `k` is set away from its default, i.e. `k` has no effect; nothing otherwise.
std::optional<std::string> unread_under(const KeySpec& k, const json& tree) {
  if (k.only_with_key.empty()) return std::nullopt;
  const std::string chosen = lookup(tree, k.only_with_key)->get<std::string>();
  const auto& values = k.only_with_values;
  if (std::find(values.begin(), values.end(), chosen) != values.end() || at_default(k, tree))
    return std::nullopt;
  return chosen;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (size_t n = 0; n < lines.size(); ++n) s += (n ? "\n" : "") + lines[n];
  return s;
}

}  // namespace

const std::vector<KeySpec>& config_keys() {
  static const std::vector<KeySpec> table = build_table();
  return table;
}

const KeySpec* find_key(const std::string& path) {
  for (const auto& k : config_keys())
    if (k.path == path) return &k;
  return nullptr;
}

std::string json_excerpt(const json& value, size_t max_chars) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > max_chars) s = s.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  // Three rows: the one before last, for a swap of two neighbours (optimal string alignment).
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// ---- Config accessors ----

const json& Config::at(const std::string& path) const {
  const json* v = lookup(tree, path);
  if (!v || !find_key(path)) throw Error("config: no key " + path + " in the resolved config");
  return *v;
}
namespace {
// The value at `path` when `fits` it, else a ConfigError naming the key, what it holds, and the getter
// that reads it: "config: data.tokenizer holds a string, \"char\"; Config::integer reads an integer
// (Config::string reads this key)".
const json& typed_value(const Config& c, const std::string& path, bool (json::*fits)() const noexcept,
                        const char* getter, const char* wanted) {
  const json& v = c.at(path);
  if ((v.*fits)()) return v;
  std::string held = "null (the key is not set)", reader;
  if (!v.is_null()) {
    const char* kind = v.is_string()           ? "a string"
                       : v.is_number_integer() ? "an integer"
                       : v.is_number()         ? "a number"
                       : v.is_boolean()        ? "a boolean"
                       : v.is_array()          ? "an array"
                                               : "an object";
    held = std::string(kind) + ", " + v.dump(-1, ' ', false, json::error_handler_t::replace);
    reader = v.is_string()           ? "Config::string"
             : v.is_number_integer() ? "Config::integer"
             : v.is_number()         ? "Config::number"
             : v.is_boolean()        ? "Config::boolean"
                                     : "Config::at";
    reader = " (" + reader + " reads this key)";
  }
  throw ConfigError("config: " + path + " holds " + held + "; " + getter + " reads " + wanted + reader);
}
}  // namespace

int64_t Config::integer(const std::string& path) const {
  return typed_value(*this, path, &json::is_number_integer, "Config::integer", "an integer").get<int64_t>();
}
double Config::number(const std::string& path) const {
  return typed_value(*this, path, &json::is_number, "Config::number", "a number").get<double>();
}
bool Config::boolean(const std::string& path) const {
  return typed_value(*this, path, &json::is_boolean, "Config::boolean", "a boolean").get<bool>();
}
std::string Config::string(const std::string& path) const {
  if (const json& v = at(path); v.is_array() && find_key(path)->list_as_text) return v.dump();
  return typed_value(*this, path, &json::is_string, "Config::string", "a string").get<std::string>();
}

ModelConfig Config::model(int64_t vocab_size) const {
  ModelConfig m = from_tree<ModelConfig>(tree);
  m.vocab_size = vocab_size;
  return m;
}

TrainConfig Config::train() const {
  return from_tree<TrainConfig>(tree);
}

DataConfig Config::data() const {
  return from_tree<DataConfig>(tree);
}

// ---- parsing ----

json parse_json(const std::string& text, const std::string& source) {
  try {
    const json syntax_only = json::parse(text);  // syntax first, for its position
    (void)syntax_only;
  } catch (const json::parse_error& e) {
    // e.byte counts the characters read, the offending one included.
    const size_t pos = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < pos; ++i)
      if (text[i] == '\n') ++line, line_start = i + 1;
    const size_t column = pos - line_start + 1;
    std::string what = e.what();
    const size_t c = what.find("column ");
    const size_t colon = what.find(": ", c == std::string::npos ? 0 : c);
    if (colon != std::string::npos) what = what.substr(colon + 2);
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) what = "the file is empty";
    throw ConfigError(source + ":" + std::to_string(line) + ":" + std::to_string(column) +
                      ": malformed JSON: " + what);
  } catch (const json::exception& e) {
    // Not a syntax error but a value nlohmann cannot hold (406: a number like 1e999 overflows).
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    throw ConfigError(source + ": malformed JSON: " + what);
  }
  // Then what nlohmann lets through: duplicate keys (it keeps the last silently) and deep nesting.
  try {
    return parse_json_strict(text.data(), text.size(), source);
  } catch (const IoError& e) {
    throw ConfigError(e.what());
  }
}

json read_json_file(const std::string& path) {
  constexpr uint64_t kMaxConfigBytes = 16 << 20;
  return parse_json(read_file(path, kMaxConfigBytes), path);
}

void apply_override(json& tree, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set: expected key.path=value, got \"" + assignment + "\"");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value;
  try {
    value = json::parse(text);
  } catch (const json::parse_error&) {
    value = text;  // a bare word: data.path=file.txt, model.activation=relu
  }
  json* node = &tree;
  std::string so_far;
  const auto parts = split_path(path);
  if (value.is_null()) {  // KEY=null removes the key: its default (or the value it derives from) applies
    for (size_t i = 0; i + 1 < parts.size() && node->is_object() && node->contains(parts[i]); ++i)
      node = &(*node)[parts[i]];
    if (node->is_object() && !parts.empty()) node->erase(parts.back());
    return;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) throw ConfigError("--set: \"" + path + "\" is not a key path (empty component)");
    if (node->is_null()) *node = json::object();
    if (!node->is_object())
      throw ConfigError(so_far + ": --set " + path + " needs an object here, but the config has " +
                        json_excerpt(*node));
    so_far += (i ? "." : "") + parts[i];
    node = &(*node)[parts[i]];
  }
  // An object sets the keys it names and keeps the others (a JSON merge patch, RFC 7396: a null in it
  // removes a key), as KEY.SUB=VALUE for each would: `--set 'model={"d_model":64}'` keeps the file's
  // other model keys. No key's value is itself an object.
  if (value.is_object() && node->is_object())
    node->merge_patch(value);
  else
    *node = std::move(value);
}

namespace {

// A resolved config (a run's config.json, `tfm config`'s output: every key of the table is in it) holds
// the derived keys at what their rules gave. Before overrides change it, such a key is taken as unset, so
// it follows the keys it derives from as in the config it came from: --set model.n_heads=8 keeps
// n_kv_heads equal to n_heads (it does not turn into grouped-query attention), --set model.d_model=64
// moves d_ff with it. So are the keys of other objectives at their defaults. A value that differs from
// its rule's stays, and a config written by hand (not every key) keeps what it says.
void forget_derived_values(json& user) {
  for (const auto& k : config_keys())
    if (!lookup(user, k.path)) return;
  Config as_given;
  try {
    as_given = resolve_config(user);
  } catch (const ConfigError&) {
    return;  // reported by the resolution with the overrides
  }
  const ObjectiveKind objective = as_given.train().objective;
  for (const auto& k : config_keys()) {
    const json* given = lookup(user, k.path);
    if (!given || given->is_null()) continue;
    const bool derived = k.default_value.is_null() && *given == k.rule(as_given.tree);
    if (derived || (!k.read_by(objective) && at_default(k, as_given.tree))) erase_key(user, k.path);
  }
}

}  // namespace

Config resolve_config(json user, const std::vector<std::string>& overrides) {
  if (!user.is_object())
    throw ConfigError("config: expected a JSON object at the top level, got " + json_excerpt(user));
  if (!overrides.empty()) forget_derived_values(user);
  for (const auto& o : overrides) apply_override(user, o);
  std::vector<std::string> errors;
  check_unknown(user, "", errors);
  json tree = json::object();
  bool all_valid = true;
  std::vector<const KeySpec*> to_derive;
  for (const auto& k : config_keys()) {
    const json* given = lookup(user, k.path);
    json value;
    if (given && !(given->is_null() && !k.derived.empty())) {
      if (!check_value(k, *given, value, errors)) {
        all_valid = false;
        continue;
      }
      assign(tree, k.path, value);
    } else if (!k.default_value.is_null()) {
      assign(tree, k.path, k.default_value);
    } else {
      to_derive.push_back(&k);
    }
  }
  if (all_valid) {
    for (const KeySpec* k : to_derive) assign(tree, k->path, k->rule(tree));
    cross_checks(tree, errors);
    // A key another objective reads, set to something other than its default, would be ignored: say so.
    const ObjectiveKind objective = from_tree<TrainConfig>(tree).objective;
    for (const auto& k : config_keys()) {
      if (k.read_by(objective)) continue;
      const json* given = lookup(user, k.path);
      if (!given || given->is_null() || at_default(k, tree)) continue;
      std::vector<std::string> owners;
      for (const auto o : k.objectives) owners.push_back(name_of(o));
      errors.push_back(k.path + ": belongs to train.objective " + quoted_or(owners) +
                       "; this config's objective is \"" + name_of(objective) +
                       "\" (remove the key or change train.objective)");
    }
    // Likewise a key of one optimizer or schedule set while another is chosen (only_with_warns keys:
    // config_warnings).
    for (const auto& k : config_keys()) {
      const std::optional<std::string> chosen = k.only_with_warns ? std::nullopt : unread_under(k, tree);
      if (!chosen) continue;
      const std::string owners = quoted_or(k.only_with_values);
      errors.push_back(k.path + ": only read with " + k.only_with_key + " = " + owners +
                       "; this config has \"" + *chosen + "\" (remove the key or set " + k.only_with_key +
                       " to " + owners + ")");
    }
  }
  if (!errors.empty()) throw ConfigError(join_lines(errors));
  return Config{tree};
}

std::vector<std::string> config_warnings(const Config& config) {
  std::vector<std::string> out;
  for (const auto& k : config_keys()) {
    const std::optional<std::string> chosen = k.only_with_warns ? unread_under(k, config.tree) : std::nullopt;
    if (!chosen) continue;
    out.push_back(k.path + " = " + lookup(config.tree, k.path)->dump() +
                  " has no effect: it is read only with " + k.only_with_key + " = " +
                  quoted_or(k.only_with_values) + ", and this config has \"" + *chosen + "\"");
  }
  // Keys read only in some settings of others (read_when), set where they are not.
  for (const auto& k : config_keys()) {
    if (!k.unread_because || at_default(k, config.tree) || unread_under(k, config.tree)) continue;
    const std::string because = k.unread_because(config.tree);
    if (!because.empty())
      out.push_back(k.path + " = " + lookup(config.tree, k.path)->dump() +
                    " has no effect: it is read only with " + k.read_when + ", and " + because);
  }
  // RoPE's relative positions need a dot product: <R_m q, R_n k> = <q, R_(n-m) k> (Su et al. 2021,
  // §3.2); tanh(R_m q + R_n k) has no such identity. Allowed (the combination trains), said.
  const ModelConfig model = config.model(1);
  if (model.attention_score == AttentionScore::Additive &&
      model.positional_encoding == PositionalEncoding::Rope)
    out.push_back(
        "model.positional_encoding = \"rope\" with model.attention_score = \"additive\": RoPE makes a dot "
        "product of a query and a key depend on their positions' difference alone (Su et al. 2021, §3.2); "
        "additive scores, v . tanh(q + k), have no such property, so the rotated queries and keys carry "
        "their absolute positions");
  // A schedule its own numbers undo (LrSchedule::at, training/optim.cpp).
  const TrainConfig train = config.train();
  const int64_t warmup = train.lr_schedule.warmup_steps, steps = train.max_steps;
  if (warmup >= steps && warmup > 0)
    out.push_back("train.lr_schedule.warmup_steps = " + std::to_string(warmup) +
                  " is at least train.max_steps = " + std::to_string(steps) +
                  ": the learning rate never leaves its warmup (never reaches its peak)");
  else if (train.lr_schedule.name == ScheduleKind::Wsd) {
    const double fraction = train.lr_schedule.decay_fraction;
    const int64_t decay_start =
        steps - static_cast<int64_t>(std::floor(fraction * static_cast<double>(steps)));
    if (decay_start == steps)
      out.push_back("train.lr_schedule.decay_fraction = " + number_str(fraction) +
                    " leaves wsd no step to decay in (floor(" + number_str(fraction) + " * " +
                    std::to_string(steps) +
                    " steps) = 0): the learning rate stays at train.optimizer.lr to the end, and "
                    "train.lr_schedule.min_lr = " +
                    number_str(train.lr_schedule.min_lr) +
                    " is never used (train.lr_schedule.name=constant trains alike)");
    else if (warmup > decay_start)
      out.push_back(
          "train.lr_schedule.warmup_steps = " + std::to_string(warmup) +
          " runs into wsd's decay, which starts at step " + std::to_string(decay_start) +
          " (train.lr_schedule.decay_fraction): the learning rate drops from warmup straight into it");
  }
  return out;
}

namespace {
// The run directory a config without a file trains into by default: runs/<name>, the name that of
// data.path's file or folder without its extension (a list's first entry's; notes.txt.gz: notes),
// "run" for a glob or a name that would hide the directory.
std::string default_run_dir(const Config& defaults) {
  const json data = comparable_value(*find_key("data.path"), defaults.at("data.path"));
  const json& first = data.is_array() && !data.empty() ? data.front() : data;
  std::filesystem::path p = std::filesystem::path(first.is_string() ? first.get<std::string>() : "");
  p = p.lexically_normal();
  if (!p.has_filename()) p = p.parent_path();                           // "corpus/" names the folder corpus
  if (p.extension() == ".gz" || p.extension() == ".zst") p = p.stem();  // notes.jsonl.zst is notes
  std::string name = p.stem().string();
  const bool usable = !name.empty() && name[0] != '.' && name.find_first_of("*?[]") == std::string::npos;
  return "runs/" + (usable ? name : std::string("run"));
}
}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  json user = path.empty() ? json::object() : read_json_file(path);
  if (!user.is_object())
    throw ConfigError(path + ": expected a JSON object at the top level, got " + json_excerpt(user));
  if (!overrides.empty()) forget_derived_values(user);
  for (const auto& o : overrides) apply_override(user, o);
  const json* dir = lookup(user, "output.dir");
  if (!dir || dir->is_null())
    assign(user, "output.dir",
           path.empty() ? default_run_dir(resolve_config(user))
                        : "runs/" + std::filesystem::path(path).stem().string());
  return resolve_config(std::move(user));
}

Config resume_config(const Config& run, const std::vector<std::string>& overrides) {
  // Keys of other objectives hold their (derived) defaults in a resolved tree: drop them, so they are
  // derived afresh and only an override naming one is refused.
  json tree = run.tree;
  const ObjectiveKind objective = run.train().objective;
  for (const auto& k : config_keys())
    if (!k.read_by(objective)) erase_key(tree, k.path);
  Config next = resolve_config(std::move(tree), overrides);
  std::vector<std::string> errors;
  for (const auto& path : differing_keys(run, next)) {
    const KeySpec* k = find_key(path);
    if (k->resumable || !k->read_by(objective)) continue;
    errors.push_back(path + ": cannot change when resuming (the run has " + json_excerpt(run.at(path)) +
                     ", got " + json_excerpt(next.at(path)) + "); only " + resumable_keys_text() +
                     " may change");
  }
  if (!errors.empty()) throw ConfigError(join_lines(errors));
  return next;
}

std::string resumable_keys_text() {
  std::string keys;
  for (const auto& k : config_keys())
    if (k.resumable) keys += (keys.empty() ? "" : ", ") + k.path;
  return keys;
}

namespace {
// data.path rewritten by `f` (corpus.h's functions, which take and give a list as its JSON text): a list
// stays a list in the tree, a string a string.
json rewritten_corpus_spec(const Config& config, const std::function<std::string(const std::string&)>& f) {
  const std::string spec = f(config.string("data.path"));
  return config.at("data.path").is_array() ? json::parse(spec) : json(spec);
}
}  // namespace

Config with_absolute_paths(const Config& config) {
  json tree = config.tree;
  const KeySpec& cache = *find_key("data.cache_dir");
  const bool cache_derived = at_default(cache, tree);
  assign(tree, "data.path", rewritten_corpus_spec(config, absolute_corpus_spec));
  const json& tokenizer = *lookup(tree, "data.tokenizer_path");
  if (tokenizer.is_string() && !tokenizer.get<std::string>().empty())
    assign(tree, "data.tokenizer_path", std::filesystem::absolute(tokenizer.get<std::string>()).string());
  const std::string cache_dir = config.string("data.cache_dir");
  assign(tree, "data.cache_dir",
         cache_derived ? cache.rule(tree) : json(std::filesystem::absolute(cache_dir).string()));
  return Config{tree};
}

nlohmann::json exported_config(const Config& config) {
  json tree = config.tree;
  assign(tree, "data.path", rewritten_corpus_spec(config, corpus_spec_names));
  if (const json& tokenizer = config.at("data.tokenizer_path"); tokenizer.is_string())  // one path
    assign(tree, "data.tokenizer_path", corpus_spec_names(tokenizer.get<std::string>()));
  assign(tree, "data.cache_dir", nullptr);
  assign(tree, "output.dir", nullptr);
  return tree;
}

std::vector<std::string> differing_keys(const Config& a, const Config& b, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& k : config_keys()) {
    if (k.path.compare(0, prefix.size(), prefix) != 0) continue;
    const json* va = lookup(a.tree, k.path);
    const json* vb = lookup(b.tree, k.path);
    if (!va || !vb || comparable_value(k, *va) != comparable_value(k, *vb)) out.push_back(k.path);
  }
  return out;
}

json comparable_value(const KeySpec& k, const json& value) {
  if (!k.list_as_text || !value.is_string() || value.get<std::string>().rfind('[', 0) != 0) return value;
  const json list = json::parse(value.get<std::string>(), nullptr, false);
  return list.is_array() ? list : value;
}

std::string keys_markdown() {
  std::ostringstream os;
  os << "| Key | Type | Default | Allowed | Meaning |\n|---|---|---|---|---|\n";
  for (const auto& k : config_keys()) {
    static const char* names[] = {"integer", "number", "boolean", "string", "[number, number]"};
    std::string def = k.default_value.is_null() ? "= " + k.derived : k.default_value.dump();
    std::string allowed = k.type == T::String && !k.choices.empty() ? describe_choices(k) : describe_range(k);
    if (k.type == T::Boolean) allowed = "true, false";
    if (k.type == T::NumberPair) allowed = "each " + allowed;
    if (k.list_as_text) allowed = "a string or a list of strings";
    std::string meaning = k.meaning;
    if (k.resumable) meaning += " May change on `--resume`.";
    if (!k.read_when.empty())
      meaning += " Read only with " + k.read_when + " (set otherwise, it is warned about).";
    if (k.weights_agnostic) meaning += " May differ from the run an `--init-from` file was exported from.";
    if (!k.objectives.empty()) {
      std::string owners;
      for (const auto o : k.objectives) owners += (owners.empty() ? "`" : ", `") + name_of(o) + "`";
      meaning += " Only " + owners + ".";
    }
    if (!k.only_with_key.empty()) {
      std::string owners;
      for (const auto& v : k.only_with_values) owners += (owners.empty() ? "`" : ", `") + v + "`";
      meaning += " Only with `" + k.only_with_key + "` " + owners +
                 (k.only_with_warns ? " (set under another, it is warned about)." : ".");
    }
    os << "| `" << k.path << "` | " << names[static_cast<int>(k.type)] << " | `" << def << "` | " << allowed
       << " | " << meaning << " |\n";
  }
  return os.str();
}

}  // namespace tfm
