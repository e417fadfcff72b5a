#include <mgm/error.hpp>
#include <mgm/partition/rebalancer.hpp>

#include "../detail/fmt.hpp"
#include "plan_shape.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace mgm {

namespace {

std::string gpu_name(std::size_t i) { return "GPU" + std::to_string(i); }

std::string items_text(std::size_t n) { return std::to_string(n) + (n == 1 ? " item" : " items"); }

std::string percent(std::size_t part, std::size_t whole) {
  return fmt::format("{:.1f} %", whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// Costs in microseconds per GB, as integers: the flow's sums are then exact.
std::int64_t integer_cost(const topology* links, std::size_t from, std::size_t to) {
  if (links == nullptr) return 1;
  return std::max<std::int64_t>(1, std::llround(move_cost(*links, from, to) * 1e6));
}

}  // namespace

bool has_peer_path(const topology& links, std::size_t from, std::size_t to) {
  const device_id a{static_cast<int>(from)};
  const device_id b{static_cast<int>(to)};
  const gpu_path& p = links.path(a, b);
  if (p.is_nvlink() || p.type == path_type::c2c) return true;
  return p.type <= path_type::phb && links.gpu(a).pcie_p2p && links.gpu(b).pcie_p2p;
}

double move_cost(const topology& links, std::size_t from, std::size_t to) {
  const device_id a{static_cast<int>(from)};
  const device_id b{static_cast<int>(to)};
  if (has_peer_path(links, from, to)) {
    const double gbps = links.bandwidth(a, b).gbps;
    return 1.0 / std::max(gbps, 1e-3);
  }
  // Staged through pinned host memory: down one GPU's PCIe link, then up the other's; to another
  // node, over the network between the two.
  const double staged = 1.0 / std::max(pcie_gbps(links.gpu(a)), 1e-3) + 1.0 / std::max(pcie_gbps(links.gpu(b)), 1e-3);
  if (links.path(a, b).type == path_type::net) return staged + 1.0 / std::max(links.bandwidth(a, b).gbps, 1e-3);
  return staged;
}

std::vector<partition_move> route_moves(const std::vector<std::size_t>& surplus, const std::vector<std::size_t>& room,
                                        const topology* links) {
  const std::size_t n = surplus.size();
  MGM_EXPECTS(room.size() == n, "route_moves: surplus and room for different GPU counts");
  MGM_EXPECTS(links == nullptr || links->gpu_count() == n, "route_moves: the topology has another GPU count");
  std::size_t need = 0;
  std::size_t have = 0;
  for (std::size_t i = 0; i < n; ++i) {
    need += surplus[i];
    if (surplus[i] == 0) have += room[i];  // a sender takes nothing in
  }
  MGM_EXPECTS(have >= need, "route_moves: " + std::to_string(need) + " items to send, room for " + std::to_string(have));

  // A min-cost flow, source -> senders -> receivers -> sink, by successive shortest paths
  // (Bellman-Ford: residual edges have negative costs, the starting ones none, so there is no
  // negative cycle). Each augmentation moves at least one item, so it ends; in practice each
  // one fills a sender or a receiver.
  struct edge {
    std::size_t to;
    std::size_t rev;
    std::size_t cap;
    std::int64_t cost;
  };
  const std::size_t src = 2 * n;
  const std::size_t dst = 2 * n + 1;
  std::vector<std::vector<edge>> g(2 * n + 2);
  const auto add = [&](std::size_t a, std::size_t b, std::size_t cap, std::int64_t cost) {
    g[a].push_back({b, g[b].size(), cap, cost});
    g[b].push_back({a, g[a].size() - 1, 0, -cost});
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (surplus[i] != 0) add(src, i, surplus[i], 0);
    if (room[i] != 0 && surplus[i] == 0) add(n + i, dst, room[i], 0);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (surplus[i] == 0) continue;
    for (std::size_t j = 0; j < n; ++j) {
      if (j != i && room[j] != 0 && surplus[j] == 0) add(i, n + j, surplus[i], integer_cost(links, i, j));
    }
  }
  constexpr std::int64_t inf = std::numeric_limits<std::int64_t>::max() / 4;
  std::size_t sent = 0;
  while (sent < need) {
    std::vector<std::int64_t> dist(g.size(), inf);
    std::vector<std::pair<std::size_t, std::size_t>> via(g.size(), {g.size(), 0});
    dist[src] = 0;
    for (std::size_t round = 0; round < g.size(); ++round) {
      bool changed = false;
      for (std::size_t a = 0; a < g.size(); ++a) {
        if (dist[a] == inf) continue;
        for (std::size_t k = 0; k < g[a].size(); ++k) {
          const edge& e = g[a][k];
          if (e.cap != 0 && dist[a] + e.cost < dist[e.to]) {
            dist[e.to] = dist[a] + e.cost;
            via[e.to] = {a, k};
            changed = true;
          }
        }
      }
      if (!changed) break;
    }
    MGM_EXPECTS(dist[dst] != inf, "route_moves: internal error: no path for the remaining items");
    std::size_t push = need - sent;
    for (std::size_t v = dst; v != src; v = via[v].first) push = std::min(push, g[via[v].first][via[v].second].cap);
    for (std::size_t v = dst; v != src; v = via[v].first) {
      edge& e = g[via[v].first][via[v].second];
      e.cap -= push;
      g[e.to][e.rev].cap += push;
    }
    sent += push;
  }
  std::vector<partition_move> moves;
  for (std::size_t i = 0; i < n; ++i) {
    for (const edge& e : g[i]) {
      if (e.to < n || e.to >= 2 * n) continue;
      const std::size_t j = e.to - n;
      const std::size_t flow = g[e.to][e.rev].cap;  // the reverse edge holds what went through
      if (flow == 0) continue;
      partition_move m{i, j, flow, ""};
      if (links != nullptr) {
        const gpu_path& p = links->path(device_id{static_cast<int>(i)}, device_id{static_cast<int>(j)});
        m.path = p.type == path_type::net ? std::string{p.nccl_name()} : p.label();
        m.via_host = !has_peer_path(*links, i, j);
      }
      moves.push_back(std::move(m));
    }
  }
  // The fastest routes first: a caller that runs them in order frees the crowded GPUs soonest.
  std::vector<std::pair<std::int64_t, partition_move>> by_cost;
  for (auto& m : moves) by_cost.emplace_back(integer_cost(links, m.from, m.to), std::move(m));
  std::stable_sort(by_cost.begin(), by_cost.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t k = 0; k < moves.size(); ++k) moves[k] = std::move(by_cost[k].second);
  return moves;
}

rebalancer::rebalancer(partition_request request, rebalancer_options options, std::optional<topology> links)
    : request_{std::move(request)}, options_{options}, links_{std::move(links)} {
  MGM_EXPECTS(options_.min_change >= 0.0 && options_.min_change < 1.0, "rebalancer: min_change is a fraction in [0, 1)");
  MGM_EXPECTS(options_.hold_steps >= 1, "rebalancer: hold_steps is at least 1");
  MGM_EXPECTS(!links_ || links_->gpu_count() == request_.devices.size(),
              "rebalancer: the topology has " + std::to_string(links_ ? links_->gpu_count() : 0) + " GPUs, the request " +
                  std::to_string(request_.devices.size()));
  plan_ = partition(request_, links_ ? &*links_ : nullptr);
  gone_.assign(request_.devices.size(), false);
  lost_data_.assign(request_.devices.size(), false);
  // The start readings were taken before the job held anything; the last readings this keeps (for
  // a step without one) are the GPUs with the job's items in place.
  if (options_.readings_include_items) {
    for (std::size_t i = 0; i < plan_.counts.size(); ++i) {
      if (plan_.counts[i] == 0) continue;
      auto& d = request_.devices[i];
      const std::size_t held = plan_.counts[i] * request_.bytes_per_item + d.overhead_bytes;
      d.free_bytes = d.free_bytes > held ? d.free_bytes - held : 0;
    }
  }
}

rebalance_decision rebalancer::step(std::span<const gpu_reading> readings) {
  const std::size_t n = request_.devices.size();
  MGM_EXPECTS(readings.size() == n, "rebalancer: " + std::to_string(readings.size()) + " readings for " +
                                        std::to_string(n) + " GPUs");
  ++step_;
  rebalance_decision out;
  out.step = step_;
  const topology* links = links_ ? &*links_ : nullptr;
  const std::size_t bpi = request_.bytes_per_item;

  // The request as the GPUs are now: usable memory = the reading plus the job's own share.
  partition_request now = request_;
  bool lost_items = false;
  std::vector<std::size_t> rebuild;  // present again, with items of the plan whose data went with it
  for (std::size_t i = 0; i < n; ++i) {
    const gpu_reading& r = readings[i];
    partition_device& d = now.devices[i];
    if (!r.present) {
      if (!gone_[i]) out.lost.push_back(i);
      gone_[i] = true;
      lost_data_[i] = lost_data_[i] || plan_.counts[i] != 0;
      lost_items = lost_items || plan_.counts[i] != 0;
      d.free_bytes = 0;
      d.min_items = 0;
      d.max_items = 0;
      continue;
    }
    if (gone_[i]) {
      gone_[i] = false;
      out.notes.push_back(gpu_name(i) + " is back");
    }
    // Until they are rebuilt (here or elsewhere), also on a later step when no plan fitted.
    if (lost_data_[i]) rebuild.push_back(i);
    if (r.free_bytes) {
      request_.devices[i].free_bytes = *r.free_bytes;  // the last reading, for a step without one
    } else {
      out.notes.push_back(gpu_name(i) + ": no memory reading, its last one (" + std::to_string(d.free_bytes) + " B) is used");
    }
    d.free_bytes = request_.devices[i].free_bytes;
    // (A GPU that lost its data holds none of the job's items: its reading is all there is.)
    if (options_.readings_include_items && plan_.counts[i] != 0 && !lost_data_[i]) {
      d.free_bytes += plan_.counts[i] * bpi + request_.devices[i].overhead_bytes;
    }
    if (r.throughput && *r.throughput > 0 && std::isfinite(*r.throughput)) d.throughput = *r.throughput;
  }

  const auto stay = [&](std::string reason) {
    out.plan.plan = plan_;
    out.plan.kept = true;
    out.plan.reason = "stay: " + std::move(reason);
    return out;
  };

  partition_plan candidate;
  try {
    candidate = partition(now, links);
  } catch (const partition_error& e) {
    pending_ = 0;
    out.notes.push_back(std::string{"no plan fits: "} + e.what());
    if (lost_items || !rebuild.empty()) {
      std::size_t lost = 0;
      for (std::size_t i = 0; i < n; ++i) lost += gone_[i] || lost_data_[i] ? plan_.counts[i] : 0;
      return stay(items_text(lost) + " of lost GPUs fit nowhere else now: they stay lost until room appears or "
                  "the GPU is back");
    }
    return stay("no plan fits the GPUs now");
  }

  // A GPU that comes back still holding items of the plan lost them with it (no plan could take
  // them while it was gone): they are rebuilt now, before anything else, where they are as far as
  // its memory now holds them, and the rest on the others (over the fastest links).
  if (!rebuild.empty()) return rebuild_lost(std::move(out), rebuild, now, candidate, links);

  // What the readings ask for.
  std::vector<std::size_t> overflowing;
  for (std::size_t i = 0; i < n; ++i) {
    if (!gone_[i] && plan_.counts[i] > candidate.capacity[i]) overflowing.push_back(i);
  }
  std::size_t differ = 0;
  for (std::size_t i = 0; i < n; ++i) differ += plan_.counts[i] > candidate.counts[i] ? plan_.counts[i] - candidate.counts[i] : 0;
  const auto threshold = std::max<std::size_t>(
      1, static_cast<std::size_t>(std::ceil(options_.min_change * static_cast<double>(request_.items))));
  bool large = differ >= threshold;
  bool slow_gain = false;  // under the throughput policy: a different plan, not a faster enough one
  if (large && !lost_items && request_.policy == partition_policy::throughput) {
    large = candidate.makespan < detail::makespan_of(plan_.counts, now.devices) * (1.0 - options_.min_change);
    slow_gain = !large;
  }
  const bool urgent = lost_items || !overflowing.empty();

  std::string why;
  if (lost_items) {
    for (const std::size_t i : out.lost) why += (why.empty() ? "" : ", ") + gpu_name(i);
    why = (why.empty() ? std::string{"a GPU"} : why) + " is gone";
  } else if (!overflowing.empty()) {
    const std::size_t i = overflowing.front();
    why = gpu_name(i) + " holds " + items_text(plan_.counts[i]) + ", room for " + std::to_string(candidate.capacity[i]) + " now";
    if (overflowing.size() > 1) why += " (and " + std::to_string(overflowing.size() - 1) + " more GPUs overflow)";
  } else if (large) {
    why = "the plan from free memory differs by " + items_text(differ) + " (" + percent(differ, request_.items) + ")";
  }
  if (!urgent && !large) {
    pending_ = 0;
    if (differ == 0) return stay("the plan matches the GPUs");
    if (slow_gain) {
      const double now_ms = detail::makespan_of(plan_.counts, now.devices);
      const double gain = now_ms > 0 ? 100.0 * (1.0 - candidate.makespan / now_ms) : 0.0;
      return stay(fmt::format("the best plan is {:.1f} % faster, under the {:.1f} % that moves", gain,
                              100.0 * options_.min_change));
    }
    return stay("the plan from free memory differs by " + items_text(differ) + " (" + percent(differ, request_.items) +
                "), under the " + percent(threshold, request_.items) + " that moves");
  }
  // The same change must last: a reading that asks for another plan (a spike on another GPU)
  // starts the count again.
  std::size_t drift = 0;
  for (std::size_t i = 0; i < n && pending_ != 0; ++i) {
    drift += pending_target_[i] > candidate.counts[i] ? pending_target_[i] - candidate.counts[i] : 0;
  }
  pending_ = pending_ != 0 && drift < threshold ? pending_ + 1 : 1;
  pending_target_ = candidate.counts;
  if (!lost_items && pending_ < options_.hold_steps) {
    return stay(why + ", for " + std::to_string(pending_) + " of " + std::to_string(options_.hold_steps) + " readings");
  }

  // The target: the new plan for a large change; otherwise (an overflow alone) the fewest items
  // off the overflowing GPUs, into the room the others have (whole counts only when the plan's
  // granularity is 1; in units the new plan is taken). Either way one routing gives the moves.
  const bool fix_only = !large && request_.granularity == 1;
  std::vector<std::size_t> surplus(n, 0);
  std::vector<std::size_t> room(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t to = fix_only ? std::min(candidate.capacity[i], now.devices[i].max_items) : candidate.counts[i];
    if (plan_.counts[i] > to) {
      surplus[i] = plan_.counts[i] - to;
    } else if (fix_only || plan_.counts[i] < to) {
      room[i] = to - plan_.counts[i];
    }
  }
  auto moves = route_moves(surplus, room, links);
  std::vector<std::size_t> target = plan_.counts;
  for (const auto& m : moves) {
    target[m.from] -= m.items;
    target[m.to] += m.items;
  }
  partition_plan base = fix_only ? plan_ : candidate;
  for (auto& m : moves) m.from_lost = gone_[m.from];

  // Items that came one way go back only after the cooldown, unless the GPUs force it.
  if (!urgent) {
    for (const auto& m : moves) {
      const auto it = moved_at_.find({m.to, m.from});
      if (it != moved_at_.end() && it->second + options_.cooldown_steps > step_) {
        return stay(why + ", but items went " + gpu_name(m.to) + " -> " + gpu_name(m.from) + " at step " +
                    std::to_string(it->second) + ": the cooldown ends at step " +
                    std::to_string(it->second + options_.cooldown_steps));
      }
    }
  }

  carry_into_readings(target);
  for (std::size_t i = 0; i < n; ++i) {
    if (target[i] == 0) lost_data_[i] = false;  // its lost items live elsewhere now
  }
  for (const auto& m : moves) moved_at_[{m.from, m.to}] = step_;
  pending_ = 0;
  base.counts = std::move(target);
  base.capacity = candidate.capacity;
  detail::shape_plan(base, now.devices);
  plan_ = std::move(base);
  out.plan.plan = plan_;
  out.plan.moves = std::move(moves);
  out.plan.kept = false;
  std::size_t moved_items = 0;
  for (const auto& m : out.plan.moves) moved_items += m.items;
  out.plan.reason = "moved " + items_text(moved_items) + ": " + why;
  return out;
}

// Carries the moves to `target` into the last readings, for a later step that lacks one: per GPU,
// the net change of the items whose data it holds (none on a GPU that lost its data), and its
// overhead where it starts or stops holding any.
void rebalancer::carry_into_readings(const std::vector<std::size_t>& target) {
  if (!options_.readings_include_items) return;
  const std::size_t bpi = request_.bytes_per_item;
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (gone_[i]) continue;
    auto& d = request_.devices[i];
    const std::size_t held = lost_data_[i] ? 0 : plan_.counts[i];
    if (target[i] == held) continue;
    const std::size_t was = held * bpi + (held != 0 ? d.overhead_bytes : 0);
    const std::size_t will = target[i] * bpi + (target[i] != 0 ? d.overhead_bytes : 0);
    if (will > was) {
      d.free_bytes = d.free_bytes > will - was ? d.free_bytes - (will - was) : 0;
    } else {
      d.free_bytes += was - will;
    }
  }
}

rebalance_decision rebalancer::rebuild_lost(rebalance_decision out, const std::vector<std::size_t>& rebuild,
                                            const partition_request& now, const partition_plan& candidate,
                                            const topology* links) {
  const std::size_t n = request_.devices.size();
  bool short_of_room = false;
  for (const std::size_t i : rebuild) short_of_room = short_of_room || plan_.counts[i] > candidate.capacity[i];
  std::vector<partition_move> moves;
  if (short_of_room) {
    // Whole counts: the excess of each, into the room of the others. With a granularity, the
    // counts of the new plan (whose units and remainder are right) are the target instead.
    const bool whole = request_.granularity <= 1;
    std::vector<std::size_t> surplus(n, 0);
    std::vector<std::size_t> room(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t to = whole ? (gone_[i] ? plan_.counts[i] : candidate.capacity[i]) : candidate.counts[i];
      if (whole && !lost_data_[i] && plan_.counts[i] > to) continue;  // an overflow of its own waits for its readings
      if (plan_.counts[i] > to) {
        surplus[i] = plan_.counts[i] - to;
      } else {
        room[i] = to - plan_.counts[i];
      }
    }
    moves = route_moves(surplus, room, links);  // the new plan fits, so the room is enough
    for (auto& m : moves) m.from_lost = gone_[m.from] || lost_data_[m.from];  // rebuilt on the receiver, not copied
  }
  std::vector<std::size_t> target = plan_.counts;
  for (const auto& m : moves) {
    target[m.from] -= m.items;
    target[m.to] += m.items;
  }
  std::size_t total = 0;
  std::string who;
  std::vector<partition_move> all;
  for (const std::size_t i : rebuild) {
    if (target[i] != 0) all.push_back({i, i, target[i], "", false, true});
    total += plan_.counts[i];
    who += (who.empty() ? "" : ", ") + gpu_name(i);
    if (short_of_room && target[i] < plan_.counts[i]) {
      who += " (room for " + items_text(target[i]) + " there now)";
    }
  }
  all.insert(all.end(), moves.begin(), moves.end());
  carry_into_readings(target);  // the items rebuilt in place take memory too
  for (const std::size_t i : rebuild) lost_data_[i] = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (target[i] == 0) lost_data_[i] = false;  // a gone GPU's lost items live elsewhere now
  }
  for (const auto& m : moves) moved_at_[{m.from, m.to}] = step_;
  pending_ = 0;
  if (short_of_room) {
    plan_.counts = std::move(target);
    plan_.capacity = candidate.capacity;
    detail::shape_plan(plan_, now.devices);
  }
  out.plan.plan = plan_;
  out.plan.kept = false;
  out.plan.moves = std::move(all);
  out.plan.reason = "rebuilt " + items_text(total) + ": " + who + " came back without the data it held";
  return out;
}

}  // namespace mgm
