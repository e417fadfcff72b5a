// The C ABI's pools behind one interface, on CUDA or on the simulator (src/c/multigpumem_c.cpp
// holds one for the process). Internal to libmultigpumem_c.
#pragma once

#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/bytes.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/pool/imported_block.hpp>
#include <mgm/pool/multi_device_pool.hpp>
#include <mgm/pool/shared_block.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace mgm::c_abi {

/// Sets this thread's `mgm_last_error` (defined in multigpumem_c.cpp).
// Sets the calling thread's mgm_last_error() to the parts joined. Never throws: without host
// memory for the text, mgm_last_error() says so instead.
void set_error(std::string_view a, std::string_view b = {}, std::string_view c = {}) noexcept;

// The pools, whatever their platform.
class backend {
 public:
  virtual ~backend() = default;
  [[nodiscard]] virtual int device_count() const = 0;
  [[nodiscard]] virtual void* allocate(int device, std::size_t bytes, mgm::stream_ref s) = 0;
  virtual void deallocate(int device, void* p, std::size_t bytes, mgm::stream_ref s) noexcept = 0;
  virtual bool record_stream(void* p, mgm::stream_ref s) = 0;  // false: no pool holds p
  virtual void forget_stream(int device, mgm::stream_ref s) = 0;
  // The segment holding `p`: its base and size; false when no pool holds it.
  virtual bool segment_of(const void* p, void*& base, std::size_t& size) = 0;
  virtual std::size_t release(int device) = 0;
  virtual void set_max_reserved(int device, std::size_t bytes) = 0;  // the pool's limit (creates it)
  [[nodiscard]] virtual bool has_pool(int device) const = 0;
  [[nodiscard]] virtual mgm::pool_statistics statistics(int device) = 0;
  [[nodiscard]] virtual mgm::pool_snapshot snapshot(int device) = 0;
  [[nodiscard]] virtual std::size_t total_bytes(int device) const = 0;
  [[nodiscard]] virtual std::size_t free_bytes(int device) const = 0;
  [[nodiscard]] virtual void* create_stream(int device) = 0;
  virtual int capture(void* stream, bool begin) = 0;
  virtual int enqueue(void* stream, std::uint64_t nanoseconds) = 0;
  [[nodiscard]] virtual std::string describe() const = 0;
  // Shareable memory: a token for another process (the descriptors stay open until unexport or
  // the block's free), the block of a token mapped here, and that mapping's end.
  [[nodiscard]] virtual std::string export_token(void* p, int device) = 0;
  virtual bool unexport(const void* p) = 0;  // false: p was not exported
  [[nodiscard]] virtual void* import_token(const char* token, int device) = 0;
  virtual bool close_import(const void* p) = 0;  // false: p is no import
};

template <class Upstream>
class pool_backend final : public backend {
 public:
  using pools_type = mgm::multi_device_pool<Upstream, true>;

  using vmm_type = typename Upstream::vmm_ops_type;

  pool_backend(int n, typename pools_type::upstream_factory make, mgm::pool_options o, mgm::sim::machine* machine)
      : make_{make},
        pools_{n, std::move(make), o},
        machine_{machine},
        judged_{machine != nullptr && machine->judging() != mgm::sim::oracle_mode::off},
        options_{std::move(o)} {}

  int device_count() const override { return pools_.device_count(); }
  void* allocate(int device, std::size_t bytes, mgm::stream_ref s) override {
    auto& pool = pools_.pool(mgm::device_id{device});
    if (judged_) return mgm::sim::judged{*machine_, pool}.allocate_async(bytes, mgm::cuda_allocation_alignment, s);
    return pool.allocate_async(bytes, mgm::cuda_allocation_alignment, s);
  }
  void deallocate(int device, void* p, std::size_t bytes, mgm::stream_ref s) noexcept override {
    if (exported_.load(std::memory_order_relaxed) != 0) [[unlikely]] (void)unexport(p);  // a free ends its export
    if (!pools_.has_pool(mgm::device_id{device})) {  // nothing was allocated there: never make a pool to free
      mgm::refuse_deallocation([&] {
        return "mgm_free_async(" + mgm::detail::describe_address(p) + ", " + std::to_string(bytes) + ", device " +
               std::to_string(device) + "): that device's pool has handed out nothing; nothing was changed";
      });
      return;
    }
    auto& pool = pools_.pool(mgm::device_id{device});
    if (judged_) {
      mgm::sim::judged{*machine_, pool}.deallocate_async(p, bytes, mgm::cuda_allocation_alignment, s);
    } else {
      pool.deallocate_async(p, bytes, mgm::cuda_allocation_alignment, s);
    }
  }
  bool record_stream(void* p, mgm::stream_ref s) override {
    for (int d = 0; d < pools_.device_count(); ++d) {
      if (!pools_.has_pool(mgm::device_id{d})) continue;
      auto& pool = pools_.pool(mgm::device_id{d});
      try {
        if (judged_) {
          mgm::sim::judged{*machine_, pool}.record_stream(p, s);
        } else {
          pool.record_stream(p, s);
        }
        return true;
      } catch (const mgm::logic_error&) {
        // not this pool's pointer
      }
    }
    return false;
  }
  void set_max_reserved(int device, std::size_t bytes) override {
    auto& pool = pools_.pool(mgm::device_id{device});
    mgm::pool_limits l = pool.limits();
    l.max_reserved_bytes = bytes;
    pool.set_limits(l);
  }
  void forget_stream(int device, mgm::stream_ref s) override {
    if (pools_.has_pool(mgm::device_id{device})) pools_.pool(mgm::device_id{device}).forget_stream(s);
  }
  bool segment_of(const void* p, void*& base, std::size_t& size) override {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    for (int d = 0; d < pools_.device_count(); ++d) {
      if (!pools_.has_pool(mgm::device_id{d})) continue;
      for (const auto& seg : pools_.pool(mgm::device_id{d}).snapshot().segments) {
        if (a >= seg.address && a < seg.address + seg.size) {
          base = reinterpret_cast<void*>(seg.address);
          size = seg.size;
          return true;
        }
      }
    }
    return false;
  }
  std::size_t release(int device) override {
    return pools_.has_pool(mgm::device_id{device}) ? pools_.pool(mgm::device_id{device}).release() : 0;
  }
  bool has_pool(int device) const override { return pools_.has_pool(mgm::device_id{device}); }
  mgm::pool_statistics statistics(int device) override {
    if (!pools_.has_pool(mgm::device_id{device})) return {};  // no pool yet: nothing happened
    return pools_.pool(mgm::device_id{device}).statistics();
  }
  mgm::pool_snapshot snapshot(int device) override {
    if (!pools_.has_pool(mgm::device_id{device})) return mgm::pool_snapshot{device, {}};
    return pools_.pool(mgm::device_id{device}).snapshot();
  }
  std::size_t total_bytes(int device) const override {
    if (machine_ != nullptr) return machine_->memory(mgm::device_id{device}).total_bytes;
    return mgm::memory_info(mgm::device_id{device}).total_bytes;
  }
  std::size_t free_bytes(int device) const override {
    if (machine_ != nullptr) return machine_->memory(mgm::device_id{device}).free_bytes;
    return mgm::memory_info(mgm::device_id{device}).free_bytes;
  }
  void* create_stream(int device) override {
    if (machine_ == nullptr) {
      set_error("mgm_sim_create_stream: the library runs on CUDA (MGM_C_SIM is not set); create streams with CUDA");
      return nullptr;
    }
    return machine_->create_stream(mgm::device_id{device}).get();
  }
  int capture(void* stream, bool begin) override {
    if (machine_ == nullptr) {
      set_error("mgm_sim_begin_capture / mgm_sim_end_capture: the library runs on CUDA (MGM_C_SIM is not set)");
      return -1;
    }
    const mgm::stream_ref s{static_cast<cudaStream_t>(stream)};
    if (begin) {
      machine_->begin_capture(s);
    } else {
      (void)machine_->end_capture(s);  // the graph is not launched: its memory stays the capture's
    }
    return 0;
  }
  int enqueue(void* stream, std::uint64_t nanoseconds) override {
    if (machine_ == nullptr) {
      set_error("mgm_sim_enqueue: the library runs on CUDA (MGM_C_SIM is not set)");
      return -1;
    }
    machine_->enqueue(mgm::stream_ref{static_cast<cudaStream_t>(stream)}, std::chrono::nanoseconds{nanoseconds});
    return 0;
  }
  std::string describe() const override { return options_.to_string(); }

  std::string export_token(void* p, int device) override {
    {  // exported already: the same token (its descriptors stay valid for every holder)
      const std::lock_guard lock{ipc_mutex_};
      if (const auto it = exports_.find(p); it != exports_.end()) return it->second.token;
    }
    exported_block e{pools_.pool(mgm::device_id{device}).export_block(p), {}};
    e.token = mgm::shared_block_token(e.block);
    static const bool allowed = mgm::allow_token_imports();  // once: importers take the descriptors
    (void)allowed;                                            // with pidfd_getfd, under Yama too
    const std::lock_guard lock{ipc_mutex_};
    const auto [it, added] = exports_.emplace(p, std::move(e));  // another thread may have been first
    exported_.store(exports_.size(), std::memory_order_relaxed);
    return it->second.token;
  }
  bool unexport(const void* p) override {
    const std::lock_guard lock{ipc_mutex_};
    const bool found = exports_.erase(p) != 0;
    exported_.store(exports_.size(), std::memory_order_relaxed);
    return found;
  }
  void* import_token(const char* token, int device) override {
    mgm::shared_block block = mgm::open_shared_block_token(token);
    // The memory is mapped for this process's ordinal of the GPU (visible devices may differ).
    block.device = mgm::device_id{device};
    auto made = std::make_unique<mgm::imported_block<vmm_type>>(make_(mgm::device_id{device}).vmm_ops(), block);
    void* p = made->get();
    const std::lock_guard lock{ipc_mutex_};
    imports_.emplace(p, std::move(made));
    return p;
  }
  bool close_import(const void* p) override {
    std::unique_ptr<mgm::imported_block<vmm_type>> gone;  // unmapped with no lock held
    const std::lock_guard lock{ipc_mutex_};
    const auto it = imports_.find(p);
    if (it == imports_.end()) return false;
    gone = std::move(it->second);
    imports_.erase(it);
    return true;
  }

 private:
  typename pools_type::upstream_factory make_;
  pools_type pools_;
  mgm::sim::machine* machine_;
  bool judged_;  // on the simulator with its judge on: every hand-out reported
  mgm::pool_options options_;
  std::mutex ipc_mutex_;
  struct exported_block {
    mgm::shared_block block;  // the descriptors the token names
    std::string token;
  };
  std::map<const void*, exported_block> exports_;
  // exports_.size(), read by every free: while any block is exported, frees take ipc_mutex_.
  std::atomic<std::size_t> exported_{0};
  std::map<const void*, std::unique_ptr<mgm::imported_block<vmm_type>>> imports_;
};

}  // namespace mgm::c_abi
