// Figures as SVG (analysis/figures.h, drawn by tfm itself: no Python) and `tfm plot`, which draws them
// again from files: runs' loss curves overlaid, time-to-quality curves, and the commands' reports.
#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/analysis/figures.h"
#include "tfm/analysis/runs.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm::cli {

namespace fs = std::filesystem;

void write_figure(const std::string& path, const std::string& svg, bool quiet) {
  write_file_atomically(path, svg);
  if (!quiet) fmt::print("wrote {}\n", path.c_str());
}

namespace {

constexpr uint64_t kMaxReportBytes = uint64_t{1} << 30;

struct PlotLossOptions {
  std::vector<std::string> runs;
  std::string out, title;
  bool log_y = false;
};

struct PlotSpeedrunOptions {
  std::vector<std::string> runs;  // LABEL=RUN
  std::string out, title;
  double target = -1;  // < 0: no target line
};

struct PlotReportOptions {
  std::string report, out;
};

// What a plot reads, for the output guard: each run directory, metrics file or report it was given.
std::vector<CommandInput> plotted(const std::vector<std::string>& paths) {
  std::vector<CommandInput> inputs;
  for (const std::string& p : paths) inputs.push_back({"the plotted", p});
  return inputs;
}

int run_plot_loss(const PlotLossOptions& o) {
  std::vector<LossCurves> runs;
  for (const std::string& r : o.runs) runs.push_back(read_loss_curves(r));
  // Legends apart: runs/tiny and other/tiny are both "tiny" by their own names.
  std::vector<std::string> names, dirs;
  for (const LossCurves& c : runs) names.push_back(c.name), dirs.push_back(c.dir);
  names = unique_names(std::move(names), dirs);
  for (size_t i = 0; i < runs.size(); ++i) runs[i].name = names[i];
  std::string out = o.out;
  if (out.empty()) {
    if (runs.size() > 1) throw ConfigError("--out: give the SVG to write when plotting several runs");
    // One run: beside its metrics. loss.svg is the figure training redraws at each evaluation; a
    // log-scale one gets a name of its own.
    const fs::path run =
        fs::is_directory(o.runs[0]) ? fs::path(o.runs[0]) : fs::path(o.runs[0]).parent_path();
    out = (run / (o.log_y ? kLogLossFigureFile : kLossFigureFile)).string();
  }
  check_output_path("--out", out, plotted(o.runs), /*may_draw_loss_figures=*/true);
  if (runs.size() == 1 && o.title.empty() && !o.log_y)
    write_figure(out, loss_figure(runs[0]));
  else
    write_figure(out, runs_loss_figure(runs, o.log_y, o.title.empty() ? "loss" : o.title));
  return kExitOk;
}

int run_plot_speedrun(const PlotSpeedrunOptions& o) {
  std::vector<TimedCurve> runs;
  std::vector<std::string> files;
  for (const std::string& spec : o.runs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError("plot speedrun: \"" + spec +
                        "\": expected LABEL=RUN (a run directory, its "
                        "metrics.jsonl or torch_lm.py --target-loss output)");
    runs.push_back(read_timed_curve(spec.substr(0, eq), spec.substr(eq + 1)));
    files.push_back(spec.substr(eq + 1));
  }
  check_output_path("--out", o.out, plotted(files));
  write_figure(
      o.out, speedrun_figure(runs, o.target >= 0 ? std::optional<double>(o.target) : std::nullopt, o.title));
  return kExitOk;
}

// The report's figures, its kind found from what it holds (analysis/figures.h), beside it or in --out.
int run_plot_report(const PlotReportOptions& o) {
  const fs::path path(o.report);
  const std::string dir = o.out.empty() ? path.parent_path().string() : o.out;
  const std::string at = dir.empty() ? "." : dir;
  const ReportFigures report =
      report_figures(o.report, read_file(o.report, kMaxReportBytes), fs::path(at).filename().string());
  if (report.skipped_lines > 0)
    fmt::print(stderr, "tfm: warning: {}: its last line is cut short (a sweep being written?), skipped\n",
               o.report.c_str());
  if (!o.out.empty()) make_output_dir(o.out);
  for (const auto& [file, svg] : report.figures) {
    check_output_path("--out", at + "/" + file, plotted({o.report}));
    write_figure(at + "/" + file, svg);
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> add_plot_commands(CLI::App& app) {
  auto* plot = app.add_subcommand("plot", "Draw figures (SVG) from runs and reports");
  plot->require_subcommand(1);
  plot->footer(
      "\nExamples:\n  tfm plot loss runs/tiny\n"
      "  tfm plot report runs/tiny/heads/heads.json   # after tfm heads --run runs/tiny\n");

  auto lo = std::make_shared<PlotLossOptions>();
  auto* loss = plot->add_subcommand("loss", "Loss curves of one run (RUN/loss.svg) or of several overlaid");
  loss->add_option("runs", lo->runs, "Run directories (or their metrics.jsonl)")
      ->required()
      ->type_name("RUN");
  loss->add_option("--out", lo->out,
                   "The SVG to write (default for one run: RUN/loss.svg, RUN/loss-log.svg with --log-y)")
      ->type_name("FILE");
  loss->add_option("--title", lo->title, "The figure's title")->type_name("TEXT");
  loss->add_flag("--log-y", lo->log_y, "Logarithmic loss axis");
  loss->footer(
      "\nExamples:\n  tfm plot loss runs/tiny\n  tfm plot loss runs/a runs/b --out ab.svg --log-y\n");

  auto so = std::make_shared<PlotSpeedrunOptions>();
  auto* speed = plot->add_subcommand("speedrun", "Validation loss against wall-clock minutes, runs overlaid");
  speed->add_option("runs", so->runs, "LABEL=RUN: a curve's legend and its run (or metrics file)")
      ->required()
      ->type_name("LABEL=RUN");
  speed->add_option("--out", so->out, "The SVG to write")->required()->type_name("FILE");
  speed->add_option("--target", so->target, "Draw this val loss as a dashed line")
      ->type_name("X")
      ->check(number_in(0, 1e9));
  speed->add_option("--title", so->title, "The figure's title")->type_name("TEXT");
  speed->footer(
      "\nExamples:\n  tfm plot speedrun --out curves.svg --target 1.6 tfm=runs/shakespeare_speedrun "
      "torch=torch.jsonl\n");

  auto ro = std::make_shared<PlotReportOptions>();
  auto* report = plot->add_subcommand(
      "report", "Draw a report again: attention.json, heads.json, bench_attention.json or sweep.jsonl");
  report->add_option("report", ro->report, "The report file")->required()->type_name("FILE");
  report->add_option("--out", ro->out, "Directory for the SVGs (default: the report's)")->type_name("DIR");
  report->footer(
      "\nThe report's kind is read from what it holds (a renamed copy is drawn too). A line of a JSON Lines\n"
      "report that is not JSON is named; a last line cut short (a sweep being written) is skipped.\n"
      "Examples:\n  tfm plot report runs/tiny/attention/attention.json --out figures   # after tfm attention "
      "--run runs/tiny --text ...\n");

  return {{loss, [lo] { return run_plot_loss(*lo); }},
          {speed, [so] { return run_plot_speedrun(*so); }},
          {report, [ro] { return run_plot_report(*ro); }}};
}

}  // namespace tfm::cli
