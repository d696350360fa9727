// The config table: defaults, derived defaults, overrides and a table of bad configs, each with the
// fragments its error message must contain (the key path, the value given, what is allowed).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"

using namespace tfm;
using nlohmann::json;

namespace {
std::string error_of(const json& user, const std::vector<std::string>& overrides = {}) {
  try {
    resolve_config(user, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("config: defaults are docs/architecture.md's", "[config]") {
  const Config c = resolve_config(json::object());
  CHECK(c.integer("seed") == 1337);
  CHECK(c.string("data.tokenizer") == "char");
  CHECK(c.number("data.val_fraction") == 0.1);
  CHECK(c.integer("model.d_model") == 128);
  CHECK(c.integer("model.n_layers") == 4);
  CHECK(c.integer("model.n_heads") == 4);
  CHECK(c.integer("model.n_kv_heads") == 4);
  CHECK(c.integer("model.d_ff") == 512);
  CHECK(c.integer("model.max_seq_len") == 64);
  CHECK(c.string("model.activation") == "gelu");
  CHECK(c.string("model.attention_score") == "dot");
  CHECK(c.boolean("model.tie_embeddings"));
  CHECK(c.integer("train.batch_size") == 12);
  CHECK(c.integer("train.seq_len") == 64);
  CHECK(c.integer("train.max_steps") == 2000);
  CHECK(c.number("train.grad_clip") == 1.0);
  CHECK(c.string("train.optimizer.name") == "adamw");
  CHECK(c.number("train.optimizer.lr") == 1e-3);
  CHECK(c.at("train.optimizer.betas") == json::array({0.9, 0.99}));
  CHECK(c.number("train.optimizer.weight_decay") == 0.1);
  CHECK(c.string("train.lr_schedule.name") == "cosine");
  CHECK(c.integer("train.lr_schedule.warmup_steps") == 100);
  CHECK(c.number("train.lr_schedule.min_lr") == Approx(1e-4));
  CHECK(c.integer("train.eval_interval") == 250);
  CHECK(c.integer("train.eval_steps") == 20);
  CHECK(c.integer("train.grad_accum_steps") == 1);
  CHECK(c.integer("train.threads") == 0);
  CHECK(c.string("train.objective") == "causal_lm");
  // Every key of the table is in the resolved tree.
  for (const auto& k : config_keys()) CHECK_NOTHROW(c.at(k.path));
}

TEST_CASE("config: a typed getter of another type's key names the key, what it holds and its getter",
          "[config]") {
  const Config c = resolve_config(json::object());
  const auto error_of_getter = [](const std::function<void()>& read) -> std::string {
    try {
      read();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error_of_getter([&] { c.integer("data.tokenizer"); }) ==
        "config: data.tokenizer holds a string, \"char\"; Config::integer reads an integer (Config::string "
        "reads this key)");
  // A number key was read as an integer truncated (lr 0.001 as 0).
  CHECK(error_of_getter([&] { c.integer("train.optimizer.lr"); }) ==
        "config: train.optimizer.lr holds a number, 0.001; Config::integer reads an integer (Config::number "
        "reads this key)");
  CHECK(error_of_getter([&] { c.string("model.d_model"); }) ==
        "config: model.d_model holds an integer, 128; Config::string reads a string (Config::integer reads "
        "this key)");
  CHECK(error_of_getter([&] { c.boolean("train.optimizer.betas"); }) ==
        "config: train.optimizer.betas holds an array, [0.9,0.99]; Config::boolean reads a boolean "
        "(Config::at reads this key)");
  CHECK(error_of_getter([&] { c.string("data.tokenizer_path"); }) ==
        "config: data.tokenizer_path holds null (the key is not set); Config::string reads a string");
  CHECK(error_of_getter([&] { c.number("model.tie_embeddings"); }) ==
        "config: model.tie_embeddings holds a boolean, true; Config::number reads a number (Config::boolean "
        "reads this key)");
  CHECK(c.number("model.d_model") == 128.0);  // an integer is a number
}

TEST_CASE("config: derived defaults follow the keys they derive from", "[config]") {
  const Config c = resolve_config(json::parse(R"({"model": {"d_model": 96, "n_heads": 6, "max_seq_len": 32},
                                                 "train": {"optimizer": {"lr": 3e-3}}})"));
  CHECK(c.integer("model.n_kv_heads") == 6);
  CHECK(c.integer("model.d_ff") == 384);
  CHECK(c.integer("train.seq_len") == 32);
  CHECK(c.number("train.lr_schedule.min_lr") == Approx(3e-4));
  // An explicit null means "the default".
  const Config n = resolve_config(json::parse(R"({"model": {"n_kv_heads": null}})"));
  CHECK(n.integer("model.n_kv_heads") == 4);
}

TEST_CASE("config: --set overrides parse JSON and fall back to strings", "[config]") {
  const Config c = resolve_config(
      json::object(), {"train.max_steps=50", "model.activation=relu", "train.optimizer.betas=[0.9,0.95]",
                       "model.bias=false", "data.path=some file.txt", "train.max_steps=60"});
  CHECK(c.integer("train.max_steps") == 60);  // the last one wins
  CHECK(c.string("model.activation") == "relu");
  CHECK(c.at("train.optimizer.betas") == json::array({0.9, 0.95}));
  CHECK_FALSE(c.boolean("model.bias"));
  CHECK(c.string("data.path") == "some file.txt");
  CHECK(resolve_config(json::object(), {"train.max_steps=2e3"}).integer("train.max_steps") == 2000);
  CHECK_THAT(error_of(json::object(), {"train.max_steps"}), Catch::Contains("key.path=value"));
  CHECK_THAT(error_of(json::object(), {"model.d_modle=3"}), Catch::Contains("did you mean model.d_model"));
  // KEY=null removes a key the file sets: its default, or the key it derives from, applies again.
  const json file = {{"model", {{"n_heads", 4}, {"n_kv_heads", 4}}}, {"train", {{"max_steps", 7}}}};
  const Config d = resolve_config(
      file, {"model.n_heads=8", "model.n_kv_heads=null", "train.max_steps=null", "data.min_freq=null"});
  CHECK(d.integer("model.n_kv_heads") == 8);
  CHECK(d.integer("train.max_steps") == 2000);
  // An object sets the keys it names and keeps the file's others, as KEY.SUB=VALUE for each would.
  const json wide = {{"model", {{"n_heads", 4}, {"n_kv_heads", 2}, {"d_ff", 100}}}};
  const Config m = resolve_config(wide, {R"(model={"d_model":64,"n_kv_heads":null})", "model={}"});
  CHECK(m.integer("model.d_model") == 64);
  CHECK(m.integer("model.d_ff") == 100);      // kept from the file
  CHECK(m.integer("model.n_kv_heads") == 4);  // removed: derived again from n_heads
  CHECK_THAT(error_of(file, {R"(model={"d_modle":64})"}), Catch::Contains("did you mean model.d_model"));
}

TEST_CASE("config: bad configs name the key, the value and what is allowed", "[config]") {
  struct Case {
    const char* json;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {R"({"model": {"d_modle": 128}})", {"model.d_modle", "unknown key", "did you mean model.d_model?"}},
      {R"({"lr": 0.001})", {"lr: unknown key", "did you mean train.optimizer.lr?"}},
      {R"({"trian": {}})", {"trian: unknown key", "did you mean train?"}},
      {R"({"model": 5})", {"model: expected an object", "5"}},
      {R"({"model": {"d_model": "128"}})", {"model.d_model: expected an integer >= 1", "got \"128\""}},
      {R"({"model": {"d_model": 0}})", {"model.d_model: expected an integer >= 1, got 0"}},
      {R"({"model": {"d_model": 12.5}})", {"model.d_model", "integer", "12.5"}},
      {R"({"model": {"n_layers": -1}})", {"model.n_layers", ">= 1", "-1"}},
      {R"({"model": {"dropout": 1.0}})", {"model.dropout: expected a number in [0, 1), got 1.0"}},
      {R"({"model": {"dropout": "none"}})", {"model.dropout", "number", "\"none\""}},
      {R"({"model": {"activation": "swish"}})", {"model.activation", "\"gelu\", \"relu\"", "\"swish\""}},
      {R"({"model": {"norm_position": "middle"}})", {"model.norm_position", "\"pre\", \"post\""}},
      {R"({"model": {"positional_encoding": "rotary"}})", {"model.positional_encoding", "\"learned\""}},
      {R"({"model": {"attention_score": "cosine"}})", {"model.attention_score", "\"additive\""}},
      {R"({"model": {"causal": 1}})", {"model.causal: expected true or false, got 1"}},
      {R"({"model": {"d_model": 130, "n_heads": 4}})",
       {"model.d_model", "multiple of model.n_heads = 4", "130"}},
      {R"({"model": {"n_heads": 4, "n_kv_heads": 3}})",
       {"model.n_kv_heads", "divisor of model.n_heads = 4", "3"}},
      {R"({"model": {"n_heads": 4, "n_kv_heads": 8}})", {"model.n_kv_heads", "8"}},
      {R"({"train": {"seq_len": 128}})", {"train.seq_len", "at most model.max_seq_len = 64", "128"}},
      {R"({"train": {"batch_size": 0}})", {"train.batch_size", ">= 1", "0"}},
      {R"({"train": {"max_steps": 3000000000}})", {"train.max_steps", "2^31"}},
      {R"({"train": {"grad_clip": -1}})", {"train.grad_clip", ">= 0", "-1"}},
      {R"({"train": {"grad_accum_steps": 0}})", {"train.grad_accum_steps", ">= 1"}},
      {R"({"train": {"optimizer": {"name": "adam"}}})",
       {"train.optimizer.name", "\"adamw\", \"sgd\"", "\"adam\""}},
      {R"({"train": {"optimizer": {"lr": 0}}})", {"train.optimizer.lr", "> 0", "got 0"}},
      {R"({"train": {"optimizer": {"betas": [0.9]}}})", {"train.optimizer.betas", "two numbers", "[0.9]"}},
      {R"({"train": {"optimizer": {"betas": [0.9, 1.5]}}})", {"train.optimizer.betas", "[0, 1)"}},
      {R"({"train": {"optimizer": {"momentum": 1}}})", {"train.optimizer.momentum", "[0, 1)"}},
      {R"({"train": {"lr_schedule": {"name": "linear"}}})", {"train.lr_schedule.name", "\"inverse_sqrt\""}},
      {R"({"train": {"lr_schedule": {"warmup_steps": -5}}})", {"train.lr_schedule.warmup_steps", ">= 0"}},
      {R"({"train": {"optimizer": {"muon_lr": 0.05}}})",
       {"train.optimizer.muon_lr: only read with train.optimizer.name = \"muon\"", "has \"adamw\"",
        "set train.optimizer.name to \"muon\""}},
      {R"({"train": {"optimizer": {"name": "sgd", "muon_momentum": 0.9}}})",
       {"train.optimizer.muon_momentum", "\"muon\"", "\"sgd\""}},
      {R"({"train": {"optimizer": {"muon_weight_decay": 0.1}}})",
       {"train.optimizer.muon_weight_decay", "\"muon\""}},
      {R"({"train": {"optimizer": {"name": "muon", "muon_lr": 0}}})",
       {"train.optimizer.muon_lr", "> 0", "got 0"}},
      {R"({"train": {"optimizer": {"name": "muon", "muon_momentum": 1}}})",
       {"train.optimizer.muon_momentum", "[0, 1)"}},
      {R"({"train": {"lr_schedule": {"decay_fraction": 0.1}}})",
       {"train.lr_schedule.decay_fraction: only read with train.lr_schedule.name = \"wsd\"",
        "has \"cosine\""}},
      {R"({"train": {"lr_schedule": {"name": "wsd", "decay_fraction": 1.5}}})",
       {"train.lr_schedule.decay_fraction", "[0, 1]", "1.5"}},
      {R"({"train": {"lr_schedule": {"name": "wsd", "min_lr": 0.01}}})",
       {"train.lr_schedule.min_lr", "at most train.optimizer.lr"}},
      {R"({"train": {"lr_schedule": {"min_lr": 0.01}}})",
       {"train.lr_schedule.min_lr", "at most train.optimizer.lr"}},
      {R"({"train": {"objective": "mlm"}})",
       {"train.objective", "\"causal_lm\"", "\"masked_lm\"", "\"seq2seq\""}},
      {R"({"train": {"objective": "masked_lm"}})", {"model.causal", "masked_lm", "false"}},
      {R"({"model": {"causal": false}})", {"model.causal", "causal_lm", "true", "masked_lm"}},
      {R"({"train": {"mask_prob": 0.2}})",
       {"train.mask_prob", "belongs to train.objective \"masked_lm\"", "\"causal_lm\""}},
      {R"({"model": {"n_encoder_layers": 3}})", {"model.n_encoder_layers", "\"seq2seq\""}},
      {R"({"train": {"objective": "seq2seq", "seq_len": 8}})",
       {"train.seq_len", "\"causal_lm\" or \"masked_lm\""}},
      {R"({"data": {"format": "pairs"}})", {"data.format", "\"text\""}},
      {R"({"data": {"tokenizer": "word"}})", {"data.tokenizer", "seq2seq"}},
      {R"({"train": {"objective": "seq2seq"}, "model": {"max_seq_len": 8}, "data": {"max_source_len": 8}})",
       {"data.max_source_len", "at most model.max_seq_len - 1 = 7"}},
      {R"({"train": {"threads": -2}})", {"train.threads", "in [0, 1024]"}},
      {R"({"data": {"tokenizer": "wordpiece"}})",
       {"data.tokenizer", "\"char\", \"byte\", \"bpe\"", "\"wordpiece\""}},
      {R"({"data": {"tokenizer": "bpe"}})", {"data.tokenizer_path", "required"}},
      {R"({"data": {"val_fraction": 0}})", {"data.val_fraction", "(0, 1)"}},
      {R"({"data": {"path": ""}})", {"data.path", "non-empty string"}},
      {R"({"data": {"path": []}})", {"data.path", "a string or a non-empty list of non-empty strings", "[]"}},
      {R"({"data": {"path": ["a.txt", 3]}})", {"data.path", "non-empty list of non-empty strings"}},
      {R"({"data": {"path": ["a.txt", ""]}})", {"data.path", "non-empty list of non-empty strings"}},
      {R"({"model": {"activation": ["gelu"]}})", {"model.activation", "one of"}},
      {R"({"output": {"dir": 3}})", {"output.dir", "a string", "3"}},
      {R"([1, 2])", {"top level", "object"}},
  };
  for (const auto& c : cases) {
    INFO(c.json);
    const std::string msg = error_of(json::parse(c.json));
    REQUIRE_FALSE(msg.empty());
    for (const auto& f : c.fragments) CHECK_THAT(msg, Catch::Contains(f));
  }
}

TEST_CASE("config: data.path takes a JSON array of paths, and the resolved config keeps it a list",
          "[config]") {
  const json list = json::array({"a/*.txt", "b dir", "c.jsonl.gz"});
  const Config c = resolve_config(json::parse(R"({"data": {"path": ["a/*.txt", "b dir", "c.jsonl.gz"]}})"));
  CHECK(c.at("data.path") == list);  // what config.json records: the list, not its text in a string
  CHECK(c.string("data.path") == R"(["a/*.txt","b dir","c.jsonl.gz"])");  // what the corpus reader parses
  // The same list through --set resolves alike; a resolved config resolves again (a checkpoint's).
  const Config set = resolve_config(json::object(), {R"(data.path=["a/*.txt", "b dir", "c.jsonl.gz"])"});
  CHECK(set.at("data.path") == list);
  CHECK(resolve_config(c.tree).at("data.path") == list);
  CHECK(resolve_config(json::parse(c.tree.dump(2))).at("data.path") == list);  // config.json, read back
  // The list's text as a string, as runs recorded it before: kept as written, read as the same list.
  const Config text =
      resolve_config(json::parse(R"({"data": {"path": "[\"a/*.txt\",\"b dir\",\"c.jsonl.gz\"]"}})"));
  CHECK(text.at("data.path").is_string());
  CHECK(text.string("data.path") == c.string("data.path"));
  CHECK(differing_keys(text, c).empty());  // a resume of such a run given the list changes nothing
  CHECK(differing_keys(resolve_config(json::parse(R"({"data": {"path": ["a/*.txt"]}})")), c) ==
        std::vector<std::string>{"data.path"});
  // A run records its entries absolute, still a list.
  const json absolute = with_absolute_paths(c).at("data.path");
  REQUIRE(absolute.is_array());
  CHECK(absolute.size() == 3);
  CHECK(absolute[1] == (std::filesystem::current_path() / "b dir").string());
  CHECK(with_absolute_paths(text).at("data.path").is_string());
}

TEST_CASE("config: an export's config names its files without the directories around them", "[config]") {
  // What a run records (with_absolute_paths): absolute paths, user names and directories in them.
  const Config run = resolve_config(json::parse(R"({
      "data": {"path": ["/home/me/corpora/*.txt", "/home/me/more/", "/home/me/x/."], "tokenizer": "bpe",
               "tokenizer_path": "/home/me/tok/bpe.json", "cache_dir": "/home/me/.cache/tfm"},
      "output": {"dir": "/home/me/runs/secret"}})"));
  const json out = exported_config(run);
  CHECK(out.at("data").at("path") == json::array({"*.txt", "more", "x"}));
  CHECK(out.at("data").at("tokenizer_path") == "bpe.json");
  CHECK(out.at("data").at("cache_dir").is_null());
  CHECK(out.at("output").at("dir").is_null());
  CHECK(out.dump().find("/home/me") == std::string::npos);
  CHECK(exported_config(resolve_config(json::parse(R"({"data": {"path": "/home/me/a b.txt"}})")))
            .at("data")
            .at("path") == "a b.txt");
  // A config still: it resolves, the two nulls derived again, and every other key is the run's.
  const Config back = resolve_config(out);
  CHECK(differing_keys(back, run) ==
        std::vector<std::string>{"data.path", "data.tokenizer_path", "data.cache_dir", "output.dir"});
}

TEST_CASE("config: Muon's and WSD's keys are read with their optimizer and schedule only", "[config][muon]") {
  const Config muon = resolve_config(json::parse(
      R"({"train": {"optimizer": {"name": "muon", "muon_lr": 0.03, "muon_momentum": 0.9, "muon_weight_decay": 0.01},
                    "lr_schedule": {"name": "wsd", "decay_fraction": 0.1}}})"));
  CHECK(muon.number("train.optimizer.muon_lr") == 0.03);
  CHECK(muon.number("train.lr_schedule.decay_fraction") == 0.1);
  // The defaults resolve under any optimizer and schedule (a resolved config holds every key) ...
  const Config plain = resolve_config(json::object());
  CHECK(plain.number("train.optimizer.muon_lr") == 0.02);
  CHECK(plain.number("train.optimizer.muon_momentum") == 0.95);
  CHECK(plain.number("train.optimizer.muon_weight_decay") == 0.0);
  CHECK(plain.number("train.lr_schedule.decay_fraction") == 0.2);
  CHECK_NOTHROW(resolve_config(plain.tree));
  CHECK_NOTHROW(resolve_config(muon.tree));
  // ... and set to the default they are no error either; switching the optimizer away is.
  CHECK_NOTHROW(resolve_config(json::parse(R"({"train": {"optimizer": {"muon_lr": 0.02}}})")));
  CHECK_THROWS_WITH(resolve_config(muon.tree, {"train.optimizer.name=adamw"}),
                    Catch::Contains("train.optimizer.muon_lr") &&
                        Catch::Contains("train.optimizer.muon_momentum") &&
                        Catch::Contains("train.optimizer.muon_weight_decay"));
  CHECK_THROWS_WITH(resolve_config(muon.tree, {"train.lr_schedule.name=cosine"}),
                    Catch::StartsWith("train.lr_schedule.decay_fraction"));
  CHECK_THAT(keys_markdown(), Catch::Contains("Only with `train.optimizer.name` `muon`."));
}

TEST_CASE("config: several errors are reported together, one per line", "[config]") {
  const std::string msg = error_of(json::parse(R"({"model": {"d_model": -1, "activation": "x"}, "foo": 1})"));
  CHECK_THAT(msg, Catch::Contains("model.d_model"));
  CHECK_THAT(msg, Catch::Contains("model.activation"));
  CHECK_THAT(msg, Catch::Contains("foo: unknown key"));
}

TEST_CASE("config: malformed JSON reports line and column", "[config]") {
  try {
    parse_json("{\n  \"model\": {\n    \"d_model\": 128,\n  }\n}", "cfg.json");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("cfg.json:4:3: malformed JSON"));
  }
  try {
    parse_json("{\"a\": tru}", "x.json");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("x.json:1:"));
  }
  CHECK_THROWS_WITH(parse_json("", "empty.json"),
                    Catch::Contains("empty.json:1:1: malformed JSON: the file is empty"));
  CHECK_THROWS_WITH(
      parse_json(R"({"model": {"d_model": 64, "d_model": 128}})", "dup.json"),
      Catch::StartsWith("dup.json") && Catch::Contains("duplicate") && Catch::Contains("d_model"));
  CHECK_THROWS_AS(read_json_file("/nonexistent/cfg.json"), IoError);
  CHECK_THROWS_WITH(read_json_file("/nonexistent/cfg.json"), Catch::StartsWith("/nonexistent/cfg.json"));
}

TEST_CASE("config: load_config names the run after the file and resume allows only resumable keys",
          "[config]") {
  const std::string path = "/tmp/tfm_test_config_" + std::to_string(::getpid()) + "_named.json";
  std::ofstream(path) << R"({"train": {"max_steps": 10}})";
  const Config c = load_config(path);
  CHECK(c.string("output.dir") == "runs/tfm_test_config_" + std::to_string(::getpid()) + "_named");
  CHECK(load_config(path, {"output.dir=elsewhere"}).string("output.dir") == "elsewhere");
  std::remove(path.c_str());
  const Config r = resume_config(c, {"train.max_steps=20", "train.log_interval=1"});
  CHECK(r.integer("train.max_steps") == 20);
  CHECK_THROWS_WITH(
      resume_config(c, {"model.d_model=64"}),
      Catch::StartsWith("model.d_model: cannot change when resuming") && Catch::Contains("128"));
  CHECK(differing_keys(c, r) == std::vector<std::string>{"train.max_steps", "train.log_interval"});
}

TEST_CASE("config: the key table documents every key", "[config]") {
  const std::string md = keys_markdown();
  for (const auto& k : config_keys()) CHECK_THAT(md, Catch::Contains("`" + k.path + "`"));
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("josn", "json") == 1);  // two neighbours swapped: one edit
  CHECK(edit_distance("model.d_modle", "model.d_model") == 1);
  CHECK(edit_distance("ca", "abc") == 3);  // a swapped pair is not edited again (optimal string alignment)
}

TEST_CASE("config: a key the chosen optimizer or schedule does not read is warned about, not refused",
          "[config]") {
  // The shipped configs set AdamW's betas and a cosine min_lr: switching optimizer or schedule with --set
  // still works, and what no longer has an effect is named with what reads it.
  const std::string tiny = std::string(TFM_SOURCE_DIR) + "/configs/tiny.json";
  std::vector<std::string> w =
      config_warnings(load_config(tiny, {"train.optimizer.name=sgd", "train.optimizer.betas=[0.8,0.95]"}));
  REQUIRE(w.size() == 1);
  CHECK(w[0] ==
        "train.optimizer.betas = [0.8,0.95] has no effect: it is read only with train.optimizer.name = "
        "\"adamw\" or \"muon\", and this config has \"sgd\"");
  w = config_warnings(load_config(tiny, {"train.optimizer.momentum=0.5"}));
  REQUIRE(w.size() == 1);
  CHECK(
      w[0].rfind("train.optimizer.momentum = 0.5 has no effect: it is read only with train.optimizer.name = "
                 "\"sgd\"",
                 0) == 0);
  w = config_warnings(
      load_config(tiny, {"train.lr_schedule.name=constant", "train.lr_schedule.min_lr=1e-5"}));
  REQUIRE(w.size() == 1);
  CHECK(w[0].rfind("train.lr_schedule.min_lr = 1e-05 has no effect", 0) == 0);
  // Left at its default or read: nothing to say.
  CHECK(config_warnings(load_config(tiny, {})).empty());
  CHECK(config_warnings(load_config(tiny, {"train.optimizer.name=sgd"})).empty());  // betas as the default
  // A schedule its own numbers undo.
  w = config_warnings(load_config(tiny, {"train.max_steps=50", "train.lr_schedule.warmup_steps=60"}));
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Contains("the learning rate never leaves its warmup"));
  w = config_warnings(load_config(tiny, {"train.max_steps=50", "train.lr_schedule.warmup_steps=45",
                                         "train.lr_schedule.name=wsd", "train.lr_schedule.min_lr=null"}));
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Contains("runs into wsd's decay, which starts at step 40"));
  // eng_fra_d2l.json: a constant schedule and no min_lr.
  CHECK(config_warnings(load_config(std::string(TFM_SOURCE_DIR) + "/configs/eng_fra_d2l.json", {})).empty());
  // The model's and the tokenizer's keys of a feature that is off: a forgotten head_gating=topk is named.
  w = config_warnings(
      load_config(tiny, {"model.head_topk=3", "model.head_balance_loss=0.5", "model.head_groups=3",
                         "model.rope_theta=100", "data.tokenizer_path=bpe.json"}));
  REQUIRE(w.size() == 5);
  const std::string all = w[0] + w[1] + w[2] + w[3] + w[4];
  CHECK_THAT(all, Catch::Contains("model.head_topk = 3 has no effect: it is read only with model.head_gating "
                                  "= \"topk\", and this config has \"none\""));
  CHECK_THAT(all, Catch::Contains("model.head_balance_loss = 0.5 has no effect"));
  CHECK_THAT(all, Catch::Contains("model.head_groups = 3 has no effect: it is read only with "
                                  "model.head_mixing = \"group_mlp\""));
  CHECK_THAT(all, Catch::Contains("model.rope_theta = 100.0 has no effect: it is read only with "
                                  "model.positional_encoding = \"rope\""));
  CHECK_THAT(all, Catch::Contains("data.tokenizer_path = \"bpe.json\" has no effect: it is read only with "
                                  "data.tokenizer = \"bpe\" or \"gpt2\", and this config has \"char\""));
  CHECK(config_warnings(load_config(tiny, {"model.head_gating=topk", "model.head_topk=3"})).empty());
}

TEST_CASE(
    "config: Muon's momentum minimum and wsd's min_lr that their schedules never reach are warned about",
    "[config][muon]") {
  const std::string tiny = std::string(TFM_SOURCE_DIR) + "/configs/tiny.json";
  const std::string muon = "train.optimizer.name=muon";
  // No momentum warmup or cooldown: the minimum is never read.
  std::vector<std::string> w =
      config_warnings(load_config(tiny, {muon, "train.optimizer.muon_momentum_min=0.9"}));
  REQUIRE(w.size() == 1);
  CHECK(
      w[0] ==
      "train.optimizer.muon_momentum_min = 0.9 has no effect: it is read only with "
      "train.optimizer.muon_momentum_warmup_steps or muon_momentum_cooldown_steps > 0, and this config has 0 "
      "for both: Muon's momentum stays train.optimizer.muon_momentum = 0.95");
  // Read by either; left at its default, nothing to say.
  for (const char* schedule :
       {"train.optimizer.muon_momentum_warmup_steps=5", "train.optimizer.muon_momentum_cooldown_steps=5"})
    CHECK(config_warnings(load_config(tiny, {muon, schedule, "train.optimizer.muon_momentum_min=0.9"}))
              .empty());
  CHECK(config_warnings(load_config(tiny, {muon})).empty());
  CHECK_THAT(keys_markdown(), Catch::Contains("Read only with train.optimizer.muon_momentum_warmup_steps or "
                                              "muon_momentum_cooldown_steps > 0 (set otherwise, it is warned "
                                              "about)."));
  // A minimum above the momentum turns the warmup and cooldown around (modded-nanogpt: 0.85 -> 0.95): refused
  // where a schedule reads it.
  CHECK_THROWS_WITH(load_config(tiny, {muon, "train.optimizer.muon_momentum_warmup_steps=5",
                                       "train.optimizer.muon_momentum_min=0.99"}),
                    Catch::StartsWith("train.optimizer.muon_momentum_min: expected at most "
                                      "train.optimizer.muon_momentum = 0.95") &&
                        Catch::Contains("got 0.99"));
  CHECK_NOTHROW(load_config(tiny, {muon, "train.optimizer.muon_momentum_cooldown_steps=5",
                                   "train.optimizer.muon_momentum_min=0.95"}));
  // wsd with no step to decay in never reaches min_lr, whatever the file says of it.
  const std::string wsd = "train.lr_schedule.name=wsd";
  for (const char* fraction :
       {"train.lr_schedule.decay_fraction=0", "train.lr_schedule.decay_fraction=0.001"}) {
    w = config_warnings(load_config(tiny, {wsd, fraction, "train.max_steps=500"}));
    REQUIRE(w.size() == 1);
    CHECK_THAT(w[0],
               Catch::StartsWith("train.lr_schedule.decay_fraction = ") &&
                   Catch::Contains("steps) = 0): the learning rate stays at train.optimizer.lr to the end, "
                                   "and train.lr_schedule.min_lr = 0.0003 is never used"));
  }
  CHECK(config_warnings(
            load_config(tiny, {wsd, "train.lr_schedule.decay_fraction=0.002", "train.max_steps=500"}))
            .empty());
}

TEST_CASE("config: nanoGPT's names and names cut short suggest tfm's key", "[config]") {
  const std::string tiny = std::string(TFM_SOURCE_DIR) + "/configs/tiny.json";
  for (const auto& [set, suggested] : std::vector<std::pair<std::string, std::string>>{
           {"model.n_embd=64", "model.d_model"},
           {"model.block_size=64", "model.max_seq_len"},
           {"train.gradient_accumulation_steps=2", "train.grad_accum_steps"},
           {"train.lr_schedule.warmup=5", "train.lr_schedule.warmup_steps"},
           {"model.d_modle=64", "model.d_model"}}) {
    INFO(set);
    try {
      load_config(tiny, {set});
      FAIL("accepted");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Catch::Contains("unknown key; did you mean " + suggested + "?"));
    }
  }
}

TEST_CASE("config: a number written as JSON does not allow is refused with how to write it", "[config]") {
  CHECK_THROWS_WITH(
      resolve_config(json::object(), {"train.optimizer.lr=.1"}),
      "train.optimizer.lr: expected a number > 0, got \".1\" (a JSON number starts with a digit "
      "or '-': write 0.1)");
  CHECK_THROWS_WITH(resolve_config(json::object(), {"train.max_steps=+5"}),
                    Catch::EndsWith("got \"+5\" (a JSON number starts with a digit or '-': write 5)"));
  CHECK_THROWS_WITH(resolve_config(json::object(), {"train.max_steps=five"}),
                    Catch::EndsWith("got \"five\""));
}

TEST_CASE("config: a resolved config with --set derives its derived keys afresh", "[config]") {
  // A run's config.json holds every key, derived ones at what their rules gave.
  const json resolved = resolve_config(json::parse(R"({"model": {"d_model": 64, "n_heads": 4}})")).tree;
  CHECK(resolved.at("model").at("n_kv_heads") == 4);
  // More heads stay multi-head attention (not grouped-query with 4 kv heads); d_ff follows d_model; a
  // longer context is no error about seq2seq's lengths, which follow it too.
  const Config c = resolve_config(resolved, {"model.n_heads=8", "model.d_model=128", "model.max_seq_len=64"});
  CHECK(c.integer("model.n_kv_heads") == 8);
  CHECK(c.integer("model.d_ff") == 512);
  CHECK(c.integer("train.seq_len") == 64);
  CHECK(c.integer("data.max_source_len") ==
        resolve_config(json::parse(R"({"model": {"max_seq_len": 64}})")).integer("data.max_source_len"));
  // A value other than its rule's was chosen: it stays.
  json gqa = resolved;
  gqa["model"]["n_kv_heads"] = 2;
  CHECK(resolve_config(gqa, {"model.n_heads=8"}).integer("model.n_kv_heads") == 2);
  // load_config reads a file the same way.
  tfm_test::TempDir dir("config_resolved");
  std::ofstream(dir.file("config.json")) << resolved.dump(2);
  const Config f = load_config(dir.file("config.json"), {"model.n_heads=8"});
  CHECK(f.integer("model.n_kv_heads") == 8);
  // A config written by hand keeps what it says, derived keys included.
  const json by_hand = json::parse(R"({"model": {"n_heads": 4, "n_kv_heads": 4}})");
  CHECK(resolve_config(by_hand, {"model.n_heads=8"}).integer("model.n_kv_heads") == 4);
  // A key of another objective set away from its default is still refused.
  json other = resolved;
  other["data"]["max_source_len"] = 3;
  CHECK_THROWS_WITH(resolve_config(other, {"model.n_heads=8"}),
                    Catch::Contains("data.max_source_len: belongs to train.objective \"seq2seq\""));
}

// In the quick tier, so that the loop a contributor edits in says when a new key's docs are missing.
TEST_CASE("config: the key table in docs/config.md is the key table's (tfm config --keys)",
          "[config][docs]") {
  INFO("docs/config.md's key table is out of date: run scripts/dev/update_key_table.sh");
  std::ifstream in(std::string(TFM_SOURCE_DIR) + "/docs/config.md");
  REQUIRE(in.good());
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- keys:begin -->\n", end = "<!-- keys:end -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  REQUIRE(b < e);
  const std::string keys = keys_markdown();
  CHECK(doc.substr(b + begin.size(), e - b - begin.size()) == keys);
  CHECK(keys.find("`model.d_model`") != std::string::npos);
}
