// The parts of the leak analysis (include/mgm/telemetry/leak_analysis.hpp), shared by its files:
// robust statistics (leak_statistics.cpp) and the shapes a series takes (leak_shapes.cpp: restarts,
// warm-ups, plateaus, releases and floors); leak_analysis.cpp judges runs and series with them.
// (The sentences for people are the tool's: tools/mgm/leak_explain.cpp.) Internal: not installed.
#pragma once

#include <mgm/telemetry/leak_analysis.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mgm::telemetry::leak_detail {

inline constexpr double mib = 1024.0 * 1024.0;
inline constexpr double sd_of_median_difference = 1.7725;  // sqrt(2) * sqrt(pi/2): two medians of m normal points

// The thresholds that are not options, each with its reason. (The options, in leak_options, are
// what a user may need to change for a job; these follow from statistics or from the shapes.)
inline constexpr double mad_to_sd = 1.4826;          // MAD of normal data times this is its sd
inline constexpr double sen_z95 = 1.96;              // Sen's 95 % interval
inline constexpr std::size_t fall_readings = 3;      // a fall (restart or release) may take this many readings
inline constexpr double restart_fall_sd = 6.0;       // a 6-sd fall of white noise: about once in 10^9 readings
inline constexpr double comes_back_share = 0.25;     // after a fall, a rise of a quarter of it: memory came back
inline constexpr double warmup_rise_sd = 4.0;        // a warm-up rises more than noise could
inline constexpr double warmup_reach = 0.9;          // the warm-up ends 90 % of the way to the working level
inline constexpr double ramp_step_share = 0.1;       // the ramp goes on while steps add a tenth of its steepest
inline constexpr std::size_t level_share = 10;       // a level: the median of a tenth of the window ...
inline constexpr std::size_t level_max_points = 1000;  // ... of at most this many readings
inline constexpr double confidence_points = 5.0;     // n readings weigh n / (n + 5): few readings, less sure
inline constexpr std::size_t plateau_candidates = 60;  // plateau starts tried per window (cost: 60 Theil-Sen fits)
inline constexpr std::size_t screening_pairs = 20'000; // pairs per candidate's fit
inline constexpr double warmup_tail_share = 0.05;    // growth in the window's first 5 %: the warm-up's tail
inline constexpr double plateau_rate_share = 0.25;   // a plateau grows at most a quarter as fast as before it
inline constexpr double release_fall_sd = 8.0;       // a release falls further than noise ever does (8 sd)
inline constexpr double release_give_back = 0.5;     // a release gives back half of what was gained
inline constexpr double floor_sd_factor = 2.0;       // the lowest of a tooth's readings is noisy by about an sd or two
inline constexpr double confidence_below_threshold = 0.5;  // grew, but below both leak thresholds
inline constexpr double confidence_flat_floor = 0.95;      // a sawtooth whose floor did not move
inline constexpr double confidence_staircase = 0.6;        // a leak resting on a few steps, not a steady climb
inline constexpr double confidence_least_flat = 0.05;      // a flat verdict is never less sure than this

inline constexpr double confidence_plateau_found = 0.5;    // a plateau found: even odds, plus the share of the window it covers
inline constexpr double confidence_restarts = 0.5;  // falls of most of the memory are unmistakable: half of a restarted
                                                    // verdict's confidence; the other half is that of its least sure run
inline constexpr double least_confidence = 0.01;    // a verdict on readings is never given as sure to be wrong (0: no_data)
inline constexpr double sd_of_median = 1.2533;      // sqrt(pi/2): the median of m normal points is this much noisier than their mean
inline constexpr std::size_t min_window_readings = 3;  // fewer give no noise (two differences), no spread of a slope, no two levels
inline constexpr std::size_t level_min_points = 3;     // a level of a noisy window is the median of at least 3 readings (if it has 6)
inline constexpr std::size_t min_warmup_readings = 4;  // a warm-up is looked for in runs of 4 readings or more (a trend on each half)
inline constexpr std::size_t ramp_lookahead = 3;       // a ramp's rise is averaged over the next 3 readings: one noisy step does not end it
inline constexpr std::size_t plateau_edge_readings = 3;  // a plateau starts 3 readings or more from each end of the load window,
                                                         // so that a level of up to 3 readings lies on either side of it
inline constexpr double release_min_growth_factor = 2.0;  // a release falls at least two growth steps (2 min_growth_mib): no jitter does
inline constexpr std::size_t sawtooth_min_releases = 2;  // one release is a cache flush; a sawtooth repeats
inline constexpr std::size_t floor_fit_min = 3;      // Theil-Sen over 3 floors or more (robust to one tooth released less deeply);
                                                     // over two, their net change
inline constexpr double floor_halves = 0.5;          // k floors measure growth as two levels of k/2 floors each would
inline constexpr double restarts_warmed_share = 0.5;  // falls whose climbs mostly (this share) do not warm up: a sawtooth's releases
inline constexpr std::size_t pair_draws = 2;         // Theil-Sen's sample draws at most 2 pairs per pair kept (i == j draws are skipped)

/// The share of a load window its releases must span for it to be judged as a sawtooth.
inline constexpr double sawtooth_min_span = 0.5;

struct level {
  double mib{0};
  double seconds{0};  ///< the median time of the points it is taken over
};

double kth(std::vector<double>& v, std::size_t k);
double median_of(std::vector<double>& v);
level level_of(std::span<const series_point> p, std::size_t first, std::size_t last);
double noise_of(std::span<const series_point> p);
std::size_t level_points(std::size_t n, double noise);
double significance(double z);
double size_factor(std::size_t n);

struct drop_scan {
  std::vector<std::size_t> restarts;     // index of the first low point of each restart
  std::optional<std::size_t> job_end;   // a drop that never came back
};
struct plateau_found {
  std::size_t at{0};
  double rate_before_per_s{0};
  slope_estimate slope;
};

drop_scan find_drops(std::span<const series_point> p, const leak_options& o);
std::size_t index_at(std::span<const series_point> p, std::size_t s, std::size_t e, double seconds);
std::size_t warmup_end(std::span<const series_point> p, std::size_t s, std::size_t e, const leak_options& o);
std::optional<plateau_found> find_plateau(std::span<const series_point> p, std::size_t w, std::size_t e,
                                          std::optional<level> baseline, double noise, std::size_t m,
                                          const leak_options& o);
std::vector<std::size_t> find_releases(std::span<const series_point> p, std::size_t w, std::size_t e, double noise,
                                       const leak_options& o);
series_point lowest(std::span<const series_point> p, std::size_t first, std::size_t last);
void judge_floor(std::span<const series_point> p, std::size_t e, const std::vector<std::size_t>& releases,
                 const leak_options& o, run_report& r);

}  // namespace mgm::telemetry::leak_detail
