// SPDX-License-Identifier: Apache-2.0
// Unit tests of the subscriptions sample's workflows with the test kit: a month of billing passes
// on the kit's virtual clock in milliseconds, the billing service is failed or mocked at will,
// and a crash sweep shows which steps are safe to repeat.

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "subscriptions.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <durable/testing.hpp>
#include <string>
#include <vector>

namespace {
using namespace subscriptions;
using durable::Status;
using durable::testing::RunResult;
using durable::testing::TestRuntime;
using std::chrono::hours;
using Keys = std::vector<std::string>;

constexpr milliseconds kDay = hours(24);
constexpr double kCycleEnd = 30;  // the billing cycle ends 30 days after the request

durable::RuntimeOptions quiet() {
  durable::RuntimeOptions options;
  options.log_level = durable::LogLevel::off;  // the failures below are on purpose
  return options;
}

// A test kit with the sample's three workflows, on a calendar that reads the kit's virtual clock
// (day 0 is when the kit was made) and prints nothing.
struct Month {
  Month() {
    kit.add(downgrade(billing, calendar));
    kit.add(reminder(billing));
    kit.add(cancellation(billing, calendar));
  }
  TestRuntime kit{quiet()};
  const Calendar calendar{kDay, [this] { return kit.now(); }, nullptr};
  Billing billing{calendar};

  // The end of the cycle, to the millisecond as the journal keeps time.
  Clock::time_point cycle_end() const { return from_ms(to_ms(calendar.at(kCycleEnd))); }
  PlanChange ada_downgrades() const { return {"ada", "pro", "basic", to_ms(cycle_end())}; }
};

// When the run first entered `status`, as its state history says.
Clock::time_point first_entered(const durable::RunInfo& run, Status status) {
  const auto it = std::find_if(run.history.begin(), run.history.end(),
                               [status](const auto& t) { return t.status == status; });
  REQUIRE_MESSAGE(it != run.history.end(), "the run never was " << durable::to_string(status));
  return it->at;
}

int count(const Keys& keys, const std::string& key) {
  return static_cast<int>(std::count(keys.begin(), keys.end(), key));
}

}  // namespace

TEST_CASE(
    "a downgrade is recorded at once and applied when the billing cycle ends, a month later") {
  Month month;
  const RunResult result = month.kit.run("downgrade-at-cycle-end", month.ada_downgrades());

  CHECK(result.info.status == Status::completed);
  CHECK(result.info.output == json{{"customer", "ada"}, {"plan", "basic"}});
  CHECK(result.executed == Keys{"record-request", "switch-plan", "send-confirmation"});
  CHECK(result.invocations == 5);  // record, sleep, wake and switch, confirm, return
  CHECK(month.billing.plan("ada") == "basic");
  CHECK(month.billing.switched_on_time());  // the switch saw the clock at the cycle's end
  CHECK(month.kit.now() >= month.cycle_end());
  // The month was one journaled sleep, from the day of the request to the end of the cycle.
  CHECK(first_entered(result.info, Status::sleeping) < month.calendar.at(1));
  const auto journal = month.kit.runtime().steps(result.info.id);
  REQUIRE(journal.size() == 4);
  CHECK(journal[1].id == "until-cycle-end");
  CHECK(journal[1].kind == "sleep");
}

TEST_CASE(
    "a plan switch that billing rejects twice is retried, and ada is switched and told once") {
  Month month;
  month.kit.fail("switch-plan", "billing API returned 503", 2);
  const RunResult result = month.kit.run("downgrade-at-cycle-end", month.ada_downgrades());

  CHECK(result.info.status == Status::completed);
  CHECK(result.executed ==
        Keys{"record-request", "switch-plan", "switch-plan", "switch-plan", "send-confirmation"});
  CHECK(month.billing.plan("ada") == "basic");
  const auto journal = month.kit.runtime().steps(result.info.id);
  REQUIRE(journal.size() == 4);
  CHECK(journal[2].id == "switch-plan");
  CHECK(journal[2].attempts == 3);
  // The default policy's backoffs, 1 s and then 2 s (less 20% jitter at most), passed virtually.
  CHECK(month.kit.now() >= month.cycle_end() + std::chrono::milliseconds(2400));
}

TEST_CASE("a plan switch that billing keeps rejecting fails the downgrade: ada keeps her plan") {
  Month month;
  month.kit.fail("switch-plan", "billing API returned 503");
  const RunResult result = month.kit.run("downgrade-at-cycle-end", month.ada_downgrades());

  CHECK(result.info.status == Status::failed);
  REQUIRE(result.info.error.has_value());
  CHECK(result.info.error->step_id == "switch-plan");
  CHECK(result.info.error->message.find("billing API returned 503") != std::string::npos);
  // Four attempts (the default policy), then no confirmation of a switch that never happened.
  CHECK(result.executed ==
        Keys{"record-request", "switch-plan", "switch-plan", "switch-plan", "switch-plan"});
  CHECK(month.billing.plan("ada").empty());
}

TEST_CASE("a failed downgrade retried after the billing outage applies without a second request") {
  Month month;
  month.kit.fail("switch-plan", "billing API returned 503", 4);  // every attempt of the policy
  const std::string id = month.kit.run("downgrade-at-cycle-end", month.ada_downgrades()).info.id;
  REQUIRE(month.kit.result(id).info.status == Status::failed);

  month.kit.runtime().retry(id);
  month.kit.advance(milliseconds(0));  // drives the re-queued run

  const RunResult retried = month.kit.result(id);
  CHECK(retried.info.status == Status::completed);
  CHECK(count(retried.executed, "record-request") == 1);
  CHECK(count(retried.executed, "switch-plan") == 5);
  CHECK(count(retried.executed, "send-confirmation") == 1);
  CHECK(month.billing.plan("ada") == "basic");
}

TEST_CASE("grace is reminded once a day for five days from noon of day 0, and never a sixth time") {
  Month month;
  durable::Schedule daily;
  daily.id = "late-payment:grace:INV-1042";
  daily.every = kDay;
  daily.count = 5;
  daily.first = month.calendar.at(0.5);
  month.kit.runtime().schedule("late-payment-reminder", Reminder{"grace", "INV-1042"}, daily);

  month.kit.advance(hours(11));
  CHECK(month.billing.reminder_days().empty());  // not due before noon
  month.kit.advance(hours(1));
  CHECK(month.billing.reminder_days().size() == 1);
  for (int day = 1; day < 5; ++day) month.kit.advance(hours(24));
  month.kit.advance(hours(24 * 10));  // ten more days: the count is used up

  const std::vector<double> sent = month.billing.reminder_days();
  REQUIRE(sent.size() == 5);
  for (std::size_t i = 0; i < sent.size(); ++i) CHECK(sent[i] == doctest::Approx(0.5 + i));
  durable::RunFilter reminders;
  reminders.workflow = "late-payment-reminder";
  const auto runs = month.kit.runtime().list(reminders);  // newest first
  REQUIRE(runs.size() == 5);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    CHECK(runs[i].status == Status::completed);
    CHECK(runs[i].output == int(runs.size() - i));  // the reminder's number
  }
  const auto left = month.kit.runtime().schedules();
  CHECK(std::none_of(left.begin(), left.end(),
                     [&](const auto& s) { return s.id == "late-payment:grace:INV-1042"; }));
}

TEST_CASE(
    "a reminder the mail service rejects twice goes out on the third attempt, and only once") {
  Month month;
  month.kit.fail("send-reminder", "SMTP 451: try again later", 2);
  const RunResult result = month.kit.run("late-payment-reminder", Reminder{"grace", "INV-1042"});

  CHECK(result.info.status == Status::completed);
  CHECK(result.info.output == 1);
  CHECK(result.executed == Keys{"send-reminder", "send-reminder", "send-reminder"});
  CHECK(month.billing.reminder_days().size() == 1);
}

TEST_CASE("a reminder run returns the number billing gave the reminder (billing mocked)") {
  Month month;
  month.kit.mock("send-reminder", 3);  // billing says: the third reminder for this invoice
  const RunResult result = month.kit.run("late-payment-reminder", Reminder{"grace", "INV-1042"});

  CHECK(result.info.status == Status::completed);
  CHECK(result.info.output == 3);
  CHECK(result.executed.empty());
  CHECK(month.billing.reminder_days().empty());  // the stand-in sent nothing
}

TEST_CASE("a cancellation asked for the end of the cycle runs then, and not before") {
  Month month;
  durable::StartOptions at_cycle_end;
  at_cycle_end.at = month.cycle_end();
  const std::string id =
      month.kit.runtime().start("cancel-subscription", Cancellation{"bob"}, at_cycle_end);
  CHECK(month.kit.result(id).info.status == Status::pending);

  month.kit.advance(hours(1));  // the kit then skips ahead to the delayed start

  const RunResult result = month.kit.result(id);
  CHECK(result.info.status == Status::completed);
  CHECK(result.executed == Keys{"stop-renewal", "send-goodbye"});
  CHECK(first_entered(result.info, Status::running) >= month.cycle_end());
  CHECK(month.billing.plan("bob") == "cancelled");
  CHECK(month.billing.cancellations() == 1);
}

TEST_CASE("a cancellation taken back before the end of the cycle never runs") {
  Month month;
  durable::StartOptions at_cycle_end;
  at_cycle_end.at = month.cycle_end();
  const std::string id =
      month.kit.runtime().start("cancel-subscription", Cancellation{"bob"}, at_cycle_end);

  month.kit.runtime().cancel(id);     // bob changes his mind
  month.kit.advance(hours(24 * 40));  // well past the end of the cycle

  const RunResult result = month.kit.result(id);
  CHECK(result.info.status == Status::cancelled);
  CHECK(result.invocations == 0);
  CHECK(result.executed.empty());
  CHECK(month.kit.runtime().steps(id).empty());
  CHECK(month.billing.plan("bob").empty());  // still subscribed
  CHECK(month.billing.cancellations() == 0);
}

TEST_CASE("the downgrade and the cancellation end the same after a crash at any step") {
  // The crash sweep has a virtual clock of its own: this calendar reads the wall clock.
  const Calendar calendar(kDay, Clock::now, nullptr);
  Billing billing(calendar);

  const auto down = durable::testing::crash_sweep(
      downgrade(billing, calendar), PlanChange{"ada", "pro", "basic", to_ms(calendar.at(30))},
      quiet());
  INFO(down.report());
  CHECK(down.expected.info.output == json{{"customer", "ada"}, {"plan", "basic"}});
  CHECK(down.cases.size() == 6);  // three bodies, a crash before and after each commit
  CHECK(down.ok());

  const auto cancel =
      durable::testing::crash_sweep(cancellation(billing, calendar), Cancellation{"bob"}, quiet());
  INFO(cancel.report());
  CHECK(cancel.cases.size() == 4);
  CHECK(cancel.ok());
  CHECK(billing.plan("bob") == "cancelled");
}

TEST_CASE("a crash between sending a reminder and journaling it sends the reminder again") {
  const Calendar calendar(kDay, Clock::now, nullptr);
  Billing billing(calendar);
  const auto sweep =
      durable::testing::crash_sweep(reminder(billing), Reminder{"grace", "INV-1042"}, quiet());
  INFO(sweep.report());

  // send-reminder numbers each reminder from billing's own count, which the journal does not
  // hold: a reminder sent again comes out under a new number, so the sweep cannot pass.
  CHECK_FALSE(sweep.ok());
  CHECK(sweep.expected.info.output == 1);
  REQUIRE(sweep.cases.size() == 2);
  const auto& before = sweep.cases[0];
  CHECK(before.step == "send-reminder");
  CHECK(before.before_commit);
  CHECK(before.ran_again == Keys{"send-reminder"});  // grace gets that reminder twice
  CHECK_FALSE(before.matches);
  CHECK(sweep.cases[1].ran_again.empty());  // once journaled, it is never sent again
  CHECK(sweep.report().find("DIFF  crash before the commit of 'send-reminder'") !=
        std::string::npos);
  // One email for the crash-free run, two for the crash before the commit, one for the crash
  // after it.
  CHECK(billing.reminder_days().size() == 4);
}
