// SPDX-License-Identifier: Apache-2.0
// The SQLite store: files that are not ours, newer schemas, WAL, durability modes.

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>

#include "durations.hpp"
#include "ops_queries.hpp"
#include "scratch_mount.hpp"
#include "sqlite_connection.hpp"
#include "sqlite_schema.hpp"
#include "sqlite_store.hpp"
#include "store/sql_store.hpp"
#include "store_support.hpp"
#include "stores.hpp"
#include "support.hpp"
#include "sync_counter.hpp"

using namespace durable;

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
// A file as durable wrote it at schema `version`, open for the test to add rows.
std::unique_ptr<SQLite::Database> file_at_version(const std::string& path, int version) {
  auto db = std::make_unique<SQLite::Database>(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
  db->exec("PRAGMA application_id = " + std::to_string(detail::kApplicationId));
  for (int v = 0; v < version; ++v) db->exec(detail::kMigrations[static_cast<std::size_t>(v)]);
  db->exec("PRAGMA user_version = " + std::to_string(version));
  return db;
}
Workflow trivial() {
  return Workflow(
      "trivial", [](Step& step, const json&) -> json { return step.run("one", [] { return 1; }); });
}
}  // namespace

TEST_CASE("a new database file is created in WAL mode with durable's schema version") {
  test::TempDir dir;
  { Runtime runtime({.database = dir.file("new.db")}); }
  SQLite::Database db(dir.file("new.db"));
  CHECK(db.execAndGet("PRAGMA journal_mode").getString() == "wal");
  CHECK(db.execAndGet("PRAGMA user_version").getInt() == detail::kSchemaVersion);
  CHECK(db.execAndGet("PRAGMA application_id").getInt() == detail::kApplicationId);
}

TEST_CASE("a file that is not an SQLite database is refused and left untouched") {
  test::TempDir dir;
  const std::string path = dir.file("notes.db");
  { std::ofstream(path) << "these are my notes, not a database\n" << std::string(5000, 'z'); }
  const std::string before = read_all(path);
  CHECK_THROWS_WITH_AS(Runtime({.database = path}),
                       doctest::Contains("not a durable database: the file is not an SQLite "
                                         "database at all"),
                       Error);
  CHECK(read_all(path) == before);
}

TEST_CASE("a corrupt durable database is refused with a clear error") {
  test::TempDir dir;
  const std::string path = dir.file("corrupt.db");
  { Runtime runtime({.database = path}); }
  std::string bytes = read_all(path);
  REQUIRE(bytes.size() > 100);
  for (std::size_t i = 16; i < 100; ++i) bytes[i] = static_cast<char>(0xA5);  // the header
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; }
  CHECK_THROWS_WITH_AS(Runtime({.database = path}),
                       doctest::Contains(("database '" + path + "'").c_str()), Error);
  CHECK(read_all(path) == bytes);
}

TEST_CASE("an SQLite database of another application is refused and left untouched") {
  test::TempDir dir;
  const std::string path = dir.file("crm.db");
  {
    SQLite::Database db(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db.exec("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)");
    db.exec("INSERT INTO customers (name) VALUES ('Ada')");
  }
  const std::string before = read_all(path);
  CHECK_THROWS_WITH_AS(Runtime({.database = path}),
                       doctest::Contains("not a durable database (it is an SQLite file of another "
                                         "application"),
                       Error);
  CHECK(read_all(path) == before);
  SQLite::Database db(path);
  CHECK(db.execAndGet("PRAGMA journal_mode").getString() == "delete");
}

TEST_CASE("a database written by a newer schema is refused with the versions named") {
  test::TempDir dir;
  const std::string path = dir.file("future.db");
  { Runtime runtime({.database = path}); }
  {
    SQLite::Database db(path, SQLite::OPEN_READWRITE);
    db.exec("PRAGMA user_version = " + std::to_string(detail::kSchemaVersion + 1));
  }
  CHECK_THROWS_WITH_AS(Runtime({.database = path}),
                       doctest::Contains(("written by a newer durable (schema version " +
                                          std::to_string(detail::kSchemaVersion + 1))
                                             .c_str()),
                       Error);
  try {
    Runtime runtime({.database = path});
  } catch (const Error& refused) {
    CHECK(refused.code() == "durable.schema");  // what a runbook keys on
  }
}

TEST_CASE("an older durable database is migrated forward on open, keeping its runs") {
  test::TempDir dir;
  const std::string path = dir.file("old.db");
  // A version-0 durable file: stamped as ours but with no schema yet (what a crash between
  // creation and the first migration leaves behind).
  {
    SQLite::Database db(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db.exec("PRAGMA application_id = " + std::to_string(detail::kApplicationId));
  }
  Runtime runtime({.database = path});
  runtime.add(trivial());
  const std::string id = runtime.start("trivial");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == 1);
  SQLite::Database db(path);
  CHECK(db.execAndGet("PRAGMA user_version").getInt() == detail::kSchemaVersion);
}

TEST_CASE("a schema 4 file is migrated to 5: its workers get a heartbeat, its held run a holder") {
  using std::chrono::milliseconds;
  test::TempDir dir;
  const std::string path = dir.file("v4.db");
  {  // A file as durable wrote it at schema version 4, a worker holding a run.
    const auto db = file_at_version(path, 4);
    db->exec(
        "INSERT INTO workers (id, host, pid, start_ticks, started_at) "
        "VALUES ('w1', 'box boot:0b1e pid:[4026531836]', 4242, 7, 1000)");
    db->exec(
        "INSERT INTO runs (id, workflow, correlation_id, status, input, due_at, owner, "
        "created_at, updated_at) VALUES ('r1', 'trivial', 'c1', 'running', '{}', 61000, 'w1', "
        "1000, 1000)");
  }
  auto store = detail::open_sqlite_store(path, Durability::normal);
  {
    SQLite::Database db(path, SQLite::OPEN_READONLY);
    CHECK(db.execAndGet("PRAGMA user_version").getInt() == detail::kSchemaVersion);
    CHECK(db.execAndGet("SELECT seen_at FROM workers WHERE id = 'w1'").getInt64() == 1000);
  }
  const std::optional<RunInfo> run = store->get_run("r1", false);
  REQUIRE(run);
  CHECK(run->status == Status::running);
  CHECK(run->worker == "box:4242");  // the host name, not the whole identity
  CHECK(run->lease_until == Clock::time_point(milliseconds(61000)));
  REQUIRE(store->list_runs({}).size() == 1);
  CHECK(store->list_runs({})[0].worker == "box:4242");

  // Not beaten since: live for two default leases after it was last seen; then with its own.
  const auto opened = detail::open_ops_queries(path);
  detail::OpsQueries& queries = *opened;
  CHECK(queries.live_workers(1000 + 2 * 30'000 - 1) == 1);
  CHECK(queries.live_workers(1000 + 2 * 30'000) == 0);
  store->touch_worker({"w1", "box boot:0b1e pid:[4026531836]", 4242, 7}, 100'000, 500, "");
  CHECK(queries.live_workers(100'999) == 1);
  CHECK(queries.live_workers(101'000) == 0);

  // Handed back: nobody holds it.
  CHECK(store->release("r1", "w1", 2000, "handed back"));
  const std::optional<RunInfo> released = store->get_run("r1", false);
  REQUIRE(released);
  CHECK(released->status == Status::pending);
  CHECK(released->worker.empty());
  CHECK_FALSE(released->lease_until);
}

namespace {
// Whether SQLite's program for `sql` on `db` builds a temporary table (OpenEphemeral).
bool builds_temporary_table(SQLite::Database& db, const std::string& sql) {
  SQLite::Statement explain(db, "EXPLAIN " + sql);
  while (explain.executeStep()) {
    if (explain.getColumn(1).getString() == "OpenEphemeral") return true;
  }
  return false;
}
}  // namespace

TEST_CASE("a run's change of status builds no temporary table for the claimable index") {
  test::TempDir dir;
  const std::string path = dir.file("plain.db");
  { auto store = detail::open_sqlite_store(path, Durability::normal); }
  SQLite::Database db(path, SQLite::OPEN_READWRITE);
  // Each of these evaluates the predicate of the partial index runs_claimable: with an IN list
  // of four statuses, SQLite built a temporary table for it at every execution.
  CHECK_FALSE(builds_temporary_table(db, "UPDATE runs SET status = 'running' WHERE id = 'r'"));
  CHECK_FALSE(builds_temporary_table(
      db,
      "INSERT INTO runs (id, workflow, correlation_id, status, input, created_at, updated_at) "
      "VALUES ('r', 'w', 'c', 'pending', '{}', 1, 1)"));
  CHECK_FALSE(builds_temporary_table(db, "SELECT id FROM runs INDEXED BY runs_claimable WHERE " +
                                             std::string(detail::kLiveStatus) +
                                             " AND due_at <= 5 ORDER BY due_at"));
  // What version 6 had, for contrast: the check can see one.
  db.exec(
      "CREATE INDEX in_list ON runs (created_at) "
      "WHERE status IN ('pending', 'sleeping', 'waiting', 'running')");
  CHECK(builds_temporary_table(db, "UPDATE runs SET status = 'running' WHERE id = 'r'"));
}

TEST_CASE("a schema 6 file is migrated to 7: its due runs are claimed from the new index") {
  test::TempDir dir;
  const std::string path = dir.file("v6.db");
  {  // A file as durable wrote it at schema version 6, with a pending run due.
    const auto db = file_at_version(path, 6);
    db->exec(
        "INSERT INTO runs (id, workflow, correlation_id, status, input, due_at, created_at, "
        "updated_at) VALUES ('r6', 'trivial', 'c6', 'pending', '{}', 1000, 1000, 1000)");
  }
  Runtime runtime({.database = path});
  runtime.add(trivial());
  runtime.run_until_idle();  // its claims read runs_claimable INDEXED BY
  CHECK(runtime.get("r6").status == Status::completed);
  CHECK(runtime.get("r6").output == 1);
  SQLite::Database db(path, SQLite::OPEN_READONLY);
  CHECK(db.execAndGet("PRAGMA user_version").getInt() == detail::kSchemaVersion);
  const std::string index =
      db.execAndGet("SELECT sql FROM sqlite_master WHERE name = 'runs_claimable'").getString();
  CHECK(index.find(detail::kLiveStatus) != std::string::npos);
}

// SQLite leaves a BEGIN IMMEDIATE that found the database busy running, so that it can be
// stepped again; left so, it would keep the connection from ending transactions and from
// VACUUM. The connection resets it.
TEST_CASE("a transaction refused on a busy database leaves no statement running") {
  test::TempDir dir;
  const std::string path = dir.file("busy.db");
  { auto store = detail::open_sqlite_store(path, Durability::normal); }
  SQLite::Database holder(path, SQLite::OPEN_READWRITE);
  auto db = std::make_unique<SQLite::Database>(path, SQLite::OPEN_READWRITE);
  db->setBusyTimeout(0);
  const auto connection = detail::sqlite_connection(std::move(db));
  holder.exec("BEGIN IMMEDIATE");  // the write lock, held by another connection
  CHECK_THROWS_WITH_AS(connection->begin(detail::sql::Sync::durable), doctest::Contains("locked"),
                       detail::sql::Failure);
  holder.exec("COMMIT");
  // VACUUM refuses to run while any statement of the connection is running.
  CHECK_NOTHROW(connection->execute("VACUUM INTO '" + dir.file("copy.db") + "'"));
  connection->begin(detail::sql::Sync::durable);  // and the next transaction begins
  connection->commit();
}

// What reaches the disk when, counted at the file system's door (xSync): a start is on the disk
// when start() returns and so is each step and each end at full; a claim is not waited for, as
// nothing depends on it surviving a power cut (a lost claim takes every later commit with it).
// At normal nothing is synced (no checkpoint comes in so few pages).
TEST_CASE("at Durability::full a start, a step and an end are each synced, a claim is not") {
  test::TempDir dir;
  constexpr int kRuns = 10;
  for (const Durability durability : {Durability::full, Durability::normal}) {
    const bool full = durability == Durability::full;
    CAPTURE(full);
    test::SyncCounter counter(dir.path().string());
    Runtime runtime({.database = dir.file(full ? "full.db" : "normal.db"),
                     .durability = durability,
                     .log_level = LogLevel::off});
    runtime.add(trivial());  // one step, then its end
    int starts = 0;
    int runs = 0;
    for (int i = 0; i < kRuns; ++i) {
      const int before = counter.syncs();
      const std::string id = runtime.start("trivial");
      const int started = counter.syncs();
      runtime.run_until_idle();
      starts += started - before;
      runs += counter.syncs() - started;
      CHECK(runtime.get(id).status == Status::completed);
    }
    if (full) {
      // One per start; one per step and one per end (the WAL's header, synced when the log
      // starts over, may add one or two). With claims synced it would be 3 per run.
      CHECK(starts >= kRuns);
      CHECK(starts <= kRuns + 2);
      CHECK(runs >= 2 * kRuns);
      CHECK(runs <= 2 * kRuns + 2);
    } else {
      CHECK(starts == 0);
      CHECK(runs == 0);
    }
  }
}

// Durability::normal is SQLite's NORMAL, not OFF: no commit waits for the disk, but the log is
// synced before a checkpoint copies it into the database, so that a power cut loses at most the
// last commits, never the file. OFF would sync nothing at all. Runs enough to fill the log past
// SQLite's automatic checkpoint (1,000 pages; an empty run writes about 22).
TEST_CASE("at Durability::normal a checkpoint syncs the log: SQLite's NORMAL, not OFF") {
  test::TempDir dir;
  test::SyncCounter counter(dir.path().string());
  Runtime runtime({.database = dir.file("normal.db"),
                   .durability = Durability::normal,
                   .log_level = LogLevel::off});
  runtime.add(trivial());
  runtime.start("trivial");
  runtime.run_until_idle();
  const int opened = counter.syncs();  // creating the file may sync; the next runs' commits not
  for (int i = 0; i < 150; ++i) {
    const std::string id = runtime.start("trivial");
    runtime.run_until_idle();
    REQUIRE(runtime.get(id).status == Status::completed);
  }
  CHECK(counter.syncs() > opened);
}

// What an empty run costs, start to end, one run after another: its start, its claim, its end
// and the claim that ends the pass finding nothing, each a write transaction, and one read, of
// when a schedule fires next. When the next run is due comes with the claims.
TEST_CASE("an empty run costs four write transactions and one read") {
  test::TempDir dir;
  constexpr int kRuns = 20;
  test::SyncCounter counter(dir.path().string());
  Runtime runtime({.database = dir.file("empty.db"), .log_level = LogLevel::off});
  runtime.add(Workflow("empty", [](Step&, const json&) -> json { return nullptr; }));
  for (int i = 0; i < 3; ++i) {  // the worker's first heartbeat and the schema's first reads
    runtime.start("empty");
    runtime.run_until_idle();
  }
  const int transactions = counter.transactions();
  const int writes = counter.write_transactions();
  for (int i = 0; i < kRuns; ++i) {
    runtime.start("empty");
    CHECK(runtime.run_until_idle() == 1);
  }
  // Besides, at most: one heartbeat (the worker seen and its leases renewed: two writes), one
  // look for dead owners (a read, once a second), and a second read lock when the log starts
  // over after a checkpoint. Before the claim read the next due time itself, and the schedule
  // time was read before every claim, it was 8 and 4.
  CHECK(counter.write_transactions() - writes >= 4 * kRuns);
  CHECK(counter.write_transactions() - writes <= 4 * kRuns + 2);
  CHECK(counter.transactions() - transactions >= 5 * kRuns);
  CHECK(counter.transactions() - transactions <= 5 * kRuns + 4);
}

// A run shown with its history and its journal (the dashboard's and `durable show`'s read) is
// read in one transaction, so the three come from one state of the file. Before, its statements
// took three read transactions, between which a worker could commit a step.
TEST_CASE("a run with its history and steps is read in one transaction") {
  test::TempDir dir;
  const std::string file = dir.file("show.db");
  std::string id;
  {
    Runtime runtime({.database = file, .log_level = LogLevel::off});
    runtime.add(Workflow("two", [](Step& step, const json&) -> json {
      step.run("a", [] { return 1; });
      return step.run("b", [] { return 2; });
    }));
    id = runtime.start("two");
    runtime.run_until_idle();
  }
  test::SyncCounter counter(dir.path().string());
  const auto store = detail::open_store(file, Durability::normal, nullptr);
  CHECK(store->get_run(id, true));  // the schema's first reads
  const auto reads = [&counter, before = counter.transactions()] {
    return counter.transactions() - before;
  };
  const std::optional<detail::RunWithSteps> shown = store->get_run_with_steps(id);
  REQUIRE(shown);
  CHECK(reads() == 1);
  CHECK(shown->run.status == Status::completed);
  CHECK(shown->run.history.size() == 3);  // pending, running, completed
  REQUIRE(shown->steps.size() == 2);
  CHECK(shown->steps[1].id == "b");
  CHECK(store->get_run(id, true)->history.size() == 3);
  CHECK(reads() == 2);
  CHECK(store->list_steps(id)->size() == 2);
  CHECK(reads() == 3);
  CHECK_FALSE(store->get_run_with_steps("no-such-run"));
}

// A claim that took fewer runs than it may says, from its own transaction, when the next run it
// left is due; one that took all it asked for says nothing (its claimer looks again at once).
TEST_CASE(
    "a claim that takes fewer runs than it may tells when the next one is due (on each store)") {
  test::TempDir dir;
  const auto store =
      detail::open_store(test::database(dir, "claims.db"), Durability::normal, nullptr);
  for (const std::string id : {"r1", "r2"}) store->create_run(test::new_run(id));
  detail::ClaimRequest request;
  request.owner = "A";
  request.workflows = {"w"};
  request.now_ms = 1;
  request.lease_ms = 100;
  request.limit = 1;
  const detail::Claimed full = store->claim(request);
  REQUIRE(full.runs.size() == 1);
  CHECK_FALSE(full.next_due_read);
  request.limit = 10;
  request.executing = {full.runs[0].run.id};
  const detail::Claimed rest = store->claim(request);
  REQUIRE(rest.runs.size() == 1);
  CHECK(rest.next_due_read);
  CHECK_FALSE(rest.next_due.has_value());  // one run executing, the other just claimed
  request.owner = "B";
  request.executing.clear();
  const detail::Claimed none = store->claim(request);
  CHECK(none.runs.empty());
  CHECK(none.next_due_read);
  CHECK(none.next_due == std::optional<std::int64_t>(101));  // when A's leases lapse
}

// The one claim that decides something: a wait's timeout. An event that came after a power cut
// had lost that claim would decide the wait the other way, after the timed-out branch ran.
TEST_CASE("at Durability::full a claim that ends a wait by its timeout is synced") {
  test::TempDir dir;
  test::SyncCounter counter(dir.path().string());
  test::ManualClock clock;
  auto runtime = test::runtime_on(dir.file("waits.db"), clock,
                                  {.durability = Durability::full, .log_level = LogLevel::off});
  runtime->add(Workflow("waiter", [](Step& step, const json&) -> json {
    return step.wait_for_event("w", "never", {.timeout = std::chrono::hours(1)}).has_value();
  }));
  const std::string id = runtime->start("waiter");
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::waiting);
  clock.advance(std::chrono::hours(2));
  const int before = counter.syncs();
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::completed);
  CHECK(runtime->get(id).output == json(false));
  // The claim that timed the wait out, then the run's end (relaxed, the claim would sync nothing).
  CHECK(counter.syncs() - before >= 2);
}

TEST_CASE("two runtimes on one file see each other's runs (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "shared.db");
  Runtime a({.database = db});
  Runtime b({.database = db});
  a.add(trivial());
  b.add(trivial());
  const std::string id = a.start("trivial");
  CHECK(b.run_until_idle() == 2);
  CHECK(a.run_until_idle() == 0);
  CHECK(a.get(id).status == Status::completed);
}

TEST_CASE(
    "a foreign WAL-mode database with a leftover -wal file is left untouched, -wal included") {
  test::TempDir dir;
  const std::string live = dir.file("live.db"), path = dir.file("app.db");
  {
    SQLite::Database db(live, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db.exec("PRAGMA journal_mode=WAL");
    db.exec("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)");
    db.exec("INSERT INTO orders (total) VALUES (42)");
    // Copy the files while the writer is open: the copy has its last commits only in -wal,
    // as a crashed application would leave it.
    std::filesystem::copy_file(live, path);
    std::filesystem::copy_file(live + "-wal", path + "-wal");
  }
  const std::string main_before = read_all(path), wal_before = read_all(path + "-wal");
  REQUIRE_FALSE(wal_before.empty());
  CHECK_THROWS_WITH_AS(Runtime({.database = path}), doctest::Contains("not a durable database"),
                       Error);
  CHECK(read_all(path) == main_before);
  REQUIRE(std::filesystem::exists(path + "-wal"));
  CHECK(read_all(path + "-wal") == wal_before);
}

TEST_CASE("a database path that cannot be opened, and impossible options, are clear errors") {
  CHECK_THROWS_WITH_AS(Runtime({.database = "/nonexistent-dir/x/durable.db"}),
                       doctest::Contains("database '/nonexistent-dir/x/durable.db': its directory "
                                         "'/nonexistent-dir/x' does not exist"),
                       Error);
  RuntimeOptions no_lease;
  no_lease.database = ":memory:";
  no_lease.lease = std::chrono::milliseconds(0);
  CHECK_THROWS_WITH_AS(Runtime{no_lease}, "[durable.config] RuntimeOptions::lease must be positive",
                       Error);
  RuntimeOptions no_poll;
  no_poll.database = ":memory:";
  no_poll.poll_interval = std::chrono::milliseconds(-1);
  CHECK_THROWS_WITH_AS(Runtime{no_poll},
                       "[durable.config] RuntimeOptions::poll_interval must be positive", Error);
  for (const int bad : {1, -1}) {
    RuntimeOptions quarantine;
    quarantine.database = ":memory:";
    quarantine.quarantine_after = bad;
    CHECK_THROWS_WITH_AS(Runtime{quarantine},
                         doctest::Contains("quarantine_after must be 0 (never) or 2 or more"),
                         Error);
  }
}

// --- Open errors that say what is wrong, read-only opens, and the retention of events ---

namespace {
// A file holding one completed run, closed (no -wal left beside it).
std::string one_run_file(const std::string& path) {
  Runtime runtime({.database = path, .log_level = LogLevel::off});
  runtime.add(trivial());
  const std::string id = runtime.start("trivial");
  runtime.run_until_idle();
  return id;
}
}  // namespace

TEST_CASE("open errors are told apart by SQLite's extended code and the errno behind it") {
  using detail::classify_open_error;
  using detail::OpenFault;
  CHECK(classify_open_error(SQLITE_CANTOPEN, EROFS) == OpenFault::not_writable);
  CHECK(classify_open_error(SQLITE_CANTOPEN, EACCES) == OpenFault::not_writable);
  CHECK(classify_open_error(SQLITE_READONLY, 0) == OpenFault::not_writable);
  CHECK(classify_open_error(SQLITE_READONLY_DBMOVED, 0) == OpenFault::not_writable);
  CHECK(classify_open_error(SQLITE_FULL, 0) == OpenFault::disk_full);
  CHECK(classify_open_error(SQLITE_IOERR_SHMSIZE, ENOSPC) == OpenFault::disk_full);
  CHECK(classify_open_error(SQLITE_IOERR_WRITE, ENOSPC) == OpenFault::disk_full);
  CHECK(classify_open_error(SQLITE_IOERR_SHMOPEN, EROFS) == OpenFault::not_writable);
  CHECK(classify_open_error(SQLITE_NOTADB, 0) == OpenFault::not_sqlite);
  CHECK(classify_open_error(SQLITE_CORRUPT, 0) == OpenFault::corrupt);
  CHECK(classify_open_error(SQLITE_IOERR_READ, EIO) == OpenFault::io_error);
  const std::string full = detail::open_error_message("/data/d.db", SQLITE_FULL, 0, "full");
  CHECK(full.find("database '/data/d.db': the disk is full") == 0);
  CHECK(full.find("Free space") != std::string::npos);
  const std::string ro = detail::open_error_message("/data/d.db", SQLITE_CANTOPEN, EROFS, "x");
  CHECK(ro.find("cannot open or write the file") != std::string::npos);
  CHECK(ro.find("mounted read-only") != std::string::npos);
  CHECK(ro.find("not a durable database") == std::string::npos);
}

TEST_CASE("a database on a read-only file system is reported as not writable, not as corrupt") {
  test::TempDir dir;
  const std::string path = dir.file("m/durable.db");
  const auto mount = test::ScratchMount::make(dir.path() / "m", 1 << 20);
  if (!mount) {
    MESSAGE("skipped: this process may not mount a tmpfs (the classification test covers it)");
    return;
  }
  const std::string id = one_run_file(path);
  REQUIRE(mount->make_read_only());
  try {
    Runtime runtime({.database = path});
    FAIL("a read-write open of a file on a read-only mount succeeded");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("[durable.database] database '" + path + "': cannot open or write the file") ==
          0);
    CHECK(what.find("Read-only file system") != std::string::npos);  // the errno, EROFS
    CHECK(what.find("corrupt") == std::string::npos);
  }
  // A read-only open reads it as it is.
  const auto store = detail::open_sqlite_store(path, Durability::normal, detail::Access::read_only);
  const auto run = store->get_run(id, false);
  REQUIRE(run);
  CHECK(run->status == Status::completed);
  detail::NewRun second;
  second.id = "r2";
  second.workflow = "trivial";
  second.input = "{}";
  CHECK_THROWS_AS(store->create_run(second), Error);
}

TEST_CASE("a database another user owns is reported as not writable, and reads still work") {
  namespace fs = std::filesystem;
  if (::geteuid() != 0) {
    MESSAGE("skipped: only root can run a child as another user (CI runs the suite as root)");
    return;
  }
  test::TempDir dir;
  const std::string path = dir.file("durable.db");
  const std::string id = one_run_file(path);
  const fs::perms readable = fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read;
  fs::permissions(dir.path(),
                  readable | fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  fs::permissions(path, readable | fs::perms::owner_write);
  int report_pipe[2];
  REQUIRE(::pipe(report_pipe) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // another user, "nobody": no doctest in here
    ::close(report_pipe[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    std::string report;
    try {
      Runtime runtime({.database = path, .log_level = LogLevel::off});
      report = "opened read-write";
    } catch (const Error& e) {
      report = e.what();
    }
    try {
      const auto store =
          detail::open_sqlite_store(path, Durability::normal, detail::Access::read_only);
      const auto run = store->get_run(id, false);
      report += run && run->status == Status::completed ? "\nread" : "\nnot read";
    } catch (const Error& e) {
      report += std::string("\n") + e.what();
    }
    const bool sent = ::write(report_pipe[1], report.data(), report.size()) ==
                      static_cast<ssize_t>(report.size());
    ::_exit(sent ? 0 : 4);
  }
  ::close(report_pipe[1]);
  std::string report;
  char chunk[512];
  for (ssize_t n; (n = ::read(report_pipe[0], chunk, sizeof chunk)) > 0;) report.append(chunk, n);
  ::close(report_pipe[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  INFO(report);
  CHECK(report.find("[durable.database] database '" + path + "': cannot open or write the file") ==
        0);
  CHECK(report.find("Permission denied") != std::string::npos);  // the errno, EACCES
  CHECK(report.find("corrupt") == std::string::npos);
  CHECK(report.substr(report.rfind('\n') + 1) == "read");
}

TEST_CASE("a full disk at open is reported as a full disk, not as corrupt") {
  test::TempDir dir;
  const auto mount = test::ScratchMount::make(dir.path() / "m", 512 << 10);
  if (!mount) {
    MESSAGE("skipped: this process may not mount a tmpfs (the classification test covers it)");
    return;
  }
  const std::string existing = dir.file("m/durable.db");
  one_run_file(existing);
  mount->fill();
  // An existing file: reading it needs room for its WAL index (-shm).
  CHECK_THROWS_WITH_AS(Runtime({.database = existing}),
                       doctest::Contains(("database '" + existing + "': the disk is full").c_str()),
                       Error);
  // A new file: its schema cannot be written.
  const std::string fresh = dir.file("m/fresh.db");
  CHECK_THROWS_WITH_AS(Runtime({.database = fresh}),
                       doctest::Contains(("database '" + fresh + "': the disk is full").c_str()),
                       Error);
}

TEST_CASE("a read-only open writes nothing beside the file and refuses an older schema") {
  test::TempDir dir;
  const std::string path = dir.file("current.db");
  const std::string id = one_run_file(path);
  std::filesystem::permissions(path, std::filesystem::perms::owner_read |
                                         std::filesystem::perms::group_read |
                                         std::filesystem::perms::others_read);
  {
    const auto store =
        detail::open_sqlite_store(path, Durability::normal, detail::Access::read_only);
    CHECK(store->list_runs({}).size() == 1);
    CHECK_FALSE(std::filesystem::exists(path + "-wal"));
    CHECK_FALSE(std::filesystem::exists(path + "-shm"));
  }
  const std::string old = dir.file("old.db");
  {
    SQLite::Database db(old, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db.exec("PRAGMA application_id = " + std::to_string(detail::kApplicationId));
    db.exec("CREATE TABLE runs (id TEXT)");  // some schema of an older version
    db.exec("PRAGMA user_version = 1");
  }
  const std::string before = read_all(old);
  CHECK_THROWS_WITH_AS(
      detail::open_sqlite_store(old, Durability::normal, detail::Access::read_only),
      doctest::Contains("written by an older durable (schema version 1"), Error);
  CHECK(read_all(old) == before);
  CHECK_THROWS_WITH_AS(detail::open_sqlite_store(dir.file("missing.db"), Durability::normal,
                                                 detail::Access::read_only),
                       doctest::Contains("does not exist"), Error);
  CHECK_FALSE(std::filesystem::exists(dir.file("missing.db")));
}

TEST_CASE(
    "purging events deletes old ones, and keeps recent ones, the newest and those a wait needs") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string path = dir.file("events.db");
  auto runtime = test::runtime_on(path, clock, {.log_level = LogLevel::off});
  runtime->add(Workflow("waiter", [](Step& step, const json&) -> json {
    return step.wait_for_event("wait", "go", {.match = {{"n", 2}}}).value_or(json());
  }));
  for (int i = 0; i < 3; ++i) runtime->send_event("noise", {{"i", i}});  // seq 1-3
  const std::string id = runtime->start("waiter");
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::waiting);  // its wait began after seq 3
  runtime->send_event("go", {{"n", 1}});                // seq 4: after the wait began, not matching
  clock.advance(std::chrono::hours(24 * 8));
  runtime->send_event("recent", json::object());  // seq 5
  const std::int64_t week_ago =
      detail::to_ms(clock.now()) - std::chrono::milliseconds(std::chrono::hours(24 * 7)).count();
  const auto store = detail::open_sqlite_store(path, Durability::normal);
  const auto seqs = [&] {
    SQLite::Database db(path, SQLite::OPEN_READONLY);
    SQLite::Statement q(db, "SELECT seq FROM events ORDER BY seq");
    std::vector<int> out;
    while (q.executeStep()) out.push_back(q.getColumn(0).getInt());
    return out;
  };
  CHECK(store->purge_events(week_ago, 2) == 2);  // a batch at a time
  CHECK(store->purge_events(week_ago, 1000) == 1);
  CHECK(seqs() == std::vector<int>{4, 5});  // 4: the waiting run's wait began before it
  runtime->send_event("go", {{"n", 2}});    // seq 6 completes the wait
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::completed);
  CHECK(runtime->get(id).output == json{{"n", 2}});
  clock.advance(std::chrono::hours(24 * 8));
  CHECK(store->purge_events(detail::to_ms(clock.now()), 1000) == 2);
  CHECK(seqs() == std::vector<int>{6});  // the newest stays: seq numbers never go back
  runtime->send_event("later", json::object());
  CHECK(seqs() == std::vector<int>{6, 7});
}
