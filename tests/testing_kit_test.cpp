// SPDX-License-Identifier: Apache-2.0
// durable::testing::TestRuntime: virtual time, mocks, injected failures, the record of bodies.

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <durable/testing.hpp>
#include <map>
#include <mutex>

using namespace durable;
using namespace std::chrono_literals;

namespace {

// A day-long sleep, a month-long sleep_until and a step that fails five times with an hour of
// backoff before it succeeds.
Workflow slow_month(int* calls) {
  RetryPolicy hourly;
  hourly.max_attempts = 6;
  hourly.initial_backoff = 1h;
  hourly.multiplier = 1;
  hourly.jitter = 0;
  return Workflow("slow_month", [calls, hourly](Step& step, const json&) -> json {
    step.run("a", [] { return 1; });
    step.sleep("day", 24h);
    step.sleep_until("month", Clock::time_point(std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::hours(24 * 365 * 60))));  // 2029-12
    return step.run("flaky",
                    [calls] {
                      if (++*calls <= 5) throw std::runtime_error("not yet");
                      return "done";
                    },
                    {.retry = hourly});
  });
}

}  // namespace

TEST_CASE(
    "TestRuntime: a day's sleep, a month's sleep_until and five hourly retries pass at once") {
  testing::TestRuntime kit;
  int calls = 0;
  kit.add(slow_month(&calls));
  const Clock::time_point started_at = kit.now();
  const auto started = std::chrono::steady_clock::now();
  const testing::RunResult result = kit.run("slow_month");
  const auto took = std::chrono::steady_clock::now() - started;
  MESSAGE("wall time: " << std::chrono::duration<double, std::milli>(took).count() << " ms");
  // What virtual time guarantees: the kit's clock moved a day, a month and five hours, while the
  // real one moved less than the shortest of those waits would take, so none was slept for
  // real. How fast the kit is belongs to the benchmark, not to a bound here.
  CHECK(took < 1h);
  CHECK(kit.now() - started_at >= 24h);
  CHECK(result.info.status == Status::completed);
  CHECK(result.info.output == "done");
  CHECK(result.executed ==
        std::vector<std::string>{"a", "flaky", "flaky", "flaky", "flaky", "flaky", "flaky"});
  CHECK(calls == 6);
  CHECK(kit.now() >= Clock::time_point(std::chrono::hours(24 * 365 * 60)) + 5h);
}

TEST_CASE("TestRuntime: a mocked step returns its output and its body does not run") {
  testing::TestRuntime kit;
  int charged = 0;
  kit.add(Workflow("checkout", [&charged](Step& step, const json&) -> json {
    const json receipt = step.run("charge", [&] {
      ++charged;
      return json{{"id", "real"}};
    });
    return step.run("email", [receipt] { return receipt.at("id"); });
  }));
  kit.mock("charge", {{"id", "mocked"}});
  const testing::RunResult result = kit.run("checkout");
  CHECK(charged == 0);
  CHECK(result.info.output == "mocked");
  CHECK(result.executed == std::vector<std::string>{"email"});
  CHECK(result.invocations == 3);
}

TEST_CASE("TestRuntime: fail() throws from a body for the given attempts, or always") {
  testing::TestRuntime kit;
  RetryPolicy three;
  three.max_attempts = 3;
  kit.add(Workflow("w",
                   [](Step& step, const json&) -> json {
                     try {
                       return step.run("call", [] { return "ok"; });
                     } catch (const StepFailed& failed) {
                       return "gave up after " + std::to_string(failed.info.attempts) + ": " +
                              failed.info.message;
                     }
                   },
                   {.retry = three}));
  kit.fail("call", "503 from the payment provider", 2);
  CHECK(kit.run("w").info.output == "ok");
  kit.fail("call", "503 from the payment provider");
  const testing::RunResult always = kit.run("w");
  CHECK(always.info.output == "gave up after 3: 503 from the payment provider");
  CHECK(always.executed.size() == 3);
  CHECK_THROWS_WITH_AS(kit.fail("call", "x", 0),
                       "[durable.invalid_argument] TestRuntime::fail('call'): times must be -1 "
                       "(always) or 1 or more, not 0",
                       Error);
}

TEST_CASE("TestRuntime: a run waiting for an event is blocked until send_event or a timeout") {
  testing::TestRuntime kit;
  kit.add(Workflow("approval", [](Step& step, const json&) -> json {
    const auto ok = step.wait_for_event("approved", "order.approved", {.timeout = 48h});
    return ok ? ok->at("by") : json("timed out");
  }));
  const testing::RunResult waiting = kit.run("approval");
  CHECK(waiting.info.status == Status::waiting);
  kit.send_event("order.approved", {{"by", "ada"}});
  CHECK(kit.result(waiting.info.id).info.output == "ada");

  const testing::RunResult second = kit.run("approval");
  kit.advance(47h);
  CHECK(kit.result(second.info.id).info.status == Status::waiting);
  kit.advance(1h);
  CHECK(kit.result(second.info.id).info.output == "timed out");
}

TEST_CASE("TestRuntime: delayed starts and child workflows are driven too") {
  testing::TestRuntime kit;
  kit.add(Workflow("child", [](Step& step, const json& input) -> json {
    step.sleep("cool-down", 2h);
    return step.run("double", [input] { return input.at("n").get<int>() * 2; });
  }));
  kit.add(Workflow("parent", [](Step& step, const json&) -> json {
    return step.invoke("call", "child", {{"n", 21}});
  }));
  const testing::RunResult parent = kit.run("parent", {}, {.at = kit.now() + 24h});
  CHECK(parent.info.output == 42);
  CHECK(kit.runtime().list({.workflow = "child"}).at(0).status == Status::completed);
}

TEST_CASE("TestRuntime: on_recovery sleeps pass at once too") {
  testing::TestRuntime kit({.replay = Replay::on_recovery});
  int calls = 0;
  kit.add(slow_month(&calls));
  const Clock::time_point started_at = kit.now();
  const auto started = std::chrono::steady_clock::now();
  CHECK(kit.run("slow_month").info.output == "done");
  // The virtual clock moved past the sleeps and backoffs; the real one did not wait for them.
  CHECK(kit.now() >= Clock::time_point(std::chrono::hours(24 * 365 * 60)) + 5h);
  CHECK(kit.now() - started_at >= 24h);
  CHECK(std::chrono::steady_clock::now() - started < 1h);
}

TEST_CASE("crash_sweep: a workflow safe to re-run gives the crash-free output at every boundary") {
  const Workflow order("order", [](Step& step, const json& input) -> json {
    const int price = step.run("price", [&] { return input.at("qty").get<int>() * 5; });
    step.sleep("settle", 1h);
    auto tax = step.start("tax", [price] { return price / 5; });
    auto fee = step.start("fee", [] { return 2; });
    const auto [t, f] = all(tax, fee);
    return step.run("total",
                    [=, sum = t + f] { return price + sum; });  // clang 14: no binding captures
  });
  const testing::CrashSweep sweep = testing::crash_sweep(order, {{"qty", 4}});
  INFO(sweep.report());
  CHECK(sweep.expected.info.output == 26);
  REQUIRE(sweep.cases.size() == 8);  // 4 bodies, a crash before and after each commit
  CHECK(sweep.ok());
  for (const testing::CrashCase& c : sweep.cases) {
    const bool ran_again =
        std::find(c.ran_again.begin(), c.ran_again.end(), c.step) != c.ran_again.end();
    // Before its commit the crashed body runs again; after it, not. Only a parallel sibling
    // still in flight (each is journaled as it ends) may run again beside it.
    CHECK(ran_again == c.before_commit);
    for (const std::string& key : c.ran_again) {
      if (key == c.step) continue;
      CAPTURE(key);
      CHECK(((key == "tax" || key == "fee") && (c.step == "tax" || c.step == "fee")));
    }
  }
}

TEST_CASE("crash_sweep: a step whose result changes when it runs again is reported") {
  // "allocate" takes the next number of a counter outside the journal: run again, it takes
  // another one. (Counted per run, so that every crash-free run gets 1.)
  auto counters = std::make_shared<std::map<std::string, int>>();
  auto mutex = std::make_shared<std::mutex>();
  const Workflow ticket("ticket", [counters, mutex](Step& step, const json&) -> json {
    const std::string run(step.run_id());
    const int number = step.run("allocate", [&] {
      std::lock_guard lock(*mutex);
      return ++(*counters)[run];
    });
    step.run("print", [] { return true; });
    return number;
  });
  const testing::CrashSweep sweep = testing::crash_sweep(ticket);
  INFO(sweep.report());
  CHECK_FALSE(sweep.ok());
  const testing::CrashCase& before = sweep.cases.at(0);  // before the commit of "allocate"
  CHECK(before.step == "allocate");
  CHECK(before.before_commit);
  CHECK_FALSE(before.matches);
  CHECK(before.ran_again == std::vector<std::string>{"allocate"});
  CHECK(sweep.cases.at(1).matches);  // after its commit, the journaled number is used
  CHECK(sweep.report().find("DIFF  crash before the commit of 'allocate'") != std::string::npos);
}

TEST_CASE("crash_sweep: a failed attempt is a boundary of its own, and the crash lands there") {
  // "flaky" fails its first attempt in each run and succeeds on the second.
  auto tries = std::make_shared<std::map<std::string, int>>();
  auto mutex = std::make_shared<std::mutex>();
  const Workflow order("order", [tries, mutex](Step& step, const json&) -> json {
    const std::string run(step.run_id());
    step.run("a", [] { return 1; });
    step.run("flaky",
             [&] {
               std::lock_guard lock(*mutex);
               if (++(*tries)[run] == 1) throw std::runtime_error("first attempt fails");
               return 2;
             },
             {.retry = RetryPolicy{.max_attempts = 3, .initial_backoff = 1ms}});
    return step.run("c", [] { return 3; });
  });
  const testing::CrashSweep sweep = testing::crash_sweep(order);
  INFO(sweep.report());
  REQUIRE(sweep.expected.executed == std::vector<std::string>{"a", "flaky", "flaky", "c"});
  REQUIRE(sweep.cases.size() == 8);
  CHECK(sweep.ok());
  // Before the commit of the failed attempt: the failure is lost, the retry runs as it would
  // have, so no body runs more often than without the crash.
  CHECK(sweep.cases.at(2).step == "flaky");
  CHECK(sweep.cases.at(2).before_commit);
  CHECK(sweep.cases.at(2).ran_again.empty());
  // Before the commit of the successful attempt: that attempt is lost and runs again.
  CHECK(sweep.cases.at(4).step == "flaky");
  CHECK(sweep.cases.at(4).before_commit);
  CHECK(sweep.cases.at(4).ran_again == std::vector<std::string>{"flaky"});
  // Before the commit of "c": only "c" runs again.
  CHECK(sweep.cases.at(6).ran_again == std::vector<std::string>{"c"});
}

TEST_CASE("crash_sweep: a crash named after an outer step strikes when that step finishes") {
  const Workflow report("report", [](Step& step, const json&) -> json {
    const int total =
        step.run("outer", [&step] { return step.run("inner", [] { return 20; }) + 1; });
    return step.run("after", [total] { return total + 1; });
  });
  const testing::CrashSweep sweep = testing::crash_sweep(report);
  INFO(sweep.report());
  REQUIRE(sweep.expected.executed == std::vector<std::string>{"outer", "outer/inner", "after"});
  CHECK(sweep.ok());
  // Before the commit of "outer": its nested step is journaled already, only "outer" runs again.
  CHECK(sweep.cases.at(0).step == "outer");
  CHECK(sweep.cases.at(0).ran_again == std::vector<std::string>{"outer"});
  // Before the commit of "outer/inner": both run again.
  CHECK(sweep.cases.at(2).step == "outer/inner");
  CHECK(sweep.cases.at(2).ran_again == std::vector<std::string>{"outer", "outer/inner"});
}

namespace {

// Charges a card, then mails the receipt; a refund only for an order marked "refund".
Workflow checkout(int* charged) {
  return Workflow("checkout", [charged](Step& step, const json& input) -> json {
    const json receipt = step.run("charge-card", [charged] {
      ++*charged;
      return json{{"id", "real"}};
    });
    if (input.value("refund", false)) step.run("refund", [] { return true; });
    step.run("email", [] { return true; });
    return receipt.at("id");
  });
}

}  // namespace

TEST_CASE("TestRuntime: a mock that no step reached is an error naming it and the steps reached") {
  testing::TestRuntime kit;
  int charged = 0;
  kit.add(checkout(&charged));
  kit.mock("charge", {{"id", "mocked"}});  // the step is "charge-card"
  CHECK_THROWS_WITH_AS(
      kit.run("checkout"),
      "[durable.misuse] TestRuntime: mock('charge') (did you mean 'charge-card'?) matched no "
      "step: the runs ended "
      "without reaching its journal key, and the real body of a step whose mock is misnamed "
      "runs. The steps the runs reached: charge-card, email. A mock names a journal key "
      "(\"charge\", \"charge#2\", \"outer/inner\", \"fetch[0]\"); one for a step a test may not "
      "reach (a branch it does not take) takes MockOptions{.optional = true}",
      Error);
  CHECK(charged == 1);
  // Reported once: the next run does not throw for it again.
  CHECK(kit.run("checkout").info.status == Status::completed);
}

TEST_CASE("TestRuntime: an optional mock, or one whose step a run has reached, may go unused") {
  int charged = 0;
  testing::TestRuntime kit;
  kit.add(checkout(&charged));
  kit.mock("charge-card", {{"id", "mocked"}});
  kit.mock("refund", false, {.optional = true});  // no run of this test takes the refund branch
  CHECK(kit.run("checkout").info.output == "mocked");
  CHECK(charged == 0);

  testing::TestRuntime other;
  other.add(checkout(&charged));
  CHECK(other.run("checkout", {{"refund", true}}).executed ==
        std::vector<std::string>{"charge-card", "refund", "email"});
  other.mock("refund", false);  // a key a run has reached names a real step
  CHECK(other.run("checkout").info.status == Status::completed);
  CHECK(charged == 2);
}

TEST_CASE("TestRuntime: a mock is checked only once no run is in flight") {
  testing::TestRuntime kit;
  kit.add(Workflow("approval", [](Step& step, const json&) -> json {
    step.wait_for_event("approved", "order.approved");
    return step.run("ship", [] { return "real"; });
  }));
  kit.mock("ship", "mocked");
  kit.mock("shipp", "typo");
  kit.advance(std::chrono::hours(1));                      // no run yet: nothing to check
  const testing::RunResult waiting = kit.run("approval");  // not yet at "ship": no error
  CHECK(waiting.info.status == Status::waiting);
  CHECK_THROWS_WITH_AS(kit.send_event("order.approved"),
                       doctest::Contains("mock('shipp') (did you mean 'ship'?) matched no step"),
                       Error);
  CHECK(kit.result(waiting.info.id).info.output == "mocked");
}

TEST_CASE("TestRuntime: a mock whose value does not convert to the step's type says so") {
  testing::TestRuntime kit;
  kit.add(Workflow("count", [](Step& step, const json&) -> json {
    return step.run("count", [] { return 3; }) + 1;
  }));
  kit.mock("count", "three");
  const testing::RunResult result = kit.run("count");
  REQUIRE(result.info.status == Status::failed);
  REQUIRE(result.info.error.has_value());
  const std::string& message = result.info.error->message;
  CAPTURE(message);
  CHECK(message.starts_with("[durable.type_mismatch] step 'count' of run " + result.info.id +
                            ": the value of mock('count'), \"three\" (JSON string), does not "
                            "convert to the step's result type int: "));
  CHECK(message.ends_with(". Give mock('count') a value that converts to int"));
  CHECK(message.find("journaled") == std::string::npos);  // not the advice for changed code
}

TEST_CASE("TestRuntime: the log lines of failed runs stay off stderr and in logs()") {
  std::vector<std::string> sunk;
  testing::TestRuntime kit(
      {.log_sink = [&sunk](std::string_view line) { sunk.emplace_back(line); }});
  // The default, whatever the environment of this test says (DURABLE_TEST_LOG=1 shows the lines).
  const char* const shown = std::getenv("DURABLE_TEST_LOG");
  const std::string show = shown != nullptr ? shown : "";
  unsetenv("DURABLE_TEST_LOG");
  testing::TestRuntime quiet;
  if (shown != nullptr) setenv("DURABLE_TEST_LOG", show.c_str(), 1);
  for (testing::TestRuntime* k : {&kit, &quiet}) {
    k->add(Workflow("broken", [](Step&, const json&) -> json { throw Error("on purpose"); }));
  }
  CHECK(kit.run("broken").info.status == Status::failed);
  REQUIRE(kit.logs().size() == 1);
  CHECK(json::parse(kit.logs().front()).at("event") == "run.failed");
  CHECK(sunk == kit.logs());  // a sink of the user's gets them too

  // With no sink the kit writes nothing to stderr: capture file descriptor 2 around a run.
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* capture = std::tmpfile();
  REQUIRE(capture != nullptr);
  dup2(fileno(capture), 2);
  const Status status = quiet.run("broken").info.status;
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fseek(capture, 0, SEEK_END);
  const long written = std::ftell(capture);
  std::fclose(capture);
  CHECK(status == Status::failed);
  CHECK(written == 0);
  CHECK(quiet.logs().size() == 1);
}

TEST_CASE("crash_sweep: the report lists the bodies run again in natural order") {
  // "size" gives 1 in the crash-free run and 12 once run again, so the restarted run maps over
  // twelve items where the crash-free one had one: fetch[1] to fetch[11] ran more often.
  auto sizes = std::make_shared<std::map<std::string, int>>();
  auto mutex = std::make_shared<std::mutex>();
  const Workflow crawl("crawl", [sizes, mutex](Step& step, const json&) -> json {
    const std::string run(step.run_id());
    const int size = step.run("size", [&] {
      std::lock_guard lock(*mutex);
      return ++(*sizes)[run] == 1 ? 1 : 12;
    });
    std::vector<int> pages(static_cast<std::size_t>(size));
    const std::vector<int> got = step.map("fetch", pages, [](int) { return 1; });
    return got.size();
  });
  const testing::CrashSweep sweep = testing::crash_sweep(crawl);
  INFO(sweep.report());
  const testing::CrashCase& before = sweep.cases.at(0);  // before the commit of "size"
  REQUIRE(before.step == "size");
  REQUIRE(before.before_commit);
  CHECK(before.ran_again == std::vector<std::string>{"fetch[1]", "fetch[2]", "fetch[3]", "fetch[4]",
                                                     "fetch[5]", "fetch[6]", "fetch[7]", "fetch[8]",
                                                     "fetch[9]", "fetch[10]", "fetch[11]", "size"});
  CHECK(sweep.report().find("ran again: fetch[1] fetch[2] fetch[3] fetch[4] fetch[5] fetch[6] "
                            "fetch[7] fetch[8] fetch[9] fetch[10] fetch[11] size\n") !=
        std::string::npos);
}
