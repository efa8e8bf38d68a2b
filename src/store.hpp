// SPDX-License-Identifier: Apache-2.0
#pragma once
// The store: where runs, journals and state history persist. An interface, so that another
// backend (PostgreSQL) can be one new source folder; SQLite is the embedded default.
// A Store is not thread-safe: the runtime serializes calls to it.

#include <chrono>
#include <cstdint>
#include <durable/info.hpp>
#include <durable/options.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "change_feed.hpp"
#include "payloads.hpp"
#include "run_model.hpp"

namespace durable::detail {

/// What a run's status refuses (retry of a run that is not failed), as opposed to a database
/// error.
struct RunStateRefused : Error {
  explicit RunStateRefused(const std::string& what) : Error(errc::conflict, what) {}
};

struct NewRun {
  std::string id, workflow, correlation_id, idempotency_key;
  std::string input;  ///< JSON text
  std::int64_t now_ms = 0;
  std::int64_t due_ms = 0;                  ///< not claimed before this time (a delayed start)
  std::string parent_id, parent_step;       ///< a child run: the parent and its invoke step's key
  std::string reason;                       ///< for the state history; empty: "started"
  std::string forked_from;                  ///< Runtime::fork: the run it copies
  std::int64_t deadline_ms = 0;             ///< fails with TimeoutError past this time; 0: none
  int priority = 0;                         ///< StartOptions::priority
  std::map<std::string, std::string> tags;  ///< StartOptions::tags
  /// A start (by a caller, an event or a schedule), which its workflow's debounce may fold into
  /// the run of the same key that waits; not a child, a fork or a successor.
  bool debounce = false;
  /// The W3C traceparent the run joins (normalized); empty: a trace of its own.
  std::string traceparent{};
};

/// An event to store and deliver.
struct NewEvent {
  std::string id, name;
  std::string data;  ///< JSON text
  std::int64_t now_ms = 0;
  std::string traceparent{};  ///< joined by the runs the event starts; empty: none
  /// Of the run that sent it (step.send_event): its data is that correlation's payload, and
  /// Runtime::forget erases it with the run's. Empty: sent from outside.
  std::string correlation_id{};
};

/// A message to a run's mailbox (Runtime::send).
struct NewMessage {
  std::string run_id, topic;
  std::string data;  ///< JSON text
  std::int64_t now_ms = 0;
};

/// What storing a message did.
enum class Sent {
  no_run,     ///< the store holds no such run: nothing stored
  ended,      ///< the run has ended: nothing stored
  kept,       ///< in the mailbox until a receive takes it
  delivered,  ///< a waiting receive of the run took it, and the run was woken
};

/// What storing an event did.
struct Published {
  std::int64_t seq = 0;
  std::size_t woken = 0;             ///< waiting runs it completed a wait of
  std::vector<std::string> started;  ///< runs it started (workflows listing the event)
};

/// A value a run published (Step::publish), as stored: the latest per key.
struct PublishedValue {
  std::string key;
  std::string value;         ///< JSON text
  std::int64_t version = 0;  ///< 1 at the key's first publish, one more at each later one
  std::int64_t updated_at_ms = 0;
};

/// What reading a run's published values found.
struct PublishedRead {
  bool run_found = false;
  bool run_ended = false;  ///< completed, failed or cancelled: it publishes nothing more
  std::vector<PublishedValue> values;  ///< by key
};

/// What reading a run's stream (Step::write_stream) found.
struct StreamRows {
  bool run_found = false;
  bool closed = false;              ///< closed by the run, or the run has ended
  std::vector<std::string> values;  ///< JSON texts, from the offset asked for
  std::int64_t length = 0;          ///< how many values the stream holds
};

/// One of a run's streams, as Store::streams_of lists it.
struct StreamSummary {
  std::string name;
  std::int64_t length = 0;
  bool closed = false;  ///< closed by the run (a run's end closes the rest: see StreamRows)
  std::int64_t updated_at_ms = 0;
};

/// What became of a step body's write to a stream (Store::write_stream).
enum class StreamWrite {
  written,
  closed,    ///< the stream was closed before: nothing written
  not_owner  ///< the run is not running under this owner (it ended, or another took it)
};

/// A schedule as stored.
struct ScheduleRow {
  std::string id, workflow, input;  ///< input: JSON text
  std::int64_t every_ms = 0;
  std::string cron;
  std::optional<int> remaining;
  std::int64_t next_at = 0;  ///< kNever: used up (kept so a repeated schedule() is a no-op)
  int fired = 0;
  std::int64_t created_at = 0;
  std::string spec;  ///< what the schedule was made from, to tell a repeated schedule() call
};

/// Runs that are due and not yet claimed: how many, and since when the oldest is due.
struct Backlog {
  std::size_t depth = 0;
  std::optional<std::int64_t> oldest_due_ms;
};

/// A run claimed by this runtime: its state and journal, and when the claim lapses.
struct Claim {
  RunState run;
  std::int64_t lease_until_ms = 0;
  /// Claims of this run in a row that ended with its owner dead, this one's included when it is
  /// a takeover; cleared by a commit (RunWrite::clear_crashes).
  int crashes = 0;
  /// Suspected of the crashes it was in: claimed while the claimer held no other run, and it
  /// must claim none beside it until it lets it go, so that its next crash is its own.
  bool alone = false;
  /// Set when a value stored for the run (its input, a journaled output) cannot be read safely:
  /// the run must be failed with this reason, not executed.
  std::optional<std::string> unreadable;
};

/// Thrown by claim() for a run whose stored payloads this runtime cannot decode (stored under
/// another codec, or under a key its key file lacks): nothing was claimed or written. Another
/// runtime, configured as the one that wrote the run, can still execute it.
struct UndecodableRun : Error {
  UndecodableRun(std::string id, const std::string& why)
      : Error(errc::codec, why), run_id(std::move(id)) {}
  std::string run_id;
};

/// What claim() did: the runs it claimed, and those it failed instead (quarantined: they had
/// crashed their workers ClaimRequest::quarantine_after times).
struct Claimed {
  std::vector<Claim> runs;
  std::vector<std::string> quarantined;
  /// Read in the same transaction when the claim took fewer runs than it could, so that the
  /// claimer need not ask next_due() next: whether it was, and its answer (the earliest due time
  /// of a live run of the workflows but those executing and those just claimed; none: nullopt).
  bool next_due_read = false;
  std::optional<std::int64_t> next_due;
};

/// A run as recorded, with its journal, read together.
struct RecordedRun {
  RunInfo info;
  std::vector<JournalEntry> journal;
  /// A value stored in the run (its input, a step's output) that cannot be read: what is wrong
  /// (see Claim::unreadable). The value reads as text saying so.
  std::optional<std::string> unreadable;
};

/// The flow control of a workflow (WorkflowOptions): how many of its runs may run at once, in
/// all or per key, and how many may begin per period, per key. Keys are JSON pointers into the
/// input.
struct FlowRule {
  int concurrency = 0;  ///< 0: no limit
  std::string concurrency_key;
  int rate_limit = 0;  ///< 0: none
  std::int64_t rate_period_ms = 0;
  std::string rate_key;
  std::int64_t debounce_ms = 0;  ///< 0: none (kept for the runs' creators, not used by claims)
  std::string debounce_key;
  std::int64_t deadline_ms = 0;  ///< WorkflowOptions::deadline (for the runs' creators too)
  /// What the workflows table keeps of it, so that any process creating a run stamps its keys
  /// and debounces it and gives it its deadline: {"concurrency_key", "rate_key", "debounce_ms",
  /// "debounce_key", "deadline_ms"} as JSON text (those that apply), or empty when none does.
  std::string stored() const;
};

struct ClaimRequest {
  std::string owner;                   ///< the claiming runtime's worker id
  std::vector<std::string> workflows;  ///< only runs of these workflows are claimed
  std::int64_t now_ms = 0;
  std::int64_t lease_ms = 0;
  std::size_t limit = 0;
  /// Owners of running runs whose process is known dead: their claims are taken at once.
  std::vector<std::string> dead_owners;
  /// Runs the claiming runtime is executing right now: never claimed again by it, even when
  /// their lease lapsed during a long step body.
  std::vector<std::string> executing;
  /// Runs the claiming runtime cannot decode (UndecodableRun): left to the others for now.
  std::vector<std::string> set_aside;
  /// Workflows with a concurrency limit or a rate limit: no claim makes more of their runs
  /// `running` than the limit allows (per key, when keyed), nor begins more per period.
  std::map<std::string, FlowRule> flows;
  /// A run taken over from a dead owner this many times in a row is failed, not claimed; 0: never.
  int quarantine_after = 0;
};

/// How a run's write came out.
enum class Written : std::uint8_t {
  refused,  ///< nothing written: the run is not running under the writer (cancelled, taken over)
  yes,      ///< written
  /// Written, while a pause of the run is asked for: the writer makes it at its next step
  /// boundary (a write with RunWrite::boundary), before any further step starts.
  pausing,
  paused,  ///< written, and the run paused with it: the writer holds it no longer
};

/// One atomic write for a run: an optional journal entry and an optional change of the run.
struct RunWrite {
  std::string run_id, owner;
  const std::vector<EntryWrite>* entries = nullptr;  ///< journal entries to write, if any
  std::size_t first_seq = 0;  ///< the journal position of the first new entry
  std::size_t new_entries() const {
    std::size_t n = 0;
    if (entries != nullptr) {
      for (const EntryWrite& e : *entries) n += e.is_new ? 1 : 0;
    }
    return n;
  }
  std::optional<Status> status;       ///< the run's new status, when it changes
  std::int64_t due_ms = 0;            ///< sleeping: wake time; running: lease expiry
  std::optional<std::string> output;  ///< completed: the output's JSON text
  std::optional<ErrorInfo> error;     ///< failed
  std::string reason;                 ///< for the state history, with a status change
  int invocations = 0;
  std::int64_t now_ms = 0;
  bool renew_lease = false;    ///< running: move due_ms (the lease expiry) on
  bool clear_crashes = false;  ///< the run made progress: forget its crashed claims
  /// The invocation's own write at a step boundary (no step body of the run is running): a pause
  /// asked for meanwhile is made here, unless the run ends with this write.
  bool boundary = false;
  /// completed by step.continue_as_new: the run that takes over, created in the same
  /// transaction (with the parent of this one, which then answers its parent in its stead).
  std::optional<NewRun> successor;
};

/// A step body's write to its run's stream (Step::write_stream): `value` as JSON text, or none
/// to close the stream. Made only while the run is running under `owner`.
struct StreamValue {
  std::string run_id, owner, stream;
  std::optional<std::string> value;
  std::int64_t now_ms = 0;
};

/// The progress a step body reported (StepContext::heartbeat), as JSON text: kept as the last of
/// its step while the run is running under `owner`.
struct ProgressWrite {
  std::string run_id, owner, key;
  int attempt = 0;
  std::string progress;
  std::int64_t now_ms = 0;
};

/// A process that claims runs: lets another process on the same host tell that it died.
struct Worker {
  std::string id, host;
  std::int64_t pid = 0, start_ticks = 0;
  std::int64_t started_at_ms = 0;  ///< when it registered (workers.started_at)
};

/// A worker's beat: it is seen at now_ms (Store::touch_worker), unless no worker is given, and
/// the leases of the runs it holds, where they are still running under it, move to until_ms.
struct Beat {
  const Worker* worker = nullptr;
  std::string owner;  ///< whose leases move: the worker's id
  std::int64_t now_ms = 0, lease_ms = 0;
  std::string counters;  ///< JSON text; empty: none
  std::vector<std::string> held;
  std::int64_t until_ms = 0;
};

/// What one transaction writes for a runtime (group commit): the runs it starts, its runs'
/// writes, its step bodies' stream values and progress, and its beats.
struct WriteGroup {
  std::vector<const NewRun*> starts;
  std::vector<const RunWrite*> writes;
  std::vector<const StreamValue*> stream_values;
  std::vector<const ProgressWrite*> progress;
  std::vector<const Beat*> beats;
};

/// How a WriteGroup came out, in its order: the id of each start (an idempotency key that names
/// an earlier run gives that run's id), how each write came out, what became of each stream
/// value, and whether each progress was kept.
struct GroupWritten {
  std::vector<std::string> ids;
  std::vector<Written> written;
  std::vector<StreamWrite> streamed;
  std::vector<bool> saved;
};

/// A run, its state history and its journal.
struct RunWithSteps {
  RunInfo run;
  std::vector<StepInfo> steps;
};

/// What a store holds, as operators, callers and replays read it: runs, their journals and steps,
/// what runs made known (published values, streams, progress), the backlog.
class ReadStore {
 public:
  virtual std::optional<RunInfo> get_run(const std::string& id, bool with_history) = 0;
  virtual std::vector<RunInfo> list_runs(const RunFilter& filter) = 0;
  /// The journal of a run in write order; nullopt for an unknown run.
  virtual std::optional<std::vector<StepInfo>> list_steps(const std::string& id) = 0;
  /// get_run() with its history and list_steps(), read from one state of the store.
  virtual std::optional<RunWithSteps> get_run_with_steps(const std::string& id) = 0;
  /// The same journal as the engine reads it.
  virtual std::optional<std::vector<JournalEntry>> journal(const std::string& id) = 0;
  /// The ids of the runs the filter matches (its limit not applied), oldest first. Without
  /// filter.status, only runs whose status is one of `statuses` (any, when that is empty).
  virtual std::vector<std::string> run_ids(const RunFilter& filter,
                                           const std::vector<Status>& statuses) = 0;
  /// A run and its journal, read in one read transaction: as they were together, whatever the
  /// run's worker writes meanwhile. nullopt: no such run.
  virtual std::optional<RecordedRun> recorded_run(const std::string& id) = 0;
  /// The run's published values (Step::publish), of `key` only when given, with whether the
  /// run exists and has ended, read together.
  virtual PublishedRead published(const std::string& run_id,
                                  const std::optional<std::string>& key) = 0;
  /// Up to `limit` values of the run's stream from offset `from`, with its length, whether it
  /// is closed (or the run has ended), and whether the run exists, read together.
  virtual StreamRows read_stream(const std::string& run_id, const std::string& name,
                                 std::int64_t from, std::size_t limit) = 0;
  /// The run's streams by name; nullopt for an unknown run.
  virtual std::optional<std::vector<StreamSummary>> streams_of(const std::string& run_id) = 0;
  /// The progress last kept for the step, if any.
  virtual std::optional<StepProgress> progress(const std::string& run_id,
                                               const std::string& key) = 0;
  /// The progress kept for each step of the run that has not completed, by step key.
  virtual std::vector<StepProgress> progress_of(const std::string& run_id) = 0;
  virtual Backlog backlog(std::int64_t now_ms) = 0;

 protected:
  ~ReadStore() = default;
};

/// A runtime's writes of its runs: one run's (commit) or a group of them with starts, stream
/// values, progress and beats (write_group), each fenced by ownership.
class WriteStore {
 public:
  /// Writes atomically. Written::refused, writing nothing, when the run is no longer running
  /// under this owner (cancelled, or taken over after its lease lapsed).
  virtual Written commit(const RunWrite& write) = 0;
  /// Writes the group in one transaction (group commit): each start as create_run() would, each
  /// run write as commit() would, each stream value and progress only while its run is running
  /// under its owner, each beat as touch_worker() and a renewal of its leases. A throw writes
  /// nothing; a write refused writes nothing of its own and the others go on. The group is as
  /// durable as the most durable of its parts: a start's, a run's write's, a beat's.
  virtual GroupWritten write_group(const WriteGroup& group) = 0;
  /// Transactions that wrote a run's write, committed so far by commit() and write_group() (a
  /// group whose run writes were all refused, or that had none, not counted); for the tests of
  /// group commit.
  virtual std::size_t write_transactions() const = 0;

 protected:
  ~WriteStore() = default;
};

/// Which runs a worker takes: claims, the due queue the worker loop sleeps on, releases.
class ClaimStore {
 public:
  /// Claims due runs (pending and sleeping runs whose time came, running runs whose lease
  /// lapsed or whose owner died) and loads their journals. A run taken over once more than
  /// ClaimRequest::quarantine_after allows is failed instead; a run under suspicion of crashing
  /// its workers is claimed alone, and only by a claimer that holds no other run (`executing`
  /// empty).
  virtual Claimed claim(const ClaimRequest& request) = 0;
  /// The earliest due time of a claimable run of these workflows, leaving out `executing`.
  virtual std::optional<std::int64_t> next_due(const std::vector<std::string>& workflows,
                                               const std::vector<std::string>& executing) = 0;
  /// How many claimable runs of these workflows are due at now_ms, leaving out `executing`,
  /// counted up to `limit`.
  virtual std::size_t due_count(const std::vector<std::string>& workflows,
                                const std::vector<std::string>& executing, std::int64_t now_ms,
                                std::size_t limit) = 0;
  /// Hands a run this owner holds back: pending, due now, for any runtime to go on with. The
  /// reason goes into its history; empty, no history row is written (a run yielding its turn).
  virtual bool release(const std::string& id, const std::string& owner, std::int64_t now_ms,
                       const std::string& reason) = 0;

 protected:
  ~ClaimStore() = default;
};

/// A run's life from outside its worker: creating it, and an operator's or a deadline's changes
/// (cancel, retry, resolve, fork, pause, resume, expire, delete, forget).
class ControlStore {
 public:
  /// Inserts the run, or returns the id of the run of the same workflow and idempotency key.
  virtual std::string create_run(const NewRun& run) = 0;
  /// Cancels the run, or closes it when it failed (cancelled, its error kept); `reason`, when
  /// given, goes into the state history. Returns its status before, read in the same transaction
  /// (nullopt: an unknown run). A completed or cancelled run is left as it is.
  virtual std::optional<Status> cancel(const std::string& id, std::int64_t now_ms,
                                       const std::string& reason) = 0;
  /// Requeues a failed run, its failed steps with fresh attempts. False for an unknown run;
  /// throws RunStateRefused when it is not failed.
  virtual bool retry(const std::string& id, std::int64_t now_ms) = 0;
  /// Completes a failed step of a run with `output` (JSON text), `reason` kept on the step and
  /// in the history, and queues the run again as retry() does (its other failed steps with
  /// fresh attempts). The step must be a step.run that failed for good in a failed run, or is
  /// waiting out a backoff in a run no worker holds now. False for an unknown run; throws
  /// NotFound for a step the run's journal does not hold, and RunStateRefused for a step or run
  /// in another state. `check`, when set, is called in the same transaction, once the step is
  /// found resolvable, with the run as it is before the write; a throw refuses the resolve, with
  /// nothing written, so that what was checked is what is changed.
  using ResolveCheck = std::function<void(const RecordedRun& run)>;
  virtual bool resolve(const std::string& id, const std::string& key, const std::string& output,
                       const std::string& reason, std::int64_t now_ms,
                       const ResolveCheck& check) = 0;
  /// Creates `fork` (its id, workflow, input and correlation id given) as a pending run whose
  /// journal is a copy of the entries run `fork.forked_from` wrote before step `from_key`,
  /// those that had ended (completed or failed) and are not nested in that step. False for an
  /// unknown run; throws NotFound for a step the run's journal does not hold, and
  /// RunStateRefused for a run that has not ended.
  virtual bool fork(NewRun& fork, const std::string& from_key) = 0;
  /// Pauses a run (Runtime::pause): pending, sleeping and waiting runs at once, a running one
  /// (marked pausing) at its owner's next step boundary. Returns the status before (nullopt: an
  /// unknown run); throws
  /// RunStateRefused for a run that has ended. A paused run is left as it is.
  virtual std::optional<Status> pause(const std::string& id, std::int64_t now_ms) = 0;
  /// Resumes a paused or pausing run. Returns the status before (nullopt: unknown); throws
  /// RunStateRefused for a run neither paused nor pausing.
  virtual std::optional<Status> resume(const std::string& id, std::int64_t now_ms) = 0;
  /// Pauses the workflow: every run of it that has not ended, and those created until
  /// resume_workflow(), in one transaction. Returns the runs it paused.
  virtual std::size_t pause_workflow(const std::string& workflow, std::int64_t now_ms) = 0;
  /// Ends pause_workflow(): resumes the runs it paused. Returns how many.
  virtual std::size_t resume_workflow(const std::string& workflow, std::int64_t now_ms) = 0;
  virtual std::vector<std::string> paused_workflows() = 0;
  /// Fails, with TimeoutError, up to `limit` runs that have not ended and whose deadline is at
  /// or before now_ms, earliest first (their children cancelled, their parents answered), in
  /// one transaction. Returns their ids.
  virtual std::vector<std::string> expire(std::int64_t now_ms, std::size_t limit) = 0;
  /// The earliest deadline of a run that has not ended; nullopt: none.
  virtual std::optional<std::int64_t> next_deadline() = 0;
  /// Deletes these runs, where they have ended, with their journals, histories, tags and waits,
  /// in one transaction. Returns how many it deleted.
  virtual std::size_t delete_runs(const std::vector<std::string>& ids) = 0;
  /// Up to `limit` ids of runs that ended before `before_ms` (their last change), oldest first.
  virtual std::vector<std::string> ended_before(std::int64_t before_ms, std::size_t limit) = 0;
  /// Runtime::forget: deletes the data key of the correlation id (so that its payloads read as
  /// forgotten) securely, and cancels its runs that have not ended, in one transaction. Returns
  /// the runs it cancelled. Throws Error when no encryption key file is configured.
  virtual std::vector<std::string> forget(const std::string& correlation_id,
                                          std::int64_t now_ms) = 0;

 protected:
  ~ControlStore() = default;
};

/// Events and messages: storing them completes the waits they match; the workflows events start.
class EventStore {
 public:
  /// Stores an event, completes the waits it matches and starts the runs it triggers, in one
  /// transaction.
  virtual Published publish(const NewEvent& event) = 0;
  /// Stores a message in a run's mailbox and, in the same transaction, completes the run's
  /// waiting receive of its topic with the oldest message there (this one, unless older ones
  /// wait) and wakes the run.
  virtual Sent send_message(const NewMessage& message) = 0;
  /// The sequence number of the last event stored (0: none).
  virtual std::int64_t event_horizon() = 0;
  /// Records that a worker has this workflow (operators see runs of names no worker knows), and
  /// that events of these names, and no others, start its runs (the last add() says which).
  /// `flow`: FlowRule::stored() of its options.
  virtual void register_workflow(const std::string& workflow,
                                 const std::vector<std::string>& events, const std::string& flow,
                                 std::int64_t now_ms) = 0;
  /// Deletes up to `limit` events stored before `before_ms` that no wait can still need (see
  /// store_maintenance.cpp for which), oldest first, in one short write transaction. Returns how
  /// many it deleted: fewer than `limit` means none of that age is left to delete.
  virtual std::size_t purge_events(std::int64_t before_ms, std::size_t limit) = 0;

 protected:
  ~EventStore() = default;
};

/// Schedules and their firing.
class ScheduleStore {
 public:
  /// Inserts or replaces a schedule. A schedule stored with the same id and spec is kept as it
  /// is (its next time and count go on); returns whether anything was written.
  virtual bool put_schedule(const ScheduleRow& schedule, std::int64_t now_ms) = 0;
  virtual bool remove_schedule(const std::string& id) = 0;
  virtual std::vector<ScheduleInfo> list_schedules() = 0;
  virtual std::optional<std::int64_t> next_schedule_at() = 0;
  /// Starts a run for each schedule due at now_ms, once however many due times it missed, and
  /// moves it to next(schedule, now_ms) (nullopt: no more) or removes it when its count is
  /// used up; all in one transaction. Returns the runs started.
  virtual std::vector<std::string> fire_schedules(
      std::int64_t now_ms,
      const std::function<std::optional<std::int64_t>(const ScheduleRow&, std::int64_t)>& next) = 0;

 protected:
  ~ScheduleStore() = default;
};

/// The workers that claim runs: registered, beating, found dead and forgotten.
class WorkerStore {
 public:
  /// Registers the worker, seen at now_ms.
  virtual void register_worker(const Worker& worker, std::int64_t now_ms) = 0;
  /// The worker's heartbeat: records that it was alive at now_ms, claiming runs for `lease_ms`,
  /// with `counters` (JSON text; empty: none) as what it counted so far. It counts as live
  /// (OpsQueries::live_workers) until kLiveLeases leases after; a worker with no heartbeat yet,
  /// for that long after it registered with the default lease. A worker whose row was forgotten
  /// (forget_dead_workers: it had stopped beating for that long) is registered again.
  virtual void touch_worker(const Worker& worker, std::int64_t now_ms, std::int64_t lease_ms,
                            const std::string& counters) = 0;
  /// Forgets the workers not seen for kForgetLeases of their leases that own no running run, on
  /// any host; how many. A dead worker that still owns running runs keeps its row until they are
  /// taken over (a claim after their lease, or at once on its own host), which is what the
  /// takeover and RunInfo::worker read. Also folds the counts of database sessions that ended
  /// (Dialect::fold_counts), so that reading them stays cheap.
  virtual std::size_t forget_dead_workers(std::int64_t now_ms) = 0;
  /// Workers registered from this host.
  virtual std::vector<Worker> workers_on(const std::string& host) = 0;
  /// Forgets a worker that owns no running run (a closed runtime, or a dead process whose runs
  /// were taken over).
  virtual void remove_idle_worker(const std::string& id) = 0;
  /// Owners of running runs other than `self`, with what is known of their process.
  virtual std::vector<Worker> running_owners(const std::string& self) = 0;

 protected:
  ~WorkerStore() = default;
};

/// The whole store, by concern: each part of a runtime works with the narrow interface of its
/// concern; the runtime owns the whole. Implemented once for both databases (SqlStore,
/// src/store/sql_store.hpp).
class Store : public ReadStore,
              public WriteStore,
              public ClaimStore,
              public ControlStore,
              public EventStore,
              public ScheduleStore,
              public WorkerStore {
 public:
  virtual ~Store() = default;

  /// The version stamped on the runs this store creates (RuntimeOptions::version) and on those
  /// of no version it claims; with only_own, claims take no run of another version.
  virtual void set_version(const std::string& version, bool only_own) = 0;
  /// Writes a consistent copy of the whole database to `path`, replacing a file there only once
  /// the copy is complete.
  virtual void copy_to(const std::string& path) = 0;
  /// A number that changes whenever another connection, of this process or another, commits to
  /// the database (this store's own commits may leave it as it is). Cheap (no table is read): a
  /// watcher (Client::wait) looks at it every few milliseconds and reads again only on a change.
  virtual std::int64_t data_version() = 0;
  /// How payloads are stored from now on (RuntimeOptions::codec, encryption_key_file); null,
  /// the default: in the clear. Every payload written is encoded, every one read decoded, by it.
  virtual void set_payloads(std::shared_ptr<const Payloads> payloads) = 0;
};

/// Opens or creates a SQLite store. Throws Error for a file that is not a durable database (left
/// untouched), a corrupt one, or one written by a newer schema.
std::unique_ptr<Store> open_sqlite_store(const std::string& path, Durability durability);

/// How a store opens its file.
enum class Access {
  read_write,  ///< creates and migrates the file as needed
  /// Reads the file as it is: nothing is written to it or beside it, so a file that is
  /// read-only, or on a read-only mount, can be read. Throws Error for a missing file and for
  /// one of an older schema (which only a read-write open migrates). Writes fail.
  read_only,
};
std::unique_ptr<Store> open_sqlite_store(const std::string& path, Durability durability,
                                         Access access);

/// Opens a durable database for reading only: nothing is written to the file or beside it. A
/// file of an older schema version is read from a migrated copy in the temporary directory,
/// removed when the store closes. Throws Error for a missing file, one that is not a durable
/// database, or one written by a newer durable. Its write operations fail (or, on a copy, are
/// lost).
std::unique_ptr<Store> open_sqlite_store_read_only(const std::string& path);

/// Opens a PostgreSQL store (postgres/pg_store.cpp). Throws Error for a server that cannot be
/// reached, wrong credentials, a schema holding tables of durable's names that are not durable's
/// (left untouched), or one written by a newer durable. Access::read_only: every transaction is
/// read-only, and the schema is neither created nor migrated.
std::unique_ptr<Store> open_postgres_store(const std::string& uri, Durability durability,
                                           Access access);
/// A PostgreSQL URI with its password masked (postgres/pg_connection.hpp).
std::string shown_postgres_uri(const std::string& uri);

/// Tells a worker that another process, on this host or another, made runs due (started,
/// woken, retried), so that it claims them at once instead of at its next poll.
class WorkWatch {
 public:
  virtual ~WorkWatch() = default;
  /// Waits up to `timeout`; true when work was announced meanwhile. Throws Error when the
  /// connection it listens on broke: a new watch is needed.
  virtual bool wait(std::chrono::milliseconds timeout) = 0;
};

/// A watch on the database, or nullptr where there is none to have: an SQLite file is watched
/// by polling (its worker loop's poll_interval), as all its writers share one host.
std::unique_ptr<WorkWatch> open_work_watch(const std::string& database);
std::unique_ptr<WorkWatch> open_postgres_work_watch(const std::string& uri);

/// Whether RuntimeOptions::database names a PostgreSQL database (a `postgresql://` or
/// `postgres://` URI) rather than an SQLite file.
bool is_postgres_uri(std::string_view database);
/// The database as messages show it: a file path as given, a URI with its password masked.
std::string shown_database(const std::string& database);
/// The store RuntimeOptions::database names, PostgreSQL for such a URI, else an SQLite file, with
/// the payloads it encodes and decodes (Store::set_payloads; null: in the clear): one call, so
/// that no store is opened without them.
std::unique_ptr<Store> open_store(const std::string& database, Durability durability,
                                  std::shared_ptr<const Payloads> payloads,
                                  Access access = Access::read_write);
/// For reading only (testing::replay): open_sqlite_store_read_only for a file; on PostgreSQL,
/// read-only transactions.
std::unique_ptr<Store> open_store_read_only(const std::string& database,
                                            std::shared_ptr<const Payloads> payloads);

/// A worker is live while its last heartbeat is less than this many of its leases old.
inline constexpr std::int64_t kLiveLeases = 2;
/// A worker's row is forgotten once its last heartbeat is this many of its leases old and it owns
/// no running run (Store::forget_dead_workers). Longer than kLiveLeases: the row of a worker only
/// slow to beat (a paused VM, a stalled disk) is still there for its next heartbeat.
inline constexpr std::int64_t kForgetLeases = 10;
/// The lease of a worker that has not beaten yet (RuntimeOptions::lease's default).
inline constexpr std::int64_t kDefaultLeaseMs = 30'000;

/// The schema version this build writes.
inline constexpr int kSchemaVersion = 21;
/// PRAGMA application_id of a durable database: "DRBL".
inline constexpr std::int32_t kApplicationId = 0x4452424c;

}  // namespace durable::detail
