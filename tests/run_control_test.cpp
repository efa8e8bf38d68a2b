// SPDX-License-Identifier: Apache-2.0
// Run control (DESIGN §8): pause and resume of runs and workflows, run deadlines, priorities
// and tags.

#include <doctest/doctest.h>

#include <atomic>
#include <durable/client.hpp>
#include <durable/testing.hpp>
#include <mutex>

#include "fiber_scheduler.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

// nap: sleeps an hour between two steps; wait: waits for an "approved" event for a day.
Workflow napping(std::atomic<int>& after) {
  return Workflow("nap", [&after](Step& step, const json&) -> json {
    step.run("before", [] { return 1; });
    step.sleep("nap", 1h);
    return step.run("after", [&] { return ++after; });
  });
}

Workflow approval() {
  return Workflow("approval", [](Step& step, const json&) -> json {
    const auto decision = step.wait_for_event("decision", "approved", {.timeout = 24h});
    return decision ? *decision : json("timed out");
  });
}

// A runtime on a store of its own with a manual clock.
struct Desk {
  test::TempDir dir;
  test::ManualClock clock;
  std::string db = test::database(dir, "db");
  std::unique_ptr<Runtime> runtime = test::runtime_on(db, clock, test::quiet(db));
};

std::string latest_reason(const RunInfo& run) {
  return run.history.empty() ? "" : run.history.back().reason;
}

}  // namespace

TEST_CASE("pause and resume: a paused run is claimed by no runtime, a sleep that passed during "
          "the pause wakes it at once (on each store)") {
  Desk desk;
  std::atomic<int> after{0};
  desk.runtime->add(napping(after));
  const std::string run = desk.runtime->start("nap");
  desk.runtime->run_until_idle();
  REQUIRE(desk.runtime->get(run).status == Status::sleeping);

  desk.runtime->pause(run);
  RunInfo paused = desk.runtime->get(run);
  CHECK(paused.status == Status::paused);
  CHECK(latest_reason(paused) == "paused");
  REQUIRE(paused.wake_at.has_value());  // the sleep's wake time is kept
  desk.runtime->pause(run);             // a paused run is left as it is
  CHECK(desk.runtime->list({.status = Status::paused}).size() == 1);

  desk.clock.advance(2h);
  desk.runtime->run_until_idle();
  CHECK(desk.runtime->get(run).status == Status::paused);
  CHECK(after == 0);

  // A paused run is unfinished: the pre-deploy check replays it too.
  CHECK(desk.runtime->verify().runs_checked == 1);
  desk.runtime->resume(run);
  CHECK(desk.runtime->get(run).status == Status::sleeping);
  desk.runtime->run_until_idle();
  const RunInfo done = desk.runtime->get(run);
  CHECK(done.status == Status::completed);
  CHECK(done.output == 1);
  CHECK(after == 1);
}

TEST_CASE("pause: an event that comes while a waiting run is paused is kept for it, a pending "
          "run paused before its first claim keeps its start time (on each store)") {
  Desk desk;
  desk.runtime->add(approval());
  const std::string run = desk.runtime->start("approval");
  desk.runtime->run_until_idle();
  REQUIRE(desk.runtime->get(run).status == Status::waiting);
  desk.runtime->pause(run);
  desk.runtime->send_event("approved", {{"by", "ana"}});
  desk.runtime->run_until_idle();
  CHECK(desk.runtime->get(run).status == Status::paused);
  desk.runtime->resume(run);
  desk.runtime->run_until_idle();
  const RunInfo done = desk.runtime->get(run);
  CHECK(done.status == Status::completed);
  CHECK(done.output == json{{"by", "ana"}});

  const std::string later =
      desk.runtime->start("approval", {}, {.at = desk.clock.now() + std::chrono::hours(1)});
  desk.runtime->pause(later);
  desk.runtime->resume(later);
  desk.runtime->run_until_idle();
  CHECK(desk.runtime->get(later).status == Status::pending);  // not due before its time
  desk.clock.advance(1h);
  desk.runtime->run_until_idle();
  CHECK(desk.runtime->get(later).status == Status::waiting);
}

TEST_CASE("pause during a running step: the step finishes and is journaled, nothing after it "
          "runs until resume (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  RuntimeOptions opts = test::quiet(db);
  opts.poll_interval = 20ms;
  Runtime runtime(opts);
  std::atomic<bool> in_first{false}, release{false};
  std::atomic<int> second{0};
  runtime.add(Workflow("two", [&](Step& step, const json&) -> json {
    step.run("first", [&] {
      in_first = true;
      while (!release) std::this_thread::sleep_for(1ms);
      return 1;
    });
    return step.run("second", [&] { return ++second; });
  }));
  const std::string run = runtime.start("two");
  {
    test::Serving serving(runtime);
    REQUIRE(test::eventually([&] { return in_first.load(); }));
    runtime.pause(run);
    const RunInfo pausing = runtime.get(run);
    CHECK(pausing.status == Status::running);
    CHECK(pausing.pausing);
    release = true;
    REQUIRE(test::eventually([&] { return runtime.get(run).status == Status::paused; }));
    std::this_thread::sleep_for(200ms);  // ten polls: a worker that went on would have by now
    CHECK(second == 0);
    const std::vector<StepInfo> steps = runtime.steps(run);
    REQUIRE(steps.size() == 1);
    CHECK(steps[0].id == "first");
    CHECK(steps[0].status == "completed");
    CHECK(runtime.get(run).status == Status::paused);
    runtime.resume(run);
    REQUIRE(test::eventually([&] { return runtime.get(run).status == Status::completed; }));
  }
  CHECK(second == 1);
}

TEST_CASE("pause_workflow pauses its runs and those started until resume_workflow, which "
          "leaves the runs paused one by one (on each store)") {
  Desk desk;
  std::atomic<int> after{0};
  desk.runtime->add(napping(after));
  desk.runtime->add(approval());
  const std::string a = desk.runtime->start("nap");
  const std::string b = desk.runtime->start("nap");
  const std::string other = desk.runtime->start("approval");
  desk.runtime->pause(b);
  CHECK(desk.runtime->pause_workflow("nap") == 1);  // a; b was paused already
  CHECK(desk.runtime->paused_workflows() == std::vector<std::string>{"nap"});
  const std::string c = desk.runtime->start("nap");
  CHECK(desk.runtime->get(c).status == Status::paused);
  desk.runtime->run_until_idle();
  CHECK(desk.runtime->get(a).status == Status::paused);
  CHECK(desk.runtime->get(other).status == Status::waiting);  // other workflows go on

  CHECK(desk.runtime->resume_workflow("nap") == 2);  // a and c
  CHECK(desk.runtime->paused_workflows().empty());
  desk.runtime->run_until_idle();
  CHECK(desk.runtime->get(a).status == Status::sleeping);
  CHECK(desk.runtime->get(c).status == Status::sleeping);
  CHECK(desk.runtime->get(b).status == Status::paused);
  CHECK(latest_reason(desk.runtime->get(b)) == "paused");
}

TEST_CASE("pause and resume refuse what they cannot do, changing nothing (on each store)") {
  Desk desk;
  std::atomic<int> after{0};
  desk.runtime->add(napping(after));
  CHECK_THROWS_AS(desk.runtime->pause("no-such-run"), NotFound);
  CHECK_THROWS_AS(desk.runtime->resume("no-such-run"), NotFound);
  const std::string run = desk.runtime->start("nap");
  CHECK_THROWS_WITH_AS(desk.runtime->resume(run),
                       doctest::Contains("is pending; only a paused run can be resumed"), Error);
  desk.runtime->cancel(run);
  CHECK_THROWS_WITH_AS(desk.runtime->pause(run),
                       doctest::Contains("is cancelled; only a run that has not ended"), Error);
  CHECK(desk.runtime->get(run).status == Status::cancelled);
  CHECK_THROWS_WITH_AS(desk.runtime->pause_workflow(""), doctest::Contains("workflow name"),
                       Error);
  CHECK(desk.runtime->paused_workflows().empty());

  const std::string held = desk.runtime->start("nap");
  desk.runtime->pause(held);
  desk.runtime->cancel(held, "not needed");  // a paused run can be cancelled
  CHECK(desk.runtime->get(held).status == Status::cancelled);
}

TEST_CASE("deadlines: a run past its deadline fails with TimeoutError wherever it is, sleeping "
          "or paused, its child is cancelled and a retry gives it more time (on each store)") {
  Desk desk;
  std::atomic<int> after{0};
  desk.runtime->add(napping(after));
  desk.runtime->add(Workflow("parent", [](Step& step, const json&) -> json {
    return step.invoke("child", "approval");
  }));
  desk.runtime->add(approval());
  const std::string sleeper =
      desk.runtime->start("nap", {}, {.deadline = desk.clock.now() + std::chrono::minutes(30)});
  const std::string paused =
      desk.runtime->start("nap", {}, {.deadline = desk.clock.now() + std::chrono::minutes(30)});
  const std::string parent =
      desk.runtime->start("parent", {}, {.deadline = desk.clock.now() + std::chrono::minutes(30)});
  desk.runtime->run_until_idle();
  desk.runtime->pause(paused);
  REQUIRE(desk.runtime->get(sleeper).deadline.has_value());
  desk.clock.advance(29min);
  desk.runtime->run_until_idle();
  CHECK(desk.runtime->get(sleeper).status == Status::sleeping);
  desk.clock.advance(2min);
  desk.runtime->run_until_idle();
  for (const std::string& id : {sleeper, paused, parent}) {
    const RunInfo run = desk.runtime->get(id);
    CHECK(run.status == Status::failed);
    REQUIRE(run.error.has_value());
    CHECK(run.error->type == "durable::TimeoutError");
    CHECK(test::has(run.error->message, "passed its deadline"));
  }
  CHECK(test::has(desk.runtime->get(sleeper).error->message, "while sleeping"));
  CHECK(test::has(desk.runtime->get(paused).error->message, "while paused"));
  const std::vector<RunInfo> children = desk.runtime->list({.workflow = "approval"});
  REQUIRE(children.size() == 1);
  CHECK(children[0].status == Status::cancelled);
  CHECK(after == 0);

  desk.runtime->retry(sleeper);
  CHECK_FALSE(desk.runtime->get(sleeper).deadline.has_value());
  desk.runtime->run_until_idle();
  desk.clock.advance(2h);
  desk.runtime->run_until_idle();
  CHECK(desk.runtime->get(sleeper).status == Status::completed);
}

TEST_CASE("deadlines: WorkflowOptions::deadline counts from the run's start, also for a run "
          "queued where the code is not, a passed deadline is refused (on each store)") {
  Desk desk;
  std::atomic<int> after{0};
  WorkflowOptions opts;
  opts.deadline = 10min;
  desk.runtime->add(Workflow("nap", [&after](Step& step, const json&) -> json {
    step.sleep("nap", 1h);
    return ++after;
  }, opts));
  const std::string own = desk.runtime->start("nap");
  CHECK(desk.runtime->get(own).deadline == desk.clock.now() + std::chrono::minutes(10));
  // An earlier deadline of the start wins.
  const std::string sooner =
      desk.runtime->start("nap", {}, {.deadline = desk.clock.now() + std::chrono::minutes(5)});
  CHECK(desk.runtime->get(sooner).deadline == desk.clock.now() + std::chrono::minutes(5));
  // Queued by a Client, which has no code: the deadline is in the file (add() put it there).
  // (The Client's clock is the real one: the runtime's is moved past it.)
  Client client(desk.db);
  const std::string queued = client.start("nap");
  CHECK(desk.runtime->get(queued).deadline ==
        desk.runtime->get(queued).created_at + std::chrono::minutes(10));
  desk.clock.advance(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() -
                                                                           desk.clock.now()) +
                     1min);
  desk.runtime->run_until_idle();
  desk.clock.advance(10min);
  desk.runtime->run_until_idle();
  for (const std::string& id : {own, sooner, queued}) {
    CHECK(desk.runtime->get(id).status == Status::failed);
  }
  CHECK_THROWS_WITH_AS(
      desk.runtime->start("nap", {}, {.deadline = desk.clock.now() - std::chrono::seconds(1)}),
      doctest::Contains("has passed already"), Error);
  CHECK(desk.runtime->list({.workflow = "nap"}).size() == 3);
}

TEST_CASE("deadlines: a run whose step body is running at its deadline fails, and the body's "
          "late result is not journaled (on each store)") {
  if (!detail::FiberScheduler::uses_fibers()) {
    // Runs execute one by one there, so nothing else runs while a body does.
    MESSAGE("not run: this build has no fibers (ThreadSanitizer)");
    return;
  }
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  RuntimeOptions opts = test::quiet(db);
  opts.poll_interval = 20ms;
  Runtime runtime(opts);
  std::atomic<bool> ended{false};
  runtime.add(Workflow("slow", [&](Step& step, const json&) -> json {
    return step.run("slow", [&] {
      std::this_thread::sleep_for(600ms);
      ended = true;
      return 1;
    });
  }));
  const std::string run =
      runtime.start("slow", {}, {.deadline = Clock::now() + std::chrono::milliseconds(150)});
  {
    test::Serving serving(runtime);
    REQUIRE(test::eventually([&] { return ended.load(); }));
    std::this_thread::sleep_for(100ms);
  }
  const RunInfo failed = runtime.get(run);
  CHECK(failed.status == Status::failed);
  REQUIRE(failed.error.has_value());
  CHECK(failed.error->type == "durable::TimeoutError");
  CHECK(test::has(failed.error->message, "while running"));
  CHECK(runtime.steps(run).empty());
}

TEST_CASE("priority: among runs due at once, a higher priority is claimed first, then the "
          "oldest (on each store)") {
  Desk desk;
  std::mutex mutex;
  std::vector<std::string> order;
  WorkflowOptions one_at_a_time;
  one_at_a_time.concurrency = 1;
  desk.runtime->add(Workflow("job", [&](Step& step, const json& input) -> json {
    step.run("log", [&] {
      std::lock_guard lock(mutex);
      order.push_back(input.value("name", ""));
      return 0;
    });
    return nullptr;
  }, one_at_a_time));
  for (const auto& [name, priority] : std::vector<std::pair<std::string, int>>{
           {"low", -1}, {"first", 0}, {"urgent", 5}, {"second", 0}, {"more urgent", 9},
           {"urgent too", 5}}) {
    desk.runtime->start("job", {{"name", name}}, {.priority = priority});
    desk.clock.advance(1ms);
  }
  desk.runtime->run_until_idle();
  CHECK(order == std::vector<std::string>{"more urgent", "urgent", "urgent too", "first",
                                          "second", "low"});
  CHECK(desk.runtime->list({.limit = 1})[0].priority == 5);
}

TEST_CASE("tags: stored with the run, shown and matched by RunFilter::tags, bad tags are "
          "refused with nothing written (on each store)") {
  Desk desk;
  std::atomic<int> after{0};
  desk.runtime->add(napping(after));
  const std::string acme =
      desk.runtime->start("nap", {}, {.tags = {{"tenant", "acme"}, {"plan", "gold"}}});
  const std::string globex = desk.runtime->start("nap", {}, {.tags = {{"tenant", "globex"}}});
  desk.runtime->start("nap");
  CHECK(desk.runtime->get(acme).tags ==
        std::map<std::string, std::string>{{"plan", "gold"}, {"tenant", "acme"}});
  const auto ids = [&](const RunFilter& filter) {
    std::vector<std::string> out;
    for (const RunInfo& run : desk.runtime->list(filter)) out.push_back(run.id);
    return out;
  };
  CHECK(ids({.tags = {{"tenant", "acme"}}}) == std::vector<std::string>{acme});
  CHECK(ids({.tags = {{"tenant", "globex"}}}) == std::vector<std::string>{globex});
  CHECK(ids({.tags = {{"tenant", "acme"}, {"plan", "gold"}}}) == std::vector<std::string>{acme});
  CHECK(ids({.tags = {{"tenant", "acme"}, {"plan", "silver"}}}).empty());
  CHECK(ids({.tags = {{"tenant", "\xff"}}}).empty());
  CHECK(desk.runtime->list({}).size() == 3);

  CHECK_THROWS_WITH_AS(desk.runtime->start("nap", {}, {.tags = {{"", "x"}}}),
                       doctest::Contains("non-empty key and value"), Error);
  CHECK_THROWS_WITH_AS(desk.runtime->start("nap", {}, {.tags = {{"tenant", ""}}}),
                       doctest::Contains("tag 'tenant' has an empty value"), Error);
  CHECK_THROWS_WITH_AS(desk.runtime->start("nap", {}, {.tags = {{"k", std::string(300, 'x')}}}),
                       doctest::Contains("longer than 256 bytes"), Error);
  CHECK_THROWS_WITH_AS(desk.runtime->start("nap", {}, {.tags = {{"k", "\xff"}}}),
                       doctest::Contains("UTF-8"), Error);
  std::map<std::string, std::string> many;
  for (int i = 0; i < 33; ++i) many["k" + std::to_string(i)] = "v";
  CHECK_THROWS_WITH_AS(desk.runtime->start("nap", {}, {.tags = many}),
                       doctest::Contains("at most 32 tags"), Error);
  CHECK_THROWS_WITH_AS(desk.runtime->start("nap", {}, {.priority = 1'000'001}),
                       doctest::Contains("priority is a whole number from -1000000"), Error);
  CHECK(desk.runtime->list({}).size() == 3);
}

TEST_CASE("step.set_tags: merged into the run's tags as it is journaled, found by "
          "RunFilter::tags, and set once however often the run replays (on each store)") {
  Desk desk;
  std::atomic<int> look_ups{0};
  desk.runtime->add(Workflow("tagger", [&](Step& step, const json&) -> json {
    const std::string customer = step.run("look-up", [&] {
      ++look_ups;
      return std::string("c-42");
    });
    step.set_tags({{"customer", customer}, {"plan", "gold"}});
    step.sleep("nap", 1h);
    step.set_tags({{"plan", "platinum"}});
    return customer;
  }));
  const std::string id =
      desk.runtime->start("tagger", {}, {.tags = {{"tenant", "acme"}, {"plan", "basic"}}});
  const auto ids = [&](const RunFilter& filter) {
    std::vector<std::string> out;
    for (const RunInfo& run : desk.runtime->list(filter)) out.push_back(run.id);
    return out;
  };
  using Tags = std::map<std::string, std::string>;
  desk.runtime->run_until_idle();
  REQUIRE(desk.runtime->get(id).status == Status::sleeping);
  CHECK(desk.runtime->get(id).tags ==
        Tags{{"customer", "c-42"}, {"plan", "gold"}, {"tenant", "acme"}});
  CHECK(ids({.tags = {{"customer", "c-42"}}}) == std::vector<std::string>{id});
  CHECK(ids({.tags = {{"plan", "basic"}}}).empty());  // replaced
  desk.clock.advance(1h);
  desk.runtime->run_until_idle();
  REQUIRE(desk.runtime->get(id).status == Status::completed);
  CHECK(desk.runtime->get(id).tags ==
        Tags{{"customer", "c-42"}, {"plan", "platinum"}, {"tenant", "acme"}});
  CHECK(ids({.tags = {{"plan", "gold"}}}).empty());
  CHECK(ids({.tags = {{"plan", "platinum"}, {"tenant", "acme"}}}) == std::vector<std::string>{id});
  CHECK(look_ups == 1);
  std::vector<std::string> journaled;
  for (const StepInfo& s : desk.runtime->steps(id)) {
    if (s.kind == "tags") journaled.push_back(s.id + "=" + s.output.dump());
  }
  CHECK(journaled == std::vector<std::string>{R"([tags]={"customer":"c-42","plan":"gold"})",
                                              R"([tags]#2={"plan":"platinum"})"});
}

TEST_CASE("step.set_tags: bad tags, too many in all, or a call inside a step body fail the run "
          "with a clear error and set nothing (on each store)") {
  Desk desk;
  std::map<std::string, std::string> thirty;
  for (int i = 0; i < 30; ++i) thirty["k" + std::to_string(i)] = "v";
  desk.runtime->add(Workflow("tag", [](Step& step, const json& input) -> json {
    const std::string how = input.value("how", "");
    if (how == "empty key") step.set_tags({{"", "x"}});
    if (how == "three more") step.set_tags({{"a", "1"}, {"b", "2"}, {"c", "3"}});
    if (how == "two more") step.set_tags({{"a", "1"}, {"k0", "w"}, {"b", "2"}});
    if (how == "in a body") {
      step.run("inside", [&] {
        step.set_tags({{"a", "1"}});
        return 1;
      });
    }
    return how;
  }));
  const auto run = [&](const std::string& how, const std::map<std::string, std::string>& tags) {
    const std::string id = desk.runtime->start("tag", {{"how", how}}, {.tags = tags});
    desk.runtime->run_until_idle();
    return desk.runtime->get(id);
  };
  const RunInfo empty_key = run("empty key", {{"tenant", "acme"}});
  CHECK(empty_key.status == Status::failed);
  REQUIRE(empty_key.error);
  CHECK(empty_key.error->message.find("non-empty key and value") != std::string::npos);
  CHECK(empty_key.tags == std::map<std::string, std::string>{{"tenant", "acme"}});

  const RunInfo over = run("three more", thirty);
  CHECK(over.status == Status::failed);
  REQUIRE(over.error);
  CHECK(over.error->message.find("step.set_tags: a run has at most 32 tags; these would give "
                                 "it 33") != std::string::npos);
  CHECK(over.tags == thirty);

  // Replacing a tag it has counts once: 30 + a, b = 32.
  const RunInfo full = run("two more", thirty);
  CHECK(full.status == Status::completed);
  CHECK(full.tags.size() == 32);
  CHECK(full.tags.at("k0") == "w");

  const RunInfo inside = run("in a body", {});
  CHECK(inside.status == Status::failed);
  REQUIRE(inside.error);
  CHECK(inside.error->message.find("step.set_tags('[tags]') was called inside the body of") !=
        std::string::npos);
  CHECK(inside.tags.empty());

  // The same code replays each run to the same end: the refusal at 33 tags included.
  for (const Status status : {Status::failed, Status::completed}) {
    const VerifyReport report = desk.runtime->verify({.status = status, .workflow = "tag"});
    CHECK(report.runs_checked == (status == Status::failed ? 3u : 1u));
    for (const Divergence& d : report.divergences) FAIL_CHECK(d.message);
  }
}

TEST_CASE("bulk actions: cancel, retry and purge every run a filter matches, by workflow, failing "
          "step, error type, tag and creation time, and count them first (on each store)") {
  Desk desk;
  std::atomic<bool> broken{true};
  desk.runtime->add(Workflow("ship", [&broken](Step& step, const json&) -> json {
    step.run("label", [] { return 1; });
    step.run("courier", [&]() -> int {
      if (broken) throw NonRetryableError("courier down");
      return 2;
    });
    return nullptr;
  }));
  std::atomic<int> after{0};
  desk.runtime->add(napping(after));
  std::vector<std::string> shipped;
  for (int i = 0; i < 6; ++i) {
    shipped.push_back(desk.runtime->start(
        "ship", {}, {.tags = {{"region", i % 2 == 0 ? "eu" : "us"}}}));
  }
  const Clock::time_point split = desk.clock.now() + std::chrono::milliseconds(1);
  desk.clock.advance(1s);
  const std::string late = desk.runtime->start("ship", {}, {.tags = {{"region", "eu"}}});
  const std::string napper = desk.runtime->start("nap");
  desk.runtime->run_until_idle();
  REQUIRE(desk.runtime->count({.status = Status::failed}) == 7);

  // Dry run: what each filter matches.
  CHECK(desk.runtime->count({.failed_step = "courier"}) == 7);
  CHECK(desk.runtime->count({.failed_step = "label"}) == 0);
  CHECK(desk.runtime->count({.error_type = "durable::NonRetryableError"}) == 7);
  CHECK(desk.runtime->count({.tags = {{"region", "eu"}}}) == 4);
  CHECK(desk.runtime->count({.workflow = "ship", .created_before = split}) == 6);
  CHECK(desk.runtime->count({.created_after = split}) == 2);

  broken = false;
  CHECK(desk.runtime->retry(RunFilter{.tags = {{"region", "eu"}}, .created_before = split}) == 3);
  desk.runtime->run_until_idle();
  CHECK(desk.runtime->count({.status = Status::completed}) == 3);
  CHECK(desk.runtime->count({.status = Status::failed}) == 4);
  CHECK_THROWS_WITH_AS(desk.runtime->retry(RunFilter{.status = Status::completed}),
                       doctest::Contains("retry by filter takes runs that are failed"), Error);

  // Cancel closes the failed ones and ends the sleeping one; completed runs are left.
  CHECK(desk.runtime->cancel(RunFilter{}, "clean-up") == 5);
  CHECK(desk.runtime->get(napper).status == Status::cancelled);
  CHECK(desk.runtime->get(late).status == Status::cancelled);
  CHECK(desk.runtime->count({.status = Status::completed}) == 3);

  // Purge deletes what ended, journal and all; a run that has not ended is never deleted.
  const std::string live = desk.runtime->start("nap");
  CHECK_THROWS_WITH_AS(desk.runtime->purge(RunFilter{.status = Status::pending}),
                       doctest::Contains("purge by filter takes runs that are completed"), Error);
  CHECK(desk.runtime->purge(RunFilter{.status = Status::completed}) == 3);
  CHECK_THROWS_AS(desk.runtime->get(shipped[0]), NotFound);
  CHECK_THROWS_AS(desk.runtime->steps(shipped[0]), NotFound);
  CHECK(desk.runtime->purge(RunFilter{}) == 5);
  CHECK(desk.runtime->count({}) == 1);
  CHECK(desk.runtime->get(live).status == Status::pending);
}

TEST_CASE("retention: serve() deletes the runs that ended longer ago than it, and no other "
          "(on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  RuntimeOptions opts = test::quiet(db);
  opts.retention = 300ms;
  opts.poll_interval = 20ms;
  Runtime runtime(opts);
  runtime.add(Workflow("quick", [](Step& step, const json&) -> json {
    return step.run("one", [] { return 1; });
  }));
  runtime.add(Workflow("waits", [](Step& step, const json&) -> json {
    return step.wait_for_event("go", "go").value_or(json());
  }));
  const std::string quick = runtime.start("quick");
  const std::string waiting = runtime.start("waits");
  test::Serving serving(runtime);
  REQUIRE(test::eventually([&] { return runtime.get(quick).status == Status::completed; }));
  REQUIRE(test::eventually([&] { return runtime.count({.workflow = "quick"}) == 0; }, 10s));
  CHECK(runtime.get(waiting).status == Status::waiting);
}
