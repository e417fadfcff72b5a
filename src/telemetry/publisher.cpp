// The registry of live pools, the /dev/shm publisher of their figures, and its reader.
//
// Files: `mgm.<pid>.<id>` (the figures) and `mgm.<pid>.<id>.lock` (a POSIX record lock held
// while the process publishes: the reader's proof that it lives). The figures' format (text, one
// item per line, written aside then renamed into place):
//   mgm-publish 1
//   pid 1234
//   name python3
//   time_ns 1764500000000000000
//   device <ordinal> cuda|sim <pci bus id or -> <uuid or -> <allocated bytes or -> <reserved bytes> <pools>
#include <mgm/log.hpp>
#include <mgm/telemetry/nvml.hpp>
#include <mgm/telemetry/publisher.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <system_error>
#include <tuple>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
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

// The ids of this process's live publishers. A POSIX lock never conflicts with its own process,
// so the reader learns from here that a file whose lock it finds free is its own.
std::mutex g_own_mutex;
std::set<std::string>& own_ids() {
  static auto* ids = new std::set<std::string>;  // never destroyed: a publisher may outlive statics
  return *ids;
}

std::string fresh_id() {
  std::random_device rd;
  const std::uint64_t v = (std::uint64_t{rd()} << 32) ^ rd() ^
                          static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(v));
  return out;
}

// The lock that says the process lives: a write lock on the whole of `path`, held by the process
// until it closes `fd` or dies. @throws std::system_error where the folder is not writable or its
// file system has no record locks.
int hold_lock(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error{errno, std::generic_category(), "cannot create " + path.string()};
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  if (::fcntl(fd, F_SETLK, &l) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::system_error{e, std::generic_category(), "cannot lock " + path.string()};
  }
  return fd;
}

// Held by every write, and across a fork: a publisher's thread is never forked in the middle of one
// (allocating, or holding a stream's lock the child's first use of it would wait on for ever).
std::mutex g_write_mutex;

// Registers the fork handlers below, once, before this file's locks are first used: by the first
// publisher, `start_publishing` or `read_published`.
void ensure_fork_handlers();

}  // namespace

struct publisher::impl {
  std::chrono::milliseconds period;
  std::filesystem::path dir;
  std::filesystem::path file;
  std::filesystem::path lock_file;
  std::string id = fresh_id();
  int lock_fd{-1};
  std::string name = process_name();
  std::vector<cuda_identity> cuda;  // looked up once, on the first CUDA pool
  bool cuda_known{false};
  std::mutex mutex;                 // one writer at a time
  std::condition_variable wake;
  bool stopping{false};
  std::thread thread;

  void write() {
    const std::lock_guard writing{g_write_mutex};
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
  ensure_fork_handlers();
  impl_->period = std::max(period, std::chrono::milliseconds{100});
  impl_->dir = std::move(dir);
  const std::string stem = "mgm." + std::to_string(::getpid()) + "." + impl_->id;
  impl_->file = impl_->dir / stem;
  impl_->lock_file = impl_->dir / (stem + ".lock");
  impl_->lock_fd = hold_lock(impl_->lock_file);  // before the figures exist: a reader never finds them unlocked
  {
    const std::lock_guard lock{g_own_mutex};
    own_ids().insert(impl_->id);
  }
  try {
    impl_->write();
  } catch (...) {
    forget();
    throw;
  }
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
  forget();
}

void publisher::forget() noexcept {
  std::error_code ec;
  std::filesystem::remove(impl_->file, ec);  // the figures first: never a file without its lock
  std::filesystem::remove(impl_->lock_file, ec);
  {
    const std::lock_guard lock{g_own_mutex};
    own_ids().erase(impl_->id);
  }
  ::close(impl_->lock_fd);  // drops the lock
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

// A forked child (a DataLoader worker) has the parent's publisher object but not its thread, its
// lock or its files: it lets go of them without a join and without removing what is the parent's.
// The locks its paths take are held across the fork (publisher, own ids, then a write's: the order
// the constructor takes them in), so the child never inherits one locked by a thread it lacks. The
// pool list, which the publisher's thread reads, has its own handler, registered before this one
// (ensure_fork_handlers), so its lock is taken after these: the order start_publishing takes them.
void before_fork() noexcept {
  g_publisher_mutex.lock();
  g_own_mutex.lock();
  g_write_mutex.lock();
}
void after_fork_in_parent() noexcept {
  g_write_mutex.unlock();
  g_own_mutex.unlock();
  g_publisher_mutex.unlock();
}
void after_fork_in_child() noexcept {
  // Its thread is not in this process: never joined, and kept where a leak checker finds it.
  static std::atomic<publisher*> forked_away{nullptr};
  if (auto* p = global_publisher().release()) forked_away.store(p);
  own_ids().clear();
  g_write_mutex.unlock();
  g_own_mutex.unlock();
  g_publisher_mutex.unlock();
}

namespace {

void ensure_fork_handlers() {
  static const int at_fork = [] {
    (void)registered_pools();  // the pool list's own handler first: its lock is taken after these
    return ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  }();
  (void)at_fork;
}

}  // namespace

void start_publishing() {
  install_pool_observer();  // the publisher's constructor registers the fork handlers
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

// Whether the process that wrote `mgm.<pid>.<id>` lives, and its pid as this namespace sees it
// (0 where it cannot). A lock file that is gone or free means it died.
struct holder {
  bool alive{false};
  std::uint32_t pid{0};
};
holder lock_holder(const std::filesystem::path& lock_file, const std::string& id) {
  {
    // This process's own: never opened here, for closing any descriptor of a file drops every
    // POSIX lock the process holds on it (and another reader would then tidy the files away).
    const std::lock_guard lock{g_own_mutex};
    if (own_ids().count(id) != 0) return {true, static_cast<std::uint32_t>(::getpid())};
  }
  const int fd = ::open(lock_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {errno != ENOENT, 0};  // gone: it died; out of descriptors, no permission: cannot tell
  struct flock l {};
  l.l_type = F_RDLCK;  // conflicts with the publisher's write lock; testable on a read-only descriptor
  l.l_whence = SEEK_SET;
  const int rc = ::fcntl(fd, F_GETLK, &l);
  ::close(fd);  // another process's file: this process holds no lock on it to drop
  if (rc != 0) return {true, 0};  // cannot tell: shown rather than hidden
  if (l.l_type != F_UNLCK) return {true, static_cast<std::uint32_t>(std::max<pid_t>(l.l_pid, 0))};
  return {};
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
  ensure_fork_handlers();
  std::vector<published_process> out;
  std::error_code ec;
  const auto digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  for (const auto& entry : std::filesystem::directory_iterator{dir, ec}) {
    const std::string fname = entry.path().filename().string();
    if (fname.rfind("mgm.", 0) != 0) continue;
    // mgm.<pid>.<id> (alive while its lock is held) or the older mgm.<pid> (while the pid lives).
    const std::string_view rest = std::string_view{fname}.substr(4);
    const std::size_t dot = rest.find('.');
    const std::string_view pid_text = rest.substr(0, dot);
    const std::string id = dot == std::string_view::npos ? std::string{} : std::string{rest.substr(dot + 1)};
    if (!digits(pid_text)) continue;
    if (dot != std::string_view::npos &&
        (id.size() != 16 || !std::all_of(id.begin(), id.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }))) {
      continue;  // a .lock or .tmp file, or not ours
    }
    const auto written_pid = static_cast<std::uint32_t>(std::stoul(std::string{pid_text}));
    std::uint32_t pid = written_pid;
    bool seen_here = true;
    if (id.empty()) {
      if (!process_alive(written_pid)) continue;  // stale: its process died without removing it
    } else {
      const auto lock_file = dir / (fname + ".lock");
      const holder h = lock_holder(lock_file, id);
      if (!h.alive) {  // died without removing its files: tidied where this reader may write
        std::filesystem::remove(entry.path(), ec);
        std::filesystem::remove(lock_file, ec);
        continue;
      }
      seen_here = h.pid != 0;
      if (seen_here) pid = h.pid;
    }
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
    p->pid_seen_here = seen_here;
    p->id = id;
    out.push_back(std::move(*p));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return std::tie(a.pid, a.id) < std::tie(b.pid, b.id); });
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
