// HTTP for the tool (see http.hpp): `mgm serve`'s server and a GET with a deadline, on Boost.Asio
// and Boost.Beast, one io thread.
// Everything a connection owns lives in its `session`; the server's state is touched on the io
// thread only, so it needs no lock.
#include "http.hpp"

#include "mgm_tool.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <exception>
#include <optional>
#include <set>

namespace mgm_tool {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// `HOST:PORT`, `[V6]:PORT` or `:PORT` (every interface).
tcp::endpoint parse_listen(const std::string& listen) {
  const auto bad = [&](const std::string& why) {
    return tool_error{exit_bad_input, "--listen " + listen + ": " + why + " (give HOST:PORT, such as 127.0.0.1:19400 or :19400)"};
  };
  const std::size_t colon = listen.rfind(':');
  if (colon == std::string::npos) throw bad("no port");
  std::string host = listen.substr(0, colon);
  const std::string port_text = listen.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port_text) > 65535) {
    throw bad("the port must be a number from 0 to 65535");
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  if (host == "localhost") host = "127.0.0.1";
  beast::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) throw bad("'" + host + "' is not an IP address");
  return {address, static_cast<unsigned short>(std::stoul(port_text))};
}

}  // namespace

struct http_server::impl {
  struct session;  // one connection

  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::signal_set signals{io};
  asio::steady_timer retry{io};
  asio::steady_timer deadline{io};
  http_handler handler;
  http_limits limits;
  std::set<session*> sessions;
  bool stopping{false};
  std::atomic<std::uint64_t> requests{0};

  impl() = default;
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;
  ~impl();
  void accept();
  void shutdown();
};

namespace {

std::string endpoint_text(const tcp::endpoint& e) {
  const auto a = e.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(e.port());
}

}  // namespace

struct http_server::impl::session : std::enable_shared_from_this<session> {
  session(tcp::socket socket, http_server::impl& owner) : stream{std::move(socket)}, server{owner} {
    server.sessions.insert(this);
  }
  ~session() {
    server.sessions.erase(this);
    if (server.stopping && server.sessions.empty()) server.deadline.cancel();  // the last one has gone
  }
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  beast::tcp_stream stream;
  http_server::impl& server;
  beast::flat_buffer buffer;
  std::optional<http::request_parser<http::empty_body>> parser;
  http::response<http::string_body> response;
  bool busy{false};  // between a request read and its answer written

  void read() {
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(server.limits.max_header_bytes));
    stream.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>{server.limits.idle_timeout_s}));
    http::async_read(stream, buffer, *parser,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::header_limit) return answer_and_close(http::status::request_header_fields_too_large);
    if (ec == http::error::unexpected_body) return answer_and_close(http::status::payload_too_large);
    if (ec) return close();  // the client left, went idle too long, or sent something not HTTP
    const auto& request = parser->get();
    response = {};
    response.version(request.version());
    response.set(http::field::server, "mgm");
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      response.result(http::status::method_not_allowed);
      response.set(http::field::allow, "GET, HEAD");
      response.set(http::field::content_type, "text/plain; charset=utf-8");
      response.body() = "only GET and HEAD are served\n";
    } else {
      http_response r;
      try {
        r = server.handler(std::string_view{request.method_string().data(), request.method_string().size()},
                           std::string_view{request.target().data(), request.target().size()});
      } catch (const std::exception& e) {
        r = {500, "text/plain; charset=utf-8", std::string{"internal error: "} + e.what() + "\n"};
      }
      response.result(static_cast<unsigned>(r.status));
      response.set(http::field::content_type, r.content_type);
      response.body() = std::move(r.body);
    }
    const bool head = request.method() == http::verb::head;
    response.keep_alive(request.keep_alive() && !server.stopping);
    response.prepare_payload();
    if (head) response.body().clear();  // the header keeps the GET answer's length
    write();
  }

  void answer_and_close(http::status status) {
    response = {};
    response.result(status);
    response.set(http::field::server, "mgm");
    response.keep_alive(false);
    response.prepare_payload();
    write();
  }

  void write() {
    busy = true;
    // The answer gets a deadline of its own, not what was left of the request's.
    stream.expires_after(std::chrono::seconds{10});
    http::async_write(stream, response,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_write(ec); });
  }

  void on_write(beast::error_code ec) {
    busy = false;
    if (!ec && response.result() == http::status::ok) server.requests.fetch_add(1, std::memory_order_relaxed);
    if (ec || !response.keep_alive() || server.stopping) return close();
    read();
  }

  void close() {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
  }
};

void http_server::impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (stopping) return;
    if (ec) {
      // Out of descriptors, or a connection reset before it was taken: try again shortly rather
      // than spin.
      retry.expires_after(std::chrono::milliseconds{100});
      retry.async_wait([this](beast::error_code) {
        if (!stopping) accept();
      });
      return;
    }
    bool room = sessions.size() < limits.max_connections;
    // Full: an idle keep-alive connection makes room (its client reconnects; it leaves the set
    // when its read completes); with every one busy, the new one is refused.
    for (auto* s : sessions) {
      if (room) break;
      if (!s->busy && s->stream.socket().is_open()) {
        beast::error_code ignored;
        s->stream.socket().close(ignored);
        room = true;
      }
    }
    if (room) {
      std::make_shared<session>(std::move(socket), *this)->read();
    } else {
      beast::error_code ignored;
      socket.close(ignored);
    }
    accept();
  });
}

void http_server::impl::shutdown() {
  if (stopping) return;
  stopping = true;
  beast::error_code ignored;
  acceptor.close(ignored);
  signals.cancel(ignored);
  signals.clear(ignored);  // a second SIGTERM (or Ctrl-C) ends the process as usual
  retry.cancel();
  // Idle connections go now; an answer being written finishes first (then its session closes).
  for (auto* s : std::set<session*>{sessions}) {
    if (!s->busy) s->stream.socket().close(ignored);
  }
  deadline.expires_after(std::chrono::seconds{2});
  deadline.async_wait([this](beast::error_code ec) {
    if (!ec) io.stop();
  });
  if (sessions.empty()) deadline.cancel();
}

// The operations still pending hold their sessions, which use this object: they are completed
// (cancelled) while it is whole, not left to the io_context's destructor, which runs last.
http_server::impl::~impl() {
  stopping = true;
  beast::error_code ignored;
  acceptor.close(ignored);
  signals.cancel(ignored);
  retry.cancel();
  deadline.cancel();
  for (auto* s : std::set<session*>{sessions}) s->stream.socket().close(ignored);
  io.restart();
  io.run();
}

http_server::http_server(const std::string& listen, http_handler handler, http_limits limits)
    : impl_{std::make_unique<impl>()} {
  impl_->handler = std::move(handler);
  impl_->limits = limits;
  const auto endpoint = parse_listen(listen);
  beast::error_code ec;
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (ec == asio::error::address_in_use) {
    throw tool_error{exit_bad_input, "cannot listen on " + endpoint_text(endpoint) +
                                         ": the port is already in use (choose another with --listen HOST:PORT)"};
  }
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw tool_error{exit_bad_input, "cannot listen on " + endpoint_text(endpoint) + ": " + ec.message()};
}

http_server::~http_server() = default;

std::string http_server::address() const {
  beast::error_code ec;
  const auto e = impl_->acceptor.local_endpoint(ec);
  return ec ? std::string{"?"} : endpoint_text(e);
}

void http_server::run() {
  beast::error_code ec;
  impl_->signals.add(SIGINT, ec);
  impl_->signals.add(SIGTERM, ec);
  impl_->signals.async_wait([this](beast::error_code e, int) {
    if (!e) impl_->shutdown();
  });
  impl_->accept();
  impl_->io.run();
}

void http_server::stop() {
  asio::post(impl_->io, [p = impl_.get()] { p->shutdown(); });
}

std::uint64_t http_server::requests() const noexcept { return impl_->requests.load(std::memory_order_relaxed); }

}  // namespace mgm_tool
