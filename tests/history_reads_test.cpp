// SPDX-License-Identifier: Apache-2.0
// Reads that cost the same at any history (issue 22): the counts the store keeps as runs and
// journals change, newest-first lists paged by cursor, the query plan of each read, and a file
// that gives back what a purge frees. The costs themselves are measured in bench/, not here.

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <thread>

#include "admin.hpp"
#include "api.hpp"
#include "ops_queries.hpp"
#include "sqlite_connection.hpp"
#include "store/sql.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

// A connection of the test's own to the database, SQLite file or PostgreSQL.
std::unique_ptr<detail::sql::Connection> connect(const std::string& database) {
  if (detail::is_postgres_uri(database)) {
    auto db = detail::pg::connect(database);
    db->execute("SET search_path TO durable");  // durable's schema (docs/postgres.md)
    return db;
  }
  return detail::sqlite_connection(
      std::make_unique<SQLite::Database>(database, SQLite::OPEN_READWRITE));
}

// The rows of a query as text, in order, a line each, its columns joined by '|'.
std::string rows_of(detail::sql::Connection& db, const std::string& text, int columns) {
  detail::sql::Query query(db, text);
  std::multiset<std::string> rows;
  while (query.next()) {
    std::string row;
    for (int c = 0; c < columns; ++c) row += (c ? "|" : "") + query.text(c);
    rows.insert(row);
  }
  std::string all;
  for (const std::string& row : rows) all += row + "\n";
  return all;
}

// The counts kept against the same counts made from the runs and journals themselves, by rules
// written here again (not the store's view step_figures): what each step.run entry adds, in the
// duration bucket of its last attempt.
void check_counts_match(const std::string& database) {
  auto db = connect(database);
  CHECK(rows_of(*db,
                "SELECT workflow, status, CAST(sum(runs) AS TEXT) FROM run_counts "
                "GROUP BY workflow, status HAVING sum(runs) != 0",
                3) == rows_of(*db,
                              "SELECT workflow, status, CAST(count(*) AS TEXT) FROM runs "
                              "GROUP BY workflow, status",
                              3));
  const std::string kept =
      "SELECT workflow, step, CAST(bucket AS TEXT), CAST(sum(entries) AS TEXT), "
      "CAST(sum(failed_attempts) AS TEXT), CAST(sum(retries) AS TEXT), CAST(sum(failed) AS TEXT), "
      "CAST(sum(duration_ms) AS TEXT) FROM step_counts GROUP BY workflow, step, bucket "
      "HAVING sum(entries) != 0 OR sum(failed_attempts) != 0 OR sum(retries) != 0 OR "
      "sum(failed) != 0 OR sum(duration_ms) != 0";
  const std::string made =
      "SELECT workflow, step, CAST(bucket AS TEXT), CAST(count(*) AS TEXT), "
      "CAST(sum(CASE WHEN failed_attempts > 0 THEN failed_attempts ELSE 0 END) AS TEXT), "
      "CAST(sum(CASE WHEN retries > 0 THEN retries ELSE 0 END) AS TEXT), "
      "CAST(sum(failed) AS TEXT), CAST(sum(coalesce(duration_ms, 0)) AS TEXT) FROM ("
      "SELECT r.workflow, s.base AS step, s.duration_ms, "
      "CASE WHEN s.duration_ms IS NULL THEN -1 ELSE (SELECT count(*) FROM step_buckets b "
      "WHERE b.upper_ms < s.duration_ms) END AS bucket, "
      "s.attempts - CASE WHEN s.state = 'completed' THEN 1 ELSE 0 END AS failed_attempts, "
      "s.attempts - CASE WHEN s.state = 'retrying' THEN 0 ELSE 1 END AS retries, "
      "CASE WHEN s.state = 'failed' THEN 1 ELSE 0 END AS failed "
      "FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.kind = 'run') AS e "
      "GROUP BY workflow, step, bucket";
  CHECK(rows_of(*db, kept, 8) == rows_of(*db, made, 8));
}

// Workflows whose runs end each way a run can: completed, failed after retries, cancelled while
// asleep, retried by an operator, forked, purged.
void add_workflows(Runtime& runtime, std::atomic<bool>& fail) {
  runtime.add(Workflow("orders", [](Step& step, const json& input) -> json {
    step.run("reserve", [] { return 1; });
    step.run("charge", [] { return 2; });
    return input;
  }));
  runtime.add(Workflow(
      "flaky",
      [&fail](Step& step, const json&) -> json {
        step.run("first", [] { return 1; });
        return step.run("second", [&fail]() -> int {
          if (fail) throw std::runtime_error("down");
          return 2;
        });
      },
      WorkflowOptions{.retry = test::quick_retries(3)}));
  runtime.add(Workflow("sleepy", [](Step& step, const json&) -> json {
    step.run("before", [] { return 1; });
    step.sleep("nap", 24h);
    return step.run("after", [] { return 2; });
  }));
}

// The text of every statement prepared while `reads` runs, that names one of the tables whose
// rows grow with history.
std::vector<std::string> statements_of(const std::function<void()>& reads) {
  std::vector<std::string> seen;
  std::mutex mutex;
  detail::sql::observe_prepared([&](const std::string& text) {
    const std::lock_guard lock(mutex);
    seen.push_back(text);
  });
  try {
    reads();
  } catch (...) {
    detail::sql::observe_prepared({});
    throw;
  }
  detail::sql::observe_prepared({});
  std::vector<std::string> growing;
  for (const std::string& text : seen) {
    if (!text.starts_with("SELECT")) continue;
    for (const char* table : {"FROM runs", "JOIN runs", "FROM steps", "FROM history"}) {
      if (test::has(text, table)) {
        growing.push_back(text);
        break;
      }
    }
  }
  return growing;
}

// The plan of a statement, one line per step: SQLite's EXPLAIN QUERY PLAN details, or
// PostgreSQL's EXPLAIN of its generic plan (the one it uses for any parameter values), with
// sequential scans priced out so that an index that could serve is always taken.
std::vector<std::string> plan_of(detail::sql::Connection& db, const std::string& text) {
  std::vector<std::string> lines;
  if (!test::on_postgres()) {
    detail::sql::Query explain(db, "EXPLAIN QUERY PLAN " + text);
    while (explain.next()) lines.push_back(explain.text(3));
    return lines;
  }
  static int plans = 0;
  const std::string name = "planned_" + std::to_string(++plans);
  db.execute("SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan");
  db.execute("PREPARE " + name + " AS " + text);
  std::size_t parameters = 0;
  while (test::has(text, "$" + std::to_string(parameters + 1))) ++parameters;
  std::string values;
  for (std::size_t i = 0; i < parameters; ++i) values += i ? ", NULL" : "(NULL";
  detail::sql::Query explain(db, "EXPLAIN EXECUTE " + name + values + (parameters ? ")" : ""));
  while (explain.next()) lines.push_back(explain.text(0));
  return lines;
}

// Whether a plan line of statement `text` reads a table that grows with history further than
// the rows it needs: a whole table, a sort for its ORDER BY, or a page of a list read from an
// index that does not match its filter (rows read only to be left out).
bool grows_with_history(const std::string& line, const std::string& text) {
  const bool ordered = test::has(text, "ORDER BY"), limited = test::has(text, "LIMIT");
  if (test::has(line, "TEMP B-TREE FOR ORDER BY") || (ordered && test::has(line, "Sort"))) {
    return true;
  }
  for (const char* table : {"runs", "steps", "history"}) {
    if (test::has(line, std::string("Seq Scan on ") + table)) return true;  // PostgreSQL
  }
  const std::size_t filter = line.find("Filter: ");
  if (limited && filter != std::string::npos && !test::has(line, "Join Filter")) return true;
  if (!line.starts_with("SCAN ")) return false;
  // SQLite: a scan of a small table (run_counts, workers...) is fine; of a big one, only for the
  // list of every run, in its index's order.
  const std::string name = line.substr(5, line.find(' ', 5) - 5);
  const bool big = name == "r" || name == "runs" || name == "s" || name == "steps" || name == "h" ||
                   name == "history";
  return big && !(test::has(text, "WHERE true ORDER BY") && test::has(line, "USING INDEX"));
}

}  // namespace

TEST_CASE(
    "history reads: the counts kept as runs and journals change match the runs and journals "
    "(on each store)") {
  test::TempDir dir;
  const std::string database = test::database(dir, "counts.db");
  std::atomic<bool> fail{true};
  auto owner = std::make_unique<Runtime>(test::quiet(database));
  Runtime& runtime = *owner;
  add_workflows(runtime, fail);
  for (int i = 0; i < 5; ++i) runtime.start("orders", json{{"n", i}});
  const std::string flaky = runtime.start("flaky");
  const std::string flaky2 = runtime.start("flaky");
  const std::string sleepy = runtime.start("sleepy");
  const std::string sleepy2 = runtime.start("sleepy");
  REQUIRE(runtime.wait(flaky, 10s).status == Status::failed);
  REQUIRE(runtime.wait(flaky2, 10s).status == Status::failed);
  check_counts_match(database);

  // An operator's retry resets the failed step's attempts; this time it succeeds.
  fail = false;
  runtime.retry(flaky);
  REQUIRE(runtime.wait(flaky, 10s).status == Status::completed);
  runtime.cancel(sleepy, "no longer needed");
  runtime.cancel(flaky2, "closed");
  const std::string forked = runtime.fork(runtime.list({.workflow = "orders"}).back().id, "charge");
  runtime.run_until_idle();
  REQUIRE(runtime.get(forked).status == Status::completed);
  check_counts_match(database);

  // Counts by workflow through the reads operators use.
  ops::Admin admin(database);
  const json stats = admin.stats();
  CHECK(stats.at("counts").at("completed") == 7);
  CHECK(stats.at("counts").at("cancelled") == 2);
  CHECK(stats.at("counts").at("sleeping") == 1);
  CHECK(stats.at("steps") == 5 * 2 + 2 * 2 + 2 + 2);  // orders, flaky, sleepy's befores, fork
  CHECK(admin.list({.workflow = "sleepy"}).at("counts").at("cancelled") == 1);

  // A purge takes the runs and their journals out of the counts.
  CHECK(runtime.purge({.status = Status::completed, .workflow = "orders"}) == 6);
  check_counts_match(database);
  CHECK(admin.stats().at("counts").at("completed") == 1);
  CHECK(admin.list({.workflow = "orders"}).at("counts").at("completed") == 0);
  (void)sleepy2;
  if (!test::on_postgres()) return;

  // PostgreSQL: each session counted into rows of its own; once the sessions end, a fold sums
  // them into slot 0 and the counts stay what they were.
  auto db = connect(database);
  const auto single = [&db](const std::string& text) {
    detail::sql::Query query(*db, text);
    REQUIRE(query.next());
    return query.int64(0);
  };
  CHECK(single("SELECT count(*) FROM run_counts WHERE slot <> 0") > 0);
  CHECK(single("SELECT count(*) FROM step_counts WHERE slot <> 0") > 0);
  owner.reset();  // its sessions end
  const auto live_slots = [&] {
    return single(
        "SELECT count(*) FROM (SELECT slot FROM run_counts UNION SELECT slot FROM step_counts) "
        "AS s WHERE s.slot IN (SELECT pid FROM pg_stat_activity)");
  };
  for (int i = 0; i < 500 && live_slots() > 0; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(live_slots() == 0);
  db->execute("SELECT fold_counts()");
  CHECK(single("SELECT count(*) FROM run_counts WHERE slot <> 0") == 0);
  CHECK(single("SELECT count(*) FROM step_counts WHERE slot <> 0") == 0);
  check_counts_match(database);
}

TEST_CASE("history reads: a file of schema 15 gets its counts from the runs it holds") {
  test::TempDir dir;
  const std::string database = dir.file("old.db");
  std::atomic<bool> fail{true};
  {
    Runtime runtime(test::quiet(database));
    add_workflows(runtime, fail);
    for (int i = 0; i < 3; ++i) runtime.start("orders");
    runtime.start("flaky");
    runtime.start("sleepy");
    runtime.run_until_idle();
  }
  std::string sleeper;
  std::vector<std::string> before;  // its history's reasons
  {  // As version 15 left it: no counts, the older indexes, the history's own ids.
    SQLite::Database db(database, SQLite::OPEN_READWRITE);
    db.exec(
        "DROP TRIGGER runs_counted; DROP TRIGGER runs_recounted; DROP TRIGGER runs_uncounted; "
        "DROP TRIGGER steps_counted; DROP TRIGGER steps_uncounted; DROP TRIGGER steps_changing; "
        "DROP TRIGGER steps_changed; "
        "DROP TABLE data_keys; ALTER TABLE events DROP COLUMN correlation_id; "
        "DROP INDEX runs_first_body; ALTER TABLE runs DROP COLUMN first_body_at; "
        "CREATE INDEX runs_began ON runs (workflow, rate_key, began_at) "
        "WHERE rate_key IS NOT NULL; "
        "DROP TABLE run_counts; DROP TABLE step_counts; DROP VIEW step_figures; "
        "DROP TABLE step_buckets; DROP INDEX runs_newest; DROP INDEX runs_status; "
        "DROP INDEX runs_workflow; DROP INDEX runs_workflow_status; DROP INDEX runs_correlation; "
        "DROP TABLE messages; DROP TABLE streams; DROP TABLE stream_values; "
        "CREATE INDEX runs_due ON runs (status, due_at); "
        "CREATE INDEX runs_workflow ON runs (workflow, status); "
        "CREATE INDEX runs_correlation ON runs (correlation_id); "
        // The history as a table of its own ids, with an index by run.
        "CREATE TABLE old_history (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, "
        "at INTEGER NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL); "
        "INSERT INTO old_history (run_id, at, status, reason) "
        "SELECT run_id, at, status, reason FROM history ORDER BY at, run_id, id; "
        "DROP TABLE history; ALTER TABLE old_history RENAME TO history; "
        "CREATE INDEX history_run ON history (run_id, id); DROP TABLE published; "
        "PRAGMA user_version = 15");
    sleeper = db.execAndGet("SELECT id FROM runs WHERE workflow = 'sleepy'").getString();
    SQLite::Statement reasons(db, "SELECT reason FROM history WHERE run_id = ? ORDER BY id");
    reasons.bind(1, sleeper);
    while (reasons.executeStep()) before.push_back(reasons.getColumn(0).getString());
    REQUIRE(before.size() >= 3);  // pending, running, sleeping
    CHECK(db.execAndGet("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'").getInt() == 0);
  }
  Runtime runtime(test::quiet(database));
  add_workflows(runtime, fail);
  check_counts_match(database);
  runtime.start("orders");
  runtime.cancel(sleeper, "done waiting");
  runtime.run_until_idle();
  check_counts_match(database);
  CHECK(ops::Admin(database).stats().at("counts").at("completed") == 4);
  // The history came across in order, and a new change goes after it.
  const std::vector<Transition> after = runtime.get(sleeper).history;
  REQUIRE(after.size() == before.size() + 1);
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(after[i].reason == before[i]);
  CHECK(test::has(after.back().reason, "done waiting"));
  SQLite::Database db(database, SQLite::OPEN_READONLY);
  CHECK(db.execAndGet("SELECT count(*) FROM sqlite_schema WHERE name = 'history_run'").getInt() ==
        0);
}

TEST_CASE(
    "history reads: lists page newest first by cursor, ties and new runs included (on each "
    "store)") {
  test::TempDir dir;
  const std::string database = test::database(dir, "pages.db");
  test::ManualClock clock;  // still: every run is created in the same millisecond
  auto runtime = test::runtime_on(database, clock, test::quiet(database));
  runtime->add(Workflow("a", [](Step&, const json&) -> json { return 1; }));
  runtime->add(Workflow("b", [](Step&, const json&) -> json { return 2; }));
  std::vector<std::string> started;
  for (int i = 0; i < 25; ++i) {
    started.push_back(runtime->start(i % 3 == 0 ? "b" : "a", json::object(),
                                     {.correlation_id = i % 2 == 0 ? "even" : "odd"}));
    if (i % 4 == 0) clock.advance(1ms);
  }
  std::reverse(started.begin(), started.end());  // newest first

  // Every run once, in order, a page at a time; a run started meanwhile does not shift them.
  const auto all_pages = [&](RunFilter filter, bool start_meanwhile) {
    std::vector<std::string> ids;
    for (int page = 0; page < 100; ++page) {
      const std::vector<RunInfo> runs = runtime->list(filter);
      for (const RunInfo& run : runs) ids.push_back(run.id);
      if (runs.size() < filter.limit) break;
      filter.cursor = runs.back().cursor;
      if (start_meanwhile) runtime->start("a");
    }
    return ids;
  };
  CHECK(all_pages({.limit = 4}, true) == started);
  std::vector<std::string> b_runs, even_runs;
  for (std::size_t i = 0; i < started.size(); ++i) {
    const std::size_t n = started.size() - 1 - i;  // the order it was started in
    if (n % 3 == 0) b_runs.push_back(started[i]);
    if (n % 2 == 0) even_runs.push_back(started[i]);
  }
  CHECK(all_pages({.workflow = "b", .limit = 3}, false) == b_runs);
  CHECK(all_pages({.limit = 2, .correlation_id = "even"}, false) == even_runs);
  CHECK(all_pages({.status = Status::pending, .workflow = "b", .limit = 5}, false) == b_runs);

  // A cursor that is not one is refused, by the library, the HTTP API and the CLI.
  for (const char* bad : {"12", "x.1", "1.-1", "01.1", "1.2.3", " 1.2"}) {
    CAPTURE(std::string(bad));
    CHECK_THROWS_AS(runtime->list({.cursor = bad}), Error);
  }
  ops::Admin admin(database);
  const auto get_runs = [api = ops::api_handler(admin)](std::map<std::string, std::string> query) {
    ops::HttpRequest request;
    request.method = "GET";
    request.path = "/v1/runs";
    request.query = std::move(query);
    return api(request);
  };
  const ops::HttpResponse refused = get_runs({{"cursor", "page-2"}});
  CHECK(refused.status == 400);
  CHECK(test::has(refused.body, "next_cursor"));

  // HTTP: next_cursor leads to the next page, and is null on the last.
  std::vector<std::string> ids;
  std::map<std::string, std::string> query = {{"limit", "10"}, {"workflow", "a"}};
  for (int page = 0; page < 10; ++page) {
    const ops::HttpResponse answer = get_runs(query);
    REQUIRE(answer.status == 200);
    const json body = json::parse(answer.body);
    for (const json& run : body.at("runs")) ids.push_back(run.at("id"));
    if (body.at("next_cursor").is_null()) break;
    query["cursor"] = body.at("next_cursor");
  }
  std::vector<std::string> a_runs;
  for (const RunInfo& run : runtime->list({.workflow = "a", .limit = 1000}))
    a_runs.push_back(run.id);
  CHECK(ids == a_runs);
  CHECK(ids.size() == 16 + 6);  // and the six started while paging
}

TEST_CASE(
    "history reads: each read of stats, lists and metrics uses an index in order, with no "
    "sort and no scan of the runs or journals (on each store)") {
  test::TempDir dir;
  const std::string database = test::database(dir, "plans.db");
  std::atomic<bool> fail{true};
  std::string cursor;
  {
    Runtime runtime(test::quiet(database));
    add_workflows(runtime, fail);
    for (int i = 0; i < 4; ++i) runtime.start("orders", json::object(), {.correlation_id = "c"});
    runtime.start("flaky");
    runtime.run_until_idle();
    cursor = runtime.list({.limit = 2}).back().cursor;
  }
  ops::Admin admin(database);
  Client client(database);
  const std::vector<std::string> statements = statements_of([&] {
    admin.stats();
    admin.metrics();
    for (const std::string& after : {std::string(), cursor}) {
      admin.list({.cursor = after});
      admin.list({.status = Status::failed, .cursor = after});
      admin.list({.workflow = "orders", .cursor = after});
      admin.list({.status = Status::completed, .workflow = "orders", .cursor = after});
      admin.list({.correlation_id = "c", .cursor = after});
      client.list({.workflow = "orders", .cursor = after});
    }
  });
  CHECK(statements.size() >= 8);
  auto db = connect(database);
  for (const std::string& text : statements) {
    CAPTURE(text);
    const std::vector<std::string> plan = plan_of(*db, text);
    REQUIRE(!plan.empty());
    if (std::getenv("DURABLE_PRINT_PLANS") != nullptr) {
      std::string shown = text + "\n";
      for (const std::string& line : plan) shown += "    " + line + "\n";
      MESSAGE(shown);
    }
    for (const std::string& line : plan) {
      CAPTURE(line);
      CHECK_FALSE(grows_with_history(line, text));
    }
  }
}

TEST_CASE("history reads: a new file gives back to the file system the pages a purge frees") {
  test::TempDir dir;
  const std::string database = dir.file("purged.db");
  Runtime runtime(test::quiet(database));
  runtime.add(Workflow("bulky", [](Step& step, const json&) -> json {
    return step.run("blob", [] { return std::string(4000, 'x'); });
  }));
  for (int i = 0; i < 300; ++i) runtime.start("bulky");
  runtime.run_until_idle();
  const auto pages = [&] {
    SQLite::Database db(database, SQLite::OPEN_READONLY);
    return std::pair{db.execAndGet("PRAGMA page_count").getInt64(),
                     db.execAndGet("PRAGMA freelist_count").getInt64()};
  };
  {
    SQLite::Database db(database, SQLite::OPEN_READONLY);
    CHECK(db.execAndGet("PRAGMA auto_vacuum").getInt() == 2);  // incremental
  }
  const std::pair<std::int64_t, std::int64_t> before = pages();
  CHECK(runtime.purge({.status = Status::completed}) == 300);
  const std::pair<std::int64_t, std::int64_t> after = pages();
  CAPTURE(before.first);
  CAPTURE(after.first);
  CHECK(after.first < before.first / 2);     // 300 results of 4 kB went back
  CHECK(after.second <= before.second + 2);  // not merely left free in the file
}
