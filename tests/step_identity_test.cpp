// SPDX-License-Identifier: Apache-2.0
// Step identity (DESIGN §2): keys by id, id#n for repeats, reserved characters, kinds, types.

#include <doctest/doctest.h>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace shop {
struct Order {
  std::string sku;
  int quantity = 0;
};
void to_json(json& j, const Order& o) { j = {{"sku", o.sku}, {"quantity", o.quantity}}; }
void from_json(const json& j, Order& o) {
  j.at("sku").get_to(o.sku);
  j.at("quantity").get_to(o.quantity);
}
struct Receipt {
  std::string id;
  int total = 0;
};
void to_json(json& j, const Receipt& r) { j = {{"id", r.id}, {"total", r.total}}; }
void from_json(const json& j, Receipt& r) {
  j.at("id").get_to(r.id);
  j.at("total").get_to(r.total);
}
}  // namespace shop

TEST_CASE(
    "a step id used again in a loop gets the keys id, id#2, id#3 in call order (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("loop", [](Step& step, const json&) -> json {
    int sum = 0;
    for (int i = 1; i <= 3; ++i) sum += step.run("add", [i] { return i * 10; });
    step.run("other", [] {});
    sum += step.run("add", [] { return 1; });
    return sum;
  }));
  const std::string id = runtime.start("loop");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == 61);
  std::vector<std::string> keys;
  for (const auto& s : runtime.steps(id)) keys.push_back(s.id);
  CHECK(keys == std::vector<std::string>{"add", "add#2", "add#3", "other", "add#4"});
}

TEST_CASE(
    "with strict replay off, steps are matched by id alone: a step added before journaled ones "
    "runs, a dropped one is ignored (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "deploy.db");
  const std::string id =
      test::run_before_restart(db, clock, Workflow("flow", [](Step& step, const json&) -> json {
                                 step.run("a", [] { return 1; });
                                 step.sleep("pause", 1h);
                                 return step.run("b", [] { return 2; });
                               }));
  // A deploy inserts a step before the journaled ones and drops the sleep.
  int a_bodies = 0;
  auto runtime =
      test::restart_with(db, clock,
                         Workflow("flow",
                                  [&](Step& step, const json&) -> json {
                                    const int inserted = step.run("new", [] { return 100; });
                                    const int a = step.run("a", [&] {
                                      ++a_bodies;
                                      return -1;
                                    });
                                    return inserted + a + step.run("b", [] { return 2; });
                                  }),
                         {.strict_replay = false});
  clock.advance(2h);
  runtime->run_until_idle();
  CHECK(a_bodies == 0);
  CHECK(runtime->get(id).output == 103);
}

TEST_CASE(
    "a step id with a reserved character fails the run with a clear message (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");  // each bad id checks its own run only
  for (const std::string& bad : std::vector<std::string>{"a/b", "a#2", "x[0]", "", "tab\there"}) {
    CAPTURE(bad);
    Runtime runtime({.database = db});
    runtime.add(Workflow("bad-id", [bad](Step& step, const json&) -> json {
      step.run(bad, [] {});
      return nullptr;
    }));
    const std::string id = runtime.start("bad-id");
    runtime.run_until_idle();
    const RunInfo run = runtime.get(id);
    CHECK(run.status == Status::failed);
    REQUIRE(run.error.has_value());
    CHECK(run.error->type == "durable::Error");
    if (bad.empty()) {
      CHECK(run.error->message == "[durable.invalid_argument] a step id must not be empty");
    } else if (bad == "tab\there") {
      CHECK(run.error->message.find(
                "[durable.invalid_argument] step id 'tab\there' contains the control character "
                "0x09") == 0);
    } else {
      CHECK(run.error->message.find("[durable.invalid_argument] step id '" + bad + "' contains") ==
            0);
      CHECK(run.error->message.find("reserves") != std::string::npos);
    }
    CHECK(runtime.steps(id).empty());
  }
}

TEST_CASE(
    "a journaled id reached with another kind fails the run with NonDeterminism (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "kind.db");
  const std::string id =
      test::run_before_restart(db, clock, Workflow("flow", [](Step& step, const json&) -> json {
                                 step.sleep("wait", 1h);
                                 return nullptr;
                               }));
  clock.advance(2h);
  int line = 0;
  auto runtime =
      test::restart_with(db, clock, Workflow("flow", [&line](Step& step, const json&) -> json {
                           line = __LINE__ + 1;
                           step.run("wait", [] { return 1; });
                           return nullptr;
                         }));
  runtime->run_until_idle();
  const RunInfo run = runtime->get(id);
  // The message names where the diverging call is.
  CHECK(run.error->message.find("step_identity_test.cpp:" + std::to_string(line) + ")") !=
        std::string::npos);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->type == "durable::NonDeterminism");
  CHECK(run.error->message.find("'wait'") != std::string::npos);
  CHECK(run.error->message.find("journaled as a step.sleep until ") != std::string::npos);
  CHECK(run.error->message.find("step.run") != std::string::npos);
}

TEST_CASE("typed workflows take and return user types through to_json/from_json (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("checkout", [](Step& step, const shop::Order& order) {
    const shop::Receipt receipt = step.run("charge", [&] {
      return shop::Receipt{"r-" + order.sku, order.quantity * 5};
    });
    step.run("log", [] {});  // void step
    return receipt;
  }));
  int voided = 0;
  runtime.add(Workflow("fire-and-forget",
                       [&](Step& step, const int& n) { step.run("touch", [&] { voided += n; }); }));
  const std::string id = runtime.start("checkout", {{"sku", "mug"}, {"quantity", 3}});
  const std::string void_id = runtime.start("fire-and-forget", 4);
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == json{{"id", "r-mug"}, {"total", 15}});
  CHECK(runtime.get(void_id).status == Status::completed);
  CHECK(runtime.get(void_id).output.is_null());
  CHECK(voided == 4);
}

TEST_CASE(
    "an input that does not convert to the typed workflow's input is refused by start (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("checkout", [](Step&, const shop::Order& order) { return order.quantity; }));
  CHECK_THROWS_WITH_AS(
      runtime.start("checkout", {{"sku", "mug"}}),
      doctest::Contains("the input of workflow 'checkout' does not convert to shop::Order: the "
                        "field 'quantity' is missing"),
      InvalidInput);
  CHECK_THROWS_WITH_AS(runtime.start("checkout", {{"sku", "mug"}, {"quantity", "three"}}),
                       doctest::Contains("type must be number, but is string"), InvalidInput);
  CHECK(runtime.list().empty());
}

TEST_CASE(
    "a run queued without the code at hand fails with InvalidInput on its first invocation (on "
    "each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  std::string id;
  {  // A process that queues runs, with an untyped stand-in for the workflow.
    Runtime queue({.database = db});
    queue.add(Workflow("checkout", [](Step&, const json&) -> json { return nullptr; }));
    id = queue.start("checkout", {{"sku", "mug"}});
  }
  Runtime worker({.database = db});
  worker.add(Workflow("checkout", [](Step&, const shop::Order& order) { return order.quantity; }));
  worker.run_until_idle();
  const RunInfo run = worker.get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error.has_value());
  CHECK(run.error->type == "durable::InvalidInput");
  CHECK(run.error->message.find("the field 'quantity' is missing") != std::string::npos);
}

TEST_CASE(
    "a journaled value that no longer converts to the step's type names step and types (on each "
    "store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "types.db");
  const std::string id =
      test::run_before_restart(db, clock, Workflow("flow", [](Step& step, const json&) -> json {
                                 step.run("fetch", [] { return std::string("forty-two"); });
                                 step.sleep("pause", 1h);
                                 return nullptr;
                               }));
  clock.advance(2h);
  auto runtime =
      test::restart_with(db, clock, Workflow("flow", [](Step& step, const json&) -> json {
                           const int n = step.run("fetch", [] { return 42; });
                           step.sleep("pause", 1h);
                           return n;
                         }));
  runtime->run_until_idle();
  const RunInfo run = runtime->get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->message.find("[durable.type_mismatch] step 'fetch' of run " + id) == 0);
  CHECK(run.error->message.find("\"forty-two\" (JSON string)") != std::string::npos);
  CHECK(run.error->message.find("does not convert to the step's type int") != std::string::npos);
}

TEST_CASE(
    "a step tool called inside a step body fails the step at once, naming the call (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("nested", [](Step& step, const json&) -> json {
    step.run("outer", [&] { step.sleep("inner-nap", std::chrono::seconds(1)); });
    return nullptr;
  }));
  const std::string id = runtime.start("nested");
  runtime.run_until_idle();
  const auto steps = runtime.steps(id);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].status == "failed");
  CHECK(steps[0].attempts == 1);  // not retried: calling it again would fail the same way
  REQUIRE(steps[0].error);
  CHECK(steps[0].error->message ==
        "[durable.misuse] step.sleep('inner-nap') was called inside the body of step 'outer' of "
        "run " +
            id + "; call it from the workflow function, between steps");
}

TEST_CASE(
    "a step body returning a string literal or string_view gives back a std::string (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("text", [](Step& step, const json&) -> json {
    const std::string a = step.run("literal", [] { return "hello"; });
    const std::string b = step.run("view", [] { return std::string_view("world"); });
    static_assert(std::is_same_v<decltype(step.run("x", [] { return "x"; })), std::string>);
    return a + " " + b;
  }));
  const std::string id = runtime.start("text");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == "hello world");
}
