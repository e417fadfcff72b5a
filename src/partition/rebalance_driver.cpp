// The rebalancer's loop: readings at a period, a decision per turn, moves through the callback,
// and no exception ever leaving the thread.
#include <mgm/error.hpp>
#include <mgm/partition/rebalance_driver.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace mgm {

std::string_view kind_name(rebalance_event::kind k) noexcept {
  switch (k) {
    case rebalance_event::kind::stayed: return "stayed";
    case rebalance_event::kind::moved: return "moved";
    case rebalance_event::kind::reading_failed: return "reading_failed";
    case rebalance_event::kind::callback_failed: return "callback_failed";
  }
  return "unknown";
}

namespace {

// `readings_from`, and which GPUs the batch named (`seen`: a GPU seen and not present was reported lost).
std::vector<gpu_reading> read_batch(const std::vector<telemetry::device_sample>& batch, std::size_t gpus,
                                    const std::vector<std::string>& keys, reading_options options,
                                    std::vector<bool>& seen) {
  MGM_EXPECTS(keys.empty() || keys.size() == gpus, "readings_from: " + std::to_string(keys.size()) + " keys for " +
                                                       std::to_string(gpus) + " GPUs");
  std::vector<gpu_reading> out(gpus);
  seen.assign(gpus, false);
  for (const auto& s : batch) {
    std::size_t i = gpus;
    if (!keys.empty()) {
      const std::string k = s.key();
      for (std::size_t j = 0; j < gpus; ++j) {
        if (keys[j] == k) i = j;
      }
    } else if (!s.mig) {
      const int ordinal = s.cuda_ordinal.value_or(s.index);
      if (ordinal >= 0 && static_cast<std::size_t>(ordinal) < gpus) i = static_cast<std::size_t>(ordinal);
    }
    if (i == gpus || seen[i]) continue;
    seen[i] = true;
    gpu_reading& r = out[i];
    r.present = !s.lost;
    if (s.lost || !s.memory_free) continue;
    std::uint64_t free = *s.memory_free;
    if (options.pool_cache_is_free && s.pool_reserved && s.pool_allocated && *s.pool_reserved > *s.pool_allocated) {
      free += *s.pool_reserved - *s.pool_allocated;
    }
    r.free_bytes = static_cast<std::size_t>(free);
  }
  for (std::size_t i = 0; i < gpus; ++i) {
    if (!seen[i]) out[i].present = false;
  }
  return out;
}

}  // namespace

std::vector<gpu_reading> readings_from(const std::vector<telemetry::device_sample>& batch, std::size_t gpus,
                                       const std::vector<std::string>& keys, reading_options options) {
  std::vector<bool> seen;
  return read_batch(batch, gpus, keys, options, seen);
}

struct rebalance_driver::impl {
  rebalancer state;
  reading_function read;
  std::chrono::milliseconds period{1000};
  change_callback on_change;
  event_callback on_event;

  mutable std::mutex mutex;  // guards state's plan for readers, last_error, stopping
  std::condition_variable wake;
  bool stopping{false};
  std::atomic<std::uint64_t> turns{0};
  std::atomic<std::uint64_t> changes{0};
  std::atomic<std::uint64_t> errors{0};
  std::string last_error;
  std::mutex join_mutex;
  std::thread thread;

  explicit impl(rebalancer r) : state{std::move(r)} {}

  rebalance_event fail(rebalance_event e, std::string what) {
    errors.fetch_add(1, std::memory_order_relaxed);
    e.message = std::move(what);
    const std::lock_guard lock{mutex};
    last_error = e.message;
    return e;
  }

  rebalance_event turn_inner() {
    rebalance_event e;
    e.turn = turns.fetch_add(1, std::memory_order_relaxed) + 1;
    e.time = telemetry::clock::now();
    std::vector<gpu_reading> readings;
    try {
      readings = read();
    } catch (const std::exception& ex) {
      e.what = rebalance_event::kind::reading_failed;
      return fail(std::move(e), std::string{"the readings failed: "} + ex.what() + "; the plan stays");
    } catch (...) {
      e.what = rebalance_event::kind::reading_failed;
      return fail(std::move(e), "the readings failed (an unknown exception); the plan stays");
    }
    // The step runs on a copy, committed only once its moves are done: readers of plan() never
    // see a plan whose moves are in flight or failed.
    rebalancer next = state;
    rebalance_decision d;
    try {
      d = next.step(readings);
    } catch (const std::exception& ex) {
      e.what = rebalance_event::kind::reading_failed;
      return fail(std::move(e), std::string{"the readings were refused: "} + ex.what() + "; the plan stays");
    }
    e.message = d.plan.reason;
    for (const auto& note : d.notes) e.message += "; " + note;
    if (d.moved()) {
      std::string error;
      try {
        if (on_change) on_change(d);
      } catch (const std::exception& ex) {
        error = ex.what();
      } catch (...) {
        error = "an unknown exception";
      }
      if (!error.empty()) {
        e.what = rebalance_event::kind::callback_failed;
        e.decision = std::move(d);
        return fail(std::move(e), "the moves failed: " + error + "; the plan is the one before");
      }
      changes.fetch_add(1, std::memory_order_relaxed);
      e.what = rebalance_event::kind::moved;
    }
    {
      const std::lock_guard lock{mutex};
      state = std::move(next);
    }
    e.decision = std::move(d);
    return e;
  }

  rebalance_event turn() {
    rebalance_event e = turn_inner();
    if (on_event) {
      try {
        on_event(e);
      } catch (...) {
        // a log line that could not be written changes nothing
      }
    }
    return e;
  }

  void run() {
    auto next = std::chrono::steady_clock::now();
    for (;;) {
      try {
        (void)turn();
      } catch (...) {
        // Only the host out of memory gets here (the copy of the rebalancer, a message): the
        // plan stays, the turn counts as an error, and the loop goes on.
        errors.fetch_add(1, std::memory_order_relaxed);
      }
      next += period;
      const auto now = std::chrono::steady_clock::now();
      if (next < now) next = now;  // after a stall: a period from now, not a burst
      std::unique_lock lock{mutex};
      if (wake.wait_until(lock, next, [this] { return stopping; })) return;
    }
  }
};

rebalance_driver::rebalance_driver(rebalancer r, reading_function read, std::chrono::milliseconds period,
                                   change_callback on_change, event_callback on_event, bool start)
    : impl_{std::make_unique<impl>(std::move(r))} {
  MGM_EXPECTS(static_cast<bool>(read), "rebalance_driver: no reading function");
  impl_->read = std::move(read);
  impl_->period = period.count() > 0 ? period : std::chrono::milliseconds{1};
  impl_->on_change = std::move(on_change);
  impl_->on_event = std::move(on_event);
  if (start) impl_->thread = std::thread{[p = impl_.get()] { p->run(); }};
}

rebalance_driver::~rebalance_driver() {
  stop();
  // Destroyed from its own callback: the thread cannot join itself, so it is left to finish alone
  // (it touches nothing of the driver after its turn returns).
  if (impl_->thread.joinable() && impl_->thread.get_id() == std::this_thread::get_id()) {
    impl_->thread.detach();
    (void)impl_.release();  // the loop still reads its impl: leaked, not freed under it
  }
}

rebalance_driver::reading_function rebalance_driver::from_source(std::shared_ptr<telemetry::source> source,
                                                                 std::size_t gpus, std::vector<std::string> keys,
                                                                 reading_options options) {
  MGM_EXPECTS(source != nullptr, "rebalance_driver::from_source: no source");
  MGM_EXPECTS(options.misses_before_lost >= 1, "rebalance_driver::from_source: misses_before_lost must be at least 1");
  auto misses = std::make_shared<std::vector<unsigned>>(gpus, 0U);
  return [source = std::move(source), gpus, keys = std::move(keys), options, misses] {
    std::vector<bool> seen;
    auto out = read_batch(source->sample(), gpus, keys, options, seen);
    for (std::size_t i = 0; i < gpus; ++i) {
      unsigned& missed = (*misses)[i];
      if (out[i].present) {
        missed = 0;
      } else if (seen[i]) {
        missed = options.misses_before_lost;  // lost by the source's own report (NVML's GPU_IS_LOST): lost while it stays away
      } else if (missed + 1 < options.misses_before_lost) {
        ++missed;  // missing from the batch: no reading (its last one stands) until it has been missing long enough
        out[i] = {true, std::nullopt, std::nullopt};
      } else {
        missed = options.misses_before_lost;
      }
    }
    return out;
  };
}

rebalance_event rebalance_driver::turn() {
  MGM_EXPECTS(!impl_->thread.joinable(), "rebalance_driver::turn: the driver's thread is running");
  return impl_->turn();
}

void rebalance_driver::stop() noexcept {
  {
    const std::lock_guard lock{impl_->mutex};
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  // From a callback (the driver's own thread): the loop ends after this turn; the destructor joins.
  if (impl_->thread.get_id() == std::this_thread::get_id()) return;
  const std::lock_guard join{impl_->join_mutex};  // two threads stopping at once: one joins
  if (impl_->thread.joinable()) impl_->thread.join();
}

partition_plan rebalance_driver::plan() const {
  const std::lock_guard lock{impl_->mutex};
  return impl_->state.plan();
}
std::uint64_t rebalance_driver::turns() const noexcept { return impl_->turns.load(std::memory_order_relaxed); }
std::uint64_t rebalance_driver::changes() const noexcept { return impl_->changes.load(std::memory_order_relaxed); }
std::uint64_t rebalance_driver::errors() const noexcept { return impl_->errors.load(std::memory_order_relaxed); }
std::string rebalance_driver::last_error() const {
  const std::lock_guard lock{impl_->mutex};
  return impl_->last_error;
}

}  // namespace mgm
