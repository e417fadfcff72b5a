// gres.conf lines: Links= from the topology, Cores= from a sysfs tree (a fake one here).
#include "slurm_gres.hpp"

#include "run_mgm.hpp"

#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

namespace {

using mgm_tool_test::run_mgm;

void write(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream{p} << text << "\n";
}

// Two packages of four cores, two threads each: CPUs 0-3 and 8-11 on package 0, 4-7 and 12-15 on
// package 1; core ids 0, 1, 4, 5 within each package (ids need not be contiguous).
std::filesystem::path fake_sys() {
  const auto root = mgm_tool_test::scratch() / "sys";
  std::filesystem::remove_all(root);
  const unsigned ids[] = {0, 1, 4, 5};
  for (unsigned cpu = 0; cpu < 16; ++cpu) {
    const auto dir = root / "devices" / "system" / "cpu" / ("cpu" + std::to_string(cpu)) / "topology";
    write(dir / "physical_package_id", std::to_string((cpu / 4) % 2));
    write(dir / "core_id", std::to_string(ids[cpu % 4]));
  }
  write(root / "devices" / "system" / "cpu" / "cpufreq" / "boost", "1");  // not a CPU
  write(root / "bus" / "pci" / "devices" / "0000:17:00.0" / "local_cpulist", "4-7,12-15");
  write(root / "bus" / "pci" / "devices" / "0000:b1:00.0" / "local_cpulist", "0-15");
  write(root / "bus" / "pci" / "devices" / "0000:ca:00.0" / "local_cpulist", "zero");
  return root;
}

}  // namespace

TEST_CASE("slurm_cores: Slurm's core indices of a GPU's local CPUs, package by package", "[tool]") {
  const auto sys = fake_sys();
  CHECK(mgm_tool::slurm_cores("00000000:17:00.0", sys) == "4-7");  // NVML's form of the bus id
  CHECK(mgm_tool::slurm_cores("00000000:B1:00.0", sys) == "0-7");
  std::string why;
  CHECK_FALSE(mgm_tool::slurm_cores("00000000:CA:00.0", sys, &why));
  CHECK(why.find("not a CPU list") != std::string::npos);
  CHECK_FALSE(mgm_tool::slurm_cores("00000000:01:00.0", sys, &why));
  CHECK(why.find("local_cpulist") != std::string::npos);
  CHECK_FALSE(mgm_tool::slurm_cores("", sys, &why));
  std::filesystem::remove_all(sys);
}

TEST_CASE("mgm topo --format slurm: Links= from NVLink counts, File= by index with the reason", "[tool]") {
  const auto v100 = run_mgm("--sim dgx1-v100 topo --format slurm");
  REQUIRE(v100.rc == 0);
  // DGX-1's hybrid cube mesh: GPU 0 has one link to 1 and 2, two to 3 and 4, none to 5-7.
  CHECK(v100.out.find("Name=gpu File=/dev/nvidia0 Links=-1,1,1,2,2,0,0,0\n") != std::string::npos);
  CHECK(v100.out.find("Name=gpu File=/dev/nvidia7 Links=0,0,0,1,2,1,2,-1\n") != std::string::npos);
  CHECK(v100.out.find("not NVML's minor number (a simulated machine has no NVML)") != std::string::npos);
  CHECK(v100.out.find("Cores= left out") != std::string::npos);
  CHECK(v100.out.find("Cores=0") == std::string::npos);
  const auto h100 = run_mgm("--sim dgx-h100 topo --format slurm");
  REQUIRE(h100.rc == 0);
  CHECK(h100.out.find("Name=gpu File=/dev/nvidia3 Links=18,18,18,-1,18,18,18,18\n") != std::string::npos);
  const auto mixed = run_mgm("--sim pcie-4gpu-mixed topo --format slurm");
  REQUIRE(mixed.rc == 0);
  CHECK(mixed.out.find("Links=-1,0,0,0\n") != std::string::npos);
  CHECK(run_mgm("--sim dgx-h100 topo --format slurm --json").rc == 1);
  CHECK(run_mgm("--sim dgx-h100 topo --format nccl").rc == 1);
}

TEST_CASE("mgm topo --format slurm from a topology file: Links= from its NV cells, no Cores= and why", "[tool]") {
  // A topo -m file of its own (4 GPUs: two NV4 pairs, PCIe between them), with CPU lists that
  // are logical CPUs, which gres.conf must not take for core indices.
  const auto file = mgm_tool_test::scratch() / "slurm-topo.txt";
  write(file,
        "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV4\tPHB\tSYS\t0-15,32-47\t0\n"
        "GPU1\tNV4\t X \tSYS\tPHB\t16-31,48-63\t1\n"
        "GPU2\tPHB\tSYS\t X \tNV2\t0-15,32-47\t0\n"
        "GPU3\tSYS\tPHB\tNV2\t X \t16-31,48-63\t1");
  const auto r = run_mgm("topo --format slurm " + file.string());
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("Name=gpu File=/dev/nvidia0 Links=-1,4,0,0\n") != std::string::npos);
  CHECK(r.out.find("Name=gpu File=/dev/nvidia3 Links=0,0,2,-1\n") != std::string::npos);
  CHECK(r.out.find("Cores=") == r.out.find("Cores= left out"));  // only in the comment
  CHECK(r.out.find("not Slurm's core indices") != std::string::npos);
  CHECK(r.out.find("not NVML's minor number (a topology file does not say)") != std::string::npos);
  std::filesystem::remove(file);
}

TEST_CASE("gres_conf: NVML's minor numbers and Cores= where known, comments naming what is not", "[tool]") {
  const auto m = mgm::sim::machine::from_string("dgx-h100");
  mgm_tool::gres_input in;
  in.source = "this machine";
  in.minor_note = "NVML gave none";
  in.cores_note = "/sys does not say";
  in.gpus.resize(8);
  for (unsigned a = 0; a < 8; ++a) {
    if (a != 5) in.gpus[a].minor = 7 - a;  // minors need not follow the index
    if (a < 4) in.gpus[a].cores = "0-55";
  }
  const std::string all = mgm_tool::gres_conf(m.links(), in);
  INFO(all);
  CHECK(all.find("Name=gpu File=/dev/nvidia7 Cores=0-55 Links=-1,18,18,18,18,18,18,18\n") != std::string::npos);
  CHECK(all.find("Name=gpu File=/dev/nvidia4 Cores=0-55 Links=18,18,18,-1,18,18,18,18\n") != std::string::npos);
  CHECK(all.find("Name=gpu File=/dev/nvidia3 Links=18,18,18,18,-1,18,18,18\n") != std::string::npos);
  // GPU 5 alone has no minor: its own comment, and its index.
  CHECK(all.find("# GPU 5: /dev/nvidia5 is its index, not NVML's minor number (NVML gave none)\n"
                 "Name=gpu File=/dev/nvidia5 Links=") != std::string::npos);
  CHECK(all.find("# Cores= left out: /sys does not say.") != std::string::npos);
  CHECK(all.find("N is the GPU's index") == std::string::npos);  // not every GPU is by index
  // Every GPU known: no comment on minors or cores.
  for (unsigned a = 0; a < 8; ++a) in.gpus[a] = {7 - a, "0-55"};
  const std::string known = mgm_tool::gres_conf(m.links(), in);
  CHECK(known.find("not NVML's minor") == std::string::npos);
  CHECK(known.find("Cores= left out") == std::string::npos);
  CHECK(known.find("Name=gpu File=/dev/nvidia2 Cores=0-55 Links=18,18,18,18,18,-1,18,18\n") != std::string::npos);
}
