// The timeline chart of `mgm plot` (see svg_timeline.hpp).
#include "svg_timeline.hpp"

#include "mgm_tool.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <utility>

namespace mgm_tool {

namespace tel = mgm::telemetry;

namespace {

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Round steps for an axis: 1, 2, 5 x 10^k, about `n` of them.
double nice_step(double span, int n) {
  if (span <= 0) return 1;
  const double raw = span / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// The legend's room: 12 px Helvetica averages under 6.5 px a character; 190 px of the margin.
constexpr std::size_t legend_chars = 29;
constexpr double legend_line_height = 15;
constexpr double legend_gap = 12;

// "GPU0 NVIDIA A100-SXM4-80GB: leak, 12.3 MiB/min".
std::string legend_of(const std::string& label, const tel::gpu_leak_report* r) {
  if (r == nullptr) return label;
  std::string out = label + ": " + tel::to_string(r->report.verdict);
  const auto v = r->report.verdict;
  if (v == tel::leak_verdict::leak || v == tel::leak_verdict::growth_then_plateau) {
    char rate[48];
    std::snprintf(rate, sizeof rate, ", %.1f MiB/min", r->report.rate_mib_per_min);
    out += rate;
  }
  return out;
}

// `pts` (a thinned copy of `all`) cut where the readings of `all` stop for more than five times
// their usual interval (the median), and at least a minute. The gaps are found in `all`: thinned
// points lie further apart than the readings.
std::vector<std::vector<std::pair<double, double>>> split_at_gaps(const std::vector<std::pair<double, double>>& pts,
                                                                  const std::vector<std::pair<double, double>>& all) {
  std::vector<double> steps;
  for (std::size_t i = 1; i < all.size(); ++i) steps.push_back(all[i].first - all[i - 1].first);
  double usual = 0;
  if (!steps.empty()) {
    std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2), steps.end());
    usual = steps[steps.size() / 2];
  }
  const double limit = std::max(5.0 * usual, 60.0);
  std::vector<std::pair<double, double>> gaps;  // (last reading before, first after)
  for (std::size_t i = 1; i < all.size(); ++i) {
    if (all[i].first - all[i - 1].first > limit) gaps.emplace_back(all[i - 1].first, all[i].first);
  }
  std::vector<std::vector<std::pair<double, double>>> out(1);
  std::size_t g = 0;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    while (g < gaps.size() && gaps[g].second <= (i > 0 ? pts[i - 1].first : pts[i].first)) ++g;
    const bool across = i > 0 && g < gaps.size() && pts[i - 1].first <= gaps[g].first && pts[i].first >= gaps[g].second;
    if (across && !out.back().empty()) out.emplace_back();
    out.back().push_back(pts[i]);
  }
  return out;
}

}  // namespace

std::string svg_timeline(const std::string& title, const tel::gpu_log& log, const std::vector<tel::gpu_leak_report>& reports) {
  // One series per GPU: seconds since the first reading, memory used in MiB.
  struct series {
    std::string label;
    std::vector<std::pair<double, double>> points;
    const tel::gpu_leak_report* report{nullptr};
  };
  std::vector<series> all;
  std::map<std::string, std::size_t> by_key;
  const auto origin = log.samples.empty() ? tel::clock::time_point{} : log.samples.front().time;
  auto first = origin;
  for (const auto& s : log.samples) first = std::min(first, s.time);
  for (const auto& s : log.samples) {
    auto [it, added] = by_key.emplace(s.key(), all.size());
    if (added) all.push_back({"GPU" + std::to_string(s.index) + (s.name.empty() ? "" : " " + s.name), {}, nullptr});
    if (!s.memory_used) continue;
    all[it->second].points.emplace_back(std::chrono::duration<double>(s.time - first).count(),
                                        static_cast<double>(*s.memory_used) / (1024.0 * 1024.0));
  }
  for (const auto& r : reports) {
    if (r.pid) continue;
    if (auto it = by_key.find(r.gpu_key); it != by_key.end()) all[it->second].report = &r;
  }
  double t_max = 1, m_max = 1;
  for (const auto& s : all) {
    for (const auto& [t, m] : s.points) {
      t_max = std::max(t_max, t);
      m_max = std::max(m_max, m);
    }
  }
  // The time axis in the unit that keeps its numbers short: seconds, minutes, hours or days.
  // (Plain variables, not a structured binding: the lambdas below capture them.)
  const auto unit = t_max >= 2 * 86400.0 ? std::pair{86400.0, "days"}
                    : t_max >= 3 * 3600.0 ? std::pair{3600.0, "hours"}
                    : t_max >= 600.0      ? std::pair{60.0, "minutes"}
                                          : std::pair{1.0, "seconds"};
  const double t_unit = unit.first;
  const char* const t_name = unit.second;
  const double mem_unit = m_max >= 4096 ? 1024.0 : 1.0;
  const char* mem_label = mem_unit > 1 ? "GiB" : "MiB";

  // Legends: each wrapped by words into lines that fit the right margin, one below the other; the
  // chart grows taller rather than clip them.
  std::vector<std::vector<std::string>> legends;
  for (const auto& s : all) legends.push_back(wrap_words(legend_of(s.label, s.report), legend_chars));
  double legend_height = 0;
  for (const auto& l : legends) legend_height += legend_line_height * static_cast<double>(l.size()) + legend_gap;
  const double W = 960, L = 80, R = 250, T = 56, B = 64;
  const double H = std::max(540.0, T + 10 + legend_height + 30 + B);
  const double pw = W - L - R, ph = H - T - B;
  const double t_step = nice_step(t_max / t_unit, 8), m_step = nice_step(m_max / mem_unit, 6);
  const double t_top = std::ceil(t_max / t_unit / t_step) * t_step, m_top = std::ceil(m_max / mem_unit / m_step) * m_step;
  auto x = [&](double t) { return L + pw * (t / t_unit) / t_top; };
  auto y = [&](double mib) { return T + ph * (1.0 - (mib / mem_unit) / m_top); };
  // Okabe-Ito: distinguishable with every common colour-vision deficiency.
  static const char* palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"};

  std::ostringstream o;
  o << R"(<?xml version="1.0" encoding="UTF-8"?>)" << '\n'
    << R"(<svg xmlns="http://www.w3.org/2000/svg" width=")" << W << R"(" height=")" << H << R"(" viewBox="0 0 )" << W << ' ' << H
    << R"(" font-family="Helvetica, Arial, sans-serif" font-size="12">)" << '\n'
    << "<title>" << escape_xml(title) << "</title>\n"
    << R"(<rect width="100%" height="100%" fill="white"/>)" << '\n'
    << R"(<text x=")" << L << R"(" y="28" font-size="16" font-weight="bold">)" << escape_xml(title) << "</text>\n";
  // Grid and ticks.
  for (double v = 0; v <= m_top + 1e-9; v += m_step) {
    o << R"(<line x1=")" << L << R"(" x2=")" << L + pw << R"(" y1=")" << num(y(v * mem_unit)) << R"(" y2=")" << num(y(v * mem_unit))
      << R"(" stroke="#e5e5e5"/>)" << '\n'
      << R"(<text x=")" << L - 8 << R"(" y=")" << num(y(v * mem_unit) + 4) << R"(" text-anchor="end" fill="#444">)" << v << "</text>\n";
  }
  for (double v = 0; v <= t_top + 1e-9; v += t_step) {
    o << R"(<line x1=")" << num(x(v * t_unit)) << R"(" x2=")" << num(x(v * t_unit)) << R"(" y1=")" << T << R"(" y2=")" << T + ph
      << R"(" stroke="#f0f0f0"/>)" << '\n'
      << R"(<text x=")" << num(x(v * t_unit)) << R"(" y=")" << T + ph + 18 << R"(" text-anchor="middle" fill="#444">)" << v
      << "</text>\n";
  }
  o << R"(<line x1=")" << L << R"(" x2=")" << L << R"(" y1=")" << T << R"(" y2=")" << T + ph << R"(" stroke="#333"/>)" << '\n'
    << R"(<line x1=")" << L << R"(" x2=")" << L + pw << R"(" y1=")" << T + ph << R"(" y2=")" << T + ph << R"(" stroke="#333"/>)" << '\n'
    << R"(<text x=")" << L + pw / 2 << R"(" y=")" << H - 20 << R"(" text-anchor="middle">)"
    << (log.has_timestamps ? "" : "rows x interval, ") << t_name << " since the first reading</text>\n"
    << "<text transform=\"translate(22 " << T + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">memory used ("
    << mem_label << ")</text>\n";
  // Series, their fitted slopes, and the legend.
  double legend_y = T + 10;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& s = all[i];
    const char* colour = palette[i % 8];
    // At most ~2 points per pixel column: keep each bucket's first, min and max.
    std::vector<std::pair<double, double>> pts;
    const std::size_t buckets = 1600;
    if (s.points.size() <= buckets * 2) {
      pts = s.points;
    } else {
      std::size_t b0 = 0;
      for (std::size_t k = 0; k < buckets; ++k) {
        const std::size_t b1 = s.points.size() * (k + 1) / buckets;
        auto [lo, hi] = std::minmax_element(s.points.begin() + static_cast<std::ptrdiff_t>(b0), s.points.begin() + static_cast<std::ptrdiff_t>(b1),
                                            [](const auto& a, const auto& b) { return a.second < b.second; });
        if (lo->first <= hi->first) {
          pts.push_back(*lo);
          if (hi != lo) pts.push_back(*hi);
        } else {
          pts.push_back(*hi);
          pts.push_back(*lo);
        }
        b0 = b1;
      }
    }
    // A gap in the readings is drawn as a gap: one polyline per stretch without one.
    for (const auto& stretch : split_at_gaps(pts, s.points)) {
      o << R"(<polyline class="gpu" data-gpu=")" << escape_xml(s.label) << R"(" fill="none" stroke=")" << colour
        << R"(" stroke-width="1.6" stroke-linejoin="round" points=")";
      for (const auto& [t, m] : stretch) o << num(x(t)) << ',' << num(y(m)) << ' ';
      o << "\"/>\n";
    }
    if (s.report != nullptr) {
      const auto& rep = s.report->report;
      if (!rep.runs.empty() && rep.deciding_run < rep.runs.size()) {
        const auto& run = rep.runs[rep.deciding_run];
        const double t0 = run.load_start_seconds, t1 = run.plateau_start_seconds.value_or(run.end_seconds);
        // A sawtooth's fit is that of its floor.
        const double m0 = run.releases >= 2 ? run.first_floor_mib : run.start_level_mib;
        const double m1 = m0 + run.rate_mib_per_min * (t1 - t0) / 60.0;
        if (t1 > t0) {
          o << R"(<line class="fit" x1=")" << num(x(t0)) << R"(" y1=")" << num(y(m0)) << R"(" x2=")" << num(x(t1)) << R"(" y2=")"
            << num(y(m1)) << R"(" stroke=")" << colour << R"(" stroke-width="2.4" stroke-dasharray="7 4" opacity="0.85"/>)" << '\n';
        }
      }
    }
    o << R"(<line x1=")" << L + pw + 16 << R"(" x2=")" << L + pw + 40 << R"(" y1=")" << legend_y << R"(" y2=")" << legend_y
      << R"(" stroke=")" << colour << R"(" stroke-width="3"/>)" << '\n';
    for (std::size_t k = 0; k < legends[i].size(); ++k) {
      o << R"(<text class="legend" x=")" << L + pw + 46 << R"(" y=")" << num(legend_y + 4 + legend_line_height * static_cast<double>(k))
        << (k == 0 ? std::string{"\">"} : std::string{"\" fill=\"#444\">"}) << escape_xml(legends[i][k]) << "</text>\n";
    }
    legend_y += legend_line_height * static_cast<double>(legends[i].size()) + legend_gap;
  }
  o << R"(<text x=")" << L + pw + 16 << R"(" y=")" << num(std::max(T + ph, legend_y + 8)) << R"(" fill="#666">dashed: fitted slope (Theil-Sen)</text>)" << '\n'
    << "</svg>\n";
  return o.str();
}

}  // namespace mgm_tool
