#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include <array>
#include <string>

namespace mgm {

namespace {
constexpr std::array<std::string_view, 12> nccl_names{"LOC", "NVL", "NVB", "C2C", "PIX", "PXB",
                                                      "P2C", "PXN", "PHB", "SYS", "NET", "DIS"};
}  // namespace

std::string_view gpu_path::nccl_name() const noexcept { return nccl_names[static_cast<std::size_t>(type)]; }

std::string gpu_path::label() const {
  switch (smi) {
    case smi_label::x: return "X";
    case smi_label::nv: return "NV" + std::to_string(nvlinks);
    case smi_label::pix: return "PIX";
    case smi_label::pxb: return "PXB";
    case smi_label::node: return "NODE";
    case smi_label::phb: return "PHB";
    case smi_label::sys: return "SYS";
  }
  return "?";
}

gpu_path gpu_path::from_label(std::string_view label) {
  if (label == "X") return {path_type::loc, smi_label::x, 0};
  if (label == "PIX") return {path_type::pix, smi_label::pix, 0};
  if (label == "PXB") return {path_type::pxb, smi_label::pxb, 0};
  if (label == "NODE") return {path_type::phb, smi_label::node, 0};  // NCCL folds NODE into PHB
  if (label == "PHB") return {path_type::phb, smi_label::phb, 0};
  if (label == "SYS" || label == "SOC") return {path_type::sys, smi_label::sys, 0};  // SOC: drivers before 2017
  if (label.size() > 2 && label.substr(0, 2) == "NV" && label.size() <= 4) {
    int links = 0;
    for (const char c : label.substr(2)) {
      if (c < '0' || c > '9') links = -1000;
      links = links * 10 + (c - '0');
    }
    if (links > 0) return {path_type::nvl, smi_label::nv, links};
  }
  MGM_FAIL("unknown nvidia-smi topology label '" + std::string{label} +
           "' (expected X, NV#, PIX, PXB, NODE, PHB, SYS or SOC)");
}

topology::topology(std::vector<gpu_info> gpus) : gpus_{std::move(gpus)} {
  const std::size_t n = gpus_.size();
  paths_.assign(n * n, gpu_path{path_type::sys, smi_label::sys, 0});
  for (std::size_t i = 0; i < n; ++i) paths_[i * n + i] = {path_type::loc, smi_label::x, 0};
}

std::size_t topology::index(device_id a, device_id b) const {
  const auto n = gpus_.size();
  MGM_EXPECTS(!a.is_host() && !b.is_host() && a.value() >= 0 && b.value() >= 0 && a.index() < n && b.index() < n,
              "topology: GPU pair (" + std::to_string(a.value()) + ", " + std::to_string(b.value()) +
                  ") out of range for " + std::to_string(n) + " GPUs");
  return a.index() * n + b.index();
}

const gpu_info& topology::gpu(device_id d) const { return gpus_[index(d, d) / (gpus_.size() + 1)]; }

const gpu_path& topology::path(device_id a, device_id b) const { return paths_[index(a, b)]; }

void topology::set_path(device_id a, device_id b, gpu_path p) {
  MGM_EXPECTS(a != b, "topology: a GPU's path to itself is always X");
  paths_[index(a, b)] = p;
  paths_[index(b, a)] = p;
}

void topology::set_paths_from_labels(const std::vector<std::vector<std::string_view>>& labels) {
  const std::size_t n = gpus_.size();
  MGM_EXPECTS(labels.size() == n, "topology: " + std::to_string(labels.size()) + " rows of labels for " +
                                      std::to_string(n) + " GPUs");
  std::vector<gpu_path> next = paths_;
  for (std::size_t r = 0; r < n; ++r) {
    MGM_EXPECTS(labels[r].size() == n, "topology: row " + std::to_string(r) + " has " +
                                           std::to_string(labels[r].size()) + " labels, expected " + std::to_string(n));
    for (std::size_t c = 0; c < n; ++c) {
      gpu_path p;
      try {
        p = gpu_path::from_label(labels[r][c]);
      } catch (const logic_error& e) {
        MGM_FAIL("topology: row " + std::to_string(r) + ", column " + std::to_string(c) + ": " + e.what());
      }
      MGM_EXPECTS((r == c) == (p.smi == smi_label::x),
                  "topology: row " + std::to_string(r) + ", column " + std::to_string(c) + ": 'X' belongs exactly on the diagonal");
      next[r * n + c] = p;
    }
  }
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t c = 0; c < r; ++c) {
      MGM_EXPECTS(next[r * n + c] == next[c * n + r], "topology: the label of GPU" + std::to_string(r) + "-GPU" +
                                                          std::to_string(c) + " differs from GPU" + std::to_string(c) +
                                                          "-GPU" + std::to_string(r));
    }
  }
  paths_ = std::move(next);
}

}  // namespace mgm
