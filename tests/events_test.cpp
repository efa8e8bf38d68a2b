// SPDX-License-Identifier: Apache-2.0
// Events and child workflows: send_event, wait_for_event, event-triggered runs, step.invoke.

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

// Waits for "approval" of its order, for an hour at most, then says what it got.
Workflow approval_flow(std::atomic<int>* after_wait = nullptr) {
  return Workflow("approval", [after_wait](Step& step, const json& input) -> json {
    step.run("submit", [] { return true; });
    const auto approval = step.wait_for_event(
        "approved", "order.approved", {.timeout = 1h, .match = {{"order", input.at("order")}}});
    if (after_wait != nullptr) ++*after_wait;
    if (!approval) return "timed out";
    return "approved by " + approval->at("by").get<std::string>();
  });
}

int count_rows(const std::string& db, const std::string& sql) {
  SQLite::Database look(db, SQLite::OPEN_READONLY);
  return look.execAndGet(sql).getInt();
}

}  // namespace

TEST_CASE("wait_for_event returns the data of the first matching event sent after the wait") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(dir.file("db"), clock);
  runtime->add(approval_flow());
  const std::string id = runtime->start("approval", {{"order", 7}});
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::waiting);
  CHECK(runtime->steps(id).back().kind == "event");
  CHECK(runtime->steps(id).back().status == "waiting");

  runtime->send_event("order.approved", {{"order", 8}, {"by", "eve"}});  // another order
  runtime->send_event("order.shipped", {{"order", 7}, {"by", "eve"}});   // another name
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::waiting);

  runtime->send_event("order.approved", {{"order", 7}, {"by", "ada"}});
  CHECK(runtime->get(id).status == Status::pending);  // woken by the event, due now
  runtime->run_until_idle();
  const RunInfo run = runtime->get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == "approved by ada");
  const StepInfo wait = runtime->steps(id).back();
  CHECK(wait.status == "completed");
  CHECK(wait.output.at("data").at("by") == "ada");
  CHECK(wait.output.at("name") == "order.approved");
  CHECK(count_rows(dir.file("db"), "SELECT count(*) FROM events") == 3);  // events are stored
}

TEST_CASE("an event sent before the wait began does not count (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(approval_flow());
  runtime->send_event("order.approved", {{"order", 1}, {"by", "early"}});
  const std::string id = runtime->start("approval", {{"order", 1}});
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::waiting);
  runtime->send_event("order.approved", {{"order", 1}, {"by", "late"}});
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == "approved by late");
}

TEST_CASE("a wait times out with nullopt, and a late event changes nothing (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(approval_flow());
  const std::string id = runtime->start("approval", {{"order", 3}});
  runtime->run_until_idle();
  const RunInfo waiting = runtime->get(id);
  REQUIRE(waiting.wake_at.has_value());
  CHECK(*waiting.wake_at == clock.now() + 1h);
  clock.advance(59min);
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::waiting);
  clock.advance(1min);
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == "timed out");
  CHECK(runtime->steps(id).back().output.is_null());
  runtime->send_event("order.approved", {{"order", 3}, {"by", "ada"}});
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == "timed out");
}

TEST_CASE("an event racing with the start of a wait is never lost (on each store)") {
  // The event is stored after the workflow reached wait_for_event but before the wait was
  // journaled (here: by a destructor running while the invocation unwinds to its commit). The
  // commit of the wait finds it.
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  Runtime* sender = runtime.get();
  struct SendWhileUnwinding {
    Runtime* runtime;
    bool armed;
    ~SendWhileUnwinding() {
      if (armed && std::uncaught_exceptions() > 0) runtime->send_event("go", {{"n", 1}});
    }
  };
  runtime->add(Workflow("racer", [sender](Step& step, const json&) -> json {
    step.run("before", [] { return 1; });
    SendWhileUnwinding race{sender, !step.replaying()};
    const auto got = step.wait_for_event("wait", "go", {.timeout = 1h});
    return got ? got->at("n") : json(-1);
  }));
  for (int round = 0; round < 20; ++round) {
    const std::string id = runtime->start("racer");
    runtime->run_until_idle();
    const RunInfo run = runtime->get(id);
    CHECK(run.status == Status::completed);
    CHECK(run.output == 1);
  }
}

TEST_CASE("events sent from another thread wake the runs waiting for them (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("waiter", [](Step& step, const json& input) -> json {
    const auto got =
        step.wait_for_event("wait", "ping", {.timeout = 1h, .match = {{"to", input.at("i")}}});
    return got.has_value();
  }));
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) ids.push_back(runtime.start("waiter", {{"i", i}}));
  std::atomic<bool> done{false};
  std::thread worker([&] {
    while (!done) runtime.run_until_idle();
  });
  // Each event is sent once its run is waiting: then it must be delivered.
  for (int i = 0; i < 30; ++i) {
    while (runtime.get(ids[i]).status != Status::waiting) std::this_thread::sleep_for(1ms);
    runtime.send_event("ping", {{"to", i}});
  }
  for (const auto& id : ids) {
    for (int tries = 0; tries < 5000 && runtime.get(id).status != Status::completed; ++tries) {
      std::this_thread::sleep_for(1ms);
    }
    CHECK(runtime.get(id).output == true);
  }
  done = true;
  worker.join();
}

TEST_CASE("step.send_event is sent once however often the sender replays") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(dir.file("db"), clock);
  std::atomic<int> received{0};
  runtime->add(Workflow("sender", [](Step& step, const json&) -> json {
    step.send_event("notify", "invoice.paid", {{"invoice", 42}});
    step.run("a", [] { return 1; });
    step.run("b", [] { return 2; });
    return true;
  }));
  runtime->add(Workflow("on_paid",
                        [&received](Step& step, const json& input) -> json {
                          step.run("count", [&] { return ++received; });
                          return input;
                        },
                        {.events = {"invoice.paid"}}));
  const std::string id = runtime->start("sender");
  runtime->run_until_idle();
  CHECK(runtime->get(id).invocations == 4);
  CHECK(received == 1);
  const auto started = runtime->list({.workflow = "on_paid"});
  REQUIRE(started.size() == 1);
  CHECK(started[0].input.at("name") == "invoice.paid");
  CHECK(started[0].input.at("data").at("invoice") == 42);
  CHECK(started[0].input.contains("id"));
  CHECK(started[0].input.contains("time"));
  CHECK(count_rows(dir.file("db"), "SELECT count(*) FROM events") == 1);
  CHECK(runtime->counters().events_sent == 1);
}

TEST_CASE(
    "WorkflowOptions::events start one run per event, also from another runtime (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  test::ManualClock clock;
  auto worker = test::runtime_on(db, clock);
  worker->add(Workflow("greet", [](Step&, const json& input) -> json { return input.at("data"); },
                       {.events = {"user.created", "user.invited"}}));
  // A runtime that has no such workflow (a CLI, another service) sends the events.
  auto sender = test::runtime_on(db, clock);
  sender->send_event("user.created", {{"name", "ada"}});
  sender->send_event("user.invited", {{"name", "bob"}});
  sender->send_event("user.deleted", {{"name", "eve"}});
  worker->run_until_idle();
  const auto runs = worker->list({.workflow = "greet"});
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].status == Status::completed);
  CHECK(runs[1].status == Status::completed);
}

TEST_CASE("bad events and waits are clear errors and write nothing") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(dir.file("db"), clock);
  CHECK_THROWS_WITH_AS(runtime->send_event(""), "[durable.invalid_argument] an event needs a name",
                       Error);
  CHECK_THROWS_WITH_AS(runtime->send_event("x", {{"bad", "\xff"}}),
                       doctest::Contains("cannot be stored"), Error);
  CHECK(count_rows(dir.file("db"), "SELECT count(*) FROM events") == 0);
  CHECK_THROWS_WITH_AS(
      runtime->add(Workflow("w", [](Step&, const json&) -> json { return 1; }, {.events = {""}})),
      "[durable.invalid_argument] workflow 'w' lists an empty event name", Error);

  runtime->add(Workflow("bad_match", [](Step& step, const json&) -> json {
    return step.wait_for_event("w", "e", {.timeout = 1s, .match = json::array({1})}).has_value();
  }));
  const std::string id = runtime->start("bad_match");
  runtime->run_until_idle();
  const RunInfo run = runtime->get(id);
  CHECK(run.status == Status::failed);
  CHECK(run.error->message.find("match must be a JSON object") != std::string::npos);

  runtime->add(Workflow("in_body", [](Step& step, const json&) -> json {
    return step.run("outer",
                    [&] { return step.wait_for_event("w", "e", {.timeout = 1s}).has_value(); });
  }));
  const std::string nested = runtime->start("in_body");
  runtime->run_until_idle();
  CHECK(runtime->get(nested).status == Status::failed);
  CHECK(runtime->get(nested).error->message.find(
            "step.wait_for_event('w') was called inside the body of step 'outer'") !=
        std::string::npos);
}

TEST_CASE("a wait with a zero timeout returns nullopt at once (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("now", [](Step& step, const json&) -> json {
    return step.wait_for_event("w", "e", {.timeout = 0ms}).has_value();
  }));
  const std::string id = runtime.start("now");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == false);
}

TEST_CASE("a wait with no timeout waits until its event comes (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(Workflow("forever", [](Step& step, const json&) -> json {
    return step.wait_for_event("w", "e").value_or(json("none"));
  }));
  const std::string id = runtime->start("forever");
  runtime->run_until_idle();
  CHECK_FALSE(runtime->get(id).wake_at.has_value());
  clock.advance(24h * 365);
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::waiting);
  runtime->send_event("e", {{"k", 1}});
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == json{{"k", 1}});
}

TEST_CASE("a waiting run can be cancelled, and its event then changes nothing") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(dir.file("db"), clock);
  std::atomic<int> after{0};
  runtime->add(approval_flow(&after));
  const std::string id = runtime->start("approval", {{"order", 5}});
  runtime->run_until_idle();
  runtime->cancel(id);
  runtime->send_event("order.approved", {{"order", 5}, {"by", "ada"}});
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::cancelled);
  CHECK(after == 0);
  CHECK(count_rows(dir.file("db"), "SELECT count(*) FROM waits") == 0);
}

TEST_CASE("in on_recovery mode a wait evicts the run and the event resumes it (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime =
      test::runtime_on(test::database(dir, "db"), clock, {.replay = Replay::on_recovery});
  runtime->add(approval_flow());
  const std::string id = runtime->start("approval", {{"order", 9}});
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::waiting);
  runtime->send_event("order.approved", {{"order", 9}, {"by", "bob"}});
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == "approved by bob");
}

// ---- child workflows

namespace {
Workflow child_flow() {
  return Workflow("double", [](Step& step, const json& input) -> json {
    const int n = input.at("n");
    if (n < 0) throw std::invalid_argument("negative");
    step.sleep("pause", 1min);
    return step.run("twice", [n] { return 2 * n; });
  });
}
Workflow parent_flow(std::atomic<int>* invokes) {
  return Workflow("parent", [invokes](Step& step, const json& input) -> json {
    try {
      const json out = step.invoke("child", "double", {{"n", input.at("n")}});
      if (invokes != nullptr) ++*invokes;
      return step.run("after", [out] { return out.get<int>() + 1; });
    } catch (const StepFailed& failed) {
      return "child failed: " + failed.info.message;
    }
  });
}
}  // namespace

TEST_CASE(
    "step.invoke starts the child once, waits for it and returns its output (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(child_flow());
  runtime->add(parent_flow(nullptr));
  const std::string id = runtime->start("parent", {{"n", 20}}, {.correlation_id = "order-1"});
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::waiting);
  const auto children = runtime->list({.workflow = "double"});
  REQUIRE(children.size() == 1);
  CHECK(children[0].parent_id == id);
  CHECK(children[0].correlation_id == "order-1");
  CHECK(children[0].status == Status::sleeping);
  clock.advance(1min);
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::completed);
  CHECK(runtime->get(id).output == 41);
  CHECK(runtime->list({.workflow = "double"}).size() == 1);
  const StepInfo invoke = runtime->steps(id).front();
  CHECK(invoke.kind == "invoke");
  CHECK(invoke.output.at("run") == children[0].id);
  CHECK(invoke.output.at("output") == 40);
}

TEST_CASE("a failed child raises StepFailed in the parent (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(child_flow());
  runtime.add(parent_flow(nullptr));
  const std::string id = runtime.start("parent", {{"n", -1}});
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output.get<std::string>().find("child failed: child run") == 0);
  CHECK(run.output.get<std::string>().find("negative") != std::string::npos);
}

TEST_CASE("cancelling a parent cancels its children (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(child_flow());
  runtime->add(parent_flow(nullptr));
  const std::string id = runtime->start("parent", {{"n", 1}});
  runtime->run_until_idle();
  const std::string child = runtime->list({.workflow = "double"}).at(0).id;
  runtime->cancel(id);
  CHECK(runtime->get(id).status == Status::cancelled);
  CHECK(runtime->get(child).status == Status::cancelled);
  CHECK(runtime->get(child).history.back().reason == "cancelled with its parent run " + id);
}

TEST_CASE("invoke of a workflow not added fails the parent with UnknownWorkflow (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("lonely",
                       [](Step& step, const json&) -> json { return step.invoke("c", "nobody"); }));
  const std::string id = runtime.start("lonely");
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::failed);
  CHECK(run.error->type == "durable::UnknownWorkflow");
  CHECK(run.error->message.find("[durable.unknown_workflow] no workflow named 'nobody'") == 0);
}

TEST_CASE("a journaled invoke replayed as a run is NonDeterminism (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  std::string id;
  {
    auto before = test::runtime_on(db, clock);
    before->add(child_flow());
    before->add(parent_flow(nullptr));
    id = before->start("parent", {{"n", 1}});
    before->run_until_idle();
  }
  auto after = test::runtime_on(db, clock);
  after->add(child_flow());
  after->add(Workflow("parent", [](Step& step, const json&) -> json {
    return step.run("child", [] { return 1; });
  }));
  clock.advance(1min);
  after->run_until_idle();
  const RunInfo run = after->get(id);
  CHECK(run.status == Status::failed);
  CHECK(run.error->type == "durable::NonDeterminism");
  CHECK(run.error->message.find("journaled as a step.invoke of 'double'") != std::string::npos);
}

TEST_CASE("retry of a parent whose child failed starts a new child (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  auto child_runs = std::make_shared<int>(0);
  runtime->add(Workflow("flaky_child", [child_runs](Step& step, const json&) -> json {
    return step.run("work",
                    [child_runs] {
                      if (++*child_runs == 1) throw std::runtime_error("first try fails");
                      return "ok";
                    },
                    {.retry = RetryPolicy{.max_attempts = 1}});
  }));
  runtime->add(Workflow("strict_parent", [](Step& step, const json&) -> json {
    return step.invoke("child", "flaky_child");
  }));
  const std::string id = runtime->start("strict_parent");
  runtime->run_until_idle();
  RunInfo run = runtime->get(id);
  REQUIRE(run.status == Status::failed);
  CHECK(run.error->step_id == "child");
  CHECK(run.error->message.find("first try fails") != std::string::npos);

  runtime->retry(id);
  runtime->run_until_idle();
  run = runtime->get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == "ok");
  CHECK(runtime->list({.workflow = "flaky_child"}).size() == 2);
  CHECK(runtime->steps(id).at(0).attempts == 1);  // retry() gives failed steps fresh attempts
}

TEST_CASE("the last add() of a workflow says which events start it (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  const auto greet = [](std::vector<std::string> events) {
    return Workflow("greet", [](Step&, const json&) -> json { return 1; },
                    {.events = std::move(events)});
  };
  {
    auto before = test::runtime_on(db, clock);
    before->add(greet({"user.created", "user.invited"}));
  }
  auto after = test::runtime_on(db, clock);  // a deploy dropped user.invited
  after->add(greet({"user.created"}));
  after->send_event("user.invited");
  CHECK(after->list({.workflow = "greet"}).empty());
  after->send_event("user.created");
  CHECK(after->list({.workflow = "greet"}).size() == 1);
}

TEST_CASE("an oversized step.send_event or step.invoke input fails the run and sends nothing") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(dir.file("db"), clock, {.max_output_bytes = 64});
  runtime->add(Workflow("loud", [](Step& step, const json&) -> json {
    step.send_event("big", "e", {{"blob", std::string(100, 'x')}});
    return 1;
  }));
  runtime->add(Workflow("caller", [](Step& step, const json&) -> json {
    return step.invoke("c", "loud", {{"blob", std::string(100, 'x')}});
  }));
  for (const char* name : {"loud", "caller"}) {
    const std::string id = runtime->start(name);
    runtime->run_until_idle();
    const RunInfo run = runtime->get(id);
    CHECK(run.status == Status::failed);
    CHECK(run.error->message.find("the limit is 64 bytes") != std::string::npos);
  }
  CHECK(count_rows(dir.file("db"), "SELECT count(*) FROM events") == 0);
  CHECK(runtime->list({.workflow = "loud"}).size() == 1);  // the caller started no child
}

TEST_CASE(
    "a stale child of a retried invoke does not resolve the parent's new wait (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  auto calls = std::make_shared<int>(0);
  runtime->add(Workflow("kid", [calls](Step& step, const json&) -> json {
    const int n = step.run("work",
                           [calls] {
                             if (++*calls == 1) throw std::runtime_error("first try fails");
                             return *calls;
                           },
                           {.retry = RetryPolicy{.max_attempts = 1}});
    if (n == 2) step.sleep("slow", 1min);  // the second child takes a minute
    return n;
  }));
  runtime->add(Workflow(
      "strict", [](Step& step, const json&) -> json { return step.invoke("child", "kid"); }));
  const std::string id = runtime->start("strict");
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::failed);
  const std::string old_child = runtime->list({.workflow = "kid"}).at(0).id;

  runtime->retry(id);  // a new child for the step
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::waiting);
  std::string new_child;
  for (const RunInfo& r : runtime->list({.workflow = "kid"}))
    if (r.id != old_child) new_child = r.id;
  REQUIRE(runtime->get(new_child).status == Status::sleeping);

  runtime->retry(old_child);  // an operator retries the old failed child too
  runtime->run_until_idle();
  // The parent waits on the new child; the old one must not answer for it.
  CHECK(runtime->get(id).status == Status::waiting);
  CHECK(runtime->steps(id).at(0).output.value("run", "") == new_child);
  clock.advance(1min);
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == 2);
}
