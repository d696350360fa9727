// The runs table's library (analysis/runs.h) on run directories the tests write by hand: each status
// from the lock, the log and the checkpoint's state; metrics with a cut last line; a corrupt checkpoint;
// min/max downsampling; config diffs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/analysis/runs.h"
#include "tfm/engine/error.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/run_lock.h"

using namespace tfm;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void runs_write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

json runs_config(int64_t max_steps, const std::string& objective = "causal_lm") {
  return {{"train", {{"max_steps", max_steps}, {"objective", objective}, {"optimizer", {{"lr", 0.003}}}}},
          {"model", {{"d_model", 8}, {"n_heads", 2}}}};
}

// A checkpoint at `step` whose state says `stopped` ("" = nothing), with a one-float model.
void runs_checkpoint(const std::string& path, const json& config, int64_t step, const std::string& stopped) {
  Checkpoint c;
  c.config = config;
  c.tokenizer = Tokenizer(Tokenizer::Kind::Char, {'a', 'b', 'c'});
  c.state.step = step;
  c.state.best_val_loss = 3.0 - double(step) / 100;
  c.state.elapsed_s = 1.0;
  c.state.stopped = stopped;
  c.model = {1.0f};
  save_checkpoint(path, c);
}

// A run directory: config.json, a train.log with the model line, metrics every 10 steps up to `step`
// (val loss 3.0 - step/100), and last.ckpt at `step`.
void runs_make(const std::string& dir, int64_t step, int64_t max_steps, const std::string& stopped = "") {
  const json config = runs_config(max_steps);
  runs_write(dir + "/config.json", config.dump(2));
  runs_write(dir + "/train.log", "[2026-01-01 00:00:00] [info] tfm train: run directory " + dir +
                                     "\n[2026-01-01 00:00:00] [info] model: 1234 parameters (embedding 1)\n");
  std::string metrics;
  for (int64_t s = 10; s <= step; s += 10) {
    json rec = {{"step", s}, {"train_loss", 3.0}, {"tokens_per_s", 1000.0 * double(s)}};
    if (s % 20 == 0) rec["val_loss"] = 3.0 - double(s) / 100;
    if (stopped == "target_loss" && s == step) rec["seconds_to_target"] = 4.5;
    metrics += rec.dump() + "\n";
  }
  runs_write(dir + "/metrics.jsonl", metrics);
  runs_checkpoint(dir + "/last.ckpt", config, step, stopped);
}

const RunSummary& runs_find(const std::vector<RunSummary>& runs, const std::string& name) {
  for (const RunSummary& r : runs)
    if (r.name == name) return r;
  FAIL("no run named " << name);
  return runs.front();
}

}  // namespace

TEST_CASE("runs: every status, from the lock, the log and the checkpoint's state", "[runs]") {
  tfm_test::TempDir tmp("runs_status");
  const std::string root = tmp.file("all");
  runs_make(root + "/done", 40, 40);
  runs_make(root + "/target", 20, 40, "target_loss");
  runs_make(root + "/budget", 30, 40, "max_seconds");
  runs_make(root + "/killed", 20, 40);
  runs_make(root + "/group/failed", 20, 40);
  std::ofstream(root + "/group/failed/train.log", std::ios::app)
      << "[2026-01-01 00:00:01] [error] step 21: loss is NaN; training stopped.\n";
  runs_make(root + "/live", 20, 40);
  const RunLock lock = RunLock::acquire(root + "/live");
  fs::create_directories(root + "/not_a_run/empty");

  const std::vector<RunSummary> runs = list_runs({root});
  REQUIRE(runs.size() == 6);
  CHECK(runs_find(runs, "all/done").status == RunStatus::Finished);
  CHECK(runs_find(runs, "all/target").status == RunStatus::StoppedAtTarget);
  CHECK(runs_find(runs, "all/budget").status == RunStatus::StoppedAtTimeBudget);
  CHECK(runs_find(runs, "all/killed").status == RunStatus::Interrupted);
  const RunSummary& failed = runs_find(runs, "all/group/failed");
  CHECK(failed.status == RunStatus::Failed);
  CHECK(failed.status_detail == "step 21: loss is NaN; training stopped.");
  const RunSummary& live = runs_find(runs, "all/live");
  CHECK(live.status == RunStatus::Training);
  CHECK(live.status_detail == "PID " + std::to_string(::getpid()));

  const RunSummary& done = runs_find(runs, "all/done");
  CHECK(done.objective == "causal_lm");
  CHECK(done.parameters == 1234);
  CHECK(done.step == 40);
  CHECK(done.max_steps == 40);
  CHECK(done.best_val_loss == Approx(2.6));     // val at steps 20 and 40: 2.8, 2.6
  CHECK(done.tokens_per_s == Approx(30000.0));  // median of 10k, 20k, 30k, 40k: the upper middle
  CHECK(std::isnan(done.seconds_to_target));
  CHECK(done.problems.empty());
  CHECK(done.last_update > 1.7e9);
  // An analysis written into a run later (tfm attention's attention/) is no update of the run.
  const auto two_days_ago = fs::file_time_type::clock::now() - std::chrono::hours(48);
  for (const auto& e : fs::directory_iterator(root + "/done")) fs::last_write_time(e.path(), two_days_ago);
  fs::create_directories(root + "/done/attention");
  std::ofstream(root + "/done/attention/attention.json") << "{}";
  CHECK(summarize_run(root + "/done", "done").last_update <
        static_cast<double>(std::time(nullptr)) - 47 * 3600);
  CHECK(runs_find(runs, "all/target").seconds_to_target == Approx(4.5));

  const json j = run_summary_json(runs_find(runs, "all/target"));
  CHECK(j["status"] == "stopped: target");
  CHECK(j["step"] == 20);
  CHECK(j["parameters"] == 1234);
  CHECK(run_summary_json(done)["seconds_to_target"].is_null());
  CHECK(j["files"] == json({"config.json", "last.ckpt", "metrics.jsonl", "train.log"}));
}

TEST_CASE("runs: a cut metrics line, a corrupt checkpoint and a deleted directory are named, not fatal",
          "[runs]") {
  tfm_test::TempDir tmp("runs_damaged");
  const std::string dir = tmp.file("run");
  runs_make(dir, 40, 40);
  std::ofstream(dir + "/metrics.jsonl", std::ios::app) << "{\"step\": 50, \"train_lo";
  const MetricsLog log = read_metrics(dir + "/metrics.jsonl");
  CHECK(log.records.size() == 4);
  CHECK(log.skipped_lines == 1);
  CHECK(read_metrics(dir + "/metrics.jsonl", 20).records.size() == 2);  // steps 30 and 40
  CHECK(read_metrics(dir + "/none.jsonl").missing);

  // Truncate the checkpoint: its header no longer matches the file.
  const std::string ckpt = dir + "/last.ckpt";
  fs::resize_file(ckpt, fs::file_size(ckpt) - 3);
  CHECK_THROWS_AS(load_checkpoint_state(ckpt), IoError);
  RunSummary r = summarize_run(dir, "run");
  CHECK(r.status == RunStatus::Interrupted);
  CHECK(r.status_detail == "checkpoint unreadable");
  REQUIRE(r.problems.size() == 2);
  CHECK(r.problems[0].find("metrics.jsonl: 1 unreadable line") != std::string::npos);
  CHECK(r.problems[1].find("last.ckpt") != std::string::npos);
  CHECK(r.step == 40);  // from the metrics
  CHECK(r.best_val_loss == Approx(2.6));

  // An empty best.ckpt beside a good last.ckpt: finished, and the best one named (sample reads it).
  runs_make(dir + "2", 40, 40);
  std::ofstream(dir + "2/best.ckpt").flush();
  r = summarize_run(dir + "2", "run2");
  CHECK(r.status == RunStatus::Finished);
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].find("best.ckpt") != std::string::npos);
  // No checkpoint at all: nothing to go on from, said as a problem too.
  fs::remove(dir + "2/best.ckpt");
  fs::remove(dir + "2/last.ckpt");
  r = summarize_run(dir + "2", "run2");
  CHECK(r.status_detail == "no checkpoint");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].find("no last.ckpt or best.ckpt: nothing to resume") != std::string::npos);

  fs::remove_all(dir);
  r = summarize_run(dir, "run");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].find("no such directory") != std::string::npos);
  CHECK(list_runs({tmp.file("missing_root")}).empty());
}

TEST_CASE("runs: a checkpoint state field of the wrong type is that run's problem, the list goes on",
          "[runs]") {
  tfm_test::TempDir tmp("runs_state_type");
  const std::string root = tmp.file("all");
  runs_make(root + "/good", 40, 40);
  runs_make(root + "/bad", 40, 40);
  // "step": 40 made a string in place, as a hand edit or a damaged byte would: the checksum is not
  // fixed, and the list reads the state without it (load_checkpoint_state).
  const std::string ckpt = root + "/bad/last.ckpt";
  std::string bytes = tfm_test::read_file(ckpt);
  const size_t at = bytes.find("\"step\": 40");
  REQUIRE(at != std::string::npos);
  bytes.replace(at, 10, "\"step\":\"4\"");
  runs_write(ckpt, bytes);

  std::vector<RunSummary> runs;
  REQUIRE_NOTHROW(runs = list_runs({root}));
  REQUIRE(runs.size() == 2);
  CHECK(runs_find(runs, "all/good").status == RunStatus::Finished);
  CHECK(runs_find(runs, "all/good").problems.empty());
  const RunSummary& bad = runs_find(runs, "all/bad");
  CHECK(bad.status == RunStatus::Interrupted);
  CHECK(bad.status_detail == "checkpoint unreadable");
  CHECK(bad.step == 40);  // from the metrics
  REQUIRE(bad.problems.size() == 1);
  CHECK_THAT(bad.problems[0],
             Catch::StartsWith(ckpt + ": corrupt checkpoint: the state's \"step\" is \"4\""));
}

TEST_CASE("runs: below the current directory a run's name is the path to give --run", "[runs]") {
  tfm_test::TempDir tmp("runs_names");
  const fs::path before = fs::current_path();
  fs::current_path(tmp.path);
  CHECK(run_name_under("runs", "runs/tiny") == "runs/tiny");
  CHECK(run_name_under("runs/tiny", "runs/tiny") == "runs/tiny");  // the root is the run
  CHECK(run_name_under("runs/", "runs/group/tiny") == "runs/group/tiny");
  CHECK(run_name_under("runs/tiny/", "runs/tiny/") == "runs/tiny");
  CHECK(run_name_under("./runs", "./runs/tiny") == "runs/tiny");
  CHECK(run_name_under(tmp.path + "/runs", tmp.path + "/runs/tiny") == "runs/tiny");
  CHECK(run_name_under(".", ".") == fs::path(tmp.path).filename().string());
  // Elsewhere: the root's own name, then the path below it.
  CHECK(run_name_under("/srv/exp", "/srv/exp/a/b") == "exp/a/b");
  CHECK(run_name_under("../other", "../other/a") == "other/a");
  fs::current_path(before);
}

TEST_CASE("runs: runs of the same name under two roots get names apart, each directory listed once",
          "[runs]") {
  tfm_test::TempDir tmp("runs_alike");
  runs_make(tmp.file("A/runs/tiny"), 20, 40);
  runs_make(tmp.file("B/runs/tiny"), 40, 40);
  runs_make(tmp.file("B/runs/other"), 20, 40);
  // Elsewhere than the current directory: a parent directory more for the two alike, not for the other.
  std::vector<RunSummary> runs = list_runs({tmp.file("A/runs"), tmp.file("B/runs"), tmp.file("B/runs/tiny")});
  REQUIRE(runs.size() == 3);  // B/runs/tiny, reached from two roots, once
  CHECK(runs_find(runs, "A/runs/tiny").step == 20);
  CHECK(runs_find(runs, "B/runs/tiny").step == 40);
  CHECK(runs_find(runs, "runs/other").step == 20);
  // Below the current directory a name is the path --run takes, and stays; the other is told apart.
  const fs::path before = fs::current_path();
  fs::current_path(tmp.file("A"));
  const std::vector<NamedRun> named = find_named_runs({"runs", "../B/runs"});
  fs::current_path(before);
  REQUIRE(named.size() == 3);
  CHECK(named[0].name == "runs/tiny");
  CHECK(named[1].name == "runs/other");
  CHECK(named[2].name == "B/runs/tiny");
  // Names with no more parents to add (one directory twice) are left alike rather than looping.
  CHECK(unique_names({"x", "x"}, {"/x", "/x"}) == std::vector<std::string>({"/x", "/x"}));
  CHECK(unique_names({"tiny", "tiny"}, {"/p/a/tiny", "/p/b/tiny"}) ==
        std::vector<std::string>({"a/tiny", "b/tiny"}));
}

TEST_CASE("runs: the checkpoint's state alone equals the full load's", "[runs]") {
  const std::string fixture = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/checkpoint_v1_tiny.ckpt";
  const CheckpointState alone = load_checkpoint_state(fixture), whole = load_checkpoint(fixture).state;
  CHECK(alone.step == whole.step);
  CHECK(alone.best_val_loss == whole.best_val_loss);
  CHECK(alone.elapsed_s == whole.elapsed_s);
  CHECK(alone.optimizer_steps == whole.optimizer_steps);
  CHECK(alone.streams.at(0).sampler == whole.streams.at(0).sampler);
  CHECK_THROWS_AS(load_checkpoint_state(std::string(TFM_SOURCE_DIR) + "/README.md"), IoError);
}

TEST_CASE("runs: sort by a column, unknown values last, a bad key names --sort", "[runs]") {
  std::vector<RunSummary> runs(3);
  runs[0].name = "a", runs[0].best_val_loss = 2.0, runs[0].tokens_per_s = 10;
  runs[1].name = "b";  // nothing known
  runs[2].name = "c", runs[2].best_val_loss = 1.0, runs[2].tokens_per_s = 30;
  sort_runs(runs, "best_val_loss");
  CHECK((runs[0].name + runs[1].name + runs[2].name) == "cab");
  sort_runs(runs, "tokens_per_s");  // fastest first
  CHECK((runs[0].name + runs[1].name + runs[2].name) == "cab");
  sort_runs(runs, "name");
  CHECK((runs[0].name + runs[1].name + runs[2].name) == "abc");
  runs[0].best_val_bleu = 10, runs[2].best_val_bleu = 20, runs[1].best_val_accuracy = 0.5;
  sort_runs(runs, "best_val_bleu");  // highest first, unknown last
  CHECK((runs[0].name + runs[1].name + runs[2].name) == "cab");
  sort_runs(runs, "best_val_accuracy");
  CHECK(runs[0].name == "b");
  try {
    sort_runs(runs, "speed");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("--sort") != std::string::npos);
    CHECK(std::string(e.what()).find("best_val_loss") != std::string::npos);
  }
}

TEST_CASE("runs: min/max downsampling keeps every bucket's extremes, in order", "[runs]") {
  std::vector<double> y(100000);
  for (size_t i = 0; i < y.size(); ++i) y[i] = std::sin(double(i) / 1000.0);
  y[54321] = 50.0;  // a spike that striding would miss
  y[12345] = -50.0;
  const std::vector<size_t> kept = downsample_min_max(y, 1000);
  CHECK(kept.size() <= 1000);
  CHECK(kept.size() >= 990);
  CHECK(std::is_sorted(kept.begin(), kept.end()));
  CHECK(std::adjacent_find(kept.begin(), kept.end()) == kept.end());
  CHECK(std::find(kept.begin(), kept.end(), size_t{54321}) != kept.end());
  CHECK(std::find(kept.begin(), kept.end(), size_t{12345}) != kept.end());
  CHECK(downsample_min_max({1, 2, 3}, 1000) == std::vector<size_t>({0, 1, 2}));
  // The first and the last point are kept even when neither is its bucket's extreme: a series of 4000
  // steps had ended at step 3998, and a page polling past the last step never got the rest.
  for (const size_t n : {3, 4, 5, 100, 4000, 4001})
    for (const size_t max_points : {2, 3, 4, 10, 1000, 2000}) {
      std::vector<double> wave(n);
      for (size_t i = 0; i < n; ++i) wave[i] = 3.0 + std::sin(double(i));
      const std::vector<size_t> k = downsample_min_max(wave, max_points);
      INFO("n " << n << ", max_points " << max_points);
      REQUIRE(!k.empty());
      CHECK(k.size() <= std::max(max_points, size_t{2}));
      CHECK(k.front() == 0);
      CHECK(k.back() == n - 1);
      CHECK(std::adjacent_find(k.begin(), k.end(), std::greater_equal<size_t>()) == k.end());
    }
  CHECK(downsample_min_max({}, 10).empty());
}

TEST_CASE("runs: config diff lists only the differing dotted keys", "[runs]") {
  json a = runs_config(40), b = runs_config(80);
  b["train"]["optimizer"]["lr"] = 0.001;
  b["model"]["bias"] = false;
  const std::vector<ConfigDifference> d = config_diff(a, b);
  REQUIRE(d.size() == 3);
  CHECK(d[0].key == "model.bias");
  CHECK(d[0].a.is_null());
  CHECK(d[0].b == false);
  CHECK(d[1].key == "train.max_steps");
  CHECK(d[2].key == "train.optimizer.lr");
  CHECK(d[2].a == 0.003);
  CHECK(config_diff(a, a).empty());
  CHECK(flatten_config(a)["model.d_model"] == 8);
  // A key neither run's objective reads is left out: seq2seq's source length between two causal_lm runs.
  json c = a, e = a;
  c["train"]["objective"] = e["train"]["objective"] = "causal_lm";
  c["data"]["max_source_len"] = 10, e["data"]["max_source_len"] = 20;
  CHECK(config_diff(c, e).empty());
  e["train"]["objective"] = "seq2seq";  // read by one of them: listed
  CHECK(config_diff(c, e).size() == 2);
}

TEST_CASE("runs: config diff of many runs, a missing config left out of the comparison", "[runs]") {
  json a = runs_config(40), b = runs_config(40), c = runs_config(80);
  b["train"]["optimizer"]["lr"] = 0.001;
  a["output"]["dir"] = "runs/a", b["output"]["dir"] = "runs/b";
  std::vector<ConfigDifferences> d = config_diff(std::vector<json>{a, b, c});
  REQUIRE(d.size() == 2);
  CHECK(d[0].key == "train.max_steps");
  CHECK(d[0].values == std::vector<json>({40, 40, 80}));
  CHECK(d[1].key == "train.optimizer.lr");
  CHECK(d[1].values == std::vector<json>({0.003, 0.001, 0.003}));
  // A run without a config: not a run whose every key is absent, but one not compared.
  d = config_diff(std::vector<json>{a, json(), b});
  REQUIRE(d.size() == 1);
  CHECK(d[0].values == std::vector<json>({0.003, nullptr, 0.001}));
  CHECK(config_diff(std::vector<json>{a, json()}).empty());
  // Flattened configs (the board's) compare as their nested forms.
  CHECK(config_diff(std::vector<json>{flatten_config(a), flatten_config(c)}).size() == 1);
}

TEST_CASE("runs: sweep, ablation and speedrun results are found with their files", "[runs]") {
  tfm_test::TempDir tmp("runs_results");
  runs_write(tmp.file("sw/sweep.jsonl"), "{}\n");
  runs_write(tmp.file("sw/n_heads=1/config.json"), "{}");
  runs_write(tmp.file("sp/x/summary.json"), "{}");
  const std::vector<json> sets = find_result_sets({tmp.path});
  REQUIRE(sets.size() == 2);
  CHECK(sets[0]["kind"] == "speedrun");
  CHECK(sets[1]["kind"] == "sweep");
  CHECK(sets[1]["files"] == json({"sweep.jsonl"}));
}
