// SPDX-License-Identifier: Apache-2.0
// The SQLite store: SqlStore on one file in WAL mode, where every write is one IMMEDIATE
// transaction, so that several processes can share the file. What is SQLite's own lives here:
// opening a file (refusing one that is not durable's, untouched), migrating its schema, reading
// a file without writing to it or beside it, copying it, and its PRAGMAs.

#include "sqlite_store.hpp"

#include <SQLiteCpp/SQLiteCpp.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include "ids.hpp"
#include "ops_queries.hpp"
#include "sqlite_connection.hpp"
#include "sqlite_schema.hpp"
#include "store/sql_store.hpp"

namespace durable::detail {

namespace {

// How long a connection waits for another one's lock before "database is locked".
constexpr std::chrono::milliseconds kBusyTimeout{10'000};

[[noreturn]] void fail(const std::string& path, const std::string& what,
                       ErrorCode code = errc::database) {
  throw Error(code, "database '" + path + "': " + what);
}

// The schema version of a file that is durable's (0: empty), or an error saying whose it is.
std::int64_t check_file(SQLite::Database& db, const std::string& path) {
  const std::int64_t application_id = db.execAndGet("PRAGMA application_id").getInt64();
  const std::int64_t version = db.execAndGet("PRAGMA user_version").getInt64();
  const std::int64_t objects = db.execAndGet("SELECT count(*) FROM sqlite_schema").getInt64();
  if (application_id != kApplicationId && !(application_id == 0 && objects == 0)) {
    fail(path,
         "not a durable database (it is an SQLite file of another application: "
         "application_id " +
             std::to_string(application_id) + ", " + std::to_string(objects) +
             " schema objects); it was left untouched. Point RuntimeOptions::database at "
             "another file");
  }
  if (version > kSchemaVersion) {
    fail(path,
         "written by a newer durable (schema version " + std::to_string(version) +
             "; this build knows up to " + std::to_string(kSchemaVersion) +
             "); it was left untouched. Upgrade durable to open it",
         errc::schema);
  }
  return version;
}

// Validates an existing file through a read-only connection, before any read-write one is
// opened: closing a read-write connection could checkpoint a foreign file's leftover WAL into
// it. Returns its schema version (0 for a new or empty file).
std::int64_t look_at(const std::string& path) {
  std::error_code ignored;
  if (path == ":memory:" || std::filesystem::file_size(path, ignored) == 0 || ignored) return 0;
  std::unique_ptr<SQLite::Database> look;
  try {
    look = std::make_unique<SQLite::Database>(path, SQLite::OPEN_READONLY);
    look->setBusyTimeout(static_cast<int>(kBusyTimeout.count()));
    return check_file(*look, path);
  } catch (const SQLite::Exception& e) {
    // Kept open until here so that its errno tells a read-only mount from a full disk.
    throw open_error(path, e, look ? look->getHandle() : nullptr);
  }
}

// Brings the schema of a file validated by look_at() up to date.
void migrate(SQLite::Database& db, const std::string& path, std::int64_t version) {
  if (version == kSchemaVersion) return;
  SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
  // Another process may have migrated it while we waited for the write lock.
  const std::int64_t current = check_file(db, path);
  for (std::int64_t v = current; v < kSchemaVersion; ++v) db.exec(kMigrations[v]);
  db.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
  db.exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
  tx.commit();
}

// Puts the file in WAL mode; its journal mode ("wal" once done). Switching a new file needs
// every other connection's locks gone for a moment, and SQLite answers "database is locked" at
// once, without the busy timeout, when another process holds one (a second worker opening the
// same new file): it is tried again here for as long as the busy timeout.
std::string switch_to_wal(SQLite::Database& db) {
  const auto until = std::chrono::steady_clock::now() + kBusyTimeout;
  for (;;) {
    try {
      return db.execAndGet("PRAGMA journal_mode=WAL").getString();
    } catch (const SQLite::Exception& e) {
      if ((e.getErrorCode() & 0xFF) != SQLITE_BUSY || std::chrono::steady_clock::now() > until) {
        throw;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Opens (creating it if need be), validates and migrates a file for reading and writing.
std::unique_ptr<SQLite::Database> open_writer(const std::string& path, Durability durability) {
  const std::int64_t version = look_at(path);
  std::unique_ptr<SQLite::Database> db;
  try {
    // Without SQLite's own mutex on the connection (its "multi-thread" mode): a store is used by
    // one thread at a time (its owner's mutex: the runtime's, a client's, an admin lease), as its
    // statement cache requires anyway. SQLite took and released that mutex at nearly every call,
    // about 4% of a recovery's instructions under callgrind.
    db = std::make_unique<SQLite::Database>(
        path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE | SQLite::OPEN_NOMUTEX);
  } catch (const SQLite::Exception& e) {
    throw open_error(path, e, nullptr);
  }
  db->setBusyTimeout(static_cast<int>(kBusyTimeout.count()));
  // SQLite opens a file it may not write read-only without a word; say so now, not at the first
  // write of a run.
  if (sqlite3_db_readonly(db->getHandle(), "main") == 1) {
    throw Error(errc::database,
                open_error_message(path, SQLITE_READONLY, EACCES, "the file is read-only"));
  }
  try {
    // A new file gives the pages a purge frees back to the file system
    // (Interventions::delete_runs), which only a file that has no table yet can be set to do.
    if (version == 0) db->exec("PRAGMA auto_vacuum = INCREMENTAL");
    migrate(*db, path, version);
    if (path != ":memory:") {
      const std::string mode = switch_to_wal(*db);
      if (mode != "wal") fail(path, "could not switch to WAL mode (got '" + mode + "')");
    }
    db->exec(durability == Durability::full ? "PRAGMA synchronous=FULL"
                                            : "PRAGMA synchronous=NORMAL");
  } catch (const SQLite::Exception& e) {
    throw open_error(path, e, db->getHandle());
  }
  return db;
}

class SqliteStore final : public SqlStore {
 public:
  SqliteStore(std::unique_ptr<SQLite::Database> db, const std::string& path,
              std::int64_t schema_version)
      : SqlStore(sqlite_connection(std::move(db)), path), schema_version_(schema_version) {}

  ~SqliteStore() override {
    if (remove_on_close_) {
      close();
      std::error_code ignored;
      for (const char* suffix : {"", "-wal", "-shm"}) {
        std::filesystem::remove(name() + suffix, ignored);
      }
    }
  }
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  /// The schema version of the file as found on opening, before any migration.
  std::int64_t schema_version() const { return schema_version_; }

  /// Removes the database file (and its -wal and -shm) once this store is closed.
  void remove_on_close() { remove_on_close_ = true; }

  /// Copies the database, as this connection sees it, to a new file (VACUUM INTO).
  void snapshot_to(const std::string& path) {
    SQLite::Statement vacuum(file(), "VACUUM INTO ?");
    vacuum.bind(1, path);
    vacuum.exec();
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
      throw Error(errc::database,
                  "could not copy database '" + name() + "' to '" + path + "': " + e.what());
    }
  }

  std::int64_t data_version() override {
    return pragma([&] { return file().execAndGet("PRAGMA data_version").getInt64(); });
  }

 private:
  SQLite::Database& file() { return sqlite_database(db()); }

  template <class F>
  std::invoke_result_t<F&> pragma(F&& body) {
    try {
      return body();
    } catch (const SQLite::Exception& e) {
      fail(e.what());
    }
  }

  std::int64_t schema_version_;
  bool remove_on_close_ = false;
};

std::unique_ptr<SqliteStore> open_reader_store(const std::string& path) {
  std::unique_ptr<SQLite::Database> db = open_sqlite_reader(path);
  db->setBusyTimeout(static_cast<int>(kBusyTimeout.count()));
  std::int64_t version = 0;
  try {
    version = check_file(*db, path);
  } catch (const SQLite::Exception& e) {
    throw open_error(path, e, db->getHandle());
  }
  if (version == 0) fail(path, "holds no durable runs (an empty database)");
  return std::make_unique<SqliteStore>(std::move(db), path, version);
}

}  // namespace

std::unique_ptr<Store> open_sqlite_store(const std::string& path, Durability durability) {
  return std::make_unique<SqliteStore>(open_writer(path, durability), path, kSchemaVersion);
}

std::unique_ptr<Store> open_sqlite_store(const std::string& path, Durability durability,
                                         Access access) {
  if (access == Access::read_write) return open_sqlite_store(path, durability);
  auto store = open_reader_store(path);
  if (store->schema_version() < kSchemaVersion) {
    throw Error(errc::schema,
                "database '" + path + "': written by an older durable (schema version " +
                    std::to_string(store->schema_version()) + "; this build reads " +
                    std::to_string(kSchemaVersion) +
                    "), and a read-only open does not migrate it. Open it once with write access "
                    "(a Runtime, or a durable command that writes) to migrate it");
  }
  return store;
}

std::unique_ptr<Store> open_sqlite_store_read_only(const std::string& path) {
  auto store = open_reader_store(path);
  if (store->schema_version() == kSchemaVersion) return store;
  // An older file (a golden journal kept across upgrades): migrate a private copy of it.
  const std::string copy =
      (std::filesystem::temp_directory_path() / ("durable-snapshot-" + new_id() + ".db")).string();
  try {
    store->snapshot_to(copy);
  } catch (const SQLite::Exception& e) {
    std::error_code ignored;
    std::filesystem::remove(copy, ignored);
    throw Error(errc::database, "database '" + path + "': could not copy it to migrate the copy (" +
                                    e.what() + ")");
  }
  store.reset();
  try {
    auto migrated =
        std::make_unique<SqliteStore>(open_writer(copy, Durability::normal), copy, kSchemaVersion);
    migrated->remove_on_close();
    return migrated;
  } catch (...) {
    std::error_code ignored;
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(copy + suffix, ignored);
    throw;
  }
}

// A live file, beside workers writing it: a plain read-only connection shares their WAL index
// and reads a consistent snapshot. Only where it could not (the directory cannot be written, as
// on a read-only mount, where nothing else can write either) is the file read as it stands.
std::unique_ptr<OpsQueries> open_sqlite_ops_queries(const std::string& database) {
  return std::make_unique<OpsQueries>([database] {
    std::unique_ptr<SQLite::Database> db;
    std::filesystem::path directory = std::filesystem::path(database).parent_path();
    if (directory.empty()) directory = ".";
    try {
      if (::access(directory.c_str(), W_OK) != 0) {
        db = open_sqlite_reader(database);
      } else {
        db = std::make_unique<SQLite::Database>(database, SQLite::OPEN_READONLY);
      }
    } catch (const SQLite::Exception& e) {
      throw Error(errc::database, std::string("database query failed: ") + e.what());
    }
    db->setBusyTimeout(static_cast<int>(kBusyTimeout.count()));
    return sqlite_connection(std::move(db));
  });
}

}  // namespace durable::detail
