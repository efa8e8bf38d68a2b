// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The exceptions durable throws, all under durable::Error.

#include <chrono>
#include <stdexcept>
#include <string>

namespace durable {

/// The root of every exception durable throws. Its what() says what happened, to which run and
/// step, and what to do about it.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Throw from a step body to fail the step at once, with no further attempts.
struct NonRetryableError : Error {
  using Error::Error;
};

/// Throw from a step body to fail this attempt and make the next one no sooner than `after`.
/// The attempt counts against the step's RetryPolicy::max_attempts like any other.
struct RetryAfterError : Error {
  RetryAfterError(std::string what, std::chrono::milliseconds after_delay)
      : Error(std::move(what)), after(after_delay) {}
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
  using Error::Error;
};

/// Runtime::start of a typed workflow whose input does not convert to the workflow's input type
/// (a field missing, or of another type): the message names the workflow, the type and, for a
/// missing field, the field; no run is created. A run queued where the code is not at hand (the
/// CLI, the HTTP API) with such an input fails with it on its first invocation.
struct InvalidInput : Error {
  using Error::Error;
};

/// A run past its deadline (StartOptions::deadline, WorkflowOptions::deadline) fails with an
/// error of this type ("durable::TimeoutError" in ErrorInfo::type), and so does a step attempt
/// past its StepOptions::timeout or heartbeat_timeout (retried like any failed attempt).
struct TimeoutError : Error {
  using Error::Error;
};

/// A run id that the database does not hold.
struct NotFound : Error {
  using Error::Error;
};

/// The code reached a journaled step id with another kind of step (a run that was a sleep), or,
/// under testing::replay, diverged from a recorded run in any way.
struct NonDeterminism : Error {
  using Error::Error;
};

}  // namespace durable
