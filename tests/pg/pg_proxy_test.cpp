// SPDX-License-Identifier: Apache-2.0
// The test proxy of pg_proxy.hpp against the suite's cluster: what it counts as a statement,
// and that a drop before a statement leaves the server none of it while a drop after leaves it
// all, so that the fault sweeps mean what they say.

#include "pg_proxy.hpp"

#include <doctest/doctest.h>

#include "pg_support.hpp"

using namespace durable;
using test::PgProxy;

namespace {

std::int64_t rows_of(detail::pg::PgConnection& db, const std::string& table) {
  detail::sql::Query count(db, "SELECT count(*) FROM " + table);
  return count.next() ? count.int64(0) : -1;
}

// Runs `sql` through a new connection of the proxy's; the Fault it fails with, if it does.
std::optional<detail::sql::Fault> fault_through(PgProxy& proxy, const std::string& uri,
                                                const std::string& sql) {
  auto db = detail::pg::connect(proxy.route(uri));
  try {
    db->execute(sql);
    return std::nullopt;
  } catch (const detail::sql::Failure& e) {
    return e.fault();
  }
}

}  // namespace

TEST_CASE("the proxy counts a query, a prepare and each run of a prepared statement as one each") {
  const std::string uri = test::fresh_database();
  PgProxy proxy(PgProxy::port_of(uri));
  CHECK(proxy.route(uri).find(":" + std::to_string(proxy.port()) + "/") != std::string::npos);
  auto db = detail::pg::connect(proxy.route(uri));
  CHECK(proxy.statements() == 0);  // connecting is not a statement
  db->execute("SELECT 1");
  CHECK(proxy.statements() == 1);
  for (int i = 0; i < 2; ++i) {  // prepared once, run twice
    detail::sql::Query query(*db, "SELECT ? + 1");
    query.bind(1, std::int64_t{i});
    REQUIRE(query.next());
    CHECK(query.int64(0) == i + 1);
  }
  CHECK(proxy.statements() == 4);
  proxy.reset();
  CHECK(proxy.statements() == 0);
}

TEST_CASE("the proxy drops a connection before a statement reaches the server, or after it ran") {
  const std::string uri = test::fresh_database();
  auto direct = detail::pg::connect(uri);
  direct->execute("CREATE TABLE t (n INTEGER)");
  PgProxy proxy(PgProxy::port_of(uri));

  proxy.drop_at("INSERT INTO t", PgProxy::When::before);
  CHECK(fault_through(proxy, uri, "SELECT 1") == std::nullopt);
  CHECK(fault_through(proxy, uri, "INSERT INTO t VALUES (1)") == detail::sql::Fault::connection);
  CHECK(proxy.struck());
  CHECK(proxy.struck_statement() == "INSERT INTO t VALUES (1)");
  CHECK(rows_of(*direct, "t") == 0);  // the server never saw it

  proxy.drop_at(2, PgProxy::When::after);
  CHECK(fault_through(proxy, uri, "INSERT INTO t VALUES (1)") == std::nullopt);  // the first
  CHECK(fault_through(proxy, uri, "INSERT INTO t VALUES (2)") == detail::sql::Fault::connection);
  CHECK(rows_of(*direct, "t") == 2);  // the server ran it; only its answer was lost

  // One drop: the proxy forwards everything again.
  CHECK(fault_through(proxy, uri, "INSERT INTO t VALUES (3)") == std::nullopt);
  CHECK(rows_of(*direct, "t") == 3);
}

TEST_CASE("the proxy runs an action at the chosen statement, then forwards it") {
  const std::string uri = test::fresh_database();
  PgProxy proxy(PgProxy::port_of(uri));
  auto db = detail::pg::connect(proxy.route(uri));
  std::int64_t seen_at = -1;
  proxy.pause_at(2, [&] { seen_at = proxy.statements(); });
  db->execute("SELECT 1");
  CHECK_FALSE(proxy.struck());
  db->execute("SELECT 2");
  CHECK(proxy.struck());
  CHECK(seen_at == 2);
}
