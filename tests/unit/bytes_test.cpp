#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/sim/device_spec.hpp>

#include <catch2/catch.hpp>

#include <limits>
#include <string>

TEST_CASE("parse_bytes takes plain bytes and binary units", "[bytes]") {
  REQUIRE(mgm::parse_bytes("0") == 0);
  REQUIRE(mgm::parse_bytes("512") == 512);
  REQUIRE(mgm::parse_bytes("512B") == 512);
  REQUIRE(mgm::parse_bytes("64KiB") == 65536);
  REQUIRE(mgm::parse_bytes("24564MiB") == 24564ULL << 20);
  REQUIRE(mgm::parse_bytes("80 GiB") == 80ULL << 30);
  REQUIRE(mgm::parse_bytes("2TiB") == 2ULL << 40);
  REQUIRE(mgm::parse_bytes("1.5KiB") == 1536);
  REQUIRE(mgm::parse_bytes("0.5GiB") == 1ULL << 29);
  REQUIRE(mgm::parse_bytes("1.0000001KiB") == 1024);  // rounded down
  REQUIRE(mgm::parse_bytes("18446744073709551615") == std::numeric_limits<std::size_t>::max());
}

TEST_CASE("parse_bytes rejects with the column", "[bytes]") {
  const auto column_of = [](const char* text) -> std::size_t {
    try {
      (void)mgm::parse_bytes(text);
    } catch (const mgm::parse_error& e) {
      return e.column();
    }
    return 0;
  };
  REQUIRE(column_of("") == 1);
  REQUIRE(column_of("-5") == 1);
  REQUIRE(column_of("12Qib") == 3);
  REQUIRE(column_of("1.GiB") == 3);
  REQUIRE(column_of("18446744073709551616") == 1);  // SIZE_MAX + 1
  REQUIRE(column_of("17179869184GiB") == 1);         // overflows after the unit
  REQUIRE_THROWS_WITH(mgm::parse_bytes("4GB"), Catch::Contains("did you mean GiB"));
  REQUIRE_THROWS_WITH(mgm::parse_bytes("4mb"), Catch::Contains("did you mean MiB"));
}

TEST_CASE("format_bytes prints a binary unit", "[bytes]") {
  REQUIRE(mgm::format_bytes(0) == "0 B");
  REQUIRE(mgm::format_bytes(1023) == "1023 B");
  REQUIRE(mgm::format_bytes(1536) == "1.50 KiB");
  REQUIRE(mgm::format_bytes(24564ULL << 20) == "23.99 GiB");
  REQUIRE(mgm::format_bytes(3ULL << 40) == "3.00 TiB");
}

TEST_CASE("device lists: counts, sizes and names", "[sim][bytes]") {
  const auto d = mgm::sim::parse_device_list("2x24564MiB:NVIDIA GeForce RTX 4090, 2x16376MiB:RTX 4080,80GiB");
  REQUIRE(d.size() == 5);
  REQUIRE(d[0].name == "NVIDIA GeForce RTX 4090");
  REQUIRE(d[1].memory_bytes == 24564ULL << 20);
  REQUIRE(d[3].name == "RTX 4080");
  REQUIRE(d[4].memory_bytes == 80ULL << 30);
  REQUIRE(d[4].name == "Simulated GPU");
  REQUIRE(mgm::sim::parse_device_list("8X1GiB").size() == 8);
}

TEST_CASE("device lists: errors name the column", "[sim][bytes]") {
  const auto column_of = [](const char* text) -> std::size_t {
    try {
      (void)mgm::sim::parse_device_list(text);
    } catch (const mgm::parse_error& e) {
      return e.column();
    }
    return 0;
  };
  REQUIRE(column_of("") == 1);
  REQUIRE(column_of("1GiB,") == 6);
  REQUIRE(column_of("0x1GiB") == 1);
  REQUIRE(column_of("2x") == 3);
  REQUIRE(column_of("1GiB,2x3Zb") == 9);
  REQUIRE(column_of("100") == 1);  // below 256 bytes
  REQUIRE(column_of("1GiB:") == 6);
  REQUIRE(column_of("65x1GiB") == 1);  // more than 64 devices
  REQUIRE(column_of("40x1GiB,40x1GiB") == 9);
  REQUIRE_THROWS_WITH(mgm::sim::parse_device_list("4x80GB"), Catch::Contains("column 3") && Catch::Contains("GiB"));
}
