// What the tests of the GPU log readers and writers share (telemetry_smi_csv_test.cpp,
// telemetry_smi_query_test.cpp, telemetry_gpuz_test.cpp, telemetry_sinks_test.cpp): times, strict
// options, a full sample.
#pragma once

#include <mgm/telemetry/log_format.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <set>
#include <string>

namespace telemetry_test {

using namespace mgm::telemetry;

inline constexpr std::uint64_t mib = 1024 * 1024;

inline clock::time_point utc(const char* text) {
  const auto t = parse_log_time(text);
  REQUIRE(t.has_value());
  return *t;
}

inline std::int64_t unix_ms(clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

inline log_read_options strict() {
  log_read_options o;
  o.strict = true;
  return o;
}

inline std::set<std::string> keys(const gpu_log& log) {
  std::set<std::string> out;
  for (const auto& s : log.samples) out.insert(s.key());
  return out;
}

inline device_sample full_sample(int index) {
  device_sample s;
  s.time = utc("2025-06-13T00:27:52.195Z") + std::chrono::seconds{index};
  s.index = index;
  s.uuid = "GPU-0000000" + std::to_string(index) + "-1111-2222-3333-444444444444";
  s.name = "NVIDIA H100 80GB HBM3";
  s.memory_total = 81559 * mib;
  s.memory_used = 1094 * mib;
  s.memory_free = (81559 - 1094 - 500) * mib;
  s.memory_reserved = 500 * mib;
  s.temperature_c = 33;
  s.power_draw_w = 359.75;
  s.power_limit_w = 700;
  s.clock_sm_mhz = 1980;
  s.clock_mem_mhz = 2619;
  s.pcie_gen = 5;
  s.pcie_width = 16;
  s.utilization_gpu_pct = 100;
  s.utilization_mem_pct = 42;
  s.pcie_rx_mb_s = 123.45;
  s.pcie_tx_mb_s = 6.5;
  s.nvlink_up = 18;
  s.pool_allocated = 1024 * mib;
  s.pool_reserved = 2048 * mib;
  return s;
}

// The metrics our CSV carries (DESIGN.md §7): all of device_sample but pci_bus_id,
// utilization_mem_pct, cuda_ordinal, processes and missing.
inline void require_same_csv_fields(const device_sample& a, const device_sample& b) {
  REQUIRE(unix_ms(a.time) == unix_ms(b.time));
  REQUIRE(a.index == b.index);
  REQUIRE(a.uuid == b.uuid);
  REQUIRE(a.name == b.name);
  REQUIRE(a.memory_total == b.memory_total);
  REQUIRE(a.memory_used == b.memory_used);
  REQUIRE(a.memory_free == b.memory_free);
  REQUIRE(a.memory_reserved == b.memory_reserved);
  REQUIRE(a.temperature_c == b.temperature_c);
  REQUIRE(a.power_draw_w == b.power_draw_w);
  REQUIRE(a.power_limit_w == b.power_limit_w);
  REQUIRE(a.clock_sm_mhz == b.clock_sm_mhz);
  REQUIRE(a.clock_mem_mhz == b.clock_mem_mhz);
  REQUIRE(a.pcie_gen == b.pcie_gen);
  REQUIRE(a.pcie_width == b.pcie_width);
  REQUIRE(a.utilization_gpu_pct == b.utilization_gpu_pct);
  REQUIRE(a.pcie_rx_mb_s == b.pcie_rx_mb_s);
  REQUIRE(a.pcie_tx_mb_s == b.pcie_tx_mb_s);
  REQUIRE(a.nvlink_up == b.nvlink_up);
  REQUIRE(a.pool_allocated == b.pool_allocated);
  REQUIRE(a.pool_reserved == b.pool_reserved);
}

}  // namespace telemetry_test
