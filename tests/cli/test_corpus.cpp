// A folder corpus end to end (docs/data.md): tfm data prepare counts its documents, tfm train runs a
// few steps on it (text files and compressed JSON Lines, documents joined by <|endoftext|>), tfm eval
// and tfm sample read the run; a bad record stops the run with its FILE:LINE and exit status 2.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"

namespace fs = std::filesystem;

namespace {

using tfm_test::CliRun;
using tfm_test::read_file;
using tfm_test::run_tfm;
using tfm_test::TempDir;

void write_corpus_file(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A folder of tiny Shakespeare's scenes: text files in two folders and one JSON Lines file, gzipped.
std::string folder_corpus(const TempDir& tmp) {
  const std::string text = read_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt");
  REQUIRE(text.size() > 4000);
  const std::string root = tmp.path + "/corpus";
  const size_t part = text.size() / 6;
  for (int i = 0; i < 4; ++i)
    write_corpus_file(root + (i < 2 ? "/acts/" : "/more/") + std::to_string(i) + ".txt",
                      text.substr(part * i, part));
  std::string lines;
  for (int i = 4; i < 6; ++i) lines += nlohmann::json{{"content", text.substr(part * i, part)}}.dump() + "\n";
  gzFile gz = gzopen((root + "/records.jsonl.gz").c_str(), "wb");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, lines.data(), static_cast<unsigned>(lines.size())) == static_cast<int>(lines.size()));
  gzclose(gz);
  return root;
}

}  // namespace

TEST_CASE("corpus: train and sample on a folder of text and compressed JSON Lines", "[cli][data]") {
  const TempDir tmp("corpus_e2e");
  const std::string root = folder_corpus(tmp);
  const std::string sets =
      " --set data.path=" + root + " --set data.text_field=content --set data.val_fraction=0.3";
  CliRun r = run_tfm("data prepare --config configs/tiny.json" + sets);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("documents: 6, joined by <|endoftext|>"));
  CHECK_THAT(r.out, Catch::Contains("(4 train / 2 val documents)"));
  CHECK_THAT(r.out, !Catch::Contains("warning"));              // 2 of 6 equal documents: 33% for 0.3
  CHECK(fs::exists(root + "/.tfm-cache/corpus.char.tokens"));  // inside the folder, hidden from its walk
  // Whole documents cannot give 5%: one of six is 16.7%, and the user is told.
  r = run_tfm("data prepare --config configs/tiny.json" + sets + " --set data.val_fraction=0.05");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("warning: " + root +
                                    ": 1 of 6 documents validate, 16.7% of the tokens, "
                                    "for data.val_fraction = 0.05: the split takes whole documents"));

  const std::string dir = tmp.path + "/run";
  r = run_tfm("train --config configs/tiny.json --out " + dir + sets +
              " --set train.max_steps=4 --set train.eval_interval=4");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("step 4/4"));
  CHECK_THAT(r.out, Catch::Contains(", 6 documents (4 train / 2 val), "));  // the log's data line
  const nlohmann::json ckpt_config = nlohmann::json::parse(read_file(dir + "/config.json"));
  CHECK(ckpt_config.at("data").at("path") == root);

  r = run_tfm("eval --run " + dir + " --batches 2");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::StartsWith("tfm: read " + dir + "/best.ckpt") && Catch::Contains(")\nval loss "));
  r = run_tfm("sample --run " + dir + " --prompt 'ROMEO:' --max-new-tokens 40 --seed 3");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::StartsWith("tfm: read ") && Catch::Contains(")\nROMEO:"));

  // A bad record: named with its file and line, exit 2, before any training.
  write_corpus_file(root + "/more/bad.jsonl", "{\"content\": \"fine\"}\n{\"content\": 3}\n");
  r = run_tfm("train --config configs/tiny.json --out " + tmp.path + "/run2" + sets);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains(root + "/more/bad.jsonl:2: the field \"content\" (data.text_field) is number"));
  CHECK_FALSE(fs::exists(tmp.path + "/run2/last.ckpt"));
  r = run_tfm("data prepare --config configs/tiny.json" + sets + " --set data.on_bad_record=skip");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("skipped 1 bad record (data.on_bad_record = \"skip\"), the first: " +
                                    root + "/more/bad.jsonl:2"));
  CHECK_THAT(r.out, Catch::Contains("documents: 7"));
  // The cache keeps the count: a run that maps it says so in its log at every start, not only the build.
  r = run_tfm("train --config configs/tiny.json --out " + tmp.path + "/run3" + sets +
              " --set data.on_bad_record=skip --set train.max_steps=1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("(cached, opened in"));
  CHECK_THAT(tfm_test::read_file(tmp.path + "/run3/train.log"),
             Catch::Contains("1 bad record left out of the corpus (data.on_bad_record \"skip\")"));
}

TEST_CASE(
    "corpus: JSON Lines without data.text_field name the record's fields, and skipping them all says why",
    "[cli][data]") {
  const TempDir tmp("corpus_field");
  const std::string file = tmp.path + "/chats.jsonl";
  write_corpus_file(file, "{\"body\": \"hello there\", \"id\": 1}\n{\"body\": \"more\", \"id\": 2}\n");
  const std::string args = "--config configs/tiny.json --set data.path=" + file;
  CliRun r = run_tfm("data prepare " + args);
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains(file + ":1: the record has no field \"text\" (its fields: \"body\", \"id\"); "
                                    "set data.text_field to the field that holds the text"));
  r = run_tfm("train " + args + " --set data.on_bad_record=skip --out " + tmp.path + "/run");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains("the corpus has no text (1 file, no document in it): all 2 of its records "
                             "were skipped as bad (data.on_bad_record = \"skip\"), the first: " +
                             file + ":1: the record has no field \"text\" (its fields: \"body\""));
  CHECK_FALSE(fs::exists(tmp.path + "/run/last.ckpt"));
  // tokenizer train reads it the same way, under its own flags.
  r = run_tfm("tokenizer train --vocab-size 260 --skip-bad-records --data " + file + " --out " + tmp.path +
              "/tok.json");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains("holds no text to learn merges from: all 2 of its records were skipped as bad "
                             "(--skip-bad-records), the first: " +
                             file +
                             ":1: the record has no field \"text\" (its fields: \"body\", \"id\"); "
                             "set --text-field to the field"));
}

TEST_CASE("corpus: data.path given as a list stays a list in the run's config.json, resumes and diffs",
          "[cli][data]") {
  const TempDir tmp("corpus_list");
  const std::string text = read_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt");
  write_corpus_file(tmp.path + "/a.txt", text.substr(0, text.size() / 2));
  write_corpus_file(tmp.path + "/b.txt", text.substr(text.size() / 2));
  const nlohmann::json list = {tmp.path + "/a.txt", tmp.path + "/b.txt"};
  nlohmann::json config =
      nlohmann::json::parse(read_file(std::string(TFM_SOURCE_DIR) + "/configs/tiny.json"));
  config["data"]["path"] = list;
  config["train"]["max_steps"] = 2;
  config["train"]["eval_interval"] = 2;
  write_corpus_file(tmp.path + "/list.json", config.dump(2));

  CliRun r = run_tfm("config --config " + tmp.path + "/list.json");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("\"path\": [\n      \"" + tmp.path + "/a.txt\","));
  const std::string run = tmp.path + "/run";
  r = run_tfm("train --config " + tmp.path + "/list.json --out " + run);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(nlohmann::json::parse(read_file(run + "/config.json")).at("data").at("path") == list);
  r = run_tfm("train --resume " + run + " --set train.max_steps=4");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("step 4/4"));
  CHECK(nlohmann::json::parse(read_file(run + "/config.json")).at("data").at("path") == list);

  // The list's text as a string (how runs recorded a list before) is the same corpus: no difference.
  const std::string as_text = tmp.path + "/as_text";
  r = run_tfm("train --config " + tmp.path + "/list.json --out " + as_text +
              " --set 'data.path=" + nlohmann::json(list.dump()).dump() + "'");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(nlohmann::json::parse(read_file(as_text + "/config.json")).at("data").at("path") == list.dump());
  r = run_tfm("runs --diff " + run + " " + as_text);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("train.max_steps") && !Catch::Contains("data.path"));
  // Another corpus is a difference, the list shown as one.
  const std::string one = tmp.path + "/one";
  REQUIRE(run_tfm("train --config " + tmp.path + "/list.json --out " + one + " --set data.path=" + tmp.path +
                  "/a.txt")
              .status == 0);
  r = run_tfm("runs --diff " + run + " " + one);
  INFO(r.out);
  CHECK_THAT(r.out, Catch::Contains("data.path") && Catch::Contains(list.dump()));
}
