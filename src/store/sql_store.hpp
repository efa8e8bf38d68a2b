// SPDX-License-Identifier: Apache-2.0
#pragma once
// The store over an SQL database: the durable-execution rules written once, for every database
// that implements sql::Connection (SQLite in sqlite/, PostgreSQL in postgres/). Times are
// milliseconds since the Unix epoch. Split by concern, one source file each:
//   runs.cpp       creating, reading and listing runs; cancel and retry
//   repairs.cpp    an operator's repairs of a run: resolve a failed step, fork from a step
//   control.cpp    run control: pausing and resuming runs and workflows, deadlines
//   starts.cpp     what a workflow's rules make of a new run: paused, its keys, debounced
//   flow.cpp       flow control at claim time: concurrency per key, rate limits
//   claims.cpp     claims, leases, takeovers of dead owners' runs, quarantine, the due queue
//   commits.cpp    a run's atomic writes (fenced by ownership) and its journal
//   events.cpp     events, waits, and the runs events start
//   children.cpp   child runs: created with their invoke step, answering their parent, cancelled
//                  with it
//   schedules.cpp  schedules and their firing
//   workers.cpp    the workers that claim runs, and finding dead ones
//   progress.cpp   the progress step bodies report by heartbeat
//   published.cpp  what a run makes known of itself: the values it publishes (Step::publish),
//                  the latest per key, and the tags it sets (Step::set_tags)
//   transactions.cpp  Step::transaction bodies, in the transaction that journals them
//
// Invariant kept by commit(): a journal entry is written only while its run is `running` under
// the writing owner, so a cancelled run or one taken over after its lease lapsed never gets a
// result from a step body that was still running elsewhere.
//
// Every write is one transaction begun with sql::Connection::begin(). On SQLite that takes the
// file's write lock, so writers are serialized. On a database where writers run side by side
// (PostgreSQL), a transaction first locks the rows its decision rests on (Dialect::lock_row), and
// one that loses a conflict is run again whole (Fault::retry).

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "lifecycle.hpp"
#include "serialization.hpp"
#include "store.hpp"
#include "store/sql.hpp"

namespace durable::detail {

/// The statuses of a run that has not ended and is not paused, as SQL: the predicate of the
/// partial index `runs_claimable`, which the queries that read it repeat verbatim (SQLite uses a
/// partial index only for a query whose terms include its predicate; Statuses::sql says why not
/// an IN list, and docs/performance.md what it cost). PostgreSQL's index keeps its IN list: its
/// planner finds this predicate implies it.
inline const std::string kLiveStatus = kLive.sql();
/// The statuses of a run that has ended, as SQL: the predicate of the partial index `runs_ended`.
inline const std::string kEndedStatus = kEnded.sql();
/// kLiveStatus, or paused: a run that has not ended (the predicate of `runs_deadline`).
inline const std::string kUnendedStatus = kUnended.sql();
/// runs.paused: why a run is paused (or, running, pausing): not at all, by Runtime::pause, or
/// by Runtime::pause_workflow (which resume_workflow undoes).
inline constexpr int kNotPaused = 0;
inline constexpr int kPausedByRun = 1;
inline constexpr int kPausedByWorkflow = 2;

struct ClaimTier;  // claims.cpp

/// One change of a run's status, for SqlStore::change_status: the lifecycle's row it makes, the
/// run, and the other columns it writes (updated_at is always `at_ms`).
struct StatusChange {
  StatusChange(Move move_, std::string run_id_, Status to_, std::int64_t at_ms_,
               std::string reason_ = {}, std::optional<Status> from_ = std::nullopt,
               std::string owner_ = {})
      : move(move_),
        run_id(std::move(run_id_)),
        to(to_),
        at_ms(at_ms_),
        reason(std::move(reason_)),
        from(from_),
        owner(std::move(owner_)) {}

  Move move;
  std::string run_id;
  Status to;
  std::int64_t at_ms = 0;
  /// The history line; the row's own when empty.
  std::string reason;
  /// The status the caller read, its row held in this transaction: the change is checked
  /// against the table, and made only while the row still holds it. None: made from any status
  /// the row leaves (the WHERE holds those).
  std::optional<Status> from;
  /// A fenced row's owner: made only while the run runs under it.
  std::string owner;

  StatusChange& set(std::string_view column, std::int64_t value);
  StatusChange& set(std::string_view column, std::string value);
  StatusChange& set(std::string_view column, std::optional<std::int64_t> value);
  StatusChange& set_null(std::string_view column);
  using Value = std::variant<std::monostate, std::int64_t, std::string>;
  /// An assignment of SQL's own: with one `?` for `value`, or none ("paused_from = status").
  StatusChange& set_sql(std::string assignment, Value value = std::monostate{});

  struct Column {
    std::string assignment;  // "due_at = ?"
    Value value;
  };
  const std::vector<Column>& columns() const { return columns_; }

 private:
  std::vector<Column> columns_;
};

class SqlStore : public Store {
 public:
  /// `name` says which database, in messages: "database '<name>': ...".
  SqlStore(std::unique_ptr<sql::Connection> db, std::string name);

  std::string create_run(const NewRun& run) override;
  std::optional<RunInfo> get_run(const std::string& id, bool with_history) override;
  std::vector<RunInfo> list_runs(const RunFilter& filter) override;
  std::vector<std::string> run_ids(const RunFilter& filter,
                                   const std::vector<Status>& statuses) override;
  std::optional<RecordedRun> recorded_run(const std::string& id) override;
  std::optional<std::vector<StepInfo>> list_steps(const std::string& id) override;
  std::optional<RunWithSteps> get_run_with_steps(const std::string& id) override;
  std::optional<std::vector<JournalEntry>> journal(const std::string& id) override;

  Claimed claim(const ClaimRequest& request) override;
  Written commit(const RunWrite& write) override;
  GroupWritten write_group(const WriteGroup& group) override;
  std::optional<std::int64_t> next_due(const std::vector<std::string>& workflows,
                                       const std::vector<std::string>& executing) override;
  std::size_t due_count(const std::vector<std::string>& workflows,
                        const std::vector<std::string>& executing, std::int64_t now_ms,
                        std::size_t limit) override;
  bool release(const std::string& id, const std::string& owner, std::int64_t now_ms,
               const std::string& reason) override;
  std::optional<Status> cancel(const std::string& id, std::int64_t now_ms,
                               const std::string& reason) override;
  bool retry(const std::string& id, std::int64_t now_ms) override;
  bool resolve(const std::string& id, const std::string& key, const std::string& output,
               const std::string& reason, std::int64_t now_ms, const ResolveCheck& check) override;
  bool fork(NewRun& fork, const std::string& from_key) override;
  std::optional<Status> pause(const std::string& id, std::int64_t now_ms) override;
  std::optional<Status> resume(const std::string& id, std::int64_t now_ms) override;
  std::size_t pause_workflow(const std::string& workflow, std::int64_t now_ms) override;
  std::size_t resume_workflow(const std::string& workflow, std::int64_t now_ms) override;
  std::vector<std::string> paused_workflows() override;
  std::vector<std::string> expire(std::int64_t now_ms, std::size_t limit) override;
  std::optional<std::int64_t> next_deadline() override;
  std::size_t delete_runs(const std::vector<std::string>& ids) override;
  std::vector<std::string> ended_before(std::int64_t before_ms, std::size_t limit) override;
  void set_version(const std::string& version, bool only_own) override {
    version_ = version;
    only_own_version_ = only_own && !version.empty();
  }

  Published publish(const NewEvent& event) override;
  PublishedRead published(const std::string& run_id,
                          const std::optional<std::string>& key) override;
  Sent send_message(const NewMessage& message) override;
  StreamRows read_stream(const std::string& run_id, const std::string& name, std::int64_t from,
                         std::size_t limit) override;
  std::optional<std::vector<StreamSummary>> streams_of(const std::string& run_id) override;
  std::int64_t event_horizon() override;
  void register_workflow(const std::string& workflow, const std::vector<std::string>& events,
                         const std::string& flow, std::int64_t now_ms) override;
  std::size_t purge_events(std::int64_t before_ms, std::size_t limit) override;

  bool put_schedule(const ScheduleRow& schedule, std::int64_t now_ms) override;
  bool remove_schedule(const std::string& id) override;
  std::vector<ScheduleInfo> list_schedules() override;
  std::optional<std::int64_t> next_schedule_at() override;
  std::vector<std::string> fire_schedules(
      std::int64_t now_ms,
      const std::function<std::optional<std::int64_t>(const ScheduleRow&, std::int64_t)>& next)
      override;
  Backlog backlog(std::int64_t now_ms) override;
  std::optional<StepProgress> progress(const std::string& run_id, const std::string& key) override;
  std::vector<StepProgress> progress_of(const std::string& run_id) override;

  void register_worker(const Worker& worker, std::int64_t now_ms) override;
  void touch_worker(const Worker& worker, std::int64_t now_ms, std::int64_t lease_ms,
                    const std::string& counters) override;
  std::size_t forget_dead_workers(std::int64_t now_ms) override;
  std::vector<Worker> workers_on(const std::string& host) override;
  void remove_idle_worker(const std::string& id) override;
  std::vector<Worker> running_owners(const std::string& self) override;

  std::size_t write_transactions() const override { return write_transactions_; }
  void set_payloads(std::shared_ptr<const Payloads> payloads) override {
    // No codec is kept as none at all: stored in the clear, as JSON text.
    const bool clear = payloads == nullptr || payloads->name() == kNoCodec;
    payloads_ = clear ? nullptr : std::move(payloads);
  }
  std::vector<std::string> forget(const std::string& correlation_id, std::int64_t now_ms) override;

 protected:
  sql::Connection& db() { return *db_; }
  const std::string& name() const { return name_; }
  [[noreturn]] void fail(const std::string& what, ErrorCode code = errc::database) const;
  /// Closes the connection; only a destructor that must outlive it calls this.
  void close() { db_.reset(); }

  /// A new connection, set up as the first, after the old one broke (Fault::connection). The
  /// default: none can be made (SQLite's connection to a file does not break).
  virtual std::unique_ptr<sql::Connection> reconnect();

  /// Runs a call to the database, turning a database failure into an Error that names the
  /// database and says what to do. A transaction that lost a conflict with another writer is
  /// run again, whole. After a broken connection the call fails, and the next call first makes
  /// a new connection: the caller (the worker loop, backing off) goes on once the server is back.
  template <class F>
  std::invoke_result_t<F&> guarded(F&& body) {
    for (int attempt = 1;; ++attempt) {
      if (broken_) restore();
      try {
        return body();
      } catch (const sql::Failure& e) {
        if (e.fault() == sql::Fault::retry && attempt < kConflictAttempts) continue;
        if (e.fault() == sql::Fault::connection) broken_ = true;
        fail_with(e);
      }
    }
  }

  /// guarded(), with the body's statements in one read transaction: what they read is one state
  /// of the database (a run and its journal as they were together), and SQLite takes its read
  /// lock once instead of once per statement.
  template <class F>
  std::invoke_result_t<F&> reading(F&& body) {
    return guarded([&] {
      const sql::ReadTransaction snapshot(db());
      return body();
    });
  }

 private:
  /// Runs of a transaction that loses conflicts (deadlocks, serialization failures) before the
  /// call fails.
  static constexpr int kConflictAttempts = 8;

  [[noreturn]] void fail_with(const sql::Failure& e) const;
  void restore();

  // workers.cpp
  /// Deletes the worker's row unless it owns a running run; whether it did.
  bool remove_if_idle(const std::string& id);
  // Writes the worker's whole row, over any row of its id; an empty `counters`, or no lease,
  // is NULL.
  void put_worker(const Worker& worker, std::int64_t started_at_ms, std::int64_t seen_at_ms,
                  std::optional<std::int64_t> lease_ms, const std::string& counters);

  // lifecycle.cpp: the one writer of runs.status.
  std::string insert_run(const NewRun& run);
  bool change_status(const StatusChange& change);
  /// A line of a run's history where its status does not change (most come with a change).
  void add_history(const std::string& id, std::int64_t at, Status status,
                   const std::string& reason);

  // runs.cpp
  bool run_exists(const std::string& id);
  std::optional<RunInfo> find_run(const std::string& id, bool with_history);
  /// Whether a key (a run id, a filter, a schedule id) could be in the store at all: one that
  /// is not is_utf8() was never written, and PostgreSQL would refuse to compare it, so a lookup
  /// of it finds nothing on either store.
  static bool findable(std::string_view key) { return is_utf8(key); }
  /// Whether a run could match the filter's keys at all (see above).
  static bool findable(const RunFilter& filter);
  RunInfo read_run(sql::Query& query);
  std::string filtered(const RunFilter& filter) const;
  static int bind_filter(sql::Query& query, int index, const RunFilter& filter);
  std::string run_columns() const;
  /// Where writers run side by side, waits until no other transaction holds `key`, and holds it
  /// until this one ends (Dialect::lock_key); the transactions that decide on the same thing
  /// (the waits of an event name, the running count of a limited workflow) decide one at a time.
  void lock(const std::string& key);
  /// Tells watching workers, at commit, that runs became due (Dialect::notify_work).
  void announce_work();
  /// The run's status, its row held (Dialect::lock_row) until the transaction ends.
  std::optional<Status> locked_status(const std::string& id);
  /// Queues a run again, due now: its failed steps with fresh attempts, its output and error
  /// cleared; `reason` goes into the history, "{}" in it replaced by the count of steps reset.
  /// `from`: its status, read with its row held.
  std::int64_t requeue(const std::string& id, Status from, std::int64_t now_ms, std::string reason);

  // starts.cpp
  /// What a new run's workflow makes of it (its rules in the workflows and paused_workflows
  /// tables), read inside the caller's transaction.
  struct Admitted {
    bool paused = false;
    std::optional<std::string> flow_key, rate_key, debounce_key;
    std::int64_t due_ms = 0;       ///< not due before: a debounced run's wait
    std::int64_t deadline_ms = 0;  ///< its deadline, the workflow's counted (0: the start's)
    /// A debounced start that replaced the input of the run of its key that waits: that run.
    std::optional<std::string> debounced_into;
  };
  Admitted admit_run(const NewRun& run);
  // lifecycle.cpp
  bool write_new_run(const NewRun& run, const Admitted& rules, Status status);

  // control.cpp
  /// Pauses a run that has not ended and is not running, inside the caller's transaction;
  /// `by` is the runs.paused mark (kPausedByRun, kPausedByWorkflow).
  bool pause_in(const std::string& id, Status before, int by, std::int64_t now_ms,
                const std::string& reason);
  /// Lets a paused run go on as it was before, inside the caller's transaction.
  void resume_in(const std::string& id, std::int64_t now_ms, const std::string& reason);
  /// The workflows paused now, read inside the caller's transaction.
  std::vector<std::string> read_paused_workflows();

  // claims.cpp
  struct Candidate;
  std::vector<Candidate> claimable(const ClaimRequest& request);
  template <class Admit>
  void claim_due(const ClaimRequest& request, std::vector<Candidate>& due,
                 std::vector<std::string>& skip, const Admit& admit);
  void quarantine(const Candidate& run, std::int64_t now_ms);
  void pause_orphan(const Candidate& run, std::int64_t now_ms);
  Claim take(const Candidate& candidate, const ClaimRequest& request);
  static Candidate candidate(sql::Query& row, Status before, int crashes);
  std::string live_runs(std::size_t workflows, std::size_t excluded) const;
  std::string tier_runs(const ClaimTier& tier, std::size_t workflows, std::size_t excluded) const;
  /// " AND workflow IN (?, ...)" for this many workflows, and under only_own_version the
  /// version's condition; bind_workflows() binds its parameters.
  std::string of_workflows(std::size_t workflows) const;
  int bind_workflows(sql::Query& query, int index, const std::vector<std::string>& workflows);
  std::optional<std::int64_t> earliest_due(const std::vector<std::string>& workflows,
                                           const std::vector<std::string>& excluded);

  // progress.cpp
  bool save_progress(const ProgressWrite& progress);
  // workers.cpp, claims.cpp: a worker seen, and the leases of the runs it holds.
  void touch(const Worker& worker, std::int64_t now_ms, std::int64_t lease_ms,
             const std::string& counters);
  void renew_leases(const std::string& owner, const std::vector<std::string>& ids,
                    std::int64_t until_ms);
  // commits.cpp
  Written apply(const RunWrite& write);
  struct HeldRun {
    bool has_parent;  // read with the owner: a run without one has no parent to answer
    bool pausing;     // a pause was asked for while it ran
    bool gated;       // rate-limited, and no step body of it had begun (FlowGate)
  };
  std::optional<HeldRun> held_for(const RunWrite& write);
  bool write_entries(const RunWrite& write, bool gated);
  void move_run(const RunWrite& write, bool woke, bool has_parent);
  /// The fence of a step body's own writes (stream values, progress): whether the run is still
  /// running under `owner`, its row locked until the transaction ends.
  bool held_by(const std::string& run_id, const std::string& owner);
  /// The status a run that is paused at a write goes back to on resume, and the write of it.
  void pause_at_write(const RunWrite& write, bool woke);
  bool side_effects(const RunWrite& write, const EntryWrite& entry);
  bool still_waiting(const std::string& run_id);
  void continue_as(const std::string& id, NewRun successor);
  void write_entry(const RunWrite& write, const EntryWrite& entry, std::size_t seq);
  void note_first_body(const std::string& run_id, std::int64_t at_ms);
  std::vector<JournalEntry> load_journal(const std::string& id);
  std::optional<std::vector<StepInfo>> read_steps(const std::string& id);

  // events.cpp
  Published publish_in(const NewEvent& event);
  bool register_wait(const std::string& run_id, const JournalEntry& entry, std::int64_t now_ms);
  bool complete_wait(const std::string& run_id, const std::string& key, const json& event,
                     std::int64_t now_ms);
  void time_out_waits(const std::string& id, std::int64_t now_ms);
  void wake(const std::string& id, std::int64_t now_ms, const std::string& reason);

  // published.cpp: a step.publish's value, written with its journal entry.
  void write_published(const std::string& run_id, const JournalEntry& entry, std::int64_t now_ms);
  // published.cpp: a step.set_tags' tags, merged into the run's with its journal entry.
  void merge_tags(const std::string& run_id, const JournalEntry& entry);
  // mailbox.cpp
  /// A new receive of a run's journal: completed at once with the oldest message of its topic
  /// there, if one is; whether it was.
  bool register_receive(const std::string& run_id, const JournalEntry& entry, std::int64_t now_ms);
  /// Completes the run's receive `key`, if it waits, with the oldest message on `topic` not yet
  /// received, and marks that message as received by it; whether it did.
  bool take_message(const std::string& run_id, const std::string& key, const std::string& topic,
                    std::int64_t now_ms);
  /// step.continue_as_new: the messages no receive of `from` took become `to`'s, in their order.
  void carry_messages(const std::string& from, const std::string& to);
  /// Sends "RUN_ID/NAME" to the change feeds that listen (PostgreSQL), delivered at commit.
  void announce_change(const std::string& run_id, std::string_view name);

  // streams.cpp: a stream's write or close, from a journal entry or a step body; false when
  // the stream was closed before.
  bool append_stream(const std::string& run_id, const std::string& name,
                     const std::optional<std::string>& value, std::int64_t now_ms);
  StreamWrite write_stream(const StreamValue& value);
  /// Whether the run has ended (completed, failed or cancelled); nullopt for an unknown run.
  std::optional<bool> run_has_ended(const std::string& run_id);

  // children.cpp
  void create_child(const std::string& parent, const JournalEntry& entry, std::int64_t now_ms);
  void resolve_parent(const std::string& id, Status status,
                      const std::optional<std::string>& output,
                      const std::optional<ErrorInfo>& error, std::int64_t now_ms);
  void cancel_in(const std::string& id, std::int64_t now_ms, const std::string& reason);
  /// Ends a run that has not ended as `status` (cancelled, or failed with `error`), its waits
  /// dropped, its children cancelled and its parent answered, inside the caller's transaction.
  /// False when it had ended already.
  bool end_in(const std::string& id, Status status, const std::optional<ErrorInfo>& error,
              std::int64_t now_ms, const std::string& reason);

  // schedules.cpp
  /// A row of schedules, its input decoded (JSON text).
  ScheduleRow read_schedule(sql::Query& query);
  static PayloadAt schedule_input(const std::string& id);
  /// Where a schedule's spec is stored: it holds the input (ScheduleRow::spec).
  static PayloadAt schedule_spec(const std::string& id);

  /// JSON text read back from the database; see runs.cpp. Payloads go through payload().
  json stored(const std::string& text);
  /// A run's tags as runs.tags stores them (a JSON object of strings); what is not a string is
  /// left out.
  static std::map<std::string, std::string> tags_of(const json& stored);
  // payloads.cpp: the choke point of payloads at rest (src/payloads.hpp). encoded() is what to
  // store of a payload's JSON text; payload() the JSON of a stored one, through stored().
  std::string encoded(const PayloadAt& at, std::string_view text);
  /// The slots of a message ("message:<topic>"), a published value ("published:<key>") and a
  /// stream's value ("stream:<name>:<offset>").
  static std::string message_slot(std::string_view topic) {
    return "message:" + std::string(topic);
  }
  static std::string published_slot(std::string_view key) {
    return "published:" + std::string(key);
  }
  static std::string stream_slot(std::string_view name, std::int64_t offset) {
    return "stream:" + std::string(name) + ":" + std::to_string(offset);
  }
  /// The slot of a step's payload: "step:<key>:output", "step:<key>:error".
  static std::string step_slot(std::string_view key, std::string_view part) {
    return "step:" + std::string(key) + ":" + std::string(part);
  }
  json payload(const PayloadAt& at, const std::string& stored_text);
  /// payload() as JSON text (for a value copied to another row, encoded again there).
  std::string payload_text(const PayloadAt& at, const std::string& stored_text);
  /// The stored form of an error: its message encoded, its type and step id (which filters
  /// compare in SQL) in the clear; error_read() reads it back.
  std::string error_stored(const PayloadAt& at, const ErrorInfo& error);
  ErrorInfo error_read(const PayloadAt& at, const std::string& stored_text);
  /// The correlation id of a run ("" for an unknown run), cached: it never changes.
  std::string correlation_of(std::string_view run_id);
  /// Deletes a data key so that its bytes do not stay in the file (Dialect::secure_delete).
  void delete_data_key(const std::string& owner);
  class Keys;
  // transactions.cpp: a Step::transaction's body in a savepoint; the entry to write.
  EntryWrite run_transaction(const EntryWrite& write);
  // progress.cpp: a row of step_progress (step_key, attempt, progress, at).
  StepProgress read_progress(sql::Query& q, const std::string& run_id);

  std::unique_ptr<sql::Connection> db_;
  std::string name_;
  std::size_t write_transactions_ = 0;
  bool broken_ = false;                    // the connection broke: reconnect() before the next call
  std::optional<std::string> unreadable_;  // set by stored(): see there
  std::string version_;                    // set_version()
  std::shared_ptr<const Payloads> payloads_;  // set_payloads(); null: stored in the clear
  std::map<std::string, std::string, std::less<>> correlations_;  // run id -> correlation id
  bool only_own_version_ = false;
};

/// Clock::time_point of a time in milliseconds since the Unix epoch.
Clock::time_point to_time(std::int64_t ms);

}  // namespace durable::detail
