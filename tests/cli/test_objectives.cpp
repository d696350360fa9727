// The training objectives: masked_lm's masking rule, each objective through the one training loop,
// and the inference commands that go with them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cli_run.h"
#include "objective_data.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/objectives/inference.h"
#include "tfm/objectives/objective.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/trainer.h"
#include "train_options.h"

using namespace tfm;

namespace {

using tfm_test::quiet;
using tfm_test::read_metrics;
using tfm_test::s2s_config;
using tfm_test::write_reversal_pairs;

}  // namespace

TEST_CASE("objectives: the CLI names the objective a run needs", "[objective][cli]") {
  const std::string dir = tfm_test::scratch_path("objectives", "mlm_cli");
  auto r = tfm_test::run_tfm("train --config configs/tiny.json --set train.objective=masked_lm --out " + dir);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("model.causal") && Catch::Contains("masked_lm"));
  r = tfm_test::run_tfm(
      "train --config configs/tiny.json --set train.objective=masked_lm --set model.causal=false "
      "--set train.max_steps=20 --out " +
      dir);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("tfm fill-mask --run"));
  r = tfm_test::run_tfm("fill-mask --run " + dir + " --text \"ROMEO: [MASK]\" --top-k 4 --json");
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  CHECK(j.at("masks").size() == 1);
  CHECK(j.at("masks")[0].at("candidates").size() == 4);
  // The same probabilities to the bit with 1 and 2 threads, as sampling.
  const auto fill = [&](const char* threads) {
    return tfm_test::run_shell("{ " + tfm_test::tfm_command() + " fill-mask --run " + dir +
                               " --text \"ROMEO: [MASK] thou\" --top-k 8 --json --threads " + threads +
                               " 2>/dev/null; }");
  };
  const auto one = fill("1"), two = fill("2");
  REQUIRE(one.status == 0);
  CHECK(one.out == two.out);
  // A character outside the vocabulary is placed in the whole text, masks counted as their characters.
  r = tfm_test::run_tfm("fill-mask --run " + dir + " --text \"ab[MASK]cd[MASK]xy\u20ac\"");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("at character 18 (counted from 0) is not in the vocabulary"));
  r = tfm_test::run_tfm("sample --run " + dir);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("fill-mask"));
  r = tfm_test::run_tfm("fill-mask --run " + dir + " --text \"no mask\"");
  CHECK(r.status == 2);
  r = tfm_test::run_tfm("fill-mask --run " + dir + " --text \"[MASK]\" --top-k 0");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--top-k"));
  // tfm attention reads [MASK] as fill-mask does: the mask token, labelled so in the maps.
  r = tfm_test::run_tfm("attention --run " + dir + " --text \"RO[MASK]EO\" --no-plot --out " + dir +
                        "/attention");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const nlohmann::json maps = nlohmann::json::parse(tfm_test::read_file(dir + "/attention/attention.json"));
  CHECK(maps.at("tokens") == nlohmann::json({"R", "O", "[MASK]", "E", "O"}));
  r = tfm_test::run_tfm("attention --run " + dir + " --text \"RO\" --no-plot --out " + dir +
                        "/attention/attention.json");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("attention.json: is a file, not a directory (--out"));
}

TEST_CASE("objectives: seq2seq learns a toy translation through the loop, BLEU, translate, the CLI",
          "[objective][seq2seq][train]") {
  tfm_test::TempDir tmp("objectives_s2s");
  const std::string data = write_reversal_pairs(tmp.path, 600);
  const std::string dir = tmp.path + "/run";
  const TrainResult r = train(s2s_config(dir, data), quiet());
  REQUIRE(r.status == TrainResult::Status::Finished);
  const auto metrics = read_metrics(dir);
  const nlohmann::json& last = metrics.back();
  INFO(last.dump());
  REQUIRE(last.contains("val_bleu"));
  CHECK(last.at("val_accuracy").get<double>() > 0.9);
  CHECK(last.at("val_bleu").get<double>() > 70.0);
  CHECK(last.at("val_loss").get<double>() < 0.5);

  LoadedRun run = load_run(dir, "last");  // no data needed: both vocabularies are in the checkpoint
  REQUIRE(run.objective->name() == "seq2seq");
  REQUIRE(run.checkpoint.target_tokenizer.has_value());
  CHECK(run.model == nullptr);  // not a LanguageModel
  TranslateOptions greedy, beam;
  beam.beam = 4;
  const auto g = translate_texts(*run.objective, {"one two three.", "eight six!"}, greedy);
  const auto b = translate_texts(*run.objective, {"one two three.", "eight six!"}, beam);
  CHECK(g[0] == "trois deux un.");
  CHECK(g[1] == "six huit!");  // detokenized: no space before ,.!? (d2l's convention)
  CHECK(b == g);               // a task this clear has one best answer
  CHECK_THROWS_WITH(fill_mask(*run.objective, "[MASK]", 1), Catch::Contains("masked_lm"));

  // The CLI: --text, and lines on stdin, one translation per line on stdout and nothing else.
  auto c = tfm_test::run_shell("{ printf 'one two.\\nfive four three!\\n' | " + tfm_test::tfm_command() +
                               " translate --run " + dir + " --checkpoint last 2>/dev/null; }");
  REQUIRE(c.status == 0);
  CHECK(c.out == "deux un.\ntrois quatre cinq!\n");
  // Nothing to translate gives an empty translation, on stdin as with --text "".
  c = tfm_test::run_shell("{ printf 'one two.\\n\\n' | " + tfm_test::tfm_command() + " translate --run " +
                          dir + " --checkpoint last --json 2>/dev/null; " + tfm_test::tfm_command() +
                          " translate --run " + dir +
                          " --checkpoint last --text '' --text ' ' 2>/dev/null; }");
  REQUIRE(c.status == 0);
  CHECK(
      c.out ==
      "{\"source\":\"one two.\",\"translation\":\"deux un.\"}\n{\"source\":\"\",\"translation\":\"\"}\n\n\n");
  c = tfm_test::run_tfm("translate --run " + dir +
                        " --text \"seven one.\" --reference \"un sept.\" --beam 2 --json");
  REQUIRE(c.status == 0);
  const auto j = nlohmann::json::parse(c.out.substr(c.out.find('{')));
  CHECK(j.at("translation") == "un sept.");
  const auto beams = [&](const char* threads) {
    return tfm_test::run_shell("{ " + tfm_test::tfm_command() + " translate --run " + dir +
                               " --text \"seven one.\" --text \"eight six!\" --beam 3 --json --threads " +
                               threads + " 2>/dev/null; }");
  };
  const auto one = beams("1"), two = beams("2");
  REQUIRE(one.status == 0);
  CHECK(one.out == two.out);  // the translations do not depend on the thread count
  CHECK(j.at("d2l_bleu").get<double>() == Approx(1.0));
  CHECK_THAT(c.out, !Catch::Contains("warning"));
  // A source longer than data.max_source_len is translated as far as the model reads, and said so.
  c = tfm_test::run_tfm("translate --run " + dir +
                        " --text \"one two three four five six seven eight one two.\"");
  INFO(c.out);
  REQUIRE(c.status == 0);
  CHECK_THAT(c.out, Catch::Contains("tfm: warning: --text: 11 tokens; the model reads the first ") &&
                        Catch::Contains("(data.max_source_len"));
  // A word outside the source vocabulary is read as <unk>, and said to be (each word once).
  c = tfm_test::run_tfm("translate --run " + dir + " --text \"one zebra two zebra quux.\"");
  INFO(c.out);
  REQUIRE(c.status == 0);
  CHECK_THAT(c.out,
             Catch::Contains("tfm: warning: --text: 2 words are outside the source vocabulary, read as "
                             "<unk>: \"zebra\", \"quux\""));
  // tokenizer encode/decode reach both vocabularies: the source's by default (French is <unk> there).
  const auto ids = [&](const std::string& side) {
    return tfm_test::run_shell("{ " + tfm_test::tfm_command() + " tokenizer encode --run " + dir + side +
                               " --text \"deux un.\" 2>/dev/null; }");
  };
  const tfm_test::CliRun source_ids = ids(""), target_ids = ids(" --side target");
  REQUIRE(source_ids.status == 0);
  REQUIRE(target_ids.status == 0);
  CHECK(source_ids.out.rfind("[3,3,", 0) == 0);  // <unk> <unk> .
  c = tfm_test::run_tfm("tokenizer decode --run " + dir + " --side target --ids '" + target_ids.out + "'");
  CHECK(c.out == "deux un.");
  c = tfm_test::run_tfm("tokenizer encode --run " + dir + " --text one");
  CHECK_THAT(c.out, Catch::Contains("the source vocabulary of " + dir + " (--side target for the target's)"));
  c = tfm_test::run_tfm("translate --run " + dir + " --text x --beam 0");
  CHECK(c.status == 2);
  CHECK_THAT(c.out, Catch::Contains("--beam"));
  c = tfm_test::run_tfm("sample --run " + dir);
  CHECK(c.status == 2);
  CHECK_THAT(c.out, Catch::Contains("tfm translate"));
  c = tfm_test::run_tfm("eval --run " + dir + " --batches 2");
  REQUIRE(c.status == 0);
  CHECK_THAT(c.out, Catch::Contains("bleu"));

  // tfm attention on a pair: encoder self (H, S, S), decoder self (H, T, T, causal) and cross (H, T, S)
  // per layer, every row a distribution; the greedy translation is the default target.
  const std::string att = tmp.path + "/attention";
  c = tfm_test::run_tfm("attention --run " + dir + " --text \"one two three.\" --no-plot --out " + att);
  INFO(c.out);
  REQUIRE(c.status == 0);
  CHECK_THAT(c.out, Catch::Contains("=> trois deux un"));
  const nlohmann::json a = nlohmann::json::parse(tfm_test::read_file(att + "/attention.json"));
  const size_t S = a.at("source_tokens").size(), T = a.at("target_tokens").size();
  CHECK(S == 5);  // one two three . <eos>
  CHECK(a.at("target_tokens").back() == "<eos>");
  CHECK(a.at("cross").size() == 2);
  for (const char* kind : {"encoder", "decoder_self", "cross"})
    for (const auto& layer : a.at(kind)) {
      const auto& p = layer.at("probabilities");
      REQUIRE(static_cast<int64_t>(p.size()) == run.config.integer("model.n_heads"));
      const std::string k = kind;
      const size_t rows = k == "encoder" ? S : T, cols = k == "decoder_self" ? T : S;
      for (const auto& head : p) {
        REQUIRE(head.size() == rows);
        for (size_t i = 0; i < rows; ++i) {
          const auto& row = head[i];
          CHECK(row.size() == cols);
          double sum = 0;
          for (size_t j = 0; j < row.size(); ++j) {
            sum += row[j].get<double>();
            if (k == "decoder_self" && j > i) CHECK(row[j].get<double>() == 0.0);
          }
          CHECK(sum == Approx(1.0).margin(1e-5));
        }
      }
    }
  c = tfm_test::run_tfm("attention --run " + dir +
                        " --text \"one two.\" --target \"deux un.\" --no-plot --out " + att);
  CHECK(c.status == 0);
  CHECK(nlohmann::json::parse(tfm_test::read_file(att + "/attention.json")).at("target_tokens").size() == 4);
  // A source longer than the model reads is cut, and said to be.
  const int64_t max_source = run.config.integer("data.max_source_len");
  std::string longer;
  for (int64_t i = 0; i < max_source + 5; ++i) longer += "one ";
  c = tfm_test::run_tfm("attention --run " + dir + " --text \"" + longer + "\" --no-plot --out " + att);
  INFO(c.out);
  CHECK(c.status == 0);
  CHECK_THAT(c.out, Catch::Contains("tfm: note: --text: " + std::to_string(max_source + 5) +
                                    " tokens; the model reads the first " + std::to_string(max_source)));
  const nlohmann::json cut = nlohmann::json::parse(tfm_test::read_file(att + "/attention.json"));
  CHECK(static_cast<int64_t>(cut.at("source_tokens").size()) == max_source + 1);  // and <eos>
  CHECK(cut.at("notes").size() == 1);
  c = tfm_test::run_tfm("attention --run " + dir +
                        " --text \"one zebra.\" --target \"un zèbre.\" --no-plot --out " + att);
  INFO(c.out);
  CHECK(c.status == 0);
  CHECK_THAT(c.out,
             Catch::Contains("tfm: note: --text: 1 word is outside the source vocabulary, read as <unk>: "
                             "\"zebra\"") &&
                 Catch::Contains("tfm: note: --target: 1 word is outside the target vocabulary"));
  const nlohmann::json unknown = nlohmann::json::parse(tfm_test::read_file(att + "/attention.json"));
  CHECK(unknown.at("notes").size() == 2);
  CHECK(unknown.at("source_tokens").at(1) == "<unk>");

  // Export names the objective and both vocabularies; --init-from starts a new run from the weights.
  c = tfm_test::run_tfm("export --run " + dir + " --out " + tmp.path + "/w.safetensors");
  REQUIRE(c.status == 0);
  const std::string dir2 = tmp.path + "/from_export";
  const TrainResult r2 = train(s2s_config(dir2, data, {"train.max_steps=1"}), [&] {
    TrainOptions o = quiet();
    o.init_from = tmp.path + "/w.safetensors";
    return o;
  }());
  REQUIRE(r2.status == TrainResult::Status::Finished);
  CHECK(r2.losses.front() < 0.5);  // starts where the exported run was, not from scratch (~2.5)
}
