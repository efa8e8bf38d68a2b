// SPDX-License-Identifier: Apache-2.0
#pragma once
// PostgreSQL behind durable's SQL connection interface (src/store/sql.hpp), with libpq: a
// connection that keeps its prepared statements, runs them with text parameters, turns every
// server error into a sql::Failure whose Fault comes from the SQLSTATE, and carries LISTEN/NOTIFY
// so a worker on one host can wake workers on others. No libpq type appears here.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/sql.hpp"

struct pg_conn;
struct pg_result;

namespace durable::detail::pg {

/// SQL text rewritten for PostgreSQL by rewrite_parameters().
struct RewrittenSql {
  std::string text;
  int parameter_count = 0;  ///< the highest parameter number used
};

inline constexpr int kMaxParameters = 65535;  ///< PostgreSQL's limit for one statement

/// SQL text with SQLite's parameters (`?`, `?N`) spelled as PostgreSQL's (`$N`). A bare `?` is
/// numbered one more than the highest number so far, as SQLite numbers it; a `?` inside a
/// '...' string literal, a "..." identifier or a comment is left alone. Throws sql::Failure
/// (Fault::other) for `?0` or a number past PostgreSQL's 65535.
inline RewrittenSql rewrite_parameters(std::string_view sql);

/// The Fault a caller acts on for a SQLSTATE (empty when the server sent none), given whether
/// libpq considers the connection broken.
inline sql::Fault fault_for(std::string_view sqlstate, bool connection_bad);

/// The URI as it may be shown: any password (`user:PASSWORD@`, `password=`) replaced by `***`.
inline std::string mask_password(const std::string& uri);
/// Where a URI holds a password: `user:PASSWORD@` before the host, and `password=PASSWORD`.
/// Generous on purpose: the userinfo runs to the last '@' before the query, whatever characters
/// an unencoded password holds, since showing a little too little beats showing a password.
inline std::vector<std::pair<std::size_t, std::size_t>> password_spans(std::string_view uri);

struct ConnectionCloser {
  void operator()(pg_conn* connection) const noexcept;
};
struct ResultClearer {
  void operator()(pg_result* result) const noexcept;
};
using ConnectionHandle = std::unique_ptr<pg_conn, ConnectionCloser>;
using ResultHandle = std::unique_ptr<pg_result, ResultClearer>;

class PgConnection;

/// A named prepared statement of one PgConnection; see sql::Statement for the contract. The
/// statement runs (PQexecPrepared) at the first next() or run(), and its whole result is then
/// held until reset(). An unbound parameter is NULL.
class PgStatement final : public sql::Statement {
 public:
  /// `name` is the server's name for it, `sql` the text it was prepared from (for messages).
  PgStatement(PgConnection& connection, std::string name, std::string sql, int parameter_count);

  void bind(int index, std::int64_t value) override;
  void bind(int index, std::string_view value) override;
  void bind_null(int index) override;
  bool next() override;
  std::int64_t run() override;
  bool is_null(int column) override;
  std::int64_t int64(int column) override;
  std::string text(int column) override;
  void reset() noexcept override;

 private:
  void execute();
  std::optional<std::string>& parameter(int index);
  /// The current row's cell, or nullptr for NULL; throws for no current row or a bad column.
  const char* cell(int column);

  PgConnection* connection_;
  std::string name_;
  std::string sql_;
  std::vector<std::optional<std::string>> parameters_;
  ResultHandle result_;
  bool executed_ = false;
  int row_ = -1;
  int rows_ = 0;
};

/// One connection to a PostgreSQL server. Not thread-safe: one user at a time, as every
/// sql::Connection. Every failed call throws sql::Failure; after a Fault::connection the
/// connection is of no further use and a new one must be made with connect().
class PgConnection final : public sql::Connection {
 public:
  /// Takes an open connection (see connect()); `shown_uri` is the URI with its password masked.
  PgConnection(ConnectionHandle connection, std::string shown_uri);
  ~PgConnection() override;
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  sql::Statement& prepare(const std::string& sql) override;
  void execute(const std::string& sql) override;
  void begin(sql::Sync sync) override;
  void begin_read() override;
  void commit() override;
  void rollback() noexcept override;
  const sql::Dialect& dialect() const override;
  std::int64_t run_application(std::string_view text, const std::vector<json>& params,
                               json* rows) override;

  /// LISTEN on `channel` (quoted as an identifier, so any text is a channel of its own).
  void listen(const std::string& channel);
  /// NOTIFY `channel`: inside the caller's transaction, if one is open, it is sent at commit and
  /// dropped by a rollback; otherwise at once.
  void notify(const std::string& channel);
  /// Waits up to `timeout` for a notification on a channel this connection listens on, and
  /// consumes every one that has arrived. True when at least one did; false on timeout.
  bool wait_for_notification(std::chrono::milliseconds timeout);
  /// As wait_for_notification(), and returns the payloads of the notifications consumed (empty
  /// on timeout).
  std::vector<std::string> wait_for_payloads(std::chrono::milliseconds timeout);

  /// The server process serving this connection (pg_backend_pid()).
  int backend_pid() const;
  /// How begin() sets each transaction's synchronous_commit (SET LOCAL, so that nothing stays
  /// on the session): a journal or relaxed one under Durability::normal `off`; any other at the
  /// session's own setting (the server's, the role's, the database's or the URI's), raised to
  /// `on` where that is `off`. Reads the session's setting now.
  void set_durability(Durability durability);
  /// The URI this connection was made with, its password masked.
  const std::string& shown_uri() const { return shown_uri_; }
  /// "host:port" of the server this connection reached (of a multi-host URI, the one it took).
  std::string server() const;

 private:
  friend class PgStatement;
  /// The Failure for the last error on this connection, from `result` (may be null).
  sql::Failure failure(pg_result* result, std::string_view context) const;
  /// Takes `result` (may be null); throws failure() unless it is a success.
  ResultHandle checked(pg_result* result, std::string_view context) const;
  /// Runs SQL text with PQexec; throws unless it succeeded. Returns the last result.
  ResultHandle exec(const std::string& sql, std::string_view context);
  /// Runs `command` (LISTEN, NOTIFY) on `channel` quoted as an identifier.
  void exec_on_channel(std::string_view command, const std::string& channel);
  /// Moves every notification libpq has read off its queue; true when there was one.
  bool drain_notifications(std::vector<std::string>* payloads = nullptr);
  bool wait_for_notifications(std::chrono::milliseconds timeout,
                              std::vector<std::string>* payloads);
  /// Rows written so far in this transaction to each table of durable's schema
  /// (pg_application.cpp: how run_application tells a write to durable's tables).
  std::map<std::string, std::int64_t> durable_writes();

  ConnectionHandle connection_;
  std::string shown_uri_;
  // What begin() sends for a durable transaction, and for a journal or relaxed one.
  std::string begin_durable_ = "BEGIN", begin_journal_ = "BEGIN";
  std::unordered_map<std::string, std::unique_ptr<PgStatement>> statements_;
};

/// Connects to the database a `postgresql://` or `postgres://` URI names. Adds
/// connect_timeout=10 (seconds) unless the URI sets one, and gives up after that long in all.
/// Throws durable::Error, its message starting "database 'URI': " with any password masked,
/// for a URI libpq cannot parse, a server that cannot be reached, wrong credentials or a
/// database that does not exist.
std::unique_ptr<PgConnection> connect(const std::string& uri);

// Inline, as they hold no libpq: what the functions declared at the top do.

inline std::vector<std::pair<std::size_t, std::size_t>> password_spans(std::string_view uri) {
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  std::size_t searched_to = 0;
  if (const std::size_t scheme = uri.find("://"); scheme != std::string_view::npos) {
    const std::size_t start = scheme + 3;
    const std::size_t at = uri.substr(0, uri.find('?', start)).rfind('@');
    const std::size_t colon = uri.find(':', start);
    if (at != std::string_view::npos && at > start && colon < at) {
      spans.emplace_back(colon + 1, at - colon - 1);
      searched_to = at;
    }
  }
  constexpr std::string_view kKey = "password=";
  for (std::size_t key = uri.find(kKey, searched_to); key != std::string_view::npos;
       key = uri.find(kKey, key + 1)) {
    const std::size_t value = key + kKey.size();
    spans.emplace_back(value, std::min(uri.find_first_of("& ", value), uri.size()) - value);
  }
  return spans;
}

inline std::string mask_password(const std::string& uri) {
  std::string shown;
  std::size_t from = 0;
  for (const auto& [start, length] : password_spans(uri)) {
    if (start < from) continue;
    shown.append(uri, from, start - from).append("***");
    from = start + length;
  }
  return shown.append(uri, from);
}

inline RewrittenSql rewrite_parameters(std::string_view sql) {
  RewrittenSql out;
  out.text.reserve(sql.size() + 16);
  std::size_t i = 0;
  auto copy_through = [&](std::size_t found, std::size_t length) {
    const std::size_t stop = found == std::string_view::npos ? sql.size() : found + length;
    out.text.append(sql.substr(i, stop - i));
    i = stop;
  };
  while (i < sql.size()) {
    const char c = sql[i];
    const char after = i + 1 < sql.size() ? sql[i + 1] : '\0';
    if (c == '\'' || c == '"') {
      // To the closing quote; a doubled quote inside closes and reopens, which copies the same.
      copy_through(sql.find(c, i + 1), 1);
    } else if (c == '-' && after == '-') {
      copy_through(sql.find('\n', i), 1);
    } else if (c == '/' && after == '*') {
      copy_through(sql.find("*/", i + 2), 2);
    } else if (c != '?') {
      out.text += c;
      ++i;
    } else {
      std::size_t digits = i + 1;
      while (digits < sql.size() && sql[digits] >= '0' && sql[digits] <= '9') ++digits;
      int number = out.parameter_count + 1;
      if (digits > i + 1) {
        const auto parsed = std::from_chars(sql.data() + i + 1, sql.data() + digits, number);
        if (parsed.ec != std::errc() || number < 1 || number > kMaxParameters) {
          throw sql::Failure(sql::Fault::other, "parameter '" +
                                                    std::string(sql.substr(i, digits - i)) +
                                                    "' is not numbered from 1 to 65535");
        }
      }
      out.parameter_count = std::max(out.parameter_count, number);
      out.text += '$' + std::to_string(number);
      i = digits;
    }
  }
  return out;
}

inline sql::Fault fault_for(std::string_view sqlstate, bool connection_bad) {
  // A broken connection first: whatever the server said last, the next try needs a new one.
  if (connection_bad || sqlstate.starts_with("08") || sqlstate == "57P01" || sqlstate == "57P02" ||
      sqlstate == "57P03") {
    return sql::Fault::connection;
  }
  if (sqlstate == "40001" || sqlstate == "40P01") return sql::Fault::retry;
  if (sqlstate == "53100") return sql::Fault::disk_full;
  if (sqlstate == "55P03" || sqlstate == "57014") return sql::Fault::busy;
  return sql::Fault::other;
}

}  // namespace durable::detail::pg
