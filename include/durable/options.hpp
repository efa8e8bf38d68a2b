#pragma once
/// \file
/// Options of workflows, steps, runs and the runtime, and the status of a run.

#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace durable {

using json = nlohmann::json;
using Clock = std::chrono::system_clock;

/// How a failing step is retried. The delay before attempt n+1 is
/// min(initial_backoff * multiplier^(n-1), max_backoff), then moved by up to ±jitter of itself.
struct RetryPolicy {
  int max_attempts = 4;  ///< attempts in all, the first included; 1 means no retry
  std::chrono::milliseconds initial_backoff{1000};
  double multiplier = 2.0;
  std::chrono::milliseconds max_backoff{3'600'000};
  double jitter = 0.2;  ///< ± fraction of each delay, in [0, 1]
};

/// Options of a workflow.
struct WorkflowOptions {
  std::optional<RetryPolicy> retry;  ///< default policy of this workflow's steps
};

/// Options of one step.
struct StepOptions {
  std::optional<RetryPolicy> retry;  ///< overrides the workflow's policy for this step
};

/// Where a run is in its life. pending: queued, not yet claimed; running: claimed by a runtime;
/// sleeping: waiting for a sleep or a retry backoff to pass; completed, failed and cancelled are
/// terminal (a failed run may be retry()ed).
enum class Status { pending, running, sleeping, waiting, completed, failed, cancelled };

/// "pending", "running", ...
std::string_view to_string(Status status);
/// The inverse of to_string; nullopt for any other text.
std::optional<Status> status_from_string(std::string_view text);

/// When the workflow function is re-invoked.
/// every_step: after every new step, from the top; code outside steps runs again each time.
/// on_recovery: the invocation goes on in place after its steps are journaled, so code outside
/// steps runs once; it replays only after a restart, or after a sleep or retry backoff longer
/// than RuntimeOptions::resident_sleep evicted it. Both write the same journal, and a journal
/// written in one mode replays in the other.
enum class Replay { every_step, on_recovery };

/// normal: a journaled step survives a process crash (SQLite synchronous=NORMAL in WAL mode).
/// full: it also survives power loss (synchronous=FULL: every commit is synced).
enum class Durability { normal, full };

/// Options of a Runtime.
struct RuntimeOptions {
  std::string database = "durable.db";  ///< a file path, or ":memory:" for a throw-away runtime
  /// Step threads that run the bodies of parallel steps; 0 = one per core. The thread waiting
  /// for a batch of bodies helps run it, so up to threads + 1 bodies may run at once.
  int threads = 0;
  Replay replay = Replay::every_step;
  /// on_recovery: sleeps and retry backoffs up to this long are waited out in place (the run
  /// stays claimed); longer ones evict the workflow, which replays on wake.
  std::chrono::milliseconds resident_sleep{1000};
  Durability durability = Durability::normal;
  std::chrono::milliseconds poll_interval{200};  ///< how often wait() looks for new work
  std::chrono::milliseconds lease{30'000};       ///< how long a claim on a run lasts unrenewed
  std::size_t max_output_bytes = 4u << 20;       ///< the largest step or run result, as JSON text
};

/// Options of Runtime::start.
struct StartOptions {
  std::string idempotency_key;  ///< a second start of the same workflow with this key returns
                                ///< the first run's id and creates nothing
  std::string correlation_id;   ///< generated when empty
  std::optional<Clock::time_point> at;  ///< delayed start: not run before this time
};

/// Which runs Runtime::list returns.
struct RunFilter {
  std::optional<Status> status;
  std::string workflow;  ///< empty: any
  std::size_t limit = 100;
};

}  // namespace durable
