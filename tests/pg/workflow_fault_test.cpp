// SPDX-License-Identifier: Apache-2.0
// A connection to PostgreSQL lost (through the proxy of pg_proxy.hpp) under a call the workflow
// makes, where the store's error would reach the workflow's code: it ends the invocation, as a
// failed commit does, and is neither a step's failure nor the run's; the run goes on from what
// the database holds once a runtime takes it up again.
//
// Step::transaction, whose body's SQL runs in the transaction that journals it: the whole write
// fails, and what the database holds decides what comes next: nothing of the write (the body
// runs again, and commits once), or all of it, when only the commit's answer was lost (the body
// does not run again).

#include <doctest/doctest.h>

#include <atomic>
#include <durable/durable.hpp>

#include "pg_proxy.hpp"
#include "pg_support.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::PgProxy;

namespace {

std::int64_t ledger_rows(const std::string& uri) {
  auto db = detail::pg::connect(uri);
  detail::sql::Query rows(*db, "SELECT count(*) FROM ledger");
  return rows.next() ? rows.int64(0) : -1;
}

struct Case {
  const char* at;      // the statement the connection drops at
  PgProxy::When when;  // before the server saw it, or after it answered
  bool catches;        // the body catches what its SQL throws, and returns
  bool committed;      // the commit went through: the journal holds the step
};

}  // namespace

TEST_CASE(
    "on PostgreSQL, a step.transaction whose SQL or commit meets a dropped connection fails the "
    "whole write, not the step nor the run, and its writes commit once") {
  const Case cases[] = {
      {"INSERT INTO ledger", PgProxy::When::before, false, false},
      {"INSERT INTO ledger", PgProxy::When::after, false, false},
      {"INSERT INTO ledger", PgProxy::When::before, true, false},
      {"INSERT INTO ledger", PgProxy::When::after, true, false},
      {"COMMIT", PgProxy::When::before, false, false},
      {"COMMIT", PgProxy::When::after, false, true},  // the answer to COMMIT is lost
  };
  for (const Case& c : cases) {
    INFO("dropped ", std::string(c.when == PgProxy::When::before ? "before " : "after ") + c.at,
         std::string(c.catches ? ", the body catching the error" : ""));
    const std::string uri = test::fresh_database();
    detail::pg::connect(uri)->execute("CREATE TABLE ledger (n INTEGER NOT NULL)");
    PgProxy proxy(PgProxy::port_of(uri));
    test::ManualClock clock;
    auto runtime = test::runtime_on(proxy.route(uri), clock, test::quiet(uri));
    std::atomic<int> bodies{0};
    runtime->add(Workflow("pay", [&](Step& step, const json&) -> json {
      return step.transaction("debit", [&](Sql& sql) -> json {
        // The transaction's commit is the next statement holding COMMIT on the connection.
        if (++bodies == 1 && std::string_view(c.at) == "COMMIT") proxy.drop_at(c.at, c.when);
        if (!c.catches) {
          sql.exec("INSERT INTO ledger (n) VALUES ($1)", 1);
          return "inserted";
        }
        try {
          sql.exec("INSERT INTO ledger (n) VALUES ($1)", 1);
        } catch (const std::exception&) {
          return "caught";  // nothing of it may commit: the connection is gone
        }
        return "inserted";
      });
    }));
    const std::string id = runtime->start("pay");
    if (std::string_view(c.at) != "COMMIT") proxy.drop_at(c.at, c.when);
    CHECK_THROWS_WITH_AS(runtime->run_until_idle(), doctest::Contains(test::kLostConnection),
                         Error);
    CHECK(proxy.struck());
    CHECK(bodies == 1);
    // Nothing of the write, or all of it; the run neither failed nor ended.
    CHECK(ledger_rows(uri) == (c.committed ? 1 : 0));
    CHECK(runtime->get(id).status == Status::running);
    const std::vector<StepInfo> journaled = runtime->steps(id);
    CHECK(journaled.size() == (c.committed ? 1u : 0u));
    // The same runtime, connected again, takes the run up once its lease has lapsed.
    clock.advance(RuntimeOptions{}.lease + 1s);
    runtime->run_until_idle();
    const RunInfo run = runtime->get(id);
    CHECK(run.status == Status::completed);
    CHECK(run.output == "inserted");
    CHECK(ledger_rows(uri) == 1);
    CHECK(bodies == (c.committed ? 1 : 2));
    const std::vector<StepInfo> steps = runtime->steps(id);
    CHECK(steps.size() == 1);
    if (steps.size() != 1) continue;
    CHECK(steps[0].status == "completed");
    CHECK(steps[0].attempts == 1);
  }
}

TEST_CASE(
    "on PostgreSQL, a connection lost as a workflow begins to wait for an event is not the run's "
    "failure: the run waits, and the event reaches it") {
  const std::string uri = test::fresh_database();
  PgProxy proxy(PgProxy::port_of(uri));
  test::ManualClock clock;
  auto runtime = test::runtime_on(proxy.route(uri), clock, test::quiet(uri));
  runtime->add(Workflow("paid", [](Step& step, const json&) -> json {
    const std::optional<json> payment = step.wait_for_event("paid", "paid");
    return payment ? payment->at("n") : json();
  }));
  const std::string id = runtime->start("paid");
  // Before it waits, the workflow reads where the events it may be given begin.
  proxy.drop_at("SELECT coalesce(max(seq), 0) FROM events", PgProxy::When::before);
  CHECK_THROWS_WITH_AS(runtime->run_until_idle(), doctest::Contains(test::kLostConnection), Error);
  CHECK(proxy.struck());
  CHECK(runtime->get(id).status == Status::running);
  clock.advance(RuntimeOptions{}.lease + 1s);
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::waiting);
  runtime->send_event("paid", {{"n", 7}});
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::completed);
  CHECK(runtime->get(id).output == 7);
}
