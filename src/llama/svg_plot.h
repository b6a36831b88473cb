// A small, dependency-free SVG line plot (the rate–quality figure of `cachegen eval --sweep
// rate --svg FILE`): one polyline with markers per series, linear x, linear or log10 y, axes
// with ticks and labels, a legend. Text is XML-escaped; the output is one standalone <svg>.
#pragma once

#include <string>
#include <vector>

namespace cachegen::llama {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y); joined in order of x
};

struct PlotOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_y = true;  // points with y <= 0 (or non-finite) are left out on a log axis
  int width = 760;
  int height = 480;
};

// The SVG document. A series with no plottable point still gets its legend entry.
std::string svg_line_plot(const std::vector<PlotSeries>& series, const PlotOptions& options);

}  // namespace cachegen::llama
