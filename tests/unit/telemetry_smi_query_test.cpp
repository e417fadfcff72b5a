// `nvidia-smi -q -x` and `nvidia-smi -q` logs (one document, or several appended by `-l`), and
// the `--query-gpu` table pasted with other separators: real outputs read with the values they
// show, logs concatenated from them, and every way a log of these forms goes wrong.
#include <mgm/error.hpp>
#include <mgm/telemetry/log_format.hpp>

#include "data/smi_q_2x_a100_80gb_m4logs.hpp"
#include "shared_data.hpp"
#include "telemetry_test_support.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace telemetry_test;
using mgm_test::slurp;

namespace {

// `text` with the first `from` replaced by `to`; fails the test when `from` is not there, so that
// a log built from a real sample is known to differ from it where the test says.
std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// `-q -d MEMORY` of an RTX 2080 (driver 560.70), as pasted in
// https://github.com/terminatorul/NvStrapsReBar/issues/89 (comment by Lucide, 2024-07-23); the
// excerpt stops at the BAR1 section's head.
const std::string smi_q_memory_rtx2080 = "==============NVSMI LOG==============\n"
                                         "\n"
                                         "Timestamp                                 : Tue Jul 23 12:34:41 2024\n"
                                         "Driver Version                            : 560.70\n"
                                         "CUDA Version                              : 12.6\n"
                                         "\n"
                                         "Attached GPUs                             : 1\n"
                                         "GPU 00000000:01:00.0\n"
                                         "    FB Memory Usage\n"
                                         "        Total                             : 8192 MiB\n"
                                         "        Reserved                          : 203 MiB\n"
                                         "        Used                              : 659 MiB\n"
                                         "        Free                              : 7331 MiB\n"
                                         "    BAR1 Memory Usage\n";

// A short document in the shape of the real ones of ../shared/data (the A100 with MIG among them):
// the parts these tests look at, with a MIG instance whose memory must not be taken for the GPU's.
std::string xml_doc(const std::string& timestamp, const std::string& used, const std::string& util = "3 %") {
  return "<?xml version=\"1.0\" ?>\n"
         "<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v11.dtd\">\n"
         "<nvidia_smi_log>\n"
         "    <timestamp>" + timestamp + "</timestamp>\n"
         "    <attached_gpus>2</attached_gpus>\n"
         "    <gpu id=\"00000000:00:04.0\">\n"
         "        <product_name>NVIDIA A100-SXM4-40GB</product_name>\n"
         "        <mig_devices>\n"
         "            <mig_device>\n"
         "                <index>0</index>\n"
         "                <fb_memory_usage>\n"
         "                    <total>19968 MiB</total>\n"
         "                    <used>19 MiB</used>\n"
         "                </fb_memory_usage>\n"
         "            </mig_device>\n"
         "        </mig_devices>\n"
         "        <uuid>GPU-27b94a00-ed54-5c24-b1fd-1054085de32a</uuid>\n"
         "        <fb_memory_usage>\n"
         "            <total>40960 MiB</total>\n"
         "            <reserved>605 MiB</reserved>\n"
         "            <used>" + used + "</used>\n"
         "            <free>N/A</free>\n"
         "        </fb_memory_usage>\n"
         "        <utilization>\n"
         "            <gpu_util>" + util + "</gpu_util>\n"
         "            <memory_util>N/A</memory_util>\n"
         "        </utilization>\n"
         "        <power_readings>\n"
         "            <power_draw>[Not Supported]</power_draw>\n"
         "        </power_readings>\n"
         "    </gpu>\n"
         "    <gpu id=\"00000000:00:05.0\">\n"
         "        <product_name>NVIDIA A100-SXM4-40GB</product_name>\n"
         "        <uuid>GPU-00000000-ed54-5c24-b1fd-1054085de32b</uuid>\n"
         "        <fb_memory_usage>\n"
         "            <total>40960 MiB</total>\n"
         "            <used>1 GiB</used>\n"
         "        </fb_memory_usage>\n"
         "    </gpu>\n"
         "</nvidia_smi_log>\n";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// -q -x
// ---------------------------------------------------------------------------------------------

TEST_CASE("smi xml: GPUs in document order, MIG memory not the GPU's, N/A empty, reasons kept", "[telemetry]") {
  const auto log = read_smi_query_xml(xml_doc("Fri Jan 27 11:32:31 2023", "38 MiB"), strict());
  CHECK(log.format == "nvidia-smi-xml");
  CHECK(log.has_timestamps);
  REQUIRE(log.samples.size() == 2);
  const auto& a = log.samples[0];
  CHECK(a.index == 0);
  CHECK(a.time == utc("2023-01-27 11:32:31"));
  CHECK(a.pci_bus_id == "00000000:00:04.0");
  CHECK(a.uuid == "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a");
  CHECK(a.name == "NVIDIA A100-SXM4-40GB");
  CHECK(a.memory_used == 38 * mib);  // not the MIG instance's 19 MiB, though it comes first
  CHECK(a.memory_total == 40960 * mib);
  CHECK(a.memory_reserved == 605 * mib);
  CHECK_FALSE(a.memory_free.has_value());
  CHECK(a.utilization_gpu_pct == 3u);
  CHECK_FALSE(a.utilization_mem_pct.has_value());
  CHECK_FALSE(a.power_draw_w.has_value());
  CHECK(a.missing == std::vector<std::string>{"power.draw: [Not Supported]"});
  CHECK(log.samples[1].index == 1);
  CHECK(log.samples[1].memory_used == 1024 * mib);
  CHECK(detect_log_format(xml_doc("Fri Jan 27 11:32:31 2023", "38 MiB")) == log_format::smi_xml);
  CHECK(read_gpu_log(xml_doc("Fri Jan 27 11:32:31 2023", "38 MiB")).format == "nvidia-smi-xml");
}

TEST_CASE("smi xml: -l appends documents, each is a time point, a cut-off last one is an issue", "[telemetry]") {
  std::string text = xml_doc("Fri Jan 27 11:32:31 2023", "38 MiB") + xml_doc("Fri Jan 27 11:32:36 2023", "1038 MiB") +
                     xml_doc("Fri Jan 27 11:32:41 2023", "2038 MiB");
  auto log = read_smi_query_xml(text);
  REQUIRE(log.samples.size() == 6);
  CHECK(log.issues.empty());
  CHECK(log.samples[2].time - log.samples[0].time == std::chrono::seconds{5});
  CHECK(log.samples[4].memory_used == 2038 * mib);
  CHECK(log.samples[4].index == 0);
  CHECK(log.samples[5].index == 1);

  // Logging stopped in the middle of the fourth document.
  const std::string fourth = xml_doc("Fri Jan 27 11:32:46 2023", "3038 MiB");
  const std::string cut = text + fourth.substr(0, fourth.find("<fb_memory_usage>"));
  log = read_smi_query_xml(cut);
  CHECK(log.samples.size() == 6);
  REQUIRE(log.issues.size() == 1);
  CHECK(log.issues[0].line > 3 * 40);  // in the fourth document, not the first
  CHECK(log.issues[0].message.find("not well-formed") != std::string::npos);
  CHECK_THROWS_AS(read_smi_query_xml(cut, strict()), mgm::parse_error);
}

TEST_CASE("smi xml: bad values, bad times and non-documents are clear errors", "[telemetry]") {
  const auto bad_used = xml_doc("Fri Jan 27 11:32:31 2023", "lots");
  auto log = read_smi_query_xml(bad_used);
  CHECK(log.samples.size() == 1);  // the other GPU of the document is kept
  REQUIRE(log.issues.size() == 1);
  CHECK(log.issues[0].line == 21);
  CHECK(log.issues[0].message == "memory.used: 'lots' is not a value of it");
  try {
    (void)read_smi_query_xml(bad_used, strict());
    FAIL("no throw");
  } catch (const mgm::parse_error& e) {
    CHECK(e.line() == 21);
    CHECK(std::string{e.what()}.find("nvidia-smi XML, line 21") != std::string::npos);
    CHECK(std::string{e.what()}.find(".cpp") == std::string::npos);
  }
  CHECK(read_smi_query_xml(xml_doc("Fri Jan 27 11:32:31 2023", "38 MiB", "101 %z")).issues.size() == 1);
  log = read_smi_query_xml(xml_doc("yesterday", "38 MiB"));
  CHECK(log.samples.empty());
  REQUIRE(log.issues.size() == 1);
  CHECK(log.issues[0].message == "timestamp: 'yesterday' is not a time");
  CHECK_THROWS_AS(read_smi_query_xml("<?xml version=\"1.0\" ?>\n<topology/>\n", strict()), mgm::parse_error);
  CHECK_THROWS_WITH(read_smi_query_xml("just text\n"), Catch::Contains("no <nvidia_smi_log>"));
  // NUL bytes of a preallocated file are dropped, as by every reader.
  std::string nul = xml_doc("Fri Jan 27 11:32:31 2023", "38 MiB");
  nul.insert(nul.find("<gpu "), std::string(5, '\0'));
  CHECK(read_smi_query_xml(nul, strict()).samples.size() == 2);
}

TEST_CASE("smi xml: no timestamp numbers the documents by the assumed interval", "[telemetry]") {
  std::string doc = "<nvidia_smi_log><gpu id=\"00000000:01:00.0\"><fb_memory_usage><used>5 MiB</used>"
                    "</fb_memory_usage></gpu></nvidia_smi_log>\n";
  log_read_options o;
  o.assumed_interval = std::chrono::seconds{10};
  const auto log = read_smi_query_xml(doc + doc + doc, o);
  CHECK_FALSE(log.has_timestamps);
  REQUIRE(log.samples.size() == 3);
  CHECK(log.samples[2].time - log.samples[0].time == std::chrono::seconds{20});
  CHECK(log.samples[1].pci_bus_id == "00000000:01:00.0");
}

TEST_CASE("realdata: every nvidia-smi -q -x sample reads with the values it shows", "[telemetry][realdata]") {
  const auto dir = mgm_test::shared_data("nvidia-smi");
  if (dir.empty()) return;
  auto one = [&](const char* file) {
    const auto text = slurp(dir / file);
    REQUIRE(detect_log_format(text) == log_format::smi_xml);
    auto log = read_gpu_log_file(dir / file, strict());
    CHECK(log.format == "nvidia-smi-xml");
    CHECK(log.issues.empty());
    REQUIRE(log.samples.size() == 1);
    return log.samples[0];
  };
  SECTION("A100 with MIG enabled: the GPU's own memory, not an instance's") {
    const auto s = one("smi_q_x_a100-sxm4-mig_netdata.xml");
    CHECK(s.time == utc("2023-01-27 11:32:31"));
    CHECK(s.name == "NVIDIA A100-SXM4-40GB");
    CHECK(s.uuid == "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a");
    CHECK(s.pci_bus_id == "00000000:00:04.0");
    CHECK(s.memory_total == 40960 * mib);
    CHECK(s.memory_reserved == 605 * mib);
    CHECK(s.memory_used == 38 * mib);
    CHECK(s.memory_free == 40315 * mib);
    CHECK_FALSE(s.utilization_gpu_pct.has_value());  // N/A with MIG on
    CHECK(s.temperature_c == 36.0);
    CHECK(s.power_draw_w == Approx(66.92));
    CHECK(s.power_limit_w == Approx(400.0));
    CHECK(s.clock_sm_mhz == 1410u);
    CHECK(s.clock_mem_mhz == 1215u);
    CHECK(s.pcie_gen == 4u);
    CHECK(s.pcie_width == 16u);
  }
  SECTION("RTX 2080 on Windows: WDDM processes without memory; PCIe throughput") {
    const auto s = one("smi_q_x_rtx-2080-win_netdata.xml");
    CHECK(s.time == utc("2022-09-20 14:07:39"));
    CHECK(s.name == "NVIDIA GeForce RTX 2080");
    CHECK(s.memory_used == 862 * mib);
    CHECK(s.memory_reserved == 182 * mib);
    CHECK(s.utilization_gpu_pct == 2u);
    CHECK(s.utilization_mem_pct == 7u);
    CHECK(s.power_limit_w == Approx(275.0));
    CHECK(s.pcie_tx_mb_s == Approx(13.0));
    CHECK(s.pcie_rx_mb_s == Approx(91.0));
    REQUIRE(s.processes.size() > 10);
    CHECK(s.processes[0].pid == 7724u);
    CHECK_FALSE(s.processes[0].used_bytes.has_value());
    CHECK(s.processes[1].name.empty());
  }
  SECTION("RTX 3060 laptop: power limit N/A, one process with its memory") {
    const auto s = one("smi_q_x_rtx-3060_netdata.xml");
    CHECK(s.memory_total == 6144 * mib);
    CHECK(s.memory_used == 5 * mib);
    CHECK(s.power_draw_w == Approx(8.70));
    CHECK_FALSE(s.power_limit_w.has_value());
    REQUIRE(s.processes.size() == 1);
    CHECK(s.processes[0].pid == 28543u);
    CHECK(s.processes[0].name == "/usr/libexec/Xorg");
    CHECK(s.processes[0].used_bytes == 4 * mib);
  }
  SECTION("RTX 4090, driver 535: gpu_power_readings, current_power_limit, a one-digit day") {
    const auto s = one("smi_q_x_rtx-4090-driver-535_netdata.xml");
    CHECK(s.time == utc("2023-08-07 11:10:06"));
    CHECK(s.memory_total == 24564 * mib);
    CHECK(s.memory_used == 2 * mib);
    CHECK(s.power_draw_w == Approx(26.84));
    CHECK(s.power_limit_w == Approx(450.0));
    CHECK(s.temperature_c == 40.0);
  }
  SECTION("Tesla P100: tab indentation") {
    const auto s = one("smi_q_x_tesla-p100_netdata.xml");
    CHECK(s.time == utc("2022-09-17 17:06:50"));
    CHECK(s.name == "Tesla P100-PCIE-16GB");
    CHECK(s.memory_used == 0u);
    CHECK(s.memory_total == 16384 * mib);
    CHECK(s.power_draw_w == Approx(26.16));
  }
}

TEST_CASE("realdata: a -q -x -l log concatenated from a real sample is a time series", "[telemetry][realdata]") {
  const auto dir = mgm_test::shared_data("nvidia-smi");
  if (dir.empty()) return;
  // Five copies of the real RTX 3060 document, each with its own timestamp and memory used, as
  // `nvidia-smi -q -x -l 5` appends them.
  const auto real = slurp(dir / "smi_q_x_rtx-3060_netdata.xml");
  std::string log_text;
  for (int k = 0; k < 5; ++k) {
    std::string doc = replace_once(real, "<timestamp>Tue Sep 20 15:21:01 2022</timestamp>",
                                   "<timestamp>Tue Sep 20 15:21:" + std::to_string(10 + 5 * k) + " 2022</timestamp>");
    doc = replace_once(doc, "<used>5 MiB</used>", "<used>" + std::to_string(5 + 100 * k) + " MiB</used>");
    log_text += doc;
  }
  const auto log = read_gpu_log(log_text, strict());
  CHECK(log.format == "nvidia-smi-xml");
  REQUIRE(log.samples.size() == 5);
  for (int k = 0; k < 5; ++k) {
    const auto& s = log.samples[static_cast<std::size_t>(k)];
    CHECK(s.index == 0);
    CHECK(s.uuid == "GPU-473d8d0f-d462-185c-6b36-6fc23e23e571");
    CHECK(s.memory_used == static_cast<std::uint64_t>(5 + 100 * k) * mib);
    CHECK(s.time == utc("2022-09-20 15:21:10") + std::chrono::seconds{5 * k});
  }
}

// ---------------------------------------------------------------------------------------------
// -q text
// ---------------------------------------------------------------------------------------------

TEST_CASE("smi text: a real -q of two A100s, every metric from its section", "[telemetry]") {
  const std::string text{mgm_test::smi_q_2x_a100_80gb_m4logs};
  CHECK(detect_log_format(text) == log_format::smi_text);
  const auto log = read_gpu_log(text, strict());
  CHECK(log.format == "nvidia-smi-q");
  CHECK(log.issues.empty());
  REQUIRE(log.samples.size() == 2);
  const auto& a = log.samples[0];
  CHECK(a.index == 0);
  CHECK(a.time == utc("2023-03-04 04:55:00"));
  CHECK(a.pci_bus_id == "00000000:07:00.0");
  CHECK(a.name == "NVIDIA A100-SXM4-80GB");
  CHECK(a.uuid == "GPU-eb0003d2-77b4-70fd-4ab9-3ef1c9853c49");
  CHECK(a.memory_total == 81920 * mib);
  CHECK(a.memory_reserved == 834 * mib);
  CHECK(a.memory_used == 22377 * mib);  // FB, not BAR1's 4 MiB
  CHECK(a.memory_free == 58708 * mib);
  CHECK(a.utilization_gpu_pct == 0u);
  CHECK(a.temperature_c == 28.0);
  CHECK(a.power_draw_w == Approx(67.97));
  CHECK(a.power_limit_w == Approx(400.0));
  CHECK(a.clock_sm_mhz == 1155u);  // Clocks/SM, not Max Clocks/SM
  CHECK(a.clock_mem_mhz == 1593u);
  CHECK(a.pcie_gen == 4u);
  CHECK(a.pcie_width == 16u);
  REQUIRE(a.processes.size() == 1);
  CHECK(a.processes[0].pid == 280058u);
  CHECK(a.processes[0].name == "/gpfswork/rech/cnw/commun/conda/shared-m4-2023-02-28/bin/python");
  CHECK(a.processes[0].used_bytes == 22374 * mib);
  const auto& b = log.samples[1];
  CHECK(b.index == 1);
  CHECK(b.pci_bus_id == "00000000:0B:00.0");
  CHECK(b.memory_used == 15995 * mib);
  CHECK(b.utilization_gpu_pct == 100u);
  CHECK(b.power_draw_w == Approx(87.03));
}

TEST_CASE("smi text: -l appends runs, each banner is a time point, GPUs renumbered per run", "[telemetry]") {
  // Three copies of the real excerpt, each with its own Timestamp and GPU 0's memory.
  const std::string real{mgm_test::smi_q_2x_a100_80gb_m4logs};
  std::string text;
  for (int k = 0; k < 3; ++k) {
    std::string run = replace_once(real, "Sat Mar  4 04:55:00 2023", "Sat Mar  4 04:5" + std::to_string(5 + k) + ":00 2023");
    text += replace_once(run, "Used                              : 22377 MiB",
                         "Used                              : " + std::to_string(22377 + 500 * k) + " MiB");
  }
  const auto log = read_smi_query_text(text, strict());
  REQUIRE(log.samples.size() == 6);
  for (int k = 0; k < 3; ++k) {
    const auto& g0 = log.samples[static_cast<std::size_t>(2 * k)];
    const auto& g1 = log.samples[static_cast<std::size_t>(2 * k + 1)];
    CHECK(g0.index == 0);
    CHECK(g1.index == 1);
    CHECK(g0.time == utc("2023-03-04 04:55:00") + std::chrono::minutes{k});
    CHECK(g1.time == g0.time);
    CHECK(g0.memory_used == static_cast<std::uint64_t>(22377 + 500 * k) * mib);
    CHECK(g1.memory_used == 15995 * mib);
  }
}

TEST_CASE("smi text: -q -d MEMORY (a real paste), appended runs without banners", "[telemetry]") {
  auto log = read_gpu_log(smi_q_memory_rtx2080, strict());
  CHECK(log.format == "nvidia-smi-q");
  REQUIRE(log.samples.size() == 1);
  const auto& s = log.samples[0];
  CHECK(s.time == utc("2024-07-23 12:34:41"));
  CHECK(s.pci_bus_id == "00000000:01:00.0");
  CHECK(s.memory_total == 8192 * mib);
  CHECK(s.memory_reserved == 203 * mib);
  CHECK(s.memory_used == 659 * mib);
  CHECK(s.memory_free == 7331 * mib);
  CHECK(s.name.empty());

  // The same paste twice without its banner: the second Timestamp starts the second run.
  const auto no_banner = smi_q_memory_rtx2080.substr(smi_q_memory_rtx2080.find("Timestamp"));
  log = read_smi_query_text(no_banner + replace_once(no_banner, "12:34:41", "12:35:41"), strict());
  REQUIRE(log.samples.size() == 2);
  CHECK(log.samples[1].time - log.samples[0].time == std::chrono::minutes{1});
  CHECK(log.samples[1].index == 0);
}

TEST_CASE("smi text: MIG instances' memory is not the GPU's, bad values name the line", "[telemetry]") {
  // The real -q -d MEMORY paste with a `MIG Devices` section put before the GPU's own memory.
  const auto mig = replace_once(smi_q_memory_rtx2080, "    FB Memory Usage\n",
                                "    MIG Devices\n"
                                "        MIG Device\n"
                                "            Index                         : 0\n"
                                "            FB Memory Usage\n"
                                "                Total                     : 4096 MiB\n"
                                "                Used                      : 11 MiB\n"
                                "    FB Memory Usage\n");
  auto log = read_smi_query_text(mig, strict());
  REQUIRE(log.samples.size() == 1);
  CHECK(log.samples[0].memory_used == 659 * mib);
  CHECK(log.samples[0].memory_total == 8192 * mib);

  const auto bad = replace_once(smi_q_memory_rtx2080, "659 MiB", "659 parsecs");
  log = read_smi_query_text(bad);
  CHECK(log.samples.empty());
  REQUIRE(log.issues.size() == 1);
  CHECK(log.issues[0].line == 12);
  CHECK(log.issues[0].message == "memory.used: '659 parsecs' is not a value of it");
  CHECK_THROWS_WITH(read_smi_query_text(bad, strict()), Catch::Contains("nvidia-smi -q, line 12"));
  const auto not_a_time = replace_once(smi_q_memory_rtx2080, "Tue Jul 23 12:34:41 2024", "soon");
  CHECK_THROWS_WITH(read_smi_query_text(not_a_time, strict()), Catch::Contains("line 3"));
  CHECK_THROWS_AS(read_smi_query_text("hello\nworld\n"), mgm::parse_error);
  // N/A is empty, never 0.
  log = read_smi_query_text(replace_once(smi_q_memory_rtx2080, "659 MiB", "N/A"), strict());
  REQUIRE(log.samples.size() == 1);
  CHECK_FALSE(log.samples[0].memory_used.has_value());
}

// ---------------------------------------------------------------------------------------------
// Tables with other separators
// ---------------------------------------------------------------------------------------------

TEST_CASE("smi tables: '|', Markdown, tabs and aligned blanks read as the CSV does", "[telemetry]") {
  const std::string csv = "timestamp, index, name, memory.used [MiB], utilization.gpu [%]\n"
                          "2025/06/13 00:27:52.195, 0, NVIDIA H100 80GB HBM3, 1094 MiB, 35 %\n"
                          "2025/06/13 00:27:52.195, 1, NVIDIA H100 80GB HBM3, 2 MiB, [N/A]\n";
  const std::vector<std::string> tables{
      "timestamp | index | name | memory.used [MiB] | utilization.gpu [%]\n"
      "2025/06/13 00:27:52.195 | 0 | NVIDIA H100 80GB HBM3 | 1094 MiB | 35 %\n"
      "2025/06/13 00:27:52.195 | 1 | NVIDIA H100 80GB HBM3 | 2 MiB | [N/A]\n",
      "| timestamp | index | name | memory.used [MiB] | utilization.gpu [%] |\n"
      "|---|:---:|---|---:|---|\n"
      "| 2025/06/13 00:27:52.195 | 0 | NVIDIA H100 80GB HBM3 | 1094 MiB | 35 % |\n"
      "| 2025/06/13 00:27:52.195 | 1 | NVIDIA H100 80GB HBM3 | 2 MiB | [N/A] |\n",
      "timestamp\tindex\tname\tmemory.used [MiB]\tutilization.gpu [%]\n"
      "2025/06/13 00:27:52.195\t0\tNVIDIA H100 80GB HBM3\t1094 MiB\t\t35 %\n"
      "2025/06/13 00:27:52.195\t1\tNVIDIA H100 80GB HBM3\t2 MiB\t[N/A]\n",
      "timestamp                index  name                   memory.used [MiB]  utilization.gpu [%]\n"
      "-----------------------  -----  ---------------------  -----------------  -------------------\n"
      "2025/06/13 00:27:52.195  0      NVIDIA H100 80GB HBM3  1094 MiB           35 %\n"
      "2025/06/13 00:27:52.195  1      NVIDIA H100 80GB HBM3  2 MiB              [N/A]\n",
  };
  const auto expected = read_smi_csv(csv, strict());
  REQUIRE(expected.samples.size() == 2);
  for (const auto& t : tables) {
    INFO(t);
    CHECK(detect_log_format(t) == log_format::smi_csv);
    const auto log = read_gpu_log(t, strict());
    REQUIRE(log.samples.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(log.samples[i].index == expected.samples[i].index);
      CHECK(log.samples[i].time == expected.samples[i].time);
      CHECK(log.samples[i].name == "NVIDIA H100 80GB HBM3");
      CHECK(log.samples[i].memory_used == expected.samples[i].memory_used);
      CHECK(log.samples[i].utilization_gpu_pct == expected.samples[i].utilization_gpu_pct);
    }
  }
}

TEST_CASE("smi tables: a row that does not fit is an issue, without a header the hint names --columns", "[telemetry]") {
  const std::string table = "timestamp | index | memory.used [MiB]\n"
                            "2025/06/13 00:27:52.195 | 0 | 1094 MiB\n"
                            "2025/06/13 00:27:53.195 | 0\n";
  auto log = read_gpu_log(table);
  CHECK(log.samples.size() == 1);
  REQUIRE(log.issues.size() == 1);
  CHECK(log.issues[0].line == 3);
  CHECK(log.issues[0].message.find("expected 3 fields") != std::string::npos);

  const std::string noheader = "2025/06/13 00:27:52.195 | 0 | 1094 MiB\n2025/06/13 00:27:53.195 | 0 | 1095 MiB\n";
  CHECK(detect_log_format(noheader) == log_format::unknown);
  try {
    (void)read_gpu_log(noheader);
    FAIL("no throw");
  } catch (const mgm::parse_error& e) {
    const std::string what = e.what();
    CHECK(what.find("--columns") != std::string::npos);
    CHECK(what.find("log_read_options") == std::string::npos);
  }
  CHECK_THROWS_WITH(read_smi_csv(noheader), Catch::Contains("--columns") && !Catch::Contains("log_read_options"));
  // With the column names given, the separator is taken from the first row.
  log_read_options o = strict();
  o.columns = {"timestamp", "index", "memory.used [MiB]"};
  log = read_gpu_log(noheader, o);
  REQUIRE(log.samples.size() == 2);
  CHECK(log.samples[1].memory_used == 1095 * mib);

  // A human nvidia-smi table (it has `Name` in it) is not taken for a header.
  const std::string human = "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |\n"
                            "|   0  Tesla V100-SXM2...  On   | 00000000:06:00.0 Off |                    0 |\n";
  CHECK(detect_log_format(human) == log_format::unknown);
}
