// SPDX-License-Identifier: Apache-2.0
// A connection to PostgreSQL lost under a call (through the proxy of pg_proxy.hpp): the call's
// error says so, names the database and says what to do; the runtime's own threads, whose
// failures no caller hears of, log it; and the next call connects again.

#include <doctest/doctest.h>

#include <durable/durable.hpp>

#include "pg_proxy.hpp"
#include "pg_support.hpp"

using namespace durable;
using test::PgProxy;

TEST_CASE(
    "on PostgreSQL, a call whose connection is lost says so, names the database and says what "
    "to do, and the next call connects again") {
  const std::string uri = test::fresh_database();
  PgProxy proxy(PgProxy::port_of(uri));
  Runtime runtime(test::quiet(proxy.route(uri)));
  runtime.add(Workflow("noop", [](Step&, const json&) -> json { return 1; }));
  StartOptions keyed;
  keyed.idempotency_key = "once";
  // Before the server saw the statement, and after it ran it and answered.
  for (const PgProxy::When when : {PgProxy::When::before, PgProxy::When::after}) {
    proxy.drop_at("INSERT INTO runs", when);
    std::string said;
    try {
      runtime.start("noop", nullptr, keyed);
    } catch (const Error& e) {
      said = e.what();
    }
    CHECK(proxy.struck());
    CHECK(test::has(said, "database '" + proxy.route(uri) + "': "));
    CHECK(test::has(said, test::kLostConnection));
    CHECK(test::has(said, "retry once the server can be reached"));
  }
  // The second start was written, only its answer lost: a keyed start taken again finds it.
  const std::string id = runtime.start("noop", nullptr, keyed);
  CHECK(runtime.run_until_idle() == 1);
  CHECK(runtime.get(id).output == 1);
  RunFilter all;
  CHECK(runtime.list(all).size() == 1);
}

TEST_CASE(
    "on PostgreSQL, the heartbeat and the work watch log a lost connection, and go on without "
    "it") {
  const std::string uri = test::fresh_database();
  for (const char* statement : {"UPDATE workers SET seen_at", "LISTEN"}) {
    INFO(std::string(statement));
    PgProxy proxy(PgProxy::port_of(uri));
    test::CapturedLog log;
    RuntimeOptions options;
    options.database = proxy.route(uri);
    options.log_level = LogLevel::warn;
    options.log_sink = log.sink();
    Runtime runtime(options);
    runtime.add(Workflow("noop", [](Step&, const json&) -> json { return 1; }));
    proxy.drop_at(statement, PgProxy::When::before);
    runtime.run_until_idle();  // starts the heartbeat and the watch, each on its own connection
    const std::string event =
        std::string_view(statement) == "LISTEN" ? "runtime.watch_lost" : "runtime.heartbeat_failed";
    CHECK(test::eventually([&] {
      return log.has({event, test::kLostConnection, "database '" + proxy.route(uri)});
    }));
    CHECK(proxy.struck());
    // Neither stopped the runtime's work.
    const std::string id = runtime.start("noop");
    CHECK(runtime.run_until_idle() == 1);
    CHECK(runtime.get(id).status == Status::completed);
  }
}
