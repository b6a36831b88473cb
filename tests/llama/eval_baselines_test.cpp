// The rate sweep's baselines (Lloyd–Max codebooks, KIVI, TurboQuant-style) and its SVG plot
// writer: the pieces that can be wrong without any model showing it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cachegen/error.h"
#include "cachegen/half.h"
#include "llama/eval_baselines.h"
#include "llama/svg_plot.h"

namespace cachegen::llama {
namespace {

using baseline::Codebook;

double gaussian(double x) {
  return std::exp(-x * x / 2);
}

// A cell's pdf-weighted mean by Simpson's rule on its own fine grid (independent of the
// fitting code's cumulative sums).
double cell_mean(double a, double b, const std::function<double(double)>& pdf) {
  const int n = 20000;
  const double h = (b - a) / n;
  double m0 = 0, m1 = 0;
  for (int i = 0; i <= n; ++i) {
    const double x = a + i * h, w = (i == 0 || i == n) ? 1 : (i % 2 ? 4 : 2);
    m0 += w * pdf(x);
    m1 += w * x * pdf(x);
  }
  return m1 / m0;
}

void expect_lloyd_max(const Codebook& cb, int bits, double lo, double hi,
                      const std::function<double(double)>& pdf, const std::string& what) {
  const size_t n = size_t{1} << bits;
  ASSERT_EQ(cb.centroids.size(), n) << what;
  ASSERT_EQ(cb.bounds.size(), n - 1) << what;
  for (size_t i = 0; i + 1 < n; ++i) {
    EXPECT_LT(cb.centroids[i], cb.centroids[i + 1]) << what << " monotone at " << i;
    EXPECT_DOUBLE_EQ(cb.bounds[i], (cb.centroids[i] + cb.centroids[i + 1]) / 2) << what;
  }
  for (size_t i = 0; i < n; ++i) {
    // Symmetric density, symmetric codebook.
    EXPECT_NEAR(cb.centroids[i], -cb.centroids[n - 1 - i], 1e-6) << what << " symmetric " << i;
    // Fixed point: each centroid is the mean of its cell.
    const double a = i == 0 ? lo : cb.bounds[i - 1], b = i + 1 == n ? hi : cb.bounds[i];
    EXPECT_NEAR(cb.centroids[i], cell_mean(a, b, pdf), 2e-4) << what << " fixed point " << i;
  }
}

TEST(LloydMax, GaussianCodebooksAreTheKnownFixedPoints) {
  for (int bits = 1; bits <= 4; ++bits) {
    const Codebook cb = baseline::lloyd_max_codebook(bits, gaussian, -10, 10);
    expect_lloyd_max(cb, bits, -10, 10, gaussian, "gaussian " + std::to_string(bits));
  }
  // Max (1960): 1 bit ±0.7979 (sqrt(2/pi)); 2 bits ±0.4528, ±1.5104.
  const Codebook one = baseline::lloyd_max_codebook(1, gaussian, -10, 10);
  EXPECT_NEAR(one.centroids[1], std::sqrt(2 / M_PI), 1e-4);
  const Codebook two = baseline::lloyd_max_codebook(2, gaussian, -10, 10);
  EXPECT_NEAR(two.centroids[2], 0.4528, 2e-4);
  EXPECT_NEAR(two.centroids[3], 1.5104, 2e-4);
}

TEST(LloydMax, SphereCodebooksFitTheRotatedCoordinate) {
  for (size_t dim : {8u, 64u}) {
    const double r = std::sqrt(static_cast<double>(dim));
    const auto pdf = [dim](double x) { return baseline::sphere_coordinate_pdf(x, dim); };
    for (int bits : {2, 3}) {
      const Codebook cb = baseline::lloyd_max_sphere(bits, dim);
      expect_lloyd_max(cb, bits, -r, r, pdf,
                       "sphere d" + std::to_string(dim) + " b" + std::to_string(bits));
    }
  }
  // Large dim: the coordinate is N(0, 1), so the codebook is the Gaussian one.
  EXPECT_NEAR(baseline::lloyd_max_sphere(2, 4096).centroids[3], 1.5104, 2e-3);
  EXPECT_EQ(baseline::lloyd_max_sphere(1, 4096).nearest(0.1), 1u);
  EXPECT_EQ(baseline::lloyd_max_sphere(1, 4096).nearest(-0.1), 0u);
  EXPECT_THROW(baseline::lloyd_max_sphere(0, 8), Error);
  EXPECT_THROW(baseline::lloyd_max_sphere(2, 1), Error);
}

TEST(Kivi, GroupErrorIsWithinHalfAStep) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.3f, 2.0f);
  for (int bits = 1; bits <= 8; ++bits) {
    std::vector<float> x(3 * 40);
    for (float& v : x) v = d(rng);
    const std::vector<float> orig = x;
    // Every third value (a strided group, as a key channel) and a contiguous one.
    const double step = baseline::quantize_group_minmax(x, 3, 40, bits);
    double mn = orig[0], mx = orig[0];
    for (size_t i = 0; i < 40; ++i) {
      mn = std::min(mn, double{orig[i * 3]});
      mx = std::max(mx, double{orig[i * 3]});
    }
    EXPECT_GE(step, (mx - mn) / ((1 << bits) - 1)) << bits;  // fp16 scale rounded up
    EXPECT_LE(step, (mx - mn) / ((1 << bits) - 1) * (1 + 0x1p-10) + 1e-7) << bits;
    for (size_t i = 0; i < x.size(); ++i) {
      if (i % 3 != 0) {
        EXPECT_EQ(x[i], orig[i]);  // outside the group: untouched
      } else {
        EXPECT_LE(std::abs(double{x[i]} - orig[i]), step / 2 * (1 + 1e-6)) << bits << " " << i;
      }
    }
  }
  std::vector<float> c(5, 1.25f);
  baseline::quantize_group_minmax(c, 1, 5, 2);  // constant: exact (1.25 is an fp16)
  EXPECT_EQ(c, std::vector<float>(5, 1.25f));
}

TEST(Kivi, RoundTripKeepsTheWindowAndPricesEveryScale) {
  const size_t rows = 100, embd = 64;
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(rows * embd);
  for (float& v : x) v = d(rng);
  baseline::KiviOptions o;  // 2 bits, group 32, window 32
  // Keys: 68 quantized tokens in ceil(68/32) = 3 groups per channel, 64 channels.
  EXPECT_DOUBLE_EQ(baseline::kivi_bits(rows, embd, true, o),
                   68.0 * 64 * 2 + 3 * 64 * 32 + 32.0 * 64 * 16);
  // Values: 68 tokens, 2 groups of 32 channels each.
  EXPECT_DOUBLE_EQ(baseline::kivi_bits(rows, embd, false, o),
                   68.0 * 64 * 2 + 68 * 2 * 32 + 32.0 * 64 * 16);
  // Shorter than the window: all fp16.
  EXPECT_DOUBLE_EQ(baseline::kivi_bits(20, embd, true, o), 20.0 * 64 * 16);
  for (bool key : {true, false}) {
    std::vector<float> y = x;
    EXPECT_DOUBLE_EQ(baseline::kivi_roundtrip(y, rows, embd, key, o),
                     baseline::kivi_bits(rows, embd, key, o));
    double worst = 0;
    for (size_t i = 0; i < 68 * embd; ++i) worst = std::max(worst, double{std::abs(y[i] - x[i])});
    EXPECT_GT(worst, 0.01);  // 2 bits: visibly lossy
    EXPECT_LT(worst, 2.0);   // but within half a step of groups spanning ~8 sigma
    for (size_t i = 68 * embd; i < x.size(); ++i) {
      EXPECT_EQ(y[i], half_to_float(float_to_half(x[i])));  // the fp16 window
    }
  }
  o.bits = 9;
  EXPECT_THROW(baseline::kivi_bits(rows, embd, true, o), Error);
}

TEST(TurboQuant, PricesCodesAndNormsAndLosesLessWithMoreBits) {
  const baseline::TurboQuant tq25(2.5, 64);
  int sum = 0;
  for (int b : tq25.channel_bits()) sum += b;
  EXPECT_EQ(sum, 160);                                 // 32 channels at 3 bits, 32 at 2
  EXPECT_DOUBLE_EQ(tq25.bits(10), 10.0 * (160 + 16));  // + an fp16 norm per vector
  EXPECT_DOUBLE_EQ(baseline::TurboQuant(3.5, 8).bits(1), 3 * 4 + 4 * 4 + 16.0);
  for (size_t dim : {8u, 64u}) {
    const size_t rows = 200, heads = 2;
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(rows * heads * dim);
    for (float& v : x) v = d(rng);
    x[5] = 40;  // an outlier channel: the rotation spreads it
    double last = 1e9;
    for (double bits : {2.0, 2.5, 3.0, 3.5, 4.0}) {
      const baseline::TurboQuant tq(bits, dim);
      std::vector<float> y = x;
      EXPECT_DOUBLE_EQ(tq.roundtrip(y, rows, heads), tq.bits(rows * heads));
      double err = 0, energy = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        err += (double{y[i]} - x[i]) * (double{y[i]} - x[i]);
        energy += double{x[i]} * x[i];
      }
      // Relative MSE near the Gaussian Lloyd–Max distortion of the channels' widths (Max
      // 1960: 0.1175 at 2 bits, 0.03454 at 3, 0.009497 at 4), averaged over the channels; for
      // a short head the rotated coordinate is bounded (|x| < sqrt(dim)), so no worse.
      const double lloyd_max_mse[] = {0, 0, 0.1175, 0.03454, 0.009497};
      double expected = 0;
      for (int b : tq.channel_bits()) expected += lloyd_max_mse[b] / static_cast<double>(dim);
      EXPECT_LT(err / energy, 1.2 * expected) << dim << " " << bits;
      if (dim == 64) {
        EXPECT_GT(err / energy, 0.8 * expected) << bits;
      }
      EXPECT_LT(err, last) << dim << " " << bits;
      last = err;
    }
  }
  EXPECT_THROW(baseline::TurboQuant(2.5, 12), Error);
  EXPECT_THROW(baseline::TurboQuant(0.5, 8), Error);
}

// Tags balanced and properly nested (a small well-formedness check; no XML library here).
bool well_formed(const std::string& s, std::string& why) {
  std::vector<std::string> open;
  for (size_t i = s.find('<'); i != std::string::npos; i = s.find('<', i + 1)) {
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return why = "unterminated tag", false;
    const std::string tag = s.substr(i + 1, end - i - 1);
    if (tag.empty()) return why = "empty tag", false;
    if (tag.find('<') != std::string::npos) return why = "'<' inside a tag", false;
    if (tag.back() == '/') continue;
    const std::string name =
        tag.substr(tag[0] == '/' ? 1 : 0, tag.find_first_of(" \n") - (tag[0] == '/' ? 1 : 0));
    if (tag[0] == '/') {
      if (open.empty() || open.back() != name) return why = "unbalanced </" + name + ">", false;
      open.pop_back();
    } else {
      open.push_back(name);
    }
  }
  if (!open.empty()) return why = "unclosed <" + open.back() + ">", false;
  return true;
}

TEST(SvgPlot, IsWellFormedWithEverySeries) {
  const std::vector<PlotSeries> series = {
      {"ours", {{1.2, 0.09}, {4.5, 9e-5}, {2.0, 0.01}}},
      {"kivi <2&4>", {{3.9, 0.02}, {5.9, 1e-4}}},
      {"turboquant", {{2.5, 0.0}, {4.5, 3e-3}}},  // KL 0 cannot sit on the log axis
      {"empty", {}}};
  PlotOptions o;
  o.title = "KL vs bits";
  o.x_label = "bits/element";
  o.y_label = "KL";
  const std::string svg = svg_line_plot(series, o);
  std::string why;
  EXPECT_TRUE(well_formed(svg, why)) << why;
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  for (const char* name : {"ours", "kivi &lt;2&amp;4&gt;", "turboquant", "empty"}) {
    EXPECT_NE(svg.find(std::string("data-name=\"") + name + "\""), std::string::npos) << name;
    EXPECT_NE(svg.find(std::string(">") + name + "</text>"), std::string::npos) << name;
  }
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  EXPECT_NE(svg.find(">1e-5<"), std::string::npos);  // log decades 1e-5 .. 1e-1
  EXPECT_NE(svg.find(">1e-1<"), std::string::npos);
  // 3 + 2 + 1 plotted points.
  size_t circles = 0;
  for (size_t i = svg.find("<circle"); i != std::string::npos; i = svg.find("<circle", i + 1)) {
    ++circles;
  }
  EXPECT_EQ(circles, 6u);
  // Nothing plottable: still a document with axes.
  EXPECT_TRUE(well_formed(svg_line_plot({}, o), why)) << why;
}

}  // namespace
}  // namespace cachegen::llama
