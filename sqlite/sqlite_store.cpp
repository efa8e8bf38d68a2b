// SPDX-License-Identifier: Apache-2.0
// The SQLite store. One file in WAL mode; every write is one IMMEDIATE transaction, so several
// processes can share the file. Times are milliseconds since the Unix epoch.
//
// Invariant kept by commit(): a journal entry is written only while its run is `running` under
// the writing owner, so a cancelled run or one taken over after its lease lapsed never gets a
// result from a step body that was still running elsewhere.

#include <SQLiteCpp/SQLiteCpp.h>
#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <map>
#include <utility>

#include "errors_internal.hpp"
#include "ids.hpp"
#include "serialization.hpp"
#include "store_schema.hpp"
#include "store_sqlite.hpp"

namespace durable::detail {

namespace {

// Crashed claims after which a run is claimed alone (see claimable()). Two, not one: a single
// kill -9 of a worker is common and innocent, and its runs are recovered together as fast as
// before; a batch that crashes twice is suspicious.
constexpr int kIsolateAfter = 2;

constexpr const char* kOwnerCheck = "SELECT status, coalesce(owner, '') FROM runs WHERE id = ?";
constexpr const char* kHistoryInsert =
    "INSERT INTO history (run_id, at, status, reason) VALUES (?, ?, ?, ?)";
constexpr const char* kEntryInsert =
    "INSERT INTO steps (run_id, key, seq, base, kind, state, output, error, attempts, wake_at, "
    "invocation, updated_at, duration_ms, started_at) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
constexpr const char* kEntryUpdate =
    "UPDATE steps SET base = ?4, kind = ?5, state = ?6, output = ?7, error = ?8, attempts = ?9, "
    "wake_at = ?10, invocation = ?11, updated_at = ?12, duration_ms = coalesce(?13, duration_ms), "
    "started_at = coalesce(?14, started_at) "
    "WHERE run_id = ?1 AND key = ?2 "
    "AND ?3 IS NOT NULL";
constexpr const char* kJournalSelect =
    "SELECT key, base, kind, state, output, error, attempts, wake_at, invocation, updated_at, "
    "duration_ms, started_at FROM steps WHERE run_id = ? ORDER BY seq";

Clock::time_point to_time(std::int64_t ms) {
  return Clock::time_point(std::chrono::milliseconds(ms));
}

// A prepared statement kept for reuse across calls (preparing costs as much as a small
// commit). While in use it is reset and its bindings cleared; when the use ends it is reset
// again, so no half-read statement holds a read snapshot of the WAL open.
class StatementCache {
 public:
  explicit StatementCache(SQLite::Database& db) : db_(&db) {}
  SQLite::Statement& get(const std::string& sql) {
    auto& slot = statements_[sql];
    if (!slot) slot = std::make_unique<SQLite::Statement>(*db_, sql);
    slot->tryReset();
    slot->clearBindings();
    return *slot;
  }

 private:
  SQLite::Database* db_;
  std::map<std::string, std::unique_ptr<SQLite::Statement>, std::less<>> statements_;
};

class SqliteStore final : public Store {
 public:
  SqliteStore(const std::string& path, Durability durability)
      : path_(path), schema_version_(look_at(path)), db_(open(path)) {
    db_.setBusyTimeout(10'000);
    // SQLite opens a file it may not write read-only without a word; say so now, not at the
    // first write of a run.
    if (sqlite3_db_readonly(db_.getHandle(), "main") == 1) {
      throw Error(open_error_message(path, SQLITE_READONLY, EACCES, "the file is read-only"));
    }
    try {
      check_and_migrate();
      if (path != ":memory:") {
        const std::string mode = db_.execAndGet("PRAGMA journal_mode=WAL").getString();
        if (mode != "wal") fail("could not switch to WAL mode (got '" + mode + "')");
      }
      db_.exec(durability == Durability::full ? "PRAGMA synchronous=FULL"
                                              : "PRAGMA synchronous=NORMAL");
    } catch (const SQLite::Exception& e) {
      throw open_error(path, e, db_.getHandle());
    }
  }

  /// Opens the file through a read-only connection and writes nothing, not even beside it.
  struct ReadOnly {};
  SqliteStore(const std::string& path, ReadOnly)
      : path_(path), schema_version_(0), db_(std::move(*open_sqlite_reader(path))) {
    db_.setBusyTimeout(10'000);
    try {
      schema_version_ = check_file(db_, path);
    } catch (const SQLite::Exception& e) {
      throw open_error(path, e, db_.getHandle());
    }
    if (schema_version_ == 0) fail("holds no durable runs (an empty database)");
  }

  /// The schema version of the file opened read-only.
  std::int64_t schema_version() const { return schema_version_; }

  /// Copies the database, as this connection sees it, to a new file (VACUUM INTO).
  void snapshot_to(const std::string& path) {
    SQLite::Statement vacuum(db_, "VACUUM INTO ?");
    vacuum.bind(1, path);
    vacuum.exec();
  }

  /// Removes the database file (and its -wal and -shm) once this store is closed.
  void remove_on_close() { remover_.path = path_; }

  std::string create_run(const NewRun& run) override {
    return guarded([&] {
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      std::string id = insert_run(run);
      tx.commit();
      return id;
    });
  }

  std::optional<RunInfo> get_run(const std::string& id, bool with_history) override {
    return guarded([&]() -> std::optional<RunInfo> {
      Cached query(this, std::string(kRunColumns) + " FROM runs r WHERE id = ?");
      query.bind(1, id);
      if (!query.executeStep()) return std::nullopt;
      RunInfo info = read_run(query);
      if (with_history) {
        Cached history(this, "SELECT status, at, reason FROM history WHERE run_id = ? ORDER BY id");
        history.bind(1, id);
        while (history.executeStep()) {
          info.history.push_back(
              {status_from_string(history.getColumn(0).getString()).value_or(Status::pending),
               to_time(history.getColumn(1).getInt64()), history.getColumn(2).getString()});
        }
      }
      return info;
    });
  }

  std::vector<RunInfo> list_runs(const RunFilter& filter) override {
    return guarded([&] {
      std::string sql = std::string(kRunColumns) + " FROM runs r WHERE 1";
      if (filter.status) sql += " AND status = :status";
      if (!filter.workflow.empty()) sql += " AND workflow = :workflow";
      if (!filter.correlation_id.empty()) sql += " AND correlation_id = :correlation";
      sql += " ORDER BY created_at DESC, rowid DESC LIMIT :limit";
      Cached query(this, sql);
      if (filter.status) query.bind(":status", std::string(to_string(*filter.status)));
      if (!filter.workflow.empty()) query.bind(":workflow", filter.workflow);
      if (!filter.correlation_id.empty()) query.bind(":correlation", filter.correlation_id);
      query.bind(":limit", static_cast<int64_t>(std::min<std::size_t>(filter.limit, INT64_MAX)));
      std::vector<RunInfo> runs;
      while (query.executeStep()) runs.push_back(read_run(query));
      return runs;
    });
  }

  void copy_to(const std::string& path) override {
    // VACUUM INTO wants a new file: copy beside the target, then rename over it.
    const std::string part = path + ".part-" + new_id();
    try {
      snapshot_to(part);
      // A -wal or -shm left beside an older file there would be read over the new one.
      for (const char* suffix : {"-wal", "-shm"}) std::filesystem::remove(path + suffix);
      std::filesystem::rename(part, path);
    } catch (const std::exception& e) {
      std::error_code ignored;
      std::filesystem::remove(part, ignored);
      throw Error("could not copy database '" + path_ + "' to '" + path + "': " + e.what());
    }
  }

  std::optional<std::vector<JournalEntry>> journal(const std::string& id) override {
    return guarded([&]() -> std::optional<std::vector<JournalEntry>> {
      if (!run_exists(id)) return std::nullopt;
      return load_journal(id);
    });
  }

  std::optional<std::vector<StepInfo>> list_steps(const std::string& id) override {
    return guarded([&]() -> std::optional<std::vector<StepInfo>> {
      if (!run_exists(id)) return std::nullopt;
      std::vector<StepInfo> steps;
      for (const JournalEntry& e : load_journal(id)) {
        StepInfo info;
        info.id = e.key;
        info.kind = to_string(e.kind);
        info.status = to_string(e.state);
        info.output = e.output;
        info.error = e.error;
        info.attempts = e.attempts;
        if (e.wake_at_ms) info.wake_at = to_time(*e.wake_at_ms);
        if (e.duration_ms) info.duration = std::chrono::milliseconds(*e.duration_ms);
        if (e.started_at_ms) info.started_at = to_time(*e.started_at_ms);
        info.updated_at = to_time(e.updated_at_ms);
        steps.push_back(std::move(info));
      }
      return steps;
    });
  }

  Claimed claim(const ClaimRequest& request) override {
    return guarded([&] {
      Claimed claimed;
      if (request.workflows.empty() || request.limit == 0) return claimed;
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      for (const Candidate& candidate : claimable(request)) {
        if (request.quarantine_after > 0 && candidate.crashes >= request.quarantine_after) {
          quarantine(candidate, request.now_ms);
          claimed.quarantined.push_back(candidate.id);
        } else {
          claimed.runs.push_back(take(candidate, request));
          claimed.runs.back().alone = candidate.crashes >= isolate_after(request);
        }
      }
      tx.commit();
      return claimed;
    });
  }

  bool commit(const RunWrite& w) override {
    return guarded([&] {
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      if (!apply(w)) return false;  // the transaction rolls back: nothing written
      tx.commit();
      ++write_transactions_;
      return true;
    });
  }

  std::vector<bool> commit_all(const std::vector<const RunWrite*>& writes) override {
    return guarded([&] {
      std::vector<bool> written;
      written.reserve(writes.size());
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      for (const RunWrite* w : writes) written.push_back(apply(*w));
      tx.commit();
      ++write_transactions_;
      return written;
    });
  }

 private:
  // Writes one run's change inside the caller's transaction, if the run is still running under
  // the writer; returns whether it was.
  bool apply(const RunWrite& w) {
    {
      Cached owner(this, kOwnerCheck);
      owner.bind(1, w.run_id);
      if (!owner.executeStep() || owner.getColumn(0).getString() != "running" ||
          owner.getColumn(1).getString() != w.owner) {
        return false;
      }
    }
    bool woke = false;  // a wait written here was completed at once by an earlier event
    if (w.clear_crashes) {
      Cached clear(this, "UPDATE runs SET crashes = 0 WHERE id = ?");
      clear.bind(1, w.run_id);
      clear.exec();
    }
    if (w.entries != nullptr) {
      std::size_t seq = w.first_seq;
      for (const EntryWrite& e : *w.entries) {
        write_entry(w, e, e.is_new ? seq++ : 0);
        woke = side_effects(w, e) || woke;
      }
    }
    if (w.status) {
      Cached update(this,
                    "UPDATE runs SET status = ?, due_at = ?, owner = ?, output = ?, error = ?, "
                    "invocations = ?, updated_at = ? WHERE id = ?");
      update.bind(1, std::string(to_string(*w.status)));
      const bool keeps_due = (*w.status == Status::sleeping || *w.status == Status::running ||
                              *w.status == Status::waiting) &&
                             w.due_ms != kNever;
      if (keeps_due)
        update.bind(2, static_cast<int64_t>(w.due_ms));
      else
        update.bind(2);
      if (*w.status == Status::running)
        update.bind(3, w.owner);
      else
        update.bind(3);
      if (w.output)
        update.bind(4, *w.output);
      else
        update.bind(4);
      if (w.error)
        update.bind(5, lenient_dump(error_to_json(*w.error)));
      else
        update.bind(5);
      update.bind(6, w.invocations);
      update.bind(7, static_cast<int64_t>(w.now_ms));
      update.bind(8, w.run_id);
      update.exec();
      add_history(w.run_id, w.now_ms, *w.status, w.reason);
      if (*w.status == Status::waiting && (woke || !still_waiting(w.run_id))) {
        wake(w.run_id, w.now_ms, "what it waited for came while the wait was being journaled");
      }
      if (*w.status == Status::completed || *w.status == Status::failed) {
        resolve_parent(w.run_id, *w.status, w.output, w.error, w.now_ms);
      }
    } else if (w.renew_lease) {
      Cached renew(this,
                   "UPDATE runs SET due_at = ?, invocations = ?, updated_at = ? WHERE id = ?");
      renew.bind(1, static_cast<int64_t>(w.due_ms));
      renew.bind(2, w.invocations);
      renew.bind(3, static_cast<int64_t>(w.now_ms));
      renew.bind(4, w.run_id);
      renew.exec();
    }
    return true;
  }

  // What a new journal entry does beyond being written: a send publishes its event, a wait is
  // registered, an invoke creates its child. Returns whether a wait was completed at once.
  bool side_effects(const RunWrite& w, const EntryWrite& write) {
    const JournalEntry& e = write.entry;
    if (e.kind == StepKind::send && e.state == StepState::completed && write.is_new) {
      NewEvent event;
      event.id = e.output.value("id", "");
      event.name = e.output.value("name", "");
      event.data = e.output.value("data", json::object()).dump();
      event.now_ms = w.now_ms;
      publish_in(event);
    } else if (e.kind == StepKind::event && e.state == StepState::waiting) {
      return register_wait(w.run_id, e, w.now_ms);
    } else if (e.kind == StepKind::invoke && e.state == StepState::waiting) {
      create_child(w.run_id, e, w.now_ms);
    }
    return false;
  }

  bool still_waiting(const std::string& run_id) {
    Cached query(this, "SELECT 1 FROM steps WHERE run_id = ? AND state = 'waiting' LIMIT 1");
    query.bind(1, run_id);
    return query.executeStep();
  }

 public:
  Published publish(const NewEvent& event) override {
    return guarded([&] {
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      Published result = publish_in(event);
      tx.commit();
      return result;
    });
  }

  std::int64_t event_horizon() override {
    return guarded([&] {
      Cached query(this, "SELECT coalesce(max(seq), 0) FROM events");
      query.executeStep();
      return static_cast<std::int64_t>(query.getColumn(0).getInt64());
    });
  }

  void register_workflow(const std::string& workflow, const std::vector<std::string>& events,
                         std::int64_t now_ms) override {
    guarded([&] {
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      Cached known(this, "INSERT OR REPLACE INTO workflows (name, seen_at) VALUES (?, ?)");
      known.bind(1, workflow);
      known.bind(2, static_cast<int64_t>(now_ms));
      known.exec();
      Cached remove(this, "DELETE FROM triggers WHERE workflow = ? AND event NOT IN (" +
                              placeholders(events.size()) + ")");
      remove.bind(1, workflow);
      int i = 2;
      for (const std::string& event : events) remove.bind(i++, event);
      remove.exec();
      for (const std::string& event : events) {
        Cached insert(this, "INSERT OR IGNORE INTO triggers (event, workflow) VALUES (?, ?)");
        insert.bind(1, event);
        insert.bind(2, workflow);
        insert.exec();
      }
      tx.commit();
      return 0;
    });
  }

  bool release(const std::string& id, const std::string& owner, std::int64_t now_ms,
               const std::string& reason) override {
    return guarded([&] {
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      Cached update(this,
                    "UPDATE runs SET status = 'pending', owner = NULL, due_at = ?, updated_at = ? "
                    "WHERE id = ? AND status = 'running' AND owner = ?");
      update.bind(1, static_cast<int64_t>(now_ms));
      update.bind(2, static_cast<int64_t>(now_ms));
      update.bind(3, id);
      update.bind(4, owner);
      const bool released = update.exec() > 0;
      if (released && !reason.empty()) add_history(id, now_ms, Status::pending, reason);
      tx.commit();
      return released;
    });
  }

  bool put_schedule(const ScheduleRow& row, std::int64_t now_ms) override {
    return guarded([&] {
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      {
        Cached same(this, "SELECT 1 FROM schedules WHERE id = ? AND spec = ?");
        same.bind(1, row.id);
        same.bind(2, row.spec);
        if (same.executeStep()) return false;
      }
      Cached insert(this,
                    "INSERT OR REPLACE INTO schedules (id, workflow, input, every_ms, cron, "
                    "remaining, next_at, fired, created_at, updated_at, spec) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
      insert.bind(1, row.id);
      insert.bind(2, row.workflow);
      insert.bind(3, row.input);
      insert.bind(4, static_cast<int64_t>(row.every_ms));
      insert.bind(5, row.cron);
      if (row.remaining)
        insert.bind(6, *row.remaining);
      else
        insert.bind(6);
      insert.bind(7, static_cast<int64_t>(row.next_at));
      insert.bind(8, row.fired);
      insert.bind(9, static_cast<int64_t>(now_ms));
      insert.bind(10, static_cast<int64_t>(now_ms));
      insert.bind(11, row.spec);
      insert.exec();
      tx.commit();
      return true;
    });
  }

  bool remove_schedule(const std::string& id) override {
    return guarded([&] {
      Cached remove(this, "DELETE FROM schedules WHERE id = ?");
      remove.bind(1, id);
      return remove.exec() > 0;
    });
  }

  std::vector<ScheduleInfo> list_schedules() override {
    return guarded([&] {
      std::vector<ScheduleInfo> schedules;
      Cached query(this, std::string(kScheduleColumns) + " WHERE next_at < ? ORDER BY next_at, id");
      query.bind(1, static_cast<int64_t>(kNever));  // used-up schedules are kept, not listed
      while (query.executeStep()) {
        const ScheduleRow row = read_schedule(query);
        ScheduleInfo info;
        info.id = row.id;
        info.workflow = row.workflow;
        info.input = stored(row.input);
        info.every = std::chrono::milliseconds(row.every_ms);
        info.cron = row.cron;
        info.remaining = row.remaining;
        info.next_at = to_time(row.next_at);
        info.fired = row.fired;
        schedules.push_back(std::move(info));
      }
      return schedules;
    });
  }

  std::optional<std::int64_t> next_schedule_at() override {
    return guarded([&]() -> std::optional<std::int64_t> {
      Cached query(this, "SELECT min(next_at) FROM schedules WHERE next_at < ?");
      query.bind(1, static_cast<int64_t>(kNever));
      if (!query.executeStep() || query.getColumn(0).isNull()) return std::nullopt;
      return query.getColumn(0).getInt64();
    });
  }

  std::vector<std::string> fire_schedules(
      std::int64_t now_ms,
      const std::function<std::optional<std::int64_t>(const ScheduleRow&, std::int64_t)>& next)
      override {
    return guarded([&] {
      std::vector<std::string> started;
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      std::vector<ScheduleRow> due;
      {
        Cached query(this, std::string(kScheduleColumns) + " WHERE next_at <= ? ORDER BY next_at");
        query.bind(1, static_cast<int64_t>(now_ms));
        while (query.executeStep()) due.push_back(read_schedule(query));
      }
      for (ScheduleRow& row : due) {
        NewRun run;
        run.id = new_id();
        run.workflow = row.workflow;
        run.correlation_id = new_id();
        // One run per due time of this version of the schedule, whichever runtime fires it.
        run.idempotency_key = "schedule:" + row.id + ":" + std::to_string(row.created_at) + ":" +
                              std::to_string(row.next_at);
        run.input = row.input;
        run.now_ms = run.due_ms = now_ms;
        run.reason = "started by schedule '" + row.id + "'";
        if (insert_run(run) == run.id) started.push_back(run.id);
        ++row.fired;
        if (row.remaining) --*row.remaining;
        const std::optional<std::int64_t> after = next(row, now_ms);
        // Used up: kept with a next time that never comes, so that a schedule() repeated with
        // the same id and spec (at each start of a program) does not start it over.
        const std::int64_t next_at =
            (row.remaining && *row.remaining <= 0) || !after ? kNever : *after;
        Cached update(this,
                      "UPDATE schedules SET next_at = ?, remaining = ?, fired = ?, updated_at = ? "
                      "WHERE id = ?");
        update.bind(1, static_cast<int64_t>(next_at));
        if (row.remaining)
          update.bind(2, *row.remaining);
        else
          update.bind(2);
        update.bind(3, row.fired);
        update.bind(4, static_cast<int64_t>(now_ms));
        update.bind(5, row.id);
        update.exec();
      }
      tx.commit();
      return started;
    });
  }

  Backlog backlog(std::int64_t now_ms) override {
    return guarded([&] {
      Cached query(this,
                   "SELECT count(*), min(due_at) FROM runs WHERE status IN "
                   "('pending', 'sleeping', 'waiting') AND due_at <= ?");
      query.bind(1, static_cast<int64_t>(now_ms));
      Backlog backlog;
      if (query.executeStep()) {
        backlog.depth = static_cast<std::size_t>(query.getColumn(0).getInt64());
        if (!query.getColumn(1).isNull()) backlog.oldest_due_ms = query.getColumn(1).getInt64();
      }
      return backlog;
    });
  }

  std::optional<std::int64_t> next_due(const std::vector<std::string>& workflows,
                                       const std::vector<std::string>& executing) override {
    return guarded([&]() -> std::optional<std::int64_t> {
      if (workflows.empty()) return std::nullopt;
      Cached query(this, "SELECT min(due_at) " + live_runs(workflows.size(), executing.size()));
      bind_live(query, workflows, executing);
      if (!query.executeStep() || query.getColumn(0).isNull()) return std::nullopt;
      return query.getColumn(0).getInt64();
    });
  }

  std::size_t due_count(const std::vector<std::string>& workflows,
                        const std::vector<std::string>& executing, std::int64_t now_ms,
                        std::size_t limit) override {
    return guarded([&]() -> std::size_t {
      if (workflows.empty() || limit == 0) return 0;
      Cached query(this, "SELECT count(*) FROM (SELECT 1 " +
                             live_runs(workflows.size(), executing.size()) +
                             " AND due_at <= ? LIMIT ?)");
      int i = bind_live(query, workflows, executing);
      query.bind(i++, static_cast<int64_t>(now_ms));
      query.bind(i, static_cast<int64_t>(limit));
      query.executeStep();
      return static_cast<std::size_t>(query.getColumn(0).getInt64());
    });
  }

  void renew_leases(const std::string& owner, const std::vector<std::string>& ids,
                    std::int64_t until_ms) override {
    guarded([&] {
      Cached renew(this,
                   "UPDATE runs SET due_at = ? WHERE status = 'running' AND owner = ? AND id IN (" +
                       placeholders(ids.size()) + ")");
      int i = 1;
      renew.bind(i++, static_cast<int64_t>(until_ms));
      renew.bind(i++, owner);
      for (const auto& id : ids) renew.bind(i++, id);
      return renew.exec();
    });
  }

  std::optional<Status> cancel(const std::string& id, std::int64_t now_ms,
                               const std::string& reason) override {
    return guarded([&]() -> std::optional<Status> {
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      Cached status(this, "SELECT status FROM runs WHERE id = ?");
      status.bind(1, id);
      if (!status.executeStep()) return std::nullopt;
      const auto before = status_from_string(status.getColumn(0).getString());
      status.reset();
      const std::string history = reason.empty() ? "cancelled" : "cancelled: " + reason;
      if (before == Status::failed) {
        // Closed, not cancelled midway: its parent heard of the failure when it failed, and its
        // children ended with it. The error stays, for whoever looks at it later.
        Cached close(this,
                     "UPDATE runs SET status = 'cancelled', crashes = 0, updated_at = ? "
                     "WHERE id = ? AND status = 'failed'");
        close.bind(1, static_cast<int64_t>(now_ms));
        close.bind(2, id);
        if (close.exec() > 0) add_history(id, now_ms, Status::cancelled, history);
      } else {
        cancel_in(id, now_ms, history);
      }
      tx.commit();
      return before;
    });
  }

  bool retry(const std::string& id, std::int64_t now_ms) override {
    return guarded([&] {
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      Cached status(this, "SELECT status FROM runs WHERE id = ?");
      status.bind(1, id);
      if (!status.executeStep()) return false;
      const std::string current = status.getColumn(0).getString();
      if (current != "failed") {
        throw RunStateRefused("run " + id + " is " + current +
                              "; only a failed run can be retried");
      }
      Cached steps(
          this,
          "UPDATE steps SET state = 'retrying', attempts = 0, wake_at = NULL, updated_at = ? "
          "WHERE run_id = ? AND state = 'failed'");
      steps.bind(1, static_cast<int64_t>(now_ms));
      steps.bind(2, id);
      const int reset = steps.exec();
      Cached run(this,
                 "UPDATE runs SET status = 'pending', due_at = ?, owner = NULL, output = NULL, "
                 "error = NULL, crashes = 0, updated_at = ? WHERE id = ?");
      run.bind(1, static_cast<int64_t>(now_ms));
      run.bind(2, static_cast<int64_t>(now_ms));
      run.bind(3, id);
      run.exec();
      add_history(id, now_ms, Status::pending,
                  "retry requested; " + std::to_string(reset) + " failed step(s) run again");
      tx.commit();
      return true;
    });
  }

  std::vector<Worker> workers_on(const std::string& host) override {
    return guarded([&] {
      Cached query(this, "SELECT id, host, pid, start_ticks FROM workers WHERE host = ?");
      query.bind(1, host);
      std::vector<Worker> workers;
      while (query.executeStep()) {
        workers.push_back({query.getColumn(0).getString(), query.getColumn(1).getString(),
                           query.getColumn(2).getInt64(), query.getColumn(3).getInt64()});
      }
      return workers;
    });
  }

  void remove_idle_worker(const std::string& id) override {
    guarded([&] {
      Cached remove(this,
                    "DELETE FROM workers WHERE id = ?1 AND NOT EXISTS "
                    "(SELECT 1 FROM runs WHERE owner = ?1 AND status = 'running')");
      remove.bind(1, id);
      remove.exec();
      return 0;
    });
  }

  void register_worker(const Worker& worker, std::int64_t now_ms) override {
    guarded([&] {
      Cached insert(this,
                    "INSERT OR REPLACE INTO workers (id, host, pid, start_ticks, started_at, "
                    "seen_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5)");
      insert.bind(1, worker.id);
      insert.bind(2, worker.host);
      insert.bind(3, static_cast<int64_t>(worker.pid));
      insert.bind(4, static_cast<int64_t>(worker.start_ticks));
      insert.bind(5, static_cast<int64_t>(now_ms));
      insert.exec();
      return 0;
    });
  }

  void touch_worker(const std::string& id, std::int64_t now_ms, std::int64_t lease_ms) override {
    guarded([&] {
      Cached touch(this, "UPDATE workers SET seen_at = ?, lease_ms = ? WHERE id = ?");
      touch.bind(1, static_cast<int64_t>(now_ms));
      touch.bind(2, static_cast<int64_t>(lease_ms));
      touch.bind(3, id);
      return touch.exec();
    });
  }

  std::vector<Worker> running_owners(const std::string& self) override {
    return guarded([&] {
      Cached query(this,
                   "SELECT w.id, w.host, w.pid, w.start_ticks FROM workers w WHERE w.id IN "
                   "(SELECT DISTINCT owner FROM runs WHERE status = 'running' AND owner != ?)");
      query.bind(1, self);
      std::vector<Worker> owners;
      while (query.executeStep()) {
        owners.push_back({query.getColumn(0).getString(), query.getColumn(1).getString(),
                          query.getColumn(2).getInt64(), query.getColumn(3).getInt64()});
      }
      return owners;
    });
  }

  std::size_t write_transactions() const override { return write_transactions_; }

  std::size_t purge_events(std::int64_t before_ms, std::size_t limit) override {
    return guarded([&] { return purge_events_in(db_, before_ms, limit); });
  }

  int synchronous() override {
    return guarded([&] { return db_.execAndGet("PRAGMA synchronous").getInt(); });
  }

  std::int64_t data_version() override {
    return guarded([&] { return db_.execAndGet("PRAGMA data_version").getInt64(); });
  }

  // One use of a cached statement: the call sites read as with a plain SQLite::Statement,
  // and the statement is reset when the use ends.
  class Cached {
   public:
    Cached(SqliteStore* store, const std::string& sql) : statement_(&store->statements_.get(sql)) {}
    ~Cached() { statement_->tryReset(); }
    Cached(const Cached&) = delete;
    Cached& operator=(const Cached&) = delete;
    template <class... A>
    void bind(A&&... args) {
      statement_->bind(std::forward<A>(args)...);
    }
    int exec() { return statement_->exec(); }
    void reset() { statement_->tryReset(); }
    bool executeStep() { return statement_->executeStep(); }
    SQLite::Column getColumn(int index) { return statement_->getColumn(index); }

   private:
    SQLite::Statement* statement_;
  };

 private:
  static constexpr const char* kRunColumns =
      "SELECT id, workflow, correlation_id, status, input, output, error, "
      "max(invocations, (SELECT coalesce(max(invocation), 0) FROM steps s WHERE s.run_id = r.id)), "
      "created_at, updated_at, due_at, coalesce(parent_id, ''), "
      // Who holds a running run: "HOST:PID" of its owner, the host name being the part of the
      // worker's host identity (host_identity() in runtime.cpp) before the first space.
      "(SELECT substr(w.host, 1, instr(w.host || ' ', ' ') - 1) || ':' || w.pid FROM workers w "
      "WHERE w.id = r.owner AND r.status = 'running')";
  static constexpr const char* kScheduleColumns =
      "SELECT id, workflow, input, every_ms, cron, remaining, next_at, fired, created_at FROM "
      "schedules";

  ScheduleRow read_schedule(Cached& q) {
    ScheduleRow row;
    row.id = q.getColumn(0).getString();
    row.workflow = q.getColumn(1).getString();
    row.input = q.getColumn(2).getString();
    row.every_ms = q.getColumn(3).getInt64();
    row.cron = q.getColumn(4).getString();
    if (!q.getColumn(5).isNull()) row.remaining = q.getColumn(5).getInt();
    row.next_at = q.getColumn(6).getInt64();
    row.fired = q.getColumn(7).getInt();
    row.created_at = q.getColumn(8).getInt64();
    return row;
  }

  // A run the request may claim, with its status before the claim and its count of crashed
  // claims, this one's included when the run is taken over from a dead or lapsed owner.
  struct Candidate {
    std::string id;
    Status before = Status::pending;
    int crashes = 0;
  };

  // Runs the request may claim: those of dead owners, then due ones (pending, sleeping or
  // waiting whose time came, running whose lease lapsed). A workflow at its concurrency limit
  // gets no more runs made running.
  //
  // A run taken over counts one more crashed claim: its owner died (or stopped renewing) while
  // holding it. Every run of a crashed batch is suspected alike, since nothing tells which one
  // killed the process. A run suspected kIsolateAfter times or more is claimed alone, so that
  // its next crash is its own: it alone is charged, and the runs it would have taken down with
  // it go on elsewhere. A commit clears the count (the run made progress).
  std::vector<Candidate> claimable(const ClaimRequest& request) {
    std::vector<Candidate> due;
    std::vector<std::string> skip = request.executing;
    // Whether to stop here: an isolated run is claimed alone; one met after others is left for a
    // later claim.
    const int isolate = isolate_after(request);
    const auto admit = [&](Candidate candidate) {
      skip.push_back(candidate.id);
      if (candidate.crashes < isolate) {
        due.push_back(std::move(candidate));
        return false;
      }
      if (!due.empty() || !request.executing.empty()) return false;
      due.push_back(std::move(candidate));
      return true;
    };
    // First the runs of dead owners: a restarted process resumes its crashed runs at once, ahead
    // of the queue. A takeover makes no more runs running, so the limits do not apply.
    for (const std::string& owner : request.dead_owners) {
      if (due.size() >= request.limit) break;
      Cached orphans(this,
                     "SELECT id, crashes FROM runs WHERE status = 'running' AND owner = ? AND "
                     "due_at > ? AND workflow IN (" +
                         placeholders(request.workflows.size()) + ") LIMIT ?");
      int j = 1;
      orphans.bind(j++, owner);
      orphans.bind(j++, static_cast<int64_t>(request.now_ms));
      for (const auto& name : request.workflows) orphans.bind(j++, name);
      orphans.bind(j, static_cast<int64_t>(request.limit - due.size()));
      while (orphans.executeStep()) {
        if (admit({orphans.getColumn(0).getString(), Status::running,
                   orphans.getColumn(1).getInt() + 1})) {
          return due;
        }
      }
    }
    // Then runs whose owner's lease lapsed (a hung or partitioned owner elsewhere): also
    // takeovers, so a workflow at its limit gets them too.
    if (due.size() < request.limit) {
      Cached lapsed(this,
                    "SELECT id, crashes FROM runs WHERE status = 'running' AND due_at <= ? AND "
                    "workflow IN (" +
                        placeholders(request.workflows.size()) + ") AND id NOT IN (" +
                        placeholders(skip.size()) + ") ORDER BY due_at LIMIT ?");
      int j = 1;
      lapsed.bind(j++, static_cast<int64_t>(request.now_ms));
      for (const auto& name : request.workflows) lapsed.bind(j++, name);
      for (const auto& id : skip) lapsed.bind(j++, id);
      lapsed.bind(j, static_cast<int64_t>(request.limit - due.size()));
      while (lapsed.executeStep()) {
        if (admit({lapsed.getColumn(0).getString(), Status::running,
                   lapsed.getColumn(1).getInt() + 1})) {
          return due;
        }
      }
    }
    claim_due(request, due, skip, admit);
    return due;
  }

  // Due runs to start or wake, within the limits, after the takeovers. A batch may fill up with
  // the runs of a workflow at its limit: those are skipped, the workflow dropped, and the query
  // made again.
  template <class Admit>
  void claim_due(const ClaimRequest& request, std::vector<Candidate>& due,
                 std::vector<std::string>& skip, const Admit& admit) {
    std::map<std::string, int> room;  // per limited workflow: runs it may still have made running
    for (const auto& [workflow, limit] : request.limits) {
      Cached count(this, "SELECT count(*) FROM runs WHERE workflow = ? AND status = 'running'");
      count.bind(1, workflow);
      count.executeStep();
      room[workflow] = limit - count.getColumn(0).getInt();
    }
    std::vector<std::string> workflows;
    for (const std::string& name : request.workflows) {
      const auto it = room.find(name);
      if (it == room.end() || it->second > 0) workflows.push_back(name);
    }
    while (due.size() < request.limit && !workflows.empty()) {
      // Read in due order from the partial index: no sort of every due run.
      Cached query(this, "SELECT id, status, workflow, crashes " +
                             live_runs(workflows.size(), skip.size()) +
                             " AND status != 'running' AND due_at <= ? ORDER BY due_at LIMIT ?");
      int i = bind_live(query, workflows, skip);
      query.bind(i++, static_cast<int64_t>(request.now_ms));
      query.bind(i, static_cast<int64_t>(request.limit - due.size()));
      bool full = false, any = false;
      while (query.executeStep()) {
        any = true;
        std::string id = query.getColumn(0).getString();
        const Status status =
            status_from_string(query.getColumn(1).getString()).value_or(Status::pending);
        const int crashes = query.getColumn(3).getInt();
        if (crashes >= isolate_after(request) && (!due.empty() || !request.executing.empty())) {
          skip.push_back(std::move(id));  // claimed alone, by a later claim
          continue;
        }
        const auto limited = room.find(query.getColumn(2).getString());
        if (limited != room.end()) {
          if (limited->second <= 0) {
            skip.push_back(std::move(id));
            full = true;
            continue;
          }
          --limited->second;
        }
        if (admit({std::move(id), status, crashes})) return;
      }
      if (!any || !full) break;
      std::erase_if(workflows, [&](const std::string& name) {
        const auto it = room.find(name);
        return it != room.end() && it->second <= 0;
      });
    }
  }

  // Crashed claims from which a run is claimed alone: kIsolateAfter, or fewer when the
  // quarantine comes sooner, so that the last crash before it is the run's own.
  static int isolate_after(const ClaimRequest& request) {
    return request.quarantine_after > 0 ? std::min(kIsolateAfter, request.quarantine_after - 1)
                                        : kIsolateAfter;
  }

  // Fails a run that crashed its worker request.quarantine_after times, inside claim()'s
  // transaction, instead of claiming it again: retried forever, it would kill every worker that
  // takes it, first thing after each restart.
  void quarantine(const Candidate& run, std::int64_t now_ms) {
    const std::string message =
        "quarantined: the worker holding this run died " + std::to_string(run.crashes) +
        " times in a row before the run could journal anything (a crash in its workflow code or a "
        "step body: a segmentation fault, an abort, a stack overflow, the out-of-memory killer). "
        "Find the cause in the workers' logs or core dumps, deploy a fix, then retry the run";
    const ErrorInfo error{"durable::Quarantined", message, {}, 0};
    Cached update(this,
                  "UPDATE runs SET status = 'failed', owner = NULL, due_at = NULL, error = ?, "
                  "crashes = ?, updated_at = ? WHERE id = ?");
    update.bind(1, lenient_dump(error_to_json(error)));
    update.bind(2, run.crashes);
    update.bind(3, static_cast<int64_t>(now_ms));
    update.bind(4, run.id);
    update.exec();
    add_history(run.id, now_ms, Status::failed, message);
    resolve_parent(run.id, Status::failed, std::nullopt, error, now_ms);
  }

  // Claims one run inside claim()'s transaction: owner and lease, sleeps that are over marked
  // completed, the journal loaded, the transition recorded.
  Claim take(const Candidate& candidate, const ClaimRequest& request) {
    const std::string& id = candidate.id;
    const Status before = candidate.before;
    Claim claim;
    claim.lease_until_ms = request.now_ms + request.lease_ms;
    claim.crashes = candidate.crashes;
    Cached update(
        this,
        "UPDATE runs SET status = 'running', owner = ?, due_at = ?, updated_at = ?, "
        "crashes = ? WHERE id = ? RETURNING workflow, correlation_id, input, invocations");
    update.bind(1, request.owner);
    update.bind(2, static_cast<int64_t>(claim.lease_until_ms));
    update.bind(3, static_cast<int64_t>(request.now_ms));
    update.bind(4, candidate.crashes);
    update.bind(5, id);
    if (!update.executeStep()) bug("run " + id + " vanished while being claimed");
    unreadable_.reset();
    claim.run.id = id;
    claim.run.workflow = update.getColumn(0).getString();
    claim.run.correlation_id = update.getColumn(1).getString();
    claim.run.input = stored(update.getColumn(2).getString());
    claim.run.invocations = update.getColumn(3).getInt();
    while (update.executeStep()) {
    }
    // Sleep entries are left sleeping by a sleeping run, or by a resident one (running) that
    // slept in place; wait entries only by a waiting run. A pending run has neither.
    if (before == Status::sleeping || before == Status::running) {
      Cached end_sleeps(this,
                        "UPDATE steps SET state = 'completed', updated_at = ?1 "
                        "WHERE run_id = ?2 AND state = 'sleeping' AND wake_at <= ?1");
      end_sleeps.bind(1, static_cast<int64_t>(request.now_ms));
      end_sleeps.bind(2, id);
      end_sleeps.exec();
    }
    if (before == Status::waiting) time_out_waits(id, request.now_ms);
    for (JournalEntry& entry : load_journal(id)) {
      claim.run.invocations = std::max(claim.run.invocations, entry.invocation);
      claim.run.journal.append(std::move(entry));
    }
    claim.run.next_seq = claim.run.journal.size();
    claim.unreadable = std::exchange(unreadable_, std::nullopt);
    add_history(id, request.now_ms, Status::running, claim_reason(before));
    return claim;
  }

  // Inserts a run inside the caller's transaction, or returns the run of the same workflow and
  // idempotency key.
  std::string insert_run(const NewRun& run) {
    if (!run.idempotency_key.empty()) {
      Cached existing(this, "SELECT id FROM runs WHERE workflow = ? AND idempotency_key = ?");
      existing.bind(1, run.workflow);
      existing.bind(2, run.idempotency_key);
      if (existing.executeStep()) return existing.getColumn(0).getString();
    }
    Cached insert(this,
                  "INSERT INTO runs (id, workflow, correlation_id, idempotency_key, status, input, "
                  "due_at, created_at, updated_at, parent_id, parent_step) "
                  "VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?)");
    insert.bind(1, run.id);
    insert.bind(2, run.workflow);
    insert.bind(3, run.correlation_id);
    bind_text_or_null(insert, 4, run.idempotency_key);
    insert.bind(5, run.input);
    insert.bind(6, static_cast<int64_t>(run.due_ms));
    insert.bind(7, static_cast<int64_t>(run.now_ms));
    insert.bind(8, static_cast<int64_t>(run.now_ms));
    bind_text_or_null(insert, 9, run.parent_id);
    bind_text_or_null(insert, 10, run.parent_step);
    insert.exec();
    std::string reason = run.reason.empty() ? "started" : run.reason;
    if (run.due_ms > run.now_ms) reason += "; delayed until its start time";
    add_history(run.id, run.now_ms, Status::pending, reason);
    return run.id;
  }

  static void bind_text_or_null(Cached& statement, int index, const std::string& text) {
    if (text.empty()) {
      statement.bind(index);
    } else {
      statement.bind(index, text);
    }
  }

  // A waiting run whose wait is over becomes pending, due now.
  void wake(const std::string& id, std::int64_t now_ms, const std::string& reason) {
    Cached update(this,
                  "UPDATE runs SET status = 'pending', due_at = ?, updated_at = ? "
                  "WHERE id = ? AND status = 'waiting'");
    update.bind(1, static_cast<int64_t>(now_ms));
    update.bind(2, static_cast<int64_t>(now_ms));
    update.bind(3, id);
    if (update.exec() > 0) add_history(id, now_ms, Status::pending, reason);
  }

  // Completes a waiting event step with the event (null: timed out); false if it was not waiting.
  bool complete_wait(const std::string& run_id, const std::string& key, const json& event,
                     std::int64_t now_ms) {
    Cached update(this,
                  "UPDATE steps SET state = 'completed', output = ?, updated_at = ? "
                  "WHERE run_id = ? AND key = ? AND state = 'waiting'");
    if (event.is_null()) {
      update.bind(1);
    } else {
      update.bind(1, event.dump());
    }
    update.bind(2, static_cast<int64_t>(now_ms));
    update.bind(3, run_id);
    update.bind(4, key);
    const bool completed = update.exec() > 0;
    Cached remove(this, "DELETE FROM waits WHERE run_id = ? AND key = ?");
    remove.bind(1, run_id);
    remove.bind(2, key);
    remove.exec();
    return completed;
  }

  static bool matches(const json& match, const json& data) {
    if (match.empty()) return true;
    if (!data.is_object()) return false;
    for (const auto& [field, value] : match.items()) {
      const auto it = data.find(field);
      if (it == data.end() || *it != value) return false;
    }
    return true;
  }

  json event_json(const std::string& id, const std::string& name, const std::string& data,
                  std::int64_t at) {
    return {{"id", id}, {"name", name}, {"data", stored(data)}, {"time", at}};
  }

  // A new wait of a run's journal: registered for the events to come, and completed at once by
  // one stored since the wait began (sent while the invocation was reaching the wait).
  bool register_wait(const std::string& run_id, const JournalEntry& e, std::int64_t now_ms) {
    const std::string event = e.output.value("event", "");
    const json match = e.output.value("match", json::object());
    const std::int64_t since = e.output.value("since", std::int64_t{0});
    Cached insert(this,
                  "INSERT OR REPLACE INTO waits (run_id, key, event, match, since) "
                  "VALUES (?, ?, ?, ?, ?)");
    insert.bind(1, run_id);
    insert.bind(2, e.key);
    insert.bind(3, event);
    insert.bind(4, match.dump());
    insert.bind(5, static_cast<int64_t>(since));
    insert.exec();
    Cached earlier(this, "SELECT id, data, at FROM events WHERE name = ? AND seq > ? ORDER BY seq");
    earlier.bind(1, event);
    earlier.bind(2, static_cast<int64_t>(since));
    while (earlier.executeStep()) {
      const std::string data = earlier.getColumn(1).getString();
      if (!matches(match, stored(data))) continue;
      const json found = event_json(earlier.getColumn(0).getString(), event, data,
                                    earlier.getColumn(2).getInt64());
      earlier.reset();
      return complete_wait(run_id, e.key, found, now_ms);
    }
    return false;
  }

  // A child run for a new invoke entry of `parent`, created with the entry: exactly once.
  void create_child(const std::string& parent, const JournalEntry& e, std::int64_t now_ms) {
    Cached correlation(this, "SELECT correlation_id FROM runs WHERE id = ?");
    correlation.bind(1, parent);
    NewRun child;
    child.correlation_id = correlation.executeStep() ? correlation.getColumn(0).getString() : "";
    child.id = e.output.value("run", "");
    child.workflow = e.output.value("workflow", "");
    child.input = e.output.value("input", json::object()).dump();
    child.now_ms = child.due_ms = now_ms;
    child.parent_id = parent;
    child.parent_step = e.key;
    child.reason = "started by run " + parent + " (step '" + e.key + "')";
    insert_run(child);
  }

  // A run that ended: the parent waiting on it in an invoke step gets its output, or a failure.
  void resolve_parent(const std::string& id, Status status,
                      const std::optional<std::string>& output,
                      const std::optional<ErrorInfo>& error, std::int64_t now_ms) {
    Cached query(this,
                 "SELECT parent_id, parent_step, workflow FROM runs WHERE id = ? "
                 "AND parent_id IS NOT NULL");
    query.bind(1, id);
    if (!query.executeStep()) return;
    const std::string parent = query.getColumn(0).getString();
    const std::string key = query.getColumn(1).getString();
    const std::string workflow = query.getColumn(2).getString();
    query.reset();
    Cached update(this,
                  "UPDATE steps SET state = ?, output = ?, error = ?, updated_at = ? "
                  "WHERE run_id = ? AND key = ? AND state = 'waiting' "
                  // a child of an earlier attempt of the step (before a retry) answers nothing
                  "AND json_extract(output, '$.run') = ?");
    std::string what;
    if (status == Status::completed) {
      update.bind(1, "completed");
      json result = {
          {"run", id}, {"workflow", workflow}, {"output", output ? stored(*output) : json()}};
      update.bind(2, result.dump());
      update.bind(3);
      what = "completed";
    } else {
      ErrorInfo failure = error.value_or(ErrorInfo{"durable::Error", "", "", 0});
      failure.message = "child run " + id + " of '" + workflow + "' " +
                        (status == Status::cancelled ? "was cancelled" : "failed") +
                        (failure.message.empty() ? "" : ": " + failure.message);
      if (status == Status::cancelled) failure.type = "durable::Error";
      failure.step_id = key;
      failure.attempts = 1;
      update.bind(1, "failed");
      update.bind(2);
      update.bind(3, lenient_dump(error_to_json(failure)));
      what = status == Status::cancelled ? "was cancelled" : "failed";
    }
    update.bind(4, static_cast<int64_t>(now_ms));
    update.bind(5, parent);
    update.bind(6, key);
    update.bind(7, id);
    if (update.exec() > 0) wake(parent, now_ms, "child run " + id + " " + what);
  }

  // Stores an event inside the caller's transaction and delivers it.
  Published publish_in(const NewEvent& event) {
    Published result;
    Cached insert(this, "INSERT INTO events (id, name, data, at) VALUES (?, ?, ?, ?)");
    insert.bind(1, event.id);
    insert.bind(2, event.name);
    insert.bind(3, event.data);
    insert.bind(4, static_cast<int64_t>(event.now_ms));
    insert.exec();
    result.seq = db_.getLastInsertRowid();
    const json data = stored(event.data);
    const json full = event_json(event.id, event.name, event.data, event.now_ms);
    std::vector<std::pair<std::string, std::string>> matched;  // run, key
    {
      Cached waits(this, "SELECT run_id, key, match FROM waits WHERE event = ? AND since < ?");
      waits.bind(1, event.name);
      waits.bind(2, static_cast<int64_t>(result.seq));
      while (waits.executeStep()) {
        if (matches(stored(waits.getColumn(2).getString()), data)) {
          matched.emplace_back(waits.getColumn(0).getString(), waits.getColumn(1).getString());
        }
      }
    }
    for (const auto& [run, key] : matched) {
      if (complete_wait(run, key, full, event.now_ms)) {
        wake(run, event.now_ms, "event '" + event.name + "' arrived (" + key + ")");
        ++result.woken;
      }
    }
    std::vector<std::string> workflows;
    {
      Cached triggers(this, "SELECT workflow FROM triggers WHERE event = ?");
      triggers.bind(1, event.name);
      while (triggers.executeStep()) workflows.push_back(triggers.getColumn(0).getString());
    }
    for (const std::string& workflow : workflows) {
      NewRun run;
      run.id = new_id();
      run.workflow = workflow;
      run.correlation_id = new_id();
      run.idempotency_key = "event:" + event.id;
      run.input = full.dump();
      run.now_ms = run.due_ms = event.now_ms;
      run.reason = "started by event '" + event.name + "'";
      result.started.push_back(insert_run(run));
    }
    return result;
  }

  // Cancels a run that has not ended, and its children, inside the caller's transaction.
  void cancel_in(const std::string& id, std::int64_t now_ms, const std::string& reason) {
    Cached update(
        this,
        "UPDATE runs SET status = 'cancelled', due_at = NULL, owner = NULL, updated_at = ? "
        "WHERE id = ? AND status IN ('pending', 'running', 'sleeping', 'waiting')");
    update.bind(1, static_cast<int64_t>(now_ms));
    update.bind(2, id);
    if (update.exec() == 0) return;
    add_history(id, now_ms, Status::cancelled, reason);
    Cached waits(this, "DELETE FROM waits WHERE run_id = ?");
    waits.bind(1, id);
    waits.exec();
    std::vector<std::string> children;
    {
      Cached query(this,
                   "SELECT id FROM runs WHERE parent_id = ? AND status IN "
                   "('pending', 'running', 'sleeping', 'waiting')");
      query.bind(1, id);
      while (query.executeStep()) children.push_back(query.getColumn(0).getString());
    }
    for (const std::string& child : children) {
      cancel_in(child, now_ms, "cancelled with its parent run " + id);
    }
    resolve_parent(id, Status::cancelled, std::nullopt, std::nullopt, now_ms);
  }

  // Completes the event waits of a run whose timeout passed, with no event.
  void time_out_waits(const std::string& id, std::int64_t now_ms) {
    std::vector<std::string> keys;
    {
      Cached query(this,
                   "SELECT key FROM steps WHERE run_id = ? AND kind = 'event' AND "
                   "state = 'waiting' AND wake_at <= ?");
      query.bind(1, id);
      query.bind(2, static_cast<int64_t>(now_ms));
      while (query.executeStep()) keys.push_back(query.getColumn(0).getString());
    }
    for (const std::string& key : keys) complete_wait(id, key, json(), now_ms);
  }

  // Validates an existing file through a read-only connection, before any read-write one is
  // opened: closing a read-write connection could checkpoint a foreign file's leftover WAL into
  // it. Returns its schema version (0 for a new or empty file).
  static std::int64_t look_at(const std::string& path) {
    std::error_code ignored;
    if (path == ":memory:" || std::filesystem::file_size(path, ignored) == 0 || ignored) return 0;
    std::unique_ptr<SQLite::Database> look;
    try {
      look = std::make_unique<SQLite::Database>(path, SQLite::OPEN_READONLY);
      return check_file(*look, path);
    } catch (const SQLite::Exception& e) {
      // Kept open until here so that its errno tells a read-only mount from a full disk.
      throw open_error(path, e, look ? look->getHandle() : nullptr);
    }
  }

  static SQLite::Database open(const std::string& path) {
    try {
      return SQLite::Database(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    } catch (const SQLite::Exception& e) {
      throw open_error(path, e, nullptr);
    }
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("database '" + path_ + "': " + what);
  }

  template <class F>
  std::invoke_result_t<F&> guarded(F&& body) {
    try {
      return body();
    } catch (const SQLite::Exception& e) {
      fail(std::string(e.what()) + (e.getErrorCode() == SQLITE_FULL
                                        ? " (the disk is full: free space, then retry; nothing "
                                          "was written by the failed operation)"
                                        : ""));
    }
  }

  // Validates the file before anything writes to it, then brings its schema up to date. The
  // look is made through a read-only connection: a read-write one could checkpoint a foreign
  // file's leftover WAL into it when closed.
  void check_and_migrate() {
    const std::int64_t version = schema_version_;
    if (version == kSchemaVersion) return;
    SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
    // Another process may have migrated it while we waited for the write lock.
    const std::int64_t current = check_file(db_, path_);
    for (std::int64_t v = current; v < kSchemaVersion; ++v) db_.exec(kMigrations[v]);
    db_.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
    db_.exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
    tx.commit();
  }

  // The schema version of a file that is durable's (0: empty), or an error saying whose it is.
  static std::int64_t check_file(SQLite::Database& db, const std::string& path) {
    const auto fail = [&](const std::string& what) {
      throw Error("database '" + path + "': " + what);
    };
    const std::int64_t application_id = db.execAndGet("PRAGMA application_id").getInt64();
    const std::int64_t version = db.execAndGet("PRAGMA user_version").getInt64();
    const std::int64_t objects = db.execAndGet("SELECT count(*) FROM sqlite_schema").getInt64();
    if (application_id != kApplicationId && !(application_id == 0 && objects == 0)) {
      fail("not a durable database (it is an SQLite file of another application: application_id " +
           std::to_string(application_id) + ", " + std::to_string(objects) +
           " schema objects); it was left untouched. Point RuntimeOptions::database at another "
           "file");
    }
    if (version > kSchemaVersion) {
      fail("written by a newer durable (schema version " + std::to_string(version) +
           "; this build knows up to " + std::to_string(kSchemaVersion) +
           "); it was left untouched. Upgrade durable to open it");
    }
    return version;
  }

  static std::string placeholders(std::size_t n) {
    std::string text;
    for (std::size_t i = 0; i < n; ++i) text += i == 0 ? "?" : ", ?";
    return text;
  }

  // The live runs of these workflows but the excluded ones, from the partial index that holds
  // them in due order: the runs a claim may take, for next_due, due_count and claim_due alike.
  // bind_live binds its parameters and returns the next parameter's index.
  static std::string live_runs(std::size_t workflows, std::size_t excluded) {
    return "FROM runs INDEXED BY runs_claimable WHERE status IN ('pending', 'sleeping', "
           "'waiting', 'running') AND workflow IN (" +
           placeholders(workflows) + ") AND id NOT IN (" + placeholders(excluded) + ")";
  }
  static int bind_live(Cached& query, const std::vector<std::string>& workflows,
                       const std::vector<std::string>& excluded) {
    int i = 1;
    for (const auto& name : workflows) query.bind(i++, name);
    for (const auto& id : excluded) query.bind(i++, id);
    return i;
  }

  static std::string claim_reason(Status before) {
    switch (before) {
      case Status::pending:
        return "claimed";
      case Status::sleeping:
        return "woke up";
      case Status::waiting:
        return "woke up: the wait timed out";
      default:
        return "taken over: the previous owner's lease lapsed or its process died";
    }
  }

  // JSON text read back from the file. Text nested deeper than kMaxStoredDepth can only have been
  // written before the limit or by another tool; parsed, it would crash whatever copies or
  // writes it on a small stack. It reads as a string saying so, and unreadable_ records it, so
  // that claim() fails such a run instead of executing it.
  json stored(const std::string& text) {
    if (auto problem = too_deep_text(text, kMaxStoredDepth)) {
      unreadable_ = "a value stored in it cannot be read: " + *problem;
      return "<unreadable: nested more than " + std::to_string(kMaxStoredDepth) + " levels deep>";
    }
    return json::parse(text);
  }

  bool run_exists(const std::string& id) {
    Cached query(this, "SELECT 1 FROM runs WHERE id = ?");
    query.bind(1, id);
    return query.executeStep();
  }

  void add_history(const std::string& id, std::int64_t at, Status status,
                   const std::string& reason) {
    Cached insert(this, kHistoryInsert);
    insert.bind(1, id);
    insert.bind(2, static_cast<int64_t>(at));
    insert.bind(3, std::string(to_string(status)));
    insert.bind(4, reason);
    insert.exec();
  }

  void write_entry(const RunWrite& w, const EntryWrite& write, std::size_t seq) {
    const JournalEntry& e = write.entry;
    Cached s(this, write.is_new ? kEntryInsert : kEntryUpdate);
    s.bind(1, w.run_id);
    s.bind(2, e.key);
    s.bind(3, static_cast<int64_t>(seq));
    s.bind(4, e.base);
    s.bind(5, std::string(to_string(e.kind)));
    s.bind(6, std::string(to_string(e.state)));
    const bool has_output = e.kind == StepKind::run
                                ? e.state == StepState::completed
                                : e.kind != StepKind::sleep && !e.output.is_null();
    if (!has_output) {
      s.bind(7);
    } else if (!e.output_text.empty()) {
      s.bind(7, e.output_text);
    } else {
      s.bind(7, e.output.dump());
    }
    if (e.error)
      s.bind(8, lenient_dump(error_to_json(*e.error)));
    else
      s.bind(8);
    s.bind(9, e.attempts);
    if (e.wake_at_ms)
      s.bind(10, static_cast<int64_t>(*e.wake_at_ms));
    else
      s.bind(10);
    s.bind(11, e.invocation);
    s.bind(12, static_cast<int64_t>(w.now_ms));
    if (e.duration_ms)
      s.bind(13, static_cast<int64_t>(*e.duration_ms));
    else
      s.bind(13);
    if (e.started_at_ms)
      s.bind(14, static_cast<int64_t>(*e.started_at_ms));
    else
      s.bind(14);
    s.exec();
  }

  std::vector<JournalEntry> load_journal(const std::string& id) {
    Cached q(this, kJournalSelect);
    q.bind(1, id);
    std::vector<JournalEntry> entries;
    while (q.executeStep()) {
      JournalEntry e;
      e.key = q.getColumn(0).getString();
      e.base = q.getColumn(1).getString();
      const auto kind = step_kind_from_string(q.getColumn(2).getString());
      const auto state = step_state_from_string(q.getColumn(3).getString());
      if (!kind || !state)
        fail("the journal of run " + id + " has an entry of unknown kind or state");
      e.kind = *kind;
      e.state = *state;
      if (!q.getColumn(4).isNull()) e.output = stored(q.getColumn(4).getString());
      if (!q.getColumn(5).isNull()) e.error = error_from_json(stored(q.getColumn(5).getString()));
      e.attempts = q.getColumn(6).getInt();
      if (!q.getColumn(7).isNull()) e.wake_at_ms = q.getColumn(7).getInt64();
      e.invocation = q.getColumn(8).getInt();
      e.updated_at_ms = q.getColumn(9).getInt64();
      if (!q.getColumn(10).isNull()) e.duration_ms = q.getColumn(10).getInt64();
      if (!q.getColumn(11).isNull()) e.started_at_ms = q.getColumn(11).getInt64();
      entries.push_back(std::move(e));
    }
    return entries;
  }

  RunInfo read_run(Cached& q) {
    RunInfo info;
    info.id = q.getColumn(0).getString();
    info.workflow = q.getColumn(1).getString();
    info.correlation_id = q.getColumn(2).getString();
    info.status = status_from_string(q.getColumn(3).getString()).value_or(Status::pending);
    info.input = stored(q.getColumn(4).getString());
    if (!q.getColumn(5).isNull()) info.output = stored(q.getColumn(5).getString());
    if (!q.getColumn(6).isNull()) info.error = error_from_json(stored(q.getColumn(6).getString()));
    info.invocations = q.getColumn(7).getInt();
    info.created_at = to_time(q.getColumn(8).getInt64());
    info.updated_at = to_time(q.getColumn(9).getInt64());
    if (!q.getColumn(10).isNull() &&
        (info.status == Status::pending || info.status == Status::sleeping ||
         info.status == Status::waiting))
      info.wake_at = to_time(q.getColumn(10).getInt64());
    info.parent_id = q.getColumn(11).getString();
    if (info.status == Status::running) {
      // due_at is the lease expiry while running; the owner's row may be gone (pruned by an
      // older durable), and the run still held until then.
      if (!q.getColumn(12).isNull()) info.worker = q.getColumn(12).getString();
      if (!q.getColumn(10).isNull()) info.lease_until = to_time(q.getColumn(10).getInt64());
    }
    return info;
  }

  // Removes a file when destroyed; declared before db_, so it runs after db_ is closed.
  struct FileRemover {
    std::string path;
    ~FileRemover() {
      if (path.empty()) return;
      std::error_code ignored;
      for (const char* suffix : {"", "-wal", "-shm"})
        std::filesystem::remove(path + suffix, ignored);
    }
  };

  FileRemover remover_;
  std::string path_;
  std::int64_t schema_version_;  // as found on opening, before any migration
  std::size_t write_transactions_ = 0;
  std::optional<std::string> unreadable_;  // set by stored(): see there
  SQLite::Database db_;
  StatementCache statements_{db_};
};

}  // namespace

std::unique_ptr<Store> open_sqlite_store(const std::string& path, Durability durability) {
  return std::make_unique<SqliteStore>(path, durability);
}

std::unique_ptr<Store> open_sqlite_store(const std::string& path, Durability durability,
                                         Access access) {
  if (access == Access::read_write) return open_sqlite_store(path, durability);
  auto store = std::make_unique<SqliteStore>(path, SqliteStore::ReadOnly{});
  if (store->schema_version() < kSchemaVersion) {
    throw Error("database '" + path + "': written by an older durable (schema version " +
                std::to_string(store->schema_version()) + "; this build reads " +
                std::to_string(kSchemaVersion) +
                "), and a read-only open does not migrate it. Open it once with write access "
                "(a Runtime, or a durable command that writes) to migrate it");
  }
  return store;
}

std::unique_ptr<Store> open_sqlite_store_read_only(const std::string& path) {
  auto store = std::make_unique<SqliteStore>(path, SqliteStore::ReadOnly{});
  if (store->schema_version() == kSchemaVersion) return store;
  // An older file (a golden journal kept across upgrades): migrate a private copy of it.
  const std::string copy =
      (std::filesystem::temp_directory_path() / ("durable-snapshot-" + new_id() + ".db")).string();
  try {
    store->snapshot_to(copy);
  } catch (const SQLite::Exception& e) {
    std::error_code ignored;
    std::filesystem::remove(copy, ignored);
    throw Error("database '" + path + "': could not copy it to migrate the copy (" + e.what() +
                ")");
  }
  store.reset();
  try {
    auto migrated = std::make_unique<SqliteStore>(copy, Durability::normal);
    migrated->remove_on_close();
    return migrated;
  } catch (...) {
    std::error_code ignored;
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(copy + suffix, ignored);
    throw;
  }
}

}  // namespace durable::detail
