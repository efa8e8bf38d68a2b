// SPDX-License-Identifier: Apache-2.0
// Issue 23: the wake-up latency of Runtime::published(run, key, wait) across two processes,
// median and p99, on SQLite and (given a URI) PostgreSQL, beside the raw database figures
// measured in the same run.
//
//   durable_published_bench [--quick] [--rounds N] [postgresql://URI]
//
// A child process (this program again, with --worker) serves the workflow "publisher": each
// round it waits for the event "round" {"n": i}, then publishes "phase-i" with the time of the
// steady clock (CLOCK_MONOTONIC: one clock for every process of the host) just before the
// publishing commit. The parent, for each round, sends the event and waits in
// published(run, "phase-i", 10 s); the wake-up latency is the time it returned less the time in
// the value: the commit, the feed (SQLite: the poll interval; PostgreSQL: NOTIFY) and the re-read.
//
// Raw figures: SQLite, a commit of one row and a re-read of it on another connection (what a
// poll costs once woken); PostgreSQL, a commit of one row, and a NOTIFY from one connection to a
// LISTEN on another (the server's own wake-up), on the same server. Targets (issue 23): under two
// poll intervals on SQLite, under 10 ms on PostgreSQL.

#include <libpq-fe.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <random>

#include "bench_support.hpp"

namespace bench = durable::bench;
using durable::json;
using namespace std::chrono_literals;

namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

durable::Workflow publisher() {
  return durable::Workflow("publisher", [](durable::Step& step, const json& input) -> json {
    const int rounds = input.value("rounds", 0);
    for (int i = 0; i < rounds; ++i) {
      durable::WaitOptions wait{.timeout = std::chrono::minutes(5), .match = {{"n", i}}};
      if (!step.wait_for_event("round", "round", wait)) return "timed out";
      step.publish("phase-" + std::to_string(i), steady_ns());  // just before its commit
    }
    return "done";
  });
}

int worker(const std::string& db, const std::string& run) {
  durable::RuntimeOptions opts;
  opts.database = db;
  opts.log_level = durable::LogLevel::off;
  opts.poll_interval = 2ms;  // the publisher reacts to the round's event at once
  durable::Runtime runtime(opts);
  runtime.add(publisher());
  return runtime.wait(run, std::chrono::minutes(10)).status == durable::Status::completed ? 0 : 1;
}

struct Latency {
  double median_ms = 0, p99_ms = 0;
};

Latency summary(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  Latency l;
  l.median_ms = bench::median(ms);
  l.p99_ms = ms.empty() ? 0 : ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  return l;
}

// durable: published(wait) woken by the child's publish, `rounds` times.
Latency published_wakeups(const std::string& self, const std::string& db, int rounds,
                          std::chrono::milliseconds poll) {
  durable::RuntimeOptions opts;
  opts.database = db;
  opts.log_level = durable::LogLevel::off;
  opts.poll_interval = poll;
  durable::Runtime runtime(opts);  // reads and sends only: it has no workflow
  durable::Client client(db);
  const std::string run = client.start("publisher", {{"rounds", rounds}});
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    ::execl(self.c_str(), self.c_str(), "--worker", db.c_str(), run.c_str(),
            static_cast<char*>(nullptr));
    _exit(127);
  }
  std::vector<double> ms;
  std::mt19937 random(12345);
  std::uniform_int_distribution<std::int64_t> jitter(
      0, std::chrono::duration_cast<std::chrono::microseconds>(poll).count());
  for (int i = 0; i < rounds; ++i) {
    // An event counts only once the wait for it is journaled: round i's wait is entry 2i + 1.
    for (;;) {
      const std::vector<durable::StepInfo> steps = runtime.steps(run);
      if (steps.size() == static_cast<std::size_t>(2 * i + 1) && steps.back().status == "waiting") {
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    // At a random moment of the poll interval, as a publish comes in use: the parent, woken by
    // the last poll, would otherwise publish just after each poll, one whole interval early.
    std::this_thread::sleep_for(std::chrono::microseconds(jitter(random)));
    runtime.send_event("round", {{"n", i}});
    const std::optional<json> at = runtime.published(run, "phase-" + std::to_string(i), 10s);
    const std::int64_t woke = steady_ns();
    if (!at) throw std::runtime_error("round " + std::to_string(i) + " was not published");
    ms.push_back(static_cast<double>(woke - at->get<std::int64_t>()) / 1e6);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return summary(ms);
}

// SQLite raw: a one-row commit, and the re-read of it on another connection.
std::pair<Latency, Latency> raw_sqlite(bench::Scratch& scratch, int rounds) {
  const std::string path = scratch.fresh("raw");
  std::vector<double> commit_ms, read_ms;
  {
    SQLite::Database writer(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    writer.exec("PRAGMA journal_mode=WAL");
    writer.exec("PRAGMA synchronous=NORMAL");
    writer.exec(
        "CREATE TABLE published (run_id TEXT, key TEXT, value TEXT, PRIMARY KEY (run_id, key)) "
        "WITHOUT ROWID");
    SQLite::Database reader(path, SQLite::OPEN_READONLY);
    SQLite::Statement upsert(writer,
                             "INSERT INTO published VALUES ('r', ?, ?) ON CONFLICT DO UPDATE "
                             "SET value = excluded.value");
    SQLite::Statement select(reader, "SELECT value FROM published WHERE run_id = 'r' AND key = ?");
    for (int i = 0; i < rounds; ++i) {
      const auto began = bench::Stopwatch::now();
      upsert.bind(1, "phase-" + std::to_string(i));
      upsert.bind(2, std::to_string(i));
      upsert.exec();
      upsert.reset();
      const auto committed = bench::Stopwatch::now();
      select.bind(1, "phase-" + std::to_string(i));
      if (!select.executeStep()) throw std::runtime_error("the raw row is not there");
      select.reset();
      commit_ms.push_back(std::chrono::duration<double, std::milli>(committed - began).count());
      read_ms.push_back(
          std::chrono::duration<double, std::milli>(bench::Stopwatch::now() - committed).count());
    }
  }
  bench::Scratch::remove(path);
  return {summary(commit_ms), summary(read_ms)};
}

using Conn = std::unique_ptr<PGconn, decltype(&PQfinish)>;

Conn connect(const std::string& uri) {
  Conn conn(PQconnectdb(uri.c_str()), &PQfinish);
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    throw std::runtime_error("cannot connect: " +
                             std::string(conn ? PQerrorMessage(conn.get()) : "out of memory"));
  }
  return conn;
}

void exec(PGconn* conn, const std::string& sql) {
  PGresult* result = PQexec(conn, sql.c_str());
  const ExecStatusType status = PQresultStatus(result);
  const std::string error = PQresultErrorMessage(result);
  PQclear(result);
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    throw std::runtime_error(sql + ": " + error);
  }
}

// PostgreSQL raw: a one-row commit, and a NOTIFY to a LISTEN on another connection.
std::pair<Latency, Latency> raw_postgres(const std::string& uri, int rounds) {
  Conn writer = connect(uri), listener = connect(uri);
  exec(writer.get(), "CREATE TEMP TABLE raw_published (key TEXT PRIMARY KEY, value TEXT)");
  exec(listener.get(), "LISTEN raw_bench");
  std::vector<double> commit_ms, notify_ms;
  for (int i = 0; i < rounds; ++i) {
    auto began = bench::Stopwatch::now();
    exec(writer.get(), "INSERT INTO raw_published VALUES ('phase-" + std::to_string(i) + "', '" +
                           std::to_string(i) + "')");
    commit_ms.push_back(
        std::chrono::duration<double, std::milli>(bench::Stopwatch::now() - began).count());
    began = bench::Stopwatch::now();
    exec(writer.get(), "NOTIFY raw_bench");
    for (bool got = false; !got;) {
      pollfd ready{PQsocket(listener.get()), POLLIN, 0};
      ::poll(&ready, 1, 10'000);
      PQconsumeInput(listener.get());
      while (PGnotify* n = PQnotifies(listener.get())) {
        PQfreemem(n);
        got = true;
      }
    }
    notify_ms.push_back(
        std::chrono::duration<double, std::milli>(bench::Stopwatch::now() - began).count());
  }
  return {summary(commit_ms), summary(notify_ms)};
}

std::string ms_pair(const Latency& l) {
  return bench::fixed(l.median_ms, "ms", 2) + " / " + bench::fixed(l.p99_ms, "ms", 2);
}

// A fresh database on the URI's server, for one measurement; its URI.
std::string fresh_database(const std::string& uri, const std::string& name) {
  Conn admin = connect(uri);
  exec(admin.get(), "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
  exec(admin.get(), "CREATE DATABASE " + name);
  const std::size_t slash = uri.find('/', uri.find("://") + 3);
  const std::size_t query = uri.find('?', slash);
  return uri.substr(0, slash + 1) + name +
         (query == std::string::npos ? std::string() : uri.substr(query));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::strcmp(argv[1], "--worker") == 0) return worker(argv[2], argv[3]);
    bool quick = false;
    int rounds = 200;
    std::string pg_uri;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--quick") {
        quick = true;
      } else if (arg == "--rounds" && i + 1 < argc) {
        rounds = std::stoi(argv[++i]);
      } else if (arg.starts_with("postgres")) {
        pg_uri = arg;
      } else {
        std::cerr << "usage: durable_published_bench [--quick] [--rounds N] [postgresql://URI]\n";
        return 2;
      }
    }
    if (quick) rounds = 10;
    const std::string self = std::filesystem::canonical("/proc/self/exe").string();
    bench::Scratch scratch("", "durable-published-bench");
    std::vector<bench::Row> rows;
    const auto poll = durable::RuntimeOptions{}.poll_interval;
    const Latency sqlite = published_wakeups(self, scratch.fresh("published"), rounds, poll);
    const auto [commit, read] = raw_sqlite(scratch, rounds);
    rows.push_back({"SQLite, poll_interval " + bench::fixed(poll.count(), "ms", 0), ms_pair(sqlite),
                    "commit " + ms_pair(commit) + ", re-read " + ms_pair(read),
                    bench::fixed(sqlite.median_ms / static_cast<double>(poll.count()), "polls", 2),
                    "< 2 poll intervals"});
    const auto fast = 20ms;
    const Latency sqlite_fast = published_wakeups(self, scratch.fresh("fast"), rounds, fast);
    rows.push_back({"SQLite, poll_interval 20 ms", ms_pair(sqlite_fast), "(as above)",
                    bench::fixed(sqlite_fast.median_ms / 20.0, "polls", 2), "< 2 poll intervals"});
    if (!pg_uri.empty()) {
      const std::string db = fresh_database(pg_uri, "durable_published_bench");
      const Latency pg = published_wakeups(self, db, rounds, poll);
      const auto [pg_commit, pg_notify] = raw_postgres(pg_uri, rounds);
      rows.push_back({"PostgreSQL, LISTEN/NOTIFY", ms_pair(pg),
                      "commit " + ms_pair(pg_commit) + ", NOTIFY " + ms_pair(pg_notify),
                      bench::fixed(pg.median_ms / std::max(pg_notify.median_ms, 1e-3), "x", 1),
                      "< 10 ms"});
      Conn admin = connect(pg_uri);
      exec(admin.get(), "DROP DATABASE IF EXISTS durable_published_bench WITH (FORCE)");
    }
    std::printf("published(wait) wake-up across two processes, %d rounds: median / p99\n", rounds);
    bench::print_table({"scenario", "durable", "raw, same run", "ratio", "target"}, rows);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "durable_published_bench: " << e.what() << "\n";
    return 1;
  }
}
