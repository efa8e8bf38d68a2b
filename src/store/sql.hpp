// SPDX-License-Identifier: Apache-2.0
#pragma once
// A connection to an SQL database, as durable's store uses one: prepared statements kept for
// reuse, positional parameters, rows read column by column, and write transactions. SqlStore
// (sql_store.hpp, its parts in parts.hpp) holds the durable-execution rules once, over this
// interface; each database (sqlite/, postgres/) implements it and nothing more. No database's
// own types appear here.
//
// SQL text is written once for every database: parameters are `?` (numbered from 1 in order of
// appearance) or `?N` (numbered N), as SQLite numbers them; a database that spells them another
// way rewrites them when it prepares a statement. Where databases differ in SQL itself (a
// function's name, an index hint), the store asks its Dialect.

#include <cstdint>
#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace durable::detail::sql {

/// Why a database call failed, as far as a caller acts on it.
enum class Fault {
  other,
  disk_full,   ///< nothing was written; free space and try again
  io,          ///< the disk failed to read or write the file
  busy,        ///< another writer held the database past the wait
  retry,       ///< the transaction lost a conflict (deadlock, serialization): run it again
  connection,  ///< the connection to the server broke; a new one may succeed
  /// The application's SQL (Step::transaction) ended the transaction it ran in: the write is
  /// made again, with that body's attempt failed instead of run.
  ended,
};

/// The error code of a fault: "durable.disk_full", "durable.busy", or "durable.database".
ErrorCode code_of(Fault fault);

/// A database call failed. `what()` is the database's own words.
class Failure : public Error {
 public:
  Failure(Fault fault, const std::string& what)
      : Error(code_of(fault), what, AsGiven{}), fault_(fault) {}
  Fault fault() const { return fault_; }

 private:
  Fault fault_;
};

/// A prepared statement of a Connection, in one use at a time: bound, then read row by row (or
/// run), then reset by Query's destructor. Parameters and columns are numbered as in SQL: from
/// 1 for parameters, from 0 for columns.
class Statement {
 public:
  virtual ~Statement() = default;
  virtual void bind(int index, std::int64_t value) = 0;
  virtual void bind(int index, std::string_view value) = 0;
  virtual void bind_null(int index) = 0;
  /// Runs the statement at the first call and moves to its next row; false when none is left.
  virtual bool next() = 0;
  /// Runs the statement to its end; returns how many rows it inserted, changed or deleted.
  virtual std::int64_t run() = 0;
  virtual bool is_null(int column) = 0;
  virtual std::int64_t int64(int column) = 0;
  virtual std::string text(int column) = 0;
  /// Ends the use: a half-read result is dropped and the bindings cleared.
  virtual void reset() noexcept = 0;
};

/// Where the databases' SQL differs.
struct Dialect {
  /// The larger of two values: SQLite's max(a, b), PostgreSQL's greatest(a, b).
  std::string_view greatest;
  /// Put between FROM runs and WHERE where the claimable runs are read in due order: an index
  /// hint on SQLite, nothing on PostgreSQL.
  std::string_view claimable_runs_index;
  /// As claimable_runs_index, where runs of a priority other than 0 are read in priority order.
  std::string_view prioritized_runs_index;
  /// Ends a SELECT of rows a claim takes: nothing on SQLite (a write transaction holds the whole
  /// file), FOR UPDATE SKIP LOCKED on PostgreSQL.
  std::string_view lock_claimable;
  /// Ends a SELECT of a row that a write must hold until it commits: FOR UPDATE on PostgreSQL.
  std::string_view lock_row;
  /// A statement with one text parameter that takes a lock on that key until the transaction
  /// ends; empty where a write transaction already excludes every other writer (SQLite).
  std::string_view lock_key;
  /// The runs table's insertion order, for newest-first lists of runs made in the same
  /// millisecond: SQLite's rowid, a sequence column on PostgreSQL.
  std::string_view run_order;
  /// A statement that tells watching workers, when the transaction commits, that runs became
  /// due (WorkWatch); empty where workers poll.
  std::string_view notify_work;
  /// A statement that tells change feeds (ChangeFeed), when the transaction commits, that a
  /// watched thing changed: ?1 is the payload, "RUN_ID/NAME"; empty where feeds poll.
  std::string_view notify_change;
  /// The id of a run's next history row, for an INSERT whose ?1 is the run's id: the run's
  /// greatest plus one on SQLite (whose history is keyed by run), DEFAULT (a sequence) on
  /// PostgreSQL. Either way a run's rows are in the order of their ids.
  std::string_view next_history_id;
  /// A statement that folds the counts sessions that ended kept in rows of their own
  /// (run_counts, step_counts) into one row each; empty where counts have no such rows (SQLite).
  std::string_view fold_counts;
  /// A statement that gives the pages deleted rows left free back to the file system; empty
  /// where the database reuses them on its own (PostgreSQL's autovacuum).
  std::string_view reclaim_space;
  /// Statements around a delete whose bytes must not stay in the database file (a data key):
  /// SQLite's PRAGMA secure_delete on and back off; empty on PostgreSQL, where VACUUM reuses
  /// the space of deleted rows.
  std::string_view secure_delete_on, secure_delete_off;
  /// Run after such a delete commits, so that no copy of the page stays in the log: SQLite's
  /// checkpoint that truncates the WAL (best effort: a reader holding an old snapshot keeps it).
  std::string_view truncate_log;
  /// An expression reading one top-level field of a column holding a JSON object, as text.
  std::string (*json_field)(std::string_view column, std::string_view field);
};

/// How a write transaction's commit reaches the disk. A commit lost to a crash takes every
/// commit after it with it (the log is written in order, and each commit that waits for the disk
/// makes what came before it durable as well), so nothing that depended on it stays.
enum class Sync {
  /// A write acknowledged to a caller outside a run (a start, an event, a message, a cancel...):
  /// on SQLite, at the store's Durability; on PostgreSQL, at least as durable as the server's
  /// own setting at every Durability, and never with synchronous_commit = off.
  durable,
  /// A run's own writes (its journal entries, its status): as `durable` under Durability::full;
  /// under normal, a crash of the database server may lose it (PostgreSQL: synchronous_commit =
  /// off), which only makes steps run again. SQLite's normal loses it to a power cut only.
  journal,
  /// Need not wait for the disk, even under Durability::full: claims, leases and heartbeats,
  /// whose loss only repeats work (a claim, lost, is claimed again). That holds only where
  /// whatever loses the commit also ends its writer (an embedded database: SQLite); a database
  /// whose server can fail apart from its clients (PostgreSQL) treats it as `journal`.
  relaxed,
};

/// A connection to one database. Not thread-safe; one user at a time.
class Connection {
 public:
  virtual ~Connection() = default;
  /// The statement for this SQL text, prepared at its first use and kept.
  virtual Statement& prepare(const std::string& sql) = 0;
  /// Runs SQL text of one or more statements with no parameters (schema changes).
  virtual void execute(const std::string& sql) = 0;
  /// Begins a transaction that will write: it takes the database's write lock at once where the
  /// database has one (SQLite's BEGIN IMMEDIATE), so its reads and writes see one state.
  virtual void begin(Sync sync) = 0;
  /// Begins a transaction that only reads, so that its statements see one state of the database:
  /// a deferred BEGIN on SQLite (in WAL mode it never waits on a writer), REPEATABLE READ READ
  /// ONLY on PostgreSQL. Ended by commit() or rollback().
  virtual void begin_read() = 0;
  virtual void commit() = 0;
  virtual void rollback() noexcept = 0;
  virtual const Dialect& dialect() const = 0;
  /// The application's SQL (Step::transaction), in the transaction under way: one statement
  /// with `$1`, `$2`... parameters, bound from JSON values; its rows (objects of column name to
  /// value) appended to `rows` when not null. Returns the rows it changed. Throws Failure (Fault
  /// other) for SQL the database refuses, and for SQL that would write durable's own tables.
  virtual std::int64_t run_application(std::string_view text, const std::vector<json>& params,
                                       json* rows) = 0;
};

/// One use of a statement: reads as a plain statement, and resets it when the use ends.
class Query {
 public:
  Query(Connection& connection, const std::string& sql) : statement_(&connection.prepare(sql)) {}
  ~Query() { statement_->reset(); }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  void bind(int index, std::int64_t value) { statement_->bind(index, value); }
  void bind(int index, std::string_view value) { statement_->bind(index, value); }
  void bind(int index, const char* value) { statement_->bind(index, std::string_view(value)); }
  void bind(int index, const std::string& value) {
    statement_->bind(index, std::string_view(value));
  }
  void bind_null(int index) { statement_->bind_null(index); }
  /// Binds text, or NULL for an empty string.
  void bind_text_or_null(int index, const std::string& text) {
    if (text.empty()) {
      bind_null(index);
    } else {
      bind(index, text);
    }
  }
  bool next() { return statement_->next(); }
  std::int64_t run() { return statement_->run(); }
  void reset() { statement_->reset(); }
  bool is_null(int column) { return statement_->is_null(column); }
  std::int64_t int64(int column) { return statement_->int64(column); }
  int int32(int column) { return static_cast<int>(statement_->int64(column)); }
  std::string text(int column) { return statement_->text(column); }

 private:
  Statement* statement_;
};

/// A write transaction: rolled back when destroyed before commit().
class Transaction {
 public:
  explicit Transaction(Connection& connection, Sync sync = Sync::durable)
      : connection_(&connection) {
    connection.begin(sync);
  }
  ~Transaction() {
    if (connection_ != nullptr) connection_->rollback();
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit() {
    connection_->commit();
    connection_ = nullptr;
  }

 private:
  Connection* connection_;
};

/// A transaction that only reads (Connection::begin_read): ended when destroyed.
class ReadTransaction {
 public:
  explicit ReadTransaction(Connection& connection) : connection_(&connection) {
    connection.begin_read();
  }
  ~ReadTransaction() { connection_->rollback(); }
  ReadTransaction(const ReadTransaction&) = delete;
  ReadTransaction& operator=(const ReadTransaction&) = delete;

 private:
  Connection* connection_;
};

/// "?, ?, ?" for n parameters.
std::string placeholders(std::size_t n);
/// Binds each of `values` from parameter `index` on; the index after the last.
int bind_all(Query& query, int index, const std::vector<std::string>& values);

/// For tests of query plans: `observer` is called with the text of each statement a connection
/// prepares from now on, as the database receives it (once per connection and text); an empty
/// one stops it. Connections call prepared() with each.
void observe_prepared(std::function<void(const std::string&)> observer);
void prepared(const std::string& text);

/// What an operator does about a failure of this kind, as words to append to the database's
/// own: " (the disk is full: free space, then retry; ...)". Empty when those say it all.
std::string advice(Fault fault);

}  // namespace durable::detail::sql
