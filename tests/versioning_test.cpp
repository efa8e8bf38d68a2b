// SPDX-License-Identifier: Apache-2.0
// Changing code under running runs (DESIGN §8 "Deploy safely", docs/versioning.md): journaled
// values (step.now, uuid, random) and patches (step.patched, deprecate_patch), each deploy a
// new Runtime with other code for the same workflow, on one database.

#include <doctest/doctest.h>

#include <durable/testing.hpp>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "durations.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {
std::string status_of(Runtime& runtime, const std::string& id) {
  return std::string(to_string(runtime.get(id).status));
}

std::vector<std::string> keys_of(Runtime& runtime, const std::string& id) {
  std::vector<std::string> keys;
  for (const StepInfo& s : runtime.steps(id)) keys.push_back(s.id + ":" + s.kind);
  return keys;
}
}  // namespace

TEST_CASE("step.now, step.uuid and step.random are journaled once and every replay gets them "
          "back (on each store)") {
  for (const Replay mode : {Replay::every_step, Replay::on_recovery}) {
    CAPTURE(static_cast<int>(mode));
    test::TempDir dir;
    test::ManualClock clock;
    RuntimeOptions opts = test::quiet(test::database(dir, "db"));
    opts.replay = mode;
    const std::string db = opts.database;
    std::vector<json> seen;  // what the code outside steps got, at each invocation past the calls
    const auto workflow = [&](Step& step, const json&) -> json {
      const Clock::time_point t = step.now("t");
      const std::string u = step.uuid("u");
      const std::string u2 = step.uuid("u2");
      const std::uint64_t r = step.random("r");
      const json got = {{"t", detail::to_ms(t)}, {"u", u}, {"u2", u2}, {"r", r}};
      seen.push_back(got);
      step.sleep("nap", 1h);  // a replay after it, in either mode
      return got;
    };
    std::string id;
    std::int64_t started_ms = 0;
    {
      auto runtime = test::runtime_on(db, clock, opts);
      runtime->add(Workflow("values", workflow));
      started_ms = detail::to_ms(clock.now());
      id = runtime->start("values");
      runtime->run_until_idle();
      CHECK(status_of(*runtime, id) == "sleeping");
      clock.advance(1min);  // later calls of step.now would see this time
    }
    clock.advance(2h);
    auto runtime = test::runtime_on(db, clock, opts);  // a restart: the run replays from the top
    runtime->add(Workflow("values", workflow));
    runtime->run_until_idle();
    REQUIRE(status_of(*runtime, id) == "completed");
    const json output = runtime->get(id).output;
    CHECK(output["t"] == started_ms);
    const std::regex v4("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
    CHECK(std::regex_match(output["u"].get<std::string>(), v4));
    CHECK(std::regex_match(output["u2"].get<std::string>(), v4));
    CHECK(output["u"] != output["u2"]);
    CHECK(output["r"].is_number_unsigned());
    REQUIRE(seen.size() >= 2);  // once before the sleep, once or more after it
    for (const json& got : seen) CHECK(got == output);
    CHECK(keys_of(*runtime, id) == std::vector<std::string>{"t:value", "u:value", "u2:value",
                                                            "r:value", "nap:sleep"});
    // show names the tool and the value
    const StepInfo first = runtime->steps(id).front();
    CHECK(first.output == json{{"now", started_ms}});
  }
}

TEST_CASE("a journaled value of another tool, or under a step's id, is NonDeterminism "
          "(on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  std::string id;
  {
    auto runtime = test::runtime_on(db, clock, test::quiet(db));
    runtime->add(Workflow("w", [](Step& step, const json&) -> json {
      step.uuid("x");
      step.sleep("nap", 1h);
      return nullptr;
    }));
    id = runtime->start("w");
    runtime->run_until_idle();
  }
  clock.advance(2h);
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  runtime->add(Workflow("w", [](Step& step, const json&) -> json {
    step.now("x");  // the code changed: the journal holds a uuid under this id
    step.sleep("nap", 1h);
    return nullptr;
  }));
  runtime->run_until_idle();
  const RunInfo run = runtime->get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->type == "durable::NonDeterminism");
  CHECK(run.error->message.find("a step.uuid that gave") != std::string::npos);
  CHECK(run.error->message.find("step.now") != std::string::npos);
}

namespace {
// Deploy by deploy, the workflow "order": a charge, a wait for shipping, shipping, and a
// follow-up an hour later. The second deploy changes how it ships, under a patch; the third
// deprecates the patch; the fourth removes its call. `ran` counts the bodies that ran.
enum class Code { v1, v2_patched, v3_deprecated, v4_removed };

Workflow order(Code code, std::map<std::string, int>& ran) {
  return Workflow("order", [code, &ran](Step& step, const json&) -> json {
    step.run("charge", [&] { ++ran["charge"]; });
    step.sleep("ship-wait", 1h);
    std::string path;
    const auto ship_old = [&] { step.run("ship-old", [&] { ++ran["ship-old"]; }); path = "old"; };
    const auto ship_new = [&] { step.run("ship-new", [&] { ++ran["ship-new"]; }); path = "new"; };
    switch (code) {
      case Code::v1:
        ship_old();
        break;
      case Code::v2_patched:
        if (step.patched("new-shipping")) {
          ship_new();
        } else {
          ship_old();
        }
        break;
      case Code::v3_deprecated:
        step.deprecate_patch("new-shipping");
        ship_new();
        break;
      case Code::v4_removed:
        ship_new();
        break;
    }
    step.sleep("follow-up", 1h);
    return path;
  });
}
}  // namespace

TEST_CASE("a patch's life: added, deprecated, removed, on runs sleeping across the deploys "
          "(on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  std::map<std::string, int> ran;
  const auto deploy = [&](Code code) {
    auto runtime = test::runtime_on(db, clock, test::quiet(db));
    runtime->add(order(code, ran));
    return runtime;
  };

  // Deploy 1. `past` gets past shipping (old) and sleeps in the follow-up; `before` sleeps
  // before shipping.
  std::string past, before;
  {
    auto runtime = deploy(Code::v1);
    past = runtime->start("order");
    runtime->run_until_idle();
    clock.advance(61min);
    runtime->run_until_idle();
    before = runtime->start("order");
    runtime->run_until_idle();
    CHECK(status_of(*runtime, past) == "sleeping");
    CHECK(status_of(*runtime, before) == "sleeping");
    CHECK(ran["ship-old"] == 1);
  }

  // Deploy 2, the patch. `past` keeps the old path its journal holds; `before` reaches the
  // patch with nothing journaled past it and takes the new one; `patched` and `patched_long`
  // start on it, half an hour apart, and sleep in their follow-ups when it ends.
  std::string patched, patched_long;
  {
    auto runtime = deploy(Code::v2_patched);
    clock.advance(61min);  // `past`'s follow-up and `before`'s wait for shipping are over
    runtime->run_until_idle();
    CHECK(runtime->get(past).output == "old");
    CHECK(status_of(*runtime, before) == "sleeping");  // shipped, now in its follow-up
    CHECK(keys_of(*runtime, before) ==
          std::vector<std::string>{"charge:run", "ship-wait:sleep", "new-shipping:patch",
                                   "ship-new:run", "follow-up:sleep"});
    CHECK(ran["ship-old"] == 1);  // `past` did not ship again
    CHECK(ran["ship-new"] == 1);
    patched = runtime->start("order");
    runtime->run_until_idle();
    clock.advance(30min);
    patched_long = runtime->start("order");
    runtime->run_until_idle();
    clock.advance(31min);
    runtime->run_until_idle();  // `before` ends; `patched` ships the new way
    clock.advance(30min);
    runtime->run_until_idle();  // `patched_long` ships the new way
    CHECK(runtime->get(before).output == "new");
    CHECK(status_of(*runtime, patched) == "sleeping");
    CHECK(status_of(*runtime, patched_long) == "sleeping");
    CHECK(ran["ship-new"] == 3);
  }

  // Deploy 3, the patch deprecated (no run of the old path is left: `past` ended): `patched`
  // holds the marker and replays through the call; `deprecated` starts without one.
  std::string deprecated;
  {
    auto runtime = deploy(Code::v3_deprecated);
    clock.advance(31min);
    runtime->run_until_idle();
    CHECK(runtime->get(patched).output == "new");
    CHECK(status_of(*runtime, patched_long) == "sleeping");
    deprecated = runtime->start("order");
    runtime->run_until_idle();
    CHECK(keys_of(*runtime, deprecated) ==
          std::vector<std::string>{"charge:run", "ship-wait:sleep"});
    CHECK(ran["ship-new"] == 3);
  }

  // Deploy 4, the call removed: a run holding the marker (`patched_long`, asleep since deploy
  // 2) and one without (`deprecated`) both finish.
  {
    auto runtime = deploy(Code::v4_removed);
    clock.advance(61min);
    runtime->run_until_idle();
    clock.advance(61min);
    runtime->run_until_idle();
    CHECK(runtime->get(patched_long).output == "new");
    CHECK(runtime->get(deprecated).output == "new");
    CHECK(keys_of(*runtime, deprecated) ==
          std::vector<std::string>{"charge:run", "ship-wait:sleep", "ship-new:run",
                                   "follow-up:sleep"});
  }
  CHECK(ran["charge"] == 5);  // each run charged once, whatever code replayed it
  CHECK(ran["ship-old"] == 1);
  CHECK(ran["ship-new"] == 4);
}

TEST_CASE("deprecating a patch while a run of the old path is alive fails that run clearly "
          "(on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  std::map<std::string, int> ran;
  std::string old;
  {
    auto runtime = test::runtime_on(db, clock, test::quiet(db));
    runtime->add(order(Code::v1, ran));
    old = runtime->start("order");
    runtime->run_until_idle();
    clock.advance(61min);
    runtime->run_until_idle();  // shipped the old way, in its follow-up
  }
  clock.advance(61min);
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  runtime->add(order(Code::v3_deprecated, ran));
  runtime->run_until_idle();
  const RunInfo run = runtime->get(old);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->type == "durable::NonDeterminism");
  CHECK(run.error->message.find("step.deprecate_patch('new-shipping')") != std::string::npos);
  CHECK(run.error->message.find("versioning_test.cpp:") != std::string::npos);
  CHECK(ran["ship-new"] == 0);  // nothing of the new path ran for it
}

TEST_CASE("a patch's id used by a step of the same run is an error, and nothing of the step is "
          "written (on each store)") {
  test::TempDir dir;
  Runtime runtime(test::quiet(test::database(dir, "db")));
  int ran = 0;
  runtime.add(Workflow("after", [&](Step& step, const json&) -> json {
    if (step.patched("p")) step.run("p", [&] { ++ran; });
    return nullptr;
  }));
  runtime.add(Workflow("before", [&](Step& step, const json&) -> json {
    step.run("p", [&] { ++ran; });
    return step.patched("p");
  }));
  const std::string after = runtime.start("after");
  const std::string before = runtime.start("before");
  runtime.run_until_idle();
  CHECK(ran == 1);  // only "before"'s step ran
  for (const std::string& id : {after, before}) {
    const RunInfo run = runtime.get(id);
    CHECK(run.status == Status::failed);
    REQUIRE(run.error);
    CAPTURE(run.error->message);
    CHECK(run.error->message.find("a patch's id names the patch alone") != std::string::npos);
  }
  CHECK(keys_of(runtime, after) == std::vector<std::string>{"p:patch"});
  CHECK(keys_of(runtime, before) == std::vector<std::string>{"p:run"});
}

TEST_CASE("step.patched, deprecate_patch and the values are refused inside a step body") {
  test::TempDir dir;
  Runtime runtime(test::quiet(dir.file("db")));
  const std::map<std::string, std::function<void(Step&)>> calls = {
      {"step.patched", [](Step& step) { step.patched("p"); }},
      {"step.deprecate_patch", [](Step& step) { step.deprecate_patch("p"); }},
      {"step.now", [](Step& step) { step.now("t"); }},
      {"step.uuid", [](Step& step) { step.uuid("u"); }},
      {"step.random", [](Step& step) { step.random("r"); }}};
  std::map<std::string, std::string> runs;
  for (const auto& [tool, call] : calls) {
    runtime.add(Workflow(tool, [call = call](Step& step, const json&) -> json {
      step.run("outer", [&] { call(step); });
      return nullptr;
    }));
    runs[tool] = runtime.start(tool);
  }
  runtime.run_until_idle();
  for (const auto& entry : runs) {
    const std::string& tool = entry.first;  // not a structured binding: CAPTURE captures it
    const std::string& id = entry.second;
    CAPTURE(tool);
    const RunInfo run = runtime.get(id);
    CHECK(run.status == Status::failed);
    REQUIRE(run.error);
    CHECK(run.error->message.find(tool) != std::string::npos);
    CHECK(runtime.steps(id).size() == 1);  // the failed "outer", nothing of the call
  }
}

TEST_CASE("TestRuntime: step.now reads the virtual clock, and replay() accepts a removed "
          "deprecated patch") {
  test::TempDir dir;
  const auto with_patch = Workflow("w", [](Step& step, const json&) -> json {
    const bool fresh = step.patched("p");
    step.sleep("nap", 1h);
    return json{{"fresh", fresh}, {"at", detail::to_ms(step.now("t"))}};
  });
  const auto without = Workflow("w", [](Step& step, const json&) -> json {
    step.sleep("nap", 1h);
    return json{{"fresh", true}, {"at", detail::to_ms(step.now("t"))}};
  });
  testing::TestRuntime kit;
  kit.add(with_patch);
  const Clock::time_point started = kit.now();
  const testing::RunResult run = kit.run("w");
  REQUIRE(run.info.status == Status::completed);
  // The sleep passed at once in virtual time: now() is the clock an hour on.
  CHECK(run.info.output["at"] == detail::to_ms(started + 1h));
  CHECK(run.info.output["fresh"] == true);
  const std::string file = dir.file("golden.db");
  kit.save(file);
  testing::replay(with_patch, file, run.info.id);
  testing::replay(without, file, run.info.id);  // the marker left with no call is ignored
}

namespace {
// An old run: shipped the old way on code without the patch, now in its follow-up. Returns its
// id; `db` then holds it, sleeping.
std::string old_run(const std::string& db, test::ManualClock& clock) {
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  runtime->add(Workflow("o", [](Step& step, const json&) -> json {
    step.run("charge", [] {});
    step.sleep("ship-wait", 1h);
    step.run("ship-old", [] {});
    step.sleep("follow-up", 1h);
    return "old";
  }));
  const std::string id = runtime->start("o");
  runtime->run_until_idle();
  clock.advance(61min);
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::sleeping);
  clock.advance(61min);
  return id;
}
}  // namespace

TEST_CASE("with strict replay off, an old run keeps the old path whatever new calls come before "
          "the patch: an added step, a new step failed for good, a patch called in a loop (on each "
          "store)") {
  using Before = std::function<void(Step&)>;
  const std::map<std::string, Before> changes = {
      {"an added step", [](Step& step) { step.run("audit", [] {}); }},
      {"a new step failed for good",
       [](Step& step) {
         auto probe = step.start("probe", []() -> int { throw NonRetryableError("no"); });
         try {
           probe.get();
         } catch (const StepFailed&) {
         }
       }},
      {"a patch called in a loop, with starts",
       [](Step& step) {
         std::vector<Future<int>> started;
         for (int i = 0; i < 3; ++i) {
           if (step.patched("loop")) started.push_back(step.start("w", [i] { return i; }));
         }
         for (auto& f : started) f.get();
       }}};
  for (const Replay mode : {Replay::every_step, Replay::on_recovery}) {
    for (const auto& change : changes) {
      const std::string& name = change.first;
      CAPTURE(name);
      CAPTURE(static_cast<int>(mode));
      test::TempDir dir;
      test::ManualClock clock;
      const std::string db = test::database(dir, "db");
      const std::string id = old_run(db, clock);
      RuntimeOptions opts = test::quiet(db);
      opts.replay = mode;
      opts.strict_replay = false;  // with it on, the added calls stop the old run (strict tests)
      auto runtime = test::runtime_on(db, clock, opts);
      int shipped_new = 0;
      runtime->add(Workflow("o", [&, before = change.second](Step& step, const json&) -> json {
        step.run("charge", [] {});
        before(step);
        step.sleep("ship-wait", 1h);
        std::string path = "old";
        if (step.patched("new-shipping")) {
          step.run("ship-new", [&] { ++shipped_new; });
          path = "new";
        } else {
          step.run("ship-old", [] {});
        }
        step.sleep("follow-up", 1h);
        return path;
      }));
      runtime->run_until_idle();
      CHECK(runtime->get(id).output == "old");
      CHECK(shipped_new == 0);
      for (const StepInfo& s : runtime->steps(id)) CHECK(s.id != "new-shipping");  // no marker
      // A new run on the same code takes every patch, the looped one each time.
      const std::string fresh = runtime->start("o");
      runtime->run_until_idle();
      clock.advance(61min);
      runtime->run_until_idle();
      clock.advance(61min);
      runtime->run_until_idle();
      CHECK(runtime->get(fresh).output == "new");
      CHECK(shipped_new == 1);
    }
  }
}

TEST_CASE("with strict replay off, a run whose journal holds a removed step's entry is held past "
          "every patch, and with it on the run stops (on each store)") {
  for (const bool strict : {false, true}) {
    CAPTURE(strict);
    test::TempDir dir;
    test::ManualClock clock;
    const std::string db = test::database(dir, "db");
    std::string id;
    {
      auto runtime = test::runtime_on(db, clock, test::quiet(db));
      runtime->add(Workflow("o", [](Step& step, const json&) -> json {
        step.run("charge", [] {});
        step.run("audit", [] {});  // removed below
        step.sleep("ship-wait", 1h);
        step.run("ship-old", [] {});
        return "old";
      }));
      id = runtime->start("o");
      runtime->run_until_idle();  // sleeping before the place of the patch
    }
    clock.advance(61min);
    RuntimeOptions opts = test::quiet(db);
    opts.strict_replay = strict;
    auto runtime = test::runtime_on(db, clock, opts);
    int shipped = 0;
    runtime->add(Workflow("o", [&shipped](Step& step, const json&) -> json {
      step.run("charge", [] {});
      step.sleep("ship-wait", 1h);
      if (step.patched("new-shipping")) return "new";
      step.run("ship-old", [&shipped] { ++shipped; });
      return "old";
    }));
    runtime->run_until_idle();
    const RunInfo run = runtime->get(id);
    if (!strict) {
      // The journal holds an entry no call meets: durable cannot tell a removed step from one
      // the run took past the patch on older code, and keeps it on the old path.
      CHECK(run.output == "old");
      CHECK(shipped == 1);
    } else {
      // Strict: the old path's first new call, with 'audit' never met, stops the run.
      CHECK(run.status == Status::failed);
      REQUIRE(run.error);
      CHECK(run.error->type == "durable::NonDeterminism");
      CHECK(run.error->step_id == "audit");
      CHECK(shipped == 0);
    }
  }
}

TEST_CASE("check_determinism names code outside steps that takes another path on replay, and "
          "passes code that does not") {
  int calls = 0;  // kept across invocations: each replay sees another count
  const Workflow flaky("flaky", [&calls](Step& step, const json&) -> json {
    const std::string id = ++calls % 2 == 1 ? "a" : "b";
    step.run(id, [] { return 1; });
    return id;
  });
  try {
    testing::check_determinism(flaky);
    FAIL("no NonDeterminism");
  } catch (const NonDeterminism& e) {
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(message.find("check_determinism of workflow 'flaky'") != std::string::npos);
    CHECK(message.find("versioning_test.cpp:") != std::string::npos);  // the line of the call
    // The run itself stops at its second invocation (strict replay): 'b' is called where the
    // journal holds 'a'.
    CHECK(message.find("step.run('b')") != std::string::npos);
    CHECK(message.find("step 'a'") != std::string::npos);
  }
  const Workflow steady("steady", [](Step& step, const json& input) -> json {
    const Clock::time_point t = step.now("t");  // journaled: the same on every replay
    step.sleep("nap", 1h);
    return step.run("sum", [&] { return input.value("n", 0) + 1; }) +
           static_cast<int>(detail::to_ms(t) > 0);
  });
  const testing::RunResult run = testing::check_determinism(steady, {{"n", 41}});
  CHECK(run.info.status == Status::completed);
  CHECK(run.info.output == 43);
}
