// The GPU-Z sensor log reader: its pitfalls on small inline inputs, and every real GPU-Z log of
// ../shared/data against values read off the files by hand.
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
// GPU-Z
// ---------------------------------------------------------------------------------------------

TEST_CASE("gpuz: padded fields, trailing comma, Windows-1252, CRLF, a repeated column", "[telemetry]") {
  const std::string text =
      "        Date        , GPU Clock [MHz] , UVD Clock [MHz] , UVD Clock [MHz] , GPU Temperature [\xB0" "C] , "
      "Memory Used (Dedicated) [MB] , Board Power Draw [W] , GPU Load [%] , Memory Controller Load [%] ,\r\n"
      "2020-03-16 17:13:05 ,         789.0   ,         105.0   ,         102.0   ,               50.5   ,"
      "                        534   ,               104.4   ,          7   ,                        3   ,\r\n"
      "2020-03-16 17:13:06 ,         790.0   ,         105.0   ,         102.0   ,               51.0   ,"
      "                        535   ,               104.5   ,          8   ,                        4   ,\r\n";
  REQUIRE(detect_log_format(text) == log_format::gpuz);
  const auto log = read_gpu_log(text);
  REQUIRE(log.format == "gpuz");
  REQUIRE(log.issues.empty());
  REQUIRE(log.samples.size() == 2);
  const auto& s = log.samples[0];
  REQUIRE(format_smi_time(s.time) == "2020/03/16 17:13:05.000");
  REQUIRE(s.index == 0);
  REQUIRE(s.name == "GPU-Z");
  REQUIRE(s.clock_sm_mhz == 789u);
  REQUIRE(s.temperature_c == 50.5);
  REQUIRE(s.memory_used == 534 * mib);
  REQUIRE(s.power_draw_w == 104.4);
  REQUIRE(s.utilization_gpu_pct == 7u);
  REQUIRE(s.utilization_mem_pct == 3u);
  REQUIRE_FALSE(s.memory_total.has_value());
  // LF only, old column names.
  const auto old = read_gpuz_log(
      "        Date        , GPU Core Clock [MHz] , GPU Memory Clock [MHz] , Memory Usage (Dedicated) [MB] ,\n"
      "2016-01-09 15:10:13 ,              135.0   ,                405.0   ,                          12   ,\n"s);
  REQUIRE(old.samples.size() == 1);
  REQUIRE(old.samples[0].clock_sm_mhz == 135u);
  REQUIRE(old.samples[0].clock_mem_mhz == 405u);
  REQUIRE(old.samples[0].memory_used == 12 * mib);
  log_read_options named;
  named.device_name = "RTX 3060";
  REQUIRE(read_gpuz_log(text, named).samples[0].name == "RTX 3060");
}

TEST_CASE("gpuz: bad rows are issues naming the line, strict throws, the column name is UTF-8", "[telemetry]") {
  const std::string text =
      "        Date        , GPU Temperature [\xB0" "C] , Memory Used [MB] ,\r\n"
      "2021-08-02 23:28:33 ,               67.0   ,           1697   ,\r\n"
      "2021-08-02 23:28:34 ,               hot    ,           1697   ,\r\n"
      "2021-08-02 23:28:35 ,               67.0   ,\r\n"
      "2021-08-0" + std::string(5, '\0') + "\r\n"
      "yesterday           ,               67.0   ,           1697   ,\r\n"
      "2021-08-02 23:28:36 ,                      ,           1698   ,\r\n";
  const auto log = read_gpuz_log(text);
  REQUIRE(log.samples.size() == 2);
  REQUIRE_FALSE(log.samples[1].temperature_c.has_value());
  REQUIRE(log.samples[1].memory_used == 1698 * mib);
  REQUIRE(log.issues.size() == 4);
  REQUIRE(log.issues[0].line == 3);
  REQUIRE_THAT(log.issues[0].message, Catch::Contains("GPU Temperature [\xC2\xB0" "C]") && Catch::Contains("hot"));
  REQUIRE(log.issues[1].line == 4);
  REQUIRE(log.issues[2].line == 5);
  REQUIRE_THAT(log.issues[2].message, Catch::Contains("NUL"));
  REQUIRE(log.issues[3].line == 6);
  try {
    (void)read_gpuz_log(text, strict());
    FAIL("strict mode must throw");
  } catch (const mgm::parse_error& e) {
    REQUIRE(e.line() == 3);
    REQUIRE(e.column() > 0);
  }
  REQUIRE_THROWS_AS(read_gpuz_log("2021-08-02 23:28:33 , 1 ,\n"), mgm::parse_error);
}

// ---------------------------------------------------------------------------------------------
// Real files
// ---------------------------------------------------------------------------------------------

TEST_CASE("realdata: every GPU-Z sensor log reads with the values it shows", "[telemetry][realdata]") {
  const auto dir = mgm_test::shared_data("gpuz");
  if (dir.empty()) return;
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator{dir}) ++files;
  REQUIRE(files == 4);  // a new file needs its expected values here

  SECTION("2016, old column names, LF, the header repeated where logging restarted") {
    const auto log = read_gpu_log_file(dir / "gpuz_sensorlog_2016_oldcolumns_lf_turgon.txt", strict());
    REQUIRE(log.format == "gpuz");
    REQUIRE(log.samples.size() == 4271);  // 4274 lines, 3 of them headers (lines 1, 3876, 3961)
    REQUIRE(keys(log) == std::set<std::string>{"0:gpuz_sensorlog_2016_oldcolumns_lf_turgon"});
    const auto& f = log.samples.front();
    REQUIRE(format_smi_time(f.time) == "2016/01/09 15:10:13.000");
    REQUIRE(f.clock_sm_mhz == 135u);
    REQUIRE(f.clock_mem_mhz == 405u);
    REQUIRE(f.temperature_c == 40.0);
    REQUIRE(f.memory_used == std::uint64_t{0});
    REQUIRE(f.utilization_gpu_pct == 0u);
    const auto& l = log.samples.back();
    REQUIRE(format_smi_time(l.time) == "2016/01/12 13:12:30.000");
    REQUIRE(l.clock_sm_mhz == 405u);
    REQUIRE(l.temperature_c == 46.0);
  }
  SECTION("AMD 2020, a repeated column, no board power, 12 headers") {
    const auto log = read_gpu_log_file(dir / "gpuz_sensorlog_amd_2020_amddebug.txt", strict());
    REQUIRE(log.samples.size() == 1673);  // 1685 lines, 12 of them headers
    const auto& f = log.samples.front();
    REQUIRE(format_smi_time(f.time) == "2020/03/16 17:13:05.000");
    REQUIRE(f.clock_sm_mhz == 789u);
    REQUIRE(f.clock_mem_mhz == 200u);
    REQUIRE(f.temperature_c == 50.0);
    REQUIRE(f.memory_used == 534 * mib);
    REQUIRE_FALSE(f.power_draw_w.has_value());  // only "GPU Chip Power Draw"
    const auto& l = log.samples.back();
    REQUIRE(format_smi_time(l.time) == "2020/03/18 18:55:58.000");
    REQUIRE(l.clock_sm_mhz == 929u);
    REQUIRE(l.clock_mem_mhz == 980u);
    REQUIRE(l.temperature_c == 53.0);
    REQUIRE(l.memory_used == 397 * mib);
    REQUIRE(l.utilization_gpu_pct == 2u);
    REQUIRE(l.utilization_mem_pct == 1u);
  }
  SECTION("NVIDIA 2024, Board Power Draw, two fans") {
    const auto log = read_gpu_log_file(dir / "gpuz_sensorlog_nvidia_2024_richardtokar.txt", strict());
    REQUIRE(log.samples.size() == 356);
    const auto& f = log.samples.front();
    REQUIRE(format_smi_time(f.time) == "2024/04/20 13:02:09.000");
    REQUIRE(f.clock_sm_mhz == 2490u);
    REQUIRE(f.clock_mem_mhz == 2063u);  // 2062.7
    REQUIRE(f.temperature_c == 56.6);
    REQUIRE(f.memory_used == 5392 * mib);
    REQUIRE(f.power_draw_w == 104.4);
    REQUIRE(f.utilization_gpu_pct == 99u);
    const auto& l = log.samples.back();
    REQUIRE(format_smi_time(l.time) == "2024/04/20 13:08:04.000");
    REQUIRE(l.power_draw_w == 118.8);
    REQUIRE(l.temperature_c == 60.3);
  }
  SECTION("NVIDIA 2021, 6-pin") {
    const auto log = read_gpu_log_file(dir / "gpuz_sensorlog_nvidia_6pin_2021_gokayge.txt", strict());
    REQUIRE(log.samples.size() == 9);
    REQUIRE(log.samples.front().memory_used == 1697 * mib);
    REQUIRE(log.samples.front().power_draw_w == 33.6);
    REQUIRE(log.samples.front().temperature_c == 67.0);
    REQUIRE(format_smi_time(log.samples.back().time) == "2021/08/02 23:28:41.000");
    REQUIRE(log.samples.back().power_draw_w == 34.9);
    REQUIRE(log.samples.back().utilization_gpu_pct == 19u);
  }
}
