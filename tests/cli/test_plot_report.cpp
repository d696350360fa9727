// tfm plot report knows a report by what it holds, not by its name (a copy of sweep.jsonl named
// results.jsonl is a sweep), and names the line of a JSON Lines report that is not JSON; a last line
// cut short (a sweep being written) is skipped and said.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "xml_check.h"

using tfm_test::read_file;
using tfm_test::run_tfm;

namespace {

// A sweep.jsonl line as tfm sweep writes it.
std::string sweep_point(double lr, double val) {
  return "{\"train.optimizer.lr\": " + std::to_string(lr) +
         ", \"parameters\": 100, \"train_flops_per_token\": 600.0, \"kv_cache_bytes_per_token\": 64, "
         "\"val_loss\": " +
         std::to_string(val) + ", \"best_val_loss\": " + std::to_string(val) +
         ", \"ms_per_step\": 2.0, \"tokens_per_s\": 1000.0, \"step\": 4, \"training_s\": 0.1, "
         "\"stopped\": \"max_steps\", \"dir\": \"runs/x\"}\n";
}

}  // namespace

TEST_CASE("plot report: the report's kind comes from its content, whatever its name", "[cli][plot]") {
  tfm_test::TempDir t("plot_report");
  const std::string points = sweep_point(0.001, 3.1) + sweep_point(0.002, 2.9) + sweep_point(0.004, 3.3);
  std::ofstream(t.file("results.jsonl")) << points;
  tfm_test::CliRun r = run_tfm("plot report " + t.file("results.jsonl") + " --out " + t.file("sweep"));
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string svg = read_file(t.file("sweep") + "/sweep.svg");
  CHECK(tfm_test::xml_problem(svg).empty());
  CHECK_THAT(svg, Catch::Contains("sweep: 3 points"));
  CHECK_THAT(svg, Catch::Contains(">train.optimizer.lr</text>"));

  // A bench attention report under another name.
  r = run_tfm("bench attention --seq-lens 8,16 --d-model 8 --heads 2 --seconds 0.001 --no-plot --out " +
              t.file("b"));
  REQUIRE(r.status == 0);
  std::filesystem::copy_file(t.file("b") + "/bench_attention.json", t.file("copy.json"));
  r = run_tfm("plot report " + t.file("copy.json") + " --out " + t.file("bench"));
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(tfm_test::xml_problem(read_file(t.file("bench") + "/bench_attention.svg")).empty());

  // The name still decides what the content does not: a report named for its kind that lacks what its
  // figure needs is named as such, not an internal error.
  std::ofstream(t.file("heads.json")) << "{\"run\": \"x\"}\n";
  r = run_tfm("plot report " + t.file("heads.json"));
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("heads.json: not a whole heads report"));
}

TEST_CASE("plot report: a bad line of sweep.jsonl is named, a cut last line skipped and said",
          "[cli][plot]") {
  tfm_test::TempDir t("plot_report_lines");
  std::filesystem::create_directories(t.file("sw"));
  const std::string two = sweep_point(0.001, 3.1) + sweep_point(0.002, 2.9);
  const std::string third = sweep_point(0.004, 3.3);
  // Cut in the middle of its last line, as a sweep being written leaves it.
  std::ofstream(t.file("sw") + "/sweep.jsonl") << two << third.substr(0, third.size() / 2);
  tfm_test::CliRun r = run_tfm("plot report " + t.file("sw") + "/sweep.jsonl");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("sweep.jsonl: its last line is cut short"));
  CHECK_THAT(read_file(t.file("sw") + "/sweep.svg"), Catch::Contains("sw: 2 points"));

  // A line that is not JSON before the end: its number.
  std::ofstream(t.file("sw") + "/sweep.jsonl") << sweep_point(0.001, 3.1) << "{\"dir\": \n" << third;
  r = run_tfm("plot report " + t.file("sw") + "/sweep.jsonl");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("sw/sweep.jsonl:2: not JSON"));

  // A one-document report cut short: its line and column.
  std::ofstream(t.file("bench_attention.json")) << "{\n \"lengths\": [\n  {\"n\": 8,";
  r = run_tfm("plot report " + t.file("bench_attention.json"));
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("bench_attention.json:3:"));
}
