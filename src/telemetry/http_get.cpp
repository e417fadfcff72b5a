// One HTTP GET over a plain socket (see http_get.hpp).
#include "http_get.hpp"

#include <mgm/unique_fd.hpp>

#include "../detail/text.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <optional>

namespace mgm::telemetry::detail {

namespace {

constexpr std::size_t max_answer_bytes = std::size_t{256} << 20;

std::string seconds_text(double s) {
  char out[32];
  if (s == std::floor(s) && s < 1e9) {
    std::snprintf(out, sizeof out, "%.0f s", s);
  } else {
    std::snprintf(out, sizeof out, "%.3g s", s);
  }
  return out;
}

// Waits for `events` on `fd` until `deadline`: false when the time is up.
bool wait_for(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1 << 30)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // the next call on the socket says what is wrong
  }
}

// The body of a chunked answer; false when the chunks are malformed or cut short.
bool unchunk(std::string_view in, std::string& out) {
  for (;;) {
    const std::size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) return false;
    std::size_t size = 0;
    std::size_t digits = 0;
    for (const char c : in.substr(0, eol)) {
      if (c == ';') break;  // chunk extensions
      const int v = std::isdigit(static_cast<unsigned char>(c)) != 0 ? c - '0'
                    : (c >= 'a' && c <= 'f')                        ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F')                        ? c - 'A' + 10
                                                                    : -1;
      if (v < 0 || digits == 15) return false;
      size = size * 16 + static_cast<std::size_t>(v);
      ++digits;
    }
    if (digits == 0) return false;
    in.remove_prefix(eol + 2);
    if (size == 0) return true;  // trailers, if any, are not needed
    if (in.size() < size + 2 || in.substr(size, 2) != "\r\n") return false;
    out.append(in.substr(0, size));
    in.remove_prefix(size + 2);
  }
}

}  // namespace

std::string url_encode(std::string_view text) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      out += {'%', hex[u >> 4], hex[u & 15]};
    }
  }
  return out;
}

http_reply http_get(const std::string& url, double timeout_s) {
  const auto bad = [&](const std::string& why) { return http_error{why + " (GET " + url + ")"}; };
  constexpr std::string_view scheme = "http://";
  if (url.rfind("https://", 0) == 0) throw bad("https is not supported; give the http:// address (or a local proxy)");
  if (url.rfind(scheme, 0) != 0) throw bad("not an http:// URL");
  const std::string rest = url.substr(scheme.size());
  const std::size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  const std::string target = slash == std::string::npos ? "/" : rest.substr(slash);
  std::string host = authority;
  std::string port = "80";
  const std::size_t bracket = authority.rfind(']');
  const std::size_t colon = authority.rfind(':');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) throw bad("no host");
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
    throw bad("the port is not a number");
  }
  if (target.find_first_of("\r\n ") != std::string::npos) throw bad("the path has a space or a line break");
  if (!(timeout_s > 0)) throw bad("the timeout must be more than 0 s");
  const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>{std::min(timeout_s, 1e6)});
  const std::string within = "within " + seconds_text(timeout_s);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    throw bad("cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  // Every address within the one deadline; the error is the last address's.
  std::string connect_error = "no address";
  unique_fd sock;
  const auto connect_deadline = std::chrono::steady_clock::now() + timeout;
  for (addrinfo* a = found; a != nullptr && !sock; a = a->ai_next) {
    unique_fd s{::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol)};
    int error = 0;
    if (!s || (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS)) {
      error = errno;
    } else if (!wait_for(s.get(), POLLOUT, connect_deadline)) {
      connect_error = "no connection " + within;
      break;  // the time is up for every address
    } else {
      socklen_t len = sizeof error;
      if (::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
    }
    if (error != 0) {
      connect_error = "cannot connect: " + std::string{std::strerror(error)};
      continue;
    }
    sock = std::move(s);
  }
  ::freeaddrinfo(found);
  if (!sock) throw bad(connect_error);
  const int fd = sock.get();

  const std::string request = "GET " + target + " HTTP/1.1\r\nHost: " + authority +
                              "\r\nUser-Agent: mgm\r\nAccept: application/json\r\nConnection: close\r\n\r\n";
  const auto send_deadline = std::chrono::steady_clock::now() + timeout;
  for (std::size_t sent = 0; sent < request.size();) {
    if (!wait_for(fd, POLLOUT, send_deadline)) throw bad("could not send the request " + within);
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) throw bad(std::string{"cannot send the request: "} + std::strerror(errno));
    sent += static_cast<std::size_t>(n);
  }

  // The answer, whole within the timeout: complete at its length, at its last chunk or at the
  // server's close (one that keeps the connection open is not waited for).
  std::string answer;
  std::size_t head_end = std::string::npos;
  http_reply reply;
  bool chunked = false;
  std::optional<std::size_t> length;
  const auto parse_head = [&] {
    if (answer.rfind("HTTP/1.", 0) != 0) throw bad("the answer is not HTTP");
    const std::size_t sp = answer.find(' ');
    if (sp == std::string::npos || sp + 4 > head_end || std::isdigit(static_cast<unsigned char>(answer[sp + 1])) == 0 ||
        std::isdigit(static_cast<unsigned char>(answer[sp + 2])) == 0 ||
        std::isdigit(static_cast<unsigned char>(answer[sp + 3])) == 0) {
      throw bad("the answer has no status");
    }
    reply.status = std::stoi(answer.substr(sp + 1, 3));
    for (std::size_t at = answer.find("\r\n") + 2; at < head_end;) {
      const std::size_t eol = answer.find("\r\n", at);
      const std::string line = answer.substr(at, eol - at);
      at = eol + 2;
      const std::size_t c = line.find(':');
      if (c == std::string::npos) continue;
      const std::string name = mgm::detail::ascii_lower(line.substr(0, c));
      const std::string value{mgm::detail::trim_blanks(std::string_view{line}.substr(c + 1))};
      if (name == "transfer-encoding" && mgm::detail::ascii_lower(value).find("chunked") != std::string::npos) chunked = true;
      if (name == "content-length") {
        if (value.empty() || value.size() > 12 || value.find_first_not_of("0123456789") != std::string::npos) {
          throw bad("the answer's Content-Length is not a size");
        }
        length = static_cast<std::size_t>(std::stoull(value));
      }
    }
  };
  // Whether the body has all its bytes: its length, or its last chunk (then decoded into reply).
  bool whole = false;
  const auto check_whole = [&] {
    const std::string_view body = std::string_view{answer}.substr(head_end + 4);
    if (chunked) {
      // Only where the bytes end as the last chunk does ("0\r\n...\r\n\r\n") is decoding worth trying.
      if (body.size() < 5 || body.substr(body.size() - 4) != "\r\n\r\n") return;
      reply.body.clear();
      whole = unchunk(body, reply.body);
    } else if (length) {
      whole = body.size() >= *length;
    }
  };
  char buffer[16384];
  const auto answer_deadline = std::chrono::steady_clock::now() + timeout;
  while (!whole) {
    if (!wait_for(fd, POLLIN, answer_deadline)) {
      throw bad(answer.empty() ? "no answer " + within : "the answer did not arrive whole " + within);
    }
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) throw bad(std::string{"cannot read the answer: "} + std::strerror(errno));
    if (n == 0) break;
    answer.append(buffer, static_cast<std::size_t>(n));
    if (answer.size() > max_answer_bytes + 65536) throw bad("the answer is over 256 MiB");
    if (head_end == std::string::npos) {
      head_end = answer.find("\r\n\r\n");
      if (head_end == std::string::npos) continue;
      parse_head();
    }
    check_whole();
  }
  if (head_end == std::string::npos) {
    throw bad(answer.empty() ? "the server closed the connection without an answer" : "the answer is not HTTP");
  }
  const std::string_view body = std::string_view{answer}.substr(head_end + 4);
  if (chunked) {
    if (!whole) throw bad("the answer's chunks are malformed or cut short");
  } else if (length) {
    if (!whole) throw bad("the answer was cut short");
    reply.body = body.substr(0, *length);
  } else {
    reply.body = body;  // to the server's close
  }
  if (reply.body.size() > max_answer_bytes) throw bad("the answer is over 256 MiB");
  return reply;
}

}  // namespace mgm::telemetry::detail
