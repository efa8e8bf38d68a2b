// SPDX-License-Identifier: Apache-2.0
// Which store a database names: a PostgreSQL URI or an SQLite file. The one place that knows
// both; it reaches them through the openers store.hpp declares.

#include "ops_queries.hpp"
#include "store.hpp"

namespace durable::detail {

bool is_postgres_uri(std::string_view database) {
  return database.starts_with("postgresql://") || database.starts_with("postgres://");
}

std::string shown_database(const std::string& database) {
  return is_postgres_uri(database) ? shown_postgres_uri(database) : database;
}

std::unique_ptr<Store> open_store(const std::string& database, Durability durability,
                                  Access access) {
  if (is_postgres_uri(database)) return open_postgres_store(database, durability, access);
  return open_sqlite_store(database, durability, access);
}

std::unique_ptr<Store> open_store_read_only(const std::string& database) {
  if (is_postgres_uri(database)) {
    return open_postgres_store(database, Durability::normal, Access::read_only);
  }
  return open_sqlite_store_read_only(database);
}

std::unique_ptr<WorkWatch> open_work_watch(const std::string& database) {
  if (is_postgres_uri(database)) return open_postgres_work_watch(database);
  return nullptr;
}

std::unique_ptr<OpsQueries> open_ops_queries(const std::string& database) {
  if (is_postgres_uri(database)) return open_postgres_ops_queries(database);
  return open_sqlite_ops_queries(database);
}

}  // namespace durable::detail
