// Messages that say what is wrong: each refusal exits 2 and names the flag, key or file with what was
// expected and what was got, in the words of the actual problem (a NUL byte, a value out of range, a
// file of another format), and suggests only what would help.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tiny_runs.h"

namespace fs = std::filesystem;

namespace {

using tfm_test::CliRun;

void write_message_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A copy of the tfm binary in `dir`, without the programs and plugins built beside it.
std::string copy_of_tfm_alone(const tfm_test::TempDir& dir) {
  const std::string copy = dir.file("tfm");
  fs::copy_file(tfm_test::tfm_binary(), copy);
  fs::permissions(copy, fs::perms::owner_exec, fs::perm_options::add);
  return copy;
}

}  // namespace

TEST_CASE("messages: a path holding a NUL byte is named as such, not cut at the NUL", "[messages][cli]") {
  const std::string dir = tfm_test::scratch_path("messages", "nul");
  fs::create_directories(dir);
  write_message_file(dir + "/nul.json",
                     R"({"data": {"path": "abc\u0000def"}, "output": {"dir": ")" + dir + R"(/run"}})");
  for (const std::string& args : std::vector<std::string>{
           "train --config " + dir + "/nul.json",
           "train --config configs/tiny.json --out " + dir + "/run --set 'data.path=\"abc\\u0000def\"'",
           "info --config configs/tiny.json --set 'output.dir=\"runs/a\\u0000b\"'"}) {
    const CliRun r = tfm_test::run_tfm(args);
    INFO(args << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("\\u0000") && Catch::Contains("holds a NUL byte") &&
                          (Catch::Contains("tfm: error: data.path: \"abc\\u0000def\"") ||
                           Catch::Contains("tfm: error: output.dir: \"runs/a\\u0000b\"")));
    CHECK_THAT(r.out, !Catch::Contains("tfm: error: abc\n"));
  }
  CHECK(!fs::exists(dir + "/run"));
}

TEST_CASE("messages: a flag's range is shown as the check enforces it", "[messages][cli]") {
  for (const std::string value : {"0", "1e-9", "2"}) {
    const CliRun r = tfm_test::run_tfm("gradcheck --config configs/tiny.json --tolerance " + value);
    INFO(r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("--tolerance: expected a number in [1e-08, 1], got \"" + value + "\""));
  }
  const CliRun r = tfm_test::run_tfm("gradcheck --config configs/tiny.json --eps 1e-7");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--eps: expected a number in [1e-06, 1], got \"1e-7\""));
}

TEST_CASE("messages: an integer out of range is called that, with the range", "[messages][cli]") {
  struct Case {
    std::string set, message;
  };
  const std::vector<Case> cases = {
      {"seed=9223372036854775808",
       "seed: 9223372036854775808 is out of range: expected an integer in [0, 2147483648]"},
      {"seed=18446744073709551616",
       "seed: 1.84467e+19 is out of range: expected an integer in [0, 2147483648]"},
      {"seed=-99999999999999999999", "seed: -1e+20 is out of range: expected an integer in [0, 2147483648]"},
      {"model.d_model=1e23", "model.d_model: 1e+23 is out of range: expected an integer in [1, 2147483648]"},
      {"train.max_steps=3000000000",
       "train.max_steps: 3000000000 is out of range: expected an integer in [1, "
       "2147483648] (at most 2^31)"},
      {"train.threads=1e12", "train.threads: 1e+12 is out of range: expected an integer in [0, 1024]"},
      // Not integers at all, and in range but below the minimum: as before.
      {"model.d_model=2.5", "model.d_model: expected an integer >= 1, got 2.5"},
      {"model.d_model=0", "model.d_model: expected an integer >= 1, got 0"},
  };
  for (const Case& c : cases) {
    const CliRun r = tfm_test::run_tfm("info --config configs/tiny.json --set " + c.set);
    INFO(c.set << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("tfm: error: " + c.message));
  }
}

TEST_CASE("messages: seq2seq eval reports the batches its split holds, not the ones asked for",
          "[messages][cli][seq2seq]") {
  const CliRun r = tfm_test::run_tfm("eval --run " + tfm_test::seq2seq_run() + " --batches 1000000000");
  INFO(r.out);
  REQUIRE(r.status == 0);
  // 20 validation pairs in batches of 8.
  CHECK_THAT(r.out,
             Catch::Contains("over 3 batches of at most 8 pairs (the whole val split; 1000000000 asked for "
                             "more than it holds)"));
  CHECK_THAT(r.out, !Catch::Contains("over 1000000000 batches"));
  // A causal run draws random batches: every one asked for runs.
  const CliRun lm = tfm_test::run_tfm("eval --run " + tfm_test::causal_run() + " --batches 3");
  CHECK_THAT(lm.out, Catch::Contains("over 3 batches of 8 (") && !Catch::Contains("the whole"));
}

TEST_CASE("messages: --init-from a checkpoint or a GGUF file says what the file is and what to use",
          "[messages][cli]") {
  const std::string dir = tfm_test::scratch_path("messages", "init_from");
  fs::create_directories(dir);
  const std::string ckpt = tfm_test::causal_run() + "/last.ckpt", gguf = dir + "/model.gguf";
  REQUIRE(
      tfm_test::run_tfm("export --run " + tfm_test::causal_run() + " --format gguf --out " + gguf).status ==
      0);
  struct Case {
    std::string file, message;
  };
  for (const Case& c :
       {Case{ckpt,
             ": not a safetensors file but a tfm checkpoint (.ckpt); write its weights as one "
             "with tfm export --run DIR --out FILE.safetensors"},
        Case{gguf, ": not a safetensors file but a GGUF file (llama.cpp's format"}}) {
    for (const std::string& command : std::vector<std::string>{
             "sample --run " + tfm_test::causal_run() + " --max-new-tokens 2 --init-from " + c.file,
             "train --config configs/tiny.json --set model.d_model=8 --set model.n_layers=1 --set "
             "model.n_heads=2 "
             "--set model.max_seq_len=8 --set train.seq_len=8 --out " +
                 dir + "/run --init-from " + c.file}) {
      const CliRun r = tfm_test::run_tfm(command);
      INFO(command << "\n" << r.out);
      CHECK(r.status == 2);
      CHECK_THAT(r.out, Catch::Contains(c.file + c.message));
      CHECK_THAT(r.out, !Catch::Contains("header length"));
    }
  }
  CHECK(!fs::exists(dir + "/run/last.ckpt"));
}

TEST_CASE("messages: data.tokenizer_path suggests making a tokenizer only where none is", "[messages][cli]") {
  const std::string dir = tfm_test::scratch_path("messages", "tokenizer_path");
  fs::create_directories(dir);
  const std::string bpe =
      "data prepare --config configs/tiny.json --set data.tokenizer=bpe --set data.tokenizer_path=";
  // A missing file: make one there.
  CliRun r = tfm_test::run_tfm(bpe + dir + "/missing.json");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains("data.tokenizer_path: " + dir + "/missing.json") &&
                 Catch::Contains("(make one with: tfm tokenizer train --data FILE --vocab-size N --out " +
                                 dir + "/missing.json)"));
  // A config, a text: files of another kind, which tfm tokenizer train --out would overwrite.
  write_message_file(dir + "/corpus.txt", "some text, not a tokenizer\n");
  for (const std::string& file : {std::string("configs/tiny.json"), dir + "/corpus.txt"}) {
    r = tfm_test::run_tfm(bpe + file);
    INFO(r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("data.tokenizer_path: " + file) &&
                          Catch::Contains(
                              "(expected a byte-level BPE tokenizer file written by tfm tokenizer train)"));
    CHECK_THAT(r.out, !Catch::Contains("--out " + file));
  }
}

TEST_CASE("messages: a stdin line of invalid UTF-8 is named by its line and skipped, the rest translated",
          "[messages][cli][seq2seq]") {
  const std::string dir = tfm_test::scratch_path("messages", "stdin");
  fs::create_directories(dir);
  const std::string translate = tfm_test::tfm_command() + " translate --run " + tfm_test::seq2seq_run();
  for (const bool json : {false, true}) {
    const CliRun r = tfm_test::run_shell("(printf 'one two.\\n\\377 three.\\nfour one.\\n' | " + translate +
                                         (json ? " --json" : "") + " 2>" + dir + "/stderr)");
    const std::string err = tfm_test::read_file(dir + "/stderr");
    INFO(r.out << "\n--- stderr:\n" << err);
    CHECK(r.status == 2);
    // stdout: one line per input line, the bad one's in its place.
    const std::vector<std::string> out = lines_of(r.out);
    REQUIRE(out.size() == 3);
    CHECK(!out[0].empty());
    CHECK(out[1] ==
          (json ? "{\"error\":\"stdin line 2: invalid UTF-8 at byte offset 0 (byte 0xFF cannot start a "
                  "character)\",\"line\":2}"
                : ""));
    CHECK(!out[2].empty());
    CHECK_THAT(err, Catch::Contains("tfm: warning: stdin line 2: invalid UTF-8 at byte offset 0"));
    CHECK_THAT(err,
               Catch::Contains("tfm: error: stdin: 1 line(s) could not be translated (line 2; each has"));
    CHECK_THAT(err, !Catch::Contains("--text") && !Catch::Contains("reads any file"));
  }
}

TEST_CASE("messages: flags' text is checked before it is used, with no advice meant for data files",
          "[messages][cli]") {
  // An invalid --prompt is refused before it is echoed, without data.tokenizer's advice.
  CliRun r =
      tfm_test::run_tfm("sample --run " + tfm_test::causal_run() + " --prompt \"$(printf 'ab\\377')\"");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--prompt: invalid UTF-8 at byte offset 2"));
  CHECK_THAT(r.out, !Catch::Contains("ab\xff") && !Catch::Contains("reads any file"));
  // --checkpoint takes last or best: an empty one is not a ".ckpt".
  for (const std::string command : {"eval", "sample", "heads", "export"}) {
    r = tfm_test::run_tfm(command + " --run " + tfm_test::causal_run() + " --checkpoint \"\"");
    INFO(r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("--checkpoint: expected \"last\" or \"best\", got \"\""));
  }
}

TEST_CASE("messages: a split too short shows data.val_fraction as given and the way out it offers",
          "[messages][cli]") {
  const std::string dir = tfm_test::scratch_path("messages", "split");
  CliRun r = tfm_test::run_tfm("train --config configs/tiny.json --out " + dir +
                               " --set data.val_fraction=0.9999999");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains("the training split has 0 tokens (8000 in the file, data.val_fraction = "
                             "0.9999999); one sequence needs train.seq_len + 2 = 34 (use a longer text, a "
                             "smaller train.seq_len or a smaller data.val_fraction)"));
  r = tfm_test::run_tfm("train --config configs/tiny.json --out " + dir + " --set data.val_fraction=0.001");
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains("the validation split has 8 tokens (8000 in the file, data.val_fraction = "
                             "0.001)") &&
                 Catch::Contains("or a larger data.val_fraction)"));
  CHECK(!fs::exists(dir + "/last.ckpt"));
  // Two documents: the split takes whole ones, and no data.val_fraction gives validation a second.
  const std::string corpus = dir + "_docs";
  fs::create_directories(corpus);
  std::ofstream(corpus + "/a.txt") << std::string(3000, 'a');
  std::ofstream(corpus + "/b.txt") << "short end";
  r = tfm_test::run_tfm("train --config configs/tiny.json --out " + dir + " --set data.path=" + corpus);
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("the validation split has 9 tokens") &&
                        Catch::Contains("(the split takes whole documents, and its 1 of the 2 hold too few "
                                        "tokens: use a smaller train.seq_len or longer documents)"));
}

TEST_CASE("messages: a NUL byte inside a message is shown escaped, not the end of it", "[messages][cli]") {
  // A crafted safetensors file whose one tensor is named "a\0b".
  const std::string path = tfm_test::scratch_path("messages", "nul.safetensors");
  const std::string header = R"({"a\u0000b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string bytes(8, '\0');
  for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  write_message_file(path, bytes + header + std::string(4, '\0'));
  const CliRun r = tfm_test::run_tfm("sample --run " + tfm_test::causal_run() + " --init-from " + path);
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(path + ": ") && Catch::Contains("a\\0b"));
}

TEST_CASE("messages: started by mpirun, a tfm whose MPI plugin is missing says where it looked",
          "[messages][cli]") {
  // A copy of tfm in a directory of its own: libtfm_mpi.so is not beside it. (An installed plugin at the
  // build's install directory would be found: then there is nothing to check here.)
  if (fs::exists(std::string(TFM_PLUGIN_INSTALL_DIR) + "/libtfm_mpi.so")) {
    WARN("an MPI plugin is installed in " TFM_PLUGIN_INSTALL_DIR ": a copy of tfm finds it");
    return;
  }
  tfm_test::TempDir dir("mpi_plugin");
  const std::string copy = copy_of_tfm_alone(dir);
  const CliRun r = tfm_test::run_shell("OMPI_COMM_WORLD_SIZE=2 '" + copy + "' config --keys");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK(r.out.find("started by mpirun, but its MPI plugin libtfm_mpi.so could not be loaded") !=
        std::string::npos);
  CHECK(r.out.find(dir.file("libtfm_mpi.so") + ": no such file") != std::string::npos);
  CHECK(r.out.find("libopenmpi-dev") != std::string::npos);
  CHECK(r.out.find("AddressSanitizer") == std::string::npos);
  // A plugin that is there but does not load is named with the loader's reason, and installing Open
  // MPI's headers and building again is not what it needs.
  write_message_file(dir.file("libtfm_mpi.so"), "not a shared object\n");
  const CliRun bad = tfm_test::run_shell("OMPI_COMM_WORLD_SIZE=2 '" + copy + "' config --keys");
  INFO(bad.out);
  CHECK(bad.status == 2);
  CHECK(bad.out.find("started by mpirun, but its MPI plugin libtfm_mpi.so could not be loaded:\n") !=
        std::string::npos);
  CHECK(bad.out.find(dir.file("libtfm_mpi.so") + ": ") != std::string::npos);
  CHECK(bad.out.find(dir.file("libtfm_mpi.so") + ": no such file") == std::string::npos);
  CHECK(bad.out.find("libopenmpi-dev") == std::string::npos);
}

TEST_CASE("messages: a tfm whose board server is missing says where it looked", "[messages][cli]") {
  tfm_test::TempDir dir("board_server");
  const CliRun r = tfm_test::run_shell("'" + copy_of_tfm_alone(dir) + "' board --port 0");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK(r.out.find("tfm board: its server " + dir.file("tfm-board") + " is missing") != std::string::npos);
}
