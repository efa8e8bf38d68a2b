// SPDX-License-Identifier: Apache-2.0
// The Runtime's run lifecycle: start options, queries, cancel, state history, bad input.

#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {
Workflow two_steps(int* bodies = nullptr) {
  return Workflow("two", [bodies](Step& step, const json& input) -> json {
    const int a = step.run("a", [&] {
      if (bodies) ++*bodies;
      return input.value("n", 1);
    });
    return step.run("b", [&] {
      if (bodies) ++*bodies;
      return a * 2;
    });
  });
}
}  // namespace

TEST_CASE(
    "start of a workflow never added throws UnknownWorkflow and writes nothing (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(two_steps());
  CHECK_THROWS_WITH_AS(
      runtime.start("tow"),
      "[durable.unknown_workflow] no workflow named 'tow' was added to this runtime (added: two)",
      UnknownWorkflow);
  CHECK(runtime.list().empty());
}

TEST_CASE("an unknown run id is NotFound for get, steps, cancel, retry and wait (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  CHECK_THROWS_WITH_AS(runtime.get("nope"), "[durable.not_found] no run with id 'nope'", NotFound);
  CHECK_THROWS_AS(runtime.steps("nope"), NotFound);
  CHECK_THROWS_AS(runtime.cancel("nope"), NotFound);
  CHECK_THROWS_AS(runtime.retry("nope"), NotFound);
  CHECK_THROWS_AS(runtime.wait("nope", 10ms), NotFound);
}

TEST_CASE("a second start with the same idempotency key returns the first run (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int bodies = 0;
  runtime.add(two_steps(&bodies));
  const std::string first = runtime.start("two", {{"n", 1}}, {.idempotency_key = "signup:ada"});
  const std::string again = runtime.start("two", {{"n", 9}}, {.idempotency_key = "signup:ada"});
  CHECK(first == again);
  const std::string other = runtime.start("two", {{"n", 2}}, {.idempotency_key = "signup:bob"});
  CHECK(other != first);
  runtime.run_until_idle();
  CHECK(runtime.list().size() == 2);
  CHECK(runtime.get(first).output == 2);
  CHECK(bodies == 4);
}

TEST_CASE("a delayed start is not run before its time (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  Runtime runtime({.database = test::database(dir, "db")});
  clock.attach(runtime);
  runtime.add(two_steps());
  const std::string id = runtime.start("two", json::object(), {.at = clock.now() + 10min});
  CHECK(runtime.run_until_idle() == 0);
  CHECK(runtime.get(id).status == Status::pending);
  CHECK(runtime.get(id).wake_at == clock.now() + 10min);
  clock.advance(10min);
  CHECK(runtime.run_until_idle() == 3);
  CHECK(runtime.get(id).status == Status::completed);
}

TEST_CASE("list filters by status and workflow, newest first, up to the limit (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(two_steps());
  runtime.add(
      Workflow("fails", [](Step&, const json&) -> json { throw std::runtime_error("no"); }));
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(runtime.start("two"));
  const std::string failing = runtime.start("fails");
  runtime.run_until_idle();
  const std::string queued = runtime.start("two");
  CHECK(runtime.list().size() == 5);
  CHECK(runtime.list({.status = Status::completed}).size() == 3);
  const auto failed = runtime.list({.status = Status::failed});
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].id == failing);
  CHECK(runtime.list({.workflow = "two"}).size() == 4);
  CHECK(runtime.list({.status = Status::pending, .workflow = "two"}).at(0).id == queued);
  const auto newest = runtime.list({.limit = 2});
  REQUIRE(newest.size() == 2);
  CHECK(newest[0].id == queued);
  CHECK(newest[1].id == failing);
}

TEST_CASE("list filters by correlation id, a child run carrying its parent's (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(two_steps());
  runtime.add(Workflow("parent", [](Step& step, const json&) -> json {
    return step.invoke("child", "two", {{"n", 1}});
  }));
  const std::string order = runtime.start("parent", {}, {.correlation_id = "o-100"});
  runtime.start("two", {{"n", 2}}, {.correlation_id = "o-101"});
  runtime.start("two", {{"n", 3}});
  runtime.run_until_idle();
  const std::vector<RunInfo> runs = runtime.list({.correlation_id = "o-100"});
  REQUIRE(runs.size() == 2);
  CHECK(runs[1].id == order);  // newest first: the child came second
  CHECK(runs[0].workflow == "two");
  CHECK(runs[0].correlation_id == "o-100");
  CHECK(runtime.list({.status = Status::completed, .correlation_id = "o-101"}).size() == 1);
  CHECK(runtime.list({.workflow = "parent", .correlation_id = "o-101"}).empty());
  CHECK(runtime.list({.correlation_id = "nobody"}).empty());
  CHECK(runtime.list().size() == 4);
}

TEST_CASE(
    "every status change is in the run's state history with time and reason (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  Runtime runtime({.database = test::database(dir, "db")});
  clock.attach(runtime);
  runtime.add(Workflow("napper", [](Step& step, const json&) -> json {
    step.run("a", [] {});
    step.sleep("nap", 1h);
    return "ok";
  }));
  const std::string id = runtime.start("napper");
  runtime.run_until_idle();
  clock.advance(1h);
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  std::vector<Status> statuses;
  for (const auto& t : run.history) statuses.push_back(t.status);
  CHECK(statuses == std::vector<Status>{Status::pending, Status::running, Status::sleeping,
                                        Status::running, Status::completed});
  CHECK(run.history[2].reason.find("sleep 'nap' until") == 0);
  CHECK(run.history[3].reason == "woke up");
  CHECK(run.history[3].at - run.history[2].at == 1h);
}

TEST_CASE("cancel ends a sleeping run for good (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  Runtime runtime({.database = test::database(dir, "db")});
  clock.attach(runtime);
  int after = 0;
  runtime.add(Workflow("napper", [&](Step& step, const json&) -> json {
    step.sleep("nap", 1h);
    step.run("after", [&] { ++after; });
    return nullptr;
  }));
  const std::string id = runtime.start("napper");
  runtime.run_until_idle();
  runtime.cancel(id);
  clock.advance(2h);
  CHECK(runtime.run_until_idle() == 0);
  CHECK(after == 0);
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::cancelled);
  CHECK(run.history.back().status == Status::cancelled);
  runtime.cancel(id);  // a run already ended is left as it is
  CHECK(runtime.get(id).history.size() == run.history.size());
}

TEST_CASE(
    "cancel closes a failed run: cancelled, the reason in its history, its error kept (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(
      Workflow("fails", [](Step&, const json&) -> json { throw std::runtime_error("bad input"); }));
  const std::string id = runtime.start("fails");
  runtime.run_until_idle();
  REQUIRE(runtime.get(id).status == Status::failed);
  runtime.cancel(id, "order o-7 was refunded by hand");
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::cancelled);
  CHECK(run.history.back().status == Status::cancelled);
  CHECK(run.history.back().reason == "cancelled: order o-7 was refunded by hand");
  REQUIRE(run.error.has_value());
  CHECK(run.error->message.find("bad input") != std::string::npos);
  CHECK(runtime.list({.status = Status::failed}).empty());
  CHECK_THROWS_AS(runtime.retry(id), Error);  // closed for good
  runtime.cancel(id);                         // and a second cancel leaves it as it is
  CHECK(runtime.get(id).history.size() == run.history.size());
}

TEST_CASE(
    "cancel during a running step body: the result is not journaled and no step follows (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  std::string id;
  int next = 0;
  runtime.add(Workflow("long", [&](Step& step, const json&) -> json {
    step.run("slow", [&] {
      runtime.cancel(id);  // as if from another thread while the body runs
      return 1;
    });
    step.run("next", [&] { ++next; });
    return nullptr;
  }));
  id = runtime.start("long");
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::cancelled);
  CHECK(runtime.steps(id).empty());
  CHECK(next == 0);
}

TEST_CASE(
    "wait runs the work and returns the finished run, or the unfinished one at its timeout (on "
    "each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "wait.db"), .poll_interval = 20ms});
  runtime.add(two_steps());
  runtime.add(Workflow("nap", [](Step& step, const json&) -> json {
    step.sleep("short", 150ms);
    return "awake";
  }));
  const RunInfo done = runtime.wait(runtime.start("two", {{"n", 5}}), 5s);
  CHECK(done.status == Status::completed);
  CHECK(done.output == 10);
  const std::string napper = runtime.start("nap");
  CHECK(runtime.wait(napper, 20ms).status == Status::sleeping);
  const auto t0 = std::chrono::steady_clock::now();
  const RunInfo woke = runtime.wait(napper, 10min);
  CHECK(woke.status == Status::completed);
  CHECK(woke.output == "awake");
  CHECK(std::chrono::steady_clock::now() - t0 < 5min);  // returned when done, not at the timeout
}

TEST_CASE("a started run is picked up by a wait in another thread (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"), .poll_interval = 5000ms});
  runtime.add(two_steps());
  const std::string sleeper_run = runtime.start("two");
  std::thread waiter([&] { CHECK(runtime.wait(sleeper_run, 10s).status == Status::completed); });
  waiter.join();
  CHECK(runtime.get(sleeper_run).output == 2);
}

TEST_CASE("adding two workflows with one name, or a nameless one, is refused") {
  Runtime runtime({.database = ":memory:"});
  runtime.add(two_steps());
  CHECK_THROWS_WITH_AS(runtime.add(two_steps()),
                       "[durable.invalid_argument] a workflow named 'two' was already added",
                       Error);
  CHECK_THROWS_AS(runtime.add(Workflow("", [](Step&, const json&) -> json { return 1; })), Error);
}

TEST_CASE("an input larger than max_output_bytes is refused by start (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"), .max_output_bytes = 100});
  runtime.add(two_steps());
  CHECK_THROWS_WITH_AS(runtime.start("two", {{"blob", std::string(500, 'x')}}),
                       doctest::Contains("the limit is 100 bytes"), Error);
  CHECK(runtime.list().empty());
}

TEST_CASE(
    "a run whose lease lapsed is taken over, and the old owner's late result is refused (on each "
    "store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "lease.db");
  RuntimeOptions opts;
  opts.lease = 10s;
  auto owner = test::runtime_on(db, clock, opts);
  auto rescuer = test::runtime_on(db, clock, opts);
  int slow_bodies = 0;
  std::string id;
  owner->add(Workflow("job", [&](Step& step, const json&) -> json {
    step.run("fast", [] { return 1; });
    return step.run("slow", [&] {
      ++slow_bodies;
      // While the owner is stuck in this body, its lease lapses and the rescuer takes over. The
      // owner's heartbeat thread may make its first beat (renewing to the advanced clock) just
      // after an advance; the next beat is a third of a lease of real time later, so a second
      // advance lapses the lease for good.
      int rescued = 0;
      for (int tries = 0; tries < 3 && rescued == 0; ++tries) {
        clock.advance(11s);
        rescued = rescuer->run_until_idle();
      }
      CHECK(rescued == 2);
      return "late";
    });
  }));
  rescuer->add(Workflow("job", [&](Step& step, const json&) -> json {
    step.run("fast", [] { return -1; });
    return step.run("slow", [] { return "rescued"; });
  }));
  id = owner->start("job");
  owner->run_until_idle();
  const RunInfo run = owner->get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == "rescued");
  CHECK(slow_bodies == 1);
  const auto steps = owner->steps(id);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].output == 1);  // journaled by the first owner, replayed by the rescuer
  CHECK(steps[1].output == "rescued");
  bool taken_over = false;
  for (const auto& t : run.history) taken_over = taken_over || t.reason.find("taken over") == 0;
  CHECK(taken_over);
}

TEST_CASE(
    "a long run renews its lease as its steps complete, so no one else claims it (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "renew.db");
  RuntimeOptions opts;
  opts.lease = 10s;
  auto owner = test::runtime_on(db, clock, opts);
  auto other = test::runtime_on(db, clock, opts);
  int claimed_elsewhere = 0;
  owner->add(Workflow("long", [&](Step& step, const json&) -> json {
    for (int i = 0; i < 6; ++i) {
      step.run("chunk", [&] {
        clock.advance(4s);  // 24 s in all: well past one lease
        claimed_elsewhere += static_cast<int>(other->run_until_idle());
      });
    }
    return "done";
  }));
  other->add(Workflow("long", [](Step&, const json&) -> json { return "stolen"; }));
  const std::string id = owner->start("long");
  owner->run_until_idle();
  CHECK(claimed_elsewhere == 0);
  CHECK(owner->get(id).output == "done");
}

TEST_CASE(
    "a runtime never claims a run it is executing, even when the lease lapsed mid-body (on each "
    "store)") {
  test::TempDir dir;
  test::ManualClock clock;
  RuntimeOptions opts;
  opts.database = test::database(dir, "db");
  opts.lease = 10s;
  Runtime runtime(opts);
  clock.attach(runtime);
  int bodies = 0;
  std::size_t claimed_meanwhile = 99;
  runtime.add(Workflow("slow", [&](Step& step, const json&) -> json {
    return step.run("call", [&] {
      ++bodies;
      clock.advance(30s);  // a body three leases long
      // What a wait() on another thread of this runtime would do meanwhile:
      claimed_meanwhile = runtime.run_until_idle();
      return "ok";
    });
  }));
  const std::string id = runtime.start("slow");
  runtime.run_until_idle();
  CHECK(claimed_meanwhile == 0);
  CHECK(bodies == 1);
  CHECK(runtime.get(id).output == "ok");
}

TEST_CASE("cancel wakes a wait() on another thread at once (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"), .poll_interval = 60'000ms});
  runtime.add(Workflow("nap", [](Step& step, const json&) -> json {
    step.sleep("long", "1 day");
    return nullptr;
  }));
  const std::string id = runtime.start("nap");
  runtime.run_until_idle();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread waiter([&] { CHECK(runtime.wait(id, 60s).status == Status::cancelled); });
  std::this_thread::sleep_for(50ms);  // let the waiter block on its 60 s poll
  runtime.cancel(id);
  waiter.join();
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}

TEST_CASE(
    "the lease is renewed while a step body runs, so a body longer than it runs once (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "heartbeat.db");
  RuntimeOptions opts;
  opts.database = db;
  opts.lease = 300ms;
  Runtime owner(opts);
  Runtime other(opts);
  std::atomic<int> bodies{0};
  std::atomic<bool> in_body{false}, body_done{false};
  const auto job = [&] {
    return Workflow("job", [&](Step& step, const json&) -> json {
      return step.run("long-call", [&] {
        ++bodies;
        in_body = true;
        std::this_thread::sleep_for(1200ms);  // four leases
        body_done = true;
        return "ok";
      });
    });
  };
  owner.add(job());
  other.add(job());
  const std::string id = owner.start("job");
  std::thread runner([&] { owner.run_until_idle(); });
  std::size_t stolen = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!in_body && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  while (!body_done && std::chrono::steady_clock::now() < deadline) {
    stolen += other.run_until_idle();
    std::this_thread::sleep_for(20ms);
  }
  runner.join();
  CHECK(stolen == 0);
  CHECK(bodies == 1);
  CHECK(owner.get(id).output == "ok");
}

TEST_CASE("wait() returns at its timeout even with much other work due (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "busy.db")});
  runtime.add(Workflow("slow", [](Step& step, const json&) -> json {
    return step.run("work", [] {
      std::this_thread::sleep_for(100ms);
      return 1;
    });
  }));
  for (int i = 0; i < 20; ++i) runtime.start("slow");  // two seconds of work in all
  const std::string last = runtime.start("slow");
  const RunInfo run = runtime.wait(last, 50ms);
  // Had it waited for its run, it would have waited out all the work before it: two seconds.
  CHECK(run.status != Status::completed);
}
