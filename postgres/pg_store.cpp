// SPDX-License-Identifier: Apache-2.0
// The PostgreSQL store: SqlStore on a server that workers on many hosts share. What is
// PostgreSQL's own lives here: the schema (`durable` unless the URI's search_path names
// another), created on first use and migrated under an advisory lock, a schema of someone
// else's refused untouched, the durability of commits (synchronous_commit), and a new
// connection after the server or the network dropped the old one.
//
// Claims take rows with FOR UPDATE SKIP LOCKED, a commit holds its run's row (FOR UPDATE)
// while it checks the owner, so a worker that lost its run to another cannot commit for it;
// waits and events of a name, and the running count of a limited workflow, are decided under
// transaction-scoped advisory locks (Dialect::lock_key).

#include <string>

#include "ops_queries.hpp"
#include "pg_connection.hpp"
#include "pg_schema.hpp"
#include "store/sql_store.hpp"

namespace durable::detail {

namespace {

constexpr const char* kTables[] = {"runs",  "steps",    "history",   "workers",  "events",
                                   "waits", "triggers", "schedules", "workflows"};

[[noreturn]] void fail(const pg::PgConnection& db, const std::string& what,
                       ErrorCode code = errc::database) {
  throw Error(code, "database '" + db.shown_uri() + "': " + what);
}

std::int64_t single(sql::Connection& db, const std::string& text) {
  sql::Query query(db, text);
  if (!query.next() || query.is_null(0)) return 0;
  return query.int64(0);
}

std::string single_text(sql::Connection& db, const std::string& text) {
  sql::Query query(db, text);
  return query.next() && !query.is_null(0) ? query.text(0) : std::string();
}

// The lock under which one process at a time makes or migrates durable's tables in `schema`
// (held to the end of the caller's transaction).
void lock_schema(pg::PgConnection& db, const std::string& schema) {
  sql::Query lock(db, "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))");
  lock.bind(1, "durable schema " + schema);
  while (lock.next()) {
  }
}

// A writer needs a server that takes writes. The first host of a multi-host URI may be a
// standby: libpq connects to it unless the URI asks for a primary, and the first write would
// fail with a bare "read-only transaction".
void refuse_read_only_server(pg::PgConnection& db) {
  sql::Query state(db,
                   "SELECT pg_is_in_recovery()::int, "
                   "(current_setting('default_transaction_read_only') = 'on')::int");
  if (!state.next()) return;
  if (state.int64(0) != 0) {
    fail(db, "the server at " + db.server() +
                 " is a standby (in recovery, read-only), and a durable runtime writes. Point "
                 "the URI at the primary; with several hosts in the URI, add "
                 "target_session_attrs=read-write so that libpq skips standbys");
  }
  if (state.int64(1) != 0) {
    fail(db, "sessions of the server at " + db.server() +
                 " are read-only (default_transaction_read_only = on for this role, database "
                 "or server), and a durable runtime writes; connect as a role that may write");
  }
}

// Points the session at durable's schema: `durable` unless the URI (or the role or database)
// set a search_path of its own, whose first schema then holds the tables. A writer makes
// `durable` if need be, under the schema's lock, so that processes opening a fresh database at
// once all succeed; a reader needs no privilege beyond reading, so it makes nothing.
void use_schema(pg::PgConnection& db, Access access) {
  const std::string source =
      single_text(db, "SELECT source FROM pg_settings WHERE name = 'search_path'");
  if (source == "default" || source == "configuration file") {
    if (access == Access::read_write) {
      sql::Transaction tx(db);
      lock_schema(db, "durable");
      db.execute("CREATE SCHEMA IF NOT EXISTS durable");
      tx.commit();
    }
    db.execute("SET search_path TO durable");
  }
  if (single_text(db, "SELECT current_schema()").empty()) {
    if (access == Access::read_only && (source == "default" || source == "configuration file")) {
      // current_schema() skips a schema the role may not use, as well as one that is not there.
      if (single(db, "SELECT count(*) FROM pg_namespace WHERE nspname = 'durable'") == 0)
        fail(db, "it has no schema 'durable': no durable runtime has used this database yet");
      fail(db, "role '" + single_text(db, "SELECT current_user") +
                   "' may not use the schema 'durable': GRANT USAGE ON SCHEMA durable TO it, "
                   "and SELECT ON ALL TABLES IN SCHEMA durable to read");
    }
    fail(db, "its search_path (" + single_text(db, "SHOW search_path") +
                 ") names no schema that exists; create it, or leave search_path out of the URI "
                 "to use the schema 'durable'");
  }
}

// By the catalog, not information_schema, which lists only the tables the role holds a
// privilege on: a reader lacking SELECT on it would be told the table is missing.
bool has_version_table(pg::PgConnection& db) {
  return single(db, std::string("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON "
                                "n.oid = c.relnamespace WHERE n.nspname = current_schema() AND "
                                "c.relname = '") +
                        pg::kVersionTable + "'") > 0;
}

// The version the schema's tables are at; its caller has made sure the version table exists.
std::int64_t schema_version(pg::PgConnection& db) {
  return single(db, std::string("SELECT max(version) FROM ") + pg::kVersionTable);
}

void refuse_newer(pg::PgConnection& db, std::int64_t version) {
  if (version <= pg::kPgSchemaVersion) return;
  fail(db,
       "schema '" + single_text(db, "SELECT current_schema()") +
           "' was written by a newer durable (schema version " + std::to_string(version) +
           "; this build knows up to " + std::to_string(pg::kPgSchemaVersion) +
           "); it was left untouched. Upgrade durable to use it",
       errc::schema);
}

// A reader migrates nothing: it takes durable's tables as they are, of this build's version.
void check_readable(pg::PgConnection& db) {
  const std::string schema = single_text(db, "SELECT current_schema()");
  if (!has_version_table(db)) {
    fail(db, "schema '" + schema + "' holds no durable tables: no durable runtime has used it yet");
  }
  const std::int64_t version = schema_version(db);
  refuse_newer(db, version);
  if (version < pg::kPgSchemaVersion) {
    fail(db,
         "schema '" + schema + "' is of schema version " + std::to_string(version) +
             ", older than this build's " + std::to_string(pg::kPgSchemaVersion) +
             "; a read-only open migrates nothing: start a worker of this build (or run a "
             "durable command that writes) once to migrate it",
         errc::schema);
  }
}

// Creates or migrates the tables, one process at a time, after making sure the schema holds
// durable's tables or none of those names.
void migrate(pg::PgConnection& db) {
  sql::Transaction tx(db);
  const std::string schema = single_text(db, "SELECT current_schema()");
  lock_schema(db, schema);
  const bool made = has_version_table(db);
  const std::int64_t version = made ? schema_version(db) : 0;
  if (!made) {
    std::string names;
    for (const char* table : kTables)
      names += std::string(names.empty() ? "'" : ", '") + table + "'";
    const std::int64_t foreign =
        single(db,
               "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
               "WHERE n.nspname = current_schema() AND c.relname IN (" +
                   names + ")");
    if (foreign > 0) {
      fail(db, "schema '" + schema + "' holds " + std::to_string(foreign) +
                   " table(s) named as durable's (runs, steps, events...) that are not durable's "
                   "(no " +
                   pg::kVersionTable +
                   " table); it was left untouched. Use another "
                   "database, or another schema with options=-c search_path=NAME in the URI");
    }
    db.execute(std::string("CREATE TABLE ") + pg::kVersionTable + " (version INTEGER NOT NULL)");
    db.execute(std::string("INSERT INTO ") + pg::kVersionTable + " VALUES (0)");
  }
  refuse_newer(db, version);
  for (std::int64_t v = version; v < pg::kPgSchemaVersion; ++v) {
    db.execute(pg::kPgMigrations[static_cast<std::size_t>(v)]);
  }
  db.execute(std::string("UPDATE ") + pg::kVersionTable +
             " SET version = " + std::to_string(pg::kPgSchemaVersion) + " WHERE version < " +
             std::to_string(pg::kPgSchemaVersion));
  tx.commit();
}

// A connection set up as durable's: its schema, its durability, read-only when asked.
std::unique_ptr<pg::PgConnection> session(const std::string& uri, Durability durability,
                                          Access access) {
  std::unique_ptr<pg::PgConnection> db = pg::connect(uri);
  try {
    if (access == Access::read_write) refuse_read_only_server(*db);
    use_schema(*db, access);
    if (access == Access::read_write)
      migrate(*db);
    else
      check_readable(*db);
    db->set_durability(durability);
    // A transaction of durable's never waits on anything but the network between its
    // statements: one left open longer is a worker's that went away (killed, cut off) and whose
    // row locks would hold its runs from the workers taking them over. The server ends it.
    db->execute("SET idle_in_transaction_session_timeout = '5s'");
    if (access == Access::read_only) db->execute("SET default_transaction_read_only = on");
  } catch (const sql::Failure& e) {
    fail(*db, e.what() + sql::advice(e.fault()), sql::code_of(e.fault()));
  }
  return db;
}

class PgStore final : public SqlStore {
 public:
  PgStore(std::unique_ptr<pg::PgConnection> db, std::string shown_uri, std::string uri,
          Durability durability, Access access)
      : SqlStore(std::move(db), std::move(shown_uri)),
        uri_(std::move(uri)),
        durability_(durability),
        access_(access) {}

  void copy_to(const std::string& path) override {
    fail("a copy to '" + path +
             "' is made of SQLite files only; back a PostgreSQL database up with pg_dump",
         errc::invalid_argument);
  }

  // A hash of the server's current snapshot (the transactions running and the next id): it
  // changes when a transaction that wrote ends, and no table is read. Not a sequence, which
  // moves when a transaction takes a value, before it commits; nor the WAL position, which
  // moves when the commit record is written, before the commit is visible. A waiter reading
  // either then, and the run just after, would miss the commit.
  std::int64_t data_version() override {
    return guarded(
        [&] { return single(db(), "SELECT hashtextextended(pg_current_snapshot()::text, 0)"); });
  }

 protected:
  std::unique_ptr<sql::Connection> reconnect() override {
    return session(uri_, durability_, access_);
  }

 private:
  std::string uri_;
  Durability durability_;
  Access access_;
};

// LISTEN on a connection of its own: a NOTIFY durable_work (Dialect::notify_work) committed by any
// process on the database wakes wait() at once.
class PgWorkWatch final : public WorkWatch {
 public:
  explicit PgWorkWatch(std::unique_ptr<pg::PgConnection> db) : db_(std::move(db)) {
    try {
      db_->listen("durable_work");
    } catch (const sql::Failure& e) {
      fail(*db_, e.what() + sql::advice(e.fault()), sql::code_of(e.fault()));
    }
  }

  bool wait(std::chrono::milliseconds timeout) override {
    try {
      return db_->wait_for_notification(timeout);
    } catch (const sql::Failure& e) {
      fail(*db_, e.what() + sql::advice(e.fault()), sql::code_of(e.fault()));
    }
  }

 private:
  std::unique_ptr<pg::PgConnection> db_;
};

// LISTEN durable_change on a connection of its own: the topics of the changes committed by any
// process on the database (Dialect::notify_change), as their NOTIFY payloads say.
class PgChangeFeed final : public ChangeFeed {
 public:
  explicit PgChangeFeed(std::unique_ptr<pg::PgConnection> db) : db_(std::move(db)) {
    try {
      db_->listen("durable_change");
    } catch (const sql::Failure& e) {
      fail(*db_, e.what() + sql::advice(e.fault()), sql::code_of(e.fault()));
    }
  }
  bool polls() const override { return false; }
  Changes next(std::chrono::milliseconds timeout) override {
    try {
      Changes changes;
      changes.topics = db_->wait_for_payloads(timeout);
      return changes;
    } catch (const sql::Failure& e) {
      fail(*db_, e.what() + sql::advice(e.fault()), sql::code_of(e.fault()));
    }
  }

 private:
  std::unique_ptr<pg::PgConnection> db_;
};

}  // namespace

std::unique_ptr<ChangeFeed> open_postgres_change_feed(const std::string& uri) {
  return std::make_unique<PgChangeFeed>(pg::connect(uri));
}

std::string shown_postgres_uri(const std::string& uri) { return pg::mask_password(uri); }

std::unique_ptr<WorkWatch> open_postgres_work_watch(const std::string& uri) {
  return std::make_unique<PgWorkWatch>(pg::connect(uri));
}

std::unique_ptr<Store> open_postgres_store(const std::string& uri, Durability durability,
                                           Access access) {
  std::unique_ptr<pg::PgConnection> db = session(uri, durability, access);
  std::string shown = db->shown_uri();
  return std::make_unique<PgStore>(std::move(db), std::move(shown), uri, durability, access);
}

std::unique_ptr<OpsQueries> open_postgres_ops_queries(const std::string& uri) {
  return std::make_unique<OpsQueries>(
      [uri] { return session(uri, Durability::normal, Access::read_only); });
}

}  // namespace durable::detail
