// SPDX-License-Identifier: Apache-2.0
// Schedules: recurring starts every interval or by cron, with a count; catch-up after downtime;
// list, replace and remove; bad input.

#include <doctest/doctest.h>

#include <thread>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

Workflow remind() {
  return Workflow("remind", [](Step& step, const json& input) -> json {
    return step.run("send", [&] { return input.value("to", std::string("nobody")); });
  });
}

std::size_t runs_of(Runtime& runtime) { return runtime.list({.workflow = "remind"}).size(); }

// Whole minutes since the epoch of a time, to check cron times.
std::int64_t minute_of_day(Clock::time_point t) {
  const auto minutes = std::chrono::duration_cast<std::chrono::minutes>(t.time_since_epoch());
  return minutes.count() % (24 * 60);
}

}  // namespace

TEST_CASE(
    "an interval schedule with a count starts that many runs, one per due time (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(remind());
  const std::string id =
      runtime->schedule("remind", {{"to", "ada"}}, {.id = "daily", .every = 24h, .count = 5});
  CHECK(id == "daily");
  REQUIRE(runtime->schedules().size() == 1);
  CHECK(runtime->schedules()[0].next_at == clock.now() + 24h);
  CHECK(runtime->schedules()[0].remaining == 5);
  runtime->run_until_idle();
  CHECK(runs_of(*runtime) == 0);
  for (int day = 1; day <= 5; ++day) {
    clock.advance(24h);
    runtime->run_until_idle();
    runtime->run_until_idle();  // a second look in the same due time starts nothing more
    CHECK(runs_of(*runtime) == static_cast<std::size_t>(day));
  }
  CHECK(runtime->schedules().empty());  // its count is used up
  clock.advance(24h);
  runtime->run_until_idle();
  CHECK(runs_of(*runtime) == 5);
  for (const RunInfo& run : runtime->list({.workflow = "remind"})) {
    CHECK(run.status == Status::completed);
    CHECK(run.output == "ada");
    CHECK(runtime->get(run.id).history.front().reason == "started by schedule 'daily'");
  }
  CHECK(runtime->counters().schedule_fires == 5);
}

TEST_CASE(
    "after downtime a schedule fires once for what it missed, then keeps its grid (on each "
    "store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  const auto start = clock.now();
  {
    auto runtime = test::runtime_on(db, clock);
    runtime->add(remind());
    runtime->schedule("remind", {}, {.id = "hourly", .every = 1h});
  }
  clock.advance(10h + 20min);  // no runtime was up for ten due times
  auto runtime = test::runtime_on(db, clock);
  runtime->add(remind());
  runtime->run_until_idle();
  CHECK(runs_of(*runtime) == 1);
  REQUIRE(runtime->schedules().size() == 1);
  CHECK(runtime->schedules()[0].next_at == start + 11h);
  CHECK(runtime->schedules()[0].fired == 1);
  clock.advance(40min);
  runtime->run_until_idle();
  CHECK(runs_of(*runtime) == 2);
}

// The next fire time the loop keeps does not hide a schedule whose time came during the pass
// (here while a body moved the clock on): it fires before the pass ends.
TEST_CASE(
    "a schedule that comes due while a body executes fires in the same run_until_idle (on each "
    "store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(remind());
  runtime->add(Workflow("long", [&clock](Step& step, const json&) -> json {
    return step.run("work", [&clock] {
      clock.advance(2h);
      return 1;
    });
  }));
  runtime->schedule("remind", {{"to", "ada"}}, {.id = "hourly", .every = 1h});
  runtime->start("long");
  runtime->run_until_idle();
  CHECK(runs_of(*runtime) == 1);
}

TEST_CASE("a cron schedule fires at its matching minutes (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  auto runtime = test::runtime_on(db, clock);
  runtime->add(remind());
  runtime->schedule("remind", {}, {.id = "nine", .cron = "0 9 * * *", .count = 2});
  const Clock::time_point first = runtime->schedules().at(0).next_at;
  CHECK(minute_of_day(first) == 9 * 60);
  CHECK(first > clock.now());
  CHECK(first <= clock.now() + 24h);
  clock.advance(std::chrono::duration_cast<std::chrono::milliseconds>(first - clock.now()));
  runtime->run_until_idle();
  CHECK(runs_of(*runtime) == 1);
  CHECK(runtime->schedules().at(0).next_at == first + 24h);
  clock.advance(3 * 24h);  // missed two: fires once
  runtime->run_until_idle();
  CHECK(runs_of(*runtime) == 2);
  CHECK(runtime->schedules().empty());
}

TEST_CASE("a schedule can be replaced and removed before it fires (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  auto runtime = test::runtime_on(db, clock);
  runtime->add(remind());
  runtime->schedule("remind", {{"to", "ada"}}, {.id = "s", .every = 1h});
  runtime->schedule("remind", {{"to", "bob"}}, {.id = "s", .every = 2h});  // replaces
  REQUIRE(runtime->schedules().size() == 1);
  CHECK(runtime->schedules()[0].input == json{{"to", "bob"}});
  CHECK(runtime->schedules()[0].every == 2h);
  clock.advance(2h);
  runtime->run_until_idle();
  REQUIRE(runs_of(*runtime) == 1);
  CHECK(runtime->list({.workflow = "remind"})[0].output == "bob");

  const std::string other = runtime->schedule("remind", {}, {.every = 1h});
  CHECK_FALSE(other.empty());
  CHECK(runtime->schedules().size() == 2);
  runtime->unschedule(other);
  runtime->unschedule("s");
  CHECK(runtime->schedules().empty());
  clock.advance(5h);
  runtime->run_until_idle();
  CHECK(runs_of(*runtime) == 1);
  CHECK_THROWS_WITH_AS(runtime->unschedule("s"), "[durable.not_found] no schedule with id 's'",
                       NotFound);
}

TEST_CASE(
    "a delayed first start and two runtimes firing one schedule start one run per time (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  test::ManualClock clock;
  auto a = test::runtime_on(db, clock);
  auto b = test::runtime_on(db, clock);
  a->add(remind());
  b->add(remind());
  a->schedule("remind", {}, {.id = "s", .every = 1h, .first = clock.now() + 30min});
  clock.advance(30min);
  b->run_until_idle();
  a->run_until_idle();
  CHECK(runs_of(*a) == 1);
  clock.advance(1h);
  a->run_until_idle();
  b->run_until_idle();
  CHECK(runs_of(*a) == 2);
}

TEST_CASE("bad schedules are clear errors and store nothing (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  auto runtime = test::runtime_on(db, clock);
  runtime->add(remind());
  CHECK_THROWS_AS(runtime->schedule("nope", {}, {.every = 1h}), UnknownWorkflow);
  CHECK_THROWS_WITH_AS(runtime->schedule("remind", {}, {}),
                       "[durable.invalid_argument] schedule of 'remind': give either "
                       "Schedule::every or Schedule::cron, not "
                       "neither",
                       Error);
  CHECK_THROWS_WITH_AS(runtime->schedule("remind", {}, {.every = 1h, .cron = "* * * * *"}),
                       doctest::Contains("not both"), Error);
  CHECK_THROWS_WITH_AS(runtime->schedule("remind", {}, {.every = -1h}),
                       "[durable.invalid_argument] schedule of 'remind': every must be positive",
                       Error);
  CHECK_THROWS_WITH_AS(runtime->schedule("remind", {}, {.every = 1h, .count = 0}),
                       doctest::Contains("count must be 1 or more"), Error);
  CHECK_THROWS_WITH_AS(runtime->schedule("remind", {}, {.cron = "0 25 * * *"}),
                       doctest::Contains("the hour field '25'"), Error);
  CHECK_THROWS_WITH_AS(runtime->schedule("remind", {}, {.cron = "0 0 30 2 *"}),
                       doctest::Contains("never matches"), Error);
  CHECK_THROWS_WITH_AS(runtime->schedule("remind", {{"to", "\xff"}}, {.every = 1h}),
                       doctest::Contains("cannot be stored"), Error);
  CHECK(runtime->schedules().empty());
}

TEST_CASE(
    "schedule() repeated with the same id and spec keeps the schedule going (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  auto runtime = test::runtime_on(db, clock);
  runtime->add(remind());
  const Schedule daily{.id = "daily", .every = 24h, .count = 3};
  runtime->schedule("remind", {{"to", "ada"}}, daily);
  clock.advance(24h);
  runtime->run_until_idle();
  clock.advance(12h);
  // A program that calls schedule() at each start, restarted more often than every.
  runtime = test::runtime_on(db, clock);
  runtime->add(remind());
  runtime->schedule("remind", {{"to", "ada"}}, daily);
  REQUIRE(runtime->schedules().size() == 1);
  CHECK(runtime->schedules()[0].remaining == 2);
  CHECK(runtime->schedules()[0].fired == 1);
  const auto next = runtime->schedules()[0].next_at;
  clock.advance(12h);
  CHECK(next == clock.now());
  runtime->run_until_idle();
  CHECK(runs_of(*runtime) == 2);
  // Another spec under the same id replaces it.
  runtime->schedule("remind", {{"to", "bob"}}, daily);
  CHECK(runtime->schedules()[0].remaining == 3);
  CHECK(runtime->schedules()[0].fired == 0);
}

TEST_CASE("a schedule() repeated at program start does not start its count again (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  auto runtime = test::runtime_on(db, clock);
  runtime->add(Workflow("remind", [](Step& step, const json&) -> json {
    return step.run("send", [] { return 1; });
  }));
  // What docs/runtime.md advises: a program may call schedule() at every start.
  const auto program_start = [&] {
    runtime->schedule("remind", {}, {.id = "reminder:ada", .every = 24h, .count = 2});
  };
  program_start();
  for (int day = 0; day < 3; ++day) {
    clock.advance(24h);
    runtime->run_until_idle();
  }
  REQUIRE(runtime->list({.workflow = "remind"}).size() == 2);  // count used up
  program_start();                                             // the program restarts
  for (int day = 0; day < 3; ++day) {
    clock.advance(24h);
    runtime->run_until_idle();
  }
  CHECK(runtime->list({.workflow = "remind"}).size() == 2);
}

TEST_CASE(
    "a replaced schedule whose first start was already fired still starts it (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  auto runtime = test::runtime_on(db, clock);
  runtime->add(Workflow("remind", [](Step& step, const json& input) -> json {
    return step.run("send", [input] { return input; });
  }));
  const auto first = clock.now() + 1h;
  runtime->schedule("remind", {{"text", "old"}},
                    {.id = "r", .every = 24h, .count = 2, .first = first});
  clock.advance(1h);
  runtime->run_until_idle();
  REQUIRE(runtime->list({.workflow = "remind"}).size() == 1);
  // The text was wrong: replace the schedule, same timing.
  runtime->schedule("remind", {{"text", "new"}},
                    {.id = "r", .every = 24h, .count = 2, .first = first});
  runtime->run_until_idle();
  // The replaced schedule starts at `first` (already past): a run with the new input is due.
  CHECK(runtime->list({.workflow = "remind"}).size() == 2);
}

TEST_CASE("a schedule fires while a steady stream of work keeps serve() busy (on each store)") {
  test::TempDir dir;
  Runtime runtime(
      {.database = test::database(dir, "db"), .poll_interval = 50ms, .log_level = LogLevel::off});
  // Each run of "chain" sends the event that starts the next one: there is always work due.
  runtime.add(Workflow("chain",
                       [](Step& step, const json&) -> json {
                         step.send_event("next", "tick");
                         return 1;
                       },
                       {.events = {"tick"}}));
  runtime.add(Workflow("remind", [](Step& step, const json&) -> json {
    return step.run("send", [] { return 1; });
  }));
  runtime.send_event("tick");
  runtime.schedule("remind", {}, {.id = "soon", .every = 100ms});
  std::thread server([&] { runtime.serve(); });
  std::this_thread::sleep_for(1500ms);
  const std::size_t reminders = runtime.list({.workflow = "remind"}).size();
  runtime.stop();
  server.join();
  MESSAGE("chain runs: " << runtime.list({.workflow = "chain", .limit = 100000}).size());
  CHECK(reminders > 0);
}
