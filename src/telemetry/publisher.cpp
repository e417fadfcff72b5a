// The registry of live pools, the /dev/shm publisher of their figures, and its reader.
//
// File format (text, one item per line, written aside then renamed into place):
//   mgm-publish 1
//   pid 1234
//   name python3
//   time_ns 1764500000000000000
//   device <ordinal> cuda|sim <pci bus id or -> <uuid or -> <allocated bytes or -> <reserved bytes> <pools>
#include <mgm/log.hpp>
#include <mgm/telemetry/nvml.hpp>
#include <mgm/telemetry/publisher.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

namespace mgm::telemetry {

// ---- the pools, through the core layer's list -----------------------------------------------------

namespace {

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  const std::string s{v};
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

// Starts publishing at the first pool when MGM_PUBLISH says so.
class publish_on_first_pool final : public pool_observer {
 public:
  void pool_created(device_id, bool) noexcept override {
    std::call_once(once_, [] {
      if (!env_true("MGM_PUBLISH")) return;
      try {
        start_publishing();
      } catch (const std::exception& e) {  // publishing is best effort: the pool works without it
        mgm::log(mgm::log_level::warning, std::string{"MGM_PUBLISH: cannot publish pool figures: "} + e.what());
      } catch (...) {
      }
    });
  }

 private:
  std::once_flag once_;
};

}  // namespace

void install_pool_observer() noexcept {
  // Never destroyed: a pool made during static destruction may still tell it.
  static auto* observer = new publish_on_first_pool;
  set_pool_observer(observer);
}

std::vector<device_pool_figures> registered_pool_figures() {
  std::map<std::pair<bool, int>, device_pool_figures> sums;
  for (const auto& p : registered_pools()) {
    auto& sum = sums[{p.simulated, p.device.value()}];
    sum.device = p.device;
    sum.simulated = p.simulated;
    if (sum.pools == 0 || sum.figures.allocated) {
      sum.figures.allocated =
          p.figures.allocated ? std::optional{sum.figures.allocated.value_or(0) + *p.figures.allocated} : std::nullopt;
    }
    sum.figures.reserved += p.figures.reserved;
    ++sum.pools;
  }
  std::vector<device_pool_figures> out;
  for (auto& [k, v] : sums) out.push_back(v);
  return out;
}

// ---- publisher -----------------------------------------------------------------------------------

std::filesystem::path default_publish_dir() {
  const char* d = std::getenv("MGM_PUBLISH_DIR");
  return d != nullptr && *d != '\0' ? std::filesystem::path{d} : std::filesystem::path{"/dev/shm"};
}

namespace {

std::string process_name() {
  std::ifstream in{"/proc/self/comm"};
  std::string name;
  std::getline(in, name);
  return name.empty() ? std::string{"?"} : name;
}

std::string dash_if_empty(const std::string& s) { return s.empty() ? std::string{"-"} : s; }

}  // namespace

struct publisher::impl {
  std::chrono::milliseconds period;
  std::filesystem::path dir;
  std::filesystem::path file;
  std::string name = process_name();
  std::vector<cuda_identity> cuda;  // looked up once, on the first CUDA pool
  bool cuda_known{false};
  std::mutex mutex;                 // one writer at a time
  std::condition_variable wake;
  bool stopping{false};
  std::thread thread;

  void write() {
    const auto figures = registered_pool_figures();
    const std::lock_guard lock{mutex};
    std::ostringstream out;
    out << "mgm-publish 1\npid " << ::getpid() << "\nname " << name << "\ntime_ns "
        << std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch()).count() << '\n';
    for (const auto& f : figures) {
      std::string bus, uuid;
      if (!f.simulated) {
        if (!cuda_known) {
          try {
            cuda = cuda_identities();
          } catch (...) {
          }
          cuda_known = true;
        }
        for (const auto& c : cuda) {
          if (c.ordinal == f.device.value()) {
            bus = normalise_pci_bus_id(c.pci_bus_id);
            uuid = c.uuid;
          }
        }
      }
      out << "device " << f.device.value() << (f.simulated ? " sim " : " cuda ") << dash_if_empty(bus) << ' '
          << dash_if_empty(uuid) << ' ' << (f.figures.allocated ? std::to_string(*f.figures.allocated) : "-") << ' '
          << f.figures.reserved << ' ' << f.pools << '\n';
    }
    const auto tmp = dir / (file.filename().string() + ".tmp");
    {
      std::ofstream o{tmp, std::ios::trunc};
      o << out.str();
      if (!o) return;  // /dev/shm full or gone: try again next period
    }
    std::error_code ec;
    std::filesystem::rename(tmp, file, ec);
  }
};

publisher::publisher(std::chrono::milliseconds period, std::filesystem::path dir) : impl_{std::make_unique<impl>()} {
  impl_->period = std::max(period, std::chrono::milliseconds{100});
  impl_->dir = std::move(dir);
  impl_->file = impl_->dir / ("mgm." + std::to_string(::getpid()));
  impl_->write();
  impl_->thread = std::thread{[p = impl_.get()] {
    std::unique_lock lock{p->mutex};
    while (!p->wake.wait_for(lock, p->period, [p] { return p->stopping; })) {
      lock.unlock();
      try {
        p->write();
      } catch (...) {
      }
      lock.lock();
    }
  }};
}

publisher::~publisher() {
  {
    const std::lock_guard lock{impl_->mutex};
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
  std::error_code ec;
  std::filesystem::remove(impl_->file, ec);
}

void publisher::publish_now() { impl_->write(); }
const std::filesystem::path& publisher::file() const noexcept { return impl_->file; }

namespace {

std::mutex g_publisher_mutex;
std::unique_ptr<publisher>& global_publisher() {
  static std::unique_ptr<publisher> p;  // destroyed at exit: the file goes with it
  return p;
}

}  // namespace

void start_publishing() {
  install_pool_observer();
  const std::lock_guard lock{g_publisher_mutex};
  auto& p = global_publisher();
  if (!p) p = std::make_unique<publisher>();
}

void stop_publishing() noexcept {
  const std::lock_guard lock{g_publisher_mutex};
  global_publisher().reset();
}

// ---- reader --------------------------------------------------------------------------------------

namespace {

bool process_alive(std::uint32_t pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

std::optional<published_process> parse_published(std::istream& in, std::string& error) {
  published_process p;
  std::string line;
  std::getline(in, line);
  if (line != "mgm-publish 1") {
    error = "not an mgm publish file (first line '" + line.substr(0, 40) + "')";
    return std::nullopt;
  }
  while (std::getline(in, line)) {
    std::istringstream ls{line};
    std::string key;
    ls >> key;
    if (key == "pid") {
      ls >> p.pid;
    } else if (key == "name") {
      std::getline(ls >> std::ws, p.name);
    } else if (key == "time_ns") {
      long long ns = 0;
      ls >> ns;
      p.updated = clock::time_point{std::chrono::duration_cast<clock::duration>(std::chrono::nanoseconds{ns})};
    } else if (key == "device") {
      published_device d;
      std::string kind, bus, uuid, allocated;
      ls >> d.ordinal >> kind >> bus >> uuid >> allocated >> d.figures.reserved >> d.pools;
      if (!ls || (kind != "sim" && kind != "cuda")) {
        error = "bad device line '" + line + "'";
        return std::nullopt;
      }
      d.simulated = kind == "sim";
      if (bus != "-") d.pci_bus_id = bus;
      if (uuid != "-") d.uuid = uuid;
      if (allocated != "-") d.figures.allocated = std::stoull(allocated);
      p.devices.push_back(std::move(d));
    }
  }
  return p;
}

}  // namespace

std::vector<published_process> read_published(const std::filesystem::path& dir, std::vector<log_issue>* skipped) {
  std::vector<published_process> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator{dir, ec}) {
    const std::string fname = entry.path().filename().string();
    if (fname.rfind("mgm.", 0) != 0) continue;
    const std::string digits = fname.substr(4);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    std::uint32_t pid = 0;
    try {
      pid = static_cast<std::uint32_t>(std::stoul(digits));
    } catch (...) {
      continue;
    }
    if (!process_alive(pid)) continue;  // stale: its process died without removing it
    std::ifstream in{entry.path()};
    std::string error;
    std::optional<published_process> p;
    try {
      p = parse_published(in, error);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!p) {
      if (skipped != nullptr) skipped->push_back({0, entry.path().string() + ": " + error});
      continue;
    }
    p->pid = pid;
    out.push_back(std::move(*p));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return out;
}

bool same_gpu(const device_sample& sample, const published_device& device, bool simulated) {
  if (simulated) return device.simulated && device.ordinal == sample.index;
  if (device.simulated) return false;
  // Where both have a UUID it decides: a MIG instance shares its GPU's bus id, so a pool on an
  // instance must not count on the GPU as well (CUDA writes GPU- where NVML writes MIG-).
  const auto bare = [](std::string_view u) { return u.size() > 4 && u[3] == '-' ? u.substr(4) : u; };
  if (!sample.uuid.empty() && !device.uuid.empty()) return bare(sample.uuid) == bare(device.uuid);
  if (sample.mig) return false;
  return !sample.pci_bus_id.empty() && !device.pci_bus_id.empty() &&
         normalise_pci_bus_id(device.pci_bus_id) == normalise_pci_bus_id(sample.pci_bus_id);
}

void add_published_figures(std::vector<device_sample>& samples, const std::vector<published_process>& published,
                           bool simulated) {
  for (auto& s : samples) {
    for (const auto& p : published) {
      for (const auto& d : p.devices) {
        if (!same_gpu(s, d, simulated)) continue;
        s.pool_reserved = s.pool_reserved.value_or(0) + d.figures.reserved;
        if (d.figures.allocated) s.pool_allocated = s.pool_allocated.value_or(0) + *d.figures.allocated;
      }
    }
  }
}

}  // namespace mgm::telemetry
