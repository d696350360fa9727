// SVG figures drawn as text: line charts (several series, legend, nice ticks, log axes), heat maps with
// colour bars. No dependency and no randomness: the same data gives the same bytes (tests compare).
// Colours: the Okabe-Ito palette for series (readable with every common colour-vision deficiency),
// viridis for heat maps of one sign, a blue-white-red scale for signed ones (similarities in [-1, 1]).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tfm::svg {

// `s` with & < > " ' replaced by entities: safe as element text and inside a quoted attribute. Control
// characters (not allowed in XML 1.0) become U+FFFD.
std::string escape(std::string_view s);
// A coordinate or value as short, locale-independent text ("12.5", "-3", "0.001").
std::string num(double v);

// The i-th series colour (Okabe-Ito, cycled; black last). "#rrggbb".
std::string series_colour(size_t i);
// Viridis at t in [0, 1] (clamped), interpolated between 9 stops of the matplotlib map.
std::string viridis(double t);
// A diverging blue-white-red scale at t in [-1, 1] (clamped).
std::string diverging(double t);

// Axis ticks: round numbers (1, 2, 5 x 10^k) covering [lo, hi], about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// A tick's label at the precision `step` between ticks needs ("0.25", "1e+04" for wide ranges): every
// digit down to the step's, so ticks a step apart never read the same.
std::string tick_label(double v, double step);
// The labels of linear ticks `step` apart (nice_ticks). Those of ticks far from 0 over a narrow range
// would be long (3.1418165): then, as matplotlib's ScalarFormatter, each label counts from a round
// offset in units of the step's power of ten, and `offset` says so ("×1e-7 +3.14181": the label 65
// is 3.14181 + 65e-7); "" when the plain labels are short enough.
struct TickLabels {
  std::vector<std::string> labels;
  std::string offset;
};
TickLabels tick_labels(const std::vector<double>& ticks, double step);

// An SVG document being drawn: elements append in order (later ones on top).
class Document {
 public:
  Document(double width, double height);
  void rect(double x, double y, double w, double h, const std::string& fill, const std::string& extra = "");
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
            bool dashed = false);
  // One <polyline> with one "x,y" point per entry of xs/ys (same length).
  void polyline(const std::vector<double>& xs, const std::vector<double>& ys, const std::string& stroke,
                double width = 1.5, bool dashed = false);
  void circle(double x, double y, double r, const std::string& fill);
  enum class Anchor { Start, Middle, End };
  // Text with its baseline at y (escaped); rotate in degrees about (x, y).
  void text(double x, double y, std::string_view s, double size = 12, Anchor anchor = Anchor::Start,
            const std::string& fill = "#222222", double rotate = 0, bool bold = false);
  void raw(const std::string& element) { body_ += element; }
  // The whole document: XML declaration, <svg> with its viewBox, a white background, the elements.
  std::string str() const;

 private:
  double width_, height_;
  std::string body_;
};

// A rough width of `s` set in the document's sans-serif font at `size` (for layout, not exact).
double text_width(std::string_view s, double size);

struct Series {
  std::string name;          // in the legend; empty: not listed
  std::vector<double> x, y;  // same length
  std::string colour;        // empty: series_colour(index)
  bool markers = false;      // a dot at every point
  bool dashed = false;
  double width = 1.5;
};

struct HorizontalLine {
  double y = 0;
  std::string label;
};

// A point with no y value to draw (a sweep point whose training diverged): a cross at x on the plot's
// upper edge, in the colour of series `series`, its label under it.
struct MissingPoint {
  double x = 0;
  std::string label;
  size_t series = 0;
};

struct Chart {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;  // log10 axes; points <= 0 are left out
  std::vector<Series> series;
  std::vector<HorizontalLine> lines;  // dashed grey lines across the plot (targets, tolerances)
  std::vector<MissingPoint> missing;
  // When set, x values are positions 0..n-1 and the axis is labelled with these instead of numbers.
  std::vector<std::string> x_categories;
  bool legend = true;
};

// Draws `chart` in the box (x, y, w, h) of `doc`: title above, labels beside the axes, a grid, the legend
// in the upper right corner inside the plot.
void draw_chart(Document& doc, double x, double y, double w, double h, const Chart& chart);

struct Heatmap {
  std::vector<std::vector<double>> values;  // rows x cols
  double vmin = 0, vmax = 1;
  bool signed_scale = false;  // diverging() over [vmin, vmax] mapped to [-1, 1], else viridis
  std::string title, x_label, y_label;
  std::vector<std::string> row_labels, col_labels;  // empty: none drawn
  std::string cell_format;                          // non-empty: each cell's value printed in it ("{:.2f}")
  double label_size = 10;
  std::string cell_class = "cell";  // each cell's class attribute (what tests and style sheets select)
};

// Draws the matrix as one <rect class="CELL_CLASS"> per entry in the box (x, y, w, h) (labels outside it).
void draw_heatmap(Document& doc, double x, double y, double w, double h, const Heatmap& map);
// A horizontal colour bar for [vmin, vmax] with end and middle values and a caption below.
void draw_colour_bar(Document& doc, double x, double y, double w, double h, double vmin, double vmax,
                     bool signed_scale, const std::string& caption);

// The indices of at most max_points of n points, evenly spread, first and last always kept.
std::vector<size_t> downsample(size_t n, size_t max_points);

}  // namespace tfm::svg
