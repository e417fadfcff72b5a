/// @file
/// @brief Prometheus as a telemetry source: every GPU of a cluster, as the exporters it scrapes
/// report them (`mgm serve`'s `mgm_gpu_memory_free_bytes`, else dcgm-exporter's
/// `DCGM_FI_DEV_FB_FREE`), read through its HTTP API. What `mgm plan --prometheus` reads, for a
/// program's own `rebalance_driver` (`rebalance_driver::from_source`).
///
/// ## Contract
/// - One instant query per reading (two where the first finds no series); connecting, sending
///   and the whole answer of each request each within `timeout_s`; http:// only.
/// - A sample per GPU, or per MIG GPU instance (its compute instances share its memory and count
///   once; a GPU in MIG mode is listed through its instances only). Ordered by node, then GPU
///   index, then GPU instance. Each carries `node`, `index` (the `gpu` label), `uuid`, `name`,
///   `mig` and `memory_free`; the other metrics are empty, with a `missing` note.
/// - An unreachable server, an error answer, a series without the node's label or a GPU index, a
///   value that is not a size, or one GPU in two series: `prometheus_error`, naming the server.
///
/// **Thread safety:** a source may be used by one thread at a time; separate sources are
/// independent.
#pragma once

#include <mgm/telemetry/source.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace mgm::telemetry {

struct prometheus_options {
  std::string url;                     ///< the server's base URL, `http://HOST:PORT[/prefix]`
  std::string selector;                ///< label matchers in braces (`{job="gpu"}`); empty: every series
  std::string node_label{"instance"};  ///< the label that names a GPU's node
  double timeout_s{10.0};              ///< for each of a request's steps (see the contract)
};

/// @brief Prometheus could not be read, or what it holds cannot be planned over.
class prometheus_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @brief One reading of the cluster.
struct prometheus_reading {
  std::string series;                  ///< the query that answered: `mgm_gpu_memory_free_bytes{...}`
  std::vector<device_sample> gpus;     ///< in the contract's order
};

/// @brief Every GPU's free memory now. @throws prometheus_error (see the contract); also for a
/// selector not in braces.
[[nodiscard]] prometheus_reading read_prometheus(const prometheus_options& options);

/// @brief A source over `read_prometheus`; `name()` is `prometheus:<url>`. @throws
/// prometheus_error for a selector not in braces (the server is asked only when sampled).
[[nodiscard]] std::unique_ptr<source> make_prometheus_source(prometheus_options options);

}  // namespace mgm::telemetry
