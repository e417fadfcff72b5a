// Prometheus as a telemetry source, over loopback HTTP peers that answer what a test needs: the
// API's JSON, sized or chunked, and the failures a real server or network can give (an error
// answer, a body cut short, silence). The real Prometheus is in tests/cluster/prometheus_test.py.
#include <mgm/partition/rebalance_driver.hpp>
#include <mgm/telemetry/prometheus_source.hpp>
#include <mgm/unique_fd.hpp>

#include <catch2/catch.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace tel = mgm::telemetry;

namespace {

// A TCP socket bound to a port of 127.0.0.1 the system picked, and that port.
std::pair<mgm::unique_fd, int> bound_loopback() {
  mgm::unique_fd fd{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  REQUIRE(fd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return {std::move(fd), ntohs(a.sin_port)};
}

// Answers each of its connections, in turn, with the next of `answers` (raw bytes; an empty one
// keeps the connection open and silent until the peer leaves; one after `keep_open` stays open
// after it is sent, until the peer leaves). It keeps each request's head.
class http_peer {
 public:
  explicit http_peer(std::vector<std::string> answers) : answers_{std::move(answers)} {
    std::tie(fd_, port_) = bound_loopback();
    REQUIRE(::listen(fd_.get(), 8) == 0);
    thread_ = std::thread{[this] { serve(); }};
  }
  ~http_peer() {
    ::shutdown(fd_.get(), SHUT_RDWR);  // ends a pending accept
    thread_.join();
  }
  http_peer(const http_peer&) = delete;
  http_peer& operator=(const http_peer&) = delete;

  static inline const std::string keep_open = "\x01keep-open\x01";

  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  [[nodiscard]] std::vector<std::string> requests() const {
    const std::lock_guard lock{mutex_};
    return requests_;
  }

 private:
  void serve() {
    for (const auto& answer : answers_) {
      const int c = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string head;
      char buf[4096];
      while (head.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        head.append(buf, static_cast<std::size_t>(n));
      }
      {
        const std::lock_guard lock{mutex_};
        requests_.push_back(head);
      }
      const bool keep = answer.rfind(keep_open, 0) == 0;
      const std::string bytes = keep ? answer.substr(keep_open.size()) : answer;
      for (std::size_t sent = 0; sent < bytes.size();) {
        const ssize_t n = ::send(c, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<std::size_t>(n);
      }
      if (keep || bytes.empty()) {
        while (::recv(c, buf, sizeof buf, 0) > 0) {  // until the client leaves
        }
      }
      ::close(c);
    }
  }

  std::vector<std::string> answers_;
  mgm::unique_fd fd_;
  int port_{0};
  std::thread thread_;
  mutable std::mutex mutex_;
  std::vector<std::string> requests_;
};

std::string sized(const std::string& body, int status = 200) {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// `body` in chunks of `step` bytes, with a chunk extension on the first.
std::string chunked(const std::string& body, std::size_t step) {
  std::string out = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
  char size[32];
  for (std::size_t at = 0; at < body.size(); at += step) {
    const std::string part = body.substr(at, step);
    std::snprintf(size, sizeof size, "%zx%s\r\n", part.size(), at == 0 ? ";note=first" : "");
    out += size + part + "\r\n";
  }
  return out + "0\r\n\r\n";
}

std::string vector_of(const std::string& series) {
  return R"({"status":"success","data":{"resultType":"vector","result":[)" + series + "]}}";
}
const std::string empty_vector = vector_of("");

// Two nodes. b has a GPU in MIG mode: its whole-GPU series goes, its two compute instances of GPU
// instance 1 count once, and dcgm's GPU UUID on an instance is not the instance's.
const std::string cluster = vector_of(
    R"({"metric":{"node":"b","gpu":"1","uuid":"GPU-b1","model_name":"H100"},"value":[1,"1000"]},)"
    R"({"metric":{"node":"a","gpu":"0","uuid":"GPU-a0","model_name":"A100"},"value":[1,"4000"]},)"
    R"({"metric":{"node":"b","gpu":"0","uuid":"GPU-b0"},"value":[1,"9000"]},)"
    R"({"metric":{"node":"b","gpu":"0","gpu_instance_id":"1","compute_instance_id":"0","uuid":"MIG-x","mig_profile":"3g.40gb"},"value":[1,"3000"]},)"
    R"({"metric":{"node":"b","gpu":"0","gpu_instance_id":"1","compute_instance_id":"1","uuid":"MIG-x"},"value":[1,"3000"]},)"
    R"({"metric":{"node":"b","gpu":"0","gpu_instance_id":"2","uuid":"GPU-b0"},"value":[1,"2000"]})");

void check_cluster(const std::vector<tel::device_sample>& gpus) {
  REQUIRE(gpus.size() == 4);
  CHECK(gpus[0].node == "a");
  CHECK(gpus[0].index == 0);
  CHECK(gpus[0].name == "A100");
  CHECK(gpus[0].memory_free == 4000U);
  CHECK(gpus[1].node == "b");
  REQUIRE(gpus[1].mig);
  CHECK(gpus[1].mig->gpu_instance_id == 1U);
  CHECK(gpus[1].mig->profile == "3g.40gb");
  CHECK(gpus[1].uuid == "MIG-x");
  CHECK(gpus[1].memory_free == 3000U);
  REQUIRE(gpus[2].mig);
  CHECK(gpus[2].mig->gpu_instance_id == 2U);
  CHECK(gpus[2].uuid.empty());  // GPU-b0 is the GPU's, not the instance's
  CHECK(gpus[2].key() == "b/0/2/0");
  CHECK(gpus[3].index == 1);
  CHECK(gpus[3].key() == "GPU-b1");
  for (const auto& g : gpus) CHECK_FALSE(g.memory_total.has_value());
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const tel::prometheus_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("prometheus source: a cluster's GPUs by node and index with MIG instances once each", "[telemetry][prometheus]") {
  http_peer peer{{sized(cluster)}};
  const auto r = tel::read_prometheus({peer.url() + "/", R"({job="mgm"})", "node", 5.0});
  CHECK(r.series == R"(mgm_gpu_memory_free_bytes{job="mgm"})");
  check_cluster(r.gpus);
  const auto asked = peer.requests();
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].rfind("GET /api/v1/query?query=mgm_gpu_memory_free_bytes%7Bjob%3D%22mgm%22%7D HTTP/1.1\r\n", 0) == 0);
  CHECK(asked[0].find("\r\nHost: 127.0.0.1:") != std::string::npos);
}

TEST_CASE("prometheus source: a chunked answer reads as a sized one", "[telemetry][prometheus]") {
  for (const std::size_t step : {std::size_t{1}, std::size_t{7}, std::size_t{4096}}) {
    http_peer peer{{chunked(cluster, step)}};
    check_cluster(tel::read_prometheus({peer.url(), "", "node", 5.0}).gpus);
  }
}

TEST_CASE("prometheus source: an answer is complete at its length or last chunk even where the server keeps the "
          "connection open", "[telemetry][prometheus]") {
  const std::string spaced = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(cluster.size()) + " \t\r\n\r\n" + cluster;
  http_peer peer{{http_peer::keep_open + sized(cluster), http_peer::keep_open + chunked(cluster, 100),
                  http_peer::keep_open + spaced}};
  for (int i = 0; i < 3; ++i) check_cluster(tel::read_prometheus({peer.url(), "", "node", 2.0}).gpus);
}

TEST_CASE("prometheus source: dcgm-exporter's series in MiB where no mgm series exists", "[telemetry][prometheus]") {
  http_peer peer{{sized(empty_vector),
                  sized(vector_of(R"({"metric":{"instance":"n1:9400","gpu":"0","UUID":"GPU-1","modelName":"L4"},"value":[1,"2"]})"))}};
  const auto r = tel::read_prometheus({peer.url(), "", "instance", 5.0});
  CHECK(r.series == "DCGM_FI_DEV_FB_FREE");
  REQUIRE(r.gpus.size() == 1);
  CHECK(r.gpus[0].memory_free == 2U << 20);
  CHECK(r.gpus[0].uuid == "GPU-1");
  CHECK(r.gpus[0].name == "L4");
  CHECK(r.gpus[0].node == "n1:9400");
  CHECK(peer.requests().size() == 2);
}

TEST_CASE("prometheus source: what cannot be read or planned over is an error naming the server", "[telemetry][prometheus]") {
  const auto read = [](const std::string& answer, const std::string& node_label = "node") {
    http_peer peer{{answer}};
    const auto url = peer.url();
    const auto e = error_of([&] { (void)tel::read_prometheus({url, "", node_label, 5.0}); });
    CHECK(e.find(url) != std::string::npos);
    return e;
  };
  CHECK(read(sized(R"({"status":"error","errorType":"bad_data","error":"parse error at char 3"})", 400))
            .find("answered 400 to mgm_gpu_memory_free_bytes: parse error at char 3") != std::string::npos);
  CHECK(read(sized("<html>proxy</html>", 502)).find("is this Prometheus?") != std::string::npos);
  // Another server's JSON, its fields of other types: an error of ours, not the JSON library's.
  CHECK(read(sized(R"({"status":404,"error":"Not Found"})", 404)).find("answered 404 to mgm_gpu_memory_free_bytes: Not Found") !=
        std::string::npos);
  CHECK(read(sized(R"({"status":"success","data":{"resultType":7,"result":[]}})")).find("not an instant vector") !=
        std::string::npos);
  CHECK(read(sized(vector_of(R"({"metric":{"node":"a","gpu":0},"value":[1,"1"]})"))).find("has no GPU index") !=
        std::string::npos);
  CHECK(read(sized(vector_of(R"({"metric":{"node":"a","gpu":"0"},"value":[1,1]})"))).find("not a size") !=
        std::string::npos);
  CHECK(read(sized(R"({"status":"success","data":{"resultType":"matrix","result":[]}})")).find("not an instant vector") !=
        std::string::npos);
  CHECK(read(sized(cluster).substr(0, 200)).find("cut short") != std::string::npos);
  CHECK(read(chunked(cluster, 64).substr(0, 150)).find("chunks are malformed or cut short") != std::string::npos);
  CHECK(read("SSH-2.0-OpenSSH\r\n\r\n").find("not HTTP") != std::string::npos);
  CHECK(read(sized(cluster), "rack").find("has no label 'rack'") != std::string::npos);
  CHECK(read(sized(vector_of(R"({"metric":{"node":"a"},"value":[1,"1"]})"))).find("has no GPU index") != std::string::npos);
  CHECK(read(sized(vector_of(R"({"metric":{"node":"a","gpu":"0"},"value":[1,"-5"]})"))).find("not a size") !=
        std::string::npos);
  CHECK(read(sized(vector_of(R"({"metric":{"node":"a","gpu":"0"},"value":[1,"NaN"]})"))).find("not a size") !=
        std::string::npos);
  CHECK(read(sized(vector_of(R"({"metric":{"node":"a","gpu":"0","job":"x"},"value":[1,"1"]},)"
                             R"({"metric":{"node":"a","gpu":"0","job":"y"},"value":[1,"1"]})")))
            .find("appears in more than one series") != std::string::npos);
  {
    http_peer peer{{sized(empty_vector), sized(empty_vector)}};
    CHECK(error_of([&] { (void)tel::read_prometheus({peer.url(), "", "node", 5.0}); }).find("holds no GPU series") !=
          std::string::npos);
  }
}

TEST_CASE("prometheus source: no server, a silent one, and URLs it cannot use", "[telemetry][prometheus]") {
  {
    const auto [closed, port] = bound_loopback();  // bound, never listening: refuses
    const std::string down = "http://127.0.0.1:" + std::to_string(port);
    CHECK(error_of([&] { (void)tel::read_prometheus({down, "", "node", 5.0}); })
              .find("cannot reach Prometheus at " + down + ": cannot connect: Connection refused") != std::string::npos);
  }

  http_peer silent{{std::string{}}};
  const auto began = std::chrono::steady_clock::now();
  CHECK(error_of([&] { (void)tel::read_prometheus({silent.url(), "", "node", 0.3}); }).find("no answer within 0.3 s") !=
        std::string::npos);
  CHECK(std::chrono::steady_clock::now() - began < std::chrono::seconds{20});

  CHECK(error_of([] { (void)tel::read_prometheus({"https://p:9090", "", "node", 1.0}); }).find("https is not supported") !=
        std::string::npos);
  CHECK(error_of([] { (void)tel::read_prometheus({"p:9090", "", "node", 1.0}); }).find("not an http:// URL") !=
        std::string::npos);
  CHECK(error_of([] { (void)tel::read_prometheus({"http://p:90x0", "", "node", 1.0}); }).find("the port is not a number") !=
        std::string::npos);
  CHECK(error_of([] { (void)tel::make_prometheus_source({"http://p:9090", "job=\"x\"", "node", 1.0}); })
            .find("give label matchers in braces") != std::string::npos);
}

TEST_CASE("prometheus source: a rebalance driver's readings, joined to the GPUs by node", "[telemetry][prometheus]") {
  // Two nodes whose GPUs have no UUID and the same index and name: only the node tells them apart.
  const std::string first = vector_of(R"({"metric":{"node":"a","gpu":"0","model_name":"L4"},"value":[1,"100"]},)"
                                      R"({"metric":{"node":"b","gpu":"0","model_name":"L4"},"value":[1,"200"]})");
  const std::string later = vector_of(R"({"metric":{"node":"b","gpu":"0","model_name":"L4"},"value":[1,"250"]})");
  http_peer peer{{sized(first), sized(later), sized(later), sized(later), sized(first)}};
  std::shared_ptr<tel::source> src = tel::make_prometheus_source({peer.url(), "", "node", 5.0});
  CHECK(src->name() == "prometheus:" + peer.url());
  const auto gpus = src->sample();
  REQUIRE(gpus.size() == 2);
  const std::vector<std::string> keys{gpus[0].key(), gpus[1].key()};
  CHECK(keys == std::vector<std::string>{"a/0:L4", "b/0:L4"});
  // A GPU missing from a scrape is lost at its third reading in a row, not at its first.
  mgm::reading_options options;
  options.misses_before_lost = 3;
  auto read = mgm::rebalance_driver::from_source(src, 2, keys, options);
  for (int turn = 1; turn <= 3; ++turn) {
    const auto readings = read();  // node a's series is gone
    REQUIRE(readings.size() == 2);
    CHECK(readings[0].present == (turn < 3));
    CHECK_FALSE(readings[0].free_bytes.has_value());  // no reading: its last one stands
    CHECK(readings[1].present);
    CHECK(readings[1].free_bytes == std::optional<std::size_t>{250});
  }
  const auto back = read();
  CHECK(back[0].present);
  CHECK(back[0].free_bytes == std::optional<std::size_t>{100});
  CHECK_THROWS(mgm::rebalance_driver::from_source(src, 2, keys, mgm::reading_options{true, 0}));
}

namespace {

// A source that plays back the batches a test gives it, as NVML would report them.
class scripted_source final : public tel::source {
 public:
  explicit scripted_source(std::vector<std::vector<tel::device_sample>> batches) : batches_{std::move(batches)} {}
  [[nodiscard]] std::string name() const override { return "scripted"; }
  [[nodiscard]] std::vector<tel::device_sample> sample() override { return batches_.at(next_++); }

 private:
  std::vector<std::vector<tel::device_sample>> batches_;
  std::size_t next_{0};
};

tel::device_sample gpu(int index, std::uint64_t free, bool lost = false) {
  tel::device_sample s;
  s.index = index;
  s.cuda_ordinal = index;
  s.lost = lost;
  if (!lost) s.memory_free = free;
  return s;
}

}  // namespace

TEST_CASE("from_source: a GPU its source reports lost is lost at once and while it stays away", "[telemetry][prometheus]") {
  auto src = std::make_shared<scripted_source>(std::vector<std::vector<tel::device_sample>>{
      {gpu(0, 10), gpu(1, 0, true)}, {gpu(0, 10)}, {gpu(0, 10)}, {gpu(0, 10), gpu(1, 20)}, {gpu(0, 10)}});
  mgm::reading_options options;
  options.misses_before_lost = 3;
  auto read = mgm::rebalance_driver::from_source(src, 2, {}, options);
  CHECK_FALSE(read()[1].present);  // reported lost
  CHECK_FALSE(read()[1].present);  // then missing: still lost, not "back" with an old figure
  CHECK_FALSE(read()[1].present);
  const auto back = read();
  CHECK(back[1].present);
  CHECK(back[1].free_bytes == std::optional<std::size_t>{20});
  const auto gone = read();  // missing once after a reading: no reading, not lost
  CHECK(gone[1].present);
  CHECK_FALSE(gone[1].free_bytes.has_value());
}
