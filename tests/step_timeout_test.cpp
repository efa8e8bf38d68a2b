// SPDX-License-Identifier: Apache-2.0
// Step timeouts and heartbeats (DESIGN §8): an attempt past its timeout is abandoned, not
// killed; its slot goes to other work, its late result is dropped, and the progress it reported
// reaches the next attempt.

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <durable/testing.hpp>
#include <thread>

#include "fiber_scheduler.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

RuntimeOptions serving_options(const std::string& db) {
  RuntimeOptions opts = test::quiet(db);
  opts.poll_interval = 20ms;
  return opts;
}

bool history_says(const RunInfo& run, const std::string& part) {
  for (const auto& change : run.history) {
    if (test::has(change.reason, part)) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a hung body under a 200 ms timeout frees its slot, and its late result is dropped "
          "(on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  RuntimeOptions opts = serving_options(db);
  opts.threads = 1;  // one step thread: the hung body must give it up for the other run to go on
  Runtime runtime(opts);
  std::atomic<int> attempts{0};
  std::atomic<bool> late_running{false}, late_returned{false};
  runtime.add(Workflow("hung", [&](Step& step, const json&) -> json {
    return step.run(
        "call",
        [&]() -> std::string {
          if (++attempts == 1) {
            late_running = true;
            std::this_thread::sleep_for(3s);  // heeds no stop token
            late_running = false;
            late_returned = true;
            return "late";
          }
          return "second";
        },
        {.retry = test::quick_retries(3), .timeout = 200ms});
  }));
  runtime.add(Workflow("quick", [](Step& step, const json&) -> json {
    return step.run("one", [] { return 1; });
  }));
  const std::string hung = runtime.start("hung");
  test::Serving serving(runtime);
  REQUIRE(test::eventually([&] { return late_running.load(); }));
  const std::string quick = runtime.start("quick");
  REQUIRE(test::eventually([&] { return runtime.get(quick).status == Status::completed; }));
  // It went on while the hung body still held its own thread. (Without fibers, under
  // ThreadSanitizer, runs execute one by one: the lingering invocation holds the loop.)
  if (detail::FiberScheduler::uses_fibers()) CHECK(late_running.load());
  REQUIRE(test::eventually([&] { return runtime.get(hung).status == Status::completed; }));
  CHECK(runtime.get(hung).output == "second");
  REQUIRE(test::eventually([&] { return late_returned.load(); }));
  std::this_thread::sleep_for(200ms);  // what the late body returned had time to be written
  const RunInfo done = runtime.get(hung);
  CHECK(done.output == "second");
  const std::vector<StepInfo> steps = runtime.steps(hung);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].output == "second");
  CHECK(steps[0].attempts == 2);
  CHECK(history_says(done, "ran past its timeout of 200 ms"));
  CHECK(attempts == 2);
}

TEST_CASE("a timed-out attempt's stop token is requested, and a step out of attempts fails the "
          "run with TimeoutError (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(serving_options(db));
  std::atomic<bool> saw_stop{false};
  runtime.add(Workflow("stuck", [&](Step& step, const json&) -> json {
    return step.run(
        "poll",
        [&](StepContext& ctx) {
          while (!ctx.stop_token().stop_requested()) std::this_thread::sleep_for(5ms);
          saw_stop = true;
          return 0;
        },
        {.retry = test::quick_retries(1), .timeout = 100ms});
  }));
  const std::string run = runtime.start("stuck");
  test::Serving serving(runtime);
  REQUIRE(test::eventually([&] { return runtime.get(run).status == Status::failed; }));
  const RunInfo failed = runtime.get(run);
  REQUIRE(failed.error.has_value());
  CHECK(failed.error->type == "durable::TimeoutError");
  CHECK(failed.error->step_id == "poll");
  CHECK(test::has(failed.error->message, "ran past its timeout of 100 ms"));
  CHECK(test::eventually([&] { return saw_stop.load(); }));
}

TEST_CASE("heartbeats keep a long attempt alive, one that stops beating is abandoned, and its "
          "progress, shown meanwhile, reaches the next attempt (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(serving_options(db));
  std::atomic<int> attempts{0};
  std::atomic<bool> beating{false};
  std::optional<json> given;  // what the second attempt found
  std::atomic<bool> first_began_fresh{false};
  runtime.add(Workflow("crunch", [&](Step& step, const json&) -> json {
    return step.run(
        "rows",
        [&](StepContext& ctx) -> int {
          CHECK(ctx.step_key() == "rows");
          CHECK(ctx.attempt() == attempts + 1);
          if (++attempts == 1) {
            first_began_fresh = !ctx.last_heartbeat().has_value();
            // Beats for 400 ms, four times the heartbeat timeout, then hangs.
            for (int done = 1; done <= 20; ++done) {
              ctx.heartbeat({{"done", done}});
              beating = true;
              std::this_thread::sleep_for(20ms);
            }
            CHECK(ctx.last_heartbeat() == json{{"done", 20}});
            beating = false;
            while (!ctx.stop_token().stop_requested()) std::this_thread::sleep_for(5ms);
            return -1;
          }
          given = ctx.last_heartbeat();
          return given ? given->value("done", 0) : 0;
        },
        {.retry = test::quick_retries(3), .heartbeat_timeout = 100ms});
  }));
  const std::string run = runtime.start("crunch");
  test::Serving serving(runtime);
  REQUIRE(test::eventually([&] { return beating.load(); }));
  // Visible while the step runs: the first beat is stored at once.
  REQUIRE(test::eventually([&] { return !runtime.progress(run).empty(); }, 5s));
  const std::vector<StepProgress> shown = runtime.progress(run);
  CHECK(shown[0].step == "rows");
  CHECK(shown[0].attempt == 1);
  CHECK(shown[0].progress.contains("done"));
  REQUIRE(test::eventually([&] { return runtime.get(run).status == Status::completed; }));
  CHECK(first_began_fresh.load());
  CHECK(attempts == 2);
  REQUIRE(given.has_value());
  CHECK(*given == json{{"done", 20}});  // the last beat, stored when the attempt was abandoned
  CHECK(runtime.get(run).output == 20);
  const std::vector<StepInfo> steps = runtime.steps(run);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].attempts == 2);
  CHECK(history_says(runtime.get(run), "sent no heartbeat for 100 ms"));
  CHECK(runtime.progress(run).empty());  // a completed step's progress is not shown
  CHECK_THROWS_AS(runtime.progress("no-such-run"), NotFound);
}

TEST_CASE("a timed-out parallel step and a timed-out nested step: the others are journaled, "
          "and the nested one fails inside its body (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(serving_options(db));
  runtime.add(Workflow("fan", [&](Step& step, const json&) -> json {
    const auto hang = [](StepContext& ctx) {
      while (!ctx.stop_token().stop_requested()) std::this_thread::sleep_for(5ms);
      return std::string("late");
    };
    auto slow = step.start("slow", hang, {.retry = test::quick_retries(1), .timeout = 100ms});
    auto fine = step.start("fine", [] { return std::string("fine"); });
    const std::string outer = step.run("outer", [&] {
      try {
        return step.run("inner", hang, {.retry = test::quick_retries(1), .timeout = 100ms});
      } catch (const StepFailed& e) {
        return "fallback after " + e.info.type;
      }
    });
    std::string first;
    try {
      first = slow.get();
    } catch (const StepFailed& e) {
      first = e.info.type;
    }
    return json{first, fine.get(), outer};
  }));
  const std::string run = runtime.start("fan");
  test::Serving serving(runtime);
  REQUIRE(test::eventually([&] { return runtime.get(run).status == Status::completed; }));
  CHECK(runtime.get(run).output ==
        json{"durable::TimeoutError", "fine", "fallback after durable::TimeoutError"});
  std::map<std::string, StepInfo> by_key;
  for (const StepInfo& s : runtime.steps(run)) by_key[s.id] = s;
  CHECK(by_key["slow"].status == "failed");
  CHECK(by_key["fine"].status == "completed");
  CHECK(by_key["outer/inner"].status == "failed");
  REQUIRE(by_key["outer/inner"].error.has_value());
  CHECK(by_key["outer/inner"].error->type == "durable::TimeoutError");
}

TEST_CASE("step timeouts under Replay::on_recovery: the run goes on past an abandoned attempt") {
  test::TempDir dir;
  RuntimeOptions opts = serving_options(dir.file("db"));
  opts.replay = Replay::on_recovery;
  Runtime runtime(opts);
  std::atomic<int> attempts{0};
  runtime.add(Workflow("resident", [&](Step& step, const json&) -> json {
    const int a = step.run(
        "flaky",
        [&](StepContext& ctx) {
          if (++attempts == 1) {
            while (!ctx.stop_token().stop_requested()) std::this_thread::sleep_for(5ms);
          }
          return attempts.load();
        },
        {.retry = test::quick_retries(2), .timeout = 100ms});
    const int b = step.run("after", [] { return 10; });
    return a + b;
  }));
  const std::string run = runtime.start("resident");
  test::Serving serving(runtime);
  REQUIRE(test::eventually([&] { return runtime.get(run).status == Status::completed; }));
  CHECK(runtime.get(run).output == 12);
}

TEST_CASE("bad step timeouts and unstorable progress are clear errors") {
  test::TempDir dir;
  Runtime runtime(test::quiet(dir.file("db")));
  runtime.add(Workflow("negative", [](Step& step, const json&) -> json {
    return step.run("x", [] { return 1; }, {.timeout = -5ms});
  }));
  runtime.add(Workflow("nan", [](Step& step, const json&) -> json {
    return step.run("x", [](StepContext& ctx) {
      try {
        ctx.heartbeat(std::nan(""));
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("stored");
    });
  }));
  const std::string negative = runtime.start("negative");
  const std::string nan = runtime.start("nan");
  runtime.run_until_idle();
  const RunInfo refused = runtime.get(negative);
  CHECK(refused.status == Status::failed);
  REQUIRE(refused.error.has_value());
  CHECK(test::has(refused.error->message, "StepOptions::timeout is negative"));
  CHECK(runtime.get(nan).status == Status::completed);
  CHECK(test::has(runtime.get(nan).output.get<std::string>(), "cannot be stored"));
}

TEST_CASE("what an abandoned body does after its timeout is dropped: nested steps at any depth "
          "neither run nor are journaled (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(serving_options(db));
  std::atomic<int> attempts{0};
  std::atomic<bool> deep_ran{false}, late_ran{false}, first_returned{false};
  runtime.add(Workflow("deep", [&](Step& step, const json&) -> json {
    return step.run(
        "outer",
        [&]() -> std::string {
          if (++attempts > 1) return "second";
          try {
            // An untimed nested step inside the timed one: its own step comes after the outer
            // attempt was abandoned.
            step.run("middle", [&] {
              std::this_thread::sleep_for(400ms);
              return step.run("deep", [&] {
                deep_ran = true;
                return 1;
              });
            });
            step.run("late", [&] {
              late_ran = true;
              return 2;
            });
          } catch (...) {
            first_returned = true;
            throw;
          }
          first_returned = true;
          return "first";
        },
        {.retry = test::quick_retries(2), .timeout = 100ms});
  }));
  const std::string run = runtime.start("deep");
  test::Serving serving(runtime);
  REQUIRE(test::eventually([&] { return runtime.get(run).status == Status::completed; }));
  REQUIRE(test::eventually([&] { return first_returned.load(); }));
  std::this_thread::sleep_for(100ms);
  CHECK(runtime.get(run).output == "second");
  CHECK_FALSE(deep_ran.load());
  CHECK_FALSE(late_ran.load());
  std::vector<std::string> keys;
  for (const StepInfo& s : runtime.steps(run)) keys.push_back(s.id);
  CHECK(keys == std::vector<std::string>{"outer"});
}

TEST_CASE("a workflow that swallows the unwinding after a hand-over does not fail its run, and "
          "a timeout of milliseconds::max() is no timeout (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(serving_options(db));
  std::atomic<int> attempts{0};
  runtime.add(Workflow("swallow", [&](Step& step, const json&) -> json {
    try {
      step.run(
          "t",
          [&](StepContext& ctx) {
            if (++attempts == 1) {
              while (!ctx.stop_token().stop_requested()) std::this_thread::sleep_for(5ms);
            }
            return 0;
          },
          {.retry = test::quick_retries(2), .timeout = 100ms});
    } catch (...) {
      // Swallows durable's unwinding in the invocation that handed the run over (later ones
      // would fail the run for it, as always).
      if (attempts > 1) throw;
    }
    return step.run("endless", [] { return std::string("done"); },
                    {.timeout = std::chrono::milliseconds::max(),
                     .heartbeat_timeout = std::chrono::milliseconds::max()});
  }));
  const std::string run = runtime.start("swallow");
  test::Serving serving(runtime);
  REQUIRE(test::eventually([&] {
    const Status s = runtime.get(run).status;
    return s == Status::completed || s == Status::failed;
  }));
  const RunInfo done = runtime.get(run);
  CHECK(done.status == Status::completed);
  CHECK(done.output == "done");
  CHECK(attempts == 2);
}
