/// @file
/// @brief `imported_block`: another process's pooled block (`shared_block`), mapped here.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/pool/shared_block.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace mgm {

/// @brief Maps the chunks of a `shared_block` into one reserved range, in order, with read-write
/// access for `readers` (the block's device when none are named), and unmaps and releases them
/// when it goes. The block's descriptors stay the caller's (they may be closed once this exists).
/// @tparam Vmm a `shareable_vmm_ops` seam: `cuda_vmm_ops` on a GPU, `sim::vmm_ops` on the simulator.
/// @throws from the constructor: mgm::logic_error for an invalid block; what the seam throws
/// (mgm::cuda_error for a descriptor that is not shareable memory, chunks off the granule, a
/// reader that cannot access the device), with nothing left mapped. Move-only.
template <shareable_vmm_ops Vmm>
class imported_block {
 public:
  using handle = typename Vmm::physical_handle;

  imported_block(Vmm vmm, const shared_block& block, std::vector<device_id> readers = {})
      : vmm_{std::move(vmm)}, device_{block.device}, offset_{block.offset}, size_{block.size} {
    block.validate();
    if (readers.empty()) readers.push_back(block.device);
    bytes_ = block.mapped_bytes();
    base_ = vmm_.reserve(block.device, bytes_);
    try {
      chunks_.reserve(block.chunks.size());
      std::size_t at = 0;
      for (const auto& c : block.chunks) {
        chunks_.push_back({vmm_.import_handle(c.fd.get()), c.bytes, false});
        vmm_.map(address(at), c.bytes, chunks_.back().h);
        chunks_.back().mapped = true;
        at += c.bytes;
      }
      vmm_.set_access(base_, bytes_, readers);
    } catch (...) {
      reset();
      throw;
    }
  }
  imported_block(imported_block&& o) noexcept
      : vmm_{o.vmm_},
        device_{o.device_},
        base_{std::exchange(o.base_, nullptr)},
        bytes_{o.bytes_},
        offset_{o.offset_},
        size_{o.size_},
        chunks_{std::move(o.chunks_)} {}
  imported_block& operator=(imported_block&&) = delete;
  imported_block(const imported_block&) = delete;
  imported_block& operator=(const imported_block&) = delete;
  ~imported_block() { reset(); }

  /// @brief The block's first byte here.
  [[nodiscard]] void* get() const noexcept { return address(offset_); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] device_id device() const noexcept { return device_; }
  /// @brief The whole mapped range (every chunk the block touches).
  [[nodiscard]] void* mapped_base() const noexcept { return base_; }
  [[nodiscard]] std::size_t mapped_bytes() const noexcept { return bytes_; }

 private:
  [[nodiscard]] void* address(std::size_t at) const noexcept { return static_cast<char*>(base_) + at; }

  // Unmaps what is mapped, releases every handle, gives the range back.
  void reset() noexcept {
    if (base_ == nullptr) return;
    // The chunks were mapped back to back from base_: unmap the mapped ones, chunk by chunk.
    std::size_t at = 0;
    for (const chunk& c : chunks_) {
      if (c.mapped) vmm_.unmap(address(at), c.bytes);
      vmm_.release(c.h);
      at += c.bytes;
    }
    vmm_.unreserve(base_, bytes_);
    base_ = nullptr;
    chunks_.clear();
  }

  Vmm vmm_;
  device_id device_;
  void* base_{nullptr};
  std::size_t bytes_{0};
  std::size_t offset_;
  std::size_t size_;
  struct chunk {
    handle h;
    std::size_t bytes;
    bool mapped;
  };
  std::vector<chunk> chunks_;  // imported, in address order
};

}  // namespace mgm
