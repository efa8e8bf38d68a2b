// SPDX-License-Identifier: Apache-2.0
// sql::Connection over SQLite's C API, on a database SQLiteCpp opened: statements bind text
// without a copy of their own and step without the checks of SQLiteCpp's wrappers.

#include "sqlite_connection.hpp"

#include <SQLiteCpp/SQLiteCpp.h>
#include <sqlite3.h>

#include <unordered_map>

#include "sqlite_application.hpp"
#include "sqlite_store.hpp"

namespace durable::detail {

namespace {

std::string json_field(std::string_view column, std::string_view field) {
  return "json_extract(" + std::string(column) + ", '$." + std::string(field) + "')";
}

[[noreturn]] void throw_failure(sqlite3* db, int code) {
  const int primary = code & 0xFF;
  // The connection's message and codes are about this failure unless another call came between.
  const bool current = (sqlite3_errcode(db) & 0xFF) == primary;
  sql::Fault fault = sql::Fault::other;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) fault = sql::Fault::busy;
  if (primary == SQLITE_FULL || primary == SQLITE_IOERR) {
    // As at opening: a full disk can also be an I/O error (growing the -shm, or ENOSPC), and an
    // I/O error that is neither is the disk failing.
    const int extended = current ? sqlite3_extended_errcode(db) : code;
    const OpenFault seen = classify_open_error(extended, current ? sqlite3_system_errno(db) : 0);
    if (seen == OpenFault::disk_full) fault = sql::Fault::disk_full;
    if (seen == OpenFault::io_error && extended != SQLITE_IOERR_NOMEM) fault = sql::Fault::io;
  }
  throw sql::Failure(fault, current ? sqlite3_errmsg(db) : sqlite3_errstr(code));
}

class SqliteStatement final : public sql::Statement {
 public:
  SqliteStatement(sqlite3* db, const std::string& text) : db_(db) {
    const int code = sqlite3_prepare_v3(db, text.c_str(), static_cast<int>(text.size()),
                                        SQLITE_PREPARE_PERSISTENT, &statement_, nullptr);
    if (code != SQLITE_OK) throw_failure(db, code);
  }
  ~SqliteStatement() override { sqlite3_finalize(statement_); }
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  void bind(int index, std::int64_t value) override {
    check(sqlite3_bind_int64(statement_, index, value));
  }
  void bind(int index, std::string_view value) override {
    check(sqlite3_bind_text64(statement_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                              SQLITE_UTF8));
  }
  void bind_null(int index) override { check(sqlite3_bind_null(statement_, index)); }

  bool next() override {
    if (done_) return false;
    const int code = sqlite3_step(statement_);
    if (code == SQLITE_ROW) return true;
    done_ = true;
    if (code != SQLITE_DONE) throw_failure(db_, code);
    return false;
  }
  std::int64_t run() override {
    while (next()) {
    }
    return sqlite3_changes64(db_);
  }
  bool is_null(int column) override {
    return sqlite3_column_type(statement_, column) == SQLITE_NULL;
  }
  std::int64_t int64(int column) override { return sqlite3_column_int64(statement_, column); }
  std::string text(int column) override {
    const auto* data = reinterpret_cast<const char*>(sqlite3_column_text(statement_, column));
    return data == nullptr
               ? std::string()
               : std::string(data,
                             static_cast<std::size_t>(sqlite3_column_bytes(statement_, column)));
  }
  void reset() noexcept override {
    sqlite3_reset(statement_);
    sqlite3_clear_bindings(statement_);
    done_ = false;
  }

 private:
  void check(int code) {
    if (code != SQLITE_OK) throw_failure(db_, code);
  }

  sqlite3* db_;
  sqlite3_stmt* statement_ = nullptr;
  bool done_ = false;
};

class SqliteConnection final : public sql::Connection {
 public:
  explicit SqliteConnection(std::unique_ptr<SQLite::Database> db) : db_(std::move(db)) {}
  // Statements are finalized before the database closes: members go in reverse order.

  sql::Statement& prepare(const std::string& text) override {
    auto& slot = statements_[text];
    if (!slot) {
      slot = std::make_unique<SqliteStatement>(db_->getHandle(), text);
      sql::prepared(text);
    }
    slot->reset();
    return *slot;
  }
  void execute(const std::string& text) override {
    const int code = sqlite3_exec(db_->getHandle(), text.c_str(), nullptr, nullptr, nullptr);
    if (code != SQLITE_OK) throw_failure(db_->getHandle(), code);
  }
  // A relaxed transaction commits at synchronous=NORMAL (in WAL mode: no sync at commit), and
  // the connection's own level comes back when it ends. A durable and a journal transaction
  // both commit at the connection's level (the store's Durability).
  void begin(sql::Sync sync) override {
    restore_synchronous();  // if setting it back failed after the last relaxed transaction
    if (restore_ >= 0) {
      throw sql::Failure(sql::Fault::busy,
                         "could not set PRAGMA synchronous back after a relaxed transaction; "
                         "the write is refused rather than made less durable");
    }
    if (sync == sql::Sync::relaxed && synchronous() > kNormal) {
      execute("PRAGMA synchronous=NORMAL");
      restore_ = synchronous_;
    }
    try {
      run_prepared("BEGIN IMMEDIATE");
    } catch (...) {
      restore_synchronous();
      throw;
    }
  }
  void begin_read() override { run_prepared("BEGIN"); }
  void commit() override {
    run_prepared("COMMIT");
    restore_synchronous();
  }
  void rollback() noexcept override {
    if (sqlite3_get_autocommit(db_->getHandle()) == 0) {
      sqlite3_exec(db_->getHandle(), "ROLLBACK", nullptr, nullptr, nullptr);
    }
    restore_synchronous();
  }
  const sql::Dialect& dialect() const override { return kSqliteDialect; }
  std::int64_t run_application(std::string_view text, const std::vector<json>& params,
                               json* rows) override {
    return run_sqlite_application(db_->getHandle(), text, params, rows);
  }

  SQLite::Database& database() { return *db_; }

 private:
  static constexpr int kNormal = 1;  // PRAGMA synchronous: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA

  // A statement without results, kept prepared: BEGIN and COMMIT through sqlite3_exec were parsed
  // anew at every transaction (about 8,000 instructions each under callgrind).
  // Reset however it ends: a BEGIN IMMEDIATE or COMMIT that failed on a busy database is left
  // running by SQLite (so that it can be stepped again), and a running statement would keep the
  // connection from ending its transactions and from VACUUM.
  void run_prepared(const std::string& text) {
    sql::Statement& statement = prepare(text);
    try {
      statement.run();
    } catch (...) {
      statement.reset();
      throw;
    }
    statement.reset();
  }

  // The level the store set when it opened the file (it does not change after), read once.
  int synchronous() {
    if (synchronous_ < 0) {
      sql::Statement& pragma = prepare("PRAGMA synchronous");
      synchronous_ = pragma.next() ? static_cast<int>(pragma.int64(0)) : kNormal;
      pragma.reset();
    }
    return synchronous_;
  }
  // Sets the connection's own level again after a relaxed transaction; one that fails (a busy
  // schema, no memory) is tried again before the next transaction begins, and until it is set
  // no transaction is relaxed.
  void restore_synchronous() noexcept {
    if (restore_ < 0) return;
    const std::string pragma = "PRAGMA synchronous=" + std::to_string(restore_);
    if (sqlite3_exec(db_->getHandle(), pragma.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK) {
      restore_ = -1;
    }
  }

  std::unique_ptr<SQLite::Database> db_;
  // By text: a hash and one comparison per lookup, where an ordered map compared the long
  // common prefixes of many statements.
  std::unordered_map<std::string, std::unique_ptr<SqliteStatement>> statements_;
  int synchronous_ = -1;
  int restore_ = -1;  // the level to set again when the relaxed transaction ends
};

}  // namespace

const sql::Dialect kSqliteDialect = {
    .greatest = "max",
    .claimable_runs_index = " INDEXED BY runs_claimable",
    .prioritized_runs_index = " INDEXED BY runs_prioritized",
    .lock_claimable = "",
    .lock_row = "",
    .lock_key = "",
    .run_order = "r.rowid",
    .notify_work = "",
    .notify_change = "",
    .next_history_id = "(SELECT coalesce(max(id), 0) + 1 FROM history WHERE run_id = ?1)",
    .fold_counts = "",
    .reclaim_space = "PRAGMA incremental_vacuum",
    .secure_delete_on = "PRAGMA secure_delete=ON",
    .secure_delete_off = "PRAGMA secure_delete=OFF",
    .truncate_log = "PRAGMA wal_checkpoint(TRUNCATE)",
    .json_field = json_field,
};

std::unique_ptr<sql::Connection> sqlite_connection(std::unique_ptr<SQLite::Database> db) {
  return std::make_unique<SqliteConnection>(std::move(db));
}

SQLite::Database& sqlite_database(sql::Connection& connection) {
  return dynamic_cast<SqliteConnection&>(connection).database();
}

}  // namespace durable::detail
