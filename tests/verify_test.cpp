// SPDX-License-Identifier: Apache-2.0
// Runtime::verify (DESIGN §8): the unfinished runs of a database replayed, read-only, against the
// code a binary registered, before that binary is deployed.

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>

#include <atomic>
#include <durable/testing.hpp>
#include <thread>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {
// The order workflow as deployed (v1), and as about to be (v2: "ship" renamed "ship-courier").
Workflow order(bool v2) {
  return Workflow("order", [v2](Step& step, const json&) -> json {
    step.run("charge", [] { return 42; });
    step.sleep("ship-wait", 1h);
    step.run(v2 ? "ship-courier" : "ship", [] { return "shipped"; });
    step.sleep("follow-up", 1h);
    return "done";
  });
}

Workflow report() {
  return Workflow("report", [](Step& step, const json&) -> json {
    step.sleep("later", 1h);
    return nullptr;
  });
}

// Every run and every step as the database holds them, to tell that nothing changed.
std::string everything(Runtime& runtime) {
  RunFilter all;
  all.limit = 1000;
  json state = json::array();
  for (const RunInfo& run : runtime.list(all)) {
    json steps = json::array();
    for (const StepInfo& s : runtime.steps(run.id)) {
      steps.push_back({s.id, s.kind, s.status, s.output, s.attempts,
                       s.updated_at.time_since_epoch().count()});
    }
    state.push_back({run.id, to_string(run.status), run.invocations,
                     run.updated_at.time_since_epoch().count(), run.history.size(), steps});
  }
  return state.dump();
}
}  // namespace

TEST_CASE("verify names the one run the new code would not replay: its step, what the journal "
          "holds and the line of the call, and writes nothing (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  std::string shipped;
  {
    auto v1 = test::runtime_on(db, clock, test::quiet(db));
    v1->add(order(false));
    v1->add(report());
    shipped = v1->start("order");  // gets past "ship" and sleeps in its follow-up
    v1->run_until_idle();
    clock.advance(61min);
    v1->run_until_idle();
    REQUIRE(v1->get(shipped).status == Status::sleeping);
    v1->start("order");  // two runs before "ship": the rename is no matter to them
    v1->start("order");
    v1->start("report");  // a workflow the new binary does not have
    v1->run_until_idle();
  }
  auto v2 = test::runtime_on(db, clock, test::quiet(db));
  v2->add(order(true));
  const std::string before = everything(*v2);
  const VerifyReport report = v2->verify();
  CHECK(everything(*v2) == before);
  CHECK_FALSE(report.ok());
  CHECK(report.runs_checked == 3);  // the report run is another binary's
  REQUIRE(report.divergences.size() == 1);
  const Divergence& d = report.divergences.front();
  CHECK(d.run_id == shipped);
  CHECK(d.workflow == "order");
  CHECK(d.step == "ship");
  CAPTURE(d.message);
  CHECK(d.message.find("step.run('ship-courier')") != std::string::npos);
  CHECK(d.message.find("step 'ship', a step.run that returned \"shipped\"") != std::string::npos);
  CHECK(d.where.find("verify_test.cpp:") != std::string::npos);

  // A filter narrows it.
  RunFilter reports;
  reports.workflow = "report";
  CHECK(v2->verify(reports).runs_checked == 0);  // not this binary's
  RunFilter sleeping;
  sleeping.status = Status::sleeping;
  sleeping.limit = 1;  // not applied: every matching run is checked
  CHECK(v2->verify(sleeping).runs_checked == 3);
  RunFilter completed;
  completed.status = Status::completed;
  CHECK(v2->verify(completed).runs_checked == 0);
  CHECK(everything(*v2) == before);
}

TEST_CASE("verify: a step id reached as another kind is named with the call's line, and unchanged "
          "code verifies clean (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  std::string id;
  {
    auto v1 = test::runtime_on(db, clock, test::quiet(db));
    v1->add(order(false));
    id = v1->start("order");
    v1->run_until_idle();
    const VerifyReport same = v1->verify();
    CHECK(same.ok());
    CHECK(same.runs_checked == 1);
  }
  auto v2 = test::runtime_on(db, clock, test::quiet(db));
  v2->add(Workflow("order", [](Step& step, const json&) -> json {
    step.run("charge", [] { return 42; });
    step.run("ship-wait", [] { return 0; });  // was a sleep
    return "done";
  }));
  const VerifyReport report = v2->verify();
  REQUIRE(report.divergences.size() == 1);
  CHECK(report.divergences[0].run_id == id);
  CHECK(report.divergences[0].step == "ship-wait");
  CHECK(report.divergences[0].message.find("was journaled as a step.sleep") != std::string::npos);
  CHECK(report.divergences[0].where.find("verify_test.cpp:") != std::string::npos);
  CHECK(v2->get(id).status == Status::sleeping);  // verifying failed nothing
}

TEST_CASE("verify answers while a worker serves the same database, and its runs in progress "
          "verify clean (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime worker(test::quiet(db));
  worker.add(Workflow("tick", [](Step& step, const json&) -> json {
    for (int i = 0; i < 5; ++i) step.run("s", [] { return 1; });
    return nullptr;
  }));
  Runtime checker(test::quiet(db));
  checker.add(Workflow("tick", [](Step& step, const json&) -> json {
    for (int i = 0; i < 5; ++i) step.run("s", [] { return 1; });
    return nullptr;
  }));
  std::thread serving([&] { worker.serve(); });
  std::atomic<bool> done{false};
  std::thread starting([&] {
    for (int i = 0; i < 200 && !done; ++i) worker.start("tick");
  });
  int checks = 0;
  for (; checks < 20; ++checks) {
    const VerifyReport report = checker.verify();
    CAPTURE(report.divergences.size());
    CHECK(report.ok());
  }
  done = true;
  starting.join();
  worker.stop();
  serving.join();
  CHECK(checks == 20);
}

TEST_CASE("verify on a database a newer durable wrote is an Error, and changes nothing") {
  test::TempDir dir;
  const std::string db = dir.file("db");
  Runtime runtime(test::quiet(db));
  runtime.add(order(false));
  runtime.start("order");
  {
    SQLite::Database raw(db, SQLite::OPEN_READWRITE);
    raw.setBusyTimeout(10000);  // the runtime's lease heartbeat may be writing
    raw.exec("PRAGMA user_version = " + std::to_string(detail::kSchemaVersion + 1));
  }
  CHECK_THROWS_WITH_AS(runtime.verify(), doctest::Contains("newer durable"), Error);
  SQLite::Database raw(db, SQLite::OPEN_READONLY);
  CHECK(raw.execAndGet("PRAGMA user_version").getInt() == detail::kSchemaVersion + 1);
}

TEST_CASE("verify on a TestRuntime's in-memory database") {
  testing::TestRuntime kit;
  kit.add(order(false));
  const testing::RunResult run = kit.run("order");
  CHECK(run.info.status == Status::completed);
  kit.runtime().start("order");
  const VerifyReport report = kit.runtime().verify();
  CHECK(report.ok());
  CHECK(report.runs_checked == 1);  // the pending one; the completed run is not unfinished
}

namespace {
struct Order {
  int quantity = 0;
};
void from_json(const json& j, Order& o) { j.at("quantity").get_to(o.quantity); }
void to_json(json& j, const Order& o) { j = {{"quantity", o.quantity}}; }
struct OrderV2 {
  int quantity = 0;
  std::string sku;  // new, and required
};
void from_json(const json& j, OrderV2& o) {
  j.at("quantity").get_to(o.quantity);
  j.at("sku").get_to(o.sku);
}
}  // namespace

TEST_CASE("verify reports runs the new code would fail though nothing journaled failed: an input "
          "that no longer converts (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  std::string pending;
  {
    Runtime v1(test::quiet(db));
    v1.add(Workflow("typed", [](Step&, const Order& o) { return o.quantity; }));
    pending = v1.start("typed", Order{3});
  }
  Runtime v2(test::quiet(db));
  v2.add(Workflow("typed", [](Step&, const OrderV2& o) { return o.quantity; }));
  const VerifyReport report = v2.verify();
  CHECK(report.runs_checked == 1);
  REQUIRE(report.divergences.size() == 1);
  CHECK(report.divergences[0].run_id == pending);
  CAPTURE(report.divergences[0].message);
  CHECK(report.divergences[0].message.find("the code now fails") != std::string::npos);
  CHECK(report.divergences[0].message.find("sku") != std::string::npos);
}

TEST_CASE("verify reports a run whose stored input cannot be read, without replaying it") {
  test::TempDir dir;
  const std::string db = dir.file("db");
  std::string poisoned;
  {
    Runtime v1(test::quiet(db));
    v1.add(Workflow("echo", [](Step&, const json& input) -> json { return input; }));
    poisoned = v1.start("echo", {{"x", 1}});
    v1.start("echo", {{"x", 2}});
  }
  {
    // As a build from before the depth limit, or another tool, could have stored it.
    json deep = 1;
    for (int i = 0; i < 2'000; ++i) deep = json::array({deep});
    SQLite::Database raw(db, SQLite::OPEN_READWRITE);
    raw.setBusyTimeout(10000);  // the runtime's lease heartbeat may be writing
    SQLite::Statement update(raw, "UPDATE runs SET input = ? WHERE id = ?");
    update.bind(1, deep.dump());
    update.bind(2, poisoned);
    REQUIRE(update.exec() == 1);
  }
  int invoked = 0;
  Runtime v2(test::quiet(db));
  v2.add(Workflow("echo", [&](Step&, const json& input) -> json {
    ++invoked;
    return input;
  }));
  const VerifyReport report = v2.verify();
  CHECK(report.runs_checked == 2);
  REQUIRE(report.divergences.size() == 1);
  CHECK(report.divergences[0].run_id == poisoned);
  CHECK(report.divergences[0].message.find("cannot be read") != std::string::npos);
  CHECK(invoked == 1);  // the readable run only
}
