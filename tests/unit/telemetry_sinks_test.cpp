// The writers (CSV, per-process CSV, JSON lines, Prometheus text) and the JSON lines reader:
// formatting, round trips through the readers, and real logs written by our sinks read back.
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
// Writers and round trips
// ---------------------------------------------------------------------------------------------

TEST_CASE("csv sink: nvidia-smi's header and formatting, [N/A] for what is missing", "[telemetry]") {
  std::ostringstream out;
  csv_sink sink{out};
  REQUIRE(out.str() == csv_header() + "\n");  // the header is written (and flushed) at once
  device_sample bare;
  bare.time = utc("2025/06/13 00:27:52.195");
  bare.index = 3;
  bare.name = "Tesla, with a comma";
  const std::vector<device_sample> batch{full_sample(0), bare};
  sink.write(batch);
  std::istringstream lines{out.str()};
  std::string header;
  std::string row0;
  std::string row1;
  std::getline(lines, header);
  std::getline(lines, row0);
  std::getline(lines, row1);
  REQUIRE(header ==
          "timestamp, index, uuid, name, memory.total [MiB], memory.used [MiB], memory.free [MiB], memory.reserved [MiB], "
          "temperature.gpu, power.draw [W], power.limit [W], clocks.current.sm [MHz], clocks.current.memory [MHz], "
          "pcie.link.gen.current, pcie.link.width.current, utilization.gpu [%], mgm.pcie.rx [MB/s], mgm.pcie.tx [MB/s], "
          "mgm.nvlink.up, mgm.pool.allocated [MiB], mgm.pool.reserved [MiB]");
  REQUIRE(row0 ==
          "2025/06/13 00:27:52.195, 0, GPU-00000000-1111-2222-3333-444444444444, NVIDIA H100 80GB HBM3, 81559 MiB, 1094 MiB, "
          "79965 MiB, 500 MiB, 33, 359.75 W, 700.00 W, 1980 MHz, 2619 MHz, 5, 16, 100 %, 123.45 MB/s, 6.50 MB/s, 18, "
          "1024 MiB, 2048 MiB");
  REQUIRE(row1 ==
          "2025/06/13 00:27:52.195, 3, [N/A], Tesla  with a comma, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], "
          "[N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]");
  REQUIRE(csv_row(full_sample(0), false).find("81559, 1094, 79965, 500, 33, 359.75, 700.00, 1980, 2619, 5, 16, 100, "
                                              "123.45, 6.50, 18, 1024, 2048") != std::string::npos);
}

TEST_CASE("csv sink: write then read gives the same samples, with and without units", "[telemetry]") {
  for (const bool units : {true, false}) {
    INFO("units " << units);
    std::ostringstream out;
    csv_sink sink{out, units};
    std::vector<device_sample> batch{full_sample(0), full_sample(1)};
    batch[1].temperature_c = 56.6;
    batch[1].power_draw_w.reset();
    batch[1].memory_reserved.reset();
    sink.write(batch);
    sink.write(std::vector<device_sample>{full_sample(2)});
    const auto log = read_gpu_log(out.str(), strict());
    REQUIRE(log.format == "mgm-csv");
    REQUIRE(log.issues.empty());
    REQUIRE(log.samples.size() == 3);
    require_same_csv_fields(log.samples[0], batch[0]);
    require_same_csv_fields(log.samples[1], batch[1]);
    require_same_csv_fields(log.samples[2], full_sample(2));
  }
}

TEST_CASE("csv sink: to a file, complete after each batch, a bad path names itself", "[telemetry]") {
  const auto path = std::filesystem::temp_directory_path() / "mgm_telemetry_formats_test.csv";
  {
    csv_sink sink{path};
    sink.write(std::vector<device_sample>{full_sample(0)});
    const auto log = read_gpu_log_file(path, strict());  // the sink is still open
    REQUIRE(log.samples.size() == 1);
    REQUIRE(log.samples[0].memory_used == 1094 * mib);
  }
  std::filesystem::remove(path);
  REQUIRE_THROWS_WITH(csv_sink(std::filesystem::path{"/nonexistent-dir/x.csv"}), Catch::Contains("/nonexistent-dir/x.csv"));
  REQUIRE_THROWS_WITH(read_gpu_log_file("/nonexistent-dir/log.csv"), Catch::Contains("/nonexistent-dir/log.csv"));
}

TEST_CASE("process csv sink: --query-compute-apps form, read back as process rows", "[telemetry]") {
  std::ostringstream out;
  process_csv_sink sink{out};
  auto s = full_sample(0);
  s.processes = {{1234, "python", 6265 * mib}, {77, "", std::nullopt}};
  sink.write(std::vector<device_sample>{s});
  REQUIRE(out.str() ==
          "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
          "2025/06/13 00:27:52.195, GPU-00000000-1111-2222-3333-444444444444, 1234, python, 6265 MiB\n"
          "2025/06/13 00:27:52.195, GPU-00000000-1111-2222-3333-444444444444, 77, [N/A], [N/A]\n");
  const auto log = read_gpu_log(out.str(), strict());
  REQUIRE(log.process_rows.size() == 2);
  REQUIRE(log.process_rows[0].process.pid == 1234u);
  REQUIRE(log.process_rows[0].process.used_bytes == 6265 * mib);
  REQUIRE(log.process_rows[0].gpu_uuid == s.uuid);
  std::ostringstream bare;
  process_csv_sink nounits{bare, false};
  nounits.write(log.process_rows);
  REQUIRE(bare.str().find("1234, python, 6265\n") != std::string::npos);
}

TEST_CASE("jsonl sink: one object per sample, every field read back exactly", "[telemetry]") {
  std::ostringstream out;
  jsonl_sink sink{out};
  auto a = full_sample(0);
  a.memory_used = 1094 * mib + 12345;  // not whole MiB: kept to the byte
  a.pci_bus_id = "00000000:17:00.0";
  a.cuda_ordinal = 2;
  a.processes = {{1234, "python \"quoted\"", 6265 * mib}, {77, "", std::nullopt}};
  a.missing = {"power.limit: NVML_ERROR_NOT_SUPPORTED"};
  device_sample b;
  b.time = utc("2025-06-13T00:27:53.001Z");
  b.index = 1;
  b.name = "bare";
  sink.write(std::vector<device_sample>{a, b});
  const std::string text = out.str();
  REQUIRE(std::count(text.begin(), text.end(), '\n') == 2);
  REQUIRE(text.rfind("{\"timestamp\":\"2025-06-13T00:27:52.195Z\",\"index\":0,", 0) == 0);
  // Every key with a unit says it (issue 15); logs with the older names (`memory.used`) still read,
  // as the next test shows.
  for (const char* key : {"\"memory.used_mib\":", "\"memory.total_mib\":", "\"power.draw_w\":", "\"temperature.gpu_c\":",
                          "\"clocks.current.sm_mhz\":", "\"utilization.gpu_pct\":", "\"used_gpu_memory_mib\":"}) {
    INFO(key);
    REQUIRE(text.find(key) != std::string::npos);
  }
  REQUIRE(text.find("\"memory.used\":") == std::string::npos);
  REQUIRE(detect_log_format(text) == log_format::jsonl);
  const auto log = read_gpu_log(text, strict());
  REQUIRE(log.format == "jsonl");
  REQUIRE(log.samples.size() == 2);
  const auto& r = log.samples[0];
  require_same_csv_fields(r, a);
  REQUIRE(r.pci_bus_id == a.pci_bus_id);
  REQUIRE(r.cuda_ordinal == 2);
  REQUIRE(r.utilization_mem_pct == 42u);
  REQUIRE(r.processes.size() == 2);
  REQUIRE(r.processes[0].name == "python \"quoted\"");
  REQUIRE(r.processes[0].used_bytes == 6265 * mib);
  REQUIRE_FALSE(r.processes[1].used_bytes.has_value());
  REQUIRE(r.missing == a.missing);
  require_same_csv_fields(log.samples[1], b);
  REQUIRE_FALSE(log.samples[1].memory_used.has_value());
}

TEST_CASE("jsonl: bad lines are issues naming the line, strict throws", "[telemetry]") {
  const std::string text =
      "{\"timestamp\":\"2025-06-13T00:27:52.195Z\",\"index\":0,\"name\":\"a\",\"memory.used\":1}\n"
      "{\"timestamp\":\"2025-06-13T00:27:52.195Z\",\"index\":0,\"name\":\"a\",\"memory.used\":\"lots\"}\n"
      "{\"timestamp\":\"2025-06-13T00:27:52.1\n"
      "{\"index\":0}\n"
      "[1,2]\n"
      "{\"timestamp\":1749774473,\"index\":-1}\n"
      "{\"timestamp\":1749774473.5,\"index\":1,\"memory.used\":2}\n";
  const auto log = read_jsonl_log(text);
  REQUIRE(log.samples.size() == 2);
  REQUIRE(unix_ms(log.samples[1].time) == 1749774473500);
  REQUIRE(log.samples[1].memory_used == 2 * mib);
  REQUIRE(log.issues.size() == 5);
  REQUIRE(log.issues[0].line == 2);
  REQUIRE_THAT(log.issues[0].message, Catch::Contains("memory.used"));
  REQUIRE(log.issues[4].line == 6);
  REQUIRE_THROWS_MATCHES(read_jsonl_log(text, strict()), mgm::parse_error,
                         Catch::Predicate<mgm::parse_error>([](const mgm::parse_error& e) { return e.line() == 2; }));
}

TEST_CASE("prometheus: HELP and TYPE once per metric, labelled series, escaped labels", "[telemetry]") {
  auto a = full_sample(0);
  a.name = "odd \"name\"\\ \n";
  a.processes = {{1234, "python", 6265 * mib}};
  device_sample b;
  b.index = 1;
  b.uuid = "GPU-b";
  b.name = "B";
  b.memory_used = 2 * mib;
  const std::vector<device_sample> batch{a, b};
  const auto text = to_prometheus(batch);
  const std::string labels_a = "gpu=\"0\",uuid=\"" + a.uuid + "\",pci_bus_id=\"" + a.pci_bus_id +
                               "\",model_name=\"odd \\\"name\\\"\\\\ \\n\"";
  REQUIRE_THAT(text, Catch::Contains("# HELP mgm_gpu_memory_used_bytes "));
  REQUIRE_THAT(text, Catch::Contains("# TYPE mgm_gpu_memory_used_bytes gauge\n"
                                     "mgm_gpu_memory_used_bytes{" + labels_a + "} 1147142144\n"
                                     "mgm_gpu_memory_used_bytes{gpu=\"1\",uuid=\"GPU-b\",pci_bus_id=\"\",model_name=\"B\"} 2097152\n"));
  REQUIRE_THAT(text, Catch::Contains("mgm_gpu_power_draw_watts{" + labels_a + "} 359.75\n"));
  REQUIRE_THAT(text, Catch::Contains("mgm_gpu_sm_clock_hertz{" + labels_a + "} 1.98e+09\n"));
  REQUIRE_THAT(text, Catch::Contains("mgm_gpu_utilization_ratio{" + labels_a + "} 1\n"));
  REQUIRE_THAT(text, Catch::Contains("mgm_gpu_process_memory_used_bytes{" + labels_a +
                                     ",pid=\"1234\",process_name=\"python\"} 6569328640\n"));
  // B has no power reading: no series for it; HELP appears once per metric.
  REQUIRE(text.find("mgm_gpu_power_draw_watts{gpu=\"1\"") == std::string::npos);
  std::size_t helps = 0;
  for (auto at = text.find("# HELP mgm_gpu_memory_used_bytes "); at != std::string::npos;
       at = text.find("# HELP mgm_gpu_memory_used_bytes ", at + 1)) {
    ++helps;
  }
  REQUIRE(helps == 1);
  REQUIRE(to_prometheus({}).empty());
}

// ---------------------------------------------------------------------------------------------
// Real files
// ---------------------------------------------------------------------------------------------

TEST_CASE("realdata: real logs written by our sinks read back the same", "[telemetry][realdata]") {
  const auto dir = mgm_test::shared_data("nvidia-smi");
  if (dir.empty()) return;
  const auto log = read_gpu_log_file(dir / "csv_rtx4090_rtx4080_2gpu_30s_nounits_baikal.csv");
  std::ostringstream csv;
  std::ostringstream jsonl;
  csv_sink{csv}.write(log.samples);
  jsonl_sink{jsonl}.write(log.samples);
  const auto from_csv = read_gpu_log(csv.str(), strict());
  const auto from_jsonl = read_gpu_log(jsonl.str(), strict());
  REQUIRE(from_csv.samples.size() == log.samples.size());
  REQUIRE(from_jsonl.samples.size() == log.samples.size());
  for (std::size_t i = 0; i < log.samples.size(); ++i) {
    require_same_csv_fields(from_csv.samples[i], log.samples[i]);
    require_same_csv_fields(from_jsonl.samples[i], log.samples[i]);
    REQUIRE(from_jsonl.samples[i].utilization_mem_pct == log.samples[i].utilization_mem_pct);
  }
}
