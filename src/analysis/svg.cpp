#include "tfm/analysis/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

namespace tfm::svg {

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // XML 1.0 allows tab, newline and carriage return among the control characters, nothing else.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
          out += "\xEF\xBF\xBD";
        else
          out += c;
    }
  }
  return out;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "0";
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string series_colour(size_t i) {
  // Okabe & Ito (2008), "Color Universal Design": ordered for contrast on white, yellow late.
  static const std::array<const char*, 8> kPalette = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                      "#E69F00", "#56B4E9", "#000000", "#F0E442"};
  return kPalette[i % kPalette.size()];
}

namespace {

struct Rgb {
  double r, g, b;
};

std::string hex(Rgb c) {
  const auto byte = [](double v) { return static_cast<int>(std::lround(std::clamp(v, 0.0, 255.0))); };
  return fmt::format("#{:02x}{:02x}{:02x}", byte(c.r), byte(c.g), byte(c.b));
}

// The colour at t in [0, 1] along evenly spaced stops.
template <size_t N>
std::string along(const std::array<Rgb, N>& stops, double t) {
  if (!std::isfinite(t)) t = 0;
  t = std::clamp(t, 0.0, 1.0) * static_cast<double>(N - 1);
  const size_t i = std::min(static_cast<size_t>(t), N - 2);
  const double f = t - static_cast<double>(i);
  const Rgb &a = stops[i], &b = stops[i + 1];
  return hex({a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b)});
}

}  // namespace

std::string viridis(double t) {
  static const std::array<Rgb, 9> kStops = {{{68, 1, 84},
                                             {71, 45, 123},
                                             {59, 82, 139},
                                             {44, 114, 142},
                                             {33, 145, 140},
                                             {40, 174, 128},
                                             {94, 201, 98},
                                             {173, 220, 48},
                                             {253, 231, 37}}};
  return along(kStops, t);
}

std::string diverging(double t) {
  // The ends and middle of matplotlib's "coolwarm" (Moreland 2009), with a light grey centre.
  static const std::array<Rgb, 5> kStops = {
      {{59, 76, 192}, {141, 176, 254}, {242, 242, 242}, {244, 154, 123}, {180, 4, 38}}};
  if (!std::isfinite(t)) t = 0;
  return along(kStops, (std::clamp(t, -1.0, 1.0) + 1.0) / 2.0);
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  const double rough = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(rough)));
  const double r = rough / mag;
  const double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
  std::vector<double> ticks;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k += 1) {
    const double v = k * step;
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  return ticks;
}

namespace {

// The power of ten of a tick step (1, 2 or 5 x 10^k): k.
int step_exponent(double step) {
  return static_cast<int>(std::floor(std::log10(step) + 1e-9));
}

}  // namespace

std::string tick_label(double v, double step) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  // Every digit down to the step's, so that ticks a step apart read differently (a cap of 6 decimals
  // gave 3.141817 three times over a range of 2e-6).
  const int decimals = step > 0 ? std::max(0, -step_exponent(step)) : 2;
  // A value that rounds to 0 at the step's digits (a colour bar's end at 0.000235 beside 0.05 and 0.11).
  if (step > 0 && a < 0.5 * std::pow(10.0, -decimals)) return "0";
  if (a >= 1e5 || a < 1e-3) {
    const int digits = step > 0 ? static_cast<int>(std::floor(std::log10(a))) - step_exponent(step) + 1 : 6;
    return fmt::format("{:.{}g}", v, std::max(6, digits));
  }
  return fmt::format("{:.{}f}", v, decimals);
}

TickLabels tick_labels(const std::vector<double>& ticks, double step) {
  TickLabels t;
  size_t longest = 0;
  for (double v : ticks) {
    t.labels.push_back(tick_label(v, step));
    longest = std::max(longest, t.labels.back().size());
  }
  constexpr size_t kLongest = 8;  // characters the margin beside a y axis holds at size 10
  if (ticks.size() < 2 || longest <= kLongest || !(step > 0)) return t;
  // The offset: the first tick rounded down to a power of ten above the ticks' span, so that each
  // label is (tick - offset) in units of the step's power of ten, a few digits.
  const double span = ticks.back() - ticks.front();
  const double above = std::pow(10.0, std::floor(std::log10(span) + 1e-9) + 1);
  const double offset = std::floor(ticks.front() / above) * above;
  if (offset == 0) return t;
  const int e = step_exponent(step);
  const double unit = std::pow(10.0, e);
  for (size_t i = 0; i < ticks.size(); ++i)
    t.labels[i] = fmt::format("{:.0f}", std::round((ticks[i] - offset) / unit) + 0.0);
  // The offset's digits down to its power of ten, without trailing zeros (+1, not +1.000000).
  std::string text =
      fmt::format("{:+.{}f}", offset, std::max(0, -static_cast<int>(std::floor(std::log10(above) + 1e-9))));
  if (text.find('.') != std::string::npos) {
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
  }
  const std::string times = "\xC3\x97";  // ×
  t.offset = (e == 0 ? std::string() : times + "1e" + std::to_string(e) + " ") + text;
  return t;
}

Document::Document(double width, double height) : width_(width), height_(height) {}

void Document::rect(double x, double y, double w, double h, const std::string& fill,
                    const std::string& extra) {
  body_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{}{}/>\n", num(x),
                       num(y), num(w), num(h), fill, extra.empty() ? "" : " ", extra);
}

void Document::line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
                    bool dashed) {
  body_ += fmt::format(
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"{}\"{}/>\n", num(x1),
      num(y1), num(x2), num(y2), stroke, num(width), dashed ? " stroke-dasharray=\"5,3\"" : "");
}

void Document::polyline(const std::vector<double>& xs, const std::vector<double>& ys,
                        const std::string& stroke, double width, bool dashed) {
  std::string points;
  for (size_t i = 0; i < xs.size() && i < ys.size(); ++i)
    points += (i ? " " : "") + num(xs[i]) + "," + num(ys[i]);
  body_ += fmt::format(
      "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" "
      "stroke-linejoin=\"round\"{}/>\n",
      points, stroke, num(width), dashed ? " stroke-dasharray=\"6,3\"" : "");
}

void Document::circle(double x, double y, double r, const std::string& fill) {
  body_ += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>\n", num(x), num(y), num(r), fill);
}

void Document::text(double x, double y, std::string_view s, double size, Anchor anchor,
                    const std::string& fill, double rotate, bool bold) {
  const char* a = anchor == Anchor::Start ? "start" : anchor == Anchor::Middle ? "middle" : "end";
  const std::string turn =
      rotate != 0 ? fmt::format(" transform=\"rotate({} {} {})\"", num(rotate), num(x), num(y)) : "";
  body_ +=
      fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"{}\" fill=\"{}\"{}{}>{}</text>\n",
                  num(x), num(y), num(size), a, fill, bold ? " font-weight=\"bold\"" : "", turn, escape(s));
}

std::string Document::str() const {
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n{2}</svg>\n",
      num(width_), num(height_), body_);
}

double text_width(std::string_view s, double size) {
  size_t chars = 0;
  for (const char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++chars;  // UTF-8 lead bytes: one per character
  return 0.6 * size * static_cast<double>(chars);
}

std::vector<size_t> downsample(size_t n, size_t max_points) {
  std::vector<size_t> kept;
  if (n == 0) return kept;
  if (n <= max_points || max_points < 2) {
    for (size_t i = 0; i < n; ++i) kept.push_back(i);
    return kept;
  }
  for (size_t k = 0; k < max_points; ++k) kept.push_back(k * (n - 1) / (max_points - 1));
  return kept;
}

namespace {

// One axis: data range (in log10 units on a log axis), ticks and their labels.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;  // in axis units
  std::vector<std::string> labels;
  std::string offset;  // what the labels count from (TickLabels), drawn at the axis' end
};

// Linear ticks of the values t and their labels (tick_labels), on a log axis at log10 of each.
void set_linear_ticks(Axis& a, const std::vector<double>& t) {
  const double step = t.size() > 1 ? t[1] - t[0] : 1;
  std::vector<double> kept;
  for (double v : t)
    if (!a.log || v > 0) kept.push_back(v);
  TickLabels labels = tick_labels(kept, step);
  for (double v : kept) a.ticks.push_back(a.log ? std::log10(v) : v);
  a.labels = std::move(labels.labels), a.offset = std::move(labels.offset);
}

Axis make_axis(double lo, double hi, bool log, double pad_fraction) {
  Axis a;
  a.log = log;
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (hi == lo) {
    const double pad = log ? 0.5 : (lo == 0 ? 1 : std::abs(lo) * 0.1);
    lo -= pad, hi += pad;
  }
  const double pad = (hi - lo) * pad_fraction;
  a.lo = lo - pad, a.hi = hi + pad;
  if (!log) {
    set_linear_ticks(a, nice_ticks(a.lo, a.hi));
    return a;
  }
  // Decades, and 2 and 5 within them when the range spans less than three decades.
  const bool fine = a.hi - a.lo < 3;
  for (double k = std::floor(a.lo); k <= std::ceil(a.hi); k += 1)
    for (double m : {1.0, 2.0, 5.0}) {
      if (m != 1 && !fine) continue;
      const double v = k + std::log10(m);
      if (v < a.lo || v > a.hi) continue;
      a.ticks.push_back(v);
      a.labels.push_back(fmt::format("{:g}", std::pow(10.0, v)));
    }
  if (a.ticks.size() < 2) {  // less than a factor of 2: linear ticks on the values
    a.ticks.clear(), a.labels.clear();
    set_linear_ticks(a, nice_ticks(std::pow(10.0, a.lo), std::pow(10.0, a.hi)));
  }
  return a;
}

}  // namespace

void draw_chart(Document& doc, double x, double y, double w, double h, const Chart& chart) {
  const auto to_axis = [](double v, bool log) {
    return log ? (v > 0 ? std::log10(v) : std::numeric_limits<double>::quiet_NaN()) : v;
  };
  // The series in axis units, non-finite points (and those <= 0 on a log axis) left out.
  std::vector<std::vector<double>> xs(chart.series.size()), ys(chart.series.size());
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const Series& se = chart.series[s];
    for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      const double ax = to_axis(se.x[i], chart.log_x), ay = to_axis(se.y[i], chart.log_y);
      if (!std::isfinite(ax) || !std::isfinite(ay)) continue;
      xs[s].push_back(ax), ys[s].push_back(ay);
      xlo = std::min(xlo, ax), xhi = std::max(xhi, ax), ylo = std::min(ylo, ay), yhi = std::max(yhi, ay);
    }
  }
  for (const HorizontalLine& l : chart.lines) {
    const double ay = to_axis(l.y, chart.log_y);
    if (std::isfinite(ay)) ylo = std::min(ylo, ay), yhi = std::max(yhi, ay);
  }
  for (const MissingPoint& m : chart.missing) {
    const double mx = to_axis(m.x, chart.log_x);
    if (std::isfinite(mx)) xlo = std::min(xlo, mx), xhi = std::max(xhi, mx);
  }
  Axis ax;
  if (!chart.x_categories.empty()) {
    ax.lo = -0.5, ax.hi = static_cast<double>(chart.x_categories.size()) - 0.5;
    for (size_t i = 0; i < chart.x_categories.size(); ++i)
      ax.ticks.push_back(static_cast<double>(i)), ax.labels.push_back(chart.x_categories[i]);
  } else {
    ax = make_axis(xlo, xhi, chart.log_x, chart.log_x ? 0.03 : 0.0);
  }
  const Axis ay = make_axis(ylo, yhi, chart.log_y, 0.05);
  // Room above the plot for the title, or for the y labels' offset.
  const double title_h = !chart.title.empty() ? 24 : ay.offset.empty() ? 6 : 16;
  const double left = chart.y_label.empty() ? 52 : 68, bottom = chart.x_label.empty() ? 24 : 42, right = 12;
  const double px0 = x + left, py0 = y + title_h, pw = std::max(10.0, w - left - right),
               ph = std::max(10.0, h - title_h - bottom);
  const auto px = [&](double v) { return px0 + (v - ax.lo) / (ax.hi - ax.lo) * pw; };
  const auto py = [&](double v) { return py0 + ph - (v - ay.lo) / (ay.hi - ay.lo) * ph; };

  if (!chart.title.empty()) doc.text(x + w / 2, y + 16, chart.title, 13, Document::Anchor::Middle);
  for (size_t i = 0; i < ay.ticks.size(); ++i) {
    const double ty = py(ay.ticks[i]);
    doc.line(px0, ty, px0 + pw, ty, "#e6e6e6");
    doc.text(px0 - 5, ty + 4, ay.labels[i], 10, Document::Anchor::End, "#444444");
  }
  // Category labels may be long: fewer of them when they would overlap.
  double widest = 0;
  for (const std::string& l : ax.labels) widest = std::max(widest, text_width(l, 10));
  const double room = ax.ticks.size() > 1 ? px(ax.ticks[1]) - px(ax.ticks[0]) : pw;
  const size_t every =
      room > 0 ? std::max<size_t>(1, static_cast<size_t>(std::ceil((widest + 6) / room))) : 1;
  for (size_t i = 0; i < ax.ticks.size(); ++i) {
    const double tx = px(ax.ticks[i]);
    doc.line(tx, py0, tx, py0 + ph, "#e6e6e6");
    if (i % every == 0) doc.text(tx, py0 + ph + 14, ax.labels[i], 10, Document::Anchor::Middle, "#444444");
  }
  // The labels' offset at the axis' far end, as matplotlib places it.
  if (!ay.offset.empty()) doc.text(px0, py0 - 4, ay.offset, 9, Document::Anchor::Start, "#444444");
  if (!ax.offset.empty()) doc.text(px0 + pw, py0 + ph + 26, ax.offset, 9, Document::Anchor::End, "#444444");
  doc.rect(px0, py0, pw, ph, "none", "stroke=\"#444444\" stroke-width=\"1\"");
  if (!chart.x_label.empty())
    doc.text(px0 + pw / 2, py0 + ph + 32, chart.x_label, 11, Document::Anchor::Middle);
  if (!chart.y_label.empty())
    doc.text(x + 14, py0 + ph / 2, chart.y_label, 11, Document::Anchor::Middle, "#222222", -90);
  for (const HorizontalLine& l : chart.lines) {
    const double v = to_axis(l.y, chart.log_y);
    if (!std::isfinite(v)) continue;
    doc.line(px0, py(v), px0 + pw, py(v), "#888888", 1, true);
    if (!l.label.empty()) doc.text(px0 + 4, py(v) - 4, l.label, 9, Document::Anchor::Start, "#666666");
  }
  bool any = false;
  std::vector<double> all_x, all_y;  // every point drawn, in pixels: the legend goes where fewest are
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const Series& se = chart.series[s];
    if (xs[s].empty()) continue;
    any = true;
    const std::string colour = se.colour.empty() ? series_colour(s) : se.colour;
    std::vector<double> sx, sy;
    for (size_t i = 0; i < xs[s].size(); ++i) sx.push_back(px(xs[s][i])), sy.push_back(py(ys[s][i]));
    all_x.insert(all_x.end(), sx.begin(), sx.end()), all_y.insert(all_y.end(), sy.begin(), sy.end());
    // Past the palette's 8 colours, the cycle repeats dashed: no two series look the same up to 16.
    doc.raw(fmt::format("<g class=\"series\" data-name=\"{}\">\n", escape(se.name)));
    doc.polyline(sx, sy, colour, se.width, se.dashed || s >= 8);
    if (se.markers || sx.size() == 1)
      for (size_t i = 0; i < sx.size(); ++i) doc.circle(sx[i], sy[i], 2.5, colour);
    doc.raw("</g>\n");
  }
  // Points with nothing to plot, on the upper edge; several at one x stacked downwards.
  std::vector<double> marked;
  for (const MissingPoint& m : chart.missing) {
    const double ax_x = to_axis(m.x, chart.log_x);
    if (!std::isfinite(ax_x) || ax_x < ax.lo || ax_x > ax.hi) continue;
    const double tx = px(ax_x);
    const double row = static_cast<double>(std::count(marked.begin(), marked.end(), ax_x));
    marked.push_back(ax_x);
    const std::string colour =
        chart.series.empty() || m.series >= chart.series.size() || chart.series[m.series].colour.empty()
            ? series_colour(m.series)
            : chart.series[m.series].colour;
    doc.raw(fmt::format("<g class=\"missing\" data-name=\"{}\">\n", escape(m.label)));
    doc.text(tx, py0 + 14 + 24 * row, "\xC3\x97", 14, Document::Anchor::Middle, colour, 0, true);
    doc.text(tx, py0 + 25 + 24 * row, m.label, 9, Document::Anchor::Middle, colour);
    doc.raw("</g>\n");
  }
  if (!any && chart.missing.empty())
    doc.text(px0 + pw / 2, py0 + ph / 2, "no data yet", 12, Document::Anchor::Middle, "#888888");
  if (!chart.legend) return;
  std::vector<size_t> named;
  double lw = 0;
  for (size_t s = 0; s < chart.series.size(); ++s)
    if (!chart.series[s].name.empty() && !xs[s].empty())
      named.push_back(s), lw = std::max(lw, text_width(chart.series[s].name, 10));
  if (named.empty()) return;
  const double box_w = lw + 34, box_h = 14.0 * static_cast<double>(named.size()) + 6;
  // The corner (upper right, upper left, lower right, lower left) whose box covers the fewest points,
  // counting the segments between them by their midpoints too.
  double lx = px0 + pw - box_w - 6, ly = py0 + 6;
  size_t fewest = SIZE_MAX;
  for (const auto& [corner_x, corner_y] : {std::pair<double, double>{px0 + pw - box_w - 6, py0 + 6},
                                           {px0 + 6, py0 + 6},
                                           {px0 + pw - box_w - 6, py0 + ph - box_h - 6},
                                           {px0 + 6, py0 + ph - box_h - 6}}) {
    const double cx = corner_x, cy = corner_y;  // a lambda cannot capture a structured binding in C++17
    size_t covered = 0;
    for (size_t i = 0; i < all_x.size(); ++i) {
      const auto inside = [&](double qx, double qy) {
        return qx >= cx && qx <= cx + box_w && qy >= cy && qy <= cy + box_h;
      };
      covered += inside(all_x[i], all_y[i]);
      if (i + 1 < all_x.size())
        covered += inside((all_x[i] + all_x[i + 1]) / 2, (all_y[i] + all_y[i + 1]) / 2);
    }
    if (covered < fewest) fewest = covered, lx = cx, ly = cy;
  }
  doc.rect(lx, ly, box_w, box_h, "#ffffff", "fill-opacity=\"0.85\" stroke=\"#cccccc\"");
  for (size_t k = 0; k < named.size(); ++k) {
    const Series& se = chart.series[named[k]];
    const double ry = ly + 12 + 14.0 * static_cast<double>(k);
    const std::string colour = se.colour.empty() ? series_colour(named[k]) : se.colour;
    doc.line(lx + 5, ry - 4, lx + 23, ry - 4, colour, 2, se.dashed || named[k] >= 8);
    doc.text(lx + 28, ry, se.name, 10);
  }
}

void draw_heatmap(Document& doc, double x, double y, double w, double h, const Heatmap& map) {
  const size_t rows = map.values.size(), cols = rows ? map.values[0].size() : 0;
  if (!map.title.empty()) doc.text(x + w / 2, y - 6, map.title, 11, Document::Anchor::Middle);
  if (rows == 0 || cols == 0) return;
  const double cw = w / static_cast<double>(cols), ch = h / static_cast<double>(rows);
  const double span = map.vmax > map.vmin ? map.vmax - map.vmin : 1.0;
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols && j < map.values[i].size(); ++j) {
      const double t = (map.values[i][j] - map.vmin) / span;  // 0..1
      // A value that is not defined (NaN: a masked head's similarity) is a grey cell, "-" in its label.
      const bool undefined = !std::isfinite(map.values[i][j]);
      const std::string fill = undefined ? "#d9d9d9" : map.signed_scale ? diverging(2 * t - 1) : viridis(t);
      // Cells overlap by a hair and are drawn with crisp edges: no background shows between them.
      doc.rect(x + cw * static_cast<double>(j), y + ch * static_cast<double>(i), cw + 0.05, ch + 0.05, fill,
               "class=\"" + escape(map.cell_class) + "\" shape-rendering=\"crispEdges\"");
      if (map.cell_format.empty()) continue;
      const bool light = map.signed_scale ? std::abs(2 * t - 1) < 0.6 : t > 0.6;
      std::string label = undefined ? "-" : fmt::format(fmt::runtime(map.cell_format), map.values[i][j]);
      // A small negative value rounds to "-0.0": its sign says nothing at the digits shown.
      if (label.find_first_not_of("-+0.") == std::string::npos && label.find('0') != std::string::npos)
        label.erase(0, label.find_first_not_of("-+"));
      doc.text(x + cw * (static_cast<double>(j) + 0.5), y + ch * (static_cast<double>(i) + 0.5) + 3.5, label,
               std::min(10.0, ch * 0.45), Document::Anchor::Middle,
               light || undefined ? "#111111" : "#ffffff");
    }
  doc.rect(x, y, w, h, "none", "stroke=\"#444444\" stroke-width=\"0.6\"");
  // Labels: as large as a cell allows; every other one when cells are too small to read one each.
  const auto labels = [&](const std::vector<std::string>& text, double cell, bool along_x) {
    if (text.empty()) return;
    const double size = std::min(map.label_size, std::max(5.0, cell * 0.9));
    const size_t every = cell * 0.9 >= 5.0 ? 1 : static_cast<size_t>(std::ceil(5.0 / (cell * 0.9)));
    for (size_t k = 0; k < text.size(); k += every) {
      const double c = cell * (static_cast<double>(k) + 0.5);
      if (along_x)
        doc.text(x + c + size * 0.35, y + h + 4, text[k], size, Document::Anchor::End, "#333333", -90);
      else
        doc.text(x - 3, y + c + size * 0.35, text[k], size, Document::Anchor::End, "#333333");
    }
  };
  labels(map.col_labels, cw, true);
  labels(map.row_labels, ch, false);
  double widest = 0;
  for (const std::string& l : map.row_labels) widest = std::max(widest, text_width(l, map.label_size));
  if (!map.x_label.empty()) {
    double tallest = 0;
    for (const std::string& l : map.col_labels) tallest = std::max(tallest, text_width(l, map.label_size));
    doc.text(x + w / 2, y + h + tallest + 16, map.x_label, 10, Document::Anchor::Middle);
  }
  if (!map.y_label.empty())
    doc.text(x - widest - 10, y + h / 2, map.y_label, 10, Document::Anchor::Middle, "#222222", -90);
}

void draw_colour_bar(Document& doc, double x, double y, double w, double h, double vmin, double vmax,
                     bool signed_scale, const std::string& caption) {
  constexpr int kSteps = 32;
  for (int i = 0; i < kSteps; ++i) {
    const double t = (i + 0.5) / kSteps;
    doc.rect(x + w * i / kSteps, y, w / kSteps + 0.05, h, signed_scale ? diverging(2 * t - 1) : viridis(t));
  }
  doc.rect(x, y, w, h, "none", "stroke=\"#444444\" stroke-width=\"0.6\"");
  const double step = (vmax - vmin) / 2;
  for (int k = 0; k <= 2; ++k)
    doc.text(x + w * k / 2, y + h + 11, tick_label(vmin + step * k, step / 2), 9, Document::Anchor::Middle);
  if (!caption.empty()) doc.text(x + w / 2, y + h + 24, caption, 10, Document::Anchor::Middle);
}

}  // namespace tfm::svg
