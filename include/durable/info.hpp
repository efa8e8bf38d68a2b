#pragma once
/// \file
/// Snapshots of runs and steps as the database holds them.

#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <optional>
#include <string>
#include <vector>

namespace durable {

/// One change of a run's status, with when and why.
struct Transition {
  Status status;
  Clock::time_point at;
  std::string reason;
};

/// A run as the database holds it.
struct RunInfo {
  std::string id, workflow, correlation_id;
  Status status = Status::pending;
  json input, output;
  std::optional<ErrorInfo> error;
  int invocations = 0;  ///< times the workflow function was entered for this run
  Clock::time_point created_at, updated_at;
  std::optional<Clock::time_point> wake_at;  ///< when a pending or sleeping run is next due
  std::vector<Transition> history;           ///< every status change, oldest first
};

/// A journal entry of a run.
struct StepInfo {
  std::string id;      ///< the journal key: "charge", "charge#2"
  std::string kind;    ///< run | sleep
  std::string status;  ///< completed | failed | retrying | sleeping
  json output;
  std::optional<ErrorInfo> error;  ///< while retrying or failed: the last failed attempt's error
  int attempts = 0;
  std::optional<Clock::time_point> wake_at;  ///< sleeping: wake time; retrying: next attempt
};

}  // namespace durable
