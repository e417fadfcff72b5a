// Pool figures published in a directory by one process and read by another; stale files ignored.
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool_observer.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/telemetry/log_format.hpp>
#include <mgm/telemetry/publisher.hpp>

#include "test_artifacts.hpp"

#include <catch2/catch.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

extern char** environ;

namespace {
bool g_forked_child = false;  // set in the children these tests fork
}  // namespace

#if defined(__SANITIZE_ADDRESS__)
// LeakSanitizer's check at exit stops every thread it knows of; in a child forked from a process
// with threads it still counts the parent's, and can wait on them for ever. The parent is checked.
extern "C" int __lsan_is_turned_off() { return g_forked_child ? 1 : 0; }
#endif

namespace tel = mgm::telemetry;
namespace fs = std::filesystem;

namespace {

// The files named mgm.* in `dir`, but for a write's passing .tmp (a publisher's thread may be in
// the middle of one).
std::vector<std::string> mgm_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator{dir}) {
    const auto name = e.path().filename().string();
    if (name.rfind("mgm.", 0) == 0 && e.path().extension() != ".tmp") out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path fresh_dir(const char* what) {
  auto d = fs::temp_directory_path() / ("mgm_publish_" + std::string{what} + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// What became of the children `fork_beside` forked.
struct fork_tally {
  int hung{0};    // killed by their alarm
  int failed{0};  // `in_child` said no, or no child could be forked
};

// Runs `work` over and over on a thread while `times` children are forked, `pause` apart, each
// running `in_child` (true: it worked) under a 10 s alarm and leaving by _exit.
template <class Work, class Child>
fork_tally fork_beside(Work work, int times, std::chrono::microseconds pause, Child in_child) {
  std::atomic<bool> stop{false};
  std::thread busy{[&] {
    while (!stop.load()) {
      work();
      std::this_thread::sleep_for(std::chrono::microseconds{20});  // the forking thread gets its turn
    }
  }};
  fork_tally t;
  for (int i = 0; i < times; ++i) {
    std::this_thread::sleep_for(pause);
    const pid_t kid = ::fork();
    if (kid < 0) {  // no REQUIRE while `busy` runs: its thread must be joined first
      ++t.failed;
      break;
    }
    if (kid == 0) {
      ::alarm(10);  // a hang is a failure, not a test that never ends
      ::_exit(in_child() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(kid, &status, 0);
    if (WIFSIGNALED(status)) ++t.hung;
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++t.failed;
  }
  stop = true;
  busy.join();
  return t;
}

// The child process of tests/publisher_child.cpp, with pipes to its stdin and stdout.
class child {
 public:
  explicit child(const fs::path& dir, const char* program = MGM_PUBLISHER_CHILD, const fs::path& hold_lock = {}) {
    int in[2], out[2];
    REQUIRE(::pipe(in) == 0);
    REQUIRE(::pipe(out) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    ::setenv("MGM_PUBLISH", "1", 1);
    ::setenv("MGM_PUBLISH_DIR", dir.c_str(), 1);
    if (!hold_lock.empty()) ::setenv("MGM_TEST_HOLD_LOCK", hold_lock.c_str(), 1);
    const std::string path = mgm_test::artifact(program);
    char* argv[] = {const_cast<char*>(path.c_str()), nullptr};
    const int rc = posix_spawn(&pid_, path.c_str(), &fa, nullptr, argv, environ);
    ::unsetenv("MGM_PUBLISH");
    ::unsetenv("MGM_PUBLISH_DIR");
    ::unsetenv("MGM_TEST_HOLD_LOCK");
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    REQUIRE(rc == 0);
    to_ = ::fdopen(in[1], "w");
    from_ = ::fdopen(out[0], "r");
    char line[64] = {};
    REQUIRE(std::fgets(line, sizeof line, from_) != nullptr);
    REQUIRE(std::string{line}.rfind("ready", 0) == 0);
  }
  ~child() {
    if (pid_ != 0) kill();
    std::fclose(to_);
    std::fclose(from_);
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  int exit_normally() {
    std::fputs("exit\n", to_);
    std::fflush(to_);
    return wait();
  }
  void kill() {
    ::kill(pid_, SIGKILL);
    wait();
  }

 private:
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
    return status;
  }
  pid_t pid_{0};
  FILE* to_{nullptr};
  FILE* from_{nullptr};
};

}  // namespace

TEST_CASE("publisher: another process's pool figures, read while it runs, gone when it exits", "[telemetry][publish]") {
  const auto dir = fresh_dir("two");
  // Linked to the one-stop target, or to the telemetry layer alone: MGM_PUBLISH=1 publishes either way.
  const char* program = GENERATE(MGM_PUBLISHER_CHILD, MGM_PUBLISHER_CHILD_TELEMETRY);
  INFO(program);
  child c{dir, program};
  std::vector<tel::log_issue> skipped;
  const auto procs = tel::read_published(dir, &skipped);
  CHECK(skipped.empty());
  REQUIRE(procs.size() == 1);
  const auto& p = procs[0];
  CHECK(p.pid == static_cast<std::uint32_t>(c.pid()));
  CHECK(p.pid_seen_here);
  CHECK(p.id.size() == 16);
  // The figures and the lock the process holds while it publishes.
  const std::string stem = "mgm." + std::to_string(c.pid()) + "." + p.id;
  CHECK(mgm_files(dir) == std::vector<std::string>{stem, stem + ".lock"});
  CHECK(p.name.rfind("mgm_test_publis", 0) == 0);  // /proc/PID/comm keeps 15 characters
  REQUIRE(p.devices.size() == 2);
  CHECK(p.devices[0].simulated);
  CHECK(p.devices[0].ordinal == 0);
  CHECK(p.devices[0].figures.allocated == std::uint64_t{100} << 20);
  CHECK(p.devices[0].figures.reserved >= std::uint64_t{100} << 20);
  CHECK(p.devices[1].figures.allocated == std::uint64_t{300} << 20);
  CHECK(p.devices[0].pools == 1U);
  CHECK(std::chrono::abs(tel::clock::now() - p.updated) < std::chrono::seconds{30});

  // What `mgm status --sim` does: the published figures joined to simulated devices by ordinal.
  std::vector<tel::device_sample> samples(3);
  for (int i = 0; i < 3; ++i) samples[static_cast<std::size_t>(i)].index = i;
  tel::add_published_figures(samples, procs, true);
  CHECK(samples[1].pool_allocated == std::uint64_t{300} << 20);
  CHECK_FALSE(samples[2].pool_reserved.has_value());
  tel::add_published_figures(samples, procs, false);  // real GPUs never match simulated devices
  CHECK(samples[1].pool_allocated == std::uint64_t{300} << 20);

  CHECK(WIFEXITED(c.exit_normally()));
  CHECK(tel::read_published(dir).empty());
  CHECK(mgm_files(dir).empty());  // both files removed at exit
  fs::remove_all(dir);
}

TEST_CASE("publisher: the file of a killed process is ignored", "[telemetry][publish]") {
  const auto dir = fresh_dir("stale");
  {
    child c{dir};
    c.kill();  // SIGKILL: no chance to remove its files
  }
  CHECK(mgm_files(dir).size() == 2);  // the figures and the lock file, whose lock died with it
  CHECK(tel::read_published(dir).empty());
  CHECK(mgm_files(dir).empty());  // the reader tidied them
  fs::remove_all(dir);
}

TEST_CASE("publisher: in-process publishing, a bad file named, and matching by PCI bus id", "[telemetry][publish]") {
  const auto dir = fresh_dir("self");
  auto machine = mgm::sim::machine::from_string("1x2GiB");
  mgm::caching_pool<mgm::sim::device_allocator, false> pool{machine.allocator(mgm::device_id{0})};
  void* p = pool.allocate(10 << 20);
  {
    tel::publisher pub{std::chrono::milliseconds{10}, dir};
    CHECK(pub.file().filename().string().rfind("mgm." + std::to_string(::getpid()) + ".", 0) == 0);
    std::ofstream{dir / "mgm.1"} << "garbage\n";   // pid 1 is alive: read, and refused
    std::ofstream{dir / "mgm.notapid"} << "x\n";   // not ours: not even looked at
    std::vector<tel::log_issue> skipped;
    const auto procs = tel::read_published(dir, &skipped);
    REQUIRE(skipped.size() == 1);
    CHECK(skipped[0].message.find("not an mgm publish file") != std::string::npos);
    REQUIRE(procs.size() == 1);  // its own: a process's lock never conflicts with itself, the reader knows it
    CHECK(procs[0].pid == static_cast<std::uint32_t>(::getpid()));
    REQUIRE(procs[0].devices.size() >= 1);
    // A pool without statistics publishes what it reserves, and no allocated figure.
    CHECK_FALSE(procs[0].devices[0].figures.allocated.has_value());
    CHECK(procs[0].devices[0].figures.reserved >= std::uint64_t{10} << 20);
  }
  CHECK(mgm_files(dir) == std::vector<std::string>{"mgm.1", "mgm.notapid"});

  tel::published_process other;
  other.pid = 99;
  tel::published_device d;
  d.ordinal = 5;  // its ordinal means nothing here: the bus id does the join
  d.pci_bus_id = "00000000:3B:00.0";
  d.figures.allocated = 7;
  d.figures.reserved = 9;
  other.devices.push_back(d);
  std::vector<tel::device_sample> samples(2);
  samples[0].pci_bus_id = "0000:3b:00.0";
  samples[1].pci_bus_id = "00000000:5E:00.0";
  tel::add_published_figures(samples, {other, other}, false);
  CHECK(samples[0].pool_allocated == 14U);  // two processes on one GPU add up
  CHECK(samples[0].pool_reserved == 18U);
  CHECK_FALSE(samples[1].pool_reserved.has_value());
  pool.deallocate(p, 10 << 20);
  fs::remove_all(dir);
}

TEST_CASE("publisher: a process of another pid namespace, with a pid another process also has", "[telemetry][publish]") {
  // Two pods on one node, each with its job as pid 1, publish into the node's folder: their files
  // differ by id, and the reader names each holder by the pid it sees (what hostPID gives).
  // Here the child stands in for the second pod: it holds the lock of a file written as pid 1's.
  const auto dir = fresh_dir("ns");
  const std::string foreign = "mgm.1.00000000000000aa";
  child c{dir, MGM_PUBLISHER_CHILD, dir / (foreign + ".lock")};
  const auto own = tel::read_published(dir);
  REQUIRE(own.size() == 1);
  fs::copy_file(dir / ("mgm." + std::to_string(c.pid()) + "." + own[0].id), dir / foreign);
  const auto procs = tel::read_published(dir);
  REQUIRE(procs.size() == 2);
  for (const auto& p : procs) {
    CHECK(p.pid == static_cast<std::uint32_t>(c.pid()));  // the holder as this namespace sees it, not "1"
    CHECK(p.pid_seen_here);
  }
  CHECK(procs[0].id != procs[1].id);
  // Two series, told apart by the publisher label even where the pids are the same.
  std::vector<tel::device_sample> samples(2);
  for (int i = 0; i < 2; ++i) samples[static_cast<std::size_t>(i)].index = i;
  tel::prometheus_extras extras;
  extras.pools = &procs;
  extras.simulated = true;
  const auto text = tel::to_prometheus(samples, extras);
  CHECK(text.find("publisher=\"00000000000000aa\"") != std::string::npos);
  CHECK(text.find("publisher=\"" + own[0].id + "\"") != std::string::npos);
  c.kill();
  CHECK(tel::read_published(dir).empty());  // both locks died with the child
  CHECK(mgm_files(dir).empty());
  fs::remove_all(dir);
}

TEST_CASE("publisher: a forked child lets go of its parent's publisher, and its parent's own reads keep it alive",
          "[telemetry][publish]") {
  const auto dir = fresh_dir("fork");
  ::setenv("MGM_PUBLISH_DIR", dir.c_str(), 1);
  tel::start_publishing();
  ::unsetenv("MGM_PUBLISH_DIR");
  const auto before = mgm_files(dir);
  REQUIRE(before.size() == 2);
  // Reading its own files keeps the lock (closing any descriptor of the lock file would drop it,
  // and the child below would find the parent dead).
  REQUIRE(tel::read_published(dir).size() == 1);
  const pid_t kid = ::fork();
  REQUIRE(kid >= 0);
  if (kid == 0) {
    g_forked_child = true;
    ::alarm(60);  // a child that hangs is killed, and the test fails rather than waits for ever
    // The child sees its parent alive (the parent's lock), and leaves without removing its files.
    const auto seen = tel::read_published(dir);
    const bool ok = seen.size() == 1 && seen[0].pid == static_cast<std::uint32_t>(::getppid());
    std::exit(ok ? 0 : 1);  // static destructors run: the released publisher removes nothing
  }
  int status = 0;
  ::waitpid(kid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(mgm_files(dir) == before);
  tel::stop_publishing();
  CHECK(mgm_files(dir).empty());
  fs::remove_all(dir);
}

TEST_CASE("publisher: forks while another thread publishes leave each child a process that works",
          "[telemetry][publish]") {
  // A fork in the middle of a write once gave the child what the writing thread held (its stream,
  // the allocator's lock under a sanitizer): the child's first allocation could wait for ever.
  const auto dir = fresh_dir("forkwrite");
  ::setenv("MGM_PUBLISH_DIR", dir.c_str(), 1);
  tel::start_publishing();
  ::unsetenv("MGM_PUBLISH_DIR");
  fork_tally t;
  {
    tel::publisher busy{std::chrono::milliseconds{100}, dir};
    t = fork_beside([&] { busy.publish_now(); }, 10, std::chrono::milliseconds{2},
                    [&] { return tel::read_published(dir).size() == 2; });  // allocates, and opens files
  }  // the second publisher gone, and its thread with it
  CHECK(t.hung == 0);
  CHECK(t.failed == 0);
  tel::stop_publishing();
  fs::remove_all(dir);
}

TEST_CASE("pool list: a fork while another thread reads the list leaves the child a list it can use",
          "[telemetry][publish]") {
  // The publisher's thread reads the list (and each pool's figures) under the list's lock. A fork
  // at that moment once left the child the lock held by a thread it lacks: the first pool the child
  // made or destroyed waited for ever. A slow reader holds the lock most of the time here.
  mgm::pool_registration slow{mgm::device_id{0}, true, [] {
                                std::this_thread::sleep_for(std::chrono::microseconds{200});
                                return mgm::pool_figures{1, 2};
                              }};
  const auto t = fork_beside([] { (void)mgm::registered_pools(); }, 10, std::chrono::microseconds{150}, [] {
    mgm::pool_registration mine{mgm::device_id{1}, true, [] { return mgm::pool_figures{3, 4}; }};
    const auto pools = mgm::registered_pools();  // the parent's slow pool is listed, and answers
    mine.reset();
    return pools.size() == 2;
  });
  CHECK(t.hung == 0);
  CHECK(t.failed == 0);
}
