// One HTTP GET over a plain socket, for Prometheus's API (src/telemetry/prometheus_source.cpp):
// http:// only, HTTP/1.1 with `Connection: close`, chunked or sized bodies, each step (connect,
// send, the whole answer) within the timeout. No dependency beyond the C library.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace mgm::telemetry::detail {

struct http_reply {
  int status{0};
  std::string body;
};

/// @brief Why a GET got no answer; the message names the URL.
class http_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @brief GETs `url` (`http://HOST[:PORT]/PATH`, IPv6 hosts in brackets): connecting (every
/// address together), sending and the whole answer each within `timeout_s`. @throws http_error
/// for a bad URL, no connection, no answer in time, an answer that is not HTTP or a body over
/// 256 MiB.
[[nodiscard]] http_reply http_get(const std::string& url, double timeout_s);

/// @brief `text` with every character outside RFC 3986's unreserved set %-encoded.
[[nodiscard]] std::string url_encode(std::string_view text);

}  // namespace mgm::telemetry::detail
