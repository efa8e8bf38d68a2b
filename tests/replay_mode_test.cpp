// SPDX-License-Identifier: Apache-2.0
// Replay::on_recovery (DESIGN §2): the workflow goes on in place after its steps are journaled,
// replays only after eviction or a restart, and shares the journal format with every_step.

#include <doctest/doctest.h>

#include <algorithm>
#include <mutex>

#include "fiber_scheduler.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {
RuntimeOptions resident(std::string database) {
  RuntimeOptions opts;
  opts.database = std::move(database);
  opts.replay = Replay::on_recovery;
  return opts;
}
}  // namespace

TEST_CASE(
    "on_recovery: code outside steps runs once and the run takes one invocation (on each store)") {
  std::vector<std::string> log;
  test::TempDir dir;
  Runtime runtime(resident(test::database(dir, "db")));
  runtime.add(Workflow("three", [&](Step& step, const json&) -> json {
    log.push_back("outside A");
    step.run("step1", [&] { log.push_back("in 1"); });
    log.push_back("outside B");
    step.run("step2", [&] { log.push_back("in 2"); });
    step.run("step3", [&] { log.push_back("in 3"); });
    return nullptr;
  }));
  const std::string id = runtime.start("three");
  CHECK(runtime.run_until_idle() == 1);
  CHECK(log == std::vector<std::string>{"outside A", "in 1", "outside B", "in 2", "in 3"});
  CHECK(runtime.get(id).invocations == 1);
  CHECK(runtime.steps(id).size() == 3);
}

TEST_CASE(
    "on_recovery: repeated ids in place get id, id#2, ... as under every_step (on each store)") {
  test::TempDir dir;
  Runtime runtime(resident(test::database(dir, "db")));
  runtime.add(Workflow("loop", [](Step& step, const json&) -> json {
    int sum = 0;
    for (int i = 1; i <= 3; ++i) sum += step.run("add", [i] { return i; });
    return sum;
  }));
  const std::string id = runtime.start("loop");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == 6);
  std::vector<std::string> keys;
  for (const auto& s : runtime.steps(id)) keys.push_back(s.id);
  CHECK(keys == std::vector<std::string>{"add", "add#2", "add#3"});
}

TEST_CASE(
    "on_recovery: a sleep longer than resident_sleep evicts the run, which replays on wake (on "
    "each store)") {
  test::ManualClock clock;
  test::TempDir dir;
  Runtime runtime(resident(test::database(dir, "db")));
  clock.attach(runtime);
  std::vector<std::string> log;
  runtime.add(Workflow("nap", [&](Step& step, const json&) -> json {
    log.push_back("A");
    step.sleep("long", 1h);
    log.push_back("B");
    return nullptr;
  }));
  const std::string id = runtime.start("nap");
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::sleeping);
  clock.advance(1h);
  runtime.run_until_idle();
  CHECK(log == std::vector<std::string>{"A", "A", "B"});
  CHECK(runtime.get(id).invocations == 2);
}

TEST_CASE(
    "on_recovery: a short sleep and a short retry backoff are waited out in place (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime(resident(test::database(dir, "db")));
  int attempts = 0, outside = 0;
  runtime.add(Workflow("short", [&](Step& step, const json&) -> json {
    ++outside;
    step.sleep("blink", 30ms);
    return step.run("flaky",
                    [&] {
                      if (++attempts == 1) throw std::runtime_error("blip");
                      return attempts;
                    },
                    {.retry = test::exact_policy(3, 30ms)});
  }));
  const std::string id = runtime.start("short");
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == 2);
  CHECK(outside == 1);
  CHECK(run.invocations == 1);
  for (const auto& t : run.history) CHECK(t.status != Status::sleeping);
}

TEST_CASE(
    "on_recovery: parallel and nested steps in place, seed example in one invocation (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime(resident(test::database(dir, "db")));
  runtime.add(Workflow("nested", [](Step& step, const json&) -> json {
    auto step1 = step.start("step1", [&] {
      const json step3 = step.run("step3", [] { return json{{"baz", "3"}}; });
      return json{{"foo", "1"}, {"step3Result", step3}};
    });
    auto step2 = step.start("step2", [] { return json{{"bar", "2"}}; });
    auto [r1, r2] = all(step1, step2);
    return json::array({r1, r2});
  }));
  const std::string id = runtime.start("nested");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output ==
        json::parse(R"([{"foo":"1","step3Result":{"baz":"3"}},{"bar":"2"}])"));
  CHECK(runtime.get(id).invocations == 1);
}

TEST_CASE(
    "a journal written under every_step completes under on_recovery, and the reverse (on each "
    "store)") {
  for (const bool every_step_first : {true, false}) {
    CAPTURE(every_step_first);
    test::TempDir dir;
    test::ManualClock clock;
    int first = 0, second = 0;
    const auto flow = [&] {
      return Workflow("flow", [&](Step& step, const json&) -> json {
        const int a = step.run("first", [&] { return ++first; });
        step.sleep("pause", 1h);
        return a + step.run("second", [&] { return ++second * 10; });
      });
    };
    const std::string db = test::database(dir, "modes.db");
    RuntimeOptions before = every_step_first ? RuntimeOptions{} : resident(db);
    before.database = db;
    RuntimeOptions after = every_step_first ? resident(db) : RuntimeOptions{};
    after.database = db;
    std::string id;
    {
      auto runtime = test::runtime_on(before.database, clock, before);
      runtime->add(flow());
      id = runtime->start("flow");
      runtime->run_until_idle();
      CHECK(runtime->get(id).status == Status::sleeping);
    }
    clock.advance(1h);
    auto runtime = test::runtime_on(after.database, clock, after);
    runtime->add(flow());
    runtime->run_until_idle();
    CHECK(runtime->get(id).output == 11);
    CHECK(first == 1);
    CHECK(second == 1);
  }
}

TEST_CASE("ending an invocation destroys the workflow's locals (on each store)") {
  int constructed = 0, destroyed = 0;
  struct Tracked {
    int* destroyed;
    ~Tracked() { ++*destroyed; }
  };
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("raii", [&](Step& step, const json&) -> json {
    Tracked local{&destroyed};
    ++constructed;
    step.run("one", [] {});
    step.run("two", [] {});
    return nullptr;
  }));
  runtime.start("raii");
  runtime.run_until_idle();
  CHECK(constructed == 3);
  CHECK(destroyed == 3);
}

TEST_CASE(
    "on_recovery: a caught StepFailed does not replay, and in-place sleeps end completed (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime(resident(test::database(dir, "db")));
  int outside = 0;
  runtime.add(Workflow("best-effort", [&](Step& step, const json&) -> json {
    ++outside;
    try {
      step.run("optional", [] { throw NonRetryableError("down"); });
    } catch (const StepFailed&) {
    }
    step.sleep("blink", 20ms);
    return step.run("after", [] { return 1; });
  }));
  const std::string id = runtime.start("best-effort");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == 1);
  CHECK(outside == 1);
  CHECK(runtime.get(id).invocations == 1);
  for (const auto& s : runtime.steps(id)) {
    if (s.id == "blink") CHECK(s.status == "completed");
    if (s.id == "optional") CHECK(s.status == "failed");
  }
}

TEST_CASE("on_recovery: runs sleeping in place let each other go on (on each store)") {
  if (!detail::FiberScheduler::uses_fibers()) {
    MESSAGE("not run: this build has no fibers (ThreadSanitizer)");
    return;
  }
  constexpr int kRuns = 5;
  test::TempDir dir;
  Runtime runtime(resident(test::database(dir, "db")));
  // Each run notes when it lies down and when it gets up; one after another, a run would lie
  // down only after the one before got up. An order, not a bound on time.
  std::mutex mutex;
  std::vector<std::chrono::steady_clock::time_point> down, up;
  const auto note = [&](std::vector<std::chrono::steady_clock::time_point>& list) {
    std::lock_guard lock(mutex);
    list.push_back(std::chrono::steady_clock::now());
    return true;
  };
  runtime.add(Workflow("nap", [&](Step& step, const json&) -> json {
    step.run("lie-down", [&] { return note(down); });
    step.sleep("short", 300ms);
    step.run("get-up", [&] { return note(up); });
    return "rested";
  }));
  std::vector<std::string> ids;
  for (int i = 0; i < kRuns; ++i) ids.push_back(runtime.start("nap"));
  runtime.run_until_idle();
  for (const auto& id : ids) CHECK(runtime.get(id).output == "rested");
  REQUIRE(down.size() == kRuns);
  REQUIRE(up.size() == kRuns);
  CHECK(*std::max_element(down.begin(), down.end()) < *std::min_element(up.begin(), up.end()));
}
