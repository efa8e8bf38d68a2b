// SPDX-License-Identifier: Apache-2.0
// durable_pg_bench: durable on PostgreSQL, beside the raw commit rate of the same server measured
// in the same run.
//
//   durable_pg_bench [--quick] URI
//
// URI (postgresql://...) names a database on a running server; it is only used to reach the
// server: every measurement gets a database of its own (CREATE DATABASE on that server, dropped
// WITH (FORCE) afterwards). --quick shrinks sizes and repetitions; its figures are not meant to be
// quoted.
//
// What is timed, each at Durability::full (synchronous_commit=on: the like-for-like column) and
// Durability::normal (synchronous_commit=off):
// - W1: 200 runs of 10 trivial steps (step.run) are all start()ed, then one Runtime serves them:
//   serve() on a thread (poll_interval 5 ms) and the clock runs from just before that thread
//   starts until the runtime's counters report every run completed (read every millisecond).
//   Steps/s = runs x 10 / that time. The start() calls are not timed.
// - W3: the same with 100 runs of a workflow that starts 10 parallel steps (step.start), waits
//   for them with durable::all, then runs one more step: 11 steps a run.
// - raw: one libpq connection, a prepared single-row INSERT into a journal-shaped table
//   ((run_id, key) primary key, a small JSON text), autocommit (each row its own transaction and
//   commit, one round trip), as many rows as the workload after it has steps, at
//   synchronous_commit on or off to match. Rows/s.
// A repetition measures, per durability, raw then W1, raw then W3, back to back, each on a fresh
// database, so that each pair meets the same phase of a shared machine. The table shows medians
// over the repetitions; the ratio is the median of the per-repetition ratios durable steps/s over
// raw commits/s. "in flight" is the most runs seen between their first and last step body (how
// many runs durable had going at once: up to 64 claimed, more when runs yield their turn); each
// measurement is checked against the database (every run completed, every step journaled).

#include <libpq-fe.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <durable/durable.hpp>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_support.hpp"

namespace {

using namespace durable::bench;

struct Sizes {
  int reps = 5;
  int w1_runs = 200, w1_steps = 10;
  int w3_runs = 100;
  double deadline_s = 300;  // a durable measurement that takes longer fails the program
};

Sizes quick_sizes() {
  Sizes s;
  s.reps = 2;
  s.w1_runs = 20;
  s.w3_runs = 10;
  s.deadline_s = 60;
  return s;
}

constexpr int kParallel = 10;  // W3: steps started at once, before the one after them

// ---- libpq --------------------------------------------------------------------------------------

// The URI as it may be shown: a password in `user:PASSWORD@` replaced by ***.
std::string shown(const std::string& uri) {
  const std::size_t start = uri.find("://");
  if (start == std::string::npos) return uri;
  const std::size_t at = uri.rfind('@', uri.find_first_of("/?", start + 3));
  const std::size_t colon = uri.find(':', start + 3);
  if (at == std::string::npos || colon > at) return uri;
  return uri.substr(0, colon + 1) + "***" + uri.substr(at);
}

struct ConnCloser {
  void operator()(PGconn* conn) const noexcept { PQfinish(conn); }
};
using Conn = std::unique_ptr<PGconn, ConnCloser>;

Conn connect(const std::string& uri) {
  Conn conn(PQconnectdb(uri.c_str()));
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    throw std::runtime_error("cannot connect to " + shown(uri) + ": " +
                             (conn ? PQerrorMessage(conn.get()) : "out of memory"));
  }
  return conn;
}

// Runs SQL text; throws unless it succeeded. Returns the first cell of its result, if any.
std::string exec(PGconn* conn, const std::string& sql) {
  PGresult* result = PQexec(conn, sql.c_str());
  const ExecStatusType status = PQresultStatus(result);
  std::string value;
  if (status == PGRES_TUPLES_OK && PQntuples(result) > 0 && PQnfields(result) > 0) {
    value = PQgetvalue(result, 0, 0);
  }
  const std::string error = PQresultErrorMessage(result);
  PQclear(result);
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    throw std::runtime_error(sql + ": " + error);
  }
  return value;
}

// `uri` with its database replaced by `database` (the path before any ?query).
std::string with_database(const std::string& uri, const std::string& database) {
  const std::size_t host = uri.find("://") + 3;
  const std::size_t path = uri.find_first_of("/?", host);
  if (path == std::string::npos) return uri + "/" + database;
  const std::size_t query = uri.find('?', path);
  return uri.substr(0, path) + "/" + database +
         (query == std::string::npos ? std::string() : uri.substr(query));
}

// The server the URI names, through one administrative connection.
struct Server {
  std::string uri;
  Conn admin;
  int version = 0;  // PQserverVersion: 150018 for 15.18
  int databases = 0;

  explicit Server(std::string u) : uri(std::move(u)), admin(connect(uri)) {
    version = PQserverVersion(admin.get());
  }
  std::string setting(const std::string& name) {
    return exec(admin.get(), "SELECT current_setting('" + name + "')");
  }
};

// A database made for one measurement and dropped at the end of its scope.
class FreshDatabase {
 public:
  explicit FreshDatabase(Server& server)
      : server_(&server),
        name_("durable_bench_" + std::to_string(getpid()) + "_" +
              std::to_string(++server.databases)) {
    exec(server.admin.get(), "CREATE DATABASE " + name_);
    uri_ = with_database(server.uri, name_);
  }
  ~FreshDatabase() {
    try {
      exec(server_->admin.get(), "DROP DATABASE IF EXISTS " + name_ +
                                     (server_->version >= 130000 ? " WITH (FORCE)" : ""));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "durable_pg_bench: warning: %s\n", e.what());
    }
  }
  FreshDatabase(const FreshDatabase&) = delete;
  FreshDatabase& operator=(const FreshDatabase&) = delete;
  const std::string& uri() const { return uri_; }

 private:
  Server* server_;
  std::string name_, uri_;
};

long count(PGconn* conn, const std::string& sql) { return std::stol(exec(conn, sql)); }

// ---- raw ----------------------------------------------------------------------------------------

// Rows per second of single-row INSERTs, each its own transaction (autocommit, one round trip).
double raw_commit_rate(Server& server, Durability durability, int rows) {
  FreshDatabase db(server);
  Conn conn = connect(db.uri());
  exec(conn.get(),
       "CREATE TABLE steps (run_id TEXT NOT NULL, key TEXT NOT NULL, output TEXT, "
       "PRIMARY KEY (run_id, key))");
  exec(conn.get(), durability == Durability::full ? "SET synchronous_commit = on"
                                                  : "SET synchronous_commit = off");
  PGresult* prepared =
      PQprepare(conn.get(), "insert", "INSERT INTO steps (run_id, key, output) VALUES ($1, $2, $3)",
                3, nullptr);
  const bool ok = PQresultStatus(prepared) == PGRES_COMMAND_OK;
  PQclear(prepared);
  if (!ok) throw std::runtime_error(std::string("PREPARE: ") + PQerrorMessage(conn.get()));
  const std::string run_id = "0192f3a4b5c6d7e8f90a1b2c3d4e5f60";  // ~30 bytes, like a run id
  const auto start = Stopwatch::now();
  for (int i = 0; i < rows; ++i) {
    const std::string key = "s#" + std::to_string(i + 1);
    const std::string output = json{{"i", i}, {"ok", true}}.dump();
    const char* values[3] = {run_id.c_str(), key.c_str(), output.c_str()};
    PGresult* result = PQexecPrepared(conn.get(), "insert", 3, values, nullptr, nullptr, 0);
    const bool inserted = PQresultStatus(result) == PGRES_COMMAND_OK;
    PQclear(result);
    if (!inserted) throw std::runtime_error(std::string("INSERT: ") + PQerrorMessage(conn.get()));
  }
  const double elapsed = seconds_since(start);
  if (count(conn.get(), "SELECT count(*) FROM steps") != rows) {
    throw std::runtime_error("the raw table does not hold every row inserted");
  }
  return rows / elapsed;
}

// ---- durable ------------------------------------------------------------------------------------

// Runs between their first step body and their last: the most seen at once.
struct InFlight {
  std::atomic<int> now{0}, peak{0};
  void enter() {
    const int n = now.fetch_add(1) + 1;
    for (int p = peak.load(); n > p && !peak.compare_exchange_weak(p, n);) {
    }
  }
  void leave() { now.fetch_sub(1); }
};

enum class Workload { w1, w3 };

// W1: `steps` trivial steps in a row.
durable::Workflow chain_workflow(InFlight* flight) {
  return durable::Workflow("chain", [flight](durable::Step& step, const json& input) -> json {
    const int steps = input.at("steps").get<int>();
    long sum = 0;
    for (int i = 0; i < steps; ++i) {
      sum += step.run("s", [flight, i, steps] {
        if (i == 0) flight->enter();
        if (i == steps - 1) flight->leave();
        return i;
      });
    }
    return sum;
  });
}

// W3: kParallel steps started at once and awaited with durable::all, then one more.
durable::Workflow fanout_workflow(InFlight* flight) {
  return durable::Workflow("fanout", [flight](durable::Step& step, const json&) -> json {
    auto futures = [&]<std::size_t... I>(std::index_sequence<I...>) {
      // A braced list evaluates in order: the keys are p, p#2, ... as the calls come.
      return std::array{step.start("p", [flight] {
        if (I == 0) flight->enter();
        return static_cast<int>(I);
      })...};
    }
    (std::make_index_sequence<kParallel>{});
    const auto values = std::apply([](auto&... f) { return durable::all(f...); }, futures);
    const int sum = std::apply([](auto... v) { return (v + ...); }, values);
    return step.run("after", [flight, sum] {
      flight->leave();
      return sum;
    });
  });
}

int steps_per_run(Workload w, const Sizes& s) {
  return w == Workload::w1 ? s.w1_steps : kParallel + 1;
}
int runs_of(Workload w, const Sizes& s) { return w == Workload::w1 ? s.w1_runs : s.w3_runs; }

struct Measured {
  double steps_per_s = 0, seconds = 0, start_s = 0;
  int in_flight = 0;
};

// Starts every run of the workload, then serves them on a thread until all are completed.
Measured durable_rate(Server& server, Durability durability, Workload w, const Sizes& sizes) {
  FreshDatabase db(server);
  const int runs = runs_of(w, sizes), steps = steps_per_run(w, sizes);
  InFlight flight;
  Measured m;
  {
    durable::RuntimeOptions options;
    options.database = db.uri();
    options.durability = durability;
    options.poll_interval = std::chrono::milliseconds(5);
    options.log_level = durable::LogLevel::off;
    durable::Runtime runtime(options);
    runtime.add(w == Workload::w1 ? chain_workflow(&flight) : fanout_workflow(&flight));
    const auto starting = Stopwatch::now();
    for (int r = 0; r < runs; ++r) {
      runtime.start(w == Workload::w1 ? "chain" : "fanout", json{{"steps", steps}});
    }
    m.start_s = seconds_since(starting);

    std::exception_ptr failure;
    std::atomic<bool> ended{false};
    const auto start = Stopwatch::now();
    std::thread server_thread([&] {
      try {
        runtime.serve();
      } catch (...) {
        failure = std::current_exception();
      }
      ended = true;
    });
    std::uint64_t done = 0;
    while ((done = runtime.counters().runs_completed) < static_cast<std::uint64_t>(runs) &&
           !ended && seconds_since(start) < sizes.deadline_s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    m.seconds = seconds_since(start);
    runtime.stop();
    server_thread.join();
    if (failure) std::rethrow_exception(failure);
    if (done < static_cast<std::uint64_t>(runs)) {
      throw std::runtime_error("serve() completed " + std::to_string(done) + " of " +
                               std::to_string(runs) + " runs in " + fixed(m.seconds, "s"));
    }
  }
  // What the database holds, read after the runtime closed: every run completed, every step.
  Conn check = connect(db.uri());
  const long completed =
      count(check.get(), "SELECT count(*) FROM durable.runs WHERE status = 'completed'");
  const long journaled = count(check.get(), "SELECT count(*) FROM durable.steps");
  if (completed != runs || journaled != static_cast<long>(runs) * steps) {
    throw std::runtime_error("the database holds " + std::to_string(completed) +
                             " completed runs and " + std::to_string(journaled) +
                             " journal entries, not " + std::to_string(runs) + " and " +
                             std::to_string(runs * steps));
  }
  m.steps_per_s = static_cast<double>(runs) * steps / m.seconds;
  m.in_flight = flight.peak.load();
  return m;
}

// ---- the table ----------------------------------------------------------------------------------

// The repetitions of one workload at one durability.
struct Series {
  Workload workload;
  Durability durability;
  std::vector<double> raw, rate, ratio, seconds, start_s, in_flight;
};

void measure(Server& server, const Sizes& sizes, Series& series) {
  const int steps = runs_of(series.workload, sizes) * steps_per_run(series.workload, sizes);
  series.raw.push_back(raw_commit_rate(server, series.durability, steps));
  const Measured m = durable_rate(server, series.durability, series.workload, sizes);
  series.rate.push_back(m.steps_per_s);
  series.ratio.push_back(m.steps_per_s / series.raw.back());
  series.seconds.push_back(m.seconds);
  series.start_s.push_back(m.start_s);
  series.in_flight.push_back(m.in_flight);
}

std::string times(double ratio) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", ratio);
  return text;
}

Row row_of(const Series& s, const Sizes& sizes) {
  const bool full = s.durability == Durability::full;
  const int runs = runs_of(s.workload, sizes), steps = runs * steps_per_run(s.workload, sizes);
  const std::string shape =
      s.workload == Workload::w1
          ? std::to_string(runs) + " runs x " + std::to_string(sizes.w1_steps) + " steps"
          : std::to_string(runs) + " runs x (" + std::to_string(kParallel) + " parallel + 1) steps";
  const double raw = median(s.raw);
  return Row{std::string(s.workload == Workload::w1 ? "W1 " : "W3 ") + shape +
                 ", sync=" + std::string(name_of(s.durability)),
             with_commas(median(s.rate)) + " steps/s, " + fixed(median(s.seconds), "s", 2),
             with_commas(raw) + " rows/s, " + fixed(steps / raw, "s", 2) + " (sync_commit " +
                 (full ? "on" : "off") + ")",
             times(median(s.ratio)),
             with_commas(median(s.in_flight)) + " runs (start() " +
                 fixed(median(s.start_s) * 1e3, "ms", 0) + ")"};
}

std::string range_of(const std::vector<double>& values) {
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return with_commas(*lo) + "-" + with_commas(*hi);
}

int run(int argc, char** argv) {
  bool quick = false;
  std::string uri;
  const char* usage = "usage: durable_pg_bench [--quick] postgresql://URI\n";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "-h" || arg == "--help") {
      std::printf("%s", usage);
      return 0;
    } else if (arg.starts_with("-") || !uri.empty()) {
      std::fprintf(stderr, "durable_pg_bench: unexpected argument '%s'\n%s", argv[i], usage);
      return 2;
    } else {
      uri = std::string(arg);
    }
  }
  if (!uri.starts_with("postgresql://") && !uri.starts_with("postgres://")) {
    std::fprintf(stderr, "durable_pg_bench: a postgresql:// URI is required\n%s", usage);
    return 2;
  }
  const Sizes sizes = quick ? quick_sizes() : Sizes{};
  Server server(uri);
  const auto start = Stopwatch::now();
  std::printf(
      "durable_pg_bench %s | PostgreSQL %s (libpq %d) at %s | fsync=%s wal_sync_method=%s "
      "full_page_writes=%s shared_buffers=%s | %u cores%s\n",
      utc_now().c_str(), server.setting("server_version").c_str(), PQlibVersion(),
      shown(uri).c_str(), server.setting("fsync").c_str(),
      server.setting("wal_sync_method").c_str(), server.setting("full_page_writes").c_str(),
      server.setting("shared_buffers").c_str(), std::thread::hardware_concurrency(),
      quick ? " | --quick" : "");
  std::fflush(stdout);

  std::vector<Series> all;
  for (Durability d : {Durability::full, Durability::normal}) {
    for (Workload w : {Workload::w1, Workload::w3})
      all.push_back(Series{w, d, {}, {}, {}, {}, {}, {}});
  }
  for (int rep = 0; rep < sizes.reps; ++rep) {
    for (Series& s : all) measure(server, sizes, s);
    std::fprintf(stderr, "durable_pg_bench: repetition %d of %d done (%.1f s)\n", rep + 1,
                 sizes.reps, seconds_since(start));
  }
  std::vector<Row> rows;
  for (const Series& s : all) rows.push_back(row_of(s, sizes));
  print_table(
      Row{"scenario", "durable (median)", "raw INSERT+COMMIT (median)", "ratio", "in flight (max)"},
      rows);
  std::printf("\nper repetition (steps/s, then raw rows/s), min-max:\n");
  for (const Series& s : all) {
    std::printf(
        "  %s sync=%s: durable %s, raw %s, ratio %s-%s\n", s.workload == Workload::w1 ? "W1" : "W3",
        std::string(name_of(s.durability)).c_str(), range_of(s.rate).c_str(),
        range_of(s.raw).c_str(), times(*std::min_element(s.ratio.begin(), s.ratio.end())).c_str(),
        times(*std::max_element(s.ratio.begin(), s.ratio.end())).c_str());
  }
  std::printf(
      "\nmedians of %d repetitions, %.1f s in all\n"
      "ratio: median of per-repetition durable steps/s / raw rows/s (raw measured just before,\n"
      "  same durability, same row count, a fresh database each)\n"
      "durable: one Runtime; all runs started, then serve() on a thread, which holds up to 64\n"
      "  claimed runs at once as fibers of one thread (step bodies on %u step threads:\n"
      "  threads=0, one per core) and commits their writes together; a run held 100 ms yields\n"
      "  its turn while others are due, so 'in flight' (the most runs seen between their first\n"
      "  and last step body) can pass 64\n"
      "raw: one connection, one row per autocommit INSERT (one round trip, one commit)\n",
      sizes.reps, seconds_since(start), std::thread::hardware_concurrency());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "durable_pg_bench: %s\n", e.what());
    return 1;
  }
}
