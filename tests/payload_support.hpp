// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the tests of payloads at rest share (codec_test.cpp, encryption_test.cpp): a workflow
// that sends a marker through every payload path, and a look at the raw database for it.

#include <SQLiteCpp/SQLiteCpp.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "stores.hpp"
#include "support.hpp"

namespace durable::test {

/// The text the tests look for in the raw database.
inline constexpr const char* kMarker = "MARKER-7f3a9c-PAYLOAD";

/// A codec that hides the text from a byte scan: each byte XORed with `mask`, named `name`.
inline Codec xor_codec(std::string name = "xor", unsigned char mask = 0x5a) {
  const auto flip = [mask](std::string_view in, const PayloadContext&) {
    std::string out(in);
    for (char& c : out) c = static_cast<char>(static_cast<unsigned char>(c) ^ mask);
    return out;
  };
  return Codec{std::move(name), flip, flip};
}

/// Every payload path at once: the input, a step result, a caught step's error message, an
/// event sent from a step, a wait's match and the event's data, a child's input and output,
/// published and stream values, a message, and the run's output; each holds kMarker. Waits for
/// "marker.go" with {"who": kMarker}. And "marker-fails": a step retried after an error, then
/// the workflow throws; both errors hold kMarker, and the history quotes neither's message.
inline void add_marker_flows(Runtime& runtime) {
  runtime.add(Workflow("marker-fails", [](Step& step, const json& input) -> json {
    const std::string m = input.at("secret");
    step.run(
        "flaky",
        [&](StepContext& context) {
          if (context.attempt() == 1) throw std::runtime_error(m + "-retried");
          return 0;
        },
        {.retry = RetryPolicy{
             .max_attempts = 2, .initial_backoff = std::chrono::milliseconds(1), .jitter = 0}});
    throw std::runtime_error(m + "-thrown");
  }));
  runtime.add(Workflow("marker-child", [](Step&, const json& input) -> json {
    return {{"child-output", input.at("x")}};
  }));
  runtime.add(Workflow("marker", [](Step& step, const json& input) -> json {
    const std::string m = input.at("secret");
    const std::string result = step.run("result", [&] { return m + "-result"; });
    try {
      step.run("fails", [&]() -> int { throw std::runtime_error(m + "-error"); },
               {.retry = RetryPolicy{.max_attempts = 1}});
    } catch (const StepFailed&) {
    }
    step.send_event("tell", "marker.sent", {{"sent", m}});
    const auto got = step.wait_for_event("wait", "marker.go", {.match = {{"who", m}}});
    const json child = step.invoke("child", "marker-child", {{"x", m + "-invoke"}});
    step.publish("secret", m + "-published");
    step.write_stream("out", m + "-stream");
    step.run("tokens", [&] {
      step.write_stream("out", m + "-token");  // from a body: written at once
      return 0;
    });
    step.close_stream("out");
    const auto message = step.receive("inbox", "marker.topic", std::chrono::hours(1));
    return {{"out", m},
            {"result", result},
            {"event", got ? *got : json()},
            {"child", child},
            {"message", message ? *message : json()}};
  }));
}

/// Starts the marker flow and takes it to its end (the event sent from outside).
inline std::string run_marker_flow(Runtime& runtime, const std::string& correlation = {}) {
  const std::string id =
      runtime.start("marker", {{"secret", kMarker}}, {.correlation_id = correlation});
  runtime.send(id, "marker.topic", {{"note", std::string(kMarker) + "-message"}});  // kept
  runtime.run_until_idle();
  runtime.send_event("marker.go", {{"who", kMarker}, {"note", std::string(kMarker) + "-data"}});
  runtime.run_until_idle();
  const std::string fails =
      runtime.start("marker-fails", {{"secret", kMarker}}, {.correlation_id = correlation});
  REQUIRE(runtime.wait(fails, std::chrono::seconds(30)).status == Status::failed);
  return id;
}

/// A connection to the test's PostgreSQL database, durable's schema first on its search path.
inline std::unique_ptr<detail::pg::PgConnection> pg_session(const std::string& db) {
  auto pg = detail::pg::connect(db);
  pg->execute("SET search_path TO durable, public");
  return pg;
}

inline std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Whether `needle` is anywhere in the database: the bytes of an SQLite file and its WAL, or
/// every row of durable's tables as text on PostgreSQL.
inline bool database_holds(const std::string& db, const std::string& needle) {
  if (!on_postgres()) {
    return file_text(db).find(needle) != std::string::npos ||
           file_text(db + "-wal").find(needle) != std::string::npos;
  }
  auto pg = pg_session(db);
  std::string sql = "SELECT count(*) FROM (";
  const char* tables[] = {"runs",      "steps",   "events",       "waits",
                          "schedules", "history", "data_keys",    "published",
                          "messages",  "streams", "stream_values"};
  for (const char* t : tables) {
    sql += std::string(sql.back() == '(' ? "" : " UNION ALL ") + "SELECT t::text AS row FROM " + t +
           " t";
  }
  sql += ") x WHERE x.row LIKE '%" + needle + "%'";
  detail::sql::Statement& q = pg->prepare(sql);
  q.next();
  const std::int64_t n = q.int64(0);
  q.reset();
  return n > 0;
}

/// How long a raw SQLite connection of a test waits for a lock a runtime beside it holds (its
/// lease heartbeat, a checkpoint) instead of failing with 'database is locked'.
inline constexpr int kBesideRuntimeMs = 10'000;

/// Runs SQL on the test's database (either store).
inline void execute_sql(const std::string& db, const std::string& sql) {
  if (on_postgres()) {
    pg_session(db)->execute(sql);
  } else {
    SQLite::Database(db, SQLite::OPEN_READWRITE, kBesideRuntimeMs).exec(sql);
  }
}

/// The first column of the first row of a query, as text.
inline std::string query_text(const std::string& db, const std::string& sql) {
  if (on_postgres()) {
    auto pg = pg_session(db);
    detail::sql::Statement& q = pg->prepare(sql);
    std::string text = q.next() ? q.text(0) : std::string();
    q.reset();
    return text;
  }
  SQLite::Database look(db, SQLite::OPEN_READONLY, kBesideRuntimeMs);
  SQLite::Statement q(look, sql);
  return q.executeStep() ? q.getColumn(0).getString() : std::string();
}

}  // namespace durable::test
