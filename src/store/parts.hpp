// SPDX-License-Identifier: Apache-2.0
#pragma once
// The parts of the SQL store, by concern, each over the shared SqlTables (store/tables.hpp) and
// given the lower parts it works with; SqlStore (store/sql_store.hpp) holds them and answers
// the Store interface. Lowest first; a part knows only those above it in this file:
//   RunLifecycle   lifecycle.cpp, starts.cpp: the one writer of runs.status, and what a
//                  workflow's rules make of a new run
//   RunReads       runs.cpp: reading and listing runs, their journals and steps
//   WorkerTable    workers.cpp: the workers that claim runs, their leases, finding dead ones
//   RunOutputs     published.cpp, streams.cpp, progress.cpp: what a run makes known while it
//                  runs: published values and tags, streams, the progress of its step bodies
//   Waits          events.cpp, mailbox.cpp, children.cpp: what a run waits for (events,
//                  messages, child runs) and its waking, and a run's end reaching its relations
//   Commits        commits.cpp, transactions.cpp: a run's atomic writes, fenced by ownership
//   Claims         claims.cpp (flow control in flow.cpp): which runs a worker takes
//   Interventions  control.cpp, repairs.cpp, interventions.cpp: what an operator or a deadline
//                  does to runs from outside
//   ScheduleTable  schedules.cpp: schedules and their firing
//
// Invariant kept by Commits: a journal entry is written only while its run is `running` under
// the writing owner, so a cancelled run or one taken over after its lease lapsed never gets a
// result from a step body that was still running elsewhere.
//
// A part's public functions that take no transaction of the caller's begin their own inside
// SqlTables::guarded() or reading(); the others work inside the caller's transaction.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "store/tables.hpp"

namespace durable::detail {

/// One change of a run's status, for RunLifecycle::change_status: the lifecycle's row it makes,
/// the run, and the other columns it writes (updated_at is always `at_ms`).
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

/// The one writer of runs.status: a run's birth and every change of its status, checked
/// against the lifecycle's table and recorded in its history; and the workflows' rules a new
/// run meets (paused workflows, keys, debounce).
class RunLifecycle {
 public:
  explicit RunLifecycle(SqlTables& tables) : t_(tables) {}

  std::string insert_run(const NewRun& run);
  bool change_status(const StatusChange& change);
  /// A line of a run's history where its status does not change (most come with a change).
  void add_history(const std::string& id, std::int64_t at, Status status,
                   const std::string& reason);
  /// The workflows paused now, read inside the caller's transaction.
  std::vector<std::string> read_paused_workflows();

 private:
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
  bool write_new_run(const NewRun& run, const Admitted& rules, Status status);

  SqlTables& t_;
};

/// Reading runs: one, a filtered page of them, their ids, their journals and steps.
class RunReads {
 public:
  explicit RunReads(SqlTables& tables) : t_(tables) {}

  std::optional<RunInfo> get_run(const std::string& id, bool with_history);
  std::optional<RunWithSteps> get_run_with_steps(const std::string& id);
  std::vector<RunInfo> list_runs(const RunFilter& filter);
  std::vector<std::string> run_ids(const RunFilter& filter, const std::vector<Status>& statuses);
  std::optional<RecordedRun> recorded_run(const std::string& id);
  std::optional<std::vector<JournalEntry>> journal(const std::string& id);
  std::optional<std::vector<StepInfo>> list_steps(const std::string& id);

  /// Inside the caller's transaction.
  std::optional<RunInfo> find_run(const std::string& id, bool with_history);
  std::vector<JournalEntry> load_journal(const std::string& id);

 private:
  /// Whether a run could match the filter's keys at all (see findable()).
  static bool filter_findable(const RunFilter& filter);
  RunInfo read_run(sql::Query& query);
  std::string filtered(const RunFilter& filter) const;
  static int bind_filter(sql::Query& query, int index, const RunFilter& filter);
  std::string run_columns() const;
  std::optional<std::vector<StepInfo>> read_steps(const std::string& id);

  SqlTables& t_;
};

/// The workers that claim runs: their rows, the leases of the runs they hold, the dead ones.
class WorkerTable {
 public:
  explicit WorkerTable(SqlTables& tables) : t_(tables) {}

  void register_worker(const Worker& worker, std::int64_t now_ms);
  void touch_worker(const Worker& worker, std::int64_t now_ms, std::int64_t lease_ms,
                    const std::string& counters);
  std::size_t forget_dead_workers(std::int64_t now_ms);
  std::vector<Worker> workers_on(const std::string& host);
  void remove_idle_worker(const std::string& id);
  std::vector<Worker> running_owners(const std::string& self);

  /// A worker seen, and the leases of the runs it holds, inside the caller's transaction.
  void touch(const Worker& worker, std::int64_t now_ms, std::int64_t lease_ms,
             const std::string& counters);
  void renew_leases(const std::string& owner, const std::vector<std::string>& ids,
                    std::int64_t until_ms);

 private:
  /// Deletes the worker's row unless it owns a running run; whether it did.
  bool remove_if_idle(const std::string& id);
  // Writes the worker's whole row, over any row of its id; an empty `counters`, or no lease,
  // is NULL.
  void put_worker(const Worker& worker, std::int64_t started_at_ms, std::int64_t seen_at_ms,
                  std::optional<std::int64_t> lease_ms, const std::string& counters);

  SqlTables& t_;
};

/// What a run makes known of itself while it runs: the values it publishes (Step::publish), the
/// latest per key, and the tags it sets (Step::set_tags); its streams; the progress its step
/// bodies report by heartbeat.
class RunOutputs {
 public:
  explicit RunOutputs(SqlTables& tables) : t_(tables) {}

  PublishedRead published(const std::string& run_id, const std::optional<std::string>& key);
  StreamRows read_stream(const std::string& run_id, const std::string& name, std::int64_t from,
                         std::size_t limit);
  std::optional<std::vector<StreamSummary>> streams_of(const std::string& run_id);
  std::optional<StepProgress> progress(const std::string& run_id, const std::string& key);
  std::vector<StepProgress> progress_of(const std::string& run_id);

  // Inside the caller's transaction:
  /// A step.publish's value, written with its journal entry.
  void write_published(const std::string& run_id, const JournalEntry& entry, std::int64_t now_ms);
  /// A step.set_tags' tags, merged into the run's with its journal entry.
  void merge_tags(const std::string& run_id, const JournalEntry& entry);
  /// A stream's write or close, from a journal entry or a step body; false when the stream was
  /// closed before.
  bool append_stream(const std::string& run_id, const std::string& name,
                     const std::optional<std::string>& value, std::int64_t now_ms);
  StreamWrite write_stream(const StreamValue& value);
  bool save_progress(const ProgressWrite& progress);

 private:
  /// Whether the run has ended (completed, failed or cancelled); nullopt for an unknown run.
  std::optional<bool> run_has_ended(const std::string& run_id);
  /// A row of step_progress (step_key, attempt, progress, at).
  StepProgress read_progress(sql::Query& q, const std::string& run_id);

  SqlTables& t_;
};

/// What a run waits for and its waking: events and their waits, messages and receives, child
/// runs answering their parents; and a run's end reaching those it is bound to (its waits
/// dropped, its children cancelled, its parent answered).
class Waits {
 public:
  Waits(SqlTables& tables, RunLifecycle& lifecycle) : t_(tables), lifecycle_(lifecycle) {}

  Published publish(const NewEvent& event);
  Sent send_message(const NewMessage& message);
  std::int64_t event_horizon();
  void register_workflow(const std::string& workflow, const std::vector<std::string>& events,
                         const std::string& flow, std::int64_t now_ms);
  std::size_t purge_events(std::int64_t before_ms, std::size_t limit);

  // Inside the caller's transaction:
  Published publish_in(const NewEvent& event);
  bool register_wait(const std::string& run_id, const JournalEntry& entry, std::int64_t now_ms);
  void time_out_waits(const std::string& id, std::int64_t now_ms);
  void wake(const std::string& id, std::int64_t now_ms, const std::string& reason);
  /// A new receive of a run's journal: completed at once with the oldest message of its topic
  /// there, if one is; whether it was.
  bool register_receive(const std::string& run_id, const JournalEntry& entry, std::int64_t now_ms);
  /// step.continue_as_new: the messages no receive of `from` took become `to`'s, in their order.
  void carry_messages(const std::string& from, const std::string& to);
  void create_child(const std::string& parent, const JournalEntry& entry, std::int64_t now_ms);
  void resolve_parent(const std::string& id, Status status,
                      const std::optional<std::string>& output,
                      const std::optional<ErrorInfo>& error, std::int64_t now_ms);
  void cancel_in(const std::string& id, std::int64_t now_ms, const std::string& reason);
  /// Ends a run that has not ended as `status` (cancelled, or failed with `error`), its waits
  /// dropped, its children cancelled and its parent answered. False when it had ended already.
  bool end_in(const std::string& id, Status status, const std::optional<ErrorInfo>& error,
              std::int64_t now_ms, const std::string& reason);

 private:
  bool complete_wait(const std::string& run_id, const std::string& key, const json& event,
                     std::int64_t now_ms);
  /// Completes the run's receive `key`, if it waits, with the oldest message on `topic` not yet
  /// received, and marks that message as received by it; whether it did.
  bool take_message(const std::string& run_id, const std::string& key, const std::string& topic,
                    std::int64_t now_ms);

  SqlTables& t_;
  RunLifecycle& lifecycle_;
};

/// A run's atomic writes: its journal entries and its change of status in one transaction,
/// fenced by ownership, alone or with other runs' writes and starts (group commit).
class Commits {
 public:
  Commits(SqlTables& tables, RunLifecycle& lifecycle, Waits& waits, RunOutputs& outputs,
          WorkerTable& workers)
      : t_(tables), lifecycle_(lifecycle), waits_(waits), outputs_(outputs), workers_(workers) {}

  Written commit(const RunWrite& write);
  GroupWritten write_group(const WriteGroup& group);
  std::size_t write_transactions() const { return write_transactions_; }

  /// Inside the caller's transaction: one run's write, if the run is still running under the
  /// writer; and one entry of it.
  Written apply(const RunWrite& write);
  void write_entry(const RunWrite& write, const EntryWrite& entry, std::size_t seq);

 private:
  struct HeldRun {
    bool has_parent;  // read with the owner: a run without one has no parent to answer
    bool pausing;     // a pause was asked for while it ran
    bool gated;       // rate-limited, and no step body of it had begun (FlowGate)
  };
  std::optional<HeldRun> held_for(const RunWrite& write);
  bool write_entries(const RunWrite& write, bool gated);
  void move_run(const RunWrite& write, bool woke, bool has_parent);
  /// The status a run that is paused at a write goes back to on resume, and the write of it.
  void pause_at_write(const RunWrite& write, bool woke);
  bool side_effects(const RunWrite& write, const EntryWrite& entry);
  bool still_waiting(const std::string& run_id);
  void continue_as(const std::string& id, NewRun successor);
  void note_first_body(const std::string& run_id, std::int64_t at_ms);
  /// A Step::transaction's body in a savepoint (transactions.cpp); the entry to write.
  EntryWrite run_transaction(const EntryWrite& write);

  SqlTables& t_;
  RunLifecycle& lifecycle_;
  Waits& waits_;
  RunOutputs& outputs_;
  WorkerTable& workers_;
  std::size_t write_transactions_ = 0;
};

struct ClaimTier;  // claims.cpp

/// Which runs a worker takes and in what order: the dead owners' first, then the due queue by
/// priority, under flow control (FlowGate); leases released; runs that crash their workers
/// quarantined.
class Claims {
 public:
  Claims(SqlTables& tables, RunLifecycle& lifecycle, RunReads& reads, Waits& waits)
      : t_(tables), lifecycle_(lifecycle), reads_(reads), waits_(waits) {}

  Claimed claim(const ClaimRequest& request);
  std::optional<std::int64_t> next_due(const std::vector<std::string>& workflows,
                                       const std::vector<std::string>& executing);
  std::size_t due_count(const std::vector<std::string>& workflows,
                        const std::vector<std::string>& executing, std::int64_t now_ms,
                        std::size_t limit);
  bool release(const std::string& id, const std::string& owner, std::int64_t now_ms,
               const std::string& reason);
  Backlog backlog(std::int64_t now_ms);

 private:
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

  SqlTables& t_;
  RunLifecycle& lifecycle_;
  RunReads& reads_;
  Waits& waits_;
};

/// What an operator or a deadline does to runs from outside: create, cancel, retry, pause and
/// resume (a run or a workflow), resolve a failed step, fork from a step, expire at a deadline,
/// delete ended runs, forget a correlation's data.
class Interventions {
 public:
  Interventions(SqlTables& tables, RunLifecycle& lifecycle, RunReads& reads, Waits& waits,
                RunOutputs& outputs, Commits& commits)
      : t_(tables),
        lifecycle_(lifecycle),
        reads_(reads),
        waits_(waits),
        outputs_(outputs),
        commits_(commits) {}

  std::string create_run(const NewRun& run);
  std::optional<Status> cancel(const std::string& id, std::int64_t now_ms,
                               const std::string& reason);
  bool retry(const std::string& id, std::int64_t now_ms);
  bool resolve(const std::string& id, const std::string& key, const std::string& output,
               const std::string& reason, std::int64_t now_ms, const Store::ResolveCheck& check);
  bool fork(NewRun& fork, const std::string& from_key);
  std::optional<Status> pause(const std::string& id, std::int64_t now_ms);
  std::optional<Status> resume(const std::string& id, std::int64_t now_ms);
  std::size_t pause_workflow(const std::string& workflow, std::int64_t now_ms);
  std::size_t resume_workflow(const std::string& workflow, std::int64_t now_ms);
  std::vector<std::string> paused_workflows();
  std::vector<std::string> expire(std::int64_t now_ms, std::size_t limit);
  std::optional<std::int64_t> next_deadline();
  std::size_t delete_runs(const std::vector<std::string>& ids);
  std::vector<std::string> ended_before(std::int64_t before_ms, std::size_t limit);
  std::vector<std::string> forget(const std::string& correlation_id, std::int64_t now_ms);

 private:
  /// Queues a run again, due now: its failed steps with fresh attempts, its output and error
  /// cleared; `reason` goes into the history, "{}" in it replaced by the count of steps reset.
  /// `from`: its status, read with its row held.
  std::int64_t requeue(const std::string& id, Status from, std::int64_t now_ms, std::string reason);
  /// Pauses a run that has not ended and is not running, inside the caller's transaction;
  /// `by` is the runs.paused mark (kPausedByRun, kPausedByWorkflow).
  bool pause_in(const std::string& id, Status before, int by, std::int64_t now_ms,
                const std::string& reason);
  /// Lets a paused run go on as it was before, inside the caller's transaction.
  void resume_in(const std::string& id, std::int64_t now_ms, const std::string& reason);

  SqlTables& t_;
  RunLifecycle& lifecycle_;
  RunReads& reads_;
  Waits& waits_;
  RunOutputs& outputs_;
  Commits& commits_;
};

/// Schedules (cron and intervals) and their firing, which starts runs.
class ScheduleTable {
 public:
  ScheduleTable(SqlTables& tables, RunLifecycle& lifecycle) : t_(tables), lifecycle_(lifecycle) {}

  bool put_schedule(const ScheduleRow& schedule, std::int64_t now_ms);
  bool remove_schedule(const std::string& id);
  std::vector<ScheduleInfo> list_schedules();
  std::optional<std::int64_t> next_schedule_at();
  std::vector<std::string> fire_schedules(
      std::int64_t now_ms,
      const std::function<std::optional<std::int64_t>(const ScheduleRow&, std::int64_t)>& next);

 private:
  /// A row of schedules, its input decoded (JSON text).
  ScheduleRow read_schedule(sql::Query& query);
  static PayloadAt schedule_input(const std::string& id);
  /// Where a schedule's spec is stored: it holds the input (ScheduleRow::spec).
  static PayloadAt schedule_spec(const std::string& id);

  SqlTables& t_;
  RunLifecycle& lifecycle_;
};

}  // namespace durable::detail
