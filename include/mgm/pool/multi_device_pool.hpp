/// @file
/// @brief `multi_device_pool`: one `caching_pool` per device, created on first use.
#pragma once

#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/pool/pool_statistics.hpp>
#include <mgm/stream.hpp>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mgm {

/// @brief A caching pool per device, each over its own upstream, made the first time a device is
/// used. Routes by `device_id`, or by the calling thread's current CUDA device.
/// @tparam Upstream as for `caching_pool`; `make_upstream(d)` builds the one for device d.
/// @code
///   mgm::multi_device_pool<mgm::cuda_allocator> pools{mgm::device_count(),
///       [](mgm::device_id d) { return mgm::cuda_allocator{d}; }};
///   void* p = pools.allocate(mgm::device_id{1}, bytes, 256, stream);
/// @endcode
/// **Thread safety:** safe; finding a device's pool is one atomic load after its creation.
/// **Device affinity:** each pool its device's; the current device is read only by the
/// overloads without a `device_id`, and changed only through `scoped_device` (in the upstreams).
template <platform_allocator Upstream, bool Statistics = true>
class multi_device_pool {
 public:
  using pool_type = caching_pool<Upstream, Statistics>;
  using upstream_factory = std::function<Upstream(device_id)>;

  multi_device_pool(int device_count, upstream_factory make_upstream, pool_options options = pool_options::from_env())
      : make_upstream_{std::move(make_upstream)}, options_{std::move(options)}, pools_(static_cast<std::size_t>(device_count)) {
    MGM_EXPECTS(device_count >= 0, "multi_device_pool: a negative device count");
    options_.validate();
    for (auto& p : pools_) p.store(nullptr, std::memory_order_relaxed);
  }
  ~multi_device_pool() {
    for (auto& p : pools_) delete p.load(std::memory_order_acquire);
  }
  multi_device_pool(const multi_device_pool&) = delete;
  multi_device_pool& operator=(const multi_device_pool&) = delete;

  [[nodiscard]] int device_count() const noexcept { return static_cast<int>(pools_.size()); }

  /// @brief The pool of `d`, created on first use. @throws mgm::logic_error when `d` is out of range.
  [[nodiscard]] pool_type& pool(device_id d) {
    if (d.is_host() || d.value() < 0 || d.index() >= pools_.size()) [[unlikely]] {
      MGM_FAIL("multi_device_pool: device " + std::to_string(d.value()) + " is out of range (" +
               std::to_string(pools_.size()) + " devices)");
    }
    if (pool_type* p = pools_[d.index()].load(std::memory_order_acquire)) [[likely]] return *p;
    const std::lock_guard lock{create_mutex_};
    if (pool_type* p = pools_[d.index()].load(std::memory_order_acquire)) return *p;
    auto made = std::make_unique<pool_type>(make_upstream_(d), options_, handler_);
    pools_[d.index()].store(made.get(), std::memory_order_release);
    return *made.release();
  }
  /// @brief The pool of the calling thread's current CUDA device.
  [[nodiscard]] pool_type& current_pool() { return pool(current_device()); }
  /// @brief Whether `d`'s pool exists yet.
  [[nodiscard]] bool has_pool(device_id d) const noexcept {
    return !d.is_host() && d.value() >= 0 && d.index() < pools_.size() &&
           pools_[d.index()].load(std::memory_order_acquire) != nullptr;
  }

  [[nodiscard]] void* allocate(device_id d, std::size_t bytes, std::size_t alignment, stream_ref stream) {
    return pool(d).allocate_async(bytes, alignment, stream);
  }
  void deallocate(device_id d, void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
    if (!has_pool(d)) {
      refuse_deallocation([&] {
        return "multi_device_pool: deallocate on device " + std::to_string(d.value()) + " which has no pool; nothing was changed";
      });
      return;
    }
    pool(d).deallocate_async(p, bytes, alignment, stream);
  }
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment, stream_ref stream) {
    return current_pool().allocate_async(bytes, alignment, stream);
  }

  /// @brief Sets the handler of every pool, present and future.
  void set_oom_handler(oom_handler handler) {
    const std::lock_guard lock{create_mutex_};
    handler_ = handler;
    for (auto& p : pools_) {
      if (pool_type* pool = p.load(std::memory_order_acquire)) pool->set_oom_handler(handler);
    }
  }

  /// @brief `release(bytes_to_keep)` on every pool; returns the bytes released in all.
  std::size_t release_all(std::size_t bytes_to_keep_per_device = 0) {
    std::size_t released = 0;
    for (auto& p : pools_) {
      if (pool_type* pool = p.load(std::memory_order_acquire)) released += pool->release(bytes_to_keep_per_device);
    }
    return released;
  }

  /// @brief The statistics of `d`'s pool (zeros when it has none yet).
  [[nodiscard]] pool_statistics statistics(device_id d) const {
    return has_pool(d) ? pools_[d.index()].load(std::memory_order_acquire)->statistics() : pool_statistics{};
  }
  /// @brief Every pool's statistics added up (peaks add: an upper bound of the joint peak).
  [[nodiscard]] pool_statistics total_statistics() const {
    pool_statistics total;
    for (const auto& p : pools_) {
      if (const pool_type* pool = p.load(std::memory_order_acquire)) total += pool->statistics();
    }
    return total;
  }

 private:
  upstream_factory make_upstream_;
  pool_options options_;
  oom_handler handler_;
  std::mutex create_mutex_;
  std::vector<std::atomic<pool_type*>> pools_;
};

}  // namespace mgm
