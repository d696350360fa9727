// Figures drawn by tfm itself (SVG, no Python): loss.svg of `tfm train`, the SVGs of attention, heads
// and bench attention, `tfm plot`; and train.log's progress lines when stdout is not a terminal.
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>

#include "cli_run.h"
#include "xml_check.h"

using tfm_test::count_of;
using tfm_test::read_file;
using tfm_test::run_tfm;
using tfm_test::series_points;
using tfm_test::xml_problem;

namespace {

// A 30-step run of the smallest model logging every step (stdout a pipe: not a terminal).
struct FiguresTestRun {
  tfm_test::TempDir dir{"figures_cli"};
  std::string run = dir.file("run");
  tfm_test::CliRun train =
      run_tfm("train --config configs/tiny.json --out " + run +
              " --set model.d_model=8 --set model.n_layers=1 --set model.n_heads=2 --set model.max_seq_len=8"
              " --set train.seq_len=8 --set train.max_steps=30 --set train.log_interval=1"
              " --set train.eval_interval=10 --set train.checkpoint_interval=10");
};

}  // namespace

TEST_CASE("figures: tfm train draws loss.svg and logs progress with an ETA when not on a terminal",
          "[cli][figures]") {
  FiguresTestRun t;
  INFO(t.train.out);
  REQUIRE(t.train.status == 0);
  const std::string svg = read_file(t.run + "/loss.svg");
  CHECK(xml_problem(svg).empty());
  CHECK(series_points(svg, "train") == 30);  // one point per logged step
  CHECK(count_of(svg, "tfm run run") == 1);
  CHECK(tfm_test::temporaries_beside(t.run + "/loss.svg").empty());
  // train.log and the console (a pipe here, as under `| tee`) carry one progress line per log interval.
  const std::string log = read_file(t.run + "/train.log");
  static const std::regex line(
      R"(step (\d+)/30 \| loss [0-9.]+ \|.* tok/s \|.* \| eta (\d+\.\ds|\d+s|\d+m\d\ds|\?)\n)");
  size_t lines = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) ++lines;
  CHECK(lines == 30);
  CHECK(count_of(log, "step 30/30 | loss ") == 1);
  CHECK(count_of(t.train.out, "| eta ") == 30);
  CHECK(count_of(t.train.out, "\r") == 0);  // no terminal line redrawing in a pipe
}

TEST_CASE("figures: attention, heads and bench attention write SVGs, and tfm plot draws them again",
          "[cli][figures]") {
  FiguresTestRun t;
  INFO(t.train.out);
  REQUIRE(t.train.status == 0);
  const std::string att = t.dir.file("att");
  tfm_test::CliRun r = run_tfm("attention --run " + t.run + " --text \"First\" --out " + att);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string layer0 = read_file(att + "/attention_layer0.svg");
  CHECK(xml_problem(layer0).empty());
  CHECK(count_of(layer0, "class=\"cell\"") == 2 * 5 * 5);  // heads x T x T
  CHECK(count_of(r.out, "wrote " + att + "/attention_layer0.svg") == 1);

  r = run_tfm("heads --run " + t.run + " --batches 1 --out " + t.dir.file("heads"));
  REQUIRE(r.status == 0);
  CHECK(xml_problem(read_file(t.dir.file("heads") + "/heads.svg")).empty());

  r = run_tfm("bench attention --seq-lens 8,16 --d-model 8 --heads 2 --seconds 0.001 --out " +
              t.dir.file("b"));
  REQUIRE(r.status == 0);
  CHECK(xml_problem(read_file(t.dir.file("b") + "/bench_attention.svg")).empty());
  // Each file written is named: the report and its figure.
  CHECK_THAT(r.out, Catch::Contains("wrote " + t.dir.file("b") + "/bench_attention.json") &&
                        Catch::Contains("wrote " + t.dir.file("b") + "/bench_attention.svg"));

  // tfm plot: a report drawn again elsewhere, runs overlaid, time to quality.
  r = run_tfm("plot report " + att + "/attention.json --out " + t.dir.file("again"));
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(read_file(t.dir.file("again") + "/attention_layer0.svg") == layer0);  // the same bytes
  r = run_tfm("plot loss " + t.run + " " + t.run + " --out " + t.dir.file("two.svg") + " --log-y");
  REQUIRE(r.status == 0);
  const std::string two = read_file(t.dir.file("two.svg"));
  CHECK(xml_problem(two).empty());
  CHECK(count_of(two, "<polyline") == 4);
  // One run with --log-y and no --out: beside its metrics, under a name of its own (training redraws
  // loss.svg).
  std::filesystem::create_directories(t.dir.file("one"));
  std::filesystem::copy_file(t.run + "/metrics.jsonl", t.dir.file("one") + "/metrics.jsonl");
  r = run_tfm("plot loss " + t.dir.file("one") + " --log-y");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(xml_problem(read_file(t.dir.file("one") + "/loss-log.svg")).empty());
  CHECK_FALSE(std::filesystem::exists(t.dir.file("one") + "/loss.svg"));
  r = run_tfm("plot speedrun --out " + t.dir.file("speed.svg") + " --target 3 'tiny <1>=" + t.run + "'");
  REQUIRE(r.status == 0);
  const std::string speed = read_file(t.dir.file("speed.svg"));
  CHECK(xml_problem(speed).empty());
  CHECK(series_points(speed, "tiny &lt;1&gt;") == 3);  // evaluations at steps 10, 20, 30

  // Bad input: named, exit 2.
  r = run_tfm("plot report " + t.run + "/config.json");
  CHECK(r.status == 2);
  CHECK(count_of(r.out, "expected attention.json, heads.json") == 1);
  r = run_tfm("plot speedrun --out " + t.dir.file("x.svg") + " nolabel");
  CHECK(r.status == 2);
  CHECK(count_of(r.out, "expected LABEL=RUN") == 1);
  r = run_tfm("plot loss " + t.dir.file("missing"));
  CHECK(r.status == 2);
  r = run_tfm("plot loss " + t.run + " " + t.run);
  CHECK(r.status == 2);
  CHECK(count_of(r.out, "--out") >= 1);
}
