// SPDX-License-Identifier: Apache-2.0
// JSON nested too deep (issue 11): nlohmann copies, compares and writes JSON recursively, so a
// hostile value nested 100,000 deep would exhaust a stack and kill the process. Every way a value
// enters durable refuses it with a clear error, and a value already stored that deep fails its
// run instead of crashing the worker that claims it.

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>

#include <atomic>
#include <string>

#include "serialization.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

// Arrays within arrays, `levels` deep, parsed from text: nlohmann's parser keeps its own stack,
// so this makes a deep value without recursing (building it by nesting would copy recursively).
json nested(int levels) {
  return json::parse(std::string(static_cast<std::size_t>(levels), '[') +
                     std::string(static_cast<std::size_t>(levels), ']'));
}

constexpr const char* kTooDeep = "nested more than 64 levels deep";

}  // namespace

TEST_CASE("encode() takes JSON nested 64 levels deep and refuses 65, naming the limit") {
  std::string text;
  CHECK_FALSE(detail::encode(nested(64), text).has_value());
  CHECK(text.size() == 128);
  const auto refused = detail::encode(nested(65), text);
  REQUIRE(refused.has_value());
  CHECK(refused->find(kTooDeep) != std::string::npos);
  // Deep inside an object, past a long flat array: the walk finds it too.
  json wide = {{"items", json::array()}, {"deep", nested(100'000)}};
  for (int i = 0; i < 1000; ++i) wide["items"].push_back(i);
  CHECK(detail::encode(wide, text).has_value());
  // A diagnostic dump names a deep value rather than recursing into it.
  CHECK(detail::lenient_dump(nested(100'000)).find("levels deep") != std::string::npos);
}

TEST_CASE("the text scan counts brackets outside strings only") {
  CHECK_FALSE(detail::too_deep_text(R"(["[[[[[[", "\"[[[[", {"a": "{{{{"}])", 2).has_value());
  CHECK(detail::too_deep_text(R"([[["x"]]])", 2).has_value());
  CHECK_FALSE(detail::too_deep_text(R"([[["x"]]])", 3).has_value());
  CHECK(detail::too_deep_text(std::string(100'000, '{'), detail::kMaxJsonDepth).has_value());
}

TEST_CASE(
    "start, send_event, schedule and the step tools refuse input nested too deep (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  std::atomic<int> invoked{0};
  runtime.add(Workflow("echo", [&](Step&, const json& input) -> json {
    ++invoked;
    return input;
  }));
  CHECK_NOTHROW(runtime.start("echo", nested(64)));
  for (const int levels : {65, 2'000, 100'000}) {
    CAPTURE(levels);
    CHECK_THROWS_WITH_AS(runtime.start("echo", nested(levels)), doctest::Contains(kTooDeep), Error);
    CHECK_THROWS_WITH_AS(runtime.send_event("deep", nested(levels)), doctest::Contains(kTooDeep),
                         Error);
    CHECK_THROWS_WITH_AS(runtime.schedule("echo", nested(levels), {.every = 1h}),
                         doctest::Contains(kTooDeep), Error);
  }
  runtime.run_until_idle();
  CHECK(invoked == 1);  // the one run of 64 levels, and nothing refused was stored
  CHECK(runtime.list({.workflow = "echo"}).size() == 1);

  runtime.add(Workflow("sends", [](Step& step, const json&) -> json {
    step.send_event("send", "deep", nested(100'000));
    return nullptr;
  }));
  runtime.add(Workflow("invokes", [](Step& step, const json&) -> json {
    return step.invoke("call", "echo", nested(100'000));
  }));
  for (const char* workflow : {"sends", "invokes"}) {
    CAPTURE(workflow);
    const std::string id = runtime.start(workflow);
    runtime.run_until_idle();
    const RunInfo run = runtime.get(id);
    CHECK(run.status == Status::failed);
    REQUIRE(run.error.has_value());
    CHECK(run.error->message.find(kTooDeep) != std::string::npos);
  }
}

TEST_CASE(
    "a step or a workflow returning JSON nested too deep fails clearly, and the worker goes on (on "
    "each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("deep-step", [](Step& step, const json&) -> json {
    return step.run("make", [] { return nested(100'000); });
  }));
  // Made and returned on the workflow's fiber, whose stack is small.
  runtime.add(Workflow("deep-output", [](Step&, const json&) -> json { return nested(100'000); }));
  runtime.add(Workflow("fine", [](Step& step, const json&) -> json {
    return step.run("make", [] { return nested(64); });
  }));
  const std::string step_run = runtime.start("deep-step");
  const std::string output_run = runtime.start("deep-output");
  const std::string fine_run = runtime.start("fine");
  runtime.run_until_idle();

  const RunInfo failed_step = runtime.get(step_run);
  CHECK(failed_step.status == Status::failed);
  const std::vector<StepInfo> steps = runtime.steps(step_run);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].status == "failed");
  CHECK(steps[0].attempts == 1);  // not retried: the same body would return the same value
  REQUIRE(steps[0].error.has_value());
  CHECK(steps[0].error->message.find("step 'make'") != std::string::npos);
  CHECK(steps[0].error->message.find(kTooDeep) != std::string::npos);

  const RunInfo failed_output = runtime.get(output_run);
  CHECK(failed_output.status == Status::failed);
  REQUIRE(failed_output.error.has_value());
  CHECK(failed_output.error->message.find(kTooDeep) != std::string::npos);

  CHECK(runtime.get(fine_run).output == nested(64));
}

TEST_CASE("a run whose stored input is nested too deep is failed when claimed, not executed") {
  test::TempDir dir;
  const std::string db = dir.file("db");
  std::atomic<int> invoked{0};
  std::string poisoned, healthy;
  {
    Runtime writer({.database = db});
    writer.add(Workflow("echo", [](Step&, const json& input) -> json { return input; }));
    poisoned = writer.start("echo", {{"x", 1}});
    healthy = writer.start("echo", {{"x", 2}});
  }
  {
    // As a build from before the limit, or another tool, could have stored it.
    SQLite::Database raw(db, SQLite::OPEN_READWRITE);
    raw.setBusyTimeout(10000);  // the runtime's lease heartbeat may be writing
    SQLite::Statement update(raw, "UPDATE runs SET input = ? WHERE id = ?");
    update.bind(1, nested(2'000).dump());
    update.bind(2, poisoned);
    CHECK(update.exec() == 1);
  }
  Runtime runtime({.database = db});
  runtime.add(Workflow("echo", [&](Step&, const json& input) -> json {
    ++invoked;
    return input;
  }));
  runtime.run_until_idle();
  const RunInfo run = runtime.get(poisoned);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error.has_value());
  CHECK(run.error->message.find("cannot be read") != std::string::npos);
  CHECK(run.error->message.find("levels deep") != std::string::npos);
  CHECK(run.input.is_string());  // shown as a note, not parsed
  CHECK(runtime.get(healthy).output == json{{"x", 2}});
  CHECK(invoked == 1);
}

TEST_CASE("a journaled error nested too deep fails its run when claimed, and claiming goes on") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = dir.file("db");
  auto runtime = test::runtime_on(db, clock);
  std::atomic<int> attempts{0};
  runtime->add(Workflow("flaky", [&](Step& step, const json&) -> json {
    return step.run("try",
                    [&]() -> int {
                      if (++attempts == 1) throw std::runtime_error("not yet");
                      return 1;
                    },
                    {.retry = RetryPolicy{.initial_backoff = 1h, .jitter = 0}});
  }));
  runtime->add(Workflow("fine", [](Step&, const json&) -> json { return 7; }));
  const std::string flaky = runtime->start("flaky");
  runtime->run_until_idle();
  REQUIRE(runtime->get(flaky).status == Status::sleeping);
  {
    // The error of the retrying step, as another tool could have written it.
    SQLite::Database raw(db, SQLite::OPEN_READWRITE);
    raw.setBusyTimeout(10000);  // the runtime's lease heartbeat may be writing
    SQLite::Statement update(raw, "UPDATE steps SET error = ? WHERE run_id = ?");
    update.bind(1, nested(2'000).dump());
    update.bind(2, flaky);
    CHECK(update.exec() == 1);
  }
  const std::string fine = runtime->start("fine");
  clock.advance(2h);
  runtime->run_until_idle();
  const RunInfo run = runtime->get(flaky);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error.has_value());
  CHECK(run.error->message.find("cannot be read") != std::string::npos);
  CHECK(runtime->get(fine).output == 7);  // the claim that met the run went on
  CHECK(attempts == 1);
}
