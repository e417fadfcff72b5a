// mgm serve: a Prometheus exporter. A sampler thread looks at every GPU, and reads the pools'
// published files, every --interval; the HTTP thread answers /metrics from the last look, so a
// scrape never waits on NVML, and says how old that look is.
#include "http.hpp"
#include "live_source.hpp"
#include "mgm_tool.hpp"

#include <mgm/telemetry/log_format.hpp>
#include <mgm/telemetry/publisher.hpp>
#include <mgm/telemetry/sampler.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace mgm_tool {

namespace tel = mgm::telemetry;

namespace {

using steady = std::chrono::steady_clock;

// Dcgm-exporter has 9400. Prometheus's list of exporter ports (9100-9999) is full, so the
// exporter takes one outside it and below Linux's ephemeral ports.
constexpr const char* default_listen = ":19400";

struct serve_options {
  std::string listen{default_listen};
  std::string interval{"5s"};
  std::string node;
};

// The last look at the GPUs and the pools, shared by the sampler's thread and the server's.
class last_look {
 public:
  struct view {
    tel::sample_batch gpus;
    std::vector<tel::published_process> pools;
    std::optional<steady::time_point> taken;
  };

  void set(const tel::sample_batch& gpus, std::vector<tel::published_process> pools) {
    const std::lock_guard lock{mutex_};
    look_.gpus = gpus;
    look_.pools = std::move(pools);
    look_.taken = steady::now();
  }

  [[nodiscard]] view get() const {
    const std::lock_guard lock{mutex_};
    return look_;
  }

 private:
  mutable std::mutex mutex_;
  view look_;
};

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

}  // namespace

void add_serve(CLI::App& app, context& ctx) {
  auto o = std::make_shared<serve_options>();
  auto* cmd = app.add_subcommand("serve", "Export every GPU's memory and the pools' figures to Prometheus");
  cmd->add_option("--listen", o->listen, "HOST:PORT to listen on; :PORT for every interface, port 0 for any")
      ->capture_default_str();
  cmd->add_option("--interval", o->interval, "How often the GPUs are sampled (5s, 500ms, ...)")->capture_default_str();
  cmd->add_option("--node-label", o->node, "Adds node=\"NAME\" to every series (Prometheus's instance label otherwise)");
  cmd->footer(
      "Endpoints: /metrics (Prometheus text exposition) and /healthz (200 while samples are fresh).\n"
      "Example: mgm serve --listen :19400 --interval 5s\n"
      "         mgm --sim dgx-h100 serve --listen 127.0.0.1:0");
  cmd->callback([&ctx, o] {
    const auto interval = std::chrono::duration_cast<std::chrono::milliseconds>(parse_duration(o->interval));
    if (interval < std::chrono::milliseconds{100}) {
      throw tool_error{exit_bad_input, "--interval " + o->interval + ": sample at most every 100ms"};
    }
    std::optional<sim_choice> machine;
    auto source = open_source(ctx, machine);
    const std::string source_name = source->name();

    last_look look;
    const bool simulated = ctx.simulated();
    const auto publish_dir = tel::default_publish_dir();
    // Errors: a look that failed (the sampler counts those), and a GPU whose memory could not be
    // read in a look that succeeded (NVML's answer for that GPU was an error).
    std::atomic<std::uint64_t> unread_gpus{0};
    tel::sampler sampler{std::move(source), interval, 1,
                         [&look, &publish_dir, &unread_gpus](const tel::sample_batch& gpus) {
                           for (const auto& g : gpus) {
                             if (!g.memory_total) unread_gpus.fetch_add(1, std::memory_order_relaxed);
                           }
                           look.set(gpus, tel::read_published(publish_dir));
                         }};

    tel::prometheus_extras base;
    base.simulated = simulated;
    if (!o->node.empty()) base.labels.emplace_back("node", o->node);
    // Fresh: sampled within three periods (a slow NVML call may take one).
    const auto stale_after = 3 * interval + std::chrono::seconds{1};

    auto handler = [&](std::string_view, std::string_view target) -> http_response {
      const auto path = path_of(target);
      if (path == "/metrics") {
        const auto now = look.get();
        auto extras = base;
        extras.pools = &now.pools;
        extras.sample_errors = sampler.errors() + unread_gpus.load(std::memory_order_relaxed);
        if (now.taken) extras.sample_age_seconds = std::chrono::duration<double>(steady::now() - *now.taken).count();
        return {200, "text/plain; version=0.0.4; charset=utf-8", tel::to_prometheus(now.gpus, extras)};
      }
      if (path == "/healthz") {
        const auto now = look.get();
        if (now.taken && steady::now() - *now.taken <= stale_after) return {200, "text/plain; charset=utf-8", "ok\n"};
        const std::string error = sampler.last_error();
        return {503, "text/plain; charset=utf-8",
                (now.taken ? "the last sample is older than " +
                                 std::to_string(std::chrono::duration<double>(stale_after).count()) + " s"
                           : std::string{"no sample yet"}) +
                    (error.empty() ? "" : "; the last error: " + error) + "\n"};
      }
      if (path == "/") {
        return {200, "text/plain; charset=utf-8",
                "mgm serve: /metrics (Prometheus text exposition), /healthz\n"};
      }
      return {404, "text/plain; charset=utf-8", "not found: " + std::string{path} + " (try /metrics)\n"};
    };

    http_server server{o->listen, handler};
    // The first look is taken at once; wait for it (briefly) so that the first scrape has GPUs.
    for (int i = 0; i < 50 && sampler.batches() == 0 && sampler.errors() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
    std::printf("mgm serve: listening on http://%s/metrics, sampling %s every %s\n", server.address().c_str(),
                source_name.c_str(), o->interval.c_str());
    std::fflush(stdout);
    server.run();
    // A SIGTERM is answered at once even while NVML hangs in a query (a failing GPU's can take
    // minutes, longer than Kubernetes' grace period): the sampler gets a moment to finish, and is
    // otherwise left in its call while the process exits.
    constexpr std::chrono::seconds grace{2};
    const bool joined = sampler.stop_within(grace);
    std::fprintf(stderr, "mgm serve: stopped after %llu requests\n", static_cast<unsigned long long>(server.requests()));
    if (!joined) {
      std::fprintf(stderr, "mgm serve: %s's query has not returned after %lld s; exiting without waiting for it\n",
                   source_name.c_str(), static_cast<long long>(grace.count()));
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(0);  // the sampler's thread still runs inside the query: no destructor may wait for it
    }
  });
}

}  // namespace mgm_tool
