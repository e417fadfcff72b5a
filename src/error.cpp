#include <mgm/bytes.hpp>
#include <mgm/error.hpp>

#include "detail/fmt.hpp"

#include <string>

namespace mgm {

parse_error parse_error::at(std::string_view source, std::size_t line, std::size_t column, std::string_view why) {
  std::string message{source};
  message += ", line " + std::to_string(line);
  if (column > 0) message += ", column " + std::to_string(column);
  message += ": ";
  message += why;
  return parse_error{message, line, column};
}

}  // namespace mgm

namespace mgm::detail {

namespace {
std::string where(const char* file, int line) { return std::string{" at "} + file + ":" + std::to_string(line); }
}  // namespace

void throw_logic_error(const char* what, const char* file, int line) { throw logic_error{what + where(file, line)}; }
void throw_logic_error(const std::string& what, const char* file, int line) { throw logic_error{what + where(file, line)}; }

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear the per-thread error state so the next check starts clean
  throw cuda_error{status, std::string{call} + " failed: " + cudaGetErrorName(status) + " (" +
                               cudaGetErrorString(status) + ")" + where(file, line)};
}

void throw_cuda_alloc_error(cudaError_t status, const char* call, std::size_t bytes, const char* file, int line) {
  (void)cudaGetLastError();
  if (status == cudaErrorMemoryAllocation) {
    int device = -1;
    (void)cudaGetDevice(&device);
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    std::string state;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      state = "; the device has " + format_bytes(free_bytes) + " free of " + format_bytes(total_bytes);
    } else {
      (void)cudaGetLastError();
    }
    throw out_of_memory{"device " + std::to_string(device) + ": out of memory allocating " + describe_bytes(bytes) +
                            " (" + call + ")" + state + where(file, line),
                        bytes};
  }
  throw_cuda_error(status, call, file, line);
}

void throw_bad_alignment(std::size_t alignment, std::size_t max_alignment, const char* who) {
  throw logic_error{std::string{who} + ": alignment " + std::to_string(alignment) +
                    (alignment == 0 || (alignment & (alignment - 1)) != 0
                         ? " is not a power of two"
                         : " exceeds the largest supported, " + std::to_string(max_alignment))};
}

std::string hex(std::uintptr_t v) { return fmt::format("0x{:x}", v); }

std::string describe_address(const void* p) { return p == nullptr ? std::string{"(nil)"} : fmt::format("{}", fmt::ptr(p)); }

std::string describe_bytes(std::size_t bytes) {
  return bytes < 1024 ? std::to_string(bytes) + " bytes" : format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace mgm::detail
