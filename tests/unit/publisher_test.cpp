// Pool figures published in a directory by one process and read by another; stale files ignored.
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/telemetry/publisher.hpp>

#include "test_artifacts.hpp"

#include <catch2/catch.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

extern char** environ;

namespace tel = mgm::telemetry;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const char* what) {
  auto d = fs::temp_directory_path() / ("mgm_publish_" + std::string{what} + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The child process of tests/publisher_child.cpp, with pipes to its stdin and stdout.
class child {
 public:
  explicit child(const fs::path& dir, const char* program = MGM_PUBLISHER_CHILD) {
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
    const std::string path = mgm_test::artifact(program);
    char* argv[] = {const_cast<char*>(path.c_str()), nullptr};
    const int rc = posix_spawn(&pid_, path.c_str(), &fa, nullptr, argv, environ);
    ::unsetenv("MGM_PUBLISH");
    ::unsetenv("MGM_PUBLISH_DIR");
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
  CHECK_FALSE(fs::exists(dir / ("mgm." + std::to_string(p.pid))));
  fs::remove_all(dir);
}

TEST_CASE("publisher: the file of a killed process is ignored", "[telemetry][publish]") {
  const auto dir = fresh_dir("stale");
  std::uint32_t pid = 0;
  {
    child c{dir};
    pid = static_cast<std::uint32_t>(c.pid());
    c.kill();  // SIGKILL: no chance to remove its file
  }
  CHECK(fs::exists(dir / ("mgm." + std::to_string(pid))));
  CHECK(tel::read_published(dir).empty());
  fs::remove_all(dir);
}

TEST_CASE("publisher: in-process publishing, a bad file named, and matching by PCI bus id", "[telemetry][publish]") {
  const auto dir = fresh_dir("self");
  auto machine = mgm::sim::machine::from_string("1x2GiB");
  mgm::caching_pool<mgm::sim::device_allocator, false> pool{machine.allocator(mgm::device_id{0})};
  void* p = pool.allocate(10 << 20);
  {
    tel::publisher pub{std::chrono::milliseconds{10}, dir};
    CHECK(pub.file() == dir / ("mgm." + std::to_string(::getpid())));
    std::ofstream{dir / "mgm.1"} << "garbage\n";   // pid 1 is alive: read, and refused
    std::ofstream{dir / "mgm.notapid"} << "x\n";   // not ours: not even looked at
    std::vector<tel::log_issue> skipped;
    const auto procs = tel::read_published(dir, &skipped);
    REQUIRE(skipped.size() == 1);
    CHECK(skipped[0].message.find("not an mgm publish file") != std::string::npos);
    REQUIRE(procs.size() == 1);
    REQUIRE(procs[0].devices.size() >= 1);
    // A pool without statistics publishes what it reserves, and no allocated figure.
    CHECK_FALSE(procs[0].devices[0].figures.allocated.has_value());
    CHECK(procs[0].devices[0].figures.reserved >= std::uint64_t{10} << 20);
  }
  CHECK_FALSE(fs::exists(dir / ("mgm." + std::to_string(::getpid()))));

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
