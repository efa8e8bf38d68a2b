// SPDX-License-Identifier: Apache-2.0
// durable_http_raw_sqlite: the raw SQLite figure that bench/http_load.sh prints beside the HTTP
// API's figures. It does, on one connection in one thread with no HTTP and no JSON, the database
// work the two benchmarked requests stand for, for a fixed time, and prints one line:
//
//   durable_http_raw_sqlite --db FILE --op get --run ID [--seconds S]
//   durable_http_raw_sqlite --db FILE --op post [--seconds S]
//   raw get ops_per_s=182311 p50_us=5.2 p99_us=8.9 ops=364622 fs=ext4
//
// FILE is a database made by durable_ops_fixture (so the tables, indexes and rows are durable's
// own); it is opened in WAL mode with synchronous=NORMAL, as durable opens it.
//
// - get: what GET /v1/runs/{id} reads: the run's row by primary key, its journal entries (the
//   steps rows under the primary-key prefix run_id, in seq order) and its history rows (through
//   the history_run index), each an autocommit statement prepared once; every column is read.
// - post: what POST /v1/runs writes: one INSERT of a pending run row (a fresh id and idempotency
//   key each time) in its own BEGIN IMMEDIATE ... COMMIT. durable does more in that transaction
//   (the idempotency-key look-up and a history row) and around it (the workflows read, JSON).
//
// Each operation is timed on its own (steady_clock), so the percentiles compare with wrk's.

#include <SQLiteCpp/SQLiteCpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench_support.hpp"

namespace {

using durable::bench::Stopwatch;

struct Options {
  std::string db, op, run;
  double seconds = 2.0;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--db") {
      o.db = argv[i + 1];
    } else if (flag == "--op") {
      o.op = argv[i + 1];
    } else if (flag == "--run") {
      o.run = argv[i + 1];
    } else if (flag == "--seconds") {
      o.seconds = std::atof(argv[i + 1]);
    } else {
      throw std::invalid_argument("unknown flag " + std::string(flag));
    }
  }
  if (argc % 2 == 0 || o.db.empty() || (o.op != "get" && o.op != "post") ||
      (o.op == "get" && o.run.empty()) || o.seconds <= 0) {
    throw std::invalid_argument(
        "usage: durable_http_raw_sqlite --db FILE --op get --run ID | --op post [--seconds S]");
  }
  return o;
}

// Steps a statement to the end, reading every column of every row as the server would.
std::size_t drain(SQLite::Statement& statement) {
  std::size_t bytes = 0;
  while (statement.executeStep()) {
    for (int c = 0; c < statement.getColumnCount(); ++c) bytes += statement.getColumn(c).size();
  }
  statement.reset();
  return bytes;
}

// Runs `op` until `seconds` have passed; the duration of each call, in microseconds.
template <class Op>
std::vector<double> time_each(double seconds, Op&& op) {
  std::vector<double> us;
  us.reserve(1 << 20);
  const auto start = Stopwatch::now();
  const auto end = start + std::chrono::duration_cast<Stopwatch::duration>(
                               std::chrono::duration<double>(seconds));
  for (auto before = start; before < end;) {
    op();
    const auto after = Stopwatch::now();
    us.push_back(std::chrono::duration<double, std::micro>(after - before).count());
    before = after;
  }
  return us;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  const std::size_t k =
      std::min(values.size() - 1, static_cast<std::size_t>(p / 100 * values.size()));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

std::vector<double> point_reads(SQLite::Database& db, const std::string& run, double seconds) {
  SQLite::Statement run_row(db,
                            "SELECT id, workflow, correlation_id, status, input, output, error, "
                            "invocations, created_at, updated_at, due_at, parent_id "
                            "FROM runs WHERE id = ?");
  SQLite::Statement steps(db,
                          "SELECT key, base, kind, state, output, error, attempts, wake_at, "
                          "invocation, updated_at, duration_ms FROM steps WHERE run_id = ? "
                          "ORDER BY seq");
  SQLite::Statement history(db,
                            "SELECT status, at, reason FROM history WHERE run_id = ? ORDER BY id");
  for (SQLite::Statement* s : {&run_row, &steps, &history}) s->bind(1, run);
  if (drain(run_row) == 0) throw std::runtime_error("no run with id '" + run + "' in the file");
  std::size_t sink = 0;
  auto us = time_each(seconds, [&] { sink += drain(run_row) + drain(steps) + drain(history); });
  if (sink == 0) throw std::runtime_error("the reads returned nothing");
  return us;
}

std::vector<double> run_inserts(SQLite::Database& db, double seconds) {
  SQLite::Statement insert(
      db,
      "INSERT INTO runs (id, workflow, correlation_id, idempotency_key, status, "
      "input, due_at, created_at, updated_at) "
      "VALUES (?, 'signup', ?, ?, 'pending', ?, ?, ?, ?)");
  const std::string input = R"({"email":"load@example.com"})";
  const unsigned long started = static_cast<unsigned long>(std::time(nullptr));
  long n = 0;
  return time_each(seconds, [&] {
    char id[32];  // 28 characters, as long as durable's run ids
    std::snprintf(id, sizeof id, "%08lx%020ld", started, ++n);
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
    insert.bind(1, id);
    insert.bind(2, std::string("corr-") + id);
    insert.bind(3, std::string("key-") + id);
    insert.bind(4, input);
    for (int i = 5; i <= 7; ++i) insert.bind(i, static_cast<int64_t>(now_ms));
    insert.exec();
    insert.reset();
    tx.commit();
  });
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    SQLite::Database db(o.db, SQLite::OPEN_READWRITE);
    db.setBusyTimeout(10'000);
    if (db.execAndGet("PRAGMA journal_mode=WAL").getString() != "wal") {
      throw std::runtime_error("could not switch " + o.db + " to WAL mode");
    }
    db.exec("PRAGMA synchronous=NORMAL");
    const std::vector<double> us =
        o.op == "get" ? point_reads(db, o.run, o.seconds) : run_inserts(db, o.seconds);
    double total = 0;
    for (const double u : us) total += u;
    std::printf(
        "raw %s ops_per_s=%.0f p50_us=%.1f p99_us=%.1f ops=%zu fs=%s\n", o.op.c_str(),
        us.size() / (total / 1e6), percentile(us, 50), percentile(us, 99), us.size(),
        durable::bench::file_system_of(std::filesystem::absolute(o.db).parent_path()).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "durable_http_raw_sqlite: %s\n", e.what());
    return 1;
  }
}
