/// @file
/// @brief The exception hierarchy of MultiGpuMem and the `MGM_` checking macros.
///
/// Hierarchy (as RMM's `rmm/error.hpp`):
/// - `mgm::logic_error`   : a precondition was broken (bad alignment, a device out of range, a
///                          malformed option). The object that threw is unchanged and usable.
///   - `mgm::parse_error` : text that does not parse; names the line and column.
/// - `mgm::cuda_error`    : a CUDA call failed; carries the `cudaError_t`.
/// - `mgm::nvml_error`    : an NVML call failed; carries NVML's return code.
/// - `mgm::bad_alloc`     : an allocation failed for a reason other than memory running out.
/// - `mgm::out_of_memory` : memory really ran out (`cudaErrorMemoryAllocation`, a sim device full).
///
/// Every macro adds `file:line` to the message; the CUDA ones also clear CUDA's per-thread
/// last-error state so that a failed call does not poison the next `cudaGetLastError()`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mgm {

/// @brief A broken precondition. Thrown before any state changes.
class logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// @brief Text that does not parse: a size, a device list, a topology, a log. The message and
/// `line()` / `column()` (1-based; 0 when not applicable) name where.
class parse_error : public logic_error {
 public:
  parse_error(const std::string& message, std::size_t line, std::size_t column)
      : logic_error{message}, line_{line}, column_{column} {}
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  [[nodiscard]] std::size_t column() const noexcept { return column_; }

  /// @brief The error every reader throws: "`source`, line L, column C: `why`" (the column left
  /// out when 0).
  [[nodiscard]] static parse_error at(std::string_view source, std::size_t line, std::size_t column, std::string_view why);

 private:
  std::size_t line_;
  std::size_t column_;
};

/// @brief A failed CUDA runtime or driver call.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(cudaError_t code, const std::string& message) : std::runtime_error{message}, code_{code} {}
  /// @brief The CUDA status that caused the error.
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

/// @brief A failed NVML call; `code()` is NVML's `nvmlReturn_t` as an int (no NVML header needed).
class nvml_error : public std::runtime_error {
 public:
  nvml_error(int code, const std::string& message) : std::runtime_error{message}, code_{code} {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

/// @brief An allocation that failed; `std::bad_alloc` with a message.
class bad_alloc : public std::bad_alloc {
 public:
  explicit bad_alloc(std::string message) : message_{std::move(message)} {}
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

/// @brief Memory really ran out. `requested_bytes()` is the size of the request that failed.
class out_of_memory : public bad_alloc {
 public:
  out_of_memory(std::string message, std::size_t requested_bytes)
      : bad_alloc{std::move(message)}, requested_bytes_{requested_bytes} {}
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  std::size_t requested_bytes_;
};

namespace detail {
/// Cold paths, kept out of line so the macros expand to one compare and one call.
[[noreturn]] void throw_logic_error(const char* what, const char* file, int line);
[[noreturn]] void throw_logic_error(const std::string& what, const char* file, int line);
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cuda_alloc_error(cudaError_t status, const char* call, std::size_t bytes,
                                         const char* file, int line);
/// "1.50 GiB (1610612736 bytes)": the form every message of the library uses for sizes.
[[nodiscard]] std::string describe_bytes(std::size_t bytes);
/// "0x7f3a5c000000" ("(nil)" for null, as printf's "%p" writes them): the form messages use for
/// addresses. (Defined in src/error.cpp: the formatting library is not a public dependency.)
[[nodiscard]] std::string describe_address(const void* p);
/// "0x7f3a5c000000", and "0x0" for zero: addresses and handles in messages and documents.
[[nodiscard]] std::string hex(std::uintptr_t v);
}  // namespace detail

}  // namespace mgm

/// @brief Throws `mgm::logic_error` with `message` and `file:line` unless `condition` holds.
#define MGM_EXPECTS(condition, message)                                     \
  do {                                                                      \
    if (!(condition)) [[unlikely]] {                                        \
      ::mgm::detail::throw_logic_error((message), __FILE__, __LINE__);      \
    }                                                                       \
  } while (false)

/// @brief Throws `mgm::logic_error` with `message` and `file:line`.
#define MGM_FAIL(message) ::mgm::detail::throw_logic_error((message), __FILE__, __LINE__)

/// @brief Runs a CUDA call; on failure clears the sticky last error and throws `mgm::cuda_error`.
#define MGM_CUDA_TRY(call)                                                      \
  do {                                                                          \
    const cudaError_t mgm_status_ = (call);                                     \
    if (mgm_status_ != cudaSuccess) [[unlikely]] {                              \
      ::mgm::detail::throw_cuda_error(mgm_status_, #call, __FILE__, __LINE__);  \
    }                                                                           \
  } while (false)

/// @brief As `MGM_CUDA_TRY`, but `cudaErrorMemoryAllocation` becomes `mgm::out_of_memory`
/// naming `bytes`, and any other failure `mgm::cuda_error`.
#define MGM_CUDA_TRY_ALLOC(call, bytes)                                                        \
  do {                                                                                         \
    const cudaError_t mgm_status_ = (call);                                                    \
    if (mgm_status_ != cudaSuccess) [[unlikely]] {                                             \
      ::mgm::detail::throw_cuda_alloc_error(mgm_status_, #call, (bytes), __FILE__, __LINE__);  \
    }                                                                                          \
  } while (false)
