// SPDX-License-Identifier: Apache-2.0
// Which store a database names: a PostgreSQL URI or an SQLite file. The one place that knows
// both; it reaches them through the openers store.hpp declares.

#include <map>
#include <regex>

#include "ops_queries.hpp"
#include "store.hpp"

namespace durable::detail {

bool is_postgres_uri(std::string_view database) {
  return database.starts_with("postgresql://") || database.starts_with("postgres://");
}

std::string shown_database(const std::string& database) {
  return is_postgres_uri(database) ? shown_postgres_uri(database) : database;
}

namespace {

// A libpq keyword/value string ("host=db1 dbname=app user=x") would otherwise be taken for an
// SQLite file of that name, and the runs would go there. It is refused, with the URI that says
// the same: the URI is what every part of durable (and the operator's tools) reads.
void refuse_keyword_value(const std::string& database) {
  static const std::regex kKeywordValue(
      R"(^\s*(host|hostaddr|port|dbname|user|password|passfile|sslmode|service|options|)"
      R"(connect_timeout|application_name|target_session_attrs)\s*=)");
  if (!std::regex_search(database, kKeywordValue)) return;
  // key = value pairs; a value may be 'quoted', with \' and \\ inside.
  static const std::regex kPair(R"(([A-Za-z_]+)\s*=\s*('((?:[^'\\]|\\.)*)'|\S*))");
  std::map<std::string, std::string> pairs;
  for (auto it = std::sregex_iterator(database.begin(), database.end(), kPair);
       it != std::sregex_iterator(); ++it) {
    std::string value = (*it)[3].matched ? (*it)[3].str() : (*it)[2].str();
    value = std::regex_replace(value, std::regex(R"(\\(.))"), "$1");
    pairs[(*it)[1].str()] = value;
  }
  const auto take = [&pairs](const char* key) {
    const auto found = pairs.find(key);
    if (found == pairs.end()) return std::string();
    std::string value = found->second;
    pairs.erase(found);
    return value;
  };
  const std::string user = take("user");
  const bool password = !take("password").empty();
  std::string host = take("host");
  if (host.empty()) host = take("hostaddr");
  const std::string port = take("port");
  std::string uri = "postgresql://" + user + (password ? ":PASSWORD" : "") +
                    (user.empty() && !password ? "" : "@") + host +
                    (port.empty() ? "" : ":" + port) + "/" + take("dbname");
  char separator = '?';
  for (const auto& [key, value] : pairs) {
    uri += separator + key + "=" + value;
    separator = '&';
  }
  throw Error(errc::config,
              "database '" +
                  std::string(password ? "(a connection string with a password)" : database) +
                  "' is a libpq keyword/value connection string; durable takes PostgreSQL as a URI "
                  "starting postgresql:// (anything else is an SQLite file), here: " +
                  uri + " (percent-encode characters such as spaces, '@' or '/' inside a value)");
}

}  // namespace

std::unique_ptr<Store> open_store(const std::string& database, Durability durability,
                                  std::shared_ptr<const Payloads> payloads, Access access) {
  refuse_keyword_value(database);
  std::unique_ptr<Store> store = is_postgres_uri(database)
                                     ? open_postgres_store(database, durability, access)
                                     : open_sqlite_store(database, durability, access);
  store->set_payloads(std::move(payloads));
  return store;
}

std::unique_ptr<Store> open_store_read_only(const std::string& database,
                                            std::shared_ptr<const Payloads> payloads) {
  refuse_keyword_value(database);
  std::unique_ptr<Store> store =
      is_postgres_uri(database)
          ? open_postgres_store(database, Durability::normal, Access::read_only)
          : open_sqlite_store_read_only(database);
  store->set_payloads(std::move(payloads));
  return store;
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
  refuse_keyword_value(database);
  if (is_postgres_uri(database)) return open_postgres_ops_queries(database);
  return open_sqlite_ops_queries(database);
}

}  // namespace durable::detail
