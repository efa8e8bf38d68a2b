// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Options of workflows, steps, runs and the runtime, and the status of a run.

#include <chrono>
#include <cstddef>
#include <durable/codec.hpp>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

/// In any window of `period`, the first step bodies of at most `limit` runs of a workflow begin,
/// per value of `key` (a JSON pointer into the input, as WorkflowOptions::concurrency_key; empty:
/// one limit for the whole workflow): what a rate-limited provider the bodies call sees. A run
/// holds a slot from its claim until a period after its first body began. The runs over it
/// wait, none is dropped. limit 0: none.
struct RateLimit {
  int limit = 0;
  std::chrono::milliseconds period{1000};
  std::string key{};
};

/// A start of a workflow waits `period` before its run may begin; a newer start with the same
/// `key` (a JSON pointer into the input, as WorkflowOptions::concurrency_key; empty: one for the
/// workflow) within it replaces the waiting run's input and restarts the wait, and returns that
/// run's id. For bursts that only the last of matters (a document saved again and again, a
/// search box). period 0: none.
struct Debounce {
  std::chrono::milliseconds period{0};
  std::string key{};
};

/// Options of a workflow.
struct WorkflowOptions {
  std::optional<RetryPolicy> retry{};  ///< default policy of this workflow's steps
  /// Each event sent with one of these names starts a run of this workflow, whichever process
  /// sends it. The run's input is {"name", "data", "id", "time"} (time in ms since the epoch).
  std::vector<std::string> events{};
  /// At most this many runs of this workflow executing at once, across every runtime on the
  /// database; sleeping and waiting runs hold no slot. 0: no limit.
  int concurrency = 0;
  /// A JSON pointer into the input ("/tenant", "/account/id"): `concurrency` then applies per
  /// value found there (text as it is, other values as JSON text; a run whose input has none
  /// counts under the empty key), so that one tenant's runs cannot take every slot.
  std::string concurrency_key{};
  /// How many runs may begin per period (per key); see RateLimit.
  RateLimit rate_limit{};
  /// See Debounce. Applies to starts by Runtime::start, a Client, the durable command and the
  /// HTTP API, events and schedules; not to child runs, forks and continue_as_new.
  Debounce debounce{};
  /// How long a run may take, from its start: past it, the run fails with TimeoutError wherever
  /// it is (pending, running, sleeping, waiting, paused). 0: no limit. StartOptions::deadline,
  /// when earlier, wins. add() keeps it in the file, so that every process that creates a run
  /// of the workflow (a Client, the durable command, an event) gives the run its deadline.
  std::chrono::milliseconds deadline{0};
};

/// Options of Step::wait_for_event.
struct WaitOptions {
  /// How long to wait; then wait_for_event returns nullopt. max() (the default): no timeout.
  std::chrono::milliseconds timeout = std::chrono::milliseconds::max();
  /// The fields the event's data must hold, with equal values ({} matches any event of the
  /// name). Keys name top-level fields of the data.
  json match = json::object();
};

/// Options of one step.
struct StepOptions {
  std::optional<RetryPolicy> retry{};  ///< overrides the workflow's policy for this step
  /// How long one attempt may run, in real time (under TestRuntime's virtual clock too). Past
  /// it the attempt fails with TimeoutError and is retried per the policy; its thread is not
  /// killed: the body goes on, its StepContext's stop_token() is requested and whatever it
  /// returns is dropped. 0: no limit. See docs/concepts.md, "Timeouts and heartbeats".
  std::chrono::milliseconds timeout{0};
  /// How long a body may go without StepContext::heartbeat() (counted from the attempt's
  /// start, then from each heartbeat) before its attempt fails as above. 0: no limit.
  std::chrono::milliseconds heartbeat_timeout{0};
};

/// Where a run is in its life. pending: queued, not yet claimed; running: claimed by a runtime;
/// sleeping: waiting for a sleep or a retry backoff to pass; waiting: for an event or a child
/// run; completed, failed and cancelled are terminal (a failed run may be retry()ed); paused:
/// held by an operator (Runtime::pause, pause_workflow), claimed by no runtime until resumed.
enum class Status { pending, running, sleeping, waiting, completed, failed, cancelled, paused };

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

/// How much the runtime logs: each line is one JSON object on the log sink.
enum class LogLevel { debug, info, warn, error, off };

/// Where serve() serves the admin HTTP API, /metrics and the dashboard (docs/operations.md).
struct HttpListen {
  std::string address{};       ///< empty: no HTTP; "127.0.0.1", "::1", "0.0.0.0", a host IP
  unsigned short port = 8080;  ///< 0: any free port (Runtime::http_url() tells which)
  /// Bearer token. A token or a signing secret is required when the address is not loopback.
  std::string token{};
  /// The shared secret of signed requests (HMAC-SHA256; docs/operations.md, "Signed
  /// requests"): empty, or at least 32 bytes. A request signed with it needs no token.
  std::string signing_secret{};
  /// TLS: the PEM file of the certificate chain and the PEM file of its private key, both or
  /// neither. With them the server speaks only HTTPS (TLS 1.2 or later).
  std::string tls_cert_file{};
  std::string tls_key_file{};
};

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
  /// Strict replay (docs/versioning.md). true (the default): before a run's code calls a step
  /// its journal does not hold, or returns, it must have met every entry of its journal (patch
  /// markers with no call left excepted); otherwise the invocation stops with NonDeterminism
  /// naming the entry not met and the new call's file:line, runs no body, journals nothing new,
  /// and the run fails, for retry() once fixed code is deployed. Steps appended after every
  /// journaled one stay safe. false: entries are matched by id alone, and a step the code no
  /// longer calls is ignored.
  bool strict_replay = true;
  /// How often serve() and wait() look in the database for work other processes wrote.
  std::chrono::milliseconds poll_interval{200};
  std::chrono::milliseconds lease{30'000};  ///< how long a claim on a run lasts unrenewed
  /// A run whose worker dies this many times in a row while holding it, before the run journals
  /// anything, is failed ("quarantined") instead of being claimed again, so that a run that
  /// crashes its process (a segmentation fault, an abort, the out-of-memory killer) cannot take
  /// down every worker forever. Runs under suspicion (two crashed claims in a row, or one when
  /// this is 2) are claimed one at a time, so only the guilty one is charged. 0: never
  /// quarantine; 1 is refused (one crash cannot tell the guilty run from its batch).
  int quarantine_after = 5;
  std::size_t max_output_bytes = 4u << 20;  ///< the largest step or run result, as JSON text

  /// Log lines at this level and above are written, one JSON object per line.
  LogLevel log_level = LogLevel::warn;
  /// Where log lines go (called from the runtime's threads, one line at a time); empty: stderr.
  std::function<void(std::string_view line)> log_sink{};
  /// serve() logs workflow.backlog_warning when this many runs are due and not yet claimed
  /// (0: never), and workflow.backlog_age_breach when the oldest of them has waited this long
  /// (0: never); each once when crossed, and again after it cleared.
  std::size_t backlog_warning = 1000;
  std::chrono::milliseconds backlog_age_breach{60'000};
  /// The admin HTTP API and dashboard, served by serve() while it runs; needs a database file.
  HttpListen http{};
  /// serve() deletes events stored longer ago than this, in small batches, except those a
  /// waiting run could still need (docs/runtime.md); 0: keep every event forever. Completed
  /// waits and sent events keep their data in the journal, so a replay never needs the row.
  std::chrono::milliseconds event_retention{std::chrono::hours(24 * 7)};
  /// The version of the code this runtime runs (a release, a commit): stamped on every run it
  /// starts (its own start()s, the children its runs invoke, the runs its schedules, events and
  /// continue_as_new start), and on a run started without one (by the durable command, or a
  /// runtime with no version) when this runtime first claims it. RunInfo::version shows it.
  std::string version{};
  /// serve() deletes runs that ended (completed, failed or cancelled) longer ago than this, with
  /// their journals and histories, in small batches between the runs' own writes; 0 (the
  /// default): keep every run. Runtime::purge deletes by filter, at any time.
  std::chrono::milliseconds retention{0};
  /// Claims only runs of `version` (and runs of no version yet, which it then stamps): for
  /// blue/green fleets on one database, where each fleet finishes the runs its own code began.
  /// Needs a version.
  bool only_own_version = false;
  /// An OpenTelemetry collector's base URL ("http://localhost:4318"); empty (the default): no
  /// traces. Spans of runs, step attempts, sleeps, waits and child runs are POSTed to
  /// <endpoint>/v1/traces as OTLP/HTTP JSON, in batches, from a thread of their own: a step never
  /// waits for the collector, and spans that find the queue full are dropped and counted
  /// (Counters::spans_dropped). A URL that is not http:// is refused.
  std::string otlp_endpoint{};
  /// Encodes every payload before it is stored (see Codec): run inputs and outputs, step
  /// results and error messages, event data, wait matches, schedule inputs. Ids, names,
  /// statuses, times, step ids and event names stay in the clear. Every process on the database
  /// needs the same codec to read them.
  std::optional<Codec> codec{};
  /// Built-in encryption of every payload (after `codec`, when both are set): a file of lines
  /// `KEY_ID:64-hex-chars` (a 256-bit key each). The last line's key wraps new data keys, every
  /// line's key unwraps: rotation is adding a line. Each correlation id (a run without one: its
  /// run id) gets a random data key, stored wrapped in the database; payloads are AES-256-GCM
  /// with a random nonce, bound to their run and slot. Runtime::forget destroys a data key.
  /// Empty: none. A missing or malformed file is an Error at construction.
  std::string encryption_key_file{};
};

/// When a schedule starts runs: every `every` or by a `cron` expression (one of the two), at
/// most `count` times.
struct Schedule {
  /// The schedule's name; a schedule() with a name already used replaces that schedule. Empty:
  /// one is generated.
  std::string id{};
  std::chrono::milliseconds every{0};  ///< an interval, from `first` on
  /// A 5-field cron expression in UTC ("minute hour day-of-month month day-of-week", with
  /// lists, ranges, steps and names: "0 9 * * mon-fri"), or @hourly, @daily, @weekly, @monthly,
  /// @yearly.
  std::string cron{};
  std::optional<int> count{};  ///< runs to start in all; none: no end
  /// The first start: by default the first cron match from now, or now + every.
  std::optional<Clock::time_point> first{};
};

/// Options of Runtime::start.
struct StartOptions {
  std::string idempotency_key{};  ///< a second start of the same workflow with this key returns
                                  ///< the first run's id and creates nothing
  std::string correlation_id{};   ///< generated when empty
  std::optional<Clock::time_point> at{};  ///< delayed start: not run before this time
  /// Past this time the run fails with TimeoutError, wherever it is. None: the workflow's
  /// WorkflowOptions::deadline, if any.
  std::optional<Clock::time_point> deadline{};
  /// Among runs due at once, those of a higher priority are claimed first (then the oldest
  /// due first); 0 is the default, and negative values come after it.
  int priority = 0;
  /// Labels kept with the run (a tenant, a customer, a release): shown by get() and list(),
  /// matched by RunFilter::tags. Keys and values are non-empty UTF-8 text.
  std::map<std::string, std::string> tags{};
  /// A W3C Trace Context `traceparent` ("00-<32 hex>-<16 hex>-<2 hex>") for the run to join: its
  /// spans, and its child runs', go under that trace and span. Empty: the run has a trace of its
  /// own. Anything else is refused.
  std::string traceparent{};
};

/// Which runs Runtime::list returns.
struct RunFilter {
  std::optional<Status> status{};
  std::string workflow{};  ///< empty: any
  std::size_t limit = 100;
  /// Only the runs of this correlation id (StartOptions::correlation_id, or the one a run was
  /// given); empty: any. A child run carries its parent's.
  std::string correlation_id{};
  /// Only runs that have each of these tags with this value (StartOptions::tags); empty: any.
  std::map<std::string, std::string> tags{};
  /// Only runs whose error names this step (ErrorInfo::step_id: a failed run's failing step);
  /// empty: any.
  std::string failed_step{};
  /// Only runs whose error is of this type (ErrorInfo::type, "std::runtime_error"); empty: any.
  std::string error_type{};
  /// Only runs created at or after, and before, these times.
  std::optional<Clock::time_point> created_after{}, created_before{};
  /// Runtime::list only: the runs after this one in the list's order, newest first. Pass the
  /// RunInfo::cursor of the last run of one page to get the next; empty: from the newest. A page
  /// costs the same however deep it is, and a run started meanwhile does not shift the next one.
  /// Text that is not a cursor a list returned is refused with Error. Bulk actions ignore it.
  std::string cursor{};
};

}  // namespace durable
