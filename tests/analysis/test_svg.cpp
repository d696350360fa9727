// The SVG library and the figures drawn with it: well-formed XML, escaped text, one point per logged
// step, one heat-map cell per attention probability, the same bytes for the same data.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli_run.h"
#include "tfm/analysis/figures.h"
#include "tfm/analysis/svg.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "xml_check.h"

using nlohmann::json;
using tfm_test::count_of;
using tfm_test::series_points;
using tfm_test::xml_problem;

namespace {

// n logged steps of a made-up run: train loss every step, val every `every` steps.
tfm::LossCurves svg_test_curves(int n, int every) {
  tfm::LossCurves c;
  c.name = "run <&\"x\">";
  for (int s = 1; s <= n; ++s) {
    c.step.push_back(s), c.train_loss.push_back(4.0 / std::sqrt(s));
    c.lr_step.push_back(s), c.lr.push_back(1e-3 * s / n);
    if (s % every == 0)
      c.val_step.push_back(s), c.val_loss.push_back(4.2 / std::sqrt(s)), c.val_minutes.push_back(s);
  }
  return c;
}

// A `tfm attention` report of `layers` layers, `heads` heads and these tokens.
json svg_test_attention_report(int layers, int heads, const std::vector<std::string>& tokens) {
  const size_t t = tokens.size();
  json report = {{"tokens", tokens}, {"layers", json::array()}};
  for (int l = 0; l < layers; ++l) {
    json probs = json::array(), rho = json::array();
    for (int h = 0; h < heads; ++h) {
      json m = json::array();
      for (size_t i = 0; i < t; ++i) {
        json row = json::array();
        for (size_t j = 0; j < t; ++j) row.push_back(j <= i ? 1.0 / static_cast<double>(i + 1) : 0.0);
        m.push_back(row);
      }
      probs.push_back(m);
      json r = json::array();
      for (int g = 0; g < heads; ++g) r.push_back(g == h ? 1.0 : 0.25);
      rho.push_back(r);
    }
    report["layers"].push_back({{"layer", l},
                                {"probabilities", probs},
                                {"output_similarity", rho},
                                {"mean_output_similarity", 0.25}});
  }
  return report;
}

}  // namespace

TEST_CASE("svg: text is escaped, numbers are short and locale-free", "[svg]") {
  CHECK(tfm::svg::escape("a<b&c\"d'e>") == "a&lt;b&amp;c&quot;d&apos;e&gt;");
  CHECK(tfm::svg::escape(std::string("x\x01y")) == "x\xEF\xBF\xBDy");  // not allowed in XML 1.0
  CHECK(tfm::svg::escape("\xE2\x90\xA3 \\n") == "\xE2\x90\xA3 \\n");   // UTF-8 passes through
  CHECK(tfm::svg::num(12.5) == "12.5");
  CHECK(tfm::svg::num(3.0) == "3");
  CHECK(tfm::svg::num(-0.001) == "0");
  CHECK(tfm::svg::num(1.234567) == "1.23");
}

TEST_CASE("svg: the XML check itself catches what it must", "[svg]") {
  CHECK(xml_problem("<svg><g a=\"1\"/></svg>").empty());
  CHECK(xml_problem("<?xml version=\"1.0\"?>\n<svg>&amp;&#x41;</svg>\n").empty());
  CHECK_FALSE(xml_problem("<svg><g></svg>").empty());          // not nested
  CHECK_FALSE(xml_problem("<svg>a & b</svg>").empty());        // raw &
  CHECK_FALSE(xml_problem("<svg a=\"<\"/>").empty());          // raw < in a value
  CHECK_FALSE(xml_problem("<svg a=\"1\" a=\"2\"/>").empty());  // repeated attribute
  CHECK_FALSE(xml_problem("<svg/><svg/>").empty());            // two roots
  CHECK_FALSE(xml_problem("<svg>").empty());                   // never closed
}

TEST_CASE("svg: ticks are round numbers covering the range", "[svg]") {
  CHECK(tfm::svg::nice_ticks(0, 10, 5) == std::vector<double>{0, 2, 4, 6, 8, 10});
  const std::vector<double> t = tfm::svg::nice_ticks(1.23, 4.56, 5);
  REQUIRE(t.size() >= 3);
  CHECK(t.front() >= 1.23);
  CHECK(t.back() <= 4.56);
  CHECK(t[1] - t[0] == Approx(0.5));
  CHECK(tfm::svg::tick_label(0.25, 0.05) == "0.25");
  CHECK(tfm::svg::tick_label(2000, 500) == "2000");
  // A colour bar's end that rounds to 0 at its step's digits reads 0, not 0.000235343.
  CHECK(tfm::svg::tick_label(0.000235343, 0.0275) == "0");
  CHECK(tfm::svg::tick_label(0.0002, 0.0001) == "0.0002");
  CHECK(tfm::svg::nice_ticks(3, 3).size() >= 2);  // a flat range still gets an axis
}

// The y axis' tick labels of a drawn chart: its text anchored at their end in the tick colour.
std::vector<std::string> y_tick_labels(const std::string& svg) {
  std::vector<std::string> labels;
  const std::string mark = "text-anchor=\"end\" fill=\"#444444\">";
  for (size_t at = svg.find(mark); at != std::string::npos; at = svg.find(mark, at + 1)) {
    const size_t from = at + mark.size();
    labels.push_back(svg.substr(from, svg.find('<', from) - from));
  }
  return labels;
}

TEST_CASE("svg: ticks a step apart never share a label, however narrow the range", "[svg]") {
  // Losses that differ in the 7th digit: a cap of 6 decimals labelled three ticks 3.141817.
  for (const auto& [lo, hi] : {std::pair<double, double>{3.1418160, 3.1418180},
                               {-3.1418180, -3.1418160},
                               {1000000.0, 1000002.0},
                               {1.0000001e-4, 1.0000003e-4},
                               {0.5, 0.5000004}}) {
    const std::vector<double> t = tfm::svg::nice_ticks(lo, hi);
    REQUIRE(t.size() >= 3);
    const double step = t[1] - t[0];
    std::set<std::string> plain;
    for (double v : t) plain.insert(tfm::svg::tick_label(v, step));
    INFO(lo << " .. " << hi);
    CHECK(plain.size() == t.size());
    // Long labels count from an offset instead, short and still distinct.
    const tfm::svg::TickLabels l = tfm::svg::tick_labels(t, step);
    CHECK(std::set<std::string>(l.labels.begin(), l.labels.end()).size() == t.size());
    for (const std::string& label : l.labels) CHECK(label.size() <= 8);
  }
  const tfm::svg::TickLabels l = tfm::svg::tick_labels({3.1418165, 3.1418170, 3.1418175}, 5e-7);
  CHECK(l.labels == std::vector<std::string>{"65", "70", "75"});
  CHECK(l.offset ==
        "\xC3\x97"
        "1e-7 +3.14181");
  // Labels that fit keep their plain form and no offset.
  CHECK(tfm::svg::tick_labels({1.9, 2.0, 2.1}, 0.1).labels == std::vector<std::string>{"1.9", "2.0", "2.1"});
  CHECK(tfm::svg::tick_labels({1.9, 2.0, 2.1}, 0.1).offset.empty());

  // A chart of such values: distinct y labels and the offset written above the axis.
  tfm::svg::Chart c;
  tfm::svg::Series val;
  val.x = {0, 1, 2}, val.y = {3.1418162, 3.1418171, 3.1418178};
  c.series.push_back(val);
  tfm::svg::Document doc(500, 400);
  tfm::svg::draw_chart(doc, 0, 0, 500, 400, c);
  const std::string svg = doc.str();
  INFO(svg);
  CHECK(xml_problem(svg).empty());
  const std::vector<std::string> y = y_tick_labels(svg);
  REQUIRE(y.size() >= 3);
  CHECK(std::set<std::string>(y.begin(), y.end()).size() == y.size());
  CHECK_THAT(svg, Catch::Contains("1e-7 +3.14181</text>"));
}

TEST_CASE("svg: downsampling keeps the ends and at most the limit", "[svg]") {
  const std::vector<size_t> all = tfm::svg::downsample(30, 2000);
  CHECK(all.size() == 30);
  const std::vector<size_t> few = tfm::svg::downsample(100000, 2000);
  CHECK(few.size() == 2000);
  CHECK(few.front() == 0);
  CHECK(few.back() == 99999);
  CHECK(std::is_sorted(few.begin(), few.end()));
}

TEST_CASE("svg: a loss figure holds one point per logged step, escapes its labels, same bytes each time",
          "[svg]") {
  const tfm::LossCurves c = svg_test_curves(30, 10);
  const std::string svg = tfm::loss_figure(c);
  INFO(svg.substr(0, 2000));
  CHECK(xml_problem(svg).empty());
  CHECK(series_points(svg, "train") == 30);
  CHECK(series_points(svg, "lr") == 30);
  CHECK(count_of(svg, "best 0.7668 at step 30") == 2);  // 4.2 / sqrt(30): the legend and the series name
  CHECK(count_of(svg, "run &lt;&amp;&quot;x&quot;&gt;") == 1);
  CHECK(svg == tfm::loss_figure(c));
  // A long run is downsampled: at most max_points per curve.
  const std::string big = tfm::loss_figure(svg_test_curves(50000, 1000), 2000);
  CHECK(series_points(big, "train") == 2000);
  CHECK(xml_problem(big).empty());
  // Several runs overlaid, with a log axis.
  const std::string runs = tfm::runs_loss_figure({c, svg_test_curves(20, 5)}, true, "a & b");
  CHECK(xml_problem(runs).empty());
  CHECK(count_of(runs, "a &amp; b") == 1);
  CHECK(count_of(runs, "<polyline") == 4);  // train and val of each run
}

TEST_CASE("svg: attention maps have one cell per head x query x key, labels escaped", "[svg]") {
  const std::vector<std::string> tokens = {"<", "&", "\"", " ", "\n", "a"};
  const json report = svg_test_attention_report(2, 3, tokens);
  const auto figures = tfm::attention_figures(report);
  REQUIRE(figures.size() == 2);
  CHECK(figures[0].first == "attention_layer0.svg");
  CHECK(figures[1].first == "attention_layer1.svg");
  for (const auto& [name, svg] : figures) {
    INFO(name);
    CHECK(xml_problem(svg).empty());
    CHECK(count_of(svg, "class=\"cell\"") == 3 * 6 * 6);    // heads x T x T
    CHECK(count_of(svg, "class=\"similarity\"") == 3 * 3);  // the head-similarity matrix
    CHECK(count_of(svg, ">&lt;</text>") >= 2);              // the token "<" on both axes of a panel
    CHECK(count_of(svg, ">&amp;</text>") >= 2);
    CHECK(count_of(svg, ">&quot;</text>") >= 2);
    CHECK(count_of(svg, ">\\n</text>") >= 2);  // a newline shown as \n
  }
}

TEST_CASE("svg: a seq2seq report gives one figure per layer with each kind of attention", "[svg]") {
  const json m2 = {{0.5, 0.5}, {1.0, 0.0}};
  const json kind = json::array({{{"probabilities", {m2, m2}}, {"mean_pattern_similarity", 0.5}}});
  const json report = {{"kind", "seq2seq"}, {"source_tokens", {"a", "<b>"}}, {"target_tokens", {"x", "</s>"}},
                       {"encoder", kind},   {"decoder_self", kind},          {"cross", kind}};
  const auto figures = tfm::attention_figures(report);
  REQUIRE(figures.size() == 1);
  CHECK(figures[0].first == "attention_seq2seq_layer0.svg");
  CHECK(xml_problem(figures[0].second).empty());
  CHECK(count_of(figures[0].second, "class=\"cell\"") == 3 * 2 * 2 * 2);  // kinds x heads x 2 x 2
}

TEST_CASE("svg: heads, sweep, bench and speedrun figures are well-formed and hold their data", "[svg]") {
  const json heads = {
      {"run", "runs/<x>"},
      {"batches", 2},
      {"val_loss", 2.5},
      {"n_layers", 2},
      {"layers",
       {{{"layer", 0}, {"loss_change_when_masked", {0.1, -0.02}}, {"normalized_score", {0.9, 0.4}}},
        {{"layer", 1}, {"loss_change_when_masked", {0.0, 0.3}}, {"normalized_score", {0.2, 0.98}}}}},
      {"pruning", {{{"masked", 0}, {"val_loss", 2.5}}, {{"masked", 2}, {"val_loss", 2.7}}}}};
  const std::string h = tfm::heads_figure(heads);
  CHECK(xml_problem(h).empty());
  CHECK(tfm::report_figures("x.json", heads.dump(), "").kind == "heads");
  // A heads.json written before "layers" held the per-layer objects ("layer"; "layers" their count).
  json old_heads = heads;
  old_heads["layer"] = old_heads["layers"];
  old_heads["layers"] = 2;
  old_heads.erase("n_layers");
  CHECK(tfm::report_figures("x.json", old_heads.dump(), "").kind == "heads");
  CHECK(tfm::heads_figure(old_heads) == h);
  CHECK(count_of(h, "class=\"cell\"") == 2 * 2 * 2);           // two layer x head maps
  CHECK(count_of(h, "&lt;x&gt;: 2 validation batches") == 1);  // titled by the run directory's own name
  CHECK(count_of(h, "runs/") == 0);
  CHECK(series_points(h, "val loss") == 2);

  std::vector<json> points;
  for (int heads_n : {1, 2, 4})
    for (int layers : {1, 2})
      points.push_back({{"model.n_heads", heads_n},
                        {"model.n_layers", layers},
                        {"val_loss", 2.0 + 0.1 * heads_n},
                        {"ms_per_step", 3.0 * layers},
                        {"parameters", 100},
                        {"step", 10}});
  CHECK(tfm::sweep_keys(points[0]) == std::vector<std::string>{"model.n_heads", "model.n_layers"});
  const std::string s = tfm::sweep_figure(points, "model.n_heads", "sweep & co");
  CHECK(xml_problem(s).empty());
  CHECK(series_points(s, "model.n_layers=1") == 3);
  CHECK(series_points(s, "model.n_layers=2") == 3);

  json bench = {{"d_model", 64},
                {"heads", 4},
                {"batch", 2},
                {"causal", true},
                {"threads", 1},
                {"time_exponent", 1.9},
                {"flops_exponent", 1.8},
                {"memory_exponent", 1.1}};
  for (int n : {64, 128, 256})
    bench["lengths"].push_back({{"n", n},
                                {"ms", 0.001 * n * n},
                                {"flops", 1e3 * n * n},
                                {"peak_bytes", 1e4 * n},
                                {"attention_matrix_bytes", 32.0 * n * n}});
  const std::string b = tfm::bench_attention_figure(bench);
  CHECK(xml_problem(b).empty());
  CHECK(count_of(b, "<polyline") == 4);
  CHECK(series_points(b, "measured (fit n^1.90)") == 3);

  tfm::TimedCurve a{"tfm <fast>", {0.5, 1, 2}, {2.5, 2.0, 1.7}}, t{"torch", {1, 3}, {2.4, 1.9}};
  const std::string r = tfm::speedrun_figure({a, t}, 1.8, "time & quality");
  CHECK(xml_problem(r).empty());
  CHECK(series_points(r, "tfm &lt;fast&gt;") == 3);
  CHECK(count_of(r, "target 1.8") == 1);
}

TEST_CASE("svg: metrics.jsonl is read with a truncated last line, loss.svg written atomically", "[svg]") {
  tfm_test::TempDir dir("svg_metrics");
  std::string metrics;
  for (int s = 1; s <= 12; ++s) {
    json rec = {{"step", s}, {"train_loss", 3.0 - 0.1 * s}, {"lr", 1e-3}, {"training_s", 0.5 * s}};
    if (s == 5) rec["train_loss_avg"] = 9.5;
    metrics += rec.dump() + "\n";
  }
  metrics += json({{"step", 12}, {"val_loss", 2.0}, {"training_s", 6.0}}).dump() + "\n";
  metrics += "{\"step\": 13, \"train_lo";  // a run being written
  tfm::write_file_atomically(dir.file("metrics.jsonl"), metrics);
  const tfm::LossCurves c = tfm::read_loss_curves(dir.path);
  CHECK(c.step.size() == 12);
  // The mean over the log interval, as the log line shows it, where a record has it.
  CHECK(c.train_loss[0] == 3.0 - 0.1);
  CHECK(c.train_loss[4] == 9.5);
  CHECK(c.val_loss == std::vector<double>{2.0});
  CHECK(c.val_minutes == std::vector<double>{0.1});
  tfm::write_loss_figure(dir.path);
  const std::string svg = tfm_test::read_file(dir.file("loss.svg"));
  CHECK(xml_problem(svg).empty());
  CHECK(series_points(svg, "train") == 12);
  CHECK(tfm_test::temporaries_beside(dir.file("loss.svg")).empty());
  CHECK(tfm::read_timed_curve("x", dir.path).minutes == std::vector<double>{0.1});
  CHECK_THROWS_AS(tfm::read_loss_curves(dir.file("missing")), tfm::IoError);
}

TEST_CASE("svg: a heat map cell that rounds to zero is labelled 0.0, never -0.0", "[svg]") {
  tfm::svg::Heatmap map;
  map.values = {{1.0, -0.01}, {-0.27, 0.5}};  // only -0.01 rounds to zero
  map.vmin = -1, map.signed_scale = true;
  map.cell_format = "{:.1f}";
  tfm::svg::Document doc(200, 200);
  tfm::svg::draw_heatmap(doc, 10, 10, 100, 100, map);
  const std::string svg = doc.str();
  CHECK(svg.find(">-0.0<") == std::string::npos);
  CHECK(svg.find(">0.0<") != std::string::npos);
  CHECK(svg.find(">-0.3<") != std::string::npos);  // a value below zero keeps its sign
}
