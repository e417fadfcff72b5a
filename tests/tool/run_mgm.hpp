// Running the `mgm` binary from a test: its exit code, stdout and stderr.
#pragma once

#include "shared_data.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace mgm_tool_test {

namespace fs = std::filesystem;

struct result {
  int rc{-1};
  std::string out;
  std::string err;
};

inline fs::path scratch() {
  auto d = fs::temp_directory_path() / ("mgm_tool_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

using mgm_test::slurp;

// Runs `mgm ARGS` through the shell (arguments are quoted by the caller where needed), with
// `env` prepended (VAR=value ...) and NVML pointed nowhere unless `env` says otherwise; `launcher`
// (such as `timeout -s INT 1`) runs mgm.
inline result run_mgm(const std::string& args, const std::string& env = "", const std::string& launcher = "") {
  const auto dir = scratch();
  const auto out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = "env MGM_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 " + env + " " + launcher + " '" + MGM_TOOL + "' " + args +
                          " >'" + out.string() + "' 2>'" + err.string() + "' </dev/null";
  const int status = std::system(cmd.c_str());
  result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

#ifdef MGM_FAKE_NVML_CURRENT
// The environment that points mgm at the fake NVML, answering from `config_json` (written to the
// scratch folder as `name`).
inline std::string fake_nvml_env(const std::string& config_json, const std::string& name = "nvml.json") {
  const auto cfg = scratch() / name;
  std::ofstream{cfg} << config_json;
  return "MGM_NVML_LIBRARY='" + std::string{MGM_FAKE_NVML_CURRENT} + "' MGM_FAKE_NVML_CONFIG='" + cfg.string() + "'";
}
#endif

inline std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

}  // namespace mgm_tool_test
