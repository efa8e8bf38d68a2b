// SPDX-License-Identifier: Apache-2.0
// The replay lifecycle of DESIGN §2, with the seed's log patterns as the oracle.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;
using durable::test::ManualClock;
using durable::test::TempDir;

TEST_CASE("three steps print the seed's log pattern over 4 invocations (on each store)") {
  test::TempDir dir;
  std::vector<std::string> log;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("three", [&](Step& step, const json&) -> json {
    log.push_back("outside A");
    step.run("step1", [&] { log.push_back("in 1"); });
    log.push_back("outside B");
    step.run("step2", [&] { log.push_back("in 2"); });
    step.run("step3", [&] { log.push_back("in 3"); });
    return nullptr;
  }));
  const std::string id = runtime.start("three");
  CHECK(runtime.run_until_idle() == 4);
  const std::vector<std::string> expected = {"outside A", "in 1",      "outside A", "outside B",
                                             "in 2",      "outside A", "outside B", "in 3",
                                             "outside A", "outside B"};
  CHECK(log == expected);
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.invocations == 4);
}

TEST_CASE(
    "two sleeps print A, A B, A B C and the last invocation comes 3 hours after the first (on each "
    "store)") {
  TempDir dir;
  ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "sleep.db"), clock);
  std::vector<std::string> invocations;
  std::vector<Clock::time_point> started;
  runtime->add(Workflow("sleepy", [&](Step& step, const json&) -> json {
    started.push_back(clock.now());
    std::string line = "A";
    step.sleep("first-wait", "1 hour");
    line += " B";
    invocations.push_back(line);  // reached only past the first sleep
    step.sleep("second-wait", 2h);
    line += " C";
    invocations.back() = line;
    return nullptr;
  }));
  const std::string id = runtime->start("sleepy");
  CHECK(runtime->run_until_idle() == 1);
  CHECK(runtime->get(id).status == Status::sleeping);
  clock.advance(59min);
  CHECK(runtime->run_until_idle() == 0);  // not due yet
  clock.advance(1min);
  CHECK(runtime->run_until_idle() == 1);
  CHECK(invocations == std::vector<std::string>{"A B"});
  clock.advance(2h);
  CHECK(runtime->run_until_idle() == 1);
  CHECK(invocations == std::vector<std::string>{"A B", "A B C"});
  REQUIRE(started.size() == 3);
  CHECK(started[2] - started[0] >= 3h);
  const RunInfo run = runtime->get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.invocations == 3);
}

TEST_CASE("the sleep's wake time survives a restart of the runtime (on each store)") {
  TempDir dir;
  const std::string db = test::database(dir, "restart.db");
  ManualClock clock;
  std::string id;
  int finished = 0;
  const auto sleepy = [&] {
    return Workflow("sleepy", [&](Step& step, const json&) -> json {
      step.sleep("nap", 90min);
      ++finished;
      return "rested";
    });
  };
  {
    auto runtime = test::runtime_on(db, clock);
    runtime->add(sleepy());
    id = runtime->start("sleepy");
    runtime->run_until_idle();
    REQUIRE(runtime->get(id).wake_at.has_value());
  }
  clock.advance(89min);
  auto runtime = test::runtime_on(db, clock);
  runtime->add(sleepy());
  CHECK(runtime->run_until_idle() == 0);
  clock.advance(1min);
  CHECK(runtime->run_until_idle() == 1);
  CHECK(finished == 1);
  CHECK(runtime->get(id).output == "rested");
}

TEST_CASE(
    "a run whose wake time passed while no runtime was up runs at the next start (on each store)") {
  TempDir dir;
  ManualClock clock;
  const std::string db = test::database(dir, "down.db");
  std::string id;
  const auto wf = [] {
    return Workflow("later", [](Step& step, const json&) -> json {
      step.sleep("wait", "1 day");
      return step.run("after", [] { return 7; });
    });
  };
  {
    auto runtime = test::runtime_on(db, clock);
    runtime->add(wf());
    id = runtime->start("later");
    runtime->run_until_idle();
  }
  clock.advance(72h);
  auto runtime = test::runtime_on(db, clock);
  runtime->add(wf());
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::completed);
  CHECK(runtime->get(id).output == 7);
}

TEST_CASE(
    "sleep_until a time already past ends the invocation and the run goes on at once (on each "
    "store)") {
  test::TempDir dir;
  ManualClock clock;
  Runtime runtime({.database = test::database(dir, "db")});
  clock.attach(runtime);
  int after = 0;
  runtime.add(Workflow("past", [&](Step& step, const json&) -> json {
    step.sleep_until("deadline", clock.now() - 1h);
    ++after;
    return nullptr;
  }));
  const std::string id = runtime.start("past");
  CHECK(runtime.run_until_idle() == 2);
  CHECK(after == 1);
  const auto steps = runtime.steps(id);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].kind == "sleep");
  CHECK(steps[0].status == "completed");
}

TEST_CASE("replaying() is true until the first step the journal does not hold (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  std::vector<std::pair<bool, bool>> seen;  // (before step1, before step2) per invocation
  runtime.add(Workflow("replays", [&](Step& step, const json&) -> json {
    const bool before1 = step.replaying();
    step.run("step1", [] { return 1; });
    const bool before2 = step.replaying();
    seen.emplace_back(before1, before2);
    step.run("step2", [] { return 2; });
    return nullptr;
  }));
  runtime.start("replays");
  runtime.run_until_idle();
  // invocation 1: no journal; 2: step1 journaled; 3: both journaled
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == std::pair{true, false});
  CHECK(seen[1] == std::pair{true, true});
}

TEST_CASE("run_id and correlation_id are those of the run (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  std::string seen_run, seen_correlation;
  runtime.add(Workflow("ids", [&](Step& step, const json&) -> json {
    seen_run = std::string(step.run_id());
    seen_correlation = std::string(step.correlation_id());
    return nullptr;
  }));
  const std::string id = runtime.start("ids", {}, {.correlation_id = "order-42"});
  runtime.run_until_idle();
  CHECK(seen_run == id);
  CHECK(seen_correlation == "order-42");
  CHECK(runtime.get(id).correlation_id == "order-42");
  const std::string other = runtime.start("ids");
  CHECK_FALSE(runtime.get(other).correlation_id.empty());
  CHECK(runtime.get(other).correlation_id != runtime.get(id).correlation_id);
}

TEST_CASE(
    "a journaled step does not run its body again and returns the journaled value (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int bodies = 0;
  std::vector<int> seen;
  runtime.add(Workflow("memo", [&](Step& step, const json&) -> json {
    const int value = step.run("count", [&] { return ++bodies; });
    seen.push_back(value);
    step.run("other", [] {});
    return value;
  }));
  const std::string id = runtime.start("memo");
  runtime.run_until_idle();
  CHECK(bodies == 1);
  CHECK(seen == std::vector<int>{1, 1});
  CHECK(runtime.get(id).output == 1);
}
