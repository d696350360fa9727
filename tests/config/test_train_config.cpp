// The train.* keys bound to TrainConfig (config/train_config.h) as model.* is to ModelConfig: every key
// has a member, its default is the struct's, a --set value reaches that member (and no other) and comes
// back as the resolved tree's value, and a bad value is refused naming the key and what is allowed.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/config/train_config.h"
#include "tfm/engine/error.h"

using namespace tfm;
using nlohmann::json;

namespace {

bool is_train_key(const KeySpec& k) {
  return k.path.rfind("train.", 0) == 0;
}

std::string train_error_of(const std::vector<std::string>& overrides) {
  try {
    resolve_config(json::object(), overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The --set lines a value of key k needs besides its own: its optimizer or schedule, its objective, and
// what that objective needs of the model.
std::vector<std::string> context_for(const KeySpec& k, const json& value) {
  std::vector<std::string> sets;
  if (!k.only_with_key.empty()) sets.push_back(k.only_with_key + "=" + k.only_with_values.front());
  std::string objective = k.objectives.empty() ? "" : name_of(k.objectives.front());
  if (k.path == "train.objective") objective = value.get<std::string>();
  if (!objective.empty()) sets.push_back("train.objective=" + objective);
  if (objective == name_of(ObjectiveKind::MaskedLm)) sets.push_back("model.causal=false");
  if (k.path == "train.mtp_weight") sets.push_back("model.mtp_heads=1");  // read only with extra heads
  return sets;
}

// A valid value of k other than `current` (its resolved default): half of it, or one more when
// halving would leave the range, a flipped boolean, each other name of an enum.
std::vector<json> other_values(const KeySpec& k, const json& current) {
  const auto fits = [&](double v) {
    return (!k.has_min || (k.min_open ? v > k.min : v >= k.min)) &&
           (!k.has_max || (k.max_open ? v < k.max : v <= k.max));
  };
  switch (k.type) {
    case KeyType::Boolean:
      return {!current.get<bool>()};
    case KeyType::String: {
      std::vector<json> out;
      for (const auto& c : k.choices)
        if (c != current.get<std::string>()) out.push_back(c);
      return out;
    }
    case KeyType::Integer: {
      const int64_t d = current.get<int64_t>();
      return {d >= 2 && fits(static_cast<double>(d / 2)) ? d / 2 : d + 1};
    }
    case KeyType::Number: {
      const double d = current.get<double>();
      return {d > 0 && fits(d / 2) ? d / 2 : 0.5};
    }
    case KeyType::NumberPair:
      return {json::array({current[0].get<double>() / 2, current[1].get<double>() / 2})};
  }
  return {};
}

}  // namespace

TEST_CASE("train config: every train.* key is bound to a TrainConfig member, and only those", "[config]") {
  int bound = 0;
  for (const KeySpec& k : config_keys()) {
    INFO(k.path);
    CHECK(static_cast<bool>(k.train.set) == is_train_key(k));
    CHECK(static_cast<bool>(k.train.get) == is_train_key(k));
    bound += is_train_key(k);
  }
  CHECK(bound >= 30);
}

TEST_CASE("train config: the table's defaults are TrainConfig's", "[config]") {
  const TrainConfig defaults;
  const Config c = resolve_config(json::object());
  const TrainConfig resolved = c.train();
  for (const KeySpec& k : config_keys()) {
    if (!is_train_key(k)) continue;
    INFO(k.path);
    // The resolved tree, the struct a default config resolves to and a default-constructed struct
    // agree (the derived keys, seq_len, data_parallel and min_lr, as the default model derives them).
    CHECK(k.train.get(defaults) == c.at(k.path));
    CHECK(k.train.get(resolved) == c.at(k.path));
    if (!k.default_value.is_null()) CHECK(k.default_value == c.at(k.path));
  }
  CHECK(resolved.optimizer.name == OptimizerKind::AdamW);
  CHECK(resolved.lr_schedule.name == ScheduleKind::Cosine);
  CHECK(resolved.objective == ObjectiveKind::CausalLm);
  CHECK(resolved.precision == PrecisionChoice::Fp32);
  CHECK(resolved.gemm_backend == GemmBackendChoice::Auto);
  CHECK(resolved.optimizer.betas == std::array<double, 2>{0.9, 0.99});
}

TEST_CASE("train config: each train.* key set with --set reaches its member and no other", "[config]") {
  int checked = 0;
  for (const KeySpec& k : config_keys()) {
    if (!is_train_key(k)) continue;
    const json current = resolve_config(json::object()).at(k.path);
    for (const json& value : other_values(k, current)) {
      INFO(k.path << " = " << value.dump());
      const std::vector<std::string> context = context_for(k, value);
      std::vector<std::string> sets = context;
      sets.push_back(k.path + "=" + value.dump());
      // Without the --set (train.objective's context sets the objective itself: the default config).
      const Config base = k.path == "train.objective" ? resolve_config(json::object())
                                                      : resolve_config(json::object(), context);
      Config c;
      REQUIRE_NOTHROW(c = resolve_config(json::object(), sets));
      const TrainConfig t = c.train();
      CHECK(k.train.get(t) == value);  // the member holds the value set
      CHECK(c.at(k.path) == value);    // ... which the resolved tree holds too
      CHECK(k.train.get(base.train()) != value);
      // Every other train.* member is as without the --set (derived keys may follow it: seq_len's
      // and min_lr's sources are model.* and train.optimizer.lr, data_parallel's the batch).
      for (const KeySpec& other : config_keys())
        if (is_train_key(other) && other.path != k.path && other.derived.empty()) {
          INFO("other key " << other.path);
          CHECK(other.train.get(t) == other.train.get(base.train()));
        }
      ++checked;
    }
  }
  CHECK(checked >= 35);
}

TEST_CASE("train config: bad values are refused naming the key and the allowed values", "[config]") {
  for (const KeySpec& k : config_keys()) {
    if (!is_train_key(k)) continue;
    INFO(k.path);
    if (k.type == KeyType::String) {
      const std::string e = train_error_of({k.path + "=not_a_name"});
      CHECK_THAT(e, Catch::StartsWith(k.path + ": expected one of "));
      for (const auto& c : k.choices) CHECK_THAT(e, Catch::Contains("\"" + c + "\""));
      CHECK_THAT(e, Catch::Contains("not_a_name"));
    } else if (k.type == KeyType::Integer || k.type == KeyType::Number) {
      REQUIRE(k.has_min);
      const std::string e = train_error_of({k.path + "=" + std::to_string(k.min - 1)});
      CHECK_THAT(e, Catch::StartsWith(k.path + ": expected "));
      CHECK_THAT(e, Catch::Contains(k.min_open ? "> " : ">= ") || Catch::Contains("in "));
    } else {
      CHECK_THAT(train_error_of({k.path + "=\"yes\""}), Catch::StartsWith(k.path + ": expected "));
    }
  }
  // The enums' names come from their one spelling table.
  CHECK_THAT(train_error_of({"train.optimizer.name=adam"}),
             Catch::Contains("one of \"adamw\", \"sgd\", \"muon\", got \"adam\""));
  CHECK_THAT(train_error_of({"train.precision=fp16"}),
             Catch::Contains("one of \"auto\", \"fp32\", \"bf16\", got \"fp16\""));
}

TEST_CASE("train config: each option enum spells its values once, and reads them back", "[config]") {
  const auto round_trips = [](auto first, auto count) {
    using E = decltype(first);
    REQUIRE(enum_names<E>().size() == static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      const E e = static_cast<E>(i);
      INFO(name_of(e));
      CHECK(enum_from<E>(name_of(e)) == e);
    }
    CHECK_FALSE(enum_from<E>("").has_value());
  };
  round_trips(ObjectiveKind::CausalLm, 3);
  round_trips(OptimizerKind::AdamW, 3);
  round_trips(ScheduleKind::Cosine, 4);
  round_trips(Precision::Fp32, 2);
  round_trips(GemmBackendChoice::Auto, 3);
  round_trips(GemmBackend::OpenBlas, 2);
  round_trips(Activation::Gelu, 3);
  CHECK(name_of(ObjectiveKind::Seq2Seq) == "seq2seq");
  CHECK(name_of(ScheduleKind::InverseSqrt) == "inverse_sqrt");
  CHECK(enum_choices<Precision>() == "\"fp32\" or \"bf16\"");
}

// data.*: the same binding, to DataConfig (config/data_config.h).
TEST_CASE("data config: every data.* key is bound to a DataConfig member, and the table's defaults are its",
          "[config]") {
  const auto is_data_key = [](const KeySpec& k) { return k.path.rfind("data.", 0) == 0; };
  int bound = 0;
  const Config c = resolve_config(json::object());
  const DataConfig resolved = c.data();
  for (const KeySpec& k : config_keys()) {
    INFO(k.path);
    CHECK(static_cast<bool>(k.data.set) == is_data_key(k));
    if (!is_data_key(k)) continue;
    ++bound;
    // The resolved struct holds the resolved tree's value (data.path's list reads as its JSON text).
    CHECK(k.data.get(resolved) == (k.list_as_text ? json(c.string(k.path)) : c.at(k.path)));
    if (!k.default_value.is_null()) CHECK(k.data.get(DataConfig{}) == k.default_value);
  }
  CHECK(bound == 13);
  CHECK(resolved.tokenizer == Tokenizer::Kind::Char);
  CHECK(resolved.format == DataFormat::Text);
  CHECK(resolved.on_bad_record == BadRecord::Error);
  CHECK_FALSE(resolved.document_separator.has_value());  // resolved from the data, later
  // Set values reach their members; a list stays a list in the tree and reads as its text.
  const Config set = resolve_config(
      json::object(), {"data.tokenizer=byte", "data.on_bad_record=skip", "data.document_separator=false",
                       "data.path=[\"a.txt\", \"b/*.jsonl\"]", "data.tokenizer_path=tok.json"});
  const DataConfig d = set.data();
  CHECK(d.tokenizer == Tokenizer::Kind::Byte);
  CHECK(d.on_bad_record == BadRecord::Skip);
  CHECK(d.document_separator == std::optional<bool>(false));
  CHECK(nlohmann::json::parse(d.path) == json::array({"a.txt", "b/*.jsonl"}));
  CHECK(set.at("data.path").is_array());
  CHECK(d.tokenizer_path.has_value());
}
