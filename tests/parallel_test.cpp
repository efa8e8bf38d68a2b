// SPDX-License-Identifier: Apache-2.0
// Parallel and nested steps (DESIGN §2): start, Future, all, map, nested keys and retries.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "fiber_scheduler.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {
std::vector<std::string> keys_of(Runtime& runtime, const std::string& id) {
  std::vector<std::string> keys;
  for (const auto& s : runtime.steps(id)) keys.push_back(s.id);
  return keys;
}

// Lets `parties` threads through only once all of them have arrived, or fails after a deadline:
// proof that bodies run at the same time rather than one after another.
class Rendezvous {
 public:
  explicit Rendezvous(int parties) : left_(parties) {}
  bool arrive_and_wait(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    if (--left_ == 0) all_here_.notify_all();
    return all_here_.wait_for(lock, limit, [this] { return left_ <= 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_here_;
  int left_;
};
}  // namespace

TEST_CASE(
    "the seed's parallel example: two started steps, then log-results, in 3 invocations (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  json logged;
  runtime.add(Workflow("parallel", [&](Step& step, const json&) -> json {
    auto step1 = step.start("step1", [] { return json{{"foo", "1"}}; });
    auto step2 = step.start("step2", [] { return json{{"bar", "2"}}; });
    auto [r1, r2] = all(step1, step2);
    const json results = json::array({r1, r2});
    step.run("log-results", [&] { logged = results; });
    return results;
  }));
  const std::string id = runtime.start("parallel");
  runtime.run_until_idle();
  const json expected = json::parse(R"([{"foo":"1"},{"bar":"2"}])");
  CHECK(logged == expected);
  const RunInfo run = runtime.get(id);
  CHECK(run.output == expected);
  CHECK(run.invocations == 3);
  // step1 and step2 are journaled as each ends, in either order; log-results after both.
  auto keys = keys_of(runtime, id);
  REQUIRE(keys.size() == 3);
  std::sort(keys.begin(), keys.begin() + 2);
  CHECK(keys == std::vector<std::string>{"step1", "step2", "log-results"});
}

TEST_CASE(
    "the seed's nested example: step1 runs step3 inside, in parallel with step2 (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  json logged;
  runtime.add(Workflow("nested", [&](Step& step, const json&) -> json {
    auto step1 = step.start("step1", [&] {
      const json step3 = step.run("step3", [] { return json{{"baz", "3"}}; });
      return json{{"foo", "1"}, {"step3Result", step3}};
    });
    auto step2 = step.start("step2", [] { return json{{"bar", "2"}}; });
    auto [r1, r2] = all(step1, step2);
    const json results = json::array({r1, r2});
    step.run("log-results", [&] { logged = results; });
    return results;
  }));
  const std::string id = runtime.start("nested");
  runtime.run_until_idle();
  const json expected = json::parse(R"([{"foo":"1","step3Result":{"baz":"3"}},{"bar":"2"}])");
  CHECK(logged == expected);
  CHECK(runtime.get(id).output == expected);
  CHECK(runtime.get(id).invocations == 3);
  auto keys = keys_of(runtime, id);
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"log-results", "step1", "step1/step3", "step2"});
}

TEST_CASE("started steps run at the same time on the step threads (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"), .threads = 3});
  Rendezvous rendezvous(3);
  runtime.add(Workflow("together", [&](Step& step, const json&) -> json {
    std::vector<Future<bool>> futures;
    for (int i = 0; i < 3; ++i) {
      futures.push_back(step.start("meet", [&] { return rendezvous.arrive_and_wait(10s); }));
    }
    bool all_met = true;
    for (auto& f : futures) all_met = f.get() && all_met;
    return all_met;
  }));
  const std::string id = runtime.start("together");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == true);
}

TEST_CASE(
    "ids follow call order, not completion order, however the bodies finish (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");  // each round checks its own run only
  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    Runtime runtime({.database = db, .threads = 4});
    runtime.add(Workflow("reverse", [](Step& step, const json&) -> json {
      std::vector<Future<int>> futures;
      for (int i = 0; i < 4; ++i) {
        futures.push_back(step.start("item", [i] {
          std::this_thread::sleep_for(std::chrono::milliseconds(4 * (4 - i)));  // last first
          return i;
        }));
      }
      json results = json::array();
      for (auto& f : futures) results.push_back(f.get());
      return results;
    }));
    const std::string id = runtime.start("reverse");
    runtime.run_until_idle();
    CHECK(runtime.get(id).output == json::array({0, 1, 2, 3}));
    // Each was journaled as it ended (the last called first); each key names its call.
    const auto steps = runtime.steps(id);
    REQUIRE(steps.size() == 4);
    const std::vector<std::string> keys = {"item", "item#2", "item#3", "item#4"};
    for (int i = 0; i < 4; ++i) {
      const auto step = std::find_if(steps.begin(), steps.end(),
                                     [&](const StepInfo& s) { return s.id == keys[i]; });
      REQUIRE(step != steps.end());
      CHECK(step->output == i);
    }
  }
}

TEST_CASE(
    "map runs one parallel step per item, keyed id[i], results in item order (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  std::atomic<int> bodies{0};
  runtime.add(Workflow("squares", [&](Step& step, const json&) -> json {
    const std::vector<int> items = {3, 1, 2};
    const std::vector<int> squares = step.map("square", items, [&](int n) {
      ++bodies;
      return n * n;
    });
    step.map("touch", items, [&](int) { ++bodies; });  // void: nothing returned
    return squares;
  }));
  const std::string id = runtime.start("squares");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == json::array({9, 1, 4}));
  CHECK(bodies == 6);
  // Journaled as each ended: the items of one map in any order, the maps in call order.
  auto keys = keys_of(runtime, id);
  REQUIRE(keys.size() == 6);
  std::sort(keys.begin(), keys.begin() + 3);
  std::sort(keys.begin() + 3, keys.end());
  CHECK(keys == std::vector<std::string>{"square[0]", "square[1]", "square[2]", "touch[0]",
                                         "touch[1]", "touch[2]"});
}

TEST_CASE(
    "a branch that fails for good raises StepFailed from all() and the others stay journaled (on "
    "each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int good_bodies = 0, fallback_bodies = 0;
  runtime.add(Workflow("branches", [&](Step& step, const json&) -> json {
    auto good = step.start("good", [&] {
      ++good_bodies;
      return 1;
    });
    auto bad = step.start("bad", [] {
      throw NonRetryableError("quota exceeded");
      return 0;
    });
    try {
      auto [g, b] = all(good, bad);
      return g + b;
    } catch (const StepFailed& e) {
      CHECK(e.info.step_id == "bad");
      return step.run("fallback", [&] {
        ++fallback_bodies;
        return -1;
      });
    }
  }));
  const std::string id = runtime.start("branches");
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == -1);
  CHECK(good_bodies == 1);
  CHECK(fallback_bodies == 1);
  // The branches are journaled in the order they ended, which the threads decide.
  std::map<std::string, std::string> status;
  for (const StepInfo& s : runtime.steps(id)) status[s.id] = s.status;
  CHECK(status == std::map<std::string, std::string>{
                      {"good", "completed"}, {"bad", "failed"}, {"fallback", "completed"}});
}

TEST_CASE(
    "a failed branch is retried after its backoff without running the other again (on each "
    "store)") {
  test::TempDir dir;
  test::ManualClock clock;
  Runtime runtime({.database = test::database(dir, "db")});
  clock.attach(runtime);
  int steady = 0, flaky = 0;
  runtime.add(Workflow("retry-branch", [&](Step& step, const json&) -> json {
    auto a = step.start("steady", [&] {
      ++steady;
      return 1;
    });
    auto b = step.start("flaky",
                        [&] {
                          if (++flaky == 1) throw std::runtime_error("blip");
                          return 2;
                        },
                        {.retry = test::exact_policy(3, 5000ms)});
    auto [x, y] = all(a, b);
    return x + y;
  }));
  const std::string id = runtime.start("retry-branch");
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::sleeping);
  clock.advance(5s);
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == 3);
  CHECK(steady == 1);
  CHECK(flaky == 2);
}

TEST_CASE("a started step that is never awaited completes before the run does (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int audited = 0;
  runtime.add(Workflow("fire-and-forget", [&](Step& step, const json&) -> json {
    step.start("audit", [&] { ++audited; });
    return "done";
  }));
  const std::string id = runtime.start("fire-and-forget");
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::completed);
  CHECK(audited == 1);
  CHECK(keys_of(runtime, id) == std::vector<std::string>{"audit"});
}

TEST_CASE(
    "nested steps are keyed by path, numbered per parent, and journaled on their own (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("paths", [](Step& step, const json&) -> json {
    const int a = step.run(
        "a", [&] { return step.run("x", [] { return 1; }) + step.run("x", [] { return 2; }); });
    const int b = step.run("b", [&] { return step.run("x", [] { return 10; }); });
    return a + b;
  }));
  const std::string id = runtime.start("paths");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == 13);
  auto keys = keys_of(runtime, id);
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"a", "a/x", "a/x#2", "b", "b/x"});
}

TEST_CASE("retrying an outer step does not run its completed inner steps again (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  Runtime runtime({.database = test::database(dir, "db")});
  clock.attach(runtime);
  int inner = 0, outer = 0;
  runtime.add(Workflow("outer-retry", [&](Step& step, const json&) -> json {
    return step.run("outer",
                    [&] {
                      const int v = step.run("inner", [&] { return ++inner; });
                      if (++outer == 1)
                        throw std::runtime_error("outer fails after its inner step");
                      return v * 100;
                    },
                    {.retry = test::exact_policy(2, 1000ms)});
  }));
  const std::string id = runtime.start("outer-retry");
  runtime.run_until_idle();
  clock.advance(1s);
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == 100);
  CHECK(inner == 1);
  CHECK(outer == 2);
}

TEST_CASE(
    "a failing inner step is retried after its backoff, then the outer step completes (on each "
    "store)") {
  test::TempDir dir;
  test::ManualClock clock;
  Runtime runtime({.database = test::database(dir, "db")});
  clock.attach(runtime);
  int inner = 0, before = 0;
  runtime.add(Workflow("inner-retry", [&](Step& step, const json&) -> json {
    return step.run("outer", [&] {
      step.run("before", [&] { ++before; });
      return step.run("flaky-inner",
                      [&] {
                        if (++inner == 1) throw std::runtime_error("blip");
                        return 7;
                      },
                      {.retry = test::exact_policy(3, 2000ms)});
    });
  }));
  const std::string id = runtime.start("inner-retry");
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::sleeping);
  clock.advance(2s);
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == 7);
  CHECK(inner == 2);
  CHECK(before == 1);
  for (const auto& s : runtime.steps(id)) {
    if (s.id == "outer") CHECK(s.attempts == 1);  // waiting on an inner retry is no attempt
    if (s.id == "outer/flaky-inner") CHECK(s.attempts == 2);
  }
}

TEST_CASE("a step body may start nested steps in parallel (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"), .threads = 2});
  runtime.add(Workflow("nested-parallel", [](Step& step, const json&) -> json {
    return step.run("outer", [&] {
      auto a = step.start("a", [] { return 1; });
      auto b = step.start("b", [] { return 2; });
      auto [x, y] = all(a, b);
      return x + y;
    });
  }));
  const std::string id = runtime.start("nested-parallel");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == 3);
  auto keys = keys_of(runtime, id);
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"outer", "outer/a", "outer/b"});
}

TEST_CASE(
    "many runs' workflow code shares the calling thread while their bodies overlap (on each "
    "store)") {
  test::TempDir dir;
  if (!detail::FiberScheduler::uses_fibers()) {
    MESSAGE("not run: this build has no fibers (ThreadSanitizer)");
    return;
  }
  constexpr int kRuns = 5;
  Runtime runtime({.database = test::database(dir, "db"), .threads = kRuns});
  Rendezvous rendezvous(kRuns);
  std::mutex mutex;
  std::set<std::thread::id> workflow_threads;
  runtime.add(Workflow("meet", [&](Step& step, const json&) -> json {
    {
      std::lock_guard lock(mutex);
      workflow_threads.insert(std::this_thread::get_id());
    }
    // One body per run: the runs' bodies can only all meet if no run waits for another's.
    return step.run("meet", [&] { return rendezvous.arrive_and_wait(10s); });
  }));
  std::vector<std::string> ids;
  for (int i = 0; i < kRuns; ++i) ids.push_back(runtime.start("meet"));
  runtime.run_until_idle();
  for (const auto& id : ids) CHECK(runtime.get(id).output == true);
  CHECK(workflow_threads == std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST_CASE(
    "a retry's backoff counts from when the attempt failed, not from the invocation (on each "
    "store)") {
  test::TempDir dir;
  test::ManualClock clock;
  Runtime runtime({.database = test::database(dir, "db")});
  clock.attach(runtime);
  runtime.add(Workflow("slow-fail", [&](Step& step, const json&) -> json {
    step.run("slow",
             [&] {
               clock.advance(10min);  // the body runs long, then fails
               throw std::runtime_error("late failure");
             },
             {.retry = test::exact_policy(3, 5000ms)});
    return nullptr;
  }));
  const std::string id = runtime.start("slow-fail");
  const auto started = clock.now();
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  REQUIRE(run.wake_at.has_value());
  CHECK(*run.wake_at == started + 10min + 5s);
}

TEST_CASE("group commit: the steps of runs in flight together share transactions (on each store)") {
  if (!detail::FiberScheduler::uses_fibers()) {
    MESSAGE("not run: this build has no fibers (ThreadSanitizer)");
    return;
  }
  constexpr int kRuns = 8, kSteps = 3;
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("steps", [](Step& step, const json&) -> json {
    int sum = 0;
    for (int i = 0; i < kSteps; ++i) sum += step.run("s", [i] { return i; });
    return sum;
  }));
  // A fresh runtime claims a run per free step thread until its bodies prove quick; a first run
  // shows them quick, and the runs after it are claimed at once.
  runtime.start("steps");
  runtime.start("steps");
  runtime.run_until_idle();
  const std::size_t before = detail::RuntimeAccess::core(runtime).write_transactions();
  std::vector<std::string> ids;
  for (int i = 0; i < kRuns; ++i) ids.push_back(runtime.start("steps"));
  runtime.run_until_idle();
  for (const auto& id : ids) CHECK(runtime.get(id).output == 3);
  // One at a time it takes kRuns * (kSteps + 1) = 32 writes; grouped, about kSteps + 1 when the
  // bodies finish together. How they meet depends on timing (a loaded sanitizer build split one
  // group more: 7), so the bound is well under 32 but not exact.
  const std::size_t writes = detail::RuntimeAccess::core(runtime).write_transactions() - before;
  MESSAGE(writes << " write transactions for " << kRuns * (kSteps + 1) << " run writes");
  CHECK(writes <= 3 * (kSteps + 1));
}

TEST_CASE(
    "group commit: a run refused in a group (cancelled) leaves the others written (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  std::vector<std::string> ids(3);
  // Run 1's body ends only once run 0's body cancelled it, so its write always comes after the
  // cancel (it used to race it, and lose now and then on a loaded machine).
  std::atomic<bool> cancelled{false};
  runtime.add(Workflow("job", [&](Step& step, const json& input) -> json {
    const int n = input.at("n");
    step.run("work", [&] {
      if (n == 0) {
        runtime.cancel(ids[1]);  // while run 1 is in flight too
        cancelled = true;
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (n == 1 && !cancelled && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      return n;
    });
    return n;
  }));
  for (int i = 0; i < 3; ++i) ids[i] = runtime.start("job", {{"n", i}});
  runtime.run_until_idle();
  CHECK(runtime.get(ids[0]).output == 0);
  CHECK(runtime.get(ids[2]).output == 2);
  CHECK(runtime.get(ids[1]).status == Status::cancelled);
  CHECK(runtime.steps(ids[1]).empty());
}

TEST_CASE(
    "parallel steps that all fail, caught, and the same id used again: a new step runs (on each "
    "store)") {
  test::TempDir dir;
  // Each failed body is journaled by its thread as it ends; the call after them must number
  // past them (x#3), not find x's failure again, in the first execution as in every replay.
  for (const Replay replay : {Replay::every_step, Replay::on_recovery}) {
    CAPTURE(static_cast<int>(replay));
    const std::string db =
        test::database(dir, replay == Replay::every_step ? "every.db" : "rec.db");
    Runtime runtime({.database = db, .threads = 2, .replay = replay});
    const StepOptions once{.retry = RetryPolicy{.max_attempts = 1}};
    std::atomic<int> ran{0};
    runtime.add(Workflow("fail-then-go-on", [&](Step& step, const json&) -> json {
      try {
        auto a = step.start(
            "x", []() -> int { throw std::runtime_error("a"); }, once);
        auto b = step.start(
            "x", []() -> int { throw std::runtime_error("b"); }, once);
        all(a, b);
      } catch (const StepFailed&) {
      }
      return step.run("x", [&] {
        ++ran;
        return 7;
      });
    }));
    const std::string id = runtime.start("fail-then-go-on");
    runtime.run_until_idle();
    CHECK(runtime.get(id).output == 7);
    CHECK(ran == 1);
    auto keys = keys_of(runtime, id);
    std::sort(keys.begin(), keys.end());
    CHECK(keys == std::vector<std::string>{"x", "x#2", "x#3"});
  }
}
