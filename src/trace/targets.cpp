#include "replay_target.hpp"

#include <mgm/error.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/judged.hpp>

#include <cstddef>
#include <memory_resource>
#include <string>

namespace mgm::detail {
namespace {

class pool_target final : public replay_target {
 public:
  pool_target(sim::machine& m, device_id d, const pool_options& o) : pool_{m.allocator(d), o} {}
  void* allocate(std::size_t bytes, stream_ref s) override { return pool_.allocate_async(bytes, 256, s); }
  void deallocate(void* p, std::size_t bytes, stream_ref s) noexcept override { pool_.deallocate_async(p, bytes, 256, s); }

 private:
  caching_pool<sim::device_allocator, false> pool_;  // statistics off: the replay counts for itself
};

class direct_target final : public replay_target {
 public:
  direct_target(sim::machine& m, device_id d) : upstream_{m.allocator(d)} {}
  void* allocate(std::size_t bytes, stream_ref s) override { return upstream_.allocate_async(bytes, 256, s); }
  void deallocate(void* p, std::size_t bytes, stream_ref s) noexcept override {
    upstream_.deallocate_async(p, bytes, 256, s);
  }

 private:
  sim::device_allocator upstream_;
};

// std::pmr's pool over the device's memory: the simulated memory is real host memory, so the
// pool may keep its free lists inside the blocks, as it does with any memory resource.
class device_resource final : public std::pmr::memory_resource {
 public:
  explicit device_resource(sim::device_allocator a) : upstream_{a} {}

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    return upstream_.allocate(bytes, std::max(alignment, std::size_t{256}));
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t) override { upstream_.deallocate(p, bytes); }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
  sim::device_allocator upstream_;
};

class pmr_target final : public replay_target {
 public:
  pmr_target(sim::machine& m, device_id d) : resource_{m.allocator(d)}, pool_{&resource_} {}
  void* allocate(std::size_t bytes, stream_ref) override { return pool_.allocate(bytes, 256); }
  void deallocate(void* p, std::size_t bytes, stream_ref) noexcept override { pool_.deallocate(p, bytes, 256); }

 private:
  device_resource resource_;
  std::pmr::unsynchronized_pool_resource pool_;
};

// The floor for host time: one arena, the device's largest free range taken in one call, and a
// pointer bumped through it; frees are ignored and the pointer wraps to the start when a request
// passes the end. Addresses are reused without regard for what is live, so it is never judged:
// it prices the replay's own work per event, not a way to manage memory.
class bump_target final : public replay_target {
 public:
  bump_target(sim::machine& m, device_id d)
      : upstream_{m.allocator(d)}, bytes_{m.memory(d).largest_free_bytes / 256 * 256} {
    MGM_EXPECTS(bytes_ > 0, "bump: the device has no free memory for its arena");
    base_ = static_cast<std::byte*>(upstream_.allocate(bytes_, 256));
    next_ = base_;
  }
  ~bump_target() override { upstream_.deallocate(base_, bytes_, 256); }
  bump_target(const bump_target&) = delete;
  bump_target& operator=(const bump_target&) = delete;

  void* allocate(std::size_t bytes, stream_ref) override {
    const std::size_t need = (bytes + 255) & ~std::size_t{255};
    if (static_cast<std::size_t>(base_ + bytes_ - next_) < need) {
      if (need > bytes_) throw out_of_memory{"bump: a request larger than its whole arena", bytes};
      next_ = base_;
    }
    void* p = next_;
    next_ += need;
    return p;
  }
  void deallocate(void*, std::size_t, stream_ref) noexcept override {}

 private:
  sim::device_allocator upstream_;
  std::size_t bytes_;
  std::byte* base_{nullptr};
  std::byte* next_{nullptr};
};

class null_target final : public replay_target {
 public:
  void* allocate(std::size_t bytes, stream_ref) override {
    next_ += bytes + 256;
    return reinterpret_cast<void*>(next_);
  }
  void deallocate(void*, std::size_t, stream_ref) noexcept override {}

 private:
  std::uintptr_t next_{0x1000};
};

}  // namespace

// (Outside the anonymous namespace: clang would call its operator== unneeded there.)
// A target seen as a stream allocator, so that `sim::judged` can wrap any of them.
class target_allocator {
 public:
  explicit target_allocator(replay_target& t) noexcept : t_{&t} {}
  void* allocate(std::size_t bytes, std::size_t) { return t_->allocate(bytes, stream_ref{}); }
  void deallocate(void* p, std::size_t bytes, std::size_t) noexcept { t_->deallocate(p, bytes, stream_ref{}); }
  void* allocate_async(std::size_t bytes, std::size_t, stream_ref s) { return t_->allocate(bytes, s); }
  void deallocate_async(void* p, std::size_t bytes, std::size_t, stream_ref s) noexcept { t_->deallocate(p, bytes, s); }
  friend bool operator==(const target_allocator&, const target_allocator&) = default;
  friend device_id get_property(const target_allocator&, device_affinity) noexcept { return device_id{0}; }

 private:
  replay_target* t_;
};

// Every allocation and free of the wrapped target goes through the judge.
class judged_target final : public replay_target {
 public:
  judged_target(sim::machine& m, std::unique_ptr<replay_target> inner)
      : inner_{std::move(inner)}, adapter_{*inner_}, judged_{m, adapter_} {}
  void* allocate(std::size_t bytes, stream_ref s) override { return judged_.allocate_async(bytes, 256, s); }
  void deallocate(void* p, std::size_t bytes, stream_ref s) noexcept override { judged_.deallocate_async(p, bytes, 256, s); }

 private:
  std::unique_ptr<replay_target> inner_;
  target_allocator adapter_;
  sim::judged<target_allocator> judged_;
};


std::unique_ptr<replay_target> make_null_target() { return std::make_unique<null_target>(); }

std::unique_ptr<replay_target> make_replay_target(std::string_view name, sim::machine& m, device_id d,
                                                  const pool_options& options, bool judge) {
  if (judge && name != "null" && name != "bump") {  // both reuse addresses on purpose
    return std::make_unique<judged_target>(m, make_replay_target(name, m, d, options, false));
  }
  if (name == "pool") return std::make_unique<pool_target>(m, d, options);
  if (name == "direct") return std::make_unique<direct_target>(m, d);
  if (name == "cub") return make_cub_target(m, d);
  if (name == "pmr") return std::make_unique<pmr_target>(m, d);
  if (name == "bump") return std::make_unique<bump_target>(m, d);
  if (name == "null") return make_null_target();
  MGM_FAIL("unknown allocator '" + std::string{name} + "' for a replay; the allocators are pool, direct, cub, pmr, bump");
}

}  // namespace mgm::detail
