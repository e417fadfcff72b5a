// Data-parallel replay: the same trace on K devices, K threads, with wall and CPU time.
#include <mgm/trace/replay.hpp>

#include <sys/resource.h>

#include <chrono>
#include <exception>
#include <thread>

namespace mgm {

namespace {

double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

}  // namespace

data_parallel_result replay_data_parallel(const compiled_trace& t, std::string_view allocator, const replay_options& options,
                                          std::span<const std::size_t> capacities, bool on_gpu) {
  const std::size_t k = capacities.size();
  data_parallel_result out;
  out.per_device.resize(k);
  std::vector<std::exception_ptr> errors(k);
  const double cpu0 = process_cpu_seconds();
  const auto wall0 = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> threads;
    threads.reserve(k);
    for (std::size_t i = 0; i < k; ++i) {
      threads.emplace_back([&, i] {
        try {
          replay_options o = options;
          o.capacity_bytes = capacities[i];
          out.per_device[i] = on_gpu ? replay_on_device(t, allocator, o, device_id{static_cast<int>(i)})
                                     : replay_on_sim(t, allocator, o);
          out.per_device[i].device = static_cast<int>(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
  }
  out.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  out.cpu_seconds = process_cpu_seconds() - cpu0;
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  double events = 0;
  for (const auto& r : out.per_device) events += static_cast<double>(r.events) * r.iterations;
  out.events_per_second = out.wall_seconds > 0 ? events / out.wall_seconds : 0.0;
  return out;
}

}  // namespace mgm
