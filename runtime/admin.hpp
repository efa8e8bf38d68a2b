// SPDX-License-Identifier: Apache-2.0
#pragma once
// What operators do with a database: list and show runs, start, cancel, retry, fork, resolve,
// send events, stats, schedules and metrics. Shared by the `durable` command and the HTTP API,
// so that both answer the same question the same way. Every answer is JSON in the shapes the HTTP
// API returns (docs/operations.md); the command renders it for people or prints it with --json.
//
// An Admin opens its own connections to the database file: it works beside serving workers in
// other processes, or in the same one (a Runtime serving HTTP), as any SQLite reader and
// writer does. Thread-safe: each call takes a connection of its own from a small pool, so a
// call blocked on the database (another process holding the write lock) holds up only itself.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <durable/durable.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace durable::detail {
class ChangeWatch;
class Env;
enum class BulkAction;
class Store;
class OpsQueries;
struct RecordedRun;
class Payloads;
}  // namespace durable::detail

namespace durable::ops {

/// A request that cannot be carried out as asked (HTTP 400): a bad status name, malformed
/// input, a missing field.
struct BadRequest : Error {
  explicit BadRequest(const std::string& what) : Error(errc::bad_request, what) {}
};
/// A request that conflicts with the run's state (HTTP 409): retry of a run that is not failed.
struct Conflict : Error {
  explicit Conflict(const std::string& what) : Error(errc::conflict, what) {}
};

/// The filter of list().
struct RunQuery {
  std::optional<Status> status{};
  std::string workflow{};  ///< empty: any
  std::size_t limit = 50;
  std::string correlation_id{};               ///< empty: any
  std::map<std::string, std::string> tags{};  ///< RunFilter::tags
  std::string failed_step{}, error_type{};    ///< RunFilter's
  std::optional<Clock::time_point> created_after{}, created_before{};
  /// RunFilter::cursor: the runs after this one (a list's next_cursor); empty: from the newest.
  std::string cursor{};
  /// The RunFilter of the same conditions, with this limit.
  RunFilter filter() const;
  /// Whether any condition is set (a bulk action over every run needs `all`).
  bool any_condition() const;
};

/// What start() is asked to start.
struct StartRequest {
  std::string workflow{};
  json input = json::object();
  std::string idempotency_key{};
  std::string correlation_id{};
  /// False (the HTTP API): a workflow no worker has registered is refused with UnknownWorkflow.
  /// True (the command): the run is queued for a worker that will have it, and flagged.
  bool queue_unknown = false;
  int priority = 0;                           ///< StartOptions::priority
  std::map<std::string, std::string> tags{};  ///< StartOptions::tags
  /// StartOptions::deadline, as a UTC time ("2026-11-27T18:00:00Z") or a duration from now
  /// ("30m"); empty: none.
  std::string deadline{};
  /// StartOptions::traceparent; text that is not a traceparent is dropped, as W3C Trace Context
  /// asks of a receiver (the run then has a trace of its own).
  std::string traceparent{};
};

class Admin {
 public:
  /// Opens the database file (creating or migrating it as a Runtime would). `on_change` is
  /// called after each write (start, cancel, retry, send, unschedule): a Runtime in the same
  /// process passes its wake-up, so that it does not wait for its next poll, and its clock and
  /// durability, so that what the API writes is synced as the runtime's own writes are.
  ///
  /// The file is opened once here (errors are thrown from here); more connections are opened as
  /// concurrent calls need them, up to `max_connections` (at least one; the default matches
  /// HttpOptions::handler_threads), and kept. A call that finds them all busy waits for one.
  /// `read_only`: the file is read as it is, never created, migrated or written (its writes
  /// throw), so a file this user may not write can be read; an older schema is an Error.
  /// `env`: the clock and threads it uses (src/env.hpp), outliving it; null for the system's.
  explicit Admin(const std::string& database, std::function<void()> on_change = {},
                 durable::detail::Env* env = nullptr, Durability durability = Durability::normal,
                 std::size_t max_connections = 8, bool read_only = false,
                 std::shared_ptr<const durable::detail::Payloads> payloads = nullptr);
  ~Admin();
  Admin(const Admin&) = delete;
  Admin& operator=(const Admin&) = delete;

  /// {"runs": [run summary...], "counts": {status: n, ... every status}, "total": n,
  /// "next_cursor"}, newest first; "next_cursor": the RunQuery::cursor of the next page, null
  /// when this one is the last. A run summary: {"id", "workflow", "status", "correlation_id",
  /// "created_at", "updated_at", "invocations", "known", "orphaned", and when set "wake_at",
  /// "parent_id", "error", "worker", "lease_until"}; times are ISO 8601 UTC strings with
  /// milliseconds; "known": some worker registered the workflow; "worker" ("HOST:PID") and
  /// "lease_until": who holds a running run and until when; "orphaned": running with its lease
  /// lapsed (now, by this Admin's clock), its holder gone or stuck.
  json list(const RunQuery& query);
  /// A run summary with "input", "output", "history" [{"status", "at", "reason"}], "steps"
  /// [step...] and "runbook" (null unless the run failed: see runbook()). Throws NotFound.
  json show(std::string_view id);
  /// {"steps": [step...]}: {"id", "kind", "status", "attempts", "output", "updated_at", and when
  /// set "error", "wake_at", "duration_ms" and "started_at" (a run step's last attempt: when its
  /// body began, and it ended duration_ms later; a sleep, wait, invoke or send: when the run came
  /// to it)}. Throws NotFound.
  json steps(std::string_view id);
  /// {"id", "created"}: created false when the idempotency key named an existing run; "known"
  /// false when queued for a workflow no worker registered yet. Throws UnknownWorkflow,
  /// BadRequest (input too large, or not storable).
  json start(const StartRequest& request);
  /// {"id", "status"} after the cancel (of a failed run too, which it closes); `reason` goes
  /// into the history. Throws NotFound, Conflict (completed or cancelled already).
  json cancel(std::string_view id, const std::string& reason = {});
  /// {"id", "status"} after the retry. Throws NotFound, Conflict (not failed).
  json retry(std::string_view id);
  // In runtime/admin_control.cpp: Runtime::pause, resume, pause_workflow, resume_workflow.
  /// {"id", "status"} after the pause (still "running" for a running run, which pauses at its
  /// next step boundary). Throws NotFound, Conflict (ended).
  json pause(std::string_view id);
  /// {"id", "status"} after the resume. Throws NotFound, Conflict (not paused or pausing).
  json resume(std::string_view id);
  /// {"workflow", "paused": runs paused}. Throws BadRequest (an empty name).
  json pause_workflow(std::string_view workflow);
  /// {"workflow", "resumed": runs resumed}. Throws BadRequest (an empty name).
  json resume_workflow(std::string_view workflow);
  /// Runtime::cancel, retry or purge of the runs the query matches (whatever its limit):
  /// {"action", "matched"} when `dry_run` (nothing changed), else {"action", "changed"}. Throws
  /// BadRequest for a status the action does not act on.
  json bulk(durable::detail::BulkAction action, const RunQuery& query, bool dry_run,
            const std::string& reason);
  /// {"id": the new run's, "forked_from": id}: Runtime::fork. Throws NotFound (an unknown run,
  /// or a step its journal does not hold), Conflict (a run that has not ended).
  json fork(std::string_view id, const std::string& from_step);
  /// {"id", "step", "status"} after Runtime::resolve of the step, checked against the application's
  /// code where set_resolve_check() gave a check. Throws NotFound (an unknown run or step),
  /// Conflict (a step that did not fail, a run a worker holds), BadRequest (an output that
  /// cannot be stored, or that the check refuses).
  json resolve(std::string_view id, const std::string& step, const json& output,
               const std::string& reason);
  /// What resolve() asks before it writes: throws Error for an output the run's code cannot
  /// take (a Runtime serving this API passes its own check). Set before any call.
  using ResolveCheck = std::function<void(const durable::detail::RecordedRun& run,
                                          const std::string& step, const json& output)>;
  void set_resolve_check(ResolveCheck check) { resolve_check_ = std::move(check); }
  /// The largest input, event data or resolved output taken, as JSON text (a Runtime serving
  /// this API passes its RuntimeOptions::max_output_bytes); 4 MiB by default. Set before any
  /// call.
  void set_max_data_bytes(std::size_t bytes) { max_data_bytes_ = bytes; }
  /// {"id", "woken", "started": [run id...]}. Throws BadRequest (no name, data too large).
  /// `traceparent`: joined by the runs the event starts; dropped unless it is one (as
  /// StartRequest::traceparent).
  json send_event(std::string_view name, const json& data, std::string_view traceparent = {});
  /// Runtime::send: {"run_id", "topic", "received": whether a waiting receive took it at once}.
  /// Throws NotFound for an unknown run, Conflict for one that has ended, BadRequest for a bad
  /// topic or message.
  json send(std::string_view run_id, std::string_view topic, const json& message);
  /// {"counts": {status: n}, "total", "pending_depth" (due and unclaimed),
  ///  "oldest_pending_age_seconds" (null when none), "steps", "retries", "failed_runs",
  ///  "failed_steps", "workers" (live ones: see OpsQueries::live_workers), "workflows": [known
  ///  names], "paused_workflows": [names]}.
  json stats();
  /// {"published": [{"key", "value", "version", "updated_at"}...]}, by key: the latest value the
  /// run published under each key (Step::publish); "version" counts the key's writes. Throws
  /// NotFound. In runtime/admin_published.cpp, with the two below.
  json published(std::string_view id);
  /// The key's latest value as it is now (nullopt: none yet), and whether the run has ended.
  /// Throws NotFound for an unknown run, BadRequest for a bad key.
  struct PublishedNow {
    std::optional<json> value;
    bool ended = false;
  };
  PublishedNow published_now(std::string_view id, std::string_view key);
  /// {"streams": [{"name", "length", "closed", "updated_at"}...]}, by name: the run's streams
  /// (Step::write_stream). Throws NotFound. In runtime/admin_streams.cpp, with the one below.
  json streams(std::string_view id);
  /// The stream's values from offset `from` (up to detail::kStreamReadLimit), as
  /// Runtime::read_stream reads them without a wait. Throws NotFound for an unknown run,
  /// BadRequest for a bad name.
  StreamRead stream_now(std::string_view id, std::string_view name, std::size_t from);
  /// What waits for published values and streams wait on: the one a Runtime in this process shared
  /// (share_changes: its commits wake them at once), else this Admin's own, on the database's
  /// change feed (opened at the first wait).
  durable::detail::ChangeWatch& changes();
  /// The clock and threads it uses (src/env.hpp).
  durable::detail::Env& env() const { return *env_; }
  void share_changes(std::shared_ptr<durable::detail::ChangeWatch> watch);
  /// How long a stream's Server-Sent Events response stays silent before a comment line keeps
  /// it open and finds a reader that has gone (15 s; a test sets a shorter one before serving).
  std::chrono::milliseconds stream_keep_alive() const { return stream_keep_alive_; }
  void set_stream_keep_alive(std::chrono::milliseconds every) { stream_keep_alive_ = every; }

  /// {"schedules": [{"id", "workflow", "input", "every_ms", "cron", "remaining", "next_at",
  /// "fired"}]}.
  json schedules();
  /// Throws NotFound for an unknown schedule.
  void unschedule(std::string_view id);
  /// The Prometheus text exposition of the database's state and of its live workers' counters
  /// (durable_* metrics, docs/metrics.md), labelled within the caps of metrics.hpp. In
  /// runtime/metrics.cpp.
  std::string metrics();

 private:
  struct Connection;  // a Store and its OpsQueries on the file
  class Lease;        // a Connection taken from the pool, given back when the Lease ends

  std::unique_ptr<Connection> open_connection() const;
  Lease lease();
  void give_back(std::unique_ptr<Connection> connection);
  std::int64_t now_ms() const;
  void changed() const;
  static std::set<std::string> known(Connection& db);
  json runbook(Connection& db, const RunInfo& run, const std::vector<StepInfo>& steps);

  std::function<void()> on_change_;
  ResolveCheck resolve_check_;
  std::size_t max_data_bytes_ = 4u << 20;  // as RuntimeOptions::max_output_bytes
  durable::detail::Env* env_;
  std::string path_;      // as given: what the connections open
  std::string database_;  // absolute: what the runbook's commands name
  Durability durability_;
  std::size_t max_connections_;
  /// Opened read-only (the command's read commands): nothing is created, migrated or written.
  bool read_only_ = false;
  std::chrono::milliseconds stream_keep_alive_{15'000};
  std::mutex changes_mutex_;  // guards changes_
  std::shared_ptr<durable::detail::ChangeWatch> changes_;
  /// How the database's payloads are stored (RuntimeOptions::codec, encryption_key_file; the
  /// CLI's --key-file); null: in the clear.
  std::shared_ptr<const durable::detail::Payloads> payloads_;
  std::mutex mutex_;  // guards idle_ and opened_

  std::condition_variable returned_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::size_t opened_ = 0;
};

}  // namespace durable::ops
