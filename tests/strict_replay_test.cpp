// SPDX-License-Identifier: Apache-2.0
// Strict replay (DESIGN §11.1, docs/versioning.md): code deployed under a run in flight that no
// longer makes the calls the run made stops the run with NonDeterminism, before any body runs
// and before anything new is journaled; retry() resumes it once the old code is back. And
// step.patched gives a run one answer on every invocation, across its wakes.

#include <doctest/doctest.h>

#include <atomic>
#include <durable/testing.hpp>
#include <map>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> keys_of(Runtime& runtime, const std::string& id) {
  std::vector<std::string> keys;
  for (const StepInfo& s : runtime.steps(id)) keys.push_back(s.id);
  return keys;
}

// Release 1 of an expense approval: create the expense, receive the approver's answer, wait a
// day, remind whoever has not answered.
Workflow expense_v1(std::map<std::string, int>& ran) {
  return Workflow("expense", [&ran](Step& step, const json&) -> json {
    step.run("create", [&] { return ++ran["create"]; });
    const std::optional<json> answer = step.receive("approval", "approve", 1h);
    step.sleep("remind-wait", 24h);
    if (!answer) step.run("remind", [&] { return ++ran["remind"]; });
    step.run("book", [&] { return ++ran["book"]; });
    return answer ? "approved" : "timed out";
  });
}

// Release 2, shipped without step.patched: the create step is gone and the receive renamed.
Workflow expense_v2(std::map<std::string, int>& ran) {
  return Workflow("expense", [&ran](Step& step, const json&) -> json {
    const std::optional<json> answer = step.receive("approved", "approve", 1h);
    step.sleep("remind-wait", 24h);
    if (!answer) step.run("remind", [&] { return ++ran["remind"]; });
    step.run("book", [&] { return ++ran["book"]; });
    return answer ? "approved" : "timed out";
  });
}

// A run of release 1, approved and asleep in its day's wait.
std::string approved_and_asleep(const std::string& db, test::ManualClock& clock,
                                std::map<std::string, int>& ran, Replay mode) {
  RuntimeOptions opts = test::quiet(db);
  opts.replay = mode;
  auto runtime = test::runtime_on(db, clock, opts);
  runtime->add(expense_v1(ran));
  const std::string id = runtime->start("expense");
  runtime->run_until_idle();
  runtime->send(id, "approve", {{"by", "ada"}});
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::sleeping);
  return id;
}

}  // namespace

TEST_CASE("strict replay: a deploy that drops and renames steps stops the run before any body, "
          "and retry() finishes it on the old code (on each store)") {
  for (const Replay mode : {Replay::every_step, Replay::on_recovery}) {
    CAPTURE(static_cast<int>(mode));
    test::TempDir dir;
    test::ManualClock clock;
    const std::string db = test::database(dir, "db");
    std::map<std::string, int> ran;
    const std::string id = approved_and_asleep(db, clock, ran, mode);
    RuntimeOptions opts = test::quiet(db);
    opts.replay = mode;
    {
      auto runtime = test::runtime_on(db, clock, opts);
      const std::vector<std::string> before = keys_of(*runtime, id);
      runtime->add(expense_v2(ran));
      clock.advance(25h);
      runtime->run_until_idle();
      const RunInfo run = runtime->get(id);
      REQUIRE(run.status == Status::failed);
      REQUIRE(run.error);
      INFO(run.error->message);
      CHECK(run.error->type == "durable::NonDeterminism");
      CHECK(run.error->step_id == "create");
      CHECK(test::has(run.error->message, "step.receive('approved') (at "));
      CHECK(test::has(run.error->message, "strict_replay_test.cpp:"));
      CHECK(test::has(run.error->message, "step 'create', a step.run that returned 1"));
      CHECK(test::has(run.error->message, "retry()"));
      CHECK(ran["remind"] == 0);  // the approver was not reminded
      CHECK(ran["book"] == 0);
      CHECK(keys_of(*runtime, id) == before);  // nothing new journaled
    }
    // The old code back: retry() resumes the run where it stopped.
    auto runtime = test::runtime_on(db, clock, opts);
    runtime->add(expense_v1(ran));
    runtime->retry(id);
    runtime->run_until_idle();
    CHECK(runtime->get(id).status == Status::completed);
    CHECK(runtime->get(id).output == "approved");
    CHECK(ran["create"] == 1);
    CHECK(ran["remind"] == 0);
    CHECK(ran["book"] == 1);
  }
}

TEST_CASE("strict replay off: a run is matched by id alone and goes on past a dropped step "
          "(on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  std::map<std::string, int> ran;
  const std::string id = approved_and_asleep(db, clock, ran, Replay::every_step);
  RuntimeOptions opts = test::quiet(db);
  opts.strict_replay = false;
  auto runtime = test::runtime_on(db, clock, opts);
  runtime->add(expense_v2(ran));
  clock.advance(25h);
  runtime->run_until_idle();
  // The renamed receive is new to the run: it waits for an answer already received.
  CHECK(runtime->get(id).status == Status::waiting);
  CHECK(ran["book"] == 0);
}

TEST_CASE("strict replay: a step appended after every journaled one, loops of one id and a "
          "step added inside a loop's new turns stay safe for runs in flight (on each store)") {
  for (const Replay mode : {Replay::every_step, Replay::on_recovery}) {
    CAPTURE(static_cast<int>(mode));
    test::TempDir dir;
    test::ManualClock clock;
    const std::string db = test::database(dir, "db");
    RuntimeOptions opts = test::quiet(db);
    opts.replay = mode;
    std::string id;
    {
      auto runtime = test::runtime_on(db, clock, opts);
      runtime->add(Workflow("poll", [](Step& step, const json&) -> json {
        for (int i = 0; i < 3; ++i) step.run("check", [i] { return i; });  // check, check#2, #3
        step.sleep("nap", 1h);
        return 0;
      }));
      id = runtime->start("poll");
      runtime->run_until_idle();
      REQUIRE(runtime->get(id).status == Status::sleeping);
    }
    auto runtime = test::runtime_on(db, clock, opts);
    runtime->add(Workflow("poll", [](Step& step, const json&) -> json {
      int sum = 0;
      for (int i = 0; i < 3; ++i) sum += step.run("check", [i] { return i; });
      step.sleep("nap", 1h);
      for (int i = 0; i < 2; ++i) sum += step.run("check", [] { return 10; });  // check#4, #5
      auto extra = step.start("extra", [] { return 100; });
      return sum + step.run("report", [] { return 1000; }) + extra.get();
    }));
    clock.advance(2h);
    runtime->run_until_idle();
    const RunInfo run = runtime->get(id);
    INFO((run.error ? run.error->message : ""));
    CHECK(run.status == Status::completed);
    CHECK(run.output == 0 + 1 + 2 + 20 + 100 + 1000);
  }
}

TEST_CASE("strict replay: parallel steps journaled out of call order, one of them lost in a "
          "crash, do not trip it (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  const auto workflow = [](std::atomic<int>* first_runs, std::atomic<bool>* second_committed) {
    return Workflow("pair", [=](Step& step, const json&) -> json {
      const std::vector<int> parts = step.map("part", std::vector<int>{0, 1}, [=](int i) {
        if (i == 0) {
          ++*first_runs;
          // part[0] ends only after part[1] is journaled, and the crash comes in between.
          test::eventually([&] { return second_committed->load(); }, 10s);
        }
        return i + 1;
      });
      return parts.at(0) + parts.at(1);
    });
  };
  std::atomic<int> first_runs{0};
  std::atomic<bool> second_committed{false};
  std::string id;
  {
    Runtime crashed(test::quiet(db));
    clock.attach(crashed);
    auto& core = detail::RuntimeAccess::core(crashed);
    core.set_commit_hook([&](const std::string&, const std::vector<detail::EntryWrite>& entries) {
      for (const auto& w : entries) {
        if (w.entry.key != "part[1]") continue;
        core.halt();  // the process dies once part[1] is journaled, before part[0] is
        second_committed = true;
      }
    });
    crashed.add(workflow(&first_runs, &second_committed));
    id = crashed.start("pair");
    crashed.run_until_idle();
    std::vector<std::string> keys;
    for (const StepInfo& s : crashed.steps(id)) keys.push_back(s.id);
    REQUIRE(keys == std::vector<std::string>{"part[1]"});
  }
  clock.advance(31s);  // past the dead worker's lease
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  second_committed = true;
  runtime->add(workflow(&first_runs, &second_committed));
  runtime->run_until_idle();
  const RunInfo run = runtime->get(id);
  INFO((run.error ? run.error->message : ""));
  CHECK(run.status == Status::completed);
  CHECK(run.output == 3);
  CHECK(first_runs == 2);  // part[0] again, part[1] not
}

TEST_CASE("strict replay is one rule: verify() and the stopped run say the same (on each "
          "store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  std::map<std::string, int> ran;
  const std::string id = approved_and_asleep(db, clock, ran, Replay::every_step);
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  runtime->add(expense_v2(ran));
  const VerifyReport report = runtime->verify();
  REQUIRE(report.divergences.size() == 1);
  clock.advance(25h);
  runtime->run_until_idle();
  const RunInfo run = runtime->get(id);
  REQUIRE(run.error);
  CHECK(report.divergences[0].step == "create");
  CHECK(report.divergences[0].message == run.error->message);
  CHECK(test::has(report.divergences[0].where, "strict_replay_test.cpp:"));
}

namespace {

// Release 1 waits (a sleep, an event, a step's backoff) after charging; release 2 adds a patch
// before that wait and asks it again at the end. Every answer the run gets is recorded.
enum class Wake { sleep, event, backoff };

void wait_in(Step& step, Wake wake, std::atomic<int>& attempts) {
  switch (wake) {
    case Wake::sleep:
      step.sleep("cool-off", 150ms);
      break;
    case Wake::event:
      step.wait_for_event("cool-off", "cleared", {.timeout = 1h});
      break;
    case Wake::backoff:
      step.run(
          "cool-off",
          [&] {
            if (++attempts == 1) throw std::runtime_error("busy");
          },
          {.retry = test::exact_policy(3, 150ms)});
      break;
  }
}

}  // namespace

TEST_CASE("step.patched stays false on every invocation of a run that went past it, after a "
          "wake from a sleep, an event or a backoff, in both replay modes (on each store)") {
  for (const Wake wake : {Wake::sleep, Wake::event, Wake::backoff}) {
    for (const Replay mode : {Replay::every_step, Replay::on_recovery}) {
      CAPTURE(static_cast<int>(wake));
      CAPTURE(static_cast<int>(mode));
      test::TempDir dir;
      test::ManualClock clock;
      const std::string db = test::database(dir, "db");
      RuntimeOptions opts = test::quiet(db);
      opts.replay = mode;
      std::atomic<int> attempts{0};
      std::string id;
      {
        auto runtime = test::runtime_on(db, clock, opts);
        runtime->add(Workflow("order", [&](Step& step, const json&) -> json {
          step.run("charge", [] {});
          wait_in(step, wake, attempts);
          step.run("ship", [] {});
          return "v1";
        }));
        id = runtime->start("order");
        runtime->run_until_idle();
        REQUIRE(runtime->get(id).status != Status::completed);
      }
      std::vector<bool> answers;
      int fraud = 0;
      clock.advance(200ms);
      auto runtime = test::runtime_on(db, clock, opts);
      runtime->add(Workflow("order", [&](Step& step, const json&) -> json {
        step.run("charge", [] {});
        const bool p = step.patched("fraud-check");
        answers.push_back(p);
        if (p) step.run("fraud", [&] { ++fraud; });
        wait_in(step, wake, attempts);
        step.run("ship", [] {});
        const bool again = step.patched("fraud-check");
        answers.push_back(again);
        return again ? "v2-new" : "v2-old";
      }));
      if (wake == Wake::event) runtime->send_event("cleared");
      for (int i = 0; i < 4 && runtime->get(id).status != Status::completed; ++i) {
        runtime->run_until_idle();
        clock.advance(200ms);
      }
      const RunInfo run = runtime->get(id);
      INFO((run.error ? run.error->message : ""));
      CHECK(run.status == Status::completed);
      CHECK(run.output == "v2-old");
      CHECK(fraud == 0);
      CHECK(answers.size() >= 2);
      CHECK(std::find(answers.begin(), answers.end(), true) == answers.end());
      for (const StepInfo& s : runtime->steps(id)) CHECK(s.id != "fraud-check");  // no marker
    }
  }
}
