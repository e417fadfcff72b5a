// The NVML loader over the fake NVML (tests/fake_nvml), the identity join, the sources and the
// sampler.
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/partition/rebalance_driver.hpp>
#include <mgm/telemetry/log_format.hpp>
#include <mgm/telemetry/nvml.hpp>
#include <mgm/telemetry/sampler.hpp>
#include <mgm/telemetry/source.hpp>

#include "test_artifacts.hpp"

#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

namespace tel = mgm::telemetry;

const std::string fake_current = mgm_test::artifact(MGM_FAKE_NVML_CURRENT);
const std::string fake_old = mgm_test::artifact(MGM_FAKE_NVML_OLD);

namespace {

// Sets MGM_NVML_LIBRARY and the fake's config for one test; restores the environment after.
class fake_nvml_env {
 public:
  fake_nvml_env(const char* library, const std::string& config_json) {
    config_ = std::filesystem::temp_directory_path() / ("mgm_fake_nvml_" + std::to_string(::getpid()) + ".json");
    std::ofstream{config_} << config_json;
    ::setenv("MGM_NVML_LIBRARY", library, 1);
    ::setenv("MGM_FAKE_NVML_CONFIG", config_.c_str(), 1);
  }
  ~fake_nvml_env() {
    ::unsetenv("MGM_NVML_LIBRARY");
    ::unsetenv("MGM_FAKE_NVML_CONFIG");
    std::filesystem::remove(config_);
  }
  fake_nvml_env(const fake_nvml_env&) = delete;
  fake_nvml_env& operator=(const fake_nvml_env&) = delete;

 private:
  std::filesystem::path config_;
};

// The fake's own counters (the same loaded copy as the loader's: dlopen returns one handle per path).
int fake_counter(const char* library, const char* name) {
  void* h = ::dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return -1;
  auto f = reinterpret_cast<int (*)()>(::dlsym(h, name));
  const int v = f != nullptr ? f() : -1;
  ::dlclose(h);
  return v;
}

const std::string two_gpus = R"({
  "driver_version": "580.65.06",
  "devices": [
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000002", "pci_bus_id": "00000000:2A:00.0",
     "memory": {"total": 85520809984, "reserved": 566231040, "used": 4294967296},
     "temperature": 41, "power_mw": 120500, "power_limit_mw": 700000, "clock_sm": 1980, "clock_mem": 2619,
     "pcie_gen": 5, "pcie_width": 16, "pcie_rx_kbs": 2500, "pcie_tx_kbs": 1200,
     "nvlinks": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0], "utilization": [87, 34],
     "processes": [{"pid": 4242, "name": "python3", "used": 4000000000}, {"pid": 4343, "name": "trainer"}]},
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000001", "pci_bus_id": "00000000:18:00.0",
     "memory": {"total": 85520809984, "reserved": 566231040, "used": 0},
     "temperature": 33, "power_limit_mw": 700000, "unsupported": ["power", "nvlink"]}
  ]})";

}  // namespace

TEST_CASE("nvml: a missing library is a reason, not a crash", "[telemetry][nvml]") {
  ::setenv("MGM_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  std::string why;
  CHECK(tel::nvml_library::acquire(&why) == nullptr);
  CHECK(why.find("cannot load /nonexistent/libnvidia-ml.so.1") != std::string::npos);
  CHECK(tel::make_nvml_source(&why) == nullptr);
  ::unsetenv("MGM_NVML_LIBRARY");
}

TEST_CASE("nvml: a library without NVML's symbols is refused", "[telemetry][nvml]") {
  ::setenv("MGM_NVML_LIBRARY", "libm.so.6", 1);
  std::string why;
  CHECK(tel::nvml_library::acquire(&why) == nullptr);
  CHECK(why.find("not an NVML library") != std::string::npos);
  ::unsetenv("MGM_NVML_LIBRARY");
}

TEST_CASE("nvml: a failing nvmlInit is reported with its code", "[telemetry][nvml]") {
  const fake_nvml_env env{fake_current.c_str(), R"({"init_error": 9, "devices": []})"};
  std::string why;
  CHECK(tel::nvml_library::acquire(&why) == nullptr);
  CHECK(why.find("nvmlInit failed: NVML error 9") != std::string::npos);
}

TEST_CASE("nvml: every metric of the current ABI, versioned structs, unsupported metrics", "[telemetry][nvml]") {
  const fake_nvml_env env{fake_current.c_str(), two_gpus};
  std::string why;
  auto lib = tel::nvml_library::acquire(&why);
  REQUIRE(lib != nullptr);
  CHECK(lib->fallbacks().empty());
  REQUIRE(lib->device_count() == 2);
  CHECK(lib->driver_version() == "580.65.06");

  const tel::device_sample a = lib->sample(0);
  CHECK(a.index == 0);
  CHECK(a.name == "NVIDIA H100 80GB HBM3");
  CHECK(a.uuid == "GPU-bbbbbbbb-0000-0000-0000-000000000002");
  CHECK(a.pci_bus_id == "00000000:2A:00.0");
  // nvmlDeviceGetMemoryInfo_v2 was called with NVML_STRUCT_VERSION(Memory, 2) = 40 | 2 << 24.
  CHECK(fake_counter(fake_current.c_str(), "fake_nvml_last_memory_version") == static_cast<int>(40U | (2U << 24U)));
  CHECK(a.memory_total == 85520809984ULL);
  CHECK(a.memory_reserved == 566231040ULL);
  CHECK(a.memory_used == 4294967296ULL);
  CHECK(a.memory_free == 85520809984ULL - 566231040ULL - 4294967296ULL);
  CHECK(a.temperature_c == 41.0);
  CHECK(a.power_draw_w == Approx(120.5));
  CHECK(a.power_limit_w == Approx(700.0));
  CHECK(a.clock_sm_mhz == 1980U);
  CHECK(a.clock_mem_mhz == 2619U);
  CHECK(a.pcie_gen == 5U);
  CHECK(a.pcie_width == 16U);
  CHECK(a.pcie_rx_mb_s == Approx(2.5));
  CHECK(a.pcie_tx_mb_s == Approx(1.2));
  CHECK(a.nvlink_up == 17U);
  CHECK(a.utilization_gpu_pct == 87U);
  CHECK(a.utilization_mem_pct == 34U);
  REQUIRE(a.processes.size() == 2);
  CHECK(a.processes[0].pid == 4242U);
  CHECK(a.processes[0].name == "python3");
  CHECK(a.processes[0].used_bytes == 4000000000ULL);
  CHECK_FALSE(a.processes[1].used_bytes.has_value());  // NVML_VALUE_NOT_AVAILABLE is unknown, not huge
  CHECK(a.missing.empty());

  const tel::device_sample b = lib->sample(1);
  CHECK_FALSE(b.power_draw_w.has_value());
  CHECK_FALSE(b.power_limit_w.has_value());
  CHECK(b.nvlink_up == 0U);  // NOT_SUPPORTED on link 0: a GPU without NVLink has 0 links up
  CHECK_FALSE(b.clock_sm_mhz.has_value());
  CHECK(b.temperature_c == 33.0);
  CHECK(std::count_if(b.missing.begin(), b.missing.end(), [](const std::string& m) {
          return m.rfind("power.draw: NVML error 3 (Not Supported)", 0) == 0;
        }) == 1);
  CHECK(b.processes.empty());

  const tel::device_sample bad = lib->sample(7);  // no such device: a reason, no throw
  REQUIRE_FALSE(bad.missing.empty());
  CHECK(bad.missing.front().rfind("device: NVML error 2", 0) == 0);
}

TEST_CASE("nvml: an old driver without the versioned calls falls back to v1", "[telemetry][nvml]") {
  const fake_nvml_env env{fake_old.c_str(), two_gpus};
  std::string why;
  auto lib = tel::nvml_library::acquire(&why);
  REQUIRE(lib != nullptr);
  const auto& fb = lib->fallbacks();
  CHECK(std::find(fb.begin(), fb.end(), "nvmlInit for nvmlInit_v2") != fb.end());
  CHECK(std::find(fb.begin(), fb.end(), "nvmlDeviceGetMemoryInfo for nvmlDeviceGetMemoryInfo_v2") != fb.end());
  CHECK(std::find(fb.begin(), fb.end(), "nvmlDeviceGetComputeRunningProcesses_v2 for nvmlDeviceGetComputeRunningProcesses_v3") ==
        fb.end());
  const tel::device_sample a = lib->sample(0);
  // v1: used includes the reserved memory, and reserved is unknown.
  CHECK(a.memory_used == 566231040ULL + 4294967296ULL);
  CHECK_FALSE(a.memory_reserved.has_value());
  CHECK(a.temperature_c == 41.0);           // nvmlDeviceGetTemperature, the deprecated call
  CHECK(a.pci_bus_id.empty());              // no nvmlDeviceGetPciInfo_v3 or _v2 in this driver
  REQUIRE(a.processes.size() == 2);         // the v1 process query, its own struct layout
  CHECK(a.processes[0].used_bytes == 4000000000ULL);
  CHECK(a.processes[1].pid == 4343U);
}

TEST_CASE("nvml: one init for all holders, shutdown with the last", "[telemetry][nvml]") {
  const fake_nvml_env env{fake_current.c_str(), two_gpus};
  void* keep = ::dlopen(fake_current.c_str(), RTLD_NOW);  // the fake's counters outlive the loader's dlclose
  REQUIRE(keep != nullptr);
  const int inits0 = fake_counter(fake_current.c_str(), "fake_nvml_inits");
  const int shutdowns0 = fake_counter(fake_current.c_str(), "fake_nvml_shutdowns");
  auto a = tel::nvml_library::acquire();
  auto b = tel::nvml_library::acquire();
  REQUIRE(a != nullptr);
  CHECK(a == b);
  CHECK(fake_counter(fake_current.c_str(), "fake_nvml_inits") == inits0 + 1);
  a.reset();
  CHECK(fake_counter(fake_current.c_str(), "fake_nvml_shutdowns") == shutdowns0);
  b.reset();
  CHECK(fake_counter(fake_current.c_str(), "fake_nvml_shutdowns") == shutdowns0 + 1);
  auto c = tel::nvml_library::acquire();  // a new holder initialises again
  CHECK(fake_counter(fake_current.c_str(), "fake_nvml_inits") == inits0 + 2);
  c.reset();
  ::dlclose(keep);
}

TEST_CASE("nvml: devices are joined to CUDA ordinals by PCI bus id or UUID, never by position", "[telemetry][nvml]") {
  const fake_nvml_env env{fake_current.c_str(), two_gpus};
  auto lib = tel::nvml_library::acquire();
  REQUIRE(lib != nullptr);
  std::vector<tel::device_sample> samples{lib->sample(0), lib->sample(1)};
  // CUDA (fastest first, say) numbers them the other way round from NVML (PCI order):
  // ordinal 0 is NVML's device 1 (known by its bus id, written as cudaDeviceGetPCIBusId does),
  // ordinal 1 is NVML's device 0 (known by UUID only).
  const std::vector<tel::cuda_identity> cuda{{0, "0000:18:00.0", ""}, {1, "", "GPU-bbbbbbbb-0000-0000-0000-000000000002"}};
  CHECK(tel::join_cuda_ordinals(samples, cuda) == 2);
  CHECK(samples[0].cuda_ordinal == 1);
  CHECK(samples[1].cuda_ordinal == 0);
  // A device CUDA does not see (CUDA_VISIBLE_DEVICES) gets no ordinal.
  CHECK(tel::join_cuda_ordinals(samples, {{0, "0000:18:00.0", ""}}) == 1);
  CHECK_FALSE(samples[0].cuda_ordinal.has_value());
  CHECK(tel::normalise_pci_bus_id("0000:2a:00.0") == "00000000:2A:00.0");
}

TEST_CASE("nvml source: every GPU NVML sees", "[telemetry][nvml]") {
  const fake_nvml_env env{fake_current.c_str(), two_gpus};
  auto src = tel::make_nvml_source();
  REQUIRE(src != nullptr);
  CHECK(src->name() == "nvml");
  const auto batch = src->sample();
  REQUIRE(batch.size() == 2);
  CHECK(batch[1].uuid == "GPU-aaaaaaaa-0000-0000-0000-000000000001");
  // The system source prefers NVML when it has GPUs.
  auto sys = tel::make_system_source();
  REQUIRE(sys != nullptr);
  CHECK(sys->name() == "nvml");
}

TEST_CASE("nvml source: a GPU off the bus reads as lost, and the rebalancer's readings say it is gone", "[telemetry][nvml]") {
  std::string lost_one = two_gpus;
  const std::string mark = R"("temperature": 33,)";
  lost_one.replace(lost_one.find(mark), mark.size(), R"("temperature": 33, "lost": true,)");
  const fake_nvml_env env{fake_current.c_str(), lost_one};
  std::shared_ptr<tel::source> src = tel::make_nvml_source();
  REQUIRE(src != nullptr);
  const auto batch = src->sample();
  REQUIRE(batch.size() == 2);
  CHECK_FALSE(batch[0].lost);
  CHECK(batch[1].lost);  // NVML_ERROR_GPU_IS_LOST from its memory query
  CHECK_FALSE(batch[1].memory_free.has_value());
  const auto readings = mgm::readings_from(batch, 2);
  CHECK(readings[0].present);
  CHECK(readings[0].free_bytes.value() == 85520809984ULL - 566231040ULL - 4294967296ULL);
  CHECK_FALSE(readings[1].present);
  // Through the driver, keyed by UUID (NVML's order is not CUDA's).
  auto read = mgm::rebalance_driver::from_source(src, 2, {batch[1].key(), batch[0].key()});
  const auto keyed = read();
  CHECK_FALSE(keyed[0].present);
  CHECK(keyed[1].present);
}

TEST_CASE("system source: without NVML and without a GPU it says why", "[telemetry][nvml]") {
  ::setenv("MGM_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  if (mgm::device_count() == 0) {
    std::string why;
    CHECK(tel::make_system_source(&why) == nullptr);
    CHECK(why.find("NVML: cannot load") != std::string::npos);
    CHECK(why.find("CUDA: the CUDA runtime sees no GPU") != std::string::npos);
  }
  ::unsetenv("MGM_NVML_LIBRARY");
}

TEST_CASE("sim source: memory as the simulator accounts it, NVLinks, pool figures", "[telemetry]") {
  auto machine = mgm::sim::machine::preset("dgx-h100");
  auto src = tel::make_sim_source(machine);
  CHECK(src->name() == "sim:dgx-h100");
  mgm::caching_pool<mgm::sim::device_allocator> pool{machine.allocator(mgm::device_id{3})};
  void* p = pool.allocate(64 << 20);
  const auto batch = src->sample();
  REQUIRE(batch.size() == 8);
  const auto& d3 = batch[3];
  CHECK(d3.name.find("H100") != std::string::npos);
  CHECK(d3.memory_used == machine.memory(mgm::device_id{3}).used_bytes);
  CHECK(*d3.memory_used >= (64U << 20));
  CHECK(d3.pool_allocated == std::uint64_t{64} << 20);
  CHECK(d3.pool_reserved >= std::uint64_t{64} << 20);
  CHECK_FALSE(batch[0].pool_reserved.has_value());
  CHECK(batch[0].nvlink_up == 18U);  // NV18 to each of 7 peers, through NVSwitches: 18 links
  pool.deallocate(p, 64 << 20);
}

TEST_CASE("sampler: a period, a bounded history, and a failing source never throws", "[telemetry]") {
  auto machine = mgm::sim::machine::from_string("2x8GiB");
  {
    std::atomic<int> seen{0};
    tel::sampler s{tel::make_sim_source(machine), std::chrono::milliseconds{5}, 3,
                  [&](const tel::sample_batch& b) { seen += static_cast<int>(b.size()); }};
    while (s.batches() < 5) std::this_thread::sleep_for(std::chrono::milliseconds{2});
    s.stop();
    CHECK(s.history().size() == 3);
    REQUIRE(s.latest().has_value());
    CHECK(s.latest()->size() == 2);
    CHECK(seen.load() >= 10);
    CHECK(s.errors() == 0);
  }
  struct failing final : tel::source {
    [[nodiscard]] std::string name() const override { return "failing"; }
    [[nodiscard]] std::vector<tel::device_sample> sample() override { throw std::runtime_error{"GPU has fallen off the bus"}; }
  };
  tel::sampler bad{std::make_unique<failing>(), std::chrono::milliseconds{5}};
  while (bad.errors() < 2) std::this_thread::sleep_for(std::chrono::milliseconds{2});
  bad.stop();
  CHECK(bad.batches() == 0);
  CHECK(bad.last_error() == "GPU has fallen off the bus");
  CHECK_FALSE(bad.latest().has_value());
  tel::sampler none{nullptr, std::chrono::milliseconds{5}};
  CHECK(none.errors() == 1);
}

TEST_CASE("sampler: stop_within leaves a hung query behind and says so, and an idle sampler stops at once",
          "[telemetry]") {
  struct gate {
    std::mutex m;
    std::condition_variable cv;
    bool inside{false};
    bool open{false};
  };
  auto g = std::make_shared<gate>();
  struct hanging final : tel::source {
    std::shared_ptr<gate> g;
    explicit hanging(std::shared_ptr<gate> gt) : g{std::move(gt)} {}
    [[nodiscard]] std::string name() const override { return "hanging"; }
    [[nodiscard]] std::vector<tel::device_sample> sample() override {  // an NVML query on a failing GPU
      std::unique_lock lock{g->m};
      g->inside = true;
      g->cv.notify_all();
      g->cv.wait(lock, [&] { return g->open; });
      return {};
    }
  };
  tel::sampler s{std::make_unique<hanging>(g), std::chrono::milliseconds{5}};
  {
    std::unique_lock lock{g->m};
    g->cv.wait(lock, [&] { return g->inside; });
  }
  CHECK_FALSE(s.stop_within(std::chrono::milliseconds{50}));  // the query has not returned
  CHECK(s.batches() == 0);
  {
    const std::lock_guard lock{g->m};
    g->open = true;
  }
  g->cv.notify_all();
  CHECK(s.stop_within(std::chrono::seconds{30}));  // it returns; the thread ends without a new look
  CHECK(s.batches() == 1);
  s.stop();  // idempotent

  auto machine = mgm::sim::machine::from_string("1x8GiB");
  tel::sampler idle{tel::make_sim_source(machine), std::chrono::hours{1}};
  while (idle.batches() < 1) std::this_thread::sleep_for(std::chrono::milliseconds{2});
  CHECK(idle.stop_within(std::chrono::seconds{30}));  // waiting out its hour-long period: woken
  CHECK(idle.stop_within(std::chrono::milliseconds{0}));  // and again, with nothing left to wait for
}

TEST_CASE("nvml: MIG instances follow their GPU, with their ids, profile, UUID and memory", "[telemetry][nvml]") {
  const fake_nvml_env env{fake_current.c_str(), R"({
    "devices": [
      {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a100", "pci_bus_id": "00000000:07:00.0", "minor": 3,
       "memory": {"total": 85899345920, "reserved": 0, "used": 0}, "max_mig": 7,
       "mig": [{"name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb", "uuid": "MIG-one", "gpu_instance_id": 1,
                "compute_instance_id": 0, "memory": {"total": 42949672960, "reserved": 0, "used": 1073741824}},
               {"name": "NVIDIA A100-SXM4-80GB MIG 2g.20gb", "uuid": "MIG-two", "gpu_instance_id": 5,
                "compute_instance_id": 0, "memory": {"total": 21474836480, "reserved": 0, "used": 0}}]},
      {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-h100", "pci_bus_id": "00000000:18:00.0", "minor": 0,
       "memory": {"total": 85520809984, "reserved": 0, "used": 0}}
    ]})"};
  auto src = tel::make_nvml_source();
  REQUIRE(src != nullptr);
  const auto batch = src->sample();
  REQUIRE(batch.size() == 4);  // the A100, its two instances, the H100
  CHECK_FALSE(batch[0].mig);
  CHECK(batch[0].minor_number == 3u);
  const auto& one = batch[1];
  REQUIRE(one.mig);
  CHECK(one.index == 0);
  CHECK(one.mig->gpu_instance_id == 1);
  CHECK(one.mig->profile == "3g.40gb");
  CHECK(one.uuid == "MIG-one");
  CHECK(one.pci_bus_id == "00000000:07:00.0");
  CHECK(one.minor_number == 3u);
  CHECK(one.memory_total == 42949672960u);
  CHECK(one.memory_used == 1073741824u);
  REQUIRE(batch[2].mig);
  CHECK(batch[2].mig->gpu_instance_id == 5);
  CHECK(batch[2].mig->profile == "2g.20gb");
  CHECK_FALSE(batch[3].mig);
  CHECK(batch[3].index == 1);
  CHECK(batch[1].key() != batch[0].key());
  // The Prometheus exposition labels instances as dcgm-exporter does, in snake case.
  const auto text = tel::to_prometheus(batch);
  CHECK(text.find("mgm_gpu_memory_total_bytes{gpu=\"0\",uuid=\"MIG-one\",pci_bus_id=\"00000000:07:00.0\","
                  "model_name=\"NVIDIA A100-SXM4-80GB MIG 3g.40gb\",gpu_instance_id=\"1\",compute_instance_id=\"0\","
                  "mig_profile=\"3g.40gb\"} 42949672960\n") != std::string::npos);
  // A JSON line keeps the instance.
  const auto back = tel::read_jsonl_log(tel::to_json_line(one) + "\n");
  REQUIRE(back.samples.size() == 1);
  REQUIRE(back.samples[0].mig);
  CHECK(back.samples[0].mig->gpu_instance_id == 1);
  CHECK(back.samples[0].mig->profile == "3g.40gb");
}
