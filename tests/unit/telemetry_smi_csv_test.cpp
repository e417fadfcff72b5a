// The nvidia-smi CSV reader and log times: every pitfall of the format on small inline inputs,
// and every real nvidia-smi CSV of ../shared/data against values read off the files by hand.
#include <mgm/error.hpp>
#include <mgm/telemetry/log_format.hpp>

#include "shared_data.hpp"
#include "telemetry_test_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace mgm::telemetry;
using namespace telemetry_test;
using namespace std::string_literals;


// ---------------------------------------------------------------------------------------------
// Times
// ---------------------------------------------------------------------------------------------

TEST_CASE("log times: nvidia-smi, ISO 8601 with zones, GPU-Z, Unix seconds", "[telemetry]") {
  REQUIRE(unix_ms(utc("1970/01/01 00:00:00.000")) == 0);
  REQUIRE(unix_ms(utc("2025/06/13 00:27:52.195")) == 1749774472195);
  REQUIRE(unix_ms(utc("2025-06-13 00:27:52")) == 1749774472000);
  REQUIRE(unix_ms(utc("2025-09-08T17:26:50+08:00")) == unix_ms(utc("2025-09-08T09:26:50Z")));
  REQUIRE(unix_ms(utc("2025-09-08T17:26:50+0800")) == unix_ms(utc("2025-09-08T09:26:50Z")));
  REQUIRE(unix_ms(utc("2025-09-08T01:26:50-08:00")) == unix_ms(utc("2025-09-08T09:26:50Z")));
  REQUIRE(unix_ms(utc("1762903990")) == 1762903990000);
  REQUIRE(unix_ms(utc("1762903990.25")) == 1762903990250);
  REQUIRE(unix_ms(utc("1762903990123")) == 1762903990123);  // milliseconds
  REQUIRE(unix_ms(utc("2024-02-29 12:00:00")) == 1709208000000);
  for (const char* bad : {"", "yesterday", "2025/13/01 00:00:00", "2023-02-29 00:00:00", "2025-06-13", "2025/06-13 00:00:00",
                          "2025-06-13 24:00:00", "2025-06-13T00:00:00+25:00", "1.2.3", "99999999999999999999999",
                          "2025-06-13 00:00:00 junk"}) {
    INFO(bad);
    REQUIRE_FALSE(parse_log_time(bad).has_value());
  }
  REQUIRE(format_smi_time(utc("2025/06/13 00:27:52.195")) == "2025/06/13 00:27:52.195");
  REQUIRE(format_iso_time(utc("2025/06/13 00:27:52.195")) == "2025-06-13T00:27:52.195Z");
  REQUIRE(format_smi_time(clock::time_point{}) == "1970/01/01 00:00:00.000");
}

// ---------------------------------------------------------------------------------------------
// nvidia-smi CSV
// ---------------------------------------------------------------------------------------------

TEST_CASE("smi csv: header and values with units, the usual nvidia-smi log", "[telemetry]") {
  const auto log = read_gpu_log(
      "timestamp, index, name, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], temperature.gpu, "
      "power.draw [W], clocks.current.sm [MHz], clocks.current.memory [MHz], pcie.link.gen.current, "
      "pcie.link.width.current, utilization.gpu [%]\n"
      "2024/03/12 17:48:46.990, 0, NVIDIA H100 80GB HBM3, GPU-aaaa, 81920 MiB, 74829 MiB, 7091 MiB, 70, 359.75 W, "
      "1980 MHz, 2619 MHz, 5, 16, 100 %\n"s);
  REQUIRE(log.format == "nvidia-smi-csv");
  REQUIRE(log.issues.empty());
  REQUIRE(log.has_timestamps);
  REQUIRE(log.samples.size() == 1);
  const auto& s = log.samples[0];
  REQUIRE(format_smi_time(s.time) == "2024/03/12 17:48:46.990");
  REQUIRE(s.index == 0);
  REQUIRE(s.name == "NVIDIA H100 80GB HBM3");
  REQUIRE(s.uuid == "GPU-aaaa");
  REQUIRE(s.key() == "GPU-aaaa");
  REQUIRE(s.memory_total == 81920 * mib);
  REQUIRE(s.memory_used == 74829 * mib);
  REQUIRE(s.memory_free == 7091 * mib);
  REQUIRE(s.temperature_c == 70.0);
  REQUIRE(s.power_draw_w == 359.75);
  REQUIRE(s.clock_sm_mhz == 1980u);
  REQUIRE(s.clock_mem_mhz == 2619u);
  REQUIRE(s.pcie_gen == 5u);
  REQUIRE(s.pcie_width == 16u);
  REQUIRE(s.utilization_gpu_pct == 100u);
  REQUIRE_FALSE(s.memory_reserved.has_value());
  REQUIRE_FALSE(s.power_limit_w.has_value());
}

TEST_CASE("smi csv: nounits values under a header that keeps units, aliases", "[telemetry]") {
  const auto log = read_smi_csv(
      "timestamp, index, memory.used [MiB], power.draw.instant [W], power.draw.average [W], clocks.sm [MHz], "
      "clocks.mem [MHz], pcie.link.gen.gpucurrent, enforced.power.limit [W], utilization.memory [%]\n"
      "2024/03/12 17:48:46.990, 1, 1094, 300.5, 280.25, 1410, 1215, 4, 400.00, 7\n"
      "2024/03/12 17:48:47.990, 1, 1095, 301.5, [N/A], 1410, 1215, 4, 400.00, 7\n"s);
  REQUIRE(log.issues.empty());
  REQUIRE(log.samples.size() == 2);
  REQUIRE(log.samples[0].index == 1);
  REQUIRE(log.samples[0].memory_used == 1094 * mib);
  REQUIRE(log.samples[0].power_draw_w == 280.25);  // average is preferred to instant
  REQUIRE(log.samples[1].power_draw_w == 301.5);   // the next alias when it is [N/A]
  REQUIRE(log.samples[0].clock_sm_mhz == 1410u);
  REQUIRE(log.samples[0].clock_mem_mhz == 1215u);
  REQUIRE(log.samples[0].pcie_gen == 4u);
  REQUIRE(log.samples[0].power_limit_w == 400.0);
  REQUIRE(log.samples[0].utilization_mem_pct == 7u);
}

TEST_CASE("smi csv: [N/A], [Not Supported] and N/A are empty, never 0", "[telemetry]") {
  const auto log = read_smi_csv(
      "index, name, memory.used [MiB], power.draw [W], temperature.gpu, utilization.gpu [%]\n"
      "0, GB10, [N/A], [Not Supported], N/A, 5 %\n"s);
  REQUIRE(log.issues.empty());
  REQUIRE(log.samples.size() == 1);
  const auto& s = log.samples[0];
  REQUIRE_FALSE(s.memory_used.has_value());
  REQUIRE_FALSE(s.power_draw_w.has_value());
  REQUIRE_FALSE(s.temperature_c.has_value());
  REQUIRE(s.utilization_gpu_pct == 5u);
  REQUIRE(s.missing == std::vector<std::string>{"power.draw: [Not Supported]"});
}

TEST_CASE("smi csv: a human nvidia-smi table before the header is skipped, not an issue", "[telemetry]") {
  const auto log = read_smi_csv(
      "Wed Jan  5 17:01:16 2022\n"
      "+-----------------------------------------------------------------------------+\n"
      "| NVIDIA-SMI 495.44       Driver Version: 495.44       CUDA Version: 11.5     |\n"
      "|   0  Tesla V100-SXM2...  On   | 00000000:16:00.0 Off |                    0 |\n"
      "\n"
      "index, name, memory.used [MiB]\n"
      "0, Tesla V100-SXM2-32GB, 10 MiB\n"s);
  REQUIRE(log.issues.empty());
  REQUIRE(log.samples.size() == 1);
  REQUIRE(log.samples[0].memory_used == 10 * mib);
}

TEST_CASE("smi csv: NUL bytes are dropped, a line they cut short is an issue, not shifted columns", "[telemetry]") {
  const std::string text =
      "index, name, memory.used [MiB], temperature.gpu\n"
      "0, A, 1 MiB, 30\n"s +
      std::string(40, '\0') + " 31\n"s +                                // the tail of a line: an issue
      std::string(3, '\0') + "0, A, 2 MiB, 32\n"s +                     // complete once NULs go
      "0, A, 3 M"s + std::string(2, '\0') + "iB, 33\n"s +              // NULs inside a value
      std::string(10, '\0') + "\n"s;                                   // nothing but NULs: blank
  const auto log = read_smi_csv(text);
  REQUIRE(log.samples.size() == 3);
  REQUIRE(log.samples[1].memory_used == 2 * mib);
  REQUIRE(log.samples[2].memory_used == 3 * mib);
  REQUIRE(log.issues.size() == 1);
  REQUIRE(log.issues[0].line == 3);
  REQUIRE_THAT(log.issues[0].message, Catch::Contains("expected 4 fields") && Catch::Contains("found 1") &&
                                          Catch::Contains("NUL"));
  try {
    (void)read_smi_csv(text, strict());
    FAIL("strict mode must throw");
  } catch (const mgm::parse_error& e) {
    REQUIRE(e.line() == 3);
    REQUIRE_THAT(e.what(), Catch::Contains("line 3"));
  }
}

TEST_CASE("smi csv: interleaved GPUs sharing index 0 are told apart by name, no timestamps", "[telemetry]") {
  log_read_options o;
  o.assumed_interval = std::chrono::duration<double>{10.0};
  const auto log = read_smi_csv(
      "index, name, memory.used [MiB]\n"
      "0, Tesla V100-SXM2-32GB, 1 MiB\n"
      "0, Tesla V100-PCIE-32GB, 2 MiB\n"
      "0, Tesla V100-SXM2-32GB, 3 MiB\n"
      "0, Tesla V100-SXM2-32GB, 4 MiB\n"s,
      o);
  REQUIRE_FALSE(log.has_timestamps);
  REQUIRE(log.samples.size() == 4);
  REQUIRE(keys(log) == std::set<std::string>{"0:Tesla V100-SXM2-32GB", "0:Tesla V100-PCIE-32GB"});
  // Each GPU's k-th row is at k * 10 s.
  REQUIRE(unix_ms(log.samples[0].time) == 0);
  REQUIRE(unix_ms(log.samples[1].time) == 0);
  REQUIRE(unix_ms(log.samples[2].time) == 10000);
  REQUIRE(unix_ms(log.samples[3].time) == 20000);
}

TEST_CASE("smi csv: noheader needs the columns option, with it, it reads", "[telemetry]") {
  const std::string text = "0, NVIDIA GeForce RTX 4090, 10602 MiB, 24564 MiB\n1, NVIDIA GeForce RTX 4080, 2 MiB, 16376 MiB\n";
  REQUIRE_THROWS_AS(read_gpu_log(text), mgm::parse_error);
  REQUIRE_THROWS_AS(read_smi_csv(text), mgm::parse_error);
  log_read_options o;
  o.columns = {"index", "name", "memory.used [MiB]", "memory.total [MiB]"};
  const auto log = read_gpu_log(text, o);
  REQUIRE(log.issues.empty());
  REQUIRE(log.samples.size() == 2);
  REQUIRE(log.samples[1].index == 1);
  REQUIRE(log.samples[1].name == "NVIDIA GeForce RTX 4080");
  REQUIRE(log.samples[1].memory_total == 16376 * mib);
  // A header in the file is skipped when the columns are given.
  const auto again = read_gpu_log("index, name, memory.used, memory.total\n" + text, o);
  REQUIRE(again.samples.size() == 2);
  REQUIRE(again.issues.empty());
}

TEST_CASE("smi csv: a script's own columns: units in the name, gpu_id, no spaces", "[telemetry]") {
  const auto log = read_smi_csv(
      "timestamp,gpu_id,name,utilization_gpu_pct,utilization_mem_pct,memory_used_mib,memory_total_mib,"
      "temperature_gpu_c,power_draw_w\n"
      "2026/03/28 07:01:15.523,0,NVIDIA GeForce RTX 4090,0,0,10602,24564,42,71.43\n"
      "2026/03/28 07:01:15.529,1,NVIDIA GeForce RTX 4080,0,1,2,16376,44,35.13\n"s);
  REQUIRE(log.issues.empty());
  REQUIRE(log.samples.size() == 2);
  REQUIRE(log.samples[1].index == 1);
  REQUIRE(log.samples[1].utilization_mem_pct == 1u);
  REQUIRE(log.samples[0].memory_used == 10602 * mib);
  REQUIRE(log.samples[0].memory_total == 24564 * mib);
  REQUIRE(log.samples[0].temperature_c == 42.0);
  REQUIRE(log.samples[0].power_draw_w == 71.43);
}

TEST_CASE("smi csv: `gpu` takes precedence over `index`, ISO times with an offset", "[telemetry]") {
  const auto log = read_smi_csv(
      "timestamp,gpu,index,memory.used,memory.total,power.draw,temperature.gpu\n"
      "2025-09-08T17:26:50+08:00,0, 0, 4, 81559, 74.01, 33\n"
      "2025-09-08T17:26:50+08:00,1, 0, 4, 81559, 73.23, 34\n"s);
  REQUIRE(log.samples.size() == 2);
  REQUIRE(log.samples[0].index == 0);
  REQUIRE(log.samples[1].index == 1);
  REQUIRE(keys(log).size() == 2);
  REQUIRE(format_smi_time(log.samples[0].time) == "2025/09/08 09:26:50.000");
  REQUIRE(log.samples[0].memory_used == 4 * mib);  // no unit: MiB
}

TEST_CASE("smi csv: Unix seconds, no index column numbers GPUs by first appearance", "[telemetry]") {
  const auto log = read_smi_csv(
      "timestamp,memory.used,memory.total,utilization.gpu\n"
      "1762903990,1, 24564, 0\n"
      "1762904051,594, 24564, 0\n"s);
  REQUIRE(log.samples.size() == 2);
  REQUIRE(unix_ms(log.samples[1].time) == 1762904051000);
  REQUIRE(log.samples[1].index == 0);
  REQUIRE(log.samples[1].memory_used == 594 * mib);
  const auto by_uuid = read_smi_csv("uuid, memory.used [MiB]\nGPU-b, 1\nGPU-a, 2\nGPU-b, 3\n"s);
  REQUIRE(by_uuid.samples.size() == 3);
  REQUIRE(by_uuid.samples[0].index == 0);
  REQUIRE(by_uuid.samples[1].index == 1);
  REQUIRE(by_uuid.samples[2].index == 0);
  REQUIRE_FALSE(by_uuid.has_timestamps);
}

TEST_CASE("smi csv: --query-compute-apps goes to process rows", "[telemetry]") {
  const auto log = read_gpu_log(
      "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
      "2024/03/12 17:48:46.990, GPU-aaaa, 3858903, VLLM::EngineCore, 6265 MiB\n"
      "2024/03/12 17:48:46.990, GPU-bbbb, 17, [Not Found], [N/A]\n"s);
  REQUIRE(log.issues.empty());
  REQUIRE(log.samples.empty());
  REQUIRE(log.process_rows.size() == 2);
  REQUIRE(log.process_rows[0].gpu_uuid == "GPU-aaaa");
  REQUIRE(log.process_rows[0].process.pid == 3858903u);
  REQUIRE(log.process_rows[0].process.name == "VLLM::EngineCore");
  REQUIRE(log.process_rows[0].process.used_bytes == 6265 * mib);
  REQUIRE(log.process_rows[1].process.name.empty());
  REQUIRE_FALSE(log.process_rows[1].process.used_bytes.has_value());
  REQUIRE(format_smi_time(log.process_rows[1].time) == "2024/03/12 17:48:46.990");
}

TEST_CASE("smi csv: strict and lenient on bad lines, errors name the line and column", "[telemetry]") {
  const std::string text =
      "timestamp, index, memory.used [MiB]\n"
      "2024/03/12 17:48:46.990, 0, 1 MiB\n"
      "2024/03/12 17:48:47.990, 0, lots\n"
      "Unable to determine the device handle for GPU 0000:17:00.0: GPU has fallen off the bus.\n"
      "not a time, 0, 1 MiB\n"
      "2024/03/12 17:48:48.990, x, 1 MiB\n"
      "2024/03/12 17:48:49.990, 0, 1 parsecs\n"
      "2024/03/12 17:48:50.990, 0, 5 MiB\r\n"s;
  const auto log = read_smi_csv(text);
  REQUIRE(log.samples.size() == 2);
  REQUIRE(log.samples[1].memory_used == 5 * mib);
  REQUIRE(log.issues.size() == 5);
  std::vector<std::size_t> lines;
  for (const auto& i : log.issues) lines.push_back(i.line);
  REQUIRE(lines == std::vector<std::size_t>{3, 4, 5, 6, 7});
  REQUIRE_THAT(log.issues[0].message, Catch::Contains("memory.used [MiB]") && Catch::Contains("lots"));
  try {
    (void)read_smi_csv(text, strict());
    FAIL("strict mode must throw");
  } catch (const mgm::parse_error& e) {
    REQUIRE(e.line() == 3);
    REQUIRE(e.column() == 29);
    REQUIRE_THAT(e.what(), Catch::Contains("line 3, column 29"));
  }
  REQUIRE_THROWS_AS(read_smi_csv(""), mgm::parse_error);
  REQUIRE_THROWS_AS(read_gpu_log("just words\n"), mgm::parse_error);
}

// ---------------------------------------------------------------------------------------------
// Real files
// ---------------------------------------------------------------------------------------------

TEST_CASE("realdata: every nvidia-smi CSV reads with the values it shows", "[telemetry][realdata]") {
  const auto dir = mgm_test::shared_data("nvidia-smi");
  if (dir.empty()) return;
  std::size_t csv_files = 0;
  for (const auto& e : std::filesystem::directory_iterator{dir}) csv_files += e.path().extension() == ".csv" ? 1 : 0;
  REQUIRE(csv_files == 7);  // a new file needs its expected values here

  SECTION("miris: 1x V100S, 1 s rows, 1 -> 1094 -> 1 MiB") {
    const auto log = read_gpu_log_file(dir / "csv_v100s_pcie_1s_memramp_miris.csv");
    REQUIRE(log.issues.empty());
    REQUIRE(log.samples.size() == 107);
    REQUIRE(keys(log) == std::set<std::string>{"0:Tesla V100S-PCIE-32GB"});
    REQUIRE(format_smi_time(log.samples.front().time) == "2025/06/13 00:27:52.195");
    REQUIRE(format_smi_time(log.samples.back().time) == "2025/06/13 00:29:38.248");
    REQUIRE(log.samples.front().memory_used == 1 * mib);
    REQUIRE(log.samples.front().memory_total == 32768 * mib);
    REQUIRE(log.samples.back().memory_used == 1 * mib);
    REQUIRE(log.samples.back().temperature_c == 28.0);
    std::uint64_t peak = 0;
    for (const auto& s : log.samples) peak = std::max(peak, s.memory_used.value_or(0));
    REQUIRE(peak == 1094 * mib);
  }
  SECTION("rckola e21ca9c: Unix seconds, 60 s rows, no index") {
    const auto log = read_gpu_log_file(dir / "csv_rtx_24564mib_60s_warmup_plateau_rckola_e21ca9c.csv");
    REQUIRE(log.issues.empty());
    REQUIRE(log.has_timestamps);
    REQUIRE(log.samples.size() == 122);
    REQUIRE(keys(log).size() == 1);
    REQUIRE(unix_ms(log.samples.front().time) == 1762903990000);
    REQUIRE(log.samples.front().memory_used == 1 * mib);
    REQUIRE(log.samples.front().memory_total == 24564 * mib);
    REQUIRE(unix_ms(log.samples.back().time) == 1762911283000);
    REQUIRE(log.samples.back().memory_used == 13854 * mib);
    REQUIRE(log.samples.back().utilization_gpu_pct == 83u);
  }
  SECTION("rckola 076d3d9") {
    const auto log = read_gpu_log_file(dir / "csv_rtx_24576mib_60s_stepwise_growth_rckola_076d3d9.csv");
    REQUIRE(log.issues.empty());
    REQUIRE(log.samples.size() == 90);
    REQUIRE(unix_ms(log.samples.front().time) == 1764189075000);
    REQUIRE(log.samples.front().memory_total == 24576 * mib);
    REQUIRE(unix_ms(log.samples.back().time) == 1764194422000);
    REQUIRE(log.samples.back().memory_used == 10904 * mib);
    REQUIRE(log.samples.back().utilization_gpu_pct == 59u);
  }
  SECTION("baikal: a script's columns, 2 GPUs") {
    const auto log = read_gpu_log_file(dir / "csv_rtx4090_rtx4080_2gpu_30s_nounits_baikal.csv");
    REQUIRE(log.issues.empty());
    REQUIRE(log.samples.size() == 96);
    REQUIRE(keys(log) == std::set<std::string>{"0:NVIDIA GeForce RTX 4090", "1:NVIDIA GeForce RTX 4080"});
    const auto& first = log.samples.front();
    REQUIRE(first.index == 0);
    REQUIRE(format_smi_time(first.time) == "2026/03/28 07:01:15.523");
    REQUIRE(first.memory_used == 10602 * mib);
    REQUIRE(first.memory_total == 24564 * mib);
    REQUIRE(first.power_draw_w == 71.43);
    REQUIRE(first.temperature_c == 42.0);
    const auto& last = log.samples.back();
    REQUIRE(last.index == 1);
    REQUIRE(last.memory_used == 2 * mib);
    REQUIRE(last.power_draw_w == 35.55);
    REQUIRE(log.samples[log.samples.size() - 2].power_draw_w == 382.98);
    REQUIRE(log.samples[log.samples.size() - 2].utilization_gpu_pct == 93u);
  }
  SECTION("theabrusch: human table, NUL runs, GPUs interleaved, no timestamps") {
    const auto log = read_gpu_log_file(dir / "csv_v100_10s_table_plus_csv_nulbytes_interleaved_theabrusch.csv");
    REQUIRE_FALSE(log.has_timestamps);
    REQUIRE(log.samples.size() == 913);
    REQUIRE(log.issues.size() == 2);
    REQUIRE(log.issues[0].line == 24);  // NULs then " P0, 100 %, 10 %"
    REQUIRE(log.issues[1].line == 264); // "0 %"
    std::map<std::string, std::size_t> per_gpu;
    for (const auto& s : log.samples) ++per_gpu[s.key()];
    // Two real GPUs; two rows of the published file have names damaged in the file itself.
    REQUIRE(per_gpu.size() == 4);
    REQUIRE(per_gpu["0:Tesla V100-SXM2-32GB"] == 616);
    REQUIRE(per_gpu["0:Tesla V100-PCIE-32GB"] == 295);
    REQUIRE(per_gpu["0:Tesla V100-SPCIE-32GB"] == 1);
    REQUIRE(per_gpu["0:Te V100-PCIE-32GB"] == 1);
    REQUIRE(log.samples.front().memory_used == std::uint64_t{0});
    REQUIRE(log.samples.front().memory_total == 32510 * mib);
    REQUIRE(log.samples.back().memory_used == 30062 * mib);
    REQUIRE(log.samples.back().utilization_gpu_pct == 93u);
    REQUIRE(log.samples.back().utilization_mem_pct == 59u);
    REQUIRE_THROWS_AS(read_gpu_log_file(dir / "csv_v100_10s_table_plus_csv_nulbytes_interleaved_theabrusch.csv", strict()),
                      mgm::parse_error);
  }
  SECTION("gpuglasses: 8x H100, gpu over index, ISO times with +08:00") {
    const auto log = read_gpu_log_file(dir / "csv_8x_h100_derived_format_gpuglasses.csv");
    REQUIRE(log.issues.empty());
    REQUIRE(log.samples.size() == 43);
    REQUIRE(keys(log).size() == 8);
    std::set<int> indices;
    for (const auto& s : log.samples) indices.insert(s.index);
    REQUIRE(indices == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7});
    REQUIRE(format_smi_time(log.samples.front().time) == "2025/09/08 09:26:50.000");
    REQUIRE(log.samples.front().power_draw_w == 74.01);
    REQUIRE(log.samples.front().memory_used == 4 * mib);
    REQUIRE(log.samples.front().memory_total == 81559 * mib);
    REQUIRE(log.samples.back().index == 2);
    REQUIRE(log.samples.back().power_draw_w == 72.96);
    REQUIRE(format_smi_time(log.samples.back().time) == "2025/09/08 09:26:58.000");
  }
  SECTION("netdata P100: nounits under a unit header, [N/A], memory.reserved, no final line end") {
    const auto log = read_gpu_log_file(dir / "csv_tesla_p100_nounits_reserved_netdata.csv", strict());
    REQUIRE(log.samples.size() == 1);
    REQUIRE_FALSE(log.has_timestamps);
    const auto& s = log.samples[0];
    REQUIRE(s.uuid == "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6");
    REQUIRE(s.name == "Tesla P100-PCIE-16GB");
    REQUIRE(s.memory_reserved == 103 * mib);
    REQUIRE(s.memory_used == std::uint64_t{0});
    REQUIRE(s.memory_free == 16280 * mib);
    REQUIRE(s.temperature_c == 37.0);
    REQUIRE(s.power_draw_w == 28.16);
    REQUIRE(s.clock_sm_mhz == 405u);
    REQUIRE(s.clock_mem_mhz == 715u);
    REQUIRE(s.utilization_gpu_pct == 0u);
  }
}
