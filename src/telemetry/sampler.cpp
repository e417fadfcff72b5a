// The sampler thread: a period, a ring buffer, and no exception ever leaving the thread.
#include <mgm/telemetry/sampler.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace mgm::telemetry {

struct sampler::impl {
  std::unique_ptr<source> src;
  std::chrono::milliseconds period{1000};
  std::size_t capacity{1024};
  std::function<void(const sample_batch&)> on_sample;

  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping{false};
  bool finished{false};  // the thread has left run()
  std::deque<sample_batch> ring;
  std::atomic<std::uint64_t> batches{0};
  std::atomic<std::uint64_t> errors{0};
  std::string last_error;
  std::thread thread;

  void fail(const char* what) {
    errors.fetch_add(1, std::memory_order_relaxed);
    const std::lock_guard lock{mutex};
    last_error = what;
  }

  void tick() {
    sample_batch batch;
    try {
      batch = src->sample();
    } catch (const std::exception& e) {
      fail(e.what());
      return;
    } catch (...) {
      fail("unknown exception from the source");
      return;
    }
    if (on_sample) {
      try {
        on_sample(batch);
      } catch (const std::exception& e) {
        fail(e.what());
      } catch (...) {
        fail("unknown exception from the callback");
      }
    }
    const std::lock_guard lock{mutex};
    if (capacity != 0) {
      if (ring.size() == capacity) ring.pop_front();
      ring.push_back(std::move(batch));
    }
    batches.fetch_add(1, std::memory_order_relaxed);
  }

  void ask_to_stop() {
    {
      const std::lock_guard lock{mutex};
      stopping = true;
    }
    wake.notify_all();
  }

  void run() {
    auto next = std::chrono::steady_clock::now();
    for (;;) {
      tick();
      next += period;  // a fixed cadence: a slow sample does not shift the ones after it
      const auto now = std::chrono::steady_clock::now();
      if (next < now) next = now;
      std::unique_lock lock{mutex};
      if (wake.wait_until(lock, next, [this] { return stopping; })) break;
    }
    {
      const std::lock_guard lock{mutex};
      finished = true;
    }
    wake.notify_all();
  }
};

sampler::sampler(std::unique_ptr<source> src, std::chrono::milliseconds period, std::size_t capacity,
                 std::function<void(const sample_batch&)> on_sample)
    : impl_{std::make_unique<impl>()} {
  impl_->src = std::move(src);
  impl_->period = period.count() > 0 ? period : std::chrono::milliseconds{1};
  impl_->capacity = capacity;
  impl_->on_sample = std::move(on_sample);
  if (!impl_->src) {
    impl_->fail("no source");
    return;
  }
  impl_->thread = std::thread{[p = impl_.get()] { p->run(); }};
}

sampler::~sampler() { stop(); }

void sampler::stop() noexcept {
  impl_->ask_to_stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool sampler::stop_within(std::chrono::milliseconds grace) noexcept {
  impl_->ask_to_stop();
  if (!impl_->thread.joinable()) return true;
  {
    std::unique_lock lock{impl_->mutex};
    if (!impl_->wake.wait_for(lock, grace, [this] { return impl_->finished; })) return false;  // still in the call
  }
  impl_->thread.join();
  return true;
}

std::vector<sample_batch> sampler::history() const {
  const std::lock_guard lock{impl_->mutex};
  return {impl_->ring.begin(), impl_->ring.end()};
}

std::optional<sample_batch> sampler::latest() const {
  const std::lock_guard lock{impl_->mutex};
  if (impl_->ring.empty()) return std::nullopt;
  return impl_->ring.back();
}

std::uint64_t sampler::batches() const noexcept { return impl_->batches.load(std::memory_order_relaxed); }
std::uint64_t sampler::errors() const noexcept { return impl_->errors.load(std::memory_order_relaxed); }

std::string sampler::last_error() const {
  const std::lock_guard lock{impl_->mutex};
  return impl_->last_error;
}

}  // namespace mgm::telemetry
