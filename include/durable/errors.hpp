// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The exceptions durable throws, all under durable::Error.

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace durable {

/// A stable error id, as "durable.not_found": what a runbook, an alert or a log query keys on
/// (docs/errors.md lists durable's). Made from a string literal only, so that it outlives every
/// error that carries it.
class ErrorCode {
 public:
  template <std::size_t N>
  consteval ErrorCode(const char (&id)[N]) : id_(id, N - 1) {}  // NOLINT: a literal converts
  constexpr std::string_view id() const { return id_; }
  friend constexpr bool operator==(ErrorCode a, ErrorCode b) { return a.id_ == b.id_; }
  /// `error.code() == durable::errc::not_found`
  friend constexpr bool operator==(ErrorCode a, std::string_view b) { return a.id_ == b; }

 private:
  std::string_view id_;
};

/// The root of every exception durable throws. Its what() says what happened, to which run and
/// step, and what to do about it; durable's own begin with their code in brackets
/// ("[durable.not_found] no run 'r-1'"), as nlohmann's "[json.exception.type_error.302]" do.
struct Error : std::runtime_error {
  /// An error of the application's own: code() is "durable.error", what() is `what` as given.
  explicit Error(const std::string& what);
  explicit Error(const char* what);
  /// An error with a code: what() is "[code] what".
  Error(ErrorCode code, const std::string& what);

  /// The stable id of what went wrong ("durable.non_determinism").
  std::string_view code() const noexcept { return code_.id(); }

 protected:
  /// For the errors an application throws itself: what() is `what` as given.
  struct AsGiven {};
  Error(ErrorCode code, const std::string& what, AsGiven);

 private:
  ErrorCode code_;
};

/// The codes of durable's errors; each is explained, with what to do, in docs/errors.md.
namespace errc {
inline constexpr ErrorCode error{"durable.error"};                  ///< the application's Error
inline constexpr ErrorCode non_retryable{"durable.non_retryable"};  ///< NonRetryableError
inline constexpr ErrorCode retry_after{"durable.retry_after"};      ///< RetryAfterError
inline constexpr ErrorCode step_failed{"durable.step_failed"};      ///< StepFailed
inline constexpr ErrorCode unknown_workflow{"durable.unknown_workflow"};  ///< UnknownWorkflow
inline constexpr ErrorCode invalid_input{"durable.invalid_input"};        ///< InvalidInput
inline constexpr ErrorCode timeout{"durable.timeout"};                    ///< TimeoutError
inline constexpr ErrorCode not_found{"durable.not_found"};                ///< NotFound
inline constexpr ErrorCode non_determinism{"durable.non_determinism"};    ///< NonDeterminism
/// An argument of a call that durable refuses: an id, a name, a tag, a duration, an option.
inline constexpr ErrorCode invalid_argument{"durable.invalid_argument"};
/// A value over its limit (RuntimeOptions::max_output_bytes, a topic's or a tag's length).
inline constexpr ErrorCode too_large{"durable.too_large"};
/// The configuration of a process: RuntimeOptions, HTTP serving, TLS, key files, codecs.
inline constexpr ErrorCode config{"durable.config"};
/// What the run's state refuses: retry of a run that is not failed, a message to an ended run.
inline constexpr ErrorCode conflict{"durable.conflict"};
/// A request of the HTTP API or the admin layer that cannot be carried out as asked.
inline constexpr ErrorCode bad_request{"durable.bad_request"};
/// A call made where it cannot be: a StepContext outside an attempt, a Sql after its body.
inline constexpr ErrorCode misuse{"durable.misuse"};
/// A journaled result or a mock that does not convert to the step's result type.
inline constexpr ErrorCode type_mismatch{"durable.type_mismatch"};
/// The run is no longer running in this process: it ended, or another worker took it over.
inline constexpr ErrorCode lease_lost{"durable.lease_lost"};
/// The database cannot be opened, read or written.
inline constexpr ErrorCode database{"durable.database"};
/// The database's disk is full: nothing was written.
inline constexpr ErrorCode disk_full{"durable.disk_full"};
/// Another writer held the database past the wait.
inline constexpr ErrorCode busy{"durable.busy"};
/// The database was written by another version of durable.
inline constexpr ErrorCode schema{"durable.schema"};
/// A payload codec failed, or payloads were stored under another codec.
inline constexpr ErrorCode codec{"durable.codec"};
/// A key file, a data key or a ciphertext that does not serve: a key missing, or altered data.
inline constexpr ErrorCode encryption{"durable.encryption"};
/// The HTTP server cannot listen where it was asked to.
inline constexpr ErrorCode listen{"durable.listen"};
/// A run whose workers died too often holding it (RuntimeOptions::quarantine_after).
inline constexpr ErrorCode quarantined{"durable.quarantined"};
/// A bug in durable, not in the application: please report it.
inline constexpr ErrorCode bug{"durable.bug"};
}  // namespace errc

/// Throw from a step body to fail the step at once, with no further attempts.
struct NonRetryableError : Error {
  explicit NonRetryableError(const std::string& what) : Error(errc::non_retryable, what, {}) {}
  /// One with an id of its own: what() is "[code] what".
  NonRetryableError(ErrorCode code, const std::string& what) : Error(code, what) {}
};

/// Throw from a step body to fail this attempt and make the next one no sooner than `after`.
/// The attempt counts against the step's RetryPolicy::max_attempts like any other.
struct RetryAfterError : Error {
  RetryAfterError(const std::string& what, std::chrono::milliseconds after_delay)
      : Error(errc::retry_after, what, {}), after(after_delay) {}
  std::chrono::milliseconds after;
};

/// What went wrong with a step or a run, as journaled.
struct ErrorInfo {
  std::string type;     ///< the C++ type of what was thrown, demangled ("std::runtime_error")
  std::string message;  ///< its what(), or a description of a non-standard exception
  std::string step_id;  ///< the journal key of the failing step; empty when the workflow code threw
  int attempts = 0;     ///< attempts made of that step
};

/// Thrown by step.run (in workflow code) for a step that failed for good. The invocation whose
/// last attempt failed journals the failure and ends; every replay after it throws StepFailed
/// from that step.run. Catch it to treat the step as best effort.
struct StepFailed : Error {
  explicit StepFailed(ErrorInfo error_info);
  ErrorInfo info;
};

/// Runtime::start of a workflow name that was never add()ed.
struct UnknownWorkflow : Error {
  explicit UnknownWorkflow(const std::string& what) : Error(errc::unknown_workflow, what) {}
};

/// Runtime::start of a typed workflow whose input does not convert to the workflow's input type
/// (a field missing, or of another type): the message names the workflow, the type and, for a
/// missing field, the field; no run is created. A run queued where the code is not at hand (the
/// CLI, the HTTP API) with such an input fails with it on its first invocation.
struct InvalidInput : Error {
  explicit InvalidInput(const std::string& what) : Error(errc::invalid_input, what) {}
};

/// A run past its deadline (StartOptions::deadline, WorkflowOptions::deadline) fails with an
/// error of this type ("durable::TimeoutError" in ErrorInfo::type), and so does a step attempt
/// past its StepOptions::timeout or heartbeat_timeout (retried like any failed attempt).
struct TimeoutError : Error {
  explicit TimeoutError(const std::string& what) : Error(errc::timeout, what) {}
};

/// A run id that the database does not hold.
struct NotFound : Error {
  explicit NotFound(const std::string& what) : Error(errc::not_found, what) {}
};

/// The code reached a journaled step id with another kind of step (a run that was a sleep), or,
/// under testing::replay, diverged from a recorded run in any way.
struct NonDeterminism : Error {
  explicit NonDeterminism(const std::string& what) : Error(errc::non_determinism, what) {}
};

}  // namespace durable
