// SPDX-License-Identifier: Apache-2.0
// Tests of the sign-up workflow, written with durable's test kit: a virtual clock, mocked and
// failing steps, a crash at every step boundary, and a golden journal replayed against today's
// code.

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "signup.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <durable/testing.hpp>

using durable::json;
using durable::Status;
using durable::testing::TestRuntime;
using namespace std::chrono_literals;

namespace {

const signup::Request kAda{"ada@example.com", "pro"};

// The workflow as production adds it: a full day before the welcome email.
durable::Workflow signup_a_day() { return signup::workflow("1 day"); }

}  // namespace

TEST_CASE("a sign-up runs its four steps once each and returns the account") {
  TestRuntime kit;
  kit.add(signup_a_day());
  const auto run = kit.run("signup", kAda);
  REQUIRE(run.info.status == Status::completed);
  CHECK(run.info.output == json{{"account_id", "acct_ada"}, {"billing_id", "cus_ada"}});
  CHECK(run.executed == std::vector<std::string>{"signup-user", "add-to-billing",
                                                 "sync-user-billing", "send-email"});
  // One invocation per step, one for the sleep to begin, one to return.
  CHECK(run.invocations == 6);
}

TEST_CASE("the welcome email waits a full day, which the virtual clock skips") {
  TestRuntime kit;
  kit.add(signup_a_day());
  const auto started = kit.now();
  const auto run = kit.run("signup", kAda);
  REQUIRE(run.info.status == Status::completed);
  CHECK(kit.now() - started >= 24h - 1ms);  // the journal keeps milliseconds
  for (const durable::StepInfo& step : kit.runtime().steps(run.info.id)) {
    if (step.id != "24h-delay-for-email") continue;
    REQUIRE(step.wake_at);
    CHECK(*step.wake_at - run.info.created_at >= 24h);
    CHECK(*step.wake_at - run.info.created_at < 25h);
  }
}

TEST_CASE("a mocked billing service is not called and its id flows into the account") {
  TestRuntime kit;
  kit.add(signup_a_day());
  kit.mock("add-to-billing", "cus_test_42");
  const auto run = kit.run("signup", kAda);
  CHECK(run.info.output.at("billing_id") == "cus_test_42");
  CHECK(std::find(run.executed.begin(), run.executed.end(), "add-to-billing") ==
        run.executed.end());
}

TEST_CASE("a billing outage is retried, and one that lasts sends no welcome email") {
  SUBCASE("two failed attempts, then billing answers") {
    TestRuntime kit;
    kit.add(signup_a_day());
    kit.fail("add-to-billing", "billing is down", 2);
    const auto run = kit.run("signup", kAda);
    CHECK(run.info.status == Status::completed);
    CHECK(std::count(run.executed.begin(), run.executed.end(), "add-to-billing") == 3);
  }
  SUBCASE("billing never answers") {
    TestRuntime kit;
    kit.add(signup_a_day());
    kit.fail("add-to-billing", "billing is down");
    const auto run = kit.run("signup", kAda);
    REQUIRE(run.info.status == Status::failed);
    REQUIRE(run.info.error);
    CHECK(run.info.error->step_id == "add-to-billing");
    CHECK(run.info.error->message == "billing is down");
    CHECK(std::find(run.executed.begin(), run.executed.end(), "send-email") == run.executed.end());
  }
}

TEST_CASE("signing up twice with the same idempotency key makes one account") {
  TestRuntime kit;
  kit.add(signup_a_day());
  const auto first = kit.run("signup", kAda, {.idempotency_key = kAda.email});
  const auto second = kit.run("signup", kAda, {.idempotency_key = kAda.email});
  CHECK(second.info.id == first.info.id);
  CHECK(second.executed == first.executed);
  CHECK(kit.runtime().list({.workflow = "signup"}).size() == 1);
}

TEST_CASE("a crash at any step boundary ends in the same account") {
  const auto sweep = durable::testing::crash_sweep(signup_a_day(), kAda);
  INFO(sweep.report());
  CHECK(sweep.ok());
  CHECK(sweep.cases.size() == 8);  // four bodies, before and after each commit
}

// The golden journal: a sign-up recorded by this test (DURABLE_RECORD_GOLDEN=1 records it
// again) and kept in the repository. Today's code must still make the calls it recorded, so a
// change that would break runs in flight (a renamed, removed or reordered-into step) fails here
// instead of in production.
TEST_CASE("today's code replays the recorded sign-up journal") {
  const std::string golden = SIGNUP_GOLDEN;
  if (const char* record = std::getenv("DURABLE_RECORD_GOLDEN"); record && *record == '1') {
    TestRuntime kit;
    kit.add(signup_a_day());
    REQUIRE(kit.run("signup", kAda).info.status == Status::completed);
    kit.save(golden);
  }
  CHECK(durable::testing::replay_all(signup_a_day(), golden) == 1);
}
