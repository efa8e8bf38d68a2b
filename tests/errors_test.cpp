// SPDX-License-Identifier: Apache-2.0
// Errors and retries (DESIGN §2): attempts, backoff, StepFailed, failed runs, retry().

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>

#include <random>
#include <stdexcept>

#include "durations.hpp"
#include "retry.hpp"
#include "serialization.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {
std::chrono::milliseconds until_wake(Runtime& runtime, const std::string& id,
                                     const test::ManualClock& clock) {
  const RunInfo run = runtime.get(id);
  REQUIRE(run.wake_at.has_value());
  return std::chrono::duration_cast<std::chrono::milliseconds>(*run.wake_at - clock.now());
}
}  // namespace

TEST_CASE("backoff grows by the multiplier, stops at the cap, and jitter stays in bounds") {
  std::mt19937_64 random(7);
  RetryPolicy policy = test::exact_policy(10, 1000ms);
  CHECK(detail::backoff(policy, 1, random) == 1000ms);
  CHECK(detail::backoff(policy, 2, random) == 2000ms);
  CHECK(detail::backoff(policy, 4, random) == 8000ms);
  policy.max_backoff = 5000ms;
  CHECK(detail::backoff(policy, 4, random) == 5000ms);
  policy.jitter = 0.2;
  bool below = false, above = false;
  for (int i = 0; i < 2000; ++i) {
    const auto d = detail::backoff(policy, 2, random);
    CHECK(d >= 1600ms);
    CHECK(d <= 2400ms);
    below = below || d < 1900ms;
    above = above || d > 2100ms;
  }
  CHECK(below);
  CHECK(above);
}

TEST_CASE("a failing step is retried after its backoff and then succeeds (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "retry.db"), clock);
  int attempts = 0;
  runtime->add(Workflow("flaky", [&](Step& step, const json&) -> json {
    return step.run("call",
                    [&] {
                      if (++attempts < 3) throw std::runtime_error("503 from billing");
                      return attempts;
                    },
                    {.retry = test::exact_policy(5, 1000ms)});
  }));
  const std::string id = runtime->start("flaky");
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::sleeping);
  CHECK(until_wake(*runtime, id, clock) == 1000ms);
  clock.advance(999ms);
  CHECK(runtime->run_until_idle() == 0);
  clock.advance(1ms);
  runtime->run_until_idle();
  CHECK(until_wake(*runtime, id, clock) == 2000ms);
  clock.advance(2000ms);
  runtime->run_until_idle();
  const RunInfo run = runtime->get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == 3);
  const auto steps = runtime->steps(id);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].attempts == 3);
  CHECK(steps[0].status == "completed");
}

TEST_CASE(
    "a run waiting out a backoff says which step, which attempt of how many, the error and when "
    "(on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "reason.db"), clock);
  runtime->add(Workflow("flaky", [&](Step& step, const json&) -> json {
    return step.run("call-psp", []() -> int { throw std::runtime_error("503 from psp"); },
                    {.retry = test::exact_policy(5, 1234ms)});
  }));
  const std::string id = runtime->start("flaky");
  runtime->run_until_idle();
  const RunInfo run = runtime->get(id);
  REQUIRE(run.status == Status::sleeping);
  const std::string reason = run.history.back().reason;
  const std::string wake = detail::utc_text(detail::to_ms(*runtime->steps(id).at(0).wake_at));
  CHECK(reason ==
        "step 'call-psp' of run " + id +
            " attempt 1 of 5 failed (std::runtime_error: 503 from psp); next attempt at " + wake);
  CHECK(wake.size() == std::string("2026-11-21T00:04:16.395Z").size());  // to the millisecond
}

TEST_CASE("a restart neither forgets attempts nor resets the backoff (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "restart.db");
  test::ManualClock clock;
  int attempts = 0;
  const auto flaky = [&] {
    return Workflow("flaky", [&](Step& step, const json&) -> json {
      step.run("call",
               [&] {
                 ++attempts;
                 throw std::runtime_error("down");
               },
               {.retry = test::exact_policy(3, 10'000ms)});
      return nullptr;
    });
  };
  std::string id;
  {
    auto runtime = test::runtime_on(db, clock);
    runtime->add(flaky());
    id = runtime->start("flaky");
    runtime->run_until_idle();
    clock.advance(10s);
    runtime->run_until_idle();  // attempt 2 fails; next in 20 s
    CHECK(attempts == 2);
  }
  auto runtime = test::runtime_on(db, clock);
  runtime->add(flaky());
  CHECK(runtime->run_until_idle() == 0);  // the backoff still holds after the restart
  CHECK(until_wake(*runtime, id, clock) == 20s);
  clock.advance(20s);
  runtime->run_until_idle();
  CHECK(attempts == 3);  // the third attempt was the last: max_attempts counts them all
  const RunInfo run = runtime->get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->step_id == "call");
  CHECK(run.error->attempts == 3);
  CHECK(run.error->type == "std::runtime_error");
  CHECK(run.error->message == "down");
}

TEST_CASE("NonRetryableError fails the step at once (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int attempts = 0;
  runtime.add(Workflow("strict", [&](Step& step, const json&) -> json {
    step.run("validate", [&] {
      ++attempts;
      throw NonRetryableError("bad card number");
    });
    return nullptr;
  }));
  const std::string id = runtime.start("strict");
  runtime.run_until_idle();
  CHECK(attempts == 1);
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::failed);
  CHECK(run.error->type == "durable::NonRetryableError");
  CHECK(run.error->attempts == 1);
}

TEST_CASE("RetryAfterError sets the delay before the next attempt (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  Runtime runtime({.database = test::database(dir, "db")});
  clock.attach(runtime);
  int attempts = 0;
  runtime.add(Workflow("limited", [&](Step& step, const json&) -> json {
    return step.run("api", [&] {
      if (++attempts == 1) throw RetryAfterError("429 Too Many Requests", 90s);
      return 1;
    });
  }));
  const std::string id = runtime.start("limited");
  runtime.run_until_idle();
  CHECK(until_wake(runtime, id, clock) == 90s);
  clock.advance(90s);
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::completed);
}

TEST_CASE(
    "StepFailed is thrown on every replay and can be caught for a best-effort step (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int caught = 0, analytics_bodies = 0;
  runtime.add(Workflow("signup", [&](Step& step, const json&) -> json {
    try {
      step.run("track-analytics",
               [&] {
                 ++analytics_bodies;
                 throw std::runtime_error("tracker down");
               },
               {.retry = test::exact_policy(1, 0ms)});
    } catch (const StepFailed& e) {
      ++caught;
      CHECK(e.info.step_id == "track-analytics");
      CHECK(e.info.message == "tracker down");
      CHECK(std::string(e.what()).find(
                "[durable.step_failed] step 'track-analytics' failed after 1 attempt") == 0);
    }
    step.run("welcome", [] {});
    return "done";
  }));
  const std::string id = runtime.start("signup");
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::completed);
  CHECK(analytics_bodies == 1);
  // In the invocation whose attempt failed (DESIGN: "on this and every later replay"), in the
  // replay that ran `welcome`, and in the final one.
  CHECK(caught == 3);
  CHECK(runtime.get(id).invocations == 3);
  const auto steps = runtime.steps(id);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].status == "failed");
}

TEST_CASE("an exception out of the workflow fails the run with ErrorInfo (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("broken", [](Step& step, const json&) -> json {
    step.run("ok", [] {});
    throw std::invalid_argument("no plan named 'gold'");
  }));
  const std::string id = runtime.start("broken");
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->type == "std::invalid_argument");
  CHECK(run.error->message == "no plan named 'gold'");
  CHECK(run.error->step_id.empty());
}

TEST_CASE(
    "retry() re-queues a failed run: completed steps stay done, failed ones run again (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int first = 0, second = 0;
  bool healthy = false;
  runtime.add(Workflow("pipeline", [&](Step& step, const json&) -> json {
    step.run("first", [&] { ++first; });
    return step.run("second",
                    [&] {
                      ++second;
                      if (!healthy) throw std::runtime_error("dependency down");
                      return 2;
                    },
                    {.retry = test::exact_policy(2, 0ms)});
  }));
  const std::string id = runtime.start("pipeline");
  runtime.run_until_idle();
  REQUIRE(runtime.get(id).status == Status::failed);
  CHECK(second == 2);
  CHECK_THROWS_AS(runtime.retry("no-such-run"), NotFound);
  healthy = true;
  runtime.retry(id);
  CHECK(runtime.get(id).status == Status::pending);
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == 2);
  CHECK(first == 1);
  CHECK(second == 3);
  CHECK_THROWS_WITH_AS(runtime.retry(id), doctest::Contains("only a failed run can be retried"),
                       Error);
}

TEST_CASE(
    "a step body that throws a non-standard exception is a failed attempt with its type (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("weird", [](Step& step, const json&) -> json {
    step.run("legacy", [] { throw 42; }, {.retry = test::exact_policy(2, 0ms)});
    return nullptr;
  }));
  const std::string id = runtime.start("weird");
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->type == "int");
  CHECK(run.error->attempts == 2);
  CHECK(run.error->message.find("non-standard exception of type int") != std::string::npos);
}

TEST_CASE(
    "workflow code whose catch (...) swallows the runtime's unwinding fails clearly (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int after = 0;
  runtime.add(Workflow("swallower", [&](Step& step, const json&) -> json {
    try {
      step.run("charge", [] { return 5; });
    } catch (...) {
      // swallowed: durable's unwinding must not stop here
    }
    step.run("ship", [&] { ++after; });
    return nullptr;
  }));
  const std::string id = runtime.start("swallower");
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->message.find("catch (...)") != std::string::npos);
  CHECK(after == 0);
  // The step that did complete is journaled all the same: nothing is lost.
  const auto steps = runtime.steps(id);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].output == 5);
}

TEST_CASE(
    "catch (const std::exception&) in workflow code never sees the runtime's unwinding (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int caught = 0;
  runtime.add(Workflow("careful", [&](Step& step, const json&) -> json {
    try {
      step.run("a", [] { return 1; });
      step.run("b", [] { return 2; });
    } catch (const std::exception&) {
      ++caught;
    }
    return nullptr;
  }));
  const std::string id = runtime.start("careful");
  runtime.run_until_idle();
  CHECK(caught == 0);
  CHECK(runtime.get(id).status == Status::completed);
}

TEST_CASE(
    "an oversized step output fails the step non-retryably, naming step and size (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"), .max_output_bytes = 1024});
  int bodies = 0;
  runtime.add(Workflow("big", [&](Step& step, const json&) -> json {
    step.run("blob", [&] {
      ++bodies;
      return std::string(5000, 'x');
    });
    return nullptr;
  }));
  const std::string id = runtime.start("big");
  runtime.run_until_idle();
  CHECK(bodies == 1);
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->message.find("[durable.too_large] step 'blob' of run " + id +
                                " returned 4.9 KiB; the limit is 1.0 KiB") == 0);
}

TEST_CASE("a retry policy that cannot work is refused with a clear error") {
  Runtime runtime({.database = ":memory:"});
  RetryPolicy none;
  none.max_attempts = 0;
  CHECK_THROWS_WITH_AS(
      runtime.add(Workflow("w", [](Step&, const json&) -> json { return 1; }, {.retry = none})),
      doctest::Contains("max_attempts < 1"), Error);
}

TEST_CASE(
    "an oversized workflow output fails the run, naming the run and the size (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"), .max_output_bytes = 100});
  runtime.add(Workflow("big", [](Step&, const json&) -> json { return std::string(300, 'y'); }));
  const std::string id = runtime.start("big");
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->message == "[durable.too_large] the workflow of run " + id +
                                  " returned 302 bytes; the limit is 100 bytes "
                                  "(RuntimeOptions::max_output_bytes)");
  CHECK(run.output.is_null());
}

TEST_CASE(
    "error messages and outputs that are not valid UTF-8 never break the runtime (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime(test::quiet(test::database(dir, "db")));
  runtime.add(Workflow("latin1-error", [](Step& step, const json&) -> json {
    step.run("open", [] { throw NonRetryableError("no file 'caf\xe9.txt'"); });
    return nullptr;
  }));
  runtime.add(
      Workflow("latin1-output", [](Step&, const json&) -> json { return std::string("caf\xe9"); }));
  const std::string error_run = runtime.start("latin1-error");
  const std::string output_run = runtime.start("latin1-output");
  CHECK_NOTHROW(runtime.run_until_idle());
  const RunInfo failed_step = runtime.get(error_run);
  CHECK(failed_step.status == Status::failed);
  REQUIRE(failed_step.error.has_value());
  CHECK(failed_step.error->message.find("no file 'caf") == 0);
  const RunInfo bad_output = runtime.get(output_run);
  CHECK(bad_output.status == Status::failed);
  REQUIRE(bad_output.error.has_value());
  CHECK(bad_output.error->message.find("returned a value that cannot be stored") !=
        std::string::npos);
  CHECK_THROWS_WITH_AS(runtime.start("latin1-output", json("caf\xe9")),
                       doctest::Contains("cannot be stored"), Error);
}

TEST_CASE(
    "names and keys that are not valid UTF-8 are refused clearly and nothing is written (on each "
    "store)") {
  test::TempDir dir;
  const std::string runtime_database = test::database(dir, "db");
  Runtime runtime(test::quiet(runtime_database));
  runtime.add(Workflow("noop", [](Step&, const json&) -> json { return 1; }));
  const auto refused = [](const auto& call) {
    CHECK_THROWS_WITH_AS(call(), doctest::Contains("is not valid UTF-8"), Error);
  };
  Client client(runtime_database);  // takes any workflow name, where a Runtime knows its own
  refused([&] { client.start("caf\xe9"); });
  refused([&] { runtime.start("noop", {}, {.correlation_id = "order-\xff"}); });
  refused([&] { runtime.start("noop", {}, {.idempotency_key = "k\xc3"}); });
  refused([&] { runtime.send_event("order.\xe9", {}); });
  refused([&] { runtime.add(Workflow("caf\xe9", [](Step&, const json&) -> json { return 1; })); });
  // A surrogate and an overlong '/', each refused as PostgreSQL would refuse them.
  refused([&] { runtime.send_event("\xed\xa0\x80", {}); });
  refused([&] { runtime.send_event("\xc0\xaf", {}); });
  refused([&] { runtime.send_event(std::string("order\0placed", 12), {}); });  // NUL
  refused([&] {
    runtime.schedule("noop", {}, {.id = "nightly-\xff", .every = std::chrono::hours(1)});
  });
  // Looking up such a key finds nothing, on either store, rather than failing.
  CHECK_THROWS_AS(runtime.get("\xff\xfe"), NotFound);
  CHECK_THROWS_AS(runtime.cancel(std::string("a\0b", 3)), NotFound);
  CHECK_THROWS_AS(client.retry("caf\xe9"), NotFound);
  CHECK(runtime.list({.workflow = "caf\xe9"}).empty());
  CHECK_THROWS_AS(runtime.unschedule("nightly-\xff"), NotFound);
  CHECK(runtime.list().empty());
  CHECK(client.list().empty());
  // Valid UTF-8 of two, three and four bytes is taken as it is.
  const std::string id =
      runtime.start("noop", {}, {.correlation_id = "caf\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x98\x80"});
  CHECK(runtime.get(id).correlation_id == "caf\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x98\x80");
  // Inside a workflow: a step id or an event name not in UTF-8 fails that run, with the reason.
  runtime.add(Workflow("bad-step", [](Step& step, const json&) -> json {
    return step.run("caf\xe9", [] { return 1; });
  }));
  runtime.add(Workflow("bad-wait", [](Step& step, const json&) -> json {
    return step.wait_for_event("w", "order.\xe9").has_value();
  }));
  const std::string bad_step = runtime.start("bad-step");
  const std::string bad_wait = runtime.start("bad-wait");
  CHECK_NOTHROW(runtime.run_until_idle());
  for (const std::string& run : {bad_step, bad_wait}) {
    const RunInfo info = runtime.get(run);
    CHECK(info.status == Status::failed);
    REQUIRE(info.error.has_value());
    CHECK(test::has(info.error->message, "is not valid UTF-8"));
  }
  CHECK(runtime.get(id).status == Status::completed);
  // A cancel's reason is free text: kept, with such bytes replaced.
  runtime.add(Workflow("waits", [](Step& step, const json&) -> json {
    return step.wait_for_event("w", "never").has_value();
  }));
  const std::string waiting = runtime.start("waits");
  runtime.run_until_idle();
  runtime.cancel(waiting, std::string("caf\xe9 \0closed", 12));
  const RunInfo cancelled = runtime.get(waiting);
  CHECK(cancelled.status == Status::cancelled);
  REQUIRE_FALSE(cancelled.history.empty());
  CHECK(cancelled.history.back().reason ==
        "cancelled: caf\xef\xbf\xbd \xef\xbf\xbd"
        "closed");
}

// Found by fuzz/fuzz_journal.cpp: json::value() threw type_error on a field of another type, so
// reading such a run threw nlohmann's exception out of get() (and out of a claim).
TEST_CASE("a stored error whose fields another tool wrote with other types reads as it is") {
  const ErrorInfo odd = detail::error_from_json(
      json::parse(R"({"type": "x", "message": 1, "step_id": ["a"], "attempts": "3"})"));
  CHECK(odd.type == "x");
  CHECK(odd.message == "1");
  CHECK(odd.step_id == R"(["a"])");
  CHECK(odd.attempts == 0);
  CHECK(detail::error_from_json({{"attempts", 1e300}}).attempts == 0);  // no cast past int
  CHECK(detail::error_from_json({{"attempts", -2}}).attempts == 0);
  CHECK(detail::error_from_json({{"message", nullptr}, {"attempts", 4}}).attempts == 4);

  test::TempDir dir;
  const std::string db = dir.file("db");
  Runtime runtime(test::quiet(db));
  runtime.add(
      Workflow("fails", [](Step&, const json&) -> json { throw std::runtime_error("no"); }));
  const std::string id = runtime.start("fails");
  runtime.run_until_idle();
  REQUIRE(runtime.get(id).status == Status::failed);
  {
    SQLite::Database raw(db, SQLite::OPEN_READWRITE);
    raw.setBusyTimeout(10000);  // the runtime's lease heartbeat may be writing
    SQLite::Statement update(raw, "UPDATE runs SET error = ? WHERE id = ?");
    update.bind(1, R"({"type": 7, "message": {"text": "no"}, "attempts": 2.5})");
    update.bind(2, id);
    REQUIRE(update.exec() == 1);
  }
  const RunInfo run = runtime.get(id);
  REQUIRE(run.error.has_value());
  CHECK(run.error->type == "7");
  CHECK(run.error->message == R"({"text":"no"})");
  CHECK(run.error->attempts == 0);
}
