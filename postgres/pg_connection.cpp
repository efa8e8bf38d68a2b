// SPDX-License-Identifier: Apache-2.0
// PostgreSQL with libpq, as durable's store uses a database (src/store/sql.hpp).
//
// Statements are prepared once per connection with their parameter types left to the server,
// and run with text parameters and text results: every value durable stores is an integer or
// UTF-8 text, whose text forms PostgreSQL parses and prints exactly.
//
// Connecting uses libpq's non-blocking calls under one deadline, because libpq's own
// connect_timeout applies per address tried: a host name with several silent addresses would
// otherwise be waited on that long for each of them.

#include "pg_connection.hpp"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace durable::detail::pg {

namespace {

using std::chrono::steady_clock;

constexpr int kDefaultConnectTimeoutSeconds = 10;
constexpr std::size_t kShownSqlChars = 120;  // of a statement, in a message

// The field as text, from a text column holding a JSON object; fields are the store's own names.
std::string json_field(std::string_view column, std::string_view field) {
  return "(CAST(" + std::string(column) + " AS jsonb) ->> '" + std::string(field) + "')";
}

const sql::Dialect kDialect = {
    .greatest = "greatest",
    .claimable_runs_index = "",
    .prioritized_runs_index = "",
    .lock_claimable = " FOR UPDATE SKIP LOCKED",
    .lock_row = " FOR UPDATE",
    // On a 64-bit hash of the key: two keys whose hashes collide only wait for each other.
    .lock_key = "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))",
    .run_order = "r.seq",
    .notify_work = "NOTIFY durable_work",
    .notify_change = "SELECT pg_notify('durable_change', ?)",
    .next_history_id = "DEFAULT",
    .fold_counts = "SELECT fold_counts()",
    .reclaim_space = "",
    .secure_delete_on = "",
    .secure_delete_off = "",
    .truncate_log = "",
    .json_field = json_field,
};

// libpq's messages span lines ("...failed: Connection refused\n\tIs the server running...?");
// a log line reads better with them joined: "...refused; Is the server running...?".
std::string one_line(std::string_view text, std::string_view line_break = "; ") {
  std::string out;
  bool space = false;
  bool new_line = false;
  for (const char c : text) {
    if (c == '\n' || c == '\t' || c == ' ') {
      space = true;
      new_line = new_line || c == '\n';
      continue;
    }
    if (space && !out.empty()) out += new_line ? line_break : " ";
    space = new_line = false;
    out += c;
  }
  return out;
}

std::string shown_sql(std::string_view sql) {
  std::string text = one_line(sql, " ");
  return text.size() <= kShownSqlChars ? text : text.substr(0, kShownSqlChars) + "...";
}

[[noreturn]] void misuse(const std::string& what, std::string_view sql) {
  throw sql::Failure(sql::Fault::other, what + " (" + shown_sql(sql) + ")");
}

// Waits until `fd` is ready for `events` or the deadline passes: false when it passed.
bool poll_until(int fd, short events, steady_clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd socket{fd, events, 0};
  if (::poll(&socket, 1, static_cast<int>(std::min<std::int64_t>(left.count(), INT_MAX))) < 0 &&
      errno != EINTR) {
    throw sql::Failure(sql::Fault::other, std::string("poll: ") + std::strerror(errno));
  }
  return true;
}

// `text` with the URI shown masked and any password it holds replaced: libpq quotes the whole
// URI, or the part of it that it could not decode, in some of its messages.
std::string scrub(std::string text, const std::string& uri, const std::string& shown) {
  auto replace_all = [&text](std::string_view from, std::string_view to) {
    if (from.empty()) return;
    for (std::size_t at = text.find(from); at != std::string::npos;
         at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  };
  replace_all(uri, shown);
  for (const auto& [start, length] : password_spans(uri)) {
    replace_all(std::string_view(uri).substr(start, length), "***");
  }
  return text;
}

// Server notices (a DROP ... IF EXISTS that found nothing) are not errors, and libpq's default
// prints them on stderr, which is the application's.
void ignore_notice(void*, const char*) {}

}  // namespace

void ConnectionCloser::operator()(pg_conn* connection) const noexcept { PQfinish(connection); }
void ResultClearer::operator()(pg_result* result) const noexcept { PQclear(result); }

PgStatement::PgStatement(PgConnection& connection, std::string name, std::string sql,
                         int parameter_count)
    : connection_(&connection),
      name_(std::move(name)),
      sql_(std::move(sql)),
      parameters_(static_cast<std::size_t>(parameter_count)) {}

std::optional<std::string>& PgStatement::parameter(int index) {
  if (index < 1 || static_cast<std::size_t>(index) > parameters_.size()) {
    misuse("no parameter " + std::to_string(index) + " of " + std::to_string(parameters_.size()),
           sql_);
  }
  return parameters_[static_cast<std::size_t>(index) - 1];
}

void PgStatement::bind(int index, std::int64_t value) { parameter(index) = std::to_string(value); }

void PgStatement::bind(int index, std::string_view value) {
  if (value.find('\0') != std::string_view::npos) {
    misuse("text for parameter " + std::to_string(index) + " holds a NUL byte", sql_);
  }
  parameter(index) = std::string(value);
}

void PgStatement::bind_null(int index) { parameter(index).reset(); }

void PgStatement::execute() {
  std::vector<const char*> values;
  values.reserve(parameters_.size());
  for (const auto& value : parameters_) values.push_back(value ? value->c_str() : nullptr);
  result_ = connection_->checked(
      PQexecPrepared(connection_->connection_.get(), name_.c_str(), static_cast<int>(values.size()),
                     values.data(), nullptr, nullptr, 0),
      "running: " + shown_sql(sql_));
  executed_ = true;
  row_ = -1;
  rows_ = PQntuples(result_.get());
}

bool PgStatement::next() {
  if (!executed_) execute();
  row_ = std::min(row_ + 1, rows_);
  return row_ < rows_;
}

std::int64_t PgStatement::run() {
  if (!executed_) execute();
  const char* affected = PQcmdTuples(result_.get());
  return *affected == '\0' ? 0 : std::strtoll(affected, nullptr, 10);
}

const char* PgStatement::cell(int column) {
  if (!executed_ || row_ < 0 || row_ >= rows_) misuse("no current row to read", sql_);
  if (column < 0 || column >= PQnfields(result_.get())) {
    misuse("column " + std::to_string(column) + " is out of range: the statement has " +
               std::to_string(PQnfields(result_.get())),
           sql_);
  }
  if (PQgetisnull(result_.get(), row_, column)) return nullptr;
  return PQgetvalue(result_.get(), row_, column);
}

bool PgStatement::is_null(int column) { return cell(column) == nullptr; }

std::int64_t PgStatement::int64(int column) {
  const char* value = cell(column);
  if (value == nullptr) return 0;  // as SQLite reads NULL
  const std::string_view text(value);
  // A boolean (count(*) > 0) prints as t or f; SQLite gives 1 or 0 for it.
  if (text == "t" || text == "f") return text == "t" ? 1 : 0;
  std::int64_t number = 0;
  const auto parsed = std::from_chars(text.data(), text.data() + text.size(), number);
  if (parsed.ec == std::errc() && parsed.ptr == text.data() + text.size()) return number;
  misuse("column " + std::to_string(column) + " holds '" + shown_sql(text) + "', not an integer",
         sql_);
}

std::string PgStatement::text(int column) {
  const char* value = cell(column);
  if (value == nullptr) return "";
  return std::string(value, static_cast<std::size_t>(PQgetlength(result_.get(), row_, column)));
}

void PgStatement::reset() noexcept {
  result_.reset();
  executed_ = false;
  row_ = -1;
  rows_ = 0;
  for (auto& value : parameters_) value.reset();
}

PgConnection::PgConnection(ConnectionHandle connection, std::string shown_uri)
    : connection_(std::move(connection)), shown_uri_(std::move(shown_uri)) {
  PQsetNoticeProcessor(connection_.get(), ignore_notice, nullptr);
}

PgConnection::~PgConnection() = default;

sql::Failure PgConnection::failure(pg_result* result, std::string_view context) const {
  const char* state = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const char* primary = result ? PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  const char* detail = result ? PQresultErrorField(result, PG_DIAG_MESSAGE_DETAIL) : nullptr;
  std::string words;
  if (primary != nullptr) {
    words = std::string(primary) + (detail ? std::string(" (") + detail + ")" : "");
  } else {  // libpq's own words: a lost connection, a protocol error
    words = one_line(result ? PQresultErrorMessage(result) : "");
    if (words.empty()) words = one_line(PQerrorMessage(connection_.get()));
  }
  if (words.empty()) words = "unknown error";
  if (state != nullptr) words += std::string(" [SQLSTATE ") + state + "]";
  words += " while " + std::string(context);
  return sql::Failure(fault_for(state ? state : "", PQstatus(connection_.get()) == CONNECTION_BAD),
                      words);
}

ResultHandle PgConnection::checked(pg_result* result, std::string_view context) const {
  ResultHandle owned(result);
  const ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK && status != PGRES_EMPTY_QUERY) {
    throw failure(result, context);
  }
  return owned;
}

ResultHandle PgConnection::exec(const std::string& sql, std::string_view context) {
  return checked(PQexec(connection_.get(), sql.c_str()), context);
}

sql::Statement& PgConnection::prepare(const std::string& sql) {
  if (const auto found = statements_.find(sql); found != statements_.end()) return *found->second;
  const RewrittenSql rewritten = rewrite_parameters(sql);
  std::string name = "durable_" + std::to_string(statements_.size() + 1);
  checked(PQprepare(connection_.get(), name.c_str(), rewritten.text.c_str(), 0, nullptr),
          "preparing: " + shown_sql(sql));
  sql::prepared(rewritten.text);
  auto statement =
      std::make_unique<PgStatement>(*this, std::move(name), sql, rewritten.parameter_count);
  return *statements_.emplace(sql, std::move(statement)).first->second;
}

void PgConnection::execute(const std::string& sql) { exec(sql, "running: " + shown_sql(sql)); }

// A relaxed transaction is a journal one here: a server that crashes and comes back need not
// take its clients with it, so a lost claim would not mean a dead worker. BEGIN and its SET
// LOCAL go in one round trip.
void PgConnection::begin(sql::Sync sync) {
  exec(sync == sql::Sync::durable ? begin_durable_ : begin_journal_, "running BEGIN");
}

std::string PgConnection::server() const {
  const char* host = PQhost(connection_.get());
  const char* port = PQport(connection_.get());
  return std::string(host != nullptr ? host : "?") + ":" + (port != nullptr ? port : "?");
}

void PgConnection::set_durability(Durability durability) {
  std::string setting;
  {
    const ResultHandle shown = exec("SHOW synchronous_commit", "reading synchronous_commit");
    if (PQntuples(shown.get()) == 1) setting = PQgetvalue(shown.get(), 0, 0);
  }
  // Never weaker than the session's own setting, and never off for what a caller was told.
  begin_durable_ = setting == "off" ? "BEGIN; SET LOCAL synchronous_commit = on" : "BEGIN";
  begin_journal_ = durability == Durability::normal ? "BEGIN; SET LOCAL synchronous_commit = off"
                                                    : begin_durable_;
}

void PgConnection::begin_read() {
  exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "running BEGIN READ ONLY");
}

void PgConnection::commit() {
  const ResultHandle result = exec("COMMIT", "running COMMIT");
  // COMMIT of a transaction that an error already aborted succeeds, and rolls back.
  if (std::strcmp(PQcmdStatus(result.get()), "ROLLBACK") == 0) {
    throw sql::Failure(sql::Fault::other,
                       "COMMIT rolled the transaction back: a statement in it had failed, so "
                       "nothing of it was written");
  }
}

void PgConnection::rollback() noexcept {
  const PGTransactionStatusType state = PQtransactionStatus(connection_.get());
  if (state == PQTRANS_INTRANS || state == PQTRANS_INERROR) {
    PQclear(PQexec(connection_.get(), "ROLLBACK"));
  }
}

const sql::Dialect& PgConnection::dialect() const { return kDialect; }

void PgConnection::exec_on_channel(std::string_view command, const std::string& channel) {
  char* quoted = PQescapeIdentifier(connection_.get(), channel.c_str(), channel.size());
  if (quoted == nullptr) throw failure(nullptr, "quoting the channel name '" + channel + "'");
  const std::string sql = std::string(command) + " " + quoted;
  PQfreemem(quoted);
  exec(sql, "running " + sql);
}

void PgConnection::listen(const std::string& channel) { exec_on_channel("LISTEN", channel); }

void PgConnection::notify(const std::string& channel) { exec_on_channel("NOTIFY", channel); }

bool PgConnection::drain_notifications(std::vector<std::string>* payloads) {
  bool any = false;
  while (PGnotify* notification = PQnotifies(connection_.get())) {
    if (payloads != nullptr && notification->extra != nullptr) {
      payloads->emplace_back(notification->extra);
    }
    PQfreemem(notification);
    any = true;
  }
  return any;
}

bool PgConnection::wait_for_notification(std::chrono::milliseconds timeout) {
  return wait_for_notifications(timeout, nullptr);
}

std::vector<std::string> PgConnection::wait_for_payloads(std::chrono::milliseconds timeout) {
  std::vector<std::string> payloads;
  wait_for_notifications(timeout, &payloads);
  return payloads;
}

bool PgConnection::wait_for_notifications(std::chrono::milliseconds timeout,
                                          std::vector<std::string>* payloads) {
  const auto deadline = steady_clock::now() + timeout;
  do {
    // Notifications read while other statements ran are queued already; new ones are on the
    // socket.
    if (PQconsumeInput(connection_.get()) == 0 || PQsocket(connection_.get()) < 0) {
      throw failure(nullptr, "waiting for a notification");
    }
    if (drain_notifications(payloads)) return true;
  } while (poll_until(PQsocket(connection_.get()), POLLIN, deadline));
  return false;
}

int PgConnection::backend_pid() const { return PQbackendPID(connection_.get()); }

namespace {

// What the URI sets: its connect_timeout in seconds (the default when it sets none; libpq reads 1
// as 2) and its options (the server settings sent at startup).
struct UriSettings {
  int timeout_seconds = kDefaultConnectTimeoutSeconds;
  std::string options;
};

UriSettings settings_of(const std::string& uri, const std::string& where) {
  char* parse_error = nullptr;
  PQconninfoOption* options = PQconninfoParse(uri.c_str(), &parse_error);
  if (options == nullptr) {
    const std::string words = parse_error ? one_line(parse_error) : "out of memory";
    PQfreemem(parse_error);
    throw Error(
        errc::config,
        where + "the URI is not valid: " + scrub(words, uri, mask_password(uri)) +
            " (the form is postgresql://[user[:password]@][host][:port][/dbname][?param=value])");
  }
  UriSettings settings;
  for (const PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
    if (option->val == nullptr) continue;
    if (std::strcmp(option->keyword, "connect_timeout") == 0) {
      settings.timeout_seconds = std::atoi(option->val) == 1 ? 2 : std::atoi(option->val);
    } else if (std::strcmp(option->keyword, "options") == 0) {
      settings.options = option->val;
    }
  }
  PQconninfoFree(options);
  return settings;
}

// The message for a connection attempt that failed: what libpq says, and what to do about it.
std::string connect_failure(const std::string& words) {
  // A value libpq parsed but cannot use (a port that is no number) fails here, not in parsing.
  if (words.starts_with("invalid ") || words.find("connection option") != std::string::npos) {
    return "the URI is not valid: " + words;
  }
  std::string advice;
  if (words.find("authentication failed") != std::string::npos ||
      words.find("no password supplied") != std::string::npos) {
    advice = "; check the user and password in the URI";
  } else if (words.find("does not exist") != std::string::npos) {
    advice = "; create it, or name an existing database and role in the URI";
  }
  return "cannot connect: " + words + advice;
}

}  // namespace

std::unique_ptr<PgConnection> connect(const std::string& uri) {
  const std::string shown = mask_password(uri);
  const std::string where = "database '" + shown + "': ";
  if (!uri.starts_with("postgresql://") && !uri.starts_with("postgres://")) {
    throw Error(errc::config,
                where + "not a PostgreSQL URI; it must start with postgresql:// or postgres://");
  }
  const UriSettings settings = settings_of(uri, where);
  const int timeout_seconds = settings.timeout_seconds;
  // The server's side of the same: a worker cut off in the middle of a transaction holds the
  // rows it locked, which claims skip (FOR UPDATE SKIP LOCKED), until the server ends its
  // session. With the system's keepalives that takes hours; with these, about 20 s. The URI's
  // own options come after, so that a setting it makes wins.
  const std::string server_options =
      "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=2 "
      "-c tcp_user_timeout=20000" +
      (settings.options.empty() ? std::string() : " " + settings.options);

  // Later keywords win, and the URI (dbname, expanded) comes after durable's defaults: what it
  // sets, it keeps. Only the options come after it, holding its own.
  const std::string default_timeout = std::to_string(kDefaultConnectTimeoutSeconds);
  // A server or link that went silent is noticed within about 20 s (keepalives while idle, a
  // send left unacknowledged while busy), not at the system's TCP timeouts of minutes to hours.
  const char* const keywords[] = {"connect_timeout",
                                  "client_encoding",
                                  "application_name",
                                  "keepalives_idle",
                                  "keepalives_interval",
                                  "keepalives_count",
                                  "tcp_user_timeout",
                                  "dbname",
                                  "options",
                                  nullptr};
  const char* const values[] = {
      default_timeout.c_str(), "UTF8", "durable", "10", "5", "2", "20000", uri.c_str(),
      server_options.c_str(),  nullptr};
  ConnectionHandle connection(PQconnectStartParams(keywords, values, 1));
  if (!connection) throw Error(errc::database, where + "out of memory");
  pg_conn* handle = connection.get();

  // Zero or less is no limit, as libpq reads connect_timeout.
  const auto deadline = timeout_seconds > 0
                            ? steady_clock::now() + std::chrono::seconds(timeout_seconds)
                            : steady_clock::time_point::max();
  PostgresPollingStatusType state =
      PQstatus(handle) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
  while (state != PGRES_POLLING_OK && state != PGRES_POLLING_FAILED) {
    const short events = state == PGRES_POLLING_READING ? POLLIN : POLLOUT;
    if (PQsocket(handle) >= 0 && !poll_until(PQsocket(handle), events, deadline)) {
      throw Error(errc::database,
                  where + "no answer from the server at " + PQhost(handle) + " port " +
                      PQport(handle) + " within " + std::to_string(timeout_seconds) +
                      " s (connect_timeout), so gave up; is the server running, and reachable "
                      "from here?");
    }
    state = PQconnectPoll(handle);
  }
  if (state == PGRES_POLLING_FAILED) {
    throw Error(errc::database,
                where + connect_failure(scrub(one_line(PQerrorMessage(handle)), uri, shown)));
  }
  return std::make_unique<PgConnection>(std::move(connection), shown);
}

}  // namespace durable::detail::pg
