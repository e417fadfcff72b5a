/// @file
/// @brief GPU telemetry logs read and written: `nvidia-smi --query-gpu` / `--query-compute-apps`
/// CSV (ours included), GPU-Z sensor logs, JSON lines; and the Prometheus text exposition.
///
/// Glossary:
/// - *smi CSV*: what `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` prints, or a
///   script's own comma-separated column set (`memory_used_mib`, `gpu_id`...). Our `csv_sink`
///   writes this form (DESIGN.md §7), so every tool that reads nvidia-smi logs reads ours.
/// - *GPU-Z log*: GPU-Z's "Sensor Log" (`" , "`-separated padded fields, a trailing `" ,"`,
///   Windows-1252, CRLF). One card per file; it names neither the card nor its index.
/// - *JSON lines*: one object per device sample as `jsonl_sink` writes it.
/// - *smi XML*: what `nvidia-smi -q -x` prints, one `<nvidia_smi_log>` document per run; with
///   `-l N` one document after another in the same file, each a time point of every GPU.
/// - *smi text*: what `nvidia-smi -q` (or `-q -d MEMORY,...`) prints: an `NVSMI LOG` banner, a
///   `Timestamp`, then one indented `GPU 00000000:07:00.0` section per GPU; `-l N` appends.
/// - *smi table*: the `--query-gpu` CSV as people paste it elsewhere, with `|` or tabs or runs of
///   two spaces or more between the columns instead of commas (Markdown tables included).
///
/// Reading rules (every reader):
/// - Lines are numbered from 1 as in the file. NUL bytes are dropped wherever they are (logs
///   written to a preallocated file start lines with them); a line left blank is skipped, a line
///   left incomplete is an issue.
/// - A line that cannot be read is, in lenient mode, skipped and listed in `gpu_log::issues` with
///   its line number; in strict mode it throws `mgm::parse_error` naming the line. No line is ever
///   read into a sample with shifted or guessed columns.
/// - `[N/A]`, `[Not Supported]`, `N/A`, an empty field (any `[...]` value) make the metric empty,
///   never 0. A bracketed reason other than `[N/A]` is kept in `device_sample::missing`
///   (`power.draw: [Not Supported]`).
/// - Memory without a unit is MiB (nvidia-smi's unit); `B`, `KiB`, `MiB`, `GiB` (and `MB`, `GB`,
///   read as MiB and GiB, as nvidia-smi and GPU-Z mean them) are accepted in the value or in the
///   header (`memory.used [MiB]`) or as a name suffix (`memory_used_mib`).
/// - Times without a zone (`2025/06/13 00:27:52.195`, GPU-Z's local time) are taken as UTC;
///   ISO 8601 with `Z` or an offset is converted to UTC; a plain number is Unix seconds (a number
///   above 10^11 is Unix milliseconds).
///
/// Invariants: `read(write(samples)) == samples` to the written precision (memory in whole MiB,
/// power to 0.01 W, time to 1 ms) for `csv_sink` (with and without units) and `jsonl_sink`
/// (memory exact to the byte there).
#pragma once

#include <mgm/telemetry/sample.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mgm::telemetry {

/// @brief How a log is read.
struct log_read_options {
  /// Throw `mgm::parse_error` at the first line that cannot be read (else skip it and list it).
  bool strict = false;
  /// Time between rows of one GPU when the log has no timestamps (k-th row: epoch + k * this).
  std::chrono::duration<double> assumed_interval{1.0};
  /// Column names for an smi CSV that has no header line (`--format=csv,noheader`), in the
  /// header's spelling (`index`, `memory.used [MiB]`, `utilization.gpu [%]`...). When set, a
  /// header line in the file (if any) is skipped and these names are used instead.
  std::vector<std::string> columns;
  /// The name given to the card of a GPU-Z log; empty: the file's stem when read through
  /// `read_gpu_log_file`, else "GPU-Z".
  std::string device_name;
};

/// @brief The formats `read_gpu_log` recognises (`smi_csv` includes the smi tables).
enum class log_format : std::uint8_t { unknown, smi_csv, gpuz, jsonl, smi_xml, smi_text };

/// @brief The format of a log from its first non-blank lines: `<?xml` or `<nvidia_smi_log` an
/// smi XML; the `NVSMI LOG` banner, or a `GPU 00000000:07:00.0` line, an smi text; a `{` starts
/// JSON lines; a first field `Date` a GPU-Z log; a line with a comma, or a header line of known
/// column names separated by `|`, tabs or two spaces, an smi CSV (a leading human `nvidia-smi`
/// table is allowed); else unknown.
[[nodiscard]] log_format detect_log_format(std::string_view text) noexcept;

/// @brief Reads a log of any format `detect_log_format` recognises (an smi CSV when
/// `options.columns` is set). @throws mgm::parse_error naming line 1 when the format is unknown,
/// or as the format's reader does.
[[nodiscard]] gpu_log read_gpu_log(std::istream& in, const log_read_options& options = {});
/// @brief As `read_gpu_log(std::istream&)` on the whole text.
[[nodiscard]] gpu_log read_gpu_log(std::string_view text, const log_read_options& options = {});
/// @brief Reads a log file in binary mode (NUL bytes and CRLF are handled by the readers).
/// A GPU-Z log's card is named after the file's stem unless `options.device_name` is set.
/// @throws mgm::logic_error naming the path when it cannot be opened; mgm::parse_error as above.
[[nodiscard]] gpu_log read_gpu_log_file(const std::filesystem::path& path, const log_read_options& options = {});

/// @brief Reads an smi CSV: `--query-gpu` (format "nvidia-smi-csv", or "mgm-csv" when it has
/// `mgm.*` columns) or `--query-compute-apps` (rows go to `gpu_log::process_rows`).
///
/// - Fields are split at every comma and trimmed; nvidia-smi never quotes, so neither do we (a
///   process name with a comma makes its line an issue: one field too many).
/// - A header without commas but with `|`, tabs, or runs of two spaces or more between known
///   column names (`timestamp | index | memory.used [MiB]`) sets that separator for the rows under
///   it: `|` with or without outer bars (a Markdown table's `|---|` rule line is skipped), tabs,
///   or runs of two blanks or more (a single space stays inside a value: `1094 MiB`).
/// - Everything before the header line (the first line of at least two comma-separated names,
///   none a number, one a known column) is skipped and not counted as issues. A later line of
///   that shape starts a new header (logs appended by several runs).
/// - Column aliases: `clocks.sm`/`clocks.current.sm`, `clocks.mem`/`clocks.current.memory`,
///   `power.draw`/`power.draw.average`/`power.draw.instant` (first non-empty in that order),
///   `power.limit`/`enforced.power.limit`, `pcie.link.gen.current`/`pcie.link.gen.gpucurrent`,
///   `gpu_uuid`/`uuid`, `gpu_name`/`name`, `pci.bus_id`/`gpu_bus_id`; `_` and `.` are the same and
///   a unit suffix `_mib`, `_mb`, `_pct`, `_c`, `_w`, `_mhz` is dropped (`utilization_gpu_pct`).
/// - The GPU: `gpu`, `gpu_id`, `gpu_index` (the GPU's number in scripts' own formats) take
///   precedence over `index` when both exist; without either, GPUs are numbered in the order
///   they first appear (by UUID, else bus id, else name).
/// - No timestamp column: `has_timestamps` is false and each GPU's k-th row is at
///   epoch + k * `assumed_interval`.
/// @throws mgm::parse_error (line 1) when there is no header and `options.columns` is empty;
/// in strict mode, at the first line that cannot be read.
[[nodiscard]] gpu_log read_smi_csv(std::string_view text, const log_read_options& options = {});

/// @brief Reads a GPU-Z sensor log (format "gpuz"). Columns are found by name, whatever the
/// GPU-Z version: `GPU Clock`/`GPU Core Clock` → SM clock, `Memory Clock`/`GPU Memory Clock`,
/// `GPU Temperature`, `Memory Used`/`Memory Used (Dedicated)`/`Memory Usage (Dedicated)` →
/// memory used (GPU-Z's MB are MiB: 2 GiB cards top out at 2048 MB), `Board Power Draw` (GPU-Z's
/// `GPU Chip Power Draw` is the chip alone and is not taken as the board's), `GPU Load`,
/// `Memory Controller Load`. A repeated column name keeps its first column. The card is index 0
/// named `options.device_name` or "GPU-Z". A new `Date` header line (GPU-Z appending to a log)
/// starts a new column set. @throws mgm::parse_error as the reading rules say.
[[nodiscard]] gpu_log read_gpuz_log(std::string_view text, const log_read_options& options = {});

/// @brief Reads `nvidia-smi -q -x` output (format "nvidia-smi-xml"): one document, or the
/// documents `-l N` appends to a file one after another, each one time point.
///
/// - Time: the document's `<timestamp>` (`Sat Mar  4 04:55:00 2023`, the machine's local time,
///   taken as UTC); a document without one makes `has_timestamps` false.
/// - Per `<gpu>`, in document order (nvidia-smi's index order, which is `device_sample::index`):
///   `id` (bus id), `uuid`, `product_name`; `fb_memory_usage` `total`/`reserved`/`used`/`free`
///   (`81920 MiB`); `utilization` `gpu_util`/`memory_util`; `temperature/gpu_temp`; power from
///   `power_readings` (drivers before 535) or `gpu_power_readings`; `clocks` `sm_clock`/`mem_clock`;
///   PCIe generation, width and `tx_util`/`rx_util` (KB/s, read as 10^3 B/s); `processes`.
/// - MIG: a GPU's own `fb_memory_usage` already counts its instances'; the `mig_devices` entries
///   are not separate GPUs, and their memory is never taken for the GPU's.
/// - `N/A`, `Not Supported`, `Unknown Error` (bracketed or not) make the metric empty; a reason
///   other than `N/A` is kept in `device_sample::missing`.
/// - A document that is not well-formed (the last one, cut short when logging stopped) or a GPU
///   with a value that is not one of its metric's is an issue naming its line (lenient) or throws.
/// @throws mgm::parse_error (line 1) when there is no `<nvidia_smi_log>` at all; in strict mode,
/// at the first document or value that cannot be read.
[[nodiscard]] gpu_log read_smi_query_xml(std::string_view text, const log_read_options& options = {});

/// @brief Reads `nvidia-smi -q` text (format "nvidia-smi-q"): the whole query or some of its
/// sections (`-q -d MEMORY`), one run or several appended by `-l N`.
///
/// - A document starts at the `==============NVSMI LOG==============` banner (or, in a paste
///   without it, at a `Timestamp` line after GPU sections); its time is that `Timestamp` line
///   (ctime's form, taken as UTC).
/// - A `GPU 00000000:07:00.0` line at the left margin opens a GPU (its bus id); the GPUs of a
///   document are numbered in order from 0. Below it, sections nest by indentation (any width,
///   a tab counts as 4), and `Key : Value` lines are read by their section path: `FB Memory
///   Usage` `Total`/`Reserved`/`Used`/`Free`, `Product Name`, `GPU UUID`, `Utilization` `Gpu`/
///   `Memory`, `Temperature/GPU Current Temp`, `Power Readings` (or `GPU Power Readings`) `Power
///   Draw`/`Power Limit`, `Clocks` `SM`/`Memory`, PCIe, and `Processes` (`Process ID`, `Name`,
///   `Used GPU Memory`). A `MIG Devices` section's memory is never taken for the GPU's.
/// - Missing values and bad values as for `read_smi_query_xml`; lines outside a GPU section (a
///   shell prompt around a paste) are ignored.
/// @throws mgm::parse_error (line 1) when there is neither a banner nor a GPU section; in strict
/// mode, at the first value that cannot be read.
[[nodiscard]] gpu_log read_smi_query_text(std::string_view text, const log_read_options& options = {});

/// @brief Reads JSON lines as `jsonl_sink` writes them (format "jsonl"); every line needs a
/// `timestamp`. @throws mgm::parse_error as the reading rules say.
[[nodiscard]] gpu_log read_jsonl_log(std::string_view text, const log_read_options& options = {});

/// @brief A log timestamp: `2025/06/13 00:27:52.195`, `2025-06-13 00:27:52`, ISO 8601
/// `2025-09-08T17:26:50+08:00` (`Z`, `+08:00`, `+0800`), Unix seconds `1762903990` (with an
/// optional fraction; above 10^11, milliseconds). Times without a zone are taken as UTC.
/// Empty when `text` is none of these (or names no real date).
[[nodiscard]] std::optional<clock::time_point> parse_log_time(std::string_view text) noexcept;
/// @brief `YYYY/MM/DD HH:MM:SS.mmm` in UTC (nvidia-smi's form; it prints local time).
[[nodiscard]] std::string format_smi_time(clock::time_point time);
/// @brief ISO 8601 in UTC with milliseconds: `2025-06-13T00:27:52.195Z`.
[[nodiscard]] std::string format_iso_time(clock::time_point time);

/// @brief The header of our CSV, DESIGN.md §7's columns in the spelling nvidia-smi prints
/// (aliases expanded: `clocks.current.sm [MHz]`, `clocks.current.memory [MHz]`). The units stay
/// in the header for `nounits` rows too, as nvidia-smi keeps them. No line end.
[[nodiscard]] std::string csv_header();
/// @brief One row of our CSV: `2025/06/13 00:27:52.195, 0, GPU-..., NVIDIA H100, 81559 MiB, ...`
/// with units as nvidia-smi prints them (`81559 MiB`, `359.75 W`, `100 %`), or bare numbers when
/// `units` is false; a missing metric is `[N/A]`. Memory is truncated to whole MiB (as
/// nvidia-smi does); the time is UTC with milliseconds; commas and line ends in a name become
/// spaces. No line end.
[[nodiscard]] std::string csv_row(const device_sample& sample, bool units = true);

/// @brief The header of the per-process CSV: `timestamp, gpu_uuid, pid, process_name,
/// used_gpu_memory [MiB]`. No line end.
[[nodiscard]] std::string process_csv_header();

/// @brief One JSON object (no line end) for a sample: the CSV's field names without units
/// (`"memory.used"`, in MiB, exact to the byte: a fraction when not whole MiB), ISO 8601 UTC
/// `timestamp` with milliseconds, `pci.bus_id`, `utilization.memory`, `mgm.cuda_ordinal`,
/// `processes` (`pid`, `process_name`, `used_gpu_memory`) and `missing`; empty metrics omitted.
[[nodiscard]] std::string to_json_line(const device_sample& sample);

/// @brief The Prometheus text exposition (version 0.0.4) of one batch (one sample per GPU):
/// `# HELP`/`# TYPE` once per metric, then
/// `mgm_gpu_memory_used_bytes{gpu="0",uuid="...",pci_bus_id="...",model_name="..."} 1.2e9`.
/// Memory in bytes, temperature in degrees Celsius, power in watts, clocks in hertz, PCIe
/// throughput in bytes per second (MB = 10^6 B), utilization as a ratio 0..1; per-process memory as
/// `mgm_gpu_process_memory_used_bytes{...,pid="...",process_name="..."}`. Label values are
/// escaped (`\\`, `\"`, `\n`). Empty metrics are left out; a metric no sample has is left out.
[[nodiscard]] std::string to_prometheus(std::span<const device_sample> batch);

struct published_process;

/// @brief What an exporter (`mgm serve`) adds to a batch's exposition.
struct prometheus_extras {
  /// Each process's pools: `mgm_pool_{allocated,reserved}_bytes{...,pid,process_name,publisher}` (the
  /// publisher's unique id: two processes of different pid namespaces may have one pid),
  /// matched to the GPUs as `same_gpu` does. Null: the per-GPU sums the samples carry, unlabelled
  /// by process (a metric never mixes the two, or a `sum` would count pools twice).
  const std::vector<published_process>* pools{nullptr};
  bool simulated{false};                        ///< the GPUs and pools are simulated devices
  std::optional<double> sample_age_seconds;     ///< `mgm_sample_age_seconds`
  std::optional<std::uint64_t> sample_errors;   ///< `mgm_sample_errors_total`, a counter
  /// Labels added to every series (`node="dgx-a"`); names must be Prometheus label names.
  std::vector<std::pair<std::string, std::string>> labels;
};

/// @brief `to_prometheus(batch)` with an exporter's series added.
[[nodiscard]] std::string to_prometheus(std::span<const device_sample> batch, const prometheus_extras& extras);

/// @brief Writes `nvidia-smi --query-gpu` CSV: the header once (at construction), then a row per
/// sample; flushes after each batch so that the file is complete at every moment.
///
/// **Thread safety:** one writer at a time. **Device affinity:** none.
class csv_sink {
 public:
  /// @brief Writes to `out`, which must outlive the sink.
  explicit csv_sink(std::ostream& out, bool units = true);
  /// @brief Creates (truncates) `path`. @throws mgm::logic_error naming the path when it cannot.
  explicit csv_sink(const std::filesystem::path& path, bool units = true);
  csv_sink(csv_sink&&) noexcept;
  csv_sink& operator=(csv_sink&&) noexcept;
  csv_sink(const csv_sink&) = delete;
  csv_sink& operator=(const csv_sink&) = delete;
  ~csv_sink();

  /// @brief Appends a row per sample and flushes.
  void write(std::span<const device_sample> batch);

 private:
  std::unique_ptr<std::ostream> owned_;
  std::ostream* out_;
  bool units_;
};

/// @brief Writes `--query-compute-apps` CSV (`timestamp, gpu_uuid, pid, process_name,
/// used_gpu_memory [MiB]`): the header once, then a row per process of each sample (the sample's
/// time and UUID); flushes after each batch.
///
/// **Thread safety:** one writer at a time. **Device affinity:** none.
class process_csv_sink {
 public:
  explicit process_csv_sink(std::ostream& out, bool units = true);
  /// @throws mgm::logic_error naming the path when it cannot be created.
  explicit process_csv_sink(const std::filesystem::path& path, bool units = true);
  process_csv_sink(process_csv_sink&&) noexcept;
  process_csv_sink& operator=(process_csv_sink&&) noexcept;
  process_csv_sink(const process_csv_sink&) = delete;
  process_csv_sink& operator=(const process_csv_sink&) = delete;
  ~process_csv_sink();

  /// @brief A row per process of each sample, then a flush.
  void write(std::span<const device_sample> batch);
  /// @brief A row per process row, then a flush.
  void write(std::span<const process_row> rows);

 private:
  std::unique_ptr<std::ostream> owned_;
  std::ostream* out_;
  bool units_;
};

/// @brief Writes JSON lines (`to_json_line`), one per sample; flushes after each batch.
///
/// **Thread safety:** one writer at a time. **Device affinity:** none.
class jsonl_sink {
 public:
  explicit jsonl_sink(std::ostream& out);
  /// @throws mgm::logic_error naming the path when it cannot be created.
  explicit jsonl_sink(const std::filesystem::path& path);
  jsonl_sink(jsonl_sink&&) noexcept;
  jsonl_sink& operator=(jsonl_sink&&) noexcept;
  jsonl_sink(const jsonl_sink&) = delete;
  jsonl_sink& operator=(const jsonl_sink&) = delete;
  ~jsonl_sink();

  void write(std::span<const device_sample> batch);

 private:
  std::unique_ptr<std::ostream> owned_;
  std::ostream* out_;
};

}  // namespace mgm::telemetry
