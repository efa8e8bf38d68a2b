// The SQLite store: files that are not ours, newer schemas, WAL, durability modes.

#include "store.hpp"

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>

#include "support.hpp"

using namespace durable;

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
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
                       doctest::Contains("not a durable database, or a corrupt one"), Error);
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

TEST_CASE("Durability::full syncs every commit and normal does not") {
  test::TempDir dir;
  auto full = detail::open_sqlite_store(dir.file("full.db"), Durability::full);
  auto normal = detail::open_sqlite_store(dir.file("normal.db"), Durability::normal);
  CHECK(full->synchronous() == 2);    // FULL
  CHECK(normal->synchronous() == 1);  // NORMAL
  Runtime runtime({.database = dir.file("full.db"), .durability = Durability::full});
  runtime.add(trivial());
  const std::string id = runtime.start("trivial");
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::completed);
}

TEST_CASE("two runtimes on one file see each other's runs") {
  test::TempDir dir;
  Runtime a({.database = dir.file("shared.db")});
  Runtime b({.database = dir.file("shared.db")});
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
                       doctest::Contains("cannot open database '/nonexistent-dir/x/durable.db'"),
                       Error);
  RuntimeOptions no_lease;
  no_lease.database = ":memory:";
  no_lease.lease = std::chrono::milliseconds(0);
  CHECK_THROWS_WITH_AS(Runtime{no_lease}, "RuntimeOptions::lease must be positive", Error);
  RuntimeOptions no_poll;
  no_poll.database = ":memory:";
  no_poll.poll_interval = std::chrono::milliseconds(-1);
  CHECK_THROWS_WITH_AS(Runtime{no_poll}, "RuntimeOptions::poll_interval must be positive", Error);
}
