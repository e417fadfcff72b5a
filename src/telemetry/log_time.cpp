// Times in logs: nvidia-smi's `2025/06/13 00:27:52.195`, ISO 8601, GPU-Z's and others, read and
// written, on <chrono>'s calendar (a zone-less time is taken as UTC).
#include "text.hpp"

#include <mgm/telemetry/log_format.hpp>

#include "../detail/fmt.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace mgm::telemetry {

namespace {

using detail::trim;

// Days since 1970-01-01 of a proleptic Gregorian date, and back, on <chrono>'s calendar.
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept {
  using namespace std::chrono;
  return sys_days{year{static_cast<int>(y)} / month{m} / day{d}}.time_since_epoch().count();
}

struct civil {
  std::int64_t year;
  unsigned month;
  unsigned day;
};

civil civil_from_days(std::int64_t z) noexcept {
  using namespace std::chrono;
  const year_month_day ymd{sys_days{days{z}}};
  return {static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day())};
}

unsigned days_in_month(std::int64_t y, unsigned m) noexcept {
  using namespace std::chrono;
  return static_cast<unsigned>(year_month_day_last{year{static_cast<int>(y)} / month{m} / last}.day());
}

// Reads exactly `n` digits at `pos`.
bool digits(std::string_view s, std::size_t& pos, std::size_t n, unsigned& out) noexcept {
  if (pos + n > s.size()) return false;
  unsigned v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  pos += n;
  out = v;
  return true;
}

struct split_time {
  std::int64_t seconds;
  std::int64_t millis;
};

split_time split_ms(clock::time_point t) {
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::int64_t seconds = (ms >= 0 ? ms : ms - 999) / 1000;
  return {seconds, ms - seconds * 1000};
}

}  // namespace

std::optional<clock::time_point> parse_log_time(std::string_view text) noexcept {
  using namespace std::chrono;
  text = trim(text);
  if (text.empty()) return std::nullopt;
  // Unix seconds (or milliseconds), with an optional fraction.
  if (std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }) &&
      std::count(text.begin(), text.end(), '.') <= 1 && text.front() != '.' && text.size() <= 19) {
    const auto dot = text.find('.');
    const auto whole_text = text.substr(0, dot);
    std::int64_t whole = 0;
    const auto [end, ec] = std::from_chars(whole_text.data(), whole_text.data() + whole_text.size(), whole);
    if (ec != std::errc{} || end != whole_text.data() + whole_text.size()) return std::nullopt;
    std::int64_t nanos = 0;
    if (dot != std::string_view::npos) {
      const auto frac = text.substr(dot + 1);
      std::int64_t scale = 100'000'000;
      for (std::size_t i = 0; i < frac.size() && i < 9; ++i, scale /= 10) nanos += (frac[i] - '0') * scale;
    }
    // system_clock counts nanoseconds in 64 bits: about the years 1678 to 2262.
    nanoseconds since{};
    if (whole > 100'000'000'000LL) {  // milliseconds
      if (whole > 9'000'000'000'000LL) return std::nullopt;
      since = milliseconds{whole} + nanoseconds{nanos / 1000};
    } else {
      if (whole > 9'000'000'000LL) return std::nullopt;
      since = seconds{whole} + nanoseconds{nanos};
    }
    return clock::time_point{duration_cast<clock::duration>(since)};
  }
  // YYYY?MM?DD[ T]HH:MM:SS[.fff][Z|+HH:MM|+HHMM]
  std::size_t p = 0;
  unsigned year = 0;
  unsigned month = 0;
  unsigned day = 0;
  unsigned hour = 0;
  unsigned minute = 0;
  unsigned second = 0;
  if (!digits(text, p, 4, year)) return std::nullopt;
  if (p >= text.size() || (text[p] != '/' && text[p] != '-')) return std::nullopt;
  const char date_sep = text[p++];
  if (!digits(text, p, 2, month) || p >= text.size() || text[p++] != date_sep || !digits(text, p, 2, day)) {
    return std::nullopt;
  }
  if (p >= text.size() || (text[p] != ' ' && text[p] != 'T')) return std::nullopt;
  ++p;
  while (p < text.size() && text[p] == ' ') ++p;
  if (!digits(text, p, 2, hour) || p >= text.size() || text[p++] != ':' || !digits(text, p, 2, minute) ||
      p >= text.size() || text[p++] != ':' || !digits(text, p, 2, second)) {
    return std::nullopt;
  }
  std::int64_t nanos = 0;
  if (p < text.size() && (text[p] == '.' || text[p] == ',')) {
    ++p;
    std::int64_t scale = 100'000'000;
    const std::size_t start = p;
    for (; p < text.size() && text[p] >= '0' && text[p] <= '9'; ++p) {
      if (p - start < 9) {
        nanos += (text[p] - '0') * scale;
        scale /= 10;
      }
    }
    if (p == start) return std::nullopt;
  }
  std::int64_t offset_minutes = 0;
  if (p < text.size() && (text[p] == 'Z' || text[p] == 'z')) {
    ++p;
  } else if (p < text.size() && (text[p] == '+' || text[p] == '-')) {
    const int sign = text[p] == '-' ? -1 : 1;
    ++p;
    unsigned oh = 0;
    unsigned om = 0;
    if (!digits(text, p, 2, oh)) return std::nullopt;
    if (p < text.size() && text[p] == ':') ++p;
    if (!digits(text, p, 2, om) || oh > 23 || om > 59) return std::nullopt;
    offset_minutes = sign * static_cast<std::int64_t>(oh * 60 + om);
  }
  if (p != text.size()) return std::nullopt;
  if (year < 1700 || year > 2200 || month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 || minute > 59 ||
      second > 60) {
    return std::nullopt;
  }
  const std::int64_t secs = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second -
                            offset_minutes * 60;
  return clock::time_point{duration_cast<clock::duration>(seconds{secs} + nanoseconds{nanos})};
}

std::string format_smi_time(clock::time_point time) {
  const auto [secs, ms] = split_ms(time);
  const std::int64_t days = (secs >= 0 ? secs : secs - 86399) / 86400;
  const std::int64_t in_day = secs - days * 86400;
  const auto date = civil_from_days(days);
  return fmt::format("{:04}/{:02}/{:02} {:02}:{:02}:{:02}.{:03}", date.year, date.month, date.day, in_day / 3600,
                     in_day / 60 % 60, in_day % 60, ms);
}

std::string format_iso_time(clock::time_point time) {
  std::string s = format_smi_time(time);  // YYYY/MM/DD HH:MM:SS.mmm
  if (s.size() >= 11) {
    s[4] = '-';
    s[7] = '-';
    s[10] = 'T';
  }
  return s + 'Z';
}

}  // namespace mgm::telemetry
