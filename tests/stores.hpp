// SPDX-License-Identifier: Apache-2.0
#pragma once
// The store a test named "... (on each store)" runs on: an SQLite file in its directory, or, when
// CTest runs such tests again against the private PostgreSQL cluster (tests/CMakeLists.txt sets
// DURABLE_TEST_PG_URI to its URI), a fresh database on that cluster. So one
// test checks both stores; no copy of it is kept for either.

#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "ids.hpp"
#include "pg_connection.hpp"
#include "support.hpp"

namespace durable::test {

/// `uri` with its database replaced by `database`.
inline std::string with_database(const std::string& uri, const std::string& database) {
  const std::size_t slash = uri.find('/', uri.find("://") + 3);
  const std::size_t query = uri.find('?', slash);
  return uri.substr(0, slash + 1) + database +
         (query == std::string::npos ? std::string() : uri.substr(query));
}

/// The URI of the cluster's `postgres` database, from DURABLE_TEST_PG_URI; empty when unset.
inline std::string pg_uri() {
  const char* uri = std::getenv("DURABLE_TEST_PG_URI");
  return uri == nullptr ? std::string() : std::string(uri);
}

/// Whether this run of the tests is against PostgreSQL.
inline bool on_postgres() { return !pg_uri().empty(); }

/// Drops, when the test process ends, the databases it made: a suite run makes hundreds, each a
/// copy of the template, and the cluster's disk is the machine's.
class MadeDatabases {
 public:
  static MadeDatabases& instance() {
    static MadeDatabases made;
    return made;
  }
  void add(std::string name) { names_.push_back(std::move(name)); }
  ~MadeDatabases() {
    for (const std::string& name : names_) {
      try {
        detail::pg::connect(pg_uri())->execute("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
      } catch (const std::exception&) {
        // The cluster is gone already (stopped, or restarted by the test): nothing to free.
      }
    }
  }

 private:
  std::vector<std::string> names_;
};

/// A new, empty database on the cluster, dropped when the test process ends; its URI.
inline std::string fresh_pg_database() {
  MadeDatabases& made = MadeDatabases::instance();  // made first, so destroyed after its users
  const std::string name = "t" + detail::new_id();
  detail::pg::connect(pg_uri())->execute("CREATE DATABASE " + name);
  made.add(name);
  return with_database(pg_uri(), name);
}

/// The database of a test: `dir.file(name)`, or a fresh PostgreSQL database (on_postgres()).
inline std::string database(const TempDir& dir, const std::string& name) {
  return on_postgres() ? fresh_pg_database() : dir.file(name);
}

}  // namespace durable::test
