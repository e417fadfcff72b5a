/// @file
/// @brief Leak analysis of GPU memory over time: is the memory a job uses still growing after its
/// warm-up, has it levelled off, or did the process restart? Pure functions, no CUDA, no I/O.
///
/// ## Glossary
/// - *series*: (seconds, MiB) points of one GPU or one process, in any order (they are sorted).
/// - *run*: the part of a series between two *restarts*. A restart is a drop to near the idle level
///   (the series' minimum) of at least `restart_drop_fraction` of the memory used above it, and of
///   the memory in use (less `min_restart_drop_mib`), and at least `min_restart_drop_mib`, after
///   which memory comes back. A smaller fall (to a floor well
///   above idle) is a *release* within the run. A drop that never comes back is
///   the *job end*; what follows it is idle and is not analysed.
/// - *warm-up*: the initial ramp of a run up to its working level (allocator caches filling, the
///   model loading). It is found by removing the slope of the run's second half and taking the
///   first point at 90 % of the way from the run's first value to the detrended working level;
///   a user baseline window replaces it.
/// - *load window*: the run after its warm-up. All verdicts are about load windows.
/// - *noise*: σ = 1.4826 · MAD(first differences) / √2, robust to steps and to a trend.
/// - *level*: the median of the first or last `m` points of a window (`m` = 1 without noise, else
///   a tenth of the window, at least 3), so that a staircase's last step counts.
///
/// ## Behaviour
/// - Slope: Theil–Sen (the median of all pairwise slopes), with Sen's 95 % interval. Above
///   `max_pairs` pairs, that many pairs are drawn by a fixed-seed generator: the result is
///   deterministic and costs O(max_pairs).
/// - A load window *grew* when its end level exceeds its start level by `max(min_growth_mib, 3 sd)`
///   or the Theil–Sen slope is 3 standard errors above 0.
/// - *Plateau*: the longest suffix of the load window, at least `plateau_min_fraction` of it, whose
///   net change is within `max(min_growth_mib, 3 sd)` and whose rate is at most a quarter of the
///   rate before it, the difference being significant (3 sd): `growth_then_plateau`.
/// - Otherwise growth is a `leak` when it is fast (`min_rate_mib_per_min` or more) or when it is
///   slow but large (`min_leak_growth_mib` or more in all, however long it took: 0.6 MiB/min for
///   three days is 2.5 GiB). Its rate is the Theil–Sen slope when that is significant, else (a
///   staircase with one long step, where most pairs have slope 0) the net growth between the start
///   and end levels over the time between them.
/// - *Sawtooth*: a load window with at least two *releases*, spanning at least half of it (falls of at least
///   `max(2 min_growth_mib, 8 sd)` within three readings that give back at least half of what was
///   gained since the last floor) is judged by its *floor*, the lowest reading after each release
///   (before the first one the window may start mid-tooth): it leaks only when the floor rises as a leak would, by the same
///   thresholds; a cache that fills and empties to the same floor is `no_growth`.
/// - A series with a leaking run is a `leak` (its restarts are still listed) unless a longer run
///   after it (by its load window) did not leak: a climb that a restart cut off, before a run that
///   levels off, is not a leak; a leak in the last run still is. Else one with restarts is `restarted`; else the run's
///   verdict.
///
/// ## Invariants
/// - `0 <= confidence <= 1`; `confidence == 0` iff `verdict == no_data`.
/// - `restart_seconds.size() == runs.size() - 1` (the idle tail after a job end is not a run).
/// - Same input, same output (no clocks, no unseeded randomness, no library distributions).
#pragma once

#include <mgm/telemetry/sample.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mgm::telemetry {

/// @brief One reading: time in seconds (any origin) and memory in MiB.
struct series_point {
  double seconds{0};
  double mib{0};
};

/// @brief A robust slope with its spread.
struct slope_estimate {
  double mib_per_min{0};        ///< Theil–Sen: the median pairwise slope
  double lower_mib_per_min{0};  ///< Sen's 95 % confidence interval
  double upper_mib_per_min{0};
  std::size_t points{0};
  std::size_t pairs{0};         ///< pairwise slopes used (pairs at the same time are skipped)
  bool subsampled{false};       ///< true when the pairs were a deterministic sample of all pairs
  double independent_points{0}; ///< the readings the interval counts as independent: `points`, or fewer
                                ///< when the caller corrected for serial correlation (see independent_readings)

  /// @brief The standard error implied by the interval: (upper - lower) / (2 · 1.96).
  [[nodiscard]] double standard_error() const noexcept { return (upper_mib_per_min - lower_mib_per_min) / 3.92; }
};

/// @brief Theil–Sen slope of `points` in MiB/min with Sen's 95 % interval; at most `max_pairs`
/// pairwise slopes are computed (a fixed-seed sample of them when there are more pairs).
/// Fewer than two points at different times give a zero estimate with `pairs == 0`.
/// `independent_points` (0: all of them) widens the interval for serially correlated readings:
/// the variance of Kendall's S is scaled by points / independent_points (Hamed and Rao, 1998).
/// **Thread safety:** pure.
[[nodiscard]] slope_estimate theil_sen(std::span<const series_point> points, std::size_t max_pairs = 200'000,
                                       double independent_points = 0.0);

/// @brief How many independent readings `points` are worth around the line `slope` fits: n (1 − ρ) / (1 + ρ),
/// where ρ is the lag-1 autocorrelation of the residuals (n when ρ ≤ 0, at least 2). Memory that climbs
/// in a few bursts with long flat stretches between them leaves residuals that wander far from the line
/// for many readings at a time: its readings are worth a few, and Sen's interval, which assumes
/// independent readings, would otherwise be far too narrow for it. **Thread safety:** pure.
[[nodiscard]] double independent_readings(std::span<const series_point> points, const slope_estimate& slope);

/// @brief A window of time in seconds from the first point of a series.
struct time_window {
  double start_seconds{0};
  double end_seconds{0};
};

/// @brief What counts as growth, a plateau and a restart. Set fields one by one: partial
/// designated initialisers do not compile in this project.
struct leak_options {
  /// The baseline window, in seconds from the series' first point: the warm-up is taken to end at
  /// its start and the growth is measured from its median level. Empty: the warm-up is detected.
  /// It applies to the first run only.
  std::optional<time_window> baseline;
  /// Growth at least this fast is a leak (1 MiB/min is 1.4 GiB a day) ...
  double min_rate_mib_per_min{1.0};
  /// ... and so is slower growth that adds up to at least this much (`mgm leak --min-growth`).
  double min_leak_growth_mib{256.0};
  double min_growth_mib{16.0};        ///< smaller changes are not growth (nvidia-smi jitters by 2 MiB)
  double restart_drop_fraction{0.8};  ///< a restart drops at least this share of the memory above idle
  double min_restart_drop_mib{64.0};
  double plateau_min_fraction{0.25};  ///< the shortest plateau, as a share of the load window
  double significance_z{3.0};         ///< standard errors needed for growth, a slow-down, a leak
  std::size_t max_pairs{200'000};     ///< Theil–Sen cost bound
};

/// @brief The answer for one series.
enum class leak_verdict {
  no_data,              ///< no readings, too few, or all at one time
  no_growth,            ///< flat after the warm-up (or growing below both leak thresholds), or a sawtooth on a flat floor
  growth_then_plateau,  ///< grew after the warm-up, then levelled off: not a leak
  leak,                 ///< sustained growth after the warm-up that did not level off
  restarted,            ///< the process restarted (memory fell to idle and came back); no run leaks
};

/// @brief "no_data", "no_growth", "growth_then_plateau", "leak", "restarted".
[[nodiscard]] const char* to_string(leak_verdict v) noexcept;

/// @brief One run: the series between two restarts (or its start, or its end).
struct run_report {
  double start_seconds{0};       ///< first point of the run (on the input's time axis)
  double end_seconds{0};         ///< last point of the run
  double load_start_seconds{0};  ///< end of the warm-up (or the user baseline's start)
  bool baseline_from_user{false};
  leak_verdict verdict{leak_verdict::no_data};  ///< never `restarted`
  /// leak: the leak rate; growth_then_plateau: the rate before the plateau; no_growth: the
  /// Theil–Sen slope; no_data: 0.
  double rate_mib_per_min{0};
  double confidence{0};
  slope_estimate slope;          ///< Theil–Sen over the load window
  double noise_mib{0};           ///< σ of the load window
  double start_level_mib{0};     ///< level at the load window's start (the baseline's median if given)
  double end_level_mib{0};       ///< level at its end
  double median_mib{0};          ///< median of the load window
  std::size_t points{0};         ///< points in the load window
  bool grew{false};              ///< it grew significantly (a `no_growth` run then grew slower than the threshold)
  std::optional<double> plateau_start_seconds;
  double plateau_rate_mib_per_min{0};  ///< Theil–Sen slope of the plateau
  std::size_t releases{0};       ///< a sawtooth's releases in the load window (0: none, or fewer than two)
  double first_floor_mib{0};     ///< a sawtooth's floor: before its first release (or after it) ...
  double last_floor_mib{0};      ///< ... and after its last release
};

/// @brief Why a report has its verdict: the shape that decided it. With the report's numbers it is
/// what a sentence for people needs (the `mgm` tool writes one); the fields named are those of the
/// deciding run, `runs[deciding_run]`.
enum class leak_reason {
  no_readings,            ///< no_data: no usable readings (`points == 0`)
  too_few_readings,       ///< no_data: fewer than three usable readings, all at one time, or too few after
                          ///< the warm-up in every run (`points`, `first_seconds`, `last_seconds`)
  kept_growing,           ///< leak: grew after the warm-up (`start_level_mib` to `end_level_mib` at
                          ///< `rate_mib_per_min`) and did not level off; `restart_seconds` may list restarts
  floor_kept_rising,      ///< leak: a sawtooth (`releases >= 2`) whose floor rose (`first_floor_mib` to
                          ///< `last_floor_mib` at `rate_mib_per_min`)
  levelled_off,           ///< growth_then_plateau: grew, then levelled off from `plateau_start_seconds`
  restarts_only,          ///< restarted: memory fell to idle and came back (`restart_seconds`); no run leaks
  flat,                   ///< no_growth: no significant growth after the warm-up (`median_mib`, `slope`)
  grew_below_thresholds,  ///< no_growth: grew (`grew`), but slower than both leak thresholds
                          ///< (`leak_report::min_rate_mib_per_min`, `leak_report::min_leak_growth_mib`)
  sawtooth_same_floor,    ///< no_growth: a sawtooth (`releases >= 2`) back to about the same floor, or
                          ///< to one that rose less than a leak would
};

/// @brief "no_readings", "too_few_readings", "kept_growing", "floor_kept_rising", "levelled_off",
/// "restarts_only", "flat", "grew_below_thresholds", "sawtooth_same_floor".
[[nodiscard]] const char* to_string(leak_reason r) noexcept;

/// @brief The answer for one series: a verdict, the reason for it, a rate, a confidence, and the
/// facts behind them.
struct leak_report {
  leak_verdict verdict{leak_verdict::no_data};
  leak_reason reason{leak_reason::no_readings};
  double rate_mib_per_min{0};   ///< that of the deciding run (see `run_report::rate_mib_per_min`)
  double confidence{0};         ///< in [0, 1]
  /// The leak thresholds the runs were judged by (`leak_options::min_rate_mib_per_min` and
  /// `leak_options::min_leak_growth_mib`).
  double min_rate_mib_per_min{0};
  double min_leak_growth_mib{0};
  std::size_t points{0};        ///< usable points (finite values)
  double first_seconds{0};
  double last_seconds{0};
  std::vector<double> restart_seconds;  ///< when memory fell before each restart
  std::optional<double> job_end_seconds;  ///< when memory fell to idle for good
  std::vector<run_report> runs;
  std::size_t deciding_run{0};  ///< index in `runs` of the run the verdict's numbers come from
};

/// @brief Leak analysis of one series (times on any axis; "from the start" means from its first
/// point). Pure and deterministic; never throws on odd data (empty, one point, constant,
/// non-finite values are dropped).
/// @throws std::bad_alloc only.
/// **Thread safety:** pure.
[[nodiscard]] leak_report analyse_series(std::span<const series_point> points, const leak_options& options = {});

/// @brief The analysis of one GPU's or one process's memory in a log.
struct gpu_leak_report {
  std::string gpu_key;                ///< `device_sample::key()`, or the process row's GPU UUID
  int index{0};                       ///< the GPU's index in the log (0 when unknown: see gpu_found)
  bool gpu_found{true};               ///< false for a process whose GPU UUID is not among the log's GPUs
  std::string name;                   ///< the GPU's name (empty when unknown)
  std::optional<std::uint32_t> pid;   ///< set for a per-process report
  std::string process_name;
  clock::time_point origin{};         ///< time 0 of the report's seconds: the log's first reading
  std::size_t samples{0};             ///< rows of this GPU or process, with or without memory
  std::size_t memory_readings{0};     ///< rows among them with a memory reading (0: a `no_readings` report)
  leak_report report;
};

/// @brief Leak analysis of every GPU of a log (samples grouped by `device_sample::key()`, memory
/// `memory_used`), in order of first appearance, then of every process (GPU UUID and pid, from
/// `process_rows`, or from the samples' `processes` when the log has no process rows). Times are
/// seconds since the log's first reading. A GPU without any `memory.used` is a `no_data` report.
/// **Thread safety:** pure.
[[nodiscard]] std::vector<gpu_leak_report> analyse_log(const gpu_log& log, const leak_options& options = {});

}  // namespace mgm::telemetry
