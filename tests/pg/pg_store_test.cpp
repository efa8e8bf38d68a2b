// SPDX-License-Identifier: Apache-2.0
// The PostgreSQL store against a real server (the private cluster CTest starts): workflows run
// as on SQLite, the schema is made once and someone else's is refused, commits are fenced by
// ownership, and a dropped connection is made again.

#include <doctest/doctest.h>

#include <atomic>
#include <durable/durable.hpp>
#include <durable/testing.hpp>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "pg_schema.hpp"
#include "pg_support.hpp"
#include "prometheus_text.hpp"
#include "store.hpp"
#include "store_support.hpp"
#include "support.hpp"
#include "worker_workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

using test::new_run;

RuntimeOptions on(const std::string& uri) {
  RuntimeOptions options = test::quiet(uri);
  options.poll_interval = 5ms;
  return options;
}

}  // namespace

TEST_CASE("on PostgreSQL, steps, a sleep, parallel steps, an event wait and a child run complete") {
  const std::string uri = test::fresh_database();
  std::atomic<int> bodies{0};
  Runtime runtime(on(uri));
  runtime.add(Workflow("double", [&](Step& step, const json& input) -> json {
    return step.run("twice", [&] {
      ++bodies;
      return input.at("n").get<int>() * 2;
    });
  }));
  runtime.add(Workflow("order", [&](Step& step, const json& input) -> json {
    const int a = step.run("a", [&] {
      ++bodies;
      return input.at("n").get<int>();
    });
    step.sleep("nap", 20ms);
    auto left = step.start("left", [&] {
      ++bodies;
      return a + 1;
    });
    auto right = step.start("right", [&] {
      ++bodies;
      return a + 2;
    });
    const auto [l, r] = all(left, right);
    const std::optional<json> approval =
        step.wait_for_event("approval", "approved", {.match = {{"order", a}}});
    const json child = step.invoke("child", "double", {{"n", l + r}});
    return {{"sum", l + r}, {"by", approval->at("by")}, {"child", child}};
  }));
  test::Serving serving(runtime);
  const std::string id = runtime.start("order", {{"n", 5}});
  REQUIRE(test::eventually([&] { return runtime.get(id).status == Status::waiting; }, 10s));
  runtime.send_event("approved", {{"order", 4}, {"by", "wrong"}});  // matches no wait
  runtime.send_event("approved", {{"order", 5}, {"by", "ana"}});
  const RunInfo done = runtime.wait(id, 10s);
  REQUIRE(done.status == Status::completed);
  CHECK(done.output == json{{"sum", 13}, {"by", "ana"}, {"child", 26}});
  CHECK(bodies == 4);
  std::set<std::string> keys;  // left and right are journaled in the order they ended
  for (const StepInfo& s : runtime.steps(id)) keys.insert(s.id);
  CHECK(keys == std::set<std::string>{"a", "nap", "left", "right", "approval", "child"});
  const std::vector<RunInfo> children = runtime.list({.workflow = "double"});
  REQUIRE(children.size() == 1);
  CHECK(children[0].parent_id == id);
}

TEST_CASE(
    "on PostgreSQL, a failing step is retried, and retry() and cancel() work from another "
    "runtime") {
  const std::string uri = test::fresh_database();
  std::atomic<int> attempts{0};
  std::atomic<bool> fixed{false};
  Runtime runtime(on(uri));
  runtime.add(Workflow("flaky", [&](Step& step, const json&) -> json {
    return step.run("call",
                    [&] {
                      ++attempts;
                      if (!fixed) throw std::runtime_error("service down");
                      return 1;
                    },
                    {.retry = test::exact_policy(2, 1ms)});
  }));
  runtime.add(Workflow("idle", [](Step& step, const json&) -> json {
    step.sleep("long", 1h);
    return nullptr;
  }));
  test::Serving serving(runtime);
  const std::string id = runtime.start("flaky");
  REQUIRE(runtime.wait(id, 10s).status == Status::failed);
  CHECK(attempts == 2);
  const std::string sleeper = runtime.start("idle");
  REQUIRE(test::eventually([&] { return runtime.get(sleeper).status == Status::sleeping; }, 10s));

  Runtime other(on(uri));  // an operator's process on another host, as far as the store knows
  fixed = true;
  other.retry(id);
  other.cancel(sleeper, "not needed");
  CHECK(runtime.wait(id, 10s).status == Status::completed);
  CHECK(runtime.get(sleeper).status == Status::cancelled);
}

TEST_CASE(
    "on PostgreSQL, a start with an idempotency key makes one run, and list pages newest first") {
  const std::string uri = test::fresh_database();
  Runtime runtime(on(uri));
  runtime.add(Workflow("noop", [](Step&, const json&) -> json { return 1; }));
  const std::string first = runtime.start("noop", {}, {.idempotency_key = "k"});
  CHECK(runtime.start("noop", {}, {.idempotency_key = "k"}) == first);
  std::vector<std::string> ids{first};
  for (int i = 0; i < 3; ++i) ids.push_back(runtime.start("noop"));
  std::vector<std::string> listed;
  for (const RunInfo& run : runtime.list({})) listed.push_back(run.id);
  CHECK(listed == std::vector<std::string>(ids.rbegin(), ids.rend()));
  CHECK(runtime.run_until_idle() == 4);
}

TEST_CASE("on PostgreSQL, a worker that lost its run to another cannot commit for it") {
  const std::string uri = test::fresh_database();
  auto a = detail::open_store(uri, Durability::normal, nullptr);
  auto b = detail::open_store(uri, Durability::normal, nullptr);
  a->create_run(new_run("r1"));
  detail::ClaimRequest request;
  request.owner = "A";
  request.workflows = {"w"};
  request.now_ms = 1;
  request.lease_ms = 100;
  request.limit = 10;
  REQUIRE(a->claim(request).runs.size() == 1);
  // B finds nothing while A's lease holds, and takes the run once it lapsed.
  request.owner = "B";
  CHECK(b->claim(request).runs.empty());
  request.now_ms = 200;
  REQUIRE(b->claim(request).runs.size() == 1);
  detail::RunWrite late;
  late.run_id = "r1";
  late.owner = "A";
  late.status = Status::completed;
  late.output = "1";
  late.now_ms = 201;
  CHECK(a->commit(late) == detail::Written::refused);
  CHECK(a->get_run("r1", false)->status == Status::running);
  detail::RunWrite own = late;
  own.owner = "B";
  CHECK(b->commit(own) == detail::Written::yes);
  CHECK(a->get_run("r1", false)->status == Status::completed);
}

TEST_CASE(
    "on PostgreSQL, the schema is made once, and a schema of someone else's is refused untouched") {
  const std::string uri = test::fresh_database();
  { Runtime first(on(uri)); }
  { Runtime again(on(uri)); }  // already there: opened, not made again
  auto admin = detail::pg::connect(uri);
  {
    detail::sql::Query count(*admin,
                             "SELECT count(*) FROM information_schema.tables WHERE "
                             "table_schema = 'durable'");
    REQUIRE(count.next());
    CHECK(count.int64(0) == 22);  // 21 tables and the view step_figures
  }
  // A database whose public schema already has a table called runs, named by search_path.
  const std::string foreign = test::fresh_database();
  detail::pg::connect(foreign)->execute("CREATE TABLE public.runs (id INTEGER, owner TEXT)");
  const std::string to_public = foreign + "?options=-c%20search_path%3Dpublic";
  CHECK_THROWS_WITH_AS(Runtime(on(to_public)),
                       doctest::Contains("not durable's (no durable_schema_version table); it "
                                         "was left untouched"),
                       Error);
  auto look = detail::pg::connect(foreign);
  detail::sql::Query columns(*look,
                             "SELECT count(*) FROM information_schema.columns WHERE "
                             "table_schema = 'public' AND table_name = 'runs'");
  REQUIRE(columns.next());
  CHECK(columns.int64(0) == 2);
  // A schema written by a newer durable.
  admin->execute("UPDATE durable.durable_schema_version SET version = 99");
  CHECK_THROWS_WITH_AS(Runtime(on(uri)),
                       doctest::Contains("written by a newer durable (schema version 99"), Error);
  try {
    Runtime runtime(on(uri));
  } catch (const Error& refused) {
    CHECK(refused.code() == "durable.schema");  // what a runbook keys on
  }
}

TEST_CASE(
    "on PostgreSQL, a dropped connection fails one call clearly, and the next one reconnects") {
  const std::string uri = test::fresh_database();
  auto store = detail::open_store(uri, Durability::normal, nullptr);
  store->create_run(new_run("r1"));
  // The server ends every session of this database but the killer's own.
  auto killer = detail::pg::connect(uri);
  killer->execute(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
      "AND pid <> pg_backend_pid()");
  CHECK_THROWS_AS(store->get_run("r1", false), Error);
  const std::optional<RunInfo> run = store->get_run("r1", false);
  REQUIRE(run);
  CHECK(run->workflow == "w");
}

TEST_CASE("an unreachable PostgreSQL server gives an error naming host and port, not a hang") {
  const auto began = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(Runtime(on("postgresql://durable@127.0.0.1:1/nothing?connect_timeout=2")),
                       doctest::Contains("127.0.0.1"), Error);
  CHECK(std::chrono::steady_clock::now() - began < 1min);  // the timeout, not a hang
}

TEST_CASE(
    "on PostgreSQL, a run started by another process is claimed at once, not at the next poll") {
  const std::string uri = test::fresh_database();
  RuntimeOptions slow_poll = on(uri);
  slow_poll.poll_interval = 1h;  // without the NOTIFY, nothing would be claimed for an hour
  Runtime worker(slow_poll);
  worker.add(Workflow(
      "noop", [](Step& step, const json&) -> json { return step.run("one", [] { return 1; }); }));
  test::Serving serving(worker);
  std::this_thread::sleep_for(300ms);  // the worker is idle, its watch listening
  Runtime starter(on(uri));  // another process, as far as the database knows; it serves nothing
  starter.add(Workflow("noop", [](Step&, const json&) -> json { return nullptr; }));
  for (int i = 0; i < 3; ++i) {
    const std::string id = starter.start("noop");
    REQUIRE(test::eventually([&] { return starter.get(id).status == Status::completed; }, 2min));
  }
}

TEST_CASE(
    "the durable command works on a PostgreSQL URI: start, runs, show, stats, cancel, metrics") {
  const std::string uri = test::fresh_database();
  Runtime runtime(on(uri));  // registers the workflow, as a worker of it would
  runtime.add(Workflow("wait", [](Step& step, const json&) -> json {
    step.wait_for_event("go", "go");
    return nullptr;
  }));
  const std::string cli = std::string(DURABLE_CLI) + " --db '" + uri + "' ";
  const auto [started, out] = test::shell(cli + "--json start wait --input '{\"a\":1}'");
  REQUIRE(started == 0);
  const std::string id = json::parse(out).at("id");
  CHECK(runtime.get(id).input == json{{"a", 1}});
  const auto [listed, runs] = test::shell(cli + "runs");
  CHECK(listed == 0);
  CHECK(test::has(runs, id));
  const auto [shown, show] = test::shell(cli + "show " + id);
  CHECK(shown == 0);
  CHECK(test::has(show, "wait"));
  const auto [counted, stats] = test::shell(cli + "--json stats");
  CHECK(counted == 0);
  CHECK(json::parse(stats).at("counts").at("pending") == 1);
  CHECK(test::shell(cli + "cancel " + id + " --reason 'not needed'").first == 0);
  CHECK(runtime.get(id).status == Status::cancelled);
  // The Prometheus text of /metrics, as the HTTP server serves it (the same admin layer).
  const auto [measured, metrics] = test::shell(cli + "metrics");
  CHECK(measured == 0);
  CHECK(test::prometheus::parse(metrics).value(
            "durable_runs", {{"workflow", "wait"}, {"status", "cancelled"}}) == 1);
  CHECK(test::shell(cli + "show 0000").first == 3);  // not found, as on a file
}

TEST_CASE(
    "a role that may only read uses the durable command on PostgreSQL: it makes no schema and "
    "writes nothing") {
  const std::string uri = test::fresh_database();
  Runtime runtime(on(uri));
  runtime.add(Workflow("noop", [](Step&, const json&) -> json { return 1; }));
  const std::string id = runtime.start("noop");
  REQUIRE(runtime.run_until_idle() == 1);
  // A role with no privilege to create anything in the database, that may read durable's tables.
  const std::string role = "reader_" + detail::new_id();
  auto admin = detail::pg::connect(uri);
  admin->execute("CREATE ROLE " + role + " LOGIN");
  admin->execute("GRANT USAGE ON SCHEMA durable TO " + role);
  admin->execute("GRANT SELECT ON ALL TABLES IN SCHEMA durable TO " + role);
  const auto as_reader = [&](const std::string& database) {
    return std::string(DURABLE_CLI) + " --db '" + database + "?user=" + role + "' ";
  };
  const std::string cli = as_reader(uri);
  const auto [listed, runs] = test::shell(cli + "runs");
  CHECK(listed == 0);
  CHECK(test::has(runs, id));
  const auto [shown, show] = test::shell(cli + "show " + id);
  CHECK(shown == 0);
  CHECK(test::has(show, "completed"));
  CHECK(test::shell(cli + "stats").first == 0);
  CHECK(test::shell(cli + "metrics").first == 0);
  // On a database no durable runtime has used, a reader says so and makes nothing.
  const std::string empty = test::fresh_database();
  detail::pg::connect(empty)->execute("GRANT CONNECT ON DATABASE " +
                                      empty.substr(empty.rfind('/') + 1) + " TO " + role);
  const auto [refused, said] = test::shell(as_reader(empty) + "runs");
  CHECK(refused != 0);
  CHECK(test::has(said, "no durable runtime has used this database yet"));
  // A role that may not use the schema is told which grant it lacks, not that nothing is there.
  const std::string stranger = "stranger_" + detail::new_id();
  admin->execute("CREATE ROLE " + stranger + " LOGIN");
  const auto [unused, told] =
      test::shell(std::string(DURABLE_CLI) + " --db '" + uri + "?user=" + stranger + "' runs");
  CHECK(unused != 0);
  CHECK(test::has(told, "may not use the schema 'durable': GRANT USAGE ON SCHEMA durable"));
  // A schema of another version is read by no reader: older ones are migrated by a writer
  // first, newer ones by a newer durable.
  admin->execute("UPDATE durable.durable_schema_version SET version = 0");
  const auto [older, said_older] = test::shell(cli + "runs");
  CHECK(older != 0);
  CHECK(test::has(said_older, "older than this build's"));
  admin->execute("UPDATE durable.durable_schema_version SET version = 99");
  const auto [newer, said_newer] = test::shell(cli + "runs");
  CHECK(newer != 0);
  CHECK(test::has(said_newer, "written by a newer durable"));
  admin->execute("UPDATE durable.durable_schema_version SET version = " +
                 std::to_string(detail::pg::kPgSchemaVersion));
  CHECK(test::shell(cli + "runs").first == 0);
  auto check = detail::pg::connect(empty);
  detail::sql::Query schemas(*check, "SELECT count(*) FROM pg_namespace WHERE nspname = 'durable'");
  REQUIRE(schemas.next());
  CHECK(schemas.int64(0) == 0);
}

TEST_CASE("a failed run's runbook on PostgreSQL names the URI with its password masked") {
  // The test cluster trusts local connections: the password is only carried, never checked.
  std::string uri = test::fresh_database();
  uri.insert(uri.find('@'), ":hunter2secret");
  Runtime runtime(on(uri));
  runtime.add(Workflow("broken", [](Step& step, const json&) -> json {
    return step.run("call",
                    [] {
                      throw std::runtime_error("down");
                      return 0;
                    },
                    {.retry = test::exact_policy(1, 1ms)});
  }));
  const std::string id = runtime.start("broken");
  runtime.run_until_idle();
  REQUIRE(runtime.get(id).status == Status::failed);
  const auto [status, show] =
      test::shell(std::string(DURABLE_CLI) + " --db '" + uri + "' show " + id);
  CHECK(status == 0);
  CHECK(test::has(show, "retry " + id));
  CHECK(test::has(show, "***"));
  CHECK_FALSE(test::has(show, "hunter2secret"));
}

TEST_CASE(
    "on PostgreSQL, a server restarted under a serving worker: it reconnects and goes on, nothing "
    "journaled twice, nothing lost") {
  test::TempDir dir;
  test::OwnCluster cluster(dir.file("pg"), DURABLE_SPARE_PG_PORT);
  cluster.start();
  const std::string log = dir.file("bodies");
  RuntimeOptions options = on(cluster.uri());
  options.poll_interval = 20ms;
  options.lease = 2s;  // runs held when the server went away are taken up again after it
  Runtime runtime(options);
  runtime.add(test::job_workflow(log));
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(runtime.start("job", {{"i", i}, {"ms", 20}}));
  const auto bodies = [&] { return test::read_bodies(log).size(); };
  const auto completed = [&]() -> std::size_t {
    try {
      return runtime.list({.status = Status::completed, .workflow = "job", .limit = 1000}).size();
    } catch (const Error&) {
      return 0;  // the server is away: the call fails, the next one reconnects
    }
  };
  {
    test::Serving serving(runtime);
    REQUIRE(test::eventually([&] { return bodies() >= 60; }, 30s));
    REQUIRE(completed() < 40);
    REQUIRE(cluster.restart());
    REQUIRE(test::eventually([&] { return completed() == 40; }, 60s));
    CHECK_FALSE(serving.error());
  }
  const auto runs_of = test::bodies_by_step(log);
  CHECK(runs_of.size() == 400);
  const int again = test::bodies_run_again(runs_of);
  for (const std::string& id : ids) {
    CHECK(runtime.get(id).output == 45);
    CHECK(runtime.steps(id).size() == 10);  // each step journaled once
  }
  MESSAGE("bodies run again after the restart: " << again);
}

TEST_CASE(
    "on PostgreSQL, a statement timeout fails the call clearly, loses nothing, and the next call "
    "works") {
  const std::string uri = test::fresh_database();
  Runtime runtime(on(uri + "?options=-c%20statement_timeout%3D300"));
  runtime.add(Workflow("noop", [](Step&, const json&) -> json { return 1; }));
  const std::string id = runtime.start("noop");
  // Another session holds the runs table, as a long migration or a stray lock would.
  auto holder = detail::pg::connect(uri);
  holder->execute("BEGIN");
  holder->execute("LOCK TABLE durable.runs IN ACCESS EXCLUSIVE MODE");
  CHECK_THROWS_WITH_AS(runtime.get(id), doctest::Contains("statement timeout"), Error);
  holder->execute("ROLLBACK");
  CHECK(runtime.get(id).status == Status::pending);
  CHECK(runtime.run_until_idle() == 1);
  CHECK(runtime.get(id).output == 1);
}

TEST_CASE(
    "testing::replay reads a run's journal from a PostgreSQL URI, and tells a changed workflow") {
  const std::string uri = test::fresh_database();
  const auto recorded = [](Step& step, const json&) -> json {
    return step.run("a", [] { return 1; }) + step.run("b", [] { return 2; });
  };
  std::string id;
  {
    Runtime runtime(on(uri));
    runtime.add(Workflow("sum", recorded));
    id = runtime.start("sum");
    runtime.run_until_idle();
    REQUIRE(runtime.get(id).output == 3);
  }
  testing::replay(Workflow("sum", recorded), uri, id);
  CHECK(testing::replay_all(Workflow("sum", recorded), uri) == 1);
  const Workflow changed("sum", [](Step& step, const json&) -> json {
    return step.run("b", [] { return 2; });  // step "a" removed: the journal no longer fits
  });
  CHECK_THROWS(testing::replay(changed, uri, id));
}
