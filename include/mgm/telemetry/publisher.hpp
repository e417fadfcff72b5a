/// @file
/// @brief Pool figures visible from outside the process: each publishing process keeps a small
/// text file `mgm.<pid>.<id>` in `/dev/shm` (or `MGM_PUBLISH_DIR`) with its pools' allocated and
/// reserved bytes per device, rewritten at most every 100 ms and removed at exit; `mgm status`
/// and `mgm serve` read them all.
///
/// Publishing starts with `start_publishing()`, or by itself at the first pool when `MGM_PUBLISH=1`.
/// The file is replaced atomically (written aside, then renamed), so a reader never sees half.
///
/// Liveness does not depend on process ids: beside its file the process holds a POSIX record
/// lock on `mgm.<pid>.<id>.lock` for as long as it publishes; the kernel drops the lock when the
/// process dies, however it dies. So the folder can be shared by processes of different pid
/// namespaces (containers, Kubernetes pods with a hostPath): two of them with the same pid (each
/// its container's pid 1) publish under different `<id>`s, a reader sees who is alive without
/// seeing their pids, and where it can see them (`hostPID`) the lock names each holder's pid as
/// the reader's namespace knows it, the pid NVML reports. A forked child does not inherit the lock
/// (nor, therefore, the parent's publishing). Files of the older form `mgm.<pid>` are still read,
/// alive while a process of that pid is.
#pragma once

#include <mgm/telemetry/pool_registry.hpp>
#include <mgm/telemetry/sample.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace mgm::telemetry {

/// @brief One device's figures in a published file.
struct published_device {
  int ordinal{0};             ///< the CUDA ordinal (or simulated device) in the publishing process
  bool simulated{false};
  std::string pci_bus_id;     ///< empty for simulated devices or when unknown
  std::string uuid;
  pool_figures figures;
  std::uint32_t pools{0};
};

/// @brief What one process published.
struct published_process {
  /// The pid in the reader's pid namespace where the reader can see the process (same namespace,
  /// or one above it, as with Kubernetes' hostPID); else the pid the process wrote, in its own.
  std::uint32_t pid{0};
  bool pid_seen_here{true};  ///< whether `pid` is the reader's namespace's (false: the publisher's own)
  std::string id;            ///< the publisher's unique id (its file's `<id>`; empty for `mgm.<pid>` files)
  std::string name;
  clock::time_point updated{};
  std::vector<published_device> devices;
};

/// @brief `$MGM_PUBLISH_DIR`, else `/dev/shm`.
[[nodiscard]] std::filesystem::path default_publish_dir();

/// @brief Writes this process's pool figures every `period` (at least 100 ms) until destroyed,
/// then removes the file. **Thread safety:** safe. A forked child must not destroy a publisher
/// its parent made (its thread is not in the child): `start_publishing`'s own lets go by itself.
class publisher {
 public:
  /// @throws std::system_error when the lock file cannot be made or locked in `dir` (the folder
  /// is missing or not writable, or its file system has no record locks).
  explicit publisher(std::chrono::milliseconds period = std::chrono::milliseconds{100},
                     std::filesystem::path dir = default_publish_dir());
  ~publisher();
  publisher(const publisher&) = delete;
  publisher& operator=(const publisher&) = delete;

  /// @brief Writes the file now (also done by the background thread every period).
  void publish_now();
  [[nodiscard]] const std::filesystem::path& file() const noexcept;

  struct impl;

 private:
  void forget() noexcept;  // removes the files, then drops the lock
  std::unique_ptr<impl> impl_;
};

/// @brief Starts the process-wide publisher (idempotent); `stop_publishing` removes the file.
/// @throws std::system_error as `publisher` does (with `MGM_PUBLISH=1` the first pool logs it instead).
void start_publishing();
void stop_publishing() noexcept;

/// @brief Every live process's published figures in `dir`, ordered by pid. The files of a process
/// that died without removing them (killed, out of memory) are removed where the reader may
/// (else ignored); unreadable files are skipped and named in `skipped` (line = 0).
[[nodiscard]] std::vector<published_process> read_published(const std::filesystem::path& dir = default_publish_dir(),
                                                            std::vector<log_issue>* skipped = nullptr);

/// @brief Whether a published device is the GPU (or MIG instance) a sample shows: by UUID where
/// both have one, else by PCI bus id (never for a MIG instance, which shares its GPU's); for
/// simulated devices (when `simulated` is true) by ordinal.
[[nodiscard]] bool same_gpu(const device_sample& sample, const published_device& device, bool simulated);

/// @brief Adds published pool figures to samples of the same GPU (by PCI bus id or UUID; for
/// simulated devices, when `simulated` is true, by ordinal), summing over processes.
void add_published_figures(std::vector<device_sample>& samples, const std::vector<published_process>& published,
                           bool simulated = false);

}  // namespace mgm::telemetry
