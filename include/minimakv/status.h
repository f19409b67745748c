// Status: the error value every fallible minimakv call returns (leveldb style).
// The library never aborts on a caller's mistake; it returns a Status whose message names the bad value.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace minimakv {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad shape, bad value, NaN/Inf input, unsupported head_dim
  kResourceExhausted, // a page pool is full
  kNotFound,          // unknown sequence, page or file
  kCorruption,        // a file or buffer whose bytes are not what they claim
  kUnsupported,       // valid request this build or machine cannot serve
  kInternal,          // a broken invariant inside minimakv (a bug): report it
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) { return {StatusCode::kInvalidArgument, std::move(message)}; }
  static Status ResourceExhausted(std::string message) { return {StatusCode::kResourceExhausted, std::move(message)}; }
  static Status NotFound(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
  static Status Corruption(std::string message) { return {StatusCode::kCorruption, std::move(message)}; }
  static Status Unsupported(std::string message) { return {StatusCode::kUnsupported, std::move(message)}; }
  static Status Internal(std::string message) { return {StatusCode::kInternal, std::move(message)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::string_view StatusCodeName(StatusCode code);

}  // namespace minimakv

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define MINIMAKV_RETURN_IF_ERROR(expr)            \
  do {                                            \
    ::minimakv::Status minimakv_status_ = (expr); \
    if (!minimakv_status_.ok()) return minimakv_status_; \
  } while (0)
