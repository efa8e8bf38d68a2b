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

namespace {

// An SQLite file's feed: its data_version, which moves when another connection commits, looked
// at on a connection of the feed's own. It says something changed, not what.
class SqliteChangeFeed final : public ChangeFeed {
 public:
  explicit SqliteChangeFeed(const std::string& path)
      : store_(open_sqlite_store(path, Durability::normal, Access::read_only)),
        version_(store_->data_version()) {}
  bool polls() const override { return true; }
  Changes next(std::chrono::milliseconds) override {
    const std::int64_t version = store_->data_version();
    Changes changes;
    changes.anything = version != version_;
    version_ = version;
    return changes;
  }

 private:
  std::unique_ptr<Store> store_;
  std::int64_t version_;
};

}  // namespace

std::unique_ptr<ChangeFeed> open_change_feed(const std::string& database) {
  if (is_postgres_uri(database)) return open_postgres_change_feed(database);
  if (database.empty() || database == ":memory:") return nullptr;
  return std::make_unique<SqliteChangeFeed>(database);
}

std::unique_ptr<OpsQueries> open_ops_queries(const std::string& database) {
  if (is_postgres_uri(database)) return open_postgres_ops_queries(database);
  return open_sqlite_ops_queries(database);
}

}  // namespace durable::detail
