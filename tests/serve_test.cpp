// SPDX-License-Identifier: Apache-2.0
// serve() and stop(), timers, work from other runtimes, concurrency limits, cancel and retry
// across runtimes, and telemetry: log lines, counters and backlog signals.

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

using test::Serving;

RunInfo wait_for(Runtime& runtime, const std::string& id, Status status,
                 std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  RunInfo run = runtime.get(id);
  while (run.status != status && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(2ms);
    run = runtime.get(id);
  }
  return run;
}

// Collects log lines.
struct Lines {
  std::mutex mutex;
  std::vector<json> lines;
  std::function<void(std::string_view)> sink() {
    return [this](std::string_view line) {
      std::lock_guard lock(mutex);
      lines.push_back(json::parse(line));
    };
  }
  std::vector<json> with_event(const std::string& event) {
    std::lock_guard lock(mutex);
    std::vector<json> found;
    for (const json& line : lines) {
      if (line.value("event", "") == event) found.push_back(line);
    }
    return found;
  }
};

}  // namespace

TEST_CASE(
    "serve() runs started work and wakes sleeping runs on time, until stop() (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"), .poll_interval = 120s});
  runtime.add(Workflow("nap", [](Step& step, const json&) -> json {
    step.run("a", [] { return 1; });
    step.sleep("nap", 300ms);
    return step.run("b", [] { return 2; });
  }));
  Serving serving(runtime);
  const auto started = std::chrono::steady_clock::now();
  const std::string id = runtime.start("nap");
  const RunInfo run = wait_for(runtime, id, Status::completed);
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(run.status == Status::completed);
  // Woken by its timer: after 300 ms, and not by the poll, two minutes apart (a bound far from
  // any machine's noise; the speed of a wake-up is the benchmark's business).
  CHECK(took >= 300ms);
  CHECK(took < 60s);
  CHECK(run.invocations == 4);
}

TEST_CASE(
    "stop() before serve() makes it return at once, and a second serve() is refused (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.stop();
  runtime.serve();  // returns
  std::atomic<bool> second_refused{false};
  {
    Serving serving(runtime);
    std::this_thread::sleep_for(50ms);
    try {
      runtime.serve();
    } catch (const Error& e) {
      second_refused = std::string(e.what()) == "[durable.misuse] this runtime is already serving";
    }
  }
  CHECK(second_refused);
}

TEST_CASE(
    "a serving runtime executes runs another runtime wrote, within its poll interval (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime worker({.database = db, .poll_interval = 50ms});
  Runtime other({.database = db});
  for (Runtime* r : {&worker, &other}) {
    r->add(Workflow(
        "w", [](Step& step, const json&) -> json { return step.run("a", [] { return 7; }); }));
  }
  Serving serving(worker);
  std::this_thread::sleep_for(100ms);
  // The worker was told of nothing in its own process: on SQLite only its polls can find the
  // run (on PostgreSQL a notification may wake it first). No bound on how long it took: a
  // loaded machine stretches any.
  const std::string id = other.start("w");
  CHECK(wait_for(other, id, Status::completed).output == 7);
}

TEST_CASE(
    "concurrency limits the runs of a workflow executing at once, across runtimes (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  std::atomic<int> inside{0}, most{0};
  const auto limited = [&] {
    return Workflow("limited",
                    [&](Step& step, const json&) -> json {
                      return step.run("work", [&] {
                        const int now = ++inside;
                        int seen = most.load();
                        while (now > seen && !most.compare_exchange_weak(seen, now)) {
                        }
                        std::this_thread::sleep_for(30ms);
                        --inside;
                        return true;
                      });
                    },
                    {.concurrency = 2});
  };
  Runtime a({.database = db, .threads = 4, .poll_interval = 10ms});
  Runtime b({.database = db, .threads = 4, .poll_interval = 10ms});
  a.add(limited());
  b.add(limited());
  std::vector<std::string> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(a.start("limited"));
  {
    Serving serving_a(a);
    Serving serving_b(b);
    for (const auto& id : ids) CHECK(wait_for(a, id, Status::completed).output == true);
  }
  CHECK(most.load() == 2);
}

TEST_CASE("sleeping and waiting runs hold no concurrency slot (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(Workflow("one_at_a_time",
                        [](Step& step, const json&) -> json {
                          step.run("a", [] { return 1; });
                          step.sleep("nap", 1h);
                          return step.wait_for_event("w", "go", {.timeout = 1h}).has_value();
                        },
                        {.concurrency = 1}));
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(runtime->start("one_at_a_time"));
  runtime->run_until_idle();
  for (const auto& id : ids) CHECK(runtime->get(id).status == Status::sleeping);
  clock.advance(1h);
  runtime->run_until_idle();
  for (const auto& id : ids) CHECK(runtime->get(id).status == Status::waiting);
  runtime->send_event("go");
  runtime->run_until_idle();
  for (const auto& id : ids) CHECK(runtime->get(id).output == true);
}

TEST_CASE("a bad concurrency limit is refused") {
  Runtime runtime({.database = ":memory:"});
  CHECK_THROWS_WITH_AS(
      runtime.add(Workflow("w", [](Step&, const json&) -> json { return 1; }, {.concurrency = -1})),
      "[durable.invalid_argument] workflow 'w': concurrency must be 0 (no limit) or more, not -1",
      Error);
}

TEST_CASE(
    "cancel from another runtime ends a run whose body is running, and its result is not used (on "
    "each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  std::atomic<bool> in_body{false}, release{false};
  Runtime worker({.database = db, .poll_interval = 10ms});
  worker.add(Workflow("long", [&](Step& step, const json&) -> json {
    step.run("body", [&] {
      in_body = true;
      while (!release) std::this_thread::sleep_for(1ms);
      return 1;
    });
    return step.run("after", [] { return 2; });
  }));
  Runtime operator_view({.database = db});  // a CLI, another process
  const std::string id = worker.start("long");
  Serving serving(worker);
  while (!in_body) std::this_thread::sleep_for(1ms);
  operator_view.cancel(id);
  release = true;
  std::this_thread::sleep_for(100ms);
  CHECK(operator_view.get(id).status == Status::cancelled);
  CHECK(operator_view.steps(id).empty());
}

TEST_CASE("retry from another runtime requeues a failed run for the serving one (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  std::atomic<int> attempts{0};
  Runtime worker({.database = db, .poll_interval = 10ms});
  worker.add(Workflow("fragile", [&](Step& step, const json&) -> json {
    return step.run("call",
                    [&] {
                      if (++attempts == 1) throw std::runtime_error("down");
                      return "up";
                    },
                    {.retry = RetryPolicy{.max_attempts = 1}});
  }));
  const std::string id = worker.start("fragile");
  Serving serving(worker);
  CHECK(wait_for(worker, id, Status::failed).status == Status::failed);
  Runtime operator_view({.database = db});
  operator_view.retry(id);
  CHECK(wait_for(operator_view, id, Status::completed).output == "up");
}

TEST_CASE(
    "log lines are JSON with run id, correlation id, workflow and step, at the set level (on each "
    "store)") {
  test::TempDir dir;
  Lines lines;
  Runtime runtime({.database = test::database(dir, "db"),
                   .log_level = LogLevel::debug,
                   .log_sink = lines.sink()});
  auto calls = std::make_shared<int>(0);
  runtime.add(Workflow("logged", [calls](Step& step, const json&) -> json {
    step.run("a", [] { return 1; });
    step.run("flaky",
             [calls] {
               if ((*calls)++ == 0) throw std::runtime_error("blip");
               return 2;
             },
             {.retry = RetryPolicy{.initial_backoff = std::chrono::milliseconds(0)}});
    throw std::runtime_error("boom");
  }));
  const std::string id = runtime.start("logged", {}, {.correlation_id = "order-7"});
  runtime.run_until_idle();
  runtime.run_until_idle();

  const auto started = lines.with_event("run.started");
  REQUIRE(started.size() == 1);
  CHECK(started[0].at("run_id") == id);
  CHECK(started[0].at("correlation_id") == "order-7");
  CHECK(started[0].at("workflow") == "logged");
  CHECK(started[0].at("level") == "info");
  CHECK(started[0].contains("ts"));
  const auto steps = lines.with_event("step.completed");
  REQUIRE(!steps.empty());
  CHECK(steps[0].at("step") == "a");
  CHECK(steps[0].at("correlation_id") == "order-7");
  const auto retrying = lines.with_event("step.retrying");
  REQUIRE(retrying.size() == 1);
  CHECK(retrying[0].at("step") == "flaky");
  CHECK(retrying[0].at("error") == "std::runtime_error: blip");
  const auto failed = lines.with_event("run.failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].at("level") == "error");

  const Counters counters = runtime.counters();
  CHECK(counters.runs_started == 1);
  CHECK(counters.runs_failed == 1);
  CHECK(counters.runs_completed == 0);
  CHECK(counters.steps == 2);  // a, flaky (its retry updates the same entry)
  CHECK(counters.retries == 1);

  Lines quiet;
  Runtime warn_only(
      {.database = test::database(dir, "warn.db"), .log_sink = quiet.sink()});  // default: warn
  warn_only.add(Workflow(
      "fine", [](Step& step, const json&) -> json { return step.run("a", [] { return 1; }); }));
  warn_only.start("fine");
  warn_only.run_until_idle();
  CHECK(quiet.lines.empty());
  CHECK(warn_only.counters().runs_completed == 1);
}

TEST_CASE(
    "backlog signals: pending depth and the oldest pending age cross their thresholds (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Lines lines;
  // The runs are of a workflow this runtime does not have: they stay due and unclaimed.
  Runtime producer({.database = db});
  producer.add(Workflow("queued", [](Step&, const json&) -> json { return 1; }));
  Runtime worker({.database = db,
                  .poll_interval = 20ms,
                  .log_level = LogLevel::info,
                  .log_sink = lines.sink(),
                  .backlog_warning = 3,
                  .backlog_age_breach = 150ms});
  worker.add(Workflow("other", [](Step&, const json&) -> json { return 1; }));
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(producer.start("queued"));
  {
    Serving serving(worker);
    std::this_thread::sleep_for(400ms);
    for (const auto& id : ids) producer.cancel(id);
    std::this_thread::sleep_for(200ms);
  }
  const auto deep = lines.with_event("workflow.backlog_warning");
  REQUIRE(deep.size() == 1);
  CHECK(deep[0].at("pending") == 3);
  CHECK(deep[0].at("level") == "warn");
  const auto old = lines.with_event("workflow.backlog_age_breach");
  REQUIRE(old.size() == 1);
  CHECK(old[0].at("oldest_pending_age_ms").get<int>() >= 150);
  CHECK(lines.with_event("workflow.backlog_cleared").size() == 1);
  CHECK(lines.with_event("workflow.backlog_age_cleared").size() == 1);
}

TEST_CASE("a workflow at its concurrency limit still takes over a run whose lease lapsed") {
  test::TempDir dir;
  Runtime runtime({.database = dir.file("db")});
  runtime.add(Workflow(
      "single", [](Step& step, const json&) -> json { return step.run("a", [] { return 1; }); },
      {.concurrency = 1}));
  const std::string id = runtime.start("single");
  {
    // An owner on another host that hung: running, its lease long lapsed.
    SQLite::Database db(dir.file("db"), SQLite::OPEN_READWRITE);
    db.exec("UPDATE runs SET status = 'running', owner = 'ghost', due_at = 1 WHERE id = '" + id +
            "'");
  }
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::completed);
}

TEST_CASE(
    "a notify while serve() tears down does not post to its destroyed io_context (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");  // one for the runtimes, one at a time
  // The race is the runtime's own; PostgreSQL adds its listening thread, and a runtime there
  // takes a tenth of a second to connect: fewer rounds.
  const int rounds = test::on_postgres() ? 25 : 100;
  for (int i = 0; i < rounds; ++i) {
    Runtime runtime({.database = db, .poll_interval = 1s});
    std::atomic<bool> go{true};
    std::thread server([&] { runtime.serve(); });
    std::thread pester([&] {
      while (go) runtime.stop();  // stop() (or start, send_event, cancel...) from another thread
    });
    server.join();
    go = false;
    pester.join();
  }
}

TEST_CASE("stop() does not wait out a run's resident sleep (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"),
                   .replay = Replay::on_recovery,
                   .resident_sleep = 10min,
                   .poll_interval = 50ms,
                   .log_level = LogLevel::off});
  std::atomic<bool> sleeping{false};
  runtime.add(Workflow("napper", [&](Step& step, const json&) -> json {
    step.run("a", [] { return 1; });
    sleeping = true;
    step.sleep("nap", 2min);  // within resident_sleep: waited out in place
    return step.run("b", [] { return 2; });
  }));
  const std::string id = runtime.start("napper");
  std::thread server([&] { runtime.serve(); });
  while (!sleeping) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(100ms);
  const auto asked = std::chrono::steady_clock::now();
  runtime.stop();
  server.join();
  CHECK(std::chrono::steady_clock::now() - asked < 1min);  // far short of the 2 min sleep
  CHECK(runtime.get(id).status != Status::completed);      // stopped in the sleep, not after it
}

// --- Retention of events, and serve()'s back-off while the database fails ---

namespace {
std::int64_t event_rows(const std::string& path) {
  SQLite::Database db(path, SQLite::OPEN_READONLY);
  return db.execAndGet("SELECT count(*) FROM events").getInt64();
}

Workflow one_step(const std::string& name) {
  return Workflow(
      name, [](Step& step, const json&) -> json { return step.run("one", [] { return 1; }); });
}
}  // namespace

TEST_CASE("serve() deletes events older than event_retention, and none when it is 0") {
  test::TempDir dir;
  test::ManualClock clock;
  for (const bool keep_forever : {false, true}) {
    CAPTURE(keep_forever);
    const std::string db = dir.file(keep_forever ? "forever.db" : "week.db");
    Lines lines;
    RuntimeOptions opts{.log_level = LogLevel::info, .log_sink = lines.sink()};
    opts.event_retention = keep_forever ? 0ms : std::chrono::hours(24 * 7);
    auto runtime = test::runtime_on(db, clock, opts);
    runtime->add(one_step("tick"));
    for (int i = 0; i < 3; ++i) runtime->send_event("old", {{"i", i}});
    clock.advance(std::chrono::hours(24 * 8));
    runtime->send_event("recent", json::object());
    Serving serving(*runtime);
    // Two runs done: at least one round, with its housekeeping, ran after the first.
    for (int i = 0; i < 2; ++i) {
      REQUIRE(wait_for(*runtime, runtime->start("tick"), Status::completed).status ==
              Status::completed);
    }
    if (keep_forever) {
      CHECK(event_rows(db) == 4);
      CHECK(lines.with_event("serve.events_purged").empty());
    } else {
      CHECK(test::eventually([&] { return event_rows(db) == 1; }));  // the recent one stays
      // The line is written after the delete commits: wait for it too.
      CHECK(test::eventually([&] { return !lines.with_event("serve.events_purged").empty(); }));
      const auto purged = lines.with_event("serve.events_purged");
      REQUIRE(purged.size() == 1);
      CHECK(purged[0].at("deleted") == 3);
    }
  }
}

TEST_CASE(
    "serve() backs off while the database fails, with bounded serve.error lines, and "
    "logs its recovery once") {
  test::TempDir dir;
  const std::string path = dir.file("db");
  Lines lines;
  Runtime runtime({.database = path,
                   .poll_interval = 1ms,
                   .log_level = LogLevel::info,
                   .log_sink = lines.sink()});
  runtime.add(one_step("one"));
  // The fault: every update of a run's row fails, as every write does on a full disk. A trigger
  // from another connection makes the store's own writes fail, with no privileges needed.
  SQLite::Database other(path, SQLite::OPEN_READWRITE);
  other.exec(
      "CREATE TRIGGER fault BEFORE UPDATE ON runs "
      "BEGIN SELECT RAISE(FAIL, 'injected: database or disk is full'); END");
  const std::string first = runtime.start("one");  // stored; its claim fails
  Serving serving(runtime);
  constexpr std::size_t kLines = 8;
  REQUIRE(test::eventually([&] { return lines.with_event("serve.error").size() >= kLines; }));
  const auto errors = lines.with_event("serve.error");
  // Every line waits twice as long as the one before (1, 2, 4 ... 128 ms): 8 lines over 255
  // polls' worth of time, where the loop without back-off logged one line per 1 ms poll.
  std::int64_t failures = 0;
  for (std::size_t i = 0; i < kLines; ++i) {
    CAPTURE(i);
    CHECK(errors[i].at("msg").get<std::string>().find("injected") != std::string::npos);
    CHECK(errors[i].at("retry_in_ms") == std::int64_t{1} << i);
    failures += errors[i].at("repeats").get<std::int64_t>() + 1;
    CHECK(errors[i].at("failures") == failures);  // every failed round is counted
  }
  CHECK(lines.with_event("serve.recovered").empty());

  other.exec("DROP TRIGGER fault");
  const std::string second = runtime.start("one");  // wakes serve() from its pause
  CHECK(wait_for(runtime, first, Status::completed).status == Status::completed);
  CHECK(wait_for(runtime, second, Status::completed).status == Status::completed);
  REQUIRE(test::eventually([&] { return lines.with_event("serve.recovered").size() == 1; }));
  // More rounds succeed; the recovery is not logged again.
  CHECK(wait_for(runtime, runtime.start("one"), Status::completed).status == Status::completed);
  CHECK(lines.with_event("serve.recovered").size() == 1);
  CHECK(lines.with_event("serve.recovered")[0].at("failures").get<std::int64_t>() >=
        static_cast<std::int64_t>(kLines));
}
