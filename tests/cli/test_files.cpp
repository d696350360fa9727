// Odd files where tfm reads and writes, end to end: a symbolic link (to a file outside the run), a
// FIFO or a character device at the name of a file a command writes is refused with exit 2 naming
// it, and nothing in the directory changes; a FIFO or device given as a file to read is refused at
// once (never waited on); the token cache's folder is used only when no other user controls it.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli_run.h"

namespace fs = std::filesystem;

namespace {

using tfm_test::CliRun;
using tfm_test::TempDir;

// `tfm ARGS` with a time limit: a command that blocks (on a FIFO) fails the test (status 137)
// instead of hanging it.
CliRun tfm_within(const std::string& args) {
  return tfm_test::run_shell("timeout -s KILL 120 " + tfm_test::tfm_command() + " " + args);
}

// Every entry under `dir`, links not followed: its kind and, for a regular file, its bytes (a FIFO
// is never opened).
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> s;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string p = e.path().string();
    struct stat st;
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    if (S_ISREG(st.st_mode))
      s[p] = "file:" + tfm_test::read_file(p);
    else if (S_ISLNK(st.st_mode))
      s[p] = "link:" + fs::read_symlink(e.path()).string();
    else
      s[p] = "mode:" + std::to_string(st.st_mode & S_IFMT);
  }
  return s;
}

// The odd files planted at a name: a link to a file outside the directory, a FIFO, and (as root) a
// character device made in place (the null device's numbers; /dev/null itself is never touched).
struct Plant {
  std::string kind;  // as tfm names it
  std::function<void(const std::string&)> make;
};

std::vector<Plant> plants(const std::string& victim) {
  std::vector<Plant> p = {
      {"a symbolic link", [victim](const std::string& at) { fs::create_symlink(victim, at); }},
      {"a FIFO", [](const std::string& at) { REQUIRE(::mkfifo(at.c_str(), 0600) == 0); }},
  };
  if (::geteuid() == 0)
    p.push_back({"a character device", [](const std::string& at) {
                   REQUIRE(::mknod(at.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0);
                 }});
  else
    WARN("not root: the character-device cases are skipped");
  return p;
}

// A tiny model so a run trains in a second and its checkpoint is small.
const std::string kTiny =
    "--config configs/tiny.json --set model.d_model=8 --set model.n_layers=1 --set model.n_heads=2 "
    "--set model.max_seq_len=8 --set train.seq_len=8 --set train.max_steps=2 --set train.eval_interval=2 "
    "--set train.eval_steps=1 --set train.checkpoint_interval=2 ";

}  // namespace

TEST_CASE("files: a link or FIFO or device at the name of a file tfm writes is refused and nothing changes",
          "[files][cli]") {
  TempDir outside("files_outside");
  const std::string victim = outside.path + "/victim.txt";
  {
    std::FILE* f = std::fopen(victim.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("precious bytes\n", f);
    std::fclose(f);
  }
  TempDir tmp("files_writes");
  const std::string run = tmp.path + "/run", out = tmp.path + "/out";
  CliRun r = tfm_within("train " + kTiny + "--out " + run);
  INFO(r.out);
  REQUIRE(r.status == 0);
  REQUIRE(fs::exists(run + "/best.ckpt"));
  fs::create_directory(out);
  // A run to resume: copied, so each case starts from the same files.
  const std::string resumed = tmp.path + "/resumed";

  struct Case {
    std::string args, target;
  };
  const Case cases[] = {
      {"export --run " + run + " --out " + out + "/model.safetensors", out + "/model.safetensors"},
      {"export --run " + run + " --format gguf --out " + out + "/model.gguf", out + "/model.gguf"},
      {"eval --run " + run + " --batches 1 --dump-logits " + out + "/logits.json", out + "/logits.json"},
      {"tokenizer train --data tests/data/tiny_shakespeare.txt --vocab-size 260 --out " + out + "/tok.json",
       out + "/tok.json"},
      {"heads --run " + run + " --batches 1 --no-plot --out " + out, out + "/heads.json"},
      {"attention --run " + run + " --text abc --no-plot --out " + out, out + "/attention.json"},
      {"bench attention --seq-lens 8,16 --d-model 8 --heads 2 --seconds 0.001 --no-plot --out " + out,
       out + "/bench_attention.json"},
      {"sweep " + kTiny + "--no-plot --grid model.n_kv_heads=2,1 --out " + out, out + "/sweep.jsonl"},
      // Resuming a run: every file the run writes.
      {"train --resume " + resumed + " --set train.max_steps=4", resumed + "/train.log"},
      {"train --resume " + resumed + " --set train.max_steps=4", resumed + "/metrics.jsonl"},
      {"train --resume " + resumed + " --set train.max_steps=4", resumed + "/best.ckpt"},
      {"train --resume " + resumed + " --set train.max_steps=4", resumed + "/config.json"},
      {"train --resume " + resumed + " --set train.max_steps=4", resumed + "/train.lock"},
  };
  int tried = 0;
  for (const Case& c : cases) {
    for (const Plant& p : plants(victim)) {
      fs::remove_all(resumed);
      fs::copy(run, resumed, fs::copy_options::recursive);
      fs::remove(c.target);
      p.make(c.target);
      const auto before = snapshot(tmp.path);
      r = tfm_within(c.args);
      INFO(c.args << "\n" << p.kind << "\n" << r.out);
      CHECK(r.status == 2);
      CHECK_THAT(r.out, Catch::Contains(c.target + ": exists and is " + p.kind +
                                        "; tfm writes only regular files: remove it or choose another path"));
      CHECK(snapshot(tmp.path) == before);
      CHECK(tfm_test::read_file(victim) == "precious bytes\n");
      fs::remove(c.target);
      ++tried;
    }
  }
  CHECK(tried >= 26);

  // A resumed run's last.ckpt linked to a copy outside: read, but never written through.
  const std::string copy = outside.path + "/last.ckpt";
  fs::remove_all(resumed);
  fs::copy(run, resumed, fs::copy_options::recursive);
  fs::copy_file(run + "/last.ckpt", copy);
  fs::remove(resumed + "/last.ckpt");
  fs::create_symlink(copy, resumed + "/last.ckpt");
  const std::string bytes = tfm_test::read_file(copy);
  const auto before = snapshot(tmp.path);
  r = tfm_within("train --resume " + resumed + " --set train.max_steps=4");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(resumed + "/last.ckpt: exists and is a symbolic link"));
  CHECK(snapshot(tmp.path) == before);
  CHECK(tfm_test::read_file(copy) == bytes);
}

TEST_CASE("files: a FIFO or device given as a file to read is refused at once and named", "[files][cli]") {
  TempDir tmp("files_reads");
  const std::string run = tmp.path + "/run", fifo = tmp.path + "/fifo", dev = tmp.path + "/null";
  CliRun r = tfm_within("train " + kTiny + "--out " + run);
  INFO(r.out);
  REQUIRE(r.status == 0);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::vector<std::string> odd = {fifo};
  if (::geteuid() == 0 && ::mknod(dev.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0) odd.push_back(dev);
  // A run whose checkpoints are FIFOs.
  const std::string fifo_run = tmp.path + "/fifo_run";
  fs::copy(run, fifo_run, fs::copy_options::recursive);
  for (const char* name : {"/last.ckpt", "/best.ckpt"}) {
    fs::remove(fifo_run + name);
    REQUIRE(::mkfifo((fifo_run + name).c_str(), 0600) == 0);
  }

  int tried = 0;
  for (const std::string& f : odd) {
    const std::string kind = f == fifo ? "a FIFO" : "a character device";
    struct Case {
      std::string args, named;
    };
    const Case cases[] = {
        {"train --config " + f, f},
        {"train " + kTiny + "--out " + tmp.path + "/r1 --set data.path=" + f, f},
        {"train " + kTiny + "--out " + tmp.path +
             "/r2 --set data.tokenizer=bpe --set data.tokenizer_path=" + f,
         f},
        {"train " + kTiny + "--out " + tmp.path + "/r3 --init-from " + f, f},
        {"sample --run " + run + " --init-from " + f + " --max-new-tokens 2", f},
        {"tokenizer train --data " + f + " --vocab-size 260 --out " + tmp.path + "/tok.json", f},
        {"data prepare --config configs/tiny.json --set data.path=" + f, f},
        {"eval --run " + fifo_run + " --checkpoint best --batches 1", fifo_run + "/best.ckpt"},
        {"eval --run " + fifo_run + " --checkpoint last --batches 1", fifo_run + "/last.ckpt"},
        {"train --resume " + fifo_run, fifo_run + "/last.ckpt"},
    };
    for (const Case& c : cases) {
      const std::string expected =
          c.named + ": is " + (c.named == f ? kind : "a FIFO") + "; expected a regular file";
      r = tfm_within(c.args);
      INFO(c.args << "\n" << r.out);
      CHECK(r.status == 2);
      CHECK_THAT(r.out, Catch::Contains(expected));
      ++tried;
    }
  }
  CHECK(tried >= 10);
  for (const char* name : {"/r1", "/r2", "/tok.json"}) CHECK_FALSE(fs::exists(tmp.path + name));
}

TEST_CASE("files: the token cache folder refuses planted links and folders other users control",
          "[files][cli]") {
  TempDir outside("files_cache_outside");
  const std::string victim = outside.path + "/victim";
  TempDir tmp("files_cache");
  const std::string corpus = tmp.path + "/corpus.txt", cache_dir = tmp.path + "/.tfm-cache";
  fs::copy_file("tests/data/tiny_shakespeare.txt", corpus);
  const std::string train = "train " + kTiny + "--set data.path=" + corpus + " --out ";
  {
    std::FILE* f = std::fopen(victim.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("precious bytes\n", f);
    std::fclose(f);
  }
  for (const std::string name : {"corpus.txt.char.tokens", "corpus.txt.char.tokens.lock"}) {
    for (const Plant& p : plants(victim)) {
      const std::string at = cache_dir + "/" + name;
      fs::remove_all(cache_dir);
      fs::create_directory(cache_dir);
      p.make(at);
      const CliRun r = tfm_within(train + tmp.path + "/run");
      INFO(name << "\n" << p.kind << "\n" << r.out);
      CHECK(r.status == 2);
      CHECK_THAT(r.out, Catch::Contains(at + ": exists and is " + p.kind));
      CHECK(tfm_test::read_file(victim) == "precious bytes\n");
      CHECK(tfm_test::temporaries_beside(cache_dir + "/corpus.txt.char.tokens").empty());
      CHECK_FALSE(fs::exists(tmp.path + "/run/last.ckpt"));
    }
  }

  // A folder anyone may write to without the sticky bit: refused, naming it; with the sticky bit
  // (like /tmp), used.
  fs::remove_all(cache_dir);
  fs::create_directory(cache_dir);
  fs::permissions(cache_dir, fs::perms::all);
  CliRun r = tfm_within(train + tmp.path + "/run_open");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(cache_dir +
                                    ": the token cache folder (data.cache_dir) may be written by anyone"));
  CHECK(fs::is_empty(cache_dir));
  fs::permissions(cache_dir, fs::perms::all | fs::perms::sticky_bit);
  r = tfm_within(train + tmp.path + "/run_sticky");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(fs::exists(cache_dir + "/corpus.txt.char.tokens"));

  // Another user's folder, or another user's cache in ours (root only: chown).
  if (::geteuid() != 0) {
    WARN("not root: the other-user cases are skipped");
    return;
  }
  const uid_t other = 4242;
  REQUIRE(::chown((cache_dir + "/corpus.txt.char.tokens").c_str(), other, other) == 0);
  r = tfm_within(train + tmp.path + "/run_foreign_cache");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(cache_dir + "/corpus.txt.char.tokens: owned by another user (uid 4242)"));
  REQUIRE(::chown(cache_dir.c_str(), other, other) == 0);
  r = tfm_within(train + tmp.path + "/run_foreign_dir");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains(cache_dir + ": the token cache folder (data.cache_dir) is owned by another "
                                         "user (uid 4242)"));
  CHECK_FALSE(fs::exists(tmp.path + "/run_foreign_dir/last.ckpt"));
}
