// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Snapshots of runs and steps as the database holds them.

#include <cstdint>
#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <map>
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
  /// When a runtime first claimed the run (began_at - created_at: how long it queued); none
  /// until then, and for a run first claimed by a durable older than schema version 11.
  std::optional<Clock::time_point> began_at;
  std::optional<Clock::time_point> wake_at;  ///< when a pending or sleeping run is next due
  std::vector<Transition> history;           ///< every status change, oldest first
  std::string parent_id;  ///< a run started by step.invoke: the run that invoked it
  /// While running: "HOST:PID" of the process holding the claim (its host name and process id);
  /// empty when no process holds the run (any other status).
  std::string worker;
  /// While running: when the holder's claim lapses unless its heartbeat renews it. A running
  /// run whose lease_until has passed is orphaned: its holder stopped renewing (killed, hung or
  /// cut off) and any worker may take it over. Unset for any other status.
  std::optional<Clock::time_point> lease_until;
  /// RuntimeOptions::version of the runtime that started the run, or first ran it; empty: none.
  std::string version;
  /// A run made by Runtime::fork: the run whose journal it began with a copy of.
  std::string forked_from;
  /// A run that ended with step.continue_as_new: the run that took over from it.
  std::string continued_as;
  /// When the run fails with TimeoutError if it has not ended (StartOptions::deadline,
  /// WorkflowOptions::deadline); none: no deadline.
  std::optional<Clock::time_point> deadline;
  int priority = 0;                         ///< StartOptions::priority
  std::map<std::string, std::string> tags;  ///< StartOptions::tags
  /// A running run asked to pause (Runtime::pause): it pauses once the steps running now are
  /// journaled, and runs no further step until resumed.
  bool pausing = false;
  /// Where the run stands in Runtime::list's order (newest first), for RunFilter::cursor: the
  /// runs after it. Opaque text.
  std::string cursor;
};

/// A journal entry of a run.
struct StepInfo {
  std::string id;      ///< the journal key: "charge", "charge#2"
  /// run | sleep | event | invoke | send | value | patch | publish | receive | stream | tags
  std::string kind;
  std::string status;  ///< completed | failed | retrying | sleeping | waiting
  json output;
  std::optional<ErrorInfo> error;  ///< while retrying or failed: the last failed attempt's error
  int attempts = 0;
  std::optional<Clock::time_point> wake_at;  ///< sleeping: wake time; retrying: next attempt
  std::optional<std::chrono::milliseconds> duration{};  ///< run: its last attempt's body time
  Clock::time_point updated_at{};                       ///< when the entry was last written
  /// run: when its last attempt's body began (it ended `duration` later); a sleep, an event wait,
  /// a child run (invoke) or a send: when the run came to it (it ended at updated_at, once
  /// over). None for journaled values and patch markers, and for entries an older durable wrote.
  std::optional<Clock::time_point> started_at{};
  /// A step an operator completed by hand (Runtime::resolve): the reason they gave ("no reason
  /// given" when none); its output is theirs. Empty for every other entry.
  std::string resolved{};
};

/// The progress a step's body last reported (StepContext::heartbeat), kept for the step's next
/// attempt and shown while the step has not completed.
struct StepProgress {
  std::string step;  ///< the journal key
  int attempt = 0;   ///< the attempt that reported it
  json progress;
  Clock::time_point at{};  ///< when it was stored
};

/// Where a run parts from the code that would replay it (Runtime::verify).
struct Divergence {
  std::string run_id, workflow;
  std::string step;     ///< the journal key it concerns; empty when it is the run's ending
  std::string message;  ///< what the journal holds, and what the code now does instead
  /// "file:line" of the call that diverges, or where the code parts by ending or stopping, of
  /// its last step call; empty when it made none.
  std::string where;
};

/// What Runtime::verify found.
struct VerifyReport {
  std::size_t runs_checked = 0;
  std::vector<Divergence> divergences;  ///< at most one per run, oldest run first
  bool ok() const { return divergences.empty(); }
};

/// A schedule as the database holds it.
struct ScheduleInfo {
  std::string id, workflow;
  json input;
  std::chrono::milliseconds every{0};
  std::string cron;
  std::optional<int> remaining;  ///< starts left; none: no end
  Clock::time_point next_at;     ///< the next start
  int fired = 0;                 ///< runs started so far
};

/// What this Runtime has done since it was made (other processes count their own).
struct Counters {
  std::uint64_t runs_started = 0;    ///< start()s and event-triggered runs that created a run
  std::uint64_t runs_completed = 0;  ///< runs this runtime executed to completed
  std::uint64_t runs_failed = 0;     ///< runs this runtime executed to failed
  std::uint64_t steps = 0;           ///< journal entries written (steps, sleeps, waits, sends)
  std::uint64_t retries = 0;         ///< failed attempts that will be tried again
  std::uint64_t events_sent = 0;     ///< Runtime::send_event and journaled step.send_event
  std::uint64_t schedule_fires = 0;  ///< runs started by schedules
  /// RuntimeOptions::otlp_endpoint: spans the collector accepted, and spans lost (found the
  /// queue full, or in a batch the collector refused or could not be reached for).
  std::uint64_t spans_exported = 0;
  std::uint64_t spans_dropped = 0;
};

/// What Runtime::read_stream (and Client::read_stream) read of a run's stream.
struct StreamRead {
  std::vector<json> values;  ///< the values from the offset asked for, in the order written
  std::size_t next = 0;      ///< the offset to read from next: the asked one plus values.size()
  bool closed = false;  ///< no value comes after these: closed by the run, or the run has ended
};

}  // namespace durable
