// `nvidia-smi topo -m` text as it reaches users (issue 15): NIC-to-NIC cells, cells nvidia-smi
// runs together, tabs turned into spaces, the NIC legend, and errors that name the header.
// Inline matrices are written by hand for these tests; the realdata ones transform the real files
// of ../shared/data/topologies (skipped when it is absent).
#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include "shared_data.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

using mgm::device_id;

using mgm_test::slurp;

namespace {

// Tabs as `expand -t 8` turns them into spaces.
std::string expand_tabs(const std::string& text) {
  std::string out;
  std::size_t col = 0;
  for (const char c : text) {
    if (c == '\t') {
      do {
        out += ' ';
        ++col;
      } while (col % 8 != 0);
    } else {
      out += c;
      col = c == '\n' ? 0 : col + 1;
    }
  }
  return out;
}

std::string message_of(const std::string& text) {
  try {
    (void)mgm::parse_smi_topology(text);
  } catch (const mgm::parse_error& e) {
    return e.what();
  }
  return "(no error)";
}

// Everything the parser reads, as one comparable text.
std::string everything(const mgm::topology& t) {
  std::ostringstream s;
  for (const auto& g : t.gpus()) {
    s << g.ordinal << " cpu=" << g.cpu_affinity << " numa=" << g.numa_affinity << " node=" << g.numa_node.value_or(-1)
      << " gpu_numa=" << g.gpu_numa_id.value_or(-1) << "\n";
  }
  for (std::size_t a = 0; a < t.gpu_count(); ++a) {
    for (std::size_t b = 0; b < t.gpu_count(); ++b) s << t.path(device_id{static_cast<int>(a)}, device_id{static_cast<int>(b)}).label() << " ";
    s << "\n";
  }
  for (std::size_t k = 0; k < t.nics().size(); ++k) {
    s << t.nics()[k].name << " (" << t.nics()[k].device << "):";
    for (const auto& p : t.nics()[k].to_gpu) s << " " << p.label();
    s << " |";
    for (std::size_t o = 0; o < t.nics().size(); ++o) s << " " << (t.nic_path(k, o) ? t.nic_path(k, o)->label() : "?");
    s << "\n";
  }
  return s.str();
}

// Two GPUs, four NICs, two sockets; PIX, PXB, NODE and SYS between NICs.
const std::string four_nics =
    "\tGPU0\tGPU1\tNIC0\tNIC1\tNIC2\tNIC3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tSYS\tPIX\tPXB\tSYS\tSYS\t0-31\t0\t\tN/A\n"
    "GPU1\tSYS\t X \tSYS\tSYS\tPIX\tNODE\t32-63\t1\t\tN/A\n"
    "NIC0\tPIX\tSYS\t X \tPXB\tSYS\tSYS\n"
    "NIC1\tPXB\tSYS\tPXB\t X \tSYS\tSYS\n"
    "NIC2\tSYS\tPIX\tSYS\tSYS\t X \tNODE\n"
    "NIC3\tSYS\tNODE\tSYS\tSYS\tNODE\t X \n"
    "\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n  NIC2: mlx5_2\n  NIC3: mlx5_3\n";

}  // namespace

TEST_CASE("topology text: NIC-to-NIC cells keep their label and are printed back", "[topology]") {
  const auto t = mgm::parse_smi_topology(four_nics);
  REQUIRE(t.nics().size() == 4);
  REQUIRE(t.nic_path(0, 1)->label() == "PXB");
  REQUIRE(t.nic_path(1, 0)->label() == "PXB");
  REQUIRE(t.nic_path(2, 3)->label() == "NODE");
  REQUIRE(t.nic_path(0, 2)->label() == "SYS");
  REQUIRE(t.nic_path(3, 3)->label() == "X");
  REQUIRE_THROWS_AS(t.nic_path(0, 4), mgm::logic_error);
  const auto again = mgm::parse_smi_topology(t.to_smi_matrix());
  REQUIRE(everything(again) == everything(t));
  // A caller's NICs without NIC paths (the three-field form) have none; a wrong diagonal is refused.
  mgm::topology plain{std::vector<mgm::gpu_info>(1)};
  plain.add_nic({"eth0", "", {mgm::gpu_path::from_label("PHB")}});
  plain.add_nic({"eth1", "", {mgm::gpu_path::from_label("SYS")}});
  REQUIRE_FALSE(plain.nic_path(0, 1).has_value());
  REQUIRE(plain.nic_path(1, 1)->label() == "X");
  REQUIRE_THROWS_AS(plain.add_nic({"eth2", "", {mgm::gpu_path::from_label("PHB")},
                                   {mgm::gpu_path::from_label("SYS"), mgm::gpu_path::from_label("SYS"),
                                    mgm::gpu_path::from_label("SYS")}}),
                    mgm::logic_error);
  REQUIRE(plain.nics().size() == 2);
}

TEST_CASE("topology text: the NIC legend names the NICs, the GPU NUMA ID column is read and printed", "[topology]") {
  const auto t = mgm::parse_smi_topology(four_nics);
  REQUIRE(t.nics().at(0).name == "NIC0");
  REQUIRE(t.nics().at(3).device == "mlx5_3");
  const auto gh = mgm::parse_smi_topology(
      "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
      "GPU0\t X \tNV6\t0-71\t0,5-11\t4\n"
      "GPU1\tNV6\t X \t72-143\t1,13-19\t12\n");
  REQUIRE(gh.gpu(device_id{1}).gpu_numa_id == 12);
  const std::string printed = gh.to_smi_matrix();
  REQUIRE(printed.find("GPU NUMA ID") != std::string::npos);
  REQUIRE(mgm::parse_smi_topology(printed).gpu(device_id{1}).gpu_numa_id == 12);
  REQUIRE(t.to_smi_matrix().find("NIC3: mlx5_3") != std::string::npos);
}

TEST_CASE("topology text: cells nvidia-smi runs together are split by their labels", "[topology]") {
  // As nvidia-smi prints a matrix with many NICs: "NIC2NIC3" in the header, "SYSNODE" / "PXBSYS" in rows.
  std::string fused = four_nics;
  const auto fuse = [&](const std::string& from, const std::string& to) {
    const auto at = fused.find(from);
    REQUIRE(at != std::string::npos);
    fused.replace(at, from.size(), to);
  };
  fuse("\tNIC2\tNIC3\t", "\tNIC2NIC3\t");
  fuse("GPU0\t X \tSYS\tPIX\tPXB\tSYS\tSYS\t", "GPU0\t X \tSYS\tPIX\tPXBSYS\tSYS\t");
  fuse("GPU1\tSYS\t X \tSYS\tSYS\tPIX\tNODE\t", "GPU1\tSYS\t X \tSYSSYS\tPIXNODE\t");
  fuse("NIC2\tSYS\tPIX\tSYS\tSYS\t X \tNODE\n", "NIC2\tSYS\tPIX\tSYSSYS\t X NODE\n");
  fuse("NIC3\tSYS\tNODE\tSYS\tSYS\tNODE\t X \n", "NIC3SYS\tNODE\tSYSSYS\tNODE\t X \n");
  REQUIRE(everything(mgm::parse_smi_topology(fused)) == everything(mgm::parse_smi_topology(four_nics)));
  // NV# runs into the next cell too.
  const auto nv = mgm::parse_smi_topology("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV18NV18\nGPU1\tNV18\t X NV12\nGPU2\tNV18NV12\t X \n");
  REQUIRE(nv.path(device_id{0}, device_id{2}).nvlinks == 18);
  REQUIRE(nv.path(device_id{1}, device_id{2}).nvlinks == 12);
  // What is no label stays an error at its column.
  REQUIRE_THROWS_WITH(mgm::parse_smi_topology("\tGPU0\tGPU1\nGPU0\t X \tSYSFOO\nGPU1\tSYS\t X \n"),
                      Catch::Contains("line 2, column 13") && Catch::Contains("'FOO'"));
}

TEST_CASE("realdata: the 8-NIC B200 file with nvidia-smi's fused cells reads as the original", "[realdata][topology]") {
  const auto dir = mgm_test::shared_data("topologies");
  if (dir.empty()) return;
  // No file of ../shared/data has fused cells, so this fuses the real B200 file's: the header's
  // last two NICs, and each matrix row's last two cells, as nvidia-smi does with many NICs.
  const std::string original = slurp(dir / "topo_gcp_a4_8x_b200_nv18_8nic_dranet.txt");
  std::string fused = std::regex_replace(original, std::regex{"NIC6 +NIC7"}, "NIC6NIC7");
  fused = std::regex_replace(fused, std::regex{"(SYS|PIX|NODE) +(SYS|PIX|NODE)( +[0-9]+-|\n)"}, "$1$2$3");
  REQUIRE(fused.find("NIC6NIC7") != std::string::npos);
  REQUIRE(fused.find("SYSSYS ") != std::string::npos);
  REQUIRE(fused.find("NODENODE\n") != std::string::npos);
  const auto t = mgm::parse_smi_topology(fused);
  REQUIRE(everything(t) == everything(mgm::parse_smi_topology(original)));
  REQUIRE(t.nics().size() == 8);
  REQUIRE(t.nic_path(6, 7)->label() == "PIX");
  REQUIRE(t.nic_path(0, 2)->label() == "NODE");
  REQUIRE(t.nic_path(0, 4)->label() == "SYS");
}

TEST_CASE("realdata: NIC-to-NIC labels of the real files", "[realdata][topology]") {
  const auto dir = mgm_test::shared_data("topologies");
  if (dir.empty()) return;
  const auto b200 = mgm::parse_smi_topology(slurp(dir / "topo_gcp_a4_8x_b200_nv18_8nic_dranet.txt"));
  REQUIRE(b200.nic_path(0, 1)->label() == "PIX");
  REQUIRE(b200.nic_path(2, 0)->label() == "NODE");
  REQUIRE(b200.nic_path(7, 0)->label() == "SYS");
  const auto power9 = mgm::parse_smi_topology(slurp(dir / "topo_princeton_traverse_power9_4x_v100_nv3.txt"));
  REQUIRE(power9.nics().at(1).name == "mlx5_1");
  REQUIRE(power9.nic_path(2, 3)->label() == "PIX");
  REQUIRE(power9.nic_path(1, 2)->label() == "SYS");
  // Printed and read back, the NIC rows are the file's.
  REQUIRE(everything(mgm::parse_smi_topology(b200.to_smi_matrix())) == everything(b200));
}

TEST_CASE("realdata: every topology file reads the same with its tabs turned into spaces", "[realdata][topology]") {
  const auto dir = mgm_test::shared_data("topologies");
  if (dir.empty()) return;
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator{dir}) {
    if (e.path().extension() != ".txt") continue;
    INFO(e.path().filename().string());
    const std::string text = slurp(e.path());
    const std::string want = everything(mgm::parse_smi_topology(text));
    REQUIRE(everything(mgm::parse_smi_topology(expand_tabs(text))) == want);
    REQUIRE(everything(mgm::parse_smi_topology(std::regex_replace(text, std::regex{"\t"}, " "))) == want);
    ++files;
  }
  REQUIRE(files == 11);
}

TEST_CASE("topology text: space-aligned matrices with spaced captions", "[topology]") {
  const auto t = mgm::parse_smi_topology(expand_tabs(four_nics));
  REQUIRE(everything(t) == everything(mgm::parse_smi_topology(four_nics)));
  REQUIRE(t.gpu(device_id{1}).cpu_affinity == "32-63");
  REQUIRE(t.gpu(device_id{1}).numa_node == 1);
  REQUIRE_FALSE(t.gpu(device_id{1}).gpu_numa_id.has_value());
  // One space only between the captions and the values, as in the A100 file's header.
  const auto one = mgm::parse_smi_topology(
      "GPU0 GPU1 NIC0 CPU Affinity NUMA Affinity GPU NUMA ID\n"
      "GPU0 X NV4 SYS 24-31,56-63 3 7\n"
      "GPU1 NV4 X PHB 16-23,48-55 2 N/A\n"
      "NIC0 SYS PHB X\n");
  REQUIRE(one.gpu(device_id{0}).cpu_affinity == "24-31,56-63");
  REQUIRE(one.gpu(device_id{0}).numa_node == 3);
  REQUIRE(one.gpu(device_id{0}).gpu_numa_id == 7);
  REQUIRE(one.nics().at(0).to_gpu.at(1).label() == "PHB");
}

TEST_CASE("topology text: a wrong header is named, and no message shows a source path", "[topology]") {
  const std::string no_gpu0 = message_of("        GPU1    GPU2    CPU Affinity\nGPU1     X      NV1     0-7\nGPU2    NV1      X      0-7\n");
  CHECK_THAT(no_gpu0, Catch::Contains("line 1") && Catch::Contains("the header line 'GPU1 GPU2 CPU Affinity' has no GPU0 column"));
  CHECK_THAT(message_of("\tNIC0\tGPU0\nNIC0\t X \tPIX\nGPU0\tPIX\t X \n"), Catch::Contains("does not start with its GPU0 column"));
  CHECK_THAT(message_of("\tGPU0\tGPU2\nGPU0\t X \tNV1\nGPU2\tNV1\t X \n"),
             Catch::Contains("the header line has GPU2 where GPU1 belongs"));
  CHECK_THAT(message_of("\tGPU0\tGPU1\tGPU0\n"), Catch::Contains("names GPU0 twice"));
  CHECK_THAT(message_of("GPU0\t X \tNV1\nGPU1\tNV1\t X \n"), Catch::Contains("line 1") && Catch::Contains("the header line is missing"));
  // Cells: the line and column of the cell itself, in words; never a library location.
  const std::vector<std::pair<std::string, std::string>> cases{
      {"\tGPU0\tGPU1\nGPU0\t X \tNVX\nGPU1\tNVX\t X \n", "line 2, column 10: 'NVX' in the column of GPU1 is not a link label"},
      {"\tGPU0\tGPU1\nGPU0\t X \tNV0\nGPU1\tNV0\t X \n", "'NV0' in the column of GPU1 is not a link label"},
      {"\tGPU0\tGPU1\nGPU0\tSYS\tNV1\nGPU1\tNV1\t X \n", "GPU0 to itself must be X, not 'SYS'"},
      {"\tGPU0\tGPU1\nGPU0\t X \t X \nGPU1\tNV1\t X \n", "'X' belongs on the diagonal only"},
      {"\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV2\t X \n", "line 3, column 6: GPU1-GPU0 is NV2 but GPU0-GPU1 (line 2) is NV1"},
      {"\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tPXB\t X \n", "NIC0-GPU0 is PXB but GPU0-NIC0 (line 2) is PIX"},
      {"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV1\t0-7\t9\nGPU1\tNV1\t X \t0-7\n", "'9' is past the header's last column (CPU Affinity)"},
  };
  for (const auto& [text, says] : cases) {
    const std::string m = message_of(text);
    INFO(text);
    CHECK_THAT(m, Catch::Contains(says));
    CHECK(m.find(".cpp") == std::string::npos);
    CHECK(m.find(".hpp") == std::string::npos);
  }
}
