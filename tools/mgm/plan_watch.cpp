// mgm plan --watch (see plan_watch.hpp).
#include "plan_watch.hpp"

#include "live_source.hpp"
#include "mgm_tool.hpp"

#include <mgm/telemetry/log_format.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mgm_tool {

namespace {

std::string local_time(mgm::telemetry::clock::time_point t) {
  const std::time_t s = mgm::telemetry::clock::to_time_t(t);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%d %H:%M:%S", std::localtime(&s));
  return out;
}

std::string counts_text(const std::vector<std::string>& labels, const std::vector<std::size_t>& counts) {
  std::string s;
  for (std::size_t i = 0; i < counts.size(); ++i) s += (i == 0 ? "" : ", ") + labels[i] + " " + std::to_string(counts[i]);
  return s;
}

nlohmann::ordered_json counts_json(const std::vector<std::string>& labels, const std::vector<std::size_t>& counts) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < counts.size(); ++i) out[labels[i]] = counts[i];
  return out;
}

}  // namespace

void watch_plan(const watch_options& o, const mgm::partition_request& r, const std::vector<std::string>& labels,
                std::optional<mgm::topology> links, mgm::rebalance_driver::reading_function read) {
  std::optional<mgm::rebalancer> start;
  try {
    start.emplace(r, o.rebalance, std::move(links));
  } catch (const mgm::partition_error& e) {
    throw tool_error{exit_bad_input, std::string{"the items do not fit: "} + e.what()};
  }
  std::mutex out_mutex;
  std::vector<std::string> last_notes;  // the previous turn's (under out_mutex)
  const auto now = mgm::telemetry::clock::now();
  if (o.json) {
    nlohmann::ordered_json line;
    line["event"] = "plan";
    line["time"] = mgm::telemetry::format_iso_time(now);
    line["items"] = r.items;
    line["bytes_per_item"] = r.bytes_per_item;
    line["interval_s"] = o.interval_s;
    line["hold_readings"] = o.rebalance.hold_steps;
    line["min_change"] = o.rebalance.min_change;
    line["cooldown_readings"] = o.rebalance.cooldown_steps;
    line["counts"] = counts_json(labels, start->plan().counts);
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf("Watching %zu GPUs every %.3gs (Ctrl-C stops). A change moves items once it has lasted %zu readings "
                "and moves at least %.3g %% of them; moved items stay %zu readings before they may go back.\n",
                labels.size(), o.interval_s, o.rebalance.hold_steps, 100.0 * o.rebalance.min_change,
                o.rebalance.cooldown_steps);
    std::printf("%s  plan: %s\n", local_time(now).c_str(), counts_text(labels, start->plan().counts).c_str());
  }
  std::fflush(stdout);

  const auto on_event = [&](const mgm::rebalance_event& e) {
    const bool moved = e.what == mgm::rebalance_event::kind::moved;
    const bool failed = e.what == mgm::rebalance_event::kind::reading_failed ||
                        e.what == mgm::rebalance_event::kind::callback_failed;
    const std::lock_guard lock{out_mutex};
    // A note repeated turn after turn (a GPU whose memory is never read) is news only once.
    const bool news = !e.decision.lost.empty() || (!e.decision.notes.empty() && e.decision.notes != last_notes);
    last_notes = e.decision.notes;
    if (!moved && !failed && !news) return;  // "stay", nothing new
    if (o.json) {
      nlohmann::ordered_json line;
      line["event"] = std::string{mgm::kind_name(e.what)};
      line["time"] = mgm::telemetry::format_iso_time(e.time);
      line["reading"] = e.turn;
      line["reason"] = failed ? e.message : e.decision.plan.reason;
      if (!e.decision.notes.empty()) line["notes"] = e.decision.notes;
      if (!e.decision.lost.empty()) {
        line["lost"] = nlohmann::ordered_json::array();
        for (const auto i : e.decision.lost) line["lost"].push_back(labels[i]);
      }
      if (moved) {
        line["moves"] = nlohmann::ordered_json::array();
        for (const auto& m : e.decision.plan.moves) {
          line["moves"].push_back({{"from", labels[m.from]}, {"to", labels[m.to]}, {"items", m.items},
                                   {"path", m.path}, {"via_host", m.via_host}, {"from_lost", m.from_lost}});
        }
        line["counts"] = counts_json(labels, e.decision.plan.plan.counts);
      }
      std::printf("%s\n", line.dump().c_str());
    } else {
      std::printf("%s  %s\n", local_time(e.time).c_str(), e.message.c_str());
      if (moved) {
        for (const auto& m : e.decision.plan.moves) {
          std::string how = m.from_lost ? "rebuilt (the sender lost its data)"
                            : m.path.empty() ? std::string{}
                            : m.path == "NET" ? std::string{"to another node, over the network"}
                            : "over " + m.path + (m.via_host ? ", through host memory (no peer path)" : ", peer to peer");
          std::printf("                     %s -> %s  %zu items%s%s\n", labels[m.from].c_str(), labels[m.to].c_str(),
                      m.items, how.empty() ? "" : "  ", how.c_str());
        }
        std::printf("                     plan: %s\n", counts_text(labels, e.decision.plan.plan.counts).c_str());
      }
    }
    std::fflush(stdout);
  };

  stop_on_interrupt();
  const auto period = std::chrono::milliseconds{static_cast<long long>(o.interval_s * 1000.0)};
  mgm::rebalance_driver driver{*start, std::move(read), period, {}, on_event};
  const auto began = std::chrono::steady_clock::now();
  while (!g_interrupted.load()) {
    if (o.duration_s && std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count() >= *o.duration_s) break;
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  driver.stop();
  const std::lock_guard lock{out_mutex};
  if (!o.json) {
    std::printf("%s  stopped after %llu readings: %llu changes, %llu failed readings\n",
                local_time(mgm::telemetry::clock::now()).c_str(), static_cast<unsigned long long>(driver.turns()),
                static_cast<unsigned long long>(driver.changes()), static_cast<unsigned long long>(driver.errors()));
  }
  std::fflush(stdout);
}

}  // namespace mgm_tool
