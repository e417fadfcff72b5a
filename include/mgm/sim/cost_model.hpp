/// @file
/// @brief `sim::cost_model`: what each driver call costs on the simulated machine (modelled).
///
/// Every constant is the recommended model of ../shared/research/driver-costs.md §3, row by row
/// (the `R` numbers are that page's rows); none is ours. The constants are frozen: a later change
/// may not tune them to meet a target. Every figure derived from them is *modelled*, never
/// measured, and is reported as such.
///
/// Terms (driver-costs.md §3): `MiB(b) = b / 2^20`; `G(b) = ceil(b / 2 MiB)` granules; the slope
/// `s` is two-regime: bytes the device has held before (below its high-water mark of memory ever
/// obtained, "recycled") cost `recycled_us_per_mib`, bytes above it (first use) `first_use_us_per_mib`.
/// Where a request straddles the mark, the part below it is charged at the recycled slope and the
/// rest at the first-use slope.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mgm::sim {

/// @brief The kinds of driver call the simulator prices and counts (the keys of
/// `replay_result::driver_calls`).
enum class driver_call : std::uint8_t {
  malloc,        ///< cudaMalloc
  free,          ///< cudaFree (synchronises the device)
  reserve,       ///< cuMemAddressReserve
  unreserve,     ///< cuMemAddressFree
  create,        ///< cuMemCreate
  release,       ///< cuMemRelease
  map,           ///< cuMemMap
  unmap,         ///< cuMemUnmap (synchronises the device)
  set_access,    ///< cuMemSetAccess
  event_record,  ///< cudaEventRecord
  event_query,   ///< cudaEventQuery
  event_wait,    ///< cudaStreamWaitEvent
  peer_enable,   ///< cudaDeviceEnablePeerAccess
};
inline constexpr std::size_t driver_call_kinds = 13;

/// @brief The JSON key of a kind: "malloc", "free", ..., "peer_enable".
[[nodiscard]] constexpr std::string_view name(driver_call k) noexcept {
  constexpr std::array<std::string_view, driver_call_kinds> names{
      "malloc", "free",       "reserve",      "unreserve",   "create",     "release",    "map",
      "unmap",  "set_access", "event_record", "event_query", "event_wait", "peer_enable"};
  return names[static_cast<std::size_t>(k)];
}

/// @brief True for the calls that obtain, map or give back memory (what
/// `upstream_calls_after_first_iteration` counts): every kind except `unreserve`, events and peers.
[[nodiscard]] constexpr bool is_upstream_call(driver_call k) noexcept {
  switch (k) {
    case driver_call::malloc:
    case driver_call::free:
    case driver_call::reserve:
    case driver_call::create:
    case driver_call::release:
    case driver_call::map:
    case driver_call::unmap:
    case driver_call::set_access: return true;
    default: return false;
  }
}

/// @brief The constants of the model, in microseconds, and the charge of each call.
///
/// A default-constructed model is `typical()`. `low()` and `high()` are the sensitivity
/// profile's columns (driver-costs.md §3, last table); the constants without a column there are
/// the same in all three. `none()` charges nothing (calls are still counted).
struct cost_model {
  // cudaMalloc: 66 µs fixed (R18 avg, R19), the slope s beyond the first 2 MiB.
  double malloc_us{66.0};
  // cudaMalloc on a device that k peers may access: + k x 36 µs (one R4 mapping per peer; E from R15/R16).
  double malloc_per_peer_us{36.0};
  // cudaFree: 42 µs fixed (R18 avg) + 2.5 µs/MiB beyond 2 MiB (R11, borrowed from unmap+release; E).
  double free_us{42.0};
  double free_us_per_mib{2.5};
  // cuMemAddressReserve: 19 µs, size-independent (R1; low 9 from R6).
  double reserve_us{19.0};
  // cuMemAddressFree: mirrors reserve (E: no figure exists).
  double unreserve_us{19.0};
  // cuMemCreate: 143 µs fixed + s x MiB(b) (R2 anchor: 143 + 25 x 2 = 193 µs for a recycled 2 MiB handle).
  double create_us{143.0};
  // cuMemRelease: 16 µs (R18 cudaFree 42 - R5 cuMemUnmap 26; E) + 2.5 µs/MiB (R11).
  double release_us{16.0};
  double release_us_per_mib{2.5};
  // cuMemMap: 1.5 µs per call, independent of bytes (R3; R6 1.05; R8: per handle).
  double map_us{1.5};
  // cuMemUnmap: 26 µs per call, independent of bytes, and it synchronises the device (R5; R9, R10).
  double unmap_us{26.0};
  // cuMemSetAccess, per reader: 36 µs for the first granule (R4 avg; the profile's "one 2 MiB
  // granule" column) + 9.4 µs per further granule (R7, GB10 slope; D). The §3 formula row reads
  // "27 + 9.4 x (G - 1) (=> 36 µs for one granule)"; 27 + 0 is not 36, so the measured 36 is kept
  // for G = 1, as the row's own parenthesis and the profile table say. Charged once per reader (E).
  double set_access_us{36.0};
  double set_access_us_per_granule{9.4};
  // The slope s: 25 µs/MiB for recycled bytes (mid of R20's 19.7-26.2, below R12's 30.5; D),
  // 1 µs/MiB for bytes above the device's high-water mark (R20 first run, R21; D).
  double recycled_us_per_mib{25.0};
  double first_use_us_per_mib{1.0};
  // Events, untimed (cudaEventDisableTiming, as cuda_stream_ops creates them): record 0.25 (R30),
  // query 1.0 (R31), cudaStreamWaitEvent 0.25 (R32).
  double event_record_us{0.25};
  double event_query_us{1.0};
  double event_wait_us{0.25};
  // cudaDeviceEnablePeerAccess: 400 µs the first call per ordered pair, 10 µs after (R17).
  double peer_enable_first_us{400.0};
  double peer_enable_again_us{10.0};

  /// @brief The recommended defaults.
  [[nodiscard]] static constexpr cost_model typical() noexcept { return {}; }
  /// @brief The profile's low column: create 2 MiB 7.6 µs (R6), set_access 20.8 (R6), unmap 11.5
  /// (R6), reserve 9 (R6), s 19.7 (R20). create's fixed part is 7.6 - 2 x 19.7 < 0 there, so it is
  /// 0: a recycled 2 MiB handle then costs 39.4 µs, the least the low slope allows.
  [[nodiscard]] static constexpr cost_model low() noexcept {
    cost_model c;
    c.create_us = 0.0;
    c.set_access_us = 20.8;
    c.unmap_us = 11.5;
    c.reserve_us = 9.0;
    c.unreserve_us = 9.0;  // mirrors reserve
    c.recycled_us_per_mib = 19.7;
    return c;
  }
  /// @brief The profile's high column: create 2 MiB 381 µs (R2 p99, so a fixed part of
  /// 381 - 2 x 30.5 = 320), set_access 54 (R4 p99), unmap 39 (R5 p99), reserve 19, s 30.5 (R12).
  [[nodiscard]] static constexpr cost_model high() noexcept {
    cost_model c;
    c.create_us = 381.0 - 2.0 * 30.5;
    c.set_access_us = 54.0;
    c.unmap_us = 39.0;
    c.recycled_us_per_mib = 30.5;
    return c;
  }
  /// @brief Charges nothing; calls are still counted.
  [[nodiscard]] static constexpr cost_model none() noexcept {
    cost_model c;
    c.malloc_us = c.malloc_per_peer_us = c.free_us = c.free_us_per_mib = 0.0;
    c.reserve_us = c.unreserve_us = c.create_us = c.release_us = c.release_us_per_mib = 0.0;
    c.map_us = c.unmap_us = c.set_access_us = c.set_access_us_per_granule = 0.0;
    c.recycled_us_per_mib = c.first_use_us_per_mib = 0.0;
    c.event_record_us = c.event_query_us = c.event_wait_us = 0.0;
    c.peer_enable_first_us = c.peer_enable_again_us = 0.0;
    return c;
  }

  // ---- charges ------------------------------------------------------------------------------
  // `used` is what the device holds before the call, `high_water` the most it ever held.

  /// @brief The slope part of obtaining `bytes` on top of `used`, skipping the first `skip` bytes.
  [[nodiscard]] constexpr double slope_us(std::size_t used, std::size_t bytes, std::size_t high_water,
                                          std::size_t skip) const noexcept {
    if (bytes <= skip) return 0.0;
    const std::size_t begin = used + skip;
    const std::size_t end = used + bytes;
    const std::size_t recycled = high_water > begin ? (high_water < end ? high_water : end) - begin : 0;
    return mib(recycled) * recycled_us_per_mib + mib(end - begin - recycled) * first_use_us_per_mib;
  }
  [[nodiscard]] constexpr double malloc_charge_us(std::size_t bytes, std::size_t used, std::size_t high_water,
                                                  std::size_t peers) const noexcept {
    return malloc_us + slope_us(used, bytes, high_water, two_mib) + static_cast<double>(peers) * malloc_per_peer_us;
  }
  [[nodiscard]] constexpr double free_charge_us(std::size_t bytes) const noexcept {
    return free_us + free_us_per_mib * (bytes > two_mib ? mib(bytes - two_mib) : 0.0);
  }
  [[nodiscard]] constexpr double create_charge_us(std::size_t bytes, std::size_t used,
                                                  std::size_t high_water) const noexcept {
    return create_us + slope_us(used, bytes, high_water, 0);
  }
  [[nodiscard]] constexpr double release_charge_us(std::size_t bytes) const noexcept {
    return release_us + release_us_per_mib * mib(bytes);
  }
  [[nodiscard]] constexpr double set_access_charge_us(std::size_t bytes, std::size_t readers) const noexcept {
    const std::size_t granules = (bytes + two_mib - 1) / two_mib;
    if (granules == 0) return 0.0;
    return static_cast<double>(readers) *
           (set_access_us + set_access_us_per_granule * static_cast<double>(granules - 1));
  }

  [[nodiscard]] static constexpr double mib(std::size_t bytes) noexcept {
    return static_cast<double>(bytes) / static_cast<double>(std::size_t{1} << 20);
  }
  static constexpr std::size_t two_mib = std::size_t{2} << 20;
};

/// @brief The calls a device has made and their modelled time, per kind.
struct modelled_costs {
  std::array<std::uint64_t, driver_call_kinds> calls{};
  std::array<double, driver_call_kinds> micros{};  ///< modelled µs per kind

  [[nodiscard]] std::uint64_t count(driver_call k) const noexcept { return calls[static_cast<std::size_t>(k)]; }
  [[nodiscard]] double seconds(driver_call k) const noexcept { return micros[static_cast<std::size_t>(k)] * 1e-6; }
  /// @brief Σ over every kind.
  [[nodiscard]] double total_seconds() const noexcept {
    double us = 0.0;
    for (const double v : micros) us += v;
    return us * 1e-6;
  }
  /// @brief Calls that obtain, map or give back memory (see `is_upstream_call`).
  [[nodiscard]] std::uint64_t upstream_calls() const noexcept {
    std::uint64_t n = 0;
    for (std::size_t k = 0; k < driver_call_kinds; ++k) {
      if (is_upstream_call(static_cast<driver_call>(k))) n += calls[k];
    }
    return n;
  }
  void add(driver_call k, double us) noexcept {
    calls[static_cast<std::size_t>(k)] += 1;
    micros[static_cast<std::size_t>(k)] += us;
  }
  friend modelled_costs operator-(modelled_costs a, const modelled_costs& b) noexcept {
    for (std::size_t k = 0; k < driver_call_kinds; ++k) {
      a.calls[k] -= b.calls[k];
      a.micros[k] -= b.micros[k];
    }
    return a;
  }
};

}  // namespace mgm::sim
