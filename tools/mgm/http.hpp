// HTTP for the tool (Boost.Beast, header-only, so the installed `mgm` needs no shared library for
// it): the small server of `mgm serve`, which answers GETs from a handler on one thread, keeps
// connections alive, bounds what a client can make it hold, and stops cleanly on SIGTERM or
// SIGINT. (`mgm plan --prometheus` asks Prometheus through the library's telemetry source.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace mgm_tool {

struct http_response {
  int status{200};
  std::string content_type{"text/plain; charset=utf-8"};
  std::string body;
};

/// @brief Called for each request, on the server's thread: it must not block for long (a scrape
/// must never wait on a GPU). Its exceptions become a 500 answer.
using http_handler = std::function<http_response(std::string_view method, std::string_view target)>;

struct http_limits {
  /// Beyond this, a new connection closes an idle one, or is closed at once when none is idle.
  std::size_t max_connections{64};
  std::size_t max_header_bytes{8192};
  /// A connection has this long to send each request (from its first byte or the last answer);
  /// each answer has 10 s to be written.
  double idle_timeout_s{30.0};
};

class http_server {
 public:
  /// @brief Binds and listens on `listen` (`HOST:PORT`, `:PORT` for every interface, port 0 for
  /// one the system picks). @throws tool_error (2) for a bad address or a port in use.
  http_server(const std::string& listen, http_handler handler, http_limits limits = {});
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// @brief `HOST:PORT` as bound (the real port when 0 was asked for).
  [[nodiscard]] std::string address() const;

  /// @brief Serves until SIGTERM or SIGINT, or `stop()`; then stops accepting, lets the answers
  /// being written finish (for at most 2 s) and returns.
  void run();

  /// @brief Asks `run()` to return, from any thread.
  void stop();

  /// @brief Requests answered 200 so far.
  [[nodiscard]] std::uint64_t requests() const noexcept;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace mgm_tool
