// gres.conf from a topology (see slurm_gres.hpp).
#include "slurm_gres.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

namespace mgm_tool {

namespace {

std::optional<std::string> first_line(const std::filesystem::path& p) {
  std::ifstream in{p};
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())) != 0) line.pop_back();
  return line;
}

std::optional<unsigned> number_in(const std::filesystem::path& p) {
  const auto line = first_line(p);
  if (!line || line->empty() || line->find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return static_cast<unsigned>(std::stoul(*line));
}

// "0-3,8,10-11" into its numbers; nullopt when it is not such a list.
std::optional<std::set<unsigned>> parse_list(const std::string& text) {
  std::set<unsigned> out;
  std::stringstream in{text};
  std::string part;
  while (std::getline(in, part, ',')) {
    const std::size_t dash = part.find('-');
    const std::string lo = part.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    const auto digits = [](const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; };
    if (!digits(lo) || !digits(hi) || std::stoul(lo) > std::stoul(hi) || std::stoul(hi) > 1u << 20) return std::nullopt;
    for (unsigned v = static_cast<unsigned>(std::stoul(lo)); v <= std::stoul(hi); ++v) out.insert(v);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::string as_ranges(const std::set<unsigned>& values) {
  std::string out;
  for (auto it = values.begin(); it != values.end();) {
    const unsigned first = *it;
    unsigned last = first;
    for (++it; it != values.end() && *it == last + 1; ++it) last = *it;
    if (!out.empty()) out += ',';
    out += std::to_string(first) + (last == first ? "" : "-" + std::to_string(last));
  }
  return out;
}

// NVML's 00000000:17:00.0 as sysfs names it: 0000:17:00.0.
std::string sysfs_bus_id(std::string id) {
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::size_t colon = id.find(':');
  if (colon != std::string::npos && colon > 4) id = id.substr(colon - 4);
  return id;
}

}  // namespace

std::optional<std::string> slurm_cores(const std::string& pci_bus_id, const std::filesystem::path& sys, std::string* why) {
  const auto say = [&](const std::string& reason) -> std::optional<std::string> {
    if (why != nullptr) *why = reason;
    return std::nullopt;
  };
  if (pci_bus_id.empty()) return say("the GPU's PCI bus id is unknown");
  const auto device = sys / "bus" / "pci" / "devices" / sysfs_bus_id(pci_bus_id);
  const auto list = first_line(device / "local_cpulist");
  if (!list) return say("cannot read " + (device / "local_cpulist").string());
  const auto cpus = parse_list(*list);
  if (!cpus) return say((device / "local_cpulist").string() + " is not a CPU list: '" + *list + "'");
  // Every CPU's core, numbered as Slurm does: packages in order, cores by id within each.
  std::map<unsigned, std::pair<unsigned, unsigned>> core_of;  // cpu -> (package, core id)
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator{sys / "devices" / "system" / "cpu", ec}) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 4 || name.rfind("cpu", 0) != 0 || name.find_first_not_of("0123456789", 3) != std::string::npos) continue;
    const auto package = number_in(entry.path() / "topology" / "physical_package_id");
    const auto core = number_in(entry.path() / "topology" / "core_id");
    if (!package || !core) return say("cannot read the topology of " + entry.path().string());
    core_of[static_cast<unsigned>(std::stoul(name.substr(3)))] = {*package, *core};
  }
  if (ec || core_of.empty()) return say("cannot list " + (sys / "devices" / "system" / "cpu").string());
  std::set<std::pair<unsigned, unsigned>> all;
  for (const auto& [cpu, core] : core_of) all.insert(core);
  std::map<std::pair<unsigned, unsigned>, unsigned> index;
  for (const auto& core : all) index.emplace(core, static_cast<unsigned>(index.size()));
  std::set<unsigned> cores;
  for (const unsigned cpu : *cpus) {
    const auto it = core_of.find(cpu);
    if (it == core_of.end()) return say("CPU " + std::to_string(cpu) + " of local_cpulist has no topology in sysfs");
    cores.insert(index.at(it->second));
  }
  return as_ranges(cores);
}

std::string gres_conf(const mgm::topology& t, const gres_input& in) {
  const auto n = static_cast<int>(t.gpu_count());
  std::ostringstream out;
  out << "# gres.conf for " << in.source << ", written by mgm topo --format slurm.\n"
      << "# Links=: -1 for the GPU itself, then the NVLink count to each GPU in this order, 0 without NVLink.\n"
      << "# With these lines, set AutoDetect=off (or let nvml detect and keep only Links=).\n";
  const auto gpu = [&](int a) {
    return static_cast<std::size_t>(a) < in.gpus.size() ? in.gpus[static_cast<std::size_t>(a)] : gres_gpu{};
  };
  int by_index = 0;
  bool any_without_cores = false;
  for (int a = 0; a < n; ++a) {
    by_index += gpu(a).minor ? 0 : 1;
    any_without_cores = any_without_cores || !gpu(a).cores;
  }
  if (any_without_cores) out << "# Cores= left out: " << in.cores_note << ".\n";
  if (n > 0 && by_index == n) {
    out << "# File=/dev/nvidiaN: N is the GPU's index, not NVML's minor number (" << in.minor_note
        << "); check it with nvidia-smi -q | grep Minor.\n";
  }
  for (int a = 0; a < n; ++a) {
    const gres_gpu g = gpu(a);
    if (!g.minor && by_index < n) {
      out << "# GPU " << a << ": /dev/nvidia" << a << " is its index, not NVML's minor number (" << in.minor_note
          << ")\n";
    }
    out << "Name=gpu File=/dev/nvidia" << (g.minor ? *g.minor : static_cast<unsigned>(a));
    if (g.cores) out << " Cores=" << *g.cores;
    out << " Links=";
    for (int b = 0; b < n; ++b) {
      const auto& p = t.path(mgm::device_id{a}, mgm::device_id{b});
      out << (b == 0 ? "" : ",") << (a == b ? -1 : p.is_nvlink() ? p.nvlinks : 0);
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace mgm_tool
