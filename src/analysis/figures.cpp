#include "tfm/analysis/figures.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "tfm/analysis/svg.h"
#include "tfm/analysis/sweep.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/training/run_dir.h"

namespace tfm {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The metrics file of a run directory, or the file itself.
std::string metrics_path(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? (fs::path(path) / "metrics.jsonl").string() : path;
}

// The run directory of a run directory or its metrics file.
fs::path run_dir_of(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  std::error_code ec;
  if (!fs::is_directory(path, ec)) p = p.parent_path();  // DIR/metrics.jsonl: the run is DIR
  return p.empty() ? fs::path(".") : p;
}

std::string run_name(const std::string& path) {
  const std::string name = run_dir_of(path).filename().string();
  return name.empty() || name == "." ? path : name;
}

// Each JSON object line of a JSON Lines file; lines that do not parse (one being written) are skipped.
std::vector<json> read_records(const std::string& path) {
  std::istringstream in(read_file(path, kMaxMetricsBytes));
  std::vector<json> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json r = json::parse(line, nullptr, false);
    if (r.is_object()) rows.push_back(std::move(r));
  }
  return rows;
}

double number_or_nan(const json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : std::nan("");
}

// The subset `keep` of (xs, ys).
void keep_points(std::vector<double>& xs, std::vector<double>& ys, const std::vector<size_t>& keep) {
  std::vector<double> kx, ky;
  for (size_t i : keep) kx.push_back(xs[i]), ky.push_back(ys[i]);
  xs = std::move(kx), ys = std::move(ky);
}

svg::Series make_series(std::string name, std::vector<double> x, std::vector<double> y, size_t max_points) {
  keep_points(x, y, svg::downsample(x.size(), max_points));
  svg::Series s;
  s.name = std::move(name), s.x = std::move(x), s.y = std::move(y);
  return s;
}

// What a token looks like on an axis: whitespace made visible.
std::string token_label(const std::string& t) {
  if (t == "\n") return "\\n";
  if (t == " ") return "\xE2\x90\xA3";  // U+2423 OPEN BOX
  if (t == "\t") return "\\t";
  return t;
}

std::vector<std::vector<double>> matrix(const json& m) {
  std::vector<std::vector<double>> out;
  for (const json& row : m) {
    out.emplace_back();
    for (const json& v : row) out.back().push_back(v.is_number() ? v.get<double>() : std::nan(""));
  }
  return out;
}

std::vector<std::string> index_labels(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(std::to_string(i));
  return out;
}

}  // namespace

LossCurves read_loss_curves(const std::string& path) {
  LossCurves c;
  c.name = run_name(path);
  c.dir = run_dir_of(path).string();
  for (const json& r : read_records(metrics_path(path))) {
    const double step = number_or_nan(r, "step");
    if (!std::isfinite(step)) continue;
    const double mean = number_or_nan(r, "train_loss_avg");
    const double train = std::isfinite(mean) ? mean : number_or_nan(r, "train_loss");
    const double lr = number_or_nan(r, "lr");
    const double val = number_or_nan(r, "val_loss"), seconds = number_or_nan(r, "training_s");
    if (std::isfinite(train)) c.step.push_back(step), c.train_loss.push_back(train);
    if (std::isfinite(lr)) c.lr_step.push_back(step), c.lr.push_back(lr);
    if (std::isfinite(val)) {
      c.val_step.push_back(step), c.val_loss.push_back(val);
      c.val_minutes.push_back(seconds / 60.0);
    }
  }
  return c;
}

std::string loss_figure(const LossCurves& run, size_t max_points) {
  svg::Document doc(820, 620);
  svg::Chart loss;
  loss.title = "tfm run " + run.name;
  loss.y_label = "cross-entropy loss (nats/token; train: mean of each log interval)";
  loss.series.push_back(make_series("train", run.step, run.train_loss, max_points));
  loss.series.back().width = 1.2;
  std::string val_name = "validation";
  if (!run.val_loss.empty()) {
    const size_t best = static_cast<size_t>(std::min_element(run.val_loss.begin(), run.val_loss.end()) -
                                            run.val_loss.begin());
    val_name += fmt::format(" (best {:.4f} at step {})", run.val_loss[best], run.val_step[best]);
  }
  loss.series.push_back(make_series(val_name, run.val_step, run.val_loss, max_points));
  loss.series.back().markers = true;
  svg::draw_chart(doc, 0, 0, 820, 440, loss);
  svg::Chart lr;
  lr.x_label = "step";
  lr.y_label = "learning rate";
  lr.legend = false;
  lr.series.push_back(make_series("lr", run.lr_step, run.lr, max_points));
  lr.series.back().colour = svg::series_colour(2);
  svg::draw_chart(doc, 0, 440, 820, 180, lr);
  return doc.str();
}

void write_loss_figure(const std::string& run_dir) {
  write_file_atomically((fs::path(run_dir) / kLossFigureFile).string(),
                        loss_figure(read_loss_curves(run_dir)));
}

std::string runs_loss_figure(const std::vector<LossCurves>& runs, bool log_y, const std::string& title,
                             size_t max_points) {
  svg::Document doc(860, 520);
  svg::Chart c;
  c.title = title;
  c.x_label = "step";
  c.y_label = "loss (nats/token): train thin (mean of each log interval), validation dots";
  c.log_y = log_y;
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string colour = svg::series_colour(i);
    svg::Series train = make_series(runs[i].name, runs[i].step, runs[i].train_loss, max_points);
    train.colour = colour, train.width = 1;
    svg::Series val = make_series("", runs[i].val_step, runs[i].val_loss, max_points);
    val.colour = colour, val.markers = true, val.width = 2;
    c.series.push_back(std::move(train));
    c.series.push_back(std::move(val));
  }
  svg::draw_chart(doc, 0, 0, 860, 520, c);
  return doc.str();
}

TimedCurve read_timed_curve(const std::string& label, const std::string& path) {
  TimedCurve c;
  c.label = label;
  const std::string file = metrics_path(path);
  for (const json& r : read_records(file)) {
    // tfm's metrics ("training_s"), torch_lm.py's evaluations ("seconds"); torch_lm.py's summary line
    // ("impl") repeats the last evaluation.
    const double val = number_or_nan(r, "val_loss");
    double seconds = number_or_nan(r, "training_s");
    if (!std::isfinite(seconds)) seconds = number_or_nan(r, "seconds");
    if (!std::isfinite(val) || !std::isfinite(seconds) || r.contains("impl")) continue;
    c.minutes.push_back(seconds / 60.0), c.val_loss.push_back(val);
  }
  if (c.minutes.empty())
    throw ConfigError(file +
                      ": no evaluations with a time (a tfm run's metrics.jsonl with val_loss and "
                      "training_s, or scripts/torch_lm.py --target-loss output)");
  return c;
}

std::string speedrun_figure(const std::vector<TimedCurve>& runs, std::optional<double> target,
                            const std::string& title) {
  svg::Document doc(760, 460);
  svg::Chart c;
  c.title = title.empty() ? "time to quality" : title;
  c.x_label = "wall-clock minutes from the first step (evaluations included)";
  c.y_label = "validation loss (nats/token)";
  for (const TimedCurve& r : runs) {
    svg::Series s;
    s.name = r.label, s.x = r.minutes, s.y = r.val_loss, s.markers = true;
    c.series.push_back(std::move(s));
  }
  if (target) c.lines.push_back({*target, fmt::format("target {:g}", *target)});
  svg::draw_chart(doc, 0, 0, 760, 460, c);
  return doc.str();
}

namespace {

// One figure of a causal or masked LM's layer: a heat map per head, the head-similarity matrix, scales.
std::string attention_layer_figure(const json& layer, const std::vector<std::string>& tokens) {
  const json& probs = layer.at("probabilities");
  const size_t heads = probs.size(), cols = std::min<size_t>(heads, 2), rows = (heads + cols - 1) / cols;
  constexpr double kPanel = 320, kGap = 64, kLeft = 56, kTop = 64;
  const double side_x = kLeft + static_cast<double>(cols) * (kPanel + kGap) + 10;
  const double width = side_x + 230,
               height = std::max(kTop + static_cast<double>(rows) * (kPanel + kGap + 20), 640.0);
  svg::Document doc(width, height);
  doc.text(width / 2, 26, fmt::format("layer {}: attention probabilities per head", layer.value("layer", 0)),
           16, svg::Document::Anchor::Middle, "#222222", 0, true);
  for (size_t h = 0; h < heads; ++h) {
    svg::Heatmap m;
    m.values = matrix(probs[h]);
    m.title = fmt::format("head {}", h);
    m.row_labels = m.col_labels = tokens;
    m.x_label = "key";
    m.y_label = "query";
    const double x = kLeft + static_cast<double>(h % cols) * (kPanel + kGap);
    const double y = kTop + static_cast<double>(h / cols) * (kPanel + kGap + 20);
    svg::draw_heatmap(doc, x, y, kPanel, kPanel, m);
  }
  svg::Heatmap rho;
  rho.values = matrix(layer.at("output_similarity"));
  rho.vmin = -1, rho.vmax = 1, rho.signed_scale = true;
  rho.cell_format = "{:.1f}";
  rho.cell_class = "similarity";
  rho.title =
      fmt::format("head similarity \xCF\x81 (mean {:.2f})", layer.value("mean_output_similarity", 0.0));
  rho.row_labels = rho.col_labels = index_labels(heads);
  svg::draw_heatmap(doc, side_x + 20, kTop, 180, 180, rho);
  svg::draw_colour_bar(doc, side_x + 20, kTop + 210, 180, 12, -1, 1, true, "\xCF\x81");
  svg::draw_colour_bar(doc, side_x + 20, kTop + 270, 180, 12, 0, 1, false, "attention probability");
  const char* notes[] = {"rows: queries, columns: keys",
                         "\xE2\x90\xA3 space, \\n newline",
                         "",
                         "\xCF\x81: cosine of the heads'",
                         "outputs after Wo:",
                         "1 redundant, 0 complementary"};
  double y = kTop + 330;
  for (const char* n : notes)
    doc.text(side_x + 20, y, n, 10, svg::Document::Anchor::Start, "#444444"), y += 14;
  return doc.str();
}

// One figure of a seq2seq layer: a row per kind of attention, a column per head.
std::string pair_layer_figure(const json& report, size_t layer) {
  std::vector<std::string> src, tgt, tgt_in = {"<bos>"};
  for (const json& t : report.at("source_tokens")) src.push_back(token_label(t.get<std::string>()));
  for (const json& t : report.at("target_tokens")) tgt.push_back(token_label(t.get<std::string>()));
  for (size_t i = 0; i + 1 < tgt.size(); ++i) tgt_in.push_back(tgt[i]);  // what the decoder reads at each row
  struct Kind {
    const char* key;
    const char* title;
    const std::vector<std::string>*rows, *cols;
  };
  const Kind kinds[] = {{"encoder", "encoder self-attention", &src, &src},
                        {"decoder_self", "decoder self-attention (causal)", &tgt, &tgt_in},
                        {"cross", "cross-attention: target x source", &tgt, &src}};
  std::vector<const Kind*> present;
  for (const Kind& k : kinds)
    if (report.contains(k.key) && layer < report[k.key].size()) present.push_back(&k);
  const size_t heads = present.empty() ? 0 : report[present[0]->key][layer].at("probabilities").size();
  const double panel = std::min(220.0, 900.0 / static_cast<double>(std::max<size_t>(heads, 1)));
  constexpr double kLeft = 150, kTop = 64, kGap = 70;
  const double width = kLeft + static_cast<double>(heads) * (panel + 24) + 40;
  const double height = kTop + static_cast<double>(present.size()) * (panel + kGap) + 70;
  svg::Document doc(width, height);
  std::string src_text, tgt_text;
  for (const std::string& s : src) src_text += (src_text.empty() ? "" : " ") + s;
  for (const std::string& t : tgt) tgt_text += (tgt_text.empty() ? "" : " ") + t;
  doc.text(width / 2, 26, fmt::format("layer {}: {}  =>  {}", layer, src_text, tgt_text), 14,
           svg::Document::Anchor::Middle, "#222222", 0, true);
  for (size_t r = 0; r < present.size(); ++r) {
    const json& entry = report[present[r]->key][layer];
    const double y = kTop + static_cast<double>(r) * (panel + kGap);
    doc.text(14, y + panel / 2, present[r]->title, 11, svg::Document::Anchor::Middle, "#222222", -90);
    doc.text(30, y + panel / 2,
             fmt::format("(similarity {:.2f})", entry.value("mean_pattern_similarity", 0.0)), 10,
             svg::Document::Anchor::Middle, "#444444", -90);
    for (size_t h = 0; h < heads; ++h) {
      svg::Heatmap m;
      m.values = matrix(entry.at("probabilities")[h]);
      m.title = r == 0 ? fmt::format("head {}", h) : "";
      m.row_labels = h == 0 ? *present[r]->rows : std::vector<std::string>{};
      m.col_labels = *present[r]->cols;
      svg::draw_heatmap(doc, kLeft + static_cast<double>(h) * (panel + 24), y, panel, panel, m);
    }
  }
  svg::draw_colour_bar(doc, kLeft, height - 46, 200, 10, 0, 1, false, "attention probability");
  return doc.str();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> attention_figures(const json& report) {
  std::vector<std::pair<std::string, std::string>> out;
  if (report.value("kind", "") == "seq2seq") {
    size_t layers = 0;
    for (const char* k : {"encoder", "decoder_self", "cross"})
      if (report.contains(k)) layers = std::max(layers, report[k].size());
    for (size_t l = 0; l < layers; ++l)
      out.emplace_back(fmt::format("attention_seq2seq_layer{}.svg", l), pair_layer_figure(report, l));
    return out;
  }
  std::vector<std::string> tokens;
  for (const json& t : report.at("tokens")) tokens.push_back(token_label(t.get<std::string>()));
  for (const json& layer : report.at("layers"))
    out.emplace_back(fmt::format("attention_layer{}.svg", layer.value("layer", 0)),
                     attention_layer_figure(layer, tokens));
  return out;
}

std::string heads_figure(const json& r) {
  std::vector<std::vector<double>> delta, score;
  // Before "layers" held the per-layer objects, heads.json kept them in "layer" (its count in "layers").
  const json& per_layer = r.contains("layers") && r.at("layers").is_array() ? r.at("layers") : r.at("layer");
  for (const json& l : per_layer) {
    delta.push_back(matrix(json::array({l.at("loss_change_when_masked")}))[0]);
    score.push_back(matrix(json::array({l.at("normalized_score")}))[0]);
  }
  const size_t layers = delta.size(), heads = layers ? delta[0].size() : 0;
  svg::Document doc(1240, 460);
  // The run directory's own name: a figure made for a document says nothing of where its run lived.
  const std::string run_name =
      std::filesystem::path(r.value("run", "") + "/").lexically_normal().parent_path().filename().string();
  doc.text(620, 24,
           fmt::format("{}: {} validation batches, val loss {:.4f} with every head", run_name,
                       r.value("batches", 0), r.value("val_loss", 0.0)),
           14, svg::Document::Anchor::Middle, "#222222", 0, true);
  const std::pair<const std::vector<std::vector<double>>*, const char*> maps[] = {
      {&delta, "val loss change, head masked alone"},
      {&score, "gradient score |dL/d\xCE\xBE| (per-layer l2 = 1)"}};
  for (size_t k = 0; k < 2; ++k) {
    svg::Heatmap m;
    m.values = *maps[k].first;
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& row : m.values)
      for (double v : row)
        if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    m.vmin = std::isfinite(lo) ? lo : 0, m.vmax = std::isfinite(hi) && hi > lo ? hi : m.vmin + 1;
    m.cell_format = k == 0 ? "{:+.3f}" : "{:.2f}";
    m.title = maps[k].second;
    m.row_labels = index_labels(layers), m.col_labels = index_labels(heads);
    m.x_label = "head", m.y_label = "layer";
    const double x = 60 + 400.0 * static_cast<double>(k);
    svg::draw_heatmap(doc, x, 70, 320, 300, m);
    svg::draw_colour_bar(doc, x, 420, 320, 10, m.vmin, m.vmax, false, "");
  }
  svg::Chart c;
  c.title = "pruning curve";
  c.x_label = fmt::format("heads masked, least important first (of {})", layers * heads);
  c.y_label = "val loss";
  svg::Series s;
  s.name = "val loss", s.markers = true;
  for (const json& p : r.at("pruning"))
    s.x.push_back(p.value("masked", 0.0)), s.y.push_back(p.value("val_loss", std::nan("")));
  c.series.push_back(std::move(s));
  c.lines.push_back({r.value("val_loss", 0.0) + 0.05, "+0.05"});
  svg::draw_chart(doc, 840, 40, 400, 410, c);
  return doc.str();
}

std::vector<std::string> sweep_keys(const json& point) {
  static const char* kMeasured[] = {"parameters",
                                    "train_flops_per_token",
                                    "kv_cache_bytes_per_token",
                                    "val_loss",
                                    "best_val_loss",
                                    "ms_per_step",
                                    "tokens_per_s",
                                    "step",
                                    "training_s",
                                    "stopped",
                                    "seconds_to_target",
                                    "failed_at_step",
                                    "error",
                                    "dir"};
  std::vector<std::string> keys;
  for (const auto& [k, v] : point.items())
    if (std::find(std::begin(kMeasured), std::end(kMeasured), k) == std::end(kMeasured)) keys.push_back(k);
  return keys;
}

std::string sweep_figure(const std::vector<json>& points, const std::string& key, const std::string& title) {
  std::vector<std::string> others;
  if (!points.empty())
    for (const std::string& k : sweep_keys(points[0]))
      if (k != key) others.push_back(k);
  std::vector<json> xs;  // the swept values, in order of first appearance
  for (const json& p : points)
    if (std::find(xs.begin(), xs.end(), p.value(key, json())) == xs.end()) xs.push_back(p.value(key, json()));
  // One line per combination of the other keys, in order of first appearance.
  std::vector<std::pair<std::string, std::vector<const json*>>> groups;
  for (const json& p : points) {
    std::string label;
    for (const std::string& k : others)
      label += (label.empty() ? "" : ", ") + k + "=" + sweep_value_label(p.value(k, json()));
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == label; });
    if (it == groups.end()) groups.emplace_back(label, std::vector<const json*>{}), it = groups.end() - 1;
    it->second.push_back(&p);
  }
  svg::Chart loss, speed;
  for (const json& x : xs) loss.x_categories.push_back(sweep_value_label(x));
  speed.x_categories = loss.x_categories;
  loss.x_label = speed.x_label = key;
  loss.y_label = "val loss";
  speed.y_label = "ms per training step";
  loss.legend = speed.legend = groups.size() > 1;
  size_t diverged = 0;
  for (const auto& [label, ps] : groups) {
    svg::Series l, s;
    l.name = s.name = label, l.markers = s.markers = true;
    for (const json* p : ps) {
      const double pos =
          static_cast<double>(std::find(xs.begin(), xs.end(), p->value(key, json())) - xs.begin());
      // A point that diverged has no val loss or speed: a cross at its place on both, saying when.
      if (p->contains("failed_at_step")) {
        const std::string note =
            fmt::format("diverged at step {}", p->value("failed_at_step", json()).dump());
        const size_t series = loss.series.size();
        loss.missing.push_back({pos, note, series}), speed.missing.push_back({pos, note, series});
        ++diverged;
        continue;
      }
      l.x.push_back(pos), s.x.push_back(pos);
      l.y.push_back(number_or_nan(*p, "val_loss")), s.y.push_back(number_or_nan(*p, "ms_per_step"));
    }
    loss.series.push_back(std::move(l)), speed.series.push_back(std::move(s));
  }
  svg::Document doc(1000, 420);
  doc.text(500, 20,
           fmt::format("{}: {} points{}", title, points.size(),
                       diverged ? fmt::format(", {} diverged", diverged) : std::string()),
           13, svg::Document::Anchor::Middle);
  svg::draw_chart(doc, 0, 30, 500, 390, loss);
  svg::draw_chart(doc, 500, 30, 500, 390, speed);
  return doc.str();
}

std::string bench_attention_figure(const json& r) {
  svg::Chart time, memory;
  svg::Series ms, formula, peak, matrix_mib;
  std::vector<double> flops;
  for (const json& x : r.at("lengths")) {
    const double n = x.value("n", 0.0);
    ms.x.push_back(n), ms.y.push_back(x.value("ms", 0.0));
    formula.x.push_back(n), flops.push_back(x.value("flops", 0.0));
    peak.x.push_back(n), peak.y.push_back(x.value("peak_bytes", 0.0) / (1 << 20));
    matrix_mib.x.push_back(n), matrix_mib.y.push_back(x.value("attention_matrix_bytes", 0.0) / (1 << 20));
  }
  // The formula's FLOPs scaled to meet the measurement at the largest n.
  const double scale = !flops.empty() && flops.back() > 0 ? ms.y.back() / flops.back() : 0;
  for (double f : flops) formula.y.push_back(f * scale);
  ms.name = fmt::format("measured (fit n^{:.2f})", r.value("time_exponent", 0.0)), ms.markers = true;
  formula.name = fmt::format(
      "formula O(n\xC2\xB2"
      "d + nd\xC2\xB2){} (n^{:.2f})",
      r.value("causal", false) ? ", causal: n(n+1)/2 pairs" : "", r.value("flops_exponent", 0.0));
  formula.dashed = true;
  peak.name = fmt::format("tfm, fused (fit n^{:.2f})", r.value("memory_exponent", 0.0)), peak.markers = true;
  matrix_mib.name = "B\xC2\xB7H\xC2\xB7n\xC2\xB2 attention matrices (n^2)", matrix_mib.dashed = true;
  time.title = "time", memory.title = "memory of the step";
  time.x_label = memory.x_label = "sequence length n";
  time.y_label = "ms per forward + backward";
  memory.y_label = "MiB";
  time.log_x = time.log_y = memory.log_x = memory.log_y = true;
  time.series = {ms, formula};
  memory.series = {peak, matrix_mib};
  svg::Document doc(1000, 440);
  doc.text(500, 20,
           fmt::format("one attention layer: d_model {}, {} heads, batch {}, {}, {} thread(s)",
                       r.value("d_model", 0), r.value("heads", 0), r.value("batch", 0),
                       r.value("causal", false) ? "causal" : "bidirectional", r.value("threads", 0)),
           13, svg::Document::Anchor::Middle);
  svg::draw_chart(doc, 0, 30, 500, 410, time);
  svg::draw_chart(doc, 500, 30, 500, 410, memory);
  return doc.str();
}

namespace {

bool is_sweep_point(const json& j) {
  return j.is_object() && j.contains("dir") && j.contains("step") && j.contains("stopped");
}

// The kind of report a JSON document is, from the keys its command writes; "" when none.
std::string report_kind(const json& j) {
  if (!j.is_object()) return "";
  if ((j.contains("tokens") && j.contains("layers")) ||
      (j.value("kind", "") == "seq2seq" && j.contains("cross")))
    return "attention";
  if (j.contains("pruning") && (j.contains("layers") || j.contains("layer"))) return "heads";
  if (j.contains("lengths") && j.contains("time_exponent")) return "bench attention";
  if (is_sweep_point(j)) return "sweep";
  return "";
}

// The kind each command's report file is named for.
std::string report_kind_of_name(const std::string& name) {
  if (name == "attention.json") return "attention";
  if (name == "heads.json") return "heads";
  if (name == "bench_attention.json") return "bench attention";
  if (name == "sweep.jsonl") return "sweep";
  return "";
}

}  // namespace

ReportFigures report_figures(const std::string& path, const std::string& text,
                             const std::string& sweep_title) {
  ReportFigures r;
  std::vector<json> lines;  // a JSON Lines file's objects (a sweep's points)
  json document = json::parse(text, nullptr, false);
  if (!document.is_discarded()) {
    r.kind = report_kind(document);
    if (r.kind == "sweep" || (r.kind.empty() && document.is_object() && !document.empty()))
      lines.push_back(document);  // a sweep of one point is one line
  } else {
    // JSON Lines, when the first line is JSON by itself; otherwise one document that does not parse,
    // named at its line and column.
    std::istringstream in(text);
    std::string line;
    size_t number = 0;
    bool first = true;
    while (std::getline(in, line)) {
      ++number;
      if (line.empty()) continue;
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded()) {
        if (first) parse_json(text, path);  // throws ConfigError "PATH:LINE:COLUMN: malformed JSON: ..."
        const bool cut = in.eof() && !text.empty() && text.back() != '\n';
        if (!cut)
          throw ConfigError(path + ":" + std::to_string(number) +
                            ": not JSON (a JSON Lines report holds one JSON object a line)");
        ++r.skipped_lines;  // the last line of a file being written
        continue;
      }
      if (first) r.kind = report_kind(j) == "sweep" ? "sweep" : "";
      if (r.kind == "sweep" && !is_sweep_point(j))
        throw ConfigError(path + ":" + std::to_string(number) +
                          ": not a sweep point (dir, step and stopped)");
      lines.push_back(std::move(j));
      first = false;
    }
  }
  if (r.kind.empty()) r.kind = report_kind_of_name(fs::path(path).filename().string());
  if (r.kind.empty())
    throw ConfigError(
        "plot report: " + path +
        ": expected attention.json, heads.json, bench_attention.json or sweep.jsonl (the reports of tfm "
        "attention, heads, bench attention and sweep, known by what they hold whatever their names)");
  try {
    if (r.kind == "attention") {
      r.figures = attention_figures(document);
    } else if (r.kind == "heads") {
      r.figures.emplace_back("heads.svg", heads_figure(document));
    } else if (r.kind == "bench attention") {
      r.figures.emplace_back("bench_attention.svg", bench_attention_figure(document));
    } else {
      if (lines.empty() || sweep_keys(lines[0]).empty()) throw ConfigError(path + ": no sweep points");
      r.figures.emplace_back("sweep.svg", sweep_figure(lines, sweep_keys(lines[0])[0], sweep_title));
    }
  } catch (const json::exception& e) {  // named by its file's name, its content lacking a key
    throw ConfigError(path + ": not a whole " + r.kind + " report (" + e.what() + ")");
  }
  return r;
}

}  // namespace tfm
