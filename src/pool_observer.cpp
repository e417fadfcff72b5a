// The list of live pools and the observer that hears of new ones (see pool_observer.hpp).
#include <mgm/pool_observer.hpp>

#include <pthread.h>

#include <atomic>
#include <map>
#include <mutex>

namespace mgm {

namespace {

struct entry {
  device_id device{0};
  bool simulated{false};
  std::function<pool_figures()> read;
};

struct pool_list {
  std::mutex mutex;
  std::uint64_t next_id{1};
  std::map<std::uint64_t, entry> entries;
};

// A fork (a DataLoader worker) must not leave the child a list locked by a thread it lacks (the
// publisher's, reading figures): every pool the child destroys would wait on it for ever. The list
// is held across the fork. Its handler is registered with the list, before any handler of a layer
// above that reads it (those take their own locks first: prepare handlers run last-registered first).
void lock_for_fork() noexcept;
void unlock_after_fork() noexcept;

pool_list& the_list() {
  // Never destroyed: a publisher or sampler thread may read it during static destruction.
  static pool_list& list = []() -> pool_list& {
    ::pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
    return *new pool_list;
  }();
  return list;
}

void lock_for_fork() noexcept { the_list().mutex.lock(); }
void unlock_after_fork() noexcept { the_list().mutex.unlock(); }

std::atomic<pool_observer*> g_observer{nullptr};

}  // namespace

void set_pool_observer(pool_observer* observer) noexcept { g_observer.store(observer, std::memory_order_release); }

pool_registration::pool_registration(device_id device, bool simulated, std::function<pool_figures()> read) {
  {
    pool_list& list = the_list();
    const std::lock_guard lock{list.mutex};
    id_ = list.next_id++;
    list.entries.emplace(id_, entry{device, simulated, std::move(read)});
  }
  if (pool_observer* o = g_observer.load(std::memory_order_acquire)) o->pool_created(device, simulated);
}

void pool_registration::reset() noexcept {
  if (id_ == 0) return;
  pool_list& list = the_list();
  const std::lock_guard lock{list.mutex};
  list.entries.erase(id_);
  id_ = 0;
}

std::vector<registered_pool> registered_pools() {
  std::vector<registered_pool> out;
  pool_list& list = the_list();
  const std::lock_guard lock{list.mutex};
  for (const auto& [id, e] : list.entries) {
    registered_pool p{e.device, e.simulated, {}};
    try {
      p.figures = e.read();
    } catch (...) {
      continue;  // a pool that cannot answer now is left out of this look
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace mgm
