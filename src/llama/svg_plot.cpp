// SVG line plot (svg_plot.h).
#include "llama/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace cachegen::llama {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
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
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// Distinguishable on white and in greyscale (Okabe–Ito).
const char* const kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                               "#E69F00", "#56B4E9", "#000000", "#F0E442"};

}  // namespace

std::string svg_line_plot(const std::vector<PlotSeries>& series, const PlotOptions& o) {
  const auto plottable = [&](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && (!o.log_y || y > 0);
  };
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const PlotSeries& s : series) {
    for (const auto& p : s.points) {
      if (!plottable(p.first, p.second)) continue;
      const double y = o.log_y ? std::log10(p.second) : p.second;
      x0 = std::min(x0, p.first);
      x1 = std::max(x1, p.first);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (!(x0 <= x1)) {  // nothing to plot: empty axes
    x0 = y0 = 0;
    x1 = y1 = 1;
  }
  // x from the integer below to the integer above; y in whole decades on a log axis.
  x0 = std::floor(x0);
  x1 = std::max(std::ceil(x1), x0 + 1);
  if (o.log_y) {
    y0 = std::floor(y0);
    y1 = std::max(std::ceil(y1), y0 + 1);
  } else if (y0 == y1) {
    y1 = y0 + 1;
  }
  const double left = 80, right = 190, top = 40, bottom = 60;
  const double pw = o.width - left - right, ph = o.height - top - bottom;
  const auto sx = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  const auto sy = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\""
      << o.height << "\" viewBox=\"0 0 " << o.width << " " << o.height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << num(left + pw / 2) << "\" y=\"22\" text-anchor=\"middle\" "
      << "font-size=\"14\">" << escape(o.title) << "</text>\n";
  // Grid and ticks.
  const double x_step = (x1 - x0) > 12 ? 2 : 1;
  for (double x = x0; x <= x1 + 1e-9; x += x_step) {
    svg << "<line x1=\"" << num(sx(x)) << "\" y1=\"" << num(top) << "\" x2=\"" << num(sx(x))
        << "\" y2=\"" << num(top + ph) << "\" stroke=\"#ddd\"/>\n";
    svg << "<text x=\"" << num(sx(x)) << "\" y=\"" << num(top + ph + 16)
        << "\" text-anchor=\"middle\">" << x << "</text>\n";
  }
  const double y_step = o.log_y ? 1 : (y1 - y0) / 5;
  for (double y = y0; y <= y1 + 1e-9; y += y_step) {
    char label[32];
    if (o.log_y) {
      std::snprintf(label, sizeof label, "1e%d", static_cast<int>(std::lround(y)));
    } else {
      std::snprintf(label, sizeof label, "%.3g", y);
    }
    svg << "<line x1=\"" << num(left) << "\" y1=\"" << num(sy(y)) << "\" x2=\"" << num(left + pw)
        << "\" y2=\"" << num(sy(y)) << "\" stroke=\"#ddd\"/>\n";
    svg << "<text x=\"" << num(left - 6) << "\" y=\"" << num(sy(y) + 4) << "\" text-anchor=\"end\">"
        << label << "</text>\n";
  }
  svg << "<rect x=\"" << num(left) << "\" y=\"" << num(top) << "\" width=\"" << num(pw)
      << "\" height=\"" << num(ph) << "\" fill=\"none\" stroke=\"black\"/>\n";
  svg << "<text x=\"" << num(left + pw / 2) << "\" y=\"" << num(o.height - 18)
      << "\" text-anchor=\"middle\">" << escape(o.x_label) << "</text>\n";
  svg << "<text transform=\"translate(20 " << num(top + ph / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">" << escape(o.y_label) << "</text>\n";
  // Series and legend.
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const char* color = kColors[i % (sizeof kColors / sizeof kColors[0])];
    std::vector<std::pair<double, double>> pts;
    for (const auto& p : s.points) {
      if (plottable(p.first, p.second)) {
        pts.emplace_back(sx(p.first), sy(o.log_y ? std::log10(p.second) : p.second));
      }
    }
    std::sort(pts.begin(), pts.end());
    svg << "<g class=\"series\" data-name=\"" << escape(s.name) << "\">\n";
    if (pts.size() > 1) {
      svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
      for (const auto& p : pts) svg << num(p.first) << "," << num(p.second) << " ";
      svg << "\"/>\n";
    }
    for (const auto& p : pts) {
      svg << "<circle cx=\"" << num(p.first) << "\" cy=\"" << num(p.second) << "\" r=\"3\" fill=\""
          << color << "\"/>\n";
    }
    svg << "</g>\n";
    const double ly = top + 10 + 20 * static_cast<double>(i);
    svg << "<line x1=\"" << num(left + pw + 14) << "\" y1=\"" << num(ly) << "\" x2=\""
        << num(left + pw + 38) << "\" y2=\"" << num(ly) << "\" stroke=\"" << color
        << "\" stroke-width=\"2\"/>\n";
    svg << "<text x=\"" << num(left + pw + 44) << "\" y=\"" << num(ly + 4) << "\">"
        << escape(s.name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace cachegen::llama
