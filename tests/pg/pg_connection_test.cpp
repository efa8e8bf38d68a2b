// SPDX-License-Identifier: Apache-2.0
// PgConnection against a real server: the private cluster CTest starts (tests/pg/cluster.sh),
// named by DURABLE_TEST_PG_URI. Values round-trip, statements are prepared once, errors carry
// the Fault a caller acts on, connecting fails clearly, and LISTEN/NOTIFY wakes a waiter.

#include "pg_connection.hpp"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

namespace pg = durable::detail::pg;
namespace sql = durable::detail::sql;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

std::string test_uri() {
  const char* uri = std::getenv("DURABLE_TEST_PG_URI");
  if (uri == nullptr) FAIL("DURABLE_TEST_PG_URI is not set: run these tests with ctest");
  return uri;
}

// "127.0.0.1:PORT/postgres": the test URI after its user.
std::string host_port_db() {
  const std::string uri = test_uri();
  return uri.substr(uri.find('@') + 1);
}

std::string port_of_test_server() {
  const std::string rest = host_port_db();
  const std::size_t colon = rest.find(':');
  return rest.substr(colon + 1, rest.find('/') - colon - 1);
}

std::unique_ptr<pg::PgConnection> open() { return pg::connect(test_uri()); }

// What connect() threw for `uri`, or a failed check when it connected.
std::string connect_error(const std::string& uri) {
  try {
    pg::connect(uri);
  } catch (const durable::Error& e) {
    return e.what();
  }
  FAIL("connected to " << uri);
  return "";
}

// The Fault of the sql::Failure `action` threw; nullopt when it threw none.
template <class Action>
std::optional<sql::Fault> fault_of(Action action, std::string* what = nullptr) {
  try {
    action();
  } catch (const sql::Failure& e) {
    if (what != nullptr) *what = e.what();
    return e.fault();
  }
  return std::nullopt;
}

// A TCP socket on 127.0.0.1 with a port of its own; listening when `listening` is set (the
// kernel then completes connections that nobody accepts or answers).
struct LocalSocket {
  explicit LocalSocket(bool listening) : fd(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port = ntohs(address.sin_port);
    if (listening) REQUIRE(::listen(fd, 4) == 0);
  }
  ~LocalSocket() { ::close(fd); }
  LocalSocket(const LocalSocket&) = delete;
  LocalSocket& operator=(const LocalSocket&) = delete;
  int fd;
  int port = 0;
};

// A port on 127.0.0.1 that nothing listens on: one the kernel just handed out, closed again.
std::string unused_port() {
  const LocalSocket probe(false);
  return std::to_string(probe.port);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("rewrite_parameters numbers bare and numbered parameters as SQLite does") {
  CHECK(pg::rewrite_parameters("SELECT ?, ?").text == "SELECT $1, $2");
  CHECK(pg::rewrite_parameters("SELECT ?, ?").parameter_count == 2);
  CHECK(pg::rewrite_parameters("SELECT ?2, ?1, ?2").text == "SELECT $2, $1, $2");
  // A bare ? is one more than the highest number so far.
  const pg::RewrittenSql mixed = pg::rewrite_parameters("VALUES (?3, ?, ?1, ?)");
  CHECK(mixed.text == "VALUES ($3, $4, $1, $5)");
  CHECK(mixed.parameter_count == 5);
  CHECK(pg::rewrite_parameters("SELECT 1").parameter_count == 0);
}

TEST_CASE("rewrite_parameters leaves a question mark in literals, identifiers and comments") {
  CHECK(pg::rewrite_parameters("SELECT '?', 'it''s ?', ? FROM \"odd?name\"").text ==
        "SELECT '?', 'it''s ?', $1 FROM \"odd?name\"");
  CHECK(pg::rewrite_parameters("SELECT ? -- why?\n, ? /* or ? */, ?").text ==
        "SELECT $1 -- why?\n, $2 /* or ? */, $3");
  CHECK_THROWS_AS(pg::rewrite_parameters("SELECT ?0"), sql::Failure);
  CHECK_THROWS_AS(pg::rewrite_parameters("SELECT ?70000"), sql::Failure);
}

TEST_CASE("fault_for maps SQLSTATEs to what a caller does next") {
  CHECK(pg::fault_for("40001", false) == sql::Fault::retry);
  CHECK(pg::fault_for("40P01", false) == sql::Fault::retry);
  CHECK(pg::fault_for("53100", false) == sql::Fault::disk_full);
  CHECK(pg::fault_for("08006", false) == sql::Fault::connection);
  CHECK(pg::fault_for("57P01", false) == sql::Fault::connection);
  CHECK(pg::fault_for("", true) == sql::Fault::connection);
  CHECK(pg::fault_for("55P03", false) == sql::Fault::busy);
  CHECK(pg::fault_for("57014", false) == sql::Fault::busy);
  CHECK(pg::fault_for("23505", false) == sql::Fault::other);
}

TEST_CASE("mask_password hides every password a URI holds") {
  CHECK(pg::mask_password("postgresql://u:hunter2@db:5432/x") == "postgresql://u:***@db:5432/x");
  CHECK(pg::mask_password("postgresql://u:p@ss/w@db/x?sslmode=require") ==
        "postgresql://u:***@db/x?sslmode=require");
  CHECK(pg::mask_password("postgres://db/x?user=u&password=hunter2&sslmode=require") ==
        "postgres://db/x?user=u&password=***&sslmode=require");
  CHECK(pg::mask_password("postgresql://u@db/x") == "postgresql://u@db/x");
}

TEST_CASE("integers, text, NULL and the empty string round-trip through parameters") {
  auto db = open();
  db->execute("CREATE TEMP TABLE values_round_trip (k bigint, n bigint, s text)");
  std::string large;
  while (large.size() < (1u << 20)) large += "durable ✓ żółw 🐢 \"'?\\ ";
  const std::string unicode = "żółw 🐢 — ünïcödé";
  {
    sql::Query insert(*db, "INSERT INTO values_round_trip (k, n, s) VALUES (?, ?, ?)");
    const auto row = [&](std::int64_t k, std::optional<std::int64_t> n,
                         std::optional<std::string> s) {
      insert.bind(1, k);
      if (n) {
        insert.bind(2, *n);
      } else {
        insert.bind_null(2);
      }
      if (s) {
        insert.bind(3, *s);
      } else {
        insert.bind_null(3);
      }
      CHECK(insert.run() == 1);
      insert.reset();
    };
    row(1, INT64_MAX, "");
    row(2, INT64_MIN, std::nullopt);
    row(3, std::nullopt, unicode);
    row(4, -1, large);
  }
  sql::Query read(*db, "SELECT n, s FROM values_round_trip ORDER BY k");
  REQUIRE(read.next());
  CHECK(read.int64(0) == INT64_MAX);
  CHECK_FALSE(read.is_null(1));
  CHECK(read.text(1).empty());
  REQUIRE(read.next());
  CHECK(read.int64(0) == INT64_MIN);
  CHECK(read.is_null(1));
  REQUIRE(read.next());
  CHECK(read.is_null(0));
  CHECK(read.text(1) == unicode);
  REQUIRE(read.next());
  CHECK(read.int64(0) == -1);
  CHECK(read.text(1) == large);
  CHECK_FALSE(read.next());
  CHECK_FALSE(read.next());

  sql::Query encoding(*db, "SHOW client_encoding");
  REQUIRE(encoding.next());
  CHECK(encoding.text(0) == "UTF8");
}

TEST_CASE("run returns the rows a statement inserted, changed or deleted") {
  auto db = open();
  db->execute(
      "CREATE TEMP TABLE counted (k bigint PRIMARY KEY, n bigint);"
      "INSERT INTO counted VALUES (1, 0), (2, 0), (3, 5)");
  sql::Query update(*db, "UPDATE counted SET n = n + 1 WHERE n = ?");
  update.bind(1, std::int64_t{0});
  CHECK(update.run() == 2);
  sql::Query remove(*db, "DELETE FROM counted WHERE k > ?");
  remove.bind(1, std::int64_t{100});
  CHECK(remove.run() == 0);
  sql::Query create(*db, "CREATE TEMP TABLE counted_too (k bigint)");
  CHECK(create.run() == 0);
}

TEST_CASE("a statement is prepared once and reused for every use") {
  auto db = open();
  db->execute("CREATE TEMP TABLE reused (k bigint, s text)");
  const std::string insert_sql = "INSERT INTO reused (k, s) VALUES (?, ?)";
  CHECK(&db->prepare(insert_sql) == &db->prepare(insert_sql));
  std::int64_t expected_sum = 0;
  for (std::int64_t k = 0; k < 500; ++k) {
    sql::Query insert(*db, insert_sql);
    insert.bind(1, k);
    insert.bind(2, "row " + std::to_string(k));
    CHECK(insert.run() == 1);
    expected_sum += k;
  }
  sql::Query totals(*db, "SELECT count(*), sum(k), max(s) FROM reused");
  REQUIRE(totals.next());
  CHECK(totals.int64(0) == 500);
  CHECK(totals.int64(1) == expected_sum);
  CHECK(totals.text(2) == "row 99");
  totals.reset();
  sql::Query prepared(*db, "SELECT count(*) FROM pg_prepared_statements");
  REQUIRE(prepared.next());
  CHECK(prepared.int64(0) == 3);  // the insert, the totals and this one
}

TEST_CASE("a transaction rolled back leaves nothing, and one committed stays") {
  auto db = open();
  auto other = open();
  db->execute("DROP TABLE IF EXISTS pg_test_rollback; CREATE TABLE pg_test_rollback (k bigint)");
  const auto count = [&] {
    sql::Query q(*other, "SELECT count(*) FROM pg_test_rollback");
    REQUIRE(q.next());
    return q.int64(0);
  };
  {
    sql::Transaction transaction(*db);
    sql::Query insert(*db, "INSERT INTO pg_test_rollback VALUES (?)");
    insert.bind(1, std::int64_t{1});
    insert.run();
  }
  CHECK(count() == 0);
  {
    sql::Transaction transaction(*db);
    sql::Query insert(*db, "INSERT INTO pg_test_rollback VALUES (?)");
    insert.bind(1, std::int64_t{2});
    insert.run();
    insert.reset();
    transaction.commit();
  }
  CHECK(count() == 1);
  db->execute("DROP TABLE pg_test_rollback");
}

TEST_CASE("COMMIT after a failed statement throws rather than reporting success") {
  auto db = open();
  db->execute("CREATE TEMP TABLE half_done (k bigint PRIMARY KEY)");
  db->begin(sql::Sync::durable);
  db->execute("INSERT INTO half_done VALUES (1)");
  CHECK_THROWS_AS(db->execute("INSERT INTO half_done VALUES (1)"), sql::Failure);
  CHECK_THROWS_AS(db->commit(), sql::Failure);
  sql::Query count(*db, "SELECT count(*) FROM half_done");
  REQUIRE(count.next());
  CHECK(count.int64(0) == 0);
}

TEST_CASE("a unique violation is Fault::other in the server's words") {
  auto db = open();
  db->execute("CREATE TEMP TABLE unique_keys (k bigint PRIMARY KEY)");
  sql::Query insert(*db, "INSERT INTO unique_keys VALUES (?)");
  insert.bind(1, std::int64_t{7});
  insert.run();
  insert.reset();
  insert.bind(1, std::int64_t{7});
  std::string what;
  CHECK(fault_of([&] { insert.run(); }, &what) == sql::Fault::other);
  CHECK(what.find("duplicate key value violates unique constraint") != std::string::npos);
  CHECK(what.find("23505") != std::string::npos);
}

TEST_CASE("a serialization failure between two connections is Fault::retry") {
  auto reader = open();
  auto writer = open();
  reader->execute(
      "DROP TABLE IF EXISTS pg_test_serial;"
      "CREATE TABLE pg_test_serial (k bigint PRIMARY KEY, n bigint);"
      "INSERT INTO pg_test_serial VALUES (1, 0)");
  reader->begin(sql::Sync::durable);
  reader->execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
  {
    sql::Query read(*reader, "SELECT n FROM pg_test_serial WHERE k = ?");
    read.bind(1, std::int64_t{1});
    REQUIRE(read.next());
  }
  writer->execute("UPDATE pg_test_serial SET n = n + 1 WHERE k = 1");
  std::string what;
  CHECK(fault_of([&] { reader->execute("UPDATE pg_test_serial SET n = n + 10 WHERE k = 1"); },
                 &what) == sql::Fault::retry);
  CHECK(what.find("could not serialize") != std::string::npos);
  reader->rollback();
  writer->execute("DROP TABLE pg_test_serial");
}

TEST_CASE("a deadlock between two connections is Fault::retry for one of them") {
  auto a = open();
  auto b = open();
  a->execute(
      "DROP TABLE IF EXISTS pg_test_deadlock;"
      "CREATE TABLE pg_test_deadlock (k bigint PRIMARY KEY, n bigint);"
      "INSERT INTO pg_test_deadlock VALUES (1, 0), (2, 0)");
  // The check for a deadlock runs after this long of waiting (1 s by default).
  a->execute("SET deadlock_timeout = '100ms'");
  b->execute("SET deadlock_timeout = '100ms'");
  const auto take = [](pg::PgConnection& db, std::int64_t k) {
    sql::Query q(db, "UPDATE pg_test_deadlock SET n = n + 1 WHERE k = ?");
    q.bind(1, k);
    q.run();
  };
  a->begin(sql::Sync::durable);
  b->begin(sql::Sync::durable);
  take(*a, 1);
  take(*b, 2);
  // Each now asks for the row the other holds; the server ends one of them.
  std::optional<sql::Fault> fault_a;
  bool a_threw_something_else = false;
  std::thread waiter([&] {
    try {
      fault_a = fault_of([&] { take(*a, 2); });
    } catch (...) {
      a_threw_something_else = true;
    }
  });
  const std::optional<sql::Fault> fault_b = fault_of([&] { take(*b, 1); });
  waiter.join();
  a->rollback();
  b->rollback();
  CHECK_FALSE(a_threw_something_else);
  CHECK((fault_a == sql::Fault::retry) != (fault_b == sql::Fault::retry));
  CHECK_FALSE((fault_a.has_value() && fault_b.has_value()));
  a->execute("DROP TABLE pg_test_deadlock");
}

TEST_CASE("a connection whose server process was terminated fails with Fault::connection") {
  auto victim = open();
  auto killer = open();
  victim->prepare("SELECT 1");  // prepared while the connection was alive
  sql::Query kill(*killer, "SELECT pg_terminate_backend(CAST(? AS integer), 5000)");
  kill.bind(1, static_cast<std::int64_t>(victim->backend_pid()));
  REQUIRE(kill.next());
  REQUIRE(kill.int64(0) == 1);  // true: the process ended within the 5 s
  CHECK(fault_of([&] {
          sql::Query q(*victim, "SELECT 1");
          q.next();
        }) == sql::Fault::connection);
  CHECK(fault_of([&] { victim->execute("SELECT 2"); }) == sql::Fault::connection);
  CHECK(fault_of([&] { victim->begin(sql::Sync::durable); }) == sql::Fault::connection);
  victim->rollback();  // does not throw on a dead connection
}

TEST_CASE("a port nothing listens on gives an error naming the host and port at once") {
  const std::string port = unused_port();
  // A refused connection ends at once, not after the minute connect_timeout allows: bounds far
  // apart, so that a loaded machine cannot tell them apart by chance.
  const std::string uri =
      "postgresql://postgres@127.0.0.1:" + port + "/postgres?connect_timeout=60";
  const auto start = Clock::now();
  const std::string what = connect_error(uri);
  CHECK(seconds_since(start) < 30);
  INFO(what);
  CHECK(what.starts_with("[durable.database] database '" + uri + "': "));
  CHECK(what.find("127.0.0.1") != std::string::npos);
  CHECK(what.find(port) != std::string::npos);
}

TEST_CASE("a server that never answers is given up on after connect_timeout") {
  const LocalSocket silent(true);
  const std::string port = std::to_string(silent.port);
  const auto start = Clock::now();
  const std::string what =
      connect_error("postgresql://postgres@127.0.0.1:" + port + "/postgres?connect_timeout=2");
  const double waited = seconds_since(start);
  INFO(what);
  CHECK(waited > 1.8);
  CHECK(waited < 30);  // it gives up: without connect_timeout it would wait for good
  CHECK(what.find("127.0.0.1 port " + port) != std::string::npos);
  CHECK(what.find("within 2 s (connect_timeout)") != std::string::npos);
  CHECK(what.find("gave up") != std::string::npos);
}

TEST_CASE("a wrong password names the user and never shows the password") {
  const std::string what =
      connect_error("postgresql://durable_pw:not-the-secret-9f2@" + host_port_db());
  INFO(what);
  CHECK(what.starts_with("[durable.database] database 'postgresql://durable_pw:***@127.0.0.1:"));
  CHECK(what.find("durable_pw") != std::string::npos);
  CHECK(what.find("authentication failed") != std::string::npos);
  CHECK(what.find("not-the-secret-9f2") == std::string::npos);
  // The right one connects: the failure above was the password's.
  CHECK_NOTHROW(pg::connect("postgresql://durable_pw:secret@" + host_port_db()));
}

TEST_CASE("a database that does not exist is named as such") {
  const std::string what = connect_error(
      "postgresql://postgres@127.0.0.1:" + port_of_test_server() + "/no_such_database_here");
  INFO(what);
  CHECK(what.find("\"no_such_database_here\" does not exist") != std::string::npos);
}

TEST_CASE("a URI with a typo gives a clear error and no password") {
  std::string what = connect_error("postgresql://127.0.0.1:notaport/db");
  INFO(what);
  CHECK(what.starts_with(
      "[durable.database] database 'postgresql://127.0.0.1:notaport/db': the URI is not valid"));
  CHECK(what.find("notaport") != std::string::npos);

  what = connect_error("postgresql://u:hunter2@127.0.0.1/db?connect_timout=2");
  CHECK(what.starts_with(
      "[durable.config] database 'postgresql://u:***@127.0.0.1/db?connect_timout=2': "));
  CHECK(what.find("connect_timout") != std::string::npos);
  CHECK(what.find("hunter2") == std::string::npos);

  what = connect_error("postgresql://u:hun%zzter2@127.0.0.1/db");
  CHECK(what.find("hun%zzter2") == std::string::npos);

  what = connect_error("mysql://127.0.0.1/db");
  CHECK(what.find("not a PostgreSQL URI") != std::string::npos);
}

TEST_CASE("postgres:// URIs connect as postgresql:// ones do") {
  auto db = pg::connect("postgres://postgres@" + host_port_db());
  sql::Query one(*db, "SELECT 1");
  REQUIRE(one.next());
  CHECK(one.int64(0) == 1);
}

TEST_CASE("NOTIFY on one connection wakes wait_for_notification on another at once") {
  auto listener = open();
  auto notifier = open();
  listener->listen("durable wake-up");

  // A notification sent before the wait is found at once.
  // Found well before the wait's minute: bounds far apart, as a loaded machine needs.
  notifier->notify("durable wake-up");
  auto start = Clock::now();
  CHECK(listener->wait_for_notification(60s));
  CHECK(seconds_since(start) < 30);

  // One sent while the listener waits wakes it, well before the timeout. The delay only puts
  // the notification in the middle of the wait.
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    notifier->notify("durable wake-up");
  });
  start = Clock::now();
  const bool woken = listener->wait_for_notification(60s);
  const double waited = seconds_since(start);
  late.join();
  CHECK(woken);
  CHECK(waited < 30);

  // Another channel's notification does not count.
  notifier->notify("someone else");
  CHECK_FALSE(listener->wait_for_notification(200ms));
}

TEST_CASE("wait_for_notification returns false when the timeout passes") {
  auto listener = open();
  listener->listen("quiet");
  const auto start = Clock::now();
  CHECK_FALSE(listener->wait_for_notification(300ms));
  const double waited = seconds_since(start);
  CHECK(waited >= 0.29);
  CHECK(waited < 30);  // it returns: a wait that ignored its timeout would hang here
}

TEST_CASE("NOTIFY inside a transaction is sent at commit and dropped by a rollback") {
  auto listener = open();
  auto notifier = open();
  listener->listen("durable");
  notifier->begin(sql::Sync::durable);
  notifier->notify("durable");
  CHECK_FALSE(listener->wait_for_notification(200ms));
  notifier->rollback();
  CHECK_FALSE(listener->wait_for_notification(200ms));
  notifier->begin(sql::Sync::durable);
  notifier->notify("durable");
  CHECK_FALSE(listener->wait_for_notification(200ms));
  notifier->commit();
  CHECK(listener->wait_for_notification(5s));
}

TEST_CASE(
    "a connection has the server notice a silent client within about 20 s, and the URI's "
    "own options keep their say") {
  const auto show = [](pg::PgConnection& db, const std::string& setting) {
    sql::Query query(db, "SELECT current_setting('" + setting + "')");
    REQUIRE(query.next());
    return query.text(0);
  };
  // The server ends a cut-off worker's session, and its transaction with the rows it locked,
  // after 10 s idle and two probes 5 s apart unanswered, or 20 s of data unacknowledged.
  auto db = open();
  CHECK(show(*db, "tcp_keepalives_idle") == "10");
  CHECK(show(*db, "tcp_keepalives_interval") == "5");
  CHECK(show(*db, "tcp_keepalives_count") == "2");
  CHECK(show(*db, "tcp_user_timeout") == "20000");  // ms
  // The URI's options: its other settings kept, and its own keepalive chosen over durable's.
  const std::string uri = test_uri();
  auto own = pg::connect(uri + (uri.find('?') == std::string::npos ? "?" : "&") +
                         "options=-c%20tcp_keepalives_idle%3D30%20-c%20statement_timeout%3D1234");
  CHECK(show(*own, "tcp_keepalives_idle") == "30");
  CHECK(show(*own, "tcp_keepalives_count") == "2");
  CHECK(show(*own, "statement_timeout") == "1234ms");
}
