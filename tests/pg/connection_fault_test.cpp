// SPDX-License-Identifier: Apache-2.0
// Connection faults swept over the fault workload (fault_workload.hpp) on PostgreSQL, the
// counterpart of io_fault_test.cpp's disk faults on SQLite. Through a proxy (pg_proxy.hpp), the
// connection is dropped at the n-th statement, before the server sees it or after it answered,
// for every n the workload reaches (every kStride-th by default); and the server is restarted
// at statements spread over it.
// After each fault the runtime must have said, in words an operator can act on, that the
// connection was lost; everything journaled before must be unchanged and the database
// consistent; and the same runtime, which connects again by itself, must finish every run with
// the results and the journals (each step once, at its first attempt) of a run that met no fault.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "fault_workload.hpp"
#include "pg_proxy.hpp"
#include "pg_schema.hpp"
#include "pg_support.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::PgProxy;

namespace {

// Every kStride-th statement is swept unless DURABLE_SWEEP_STRIDE says otherwise (1: all), in
// kLanes points at once. A point takes about 1.5 s on 2 cores with four at once (0.8 s for the
// workload, the schema made with it, and 0.6 s to finish it), its processes' CPU and the
// server's: eight at once take no less. The workload makes some 510 statements: each sweep takes
// about 130 s with kStride 3 on 2 cores.
constexpr std::int64_t kStride = 3;
constexpr int kLanes = 4;

// The database a sweep runs on, straight to its server.
struct Target {
  std::string uri;
  std::atomic<int> points{0};
};

// One run of the workload through `proxy`, in a schema of its own in the target's database (as
// a search_path in the URI: durable's tables go in its first schema), dropped at the end.
class Point {
 public:
  Point(Target& target, PgProxy& proxy)
      : target_(&target), proxy_(&proxy), schema_("point" + std::to_string(++target.points)) {
    detail::pg::connect(target.uri)->execute("CREATE SCHEMA " + schema_);
  }
  ~Point() {
    try {
      reader_.reset();
      detail::pg::connect(target_->uri)->execute("DROP SCHEMA " + schema_ + " CASCADE");
    } catch (const std::exception&) {
      // Left in the test's database, which is dropped when the test process ends.
    }
  }
  Point(const Point&) = delete;
  Point& operator=(const Point&) = delete;

  std::string direct() const { return in_schema(target_->uri); }
  std::string routed() const { return in_schema(proxy_->route(target_->uri)); }

  // Completed journal entries and ended runs, by key: what nothing may lose or change. Read on
  // a connection of the test's own, straight to the server.
  std::map<std::string, std::string> settled() {
    std::map<std::string, std::string> rows;
    if (count("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()") == 0) {
      return rows;  // the fault struck before the schema was made
    }
    read(rows,
         "SELECT run_id || '/' || key, kind || ' ' || coalesce(output, '') || ' ' || "
         "coalesce(error, '') FROM steps WHERE state = 'completed'");
    read(rows,
         "SELECT id, status || ' ' || coalesce(output, '') FROM runs "
         "WHERE status IN ('completed', 'failed', 'cancelled')");
    return rows;
  }

  // Waits (up to 10 s) until the server has ended the transactions of connections the proxy
  // dropped. A backend ends its transaction once it reads the close, which a loaded machine may
  // leave for a while; until then the rows it locked are skipped by claims (FOR UPDATE SKIP
  // LOCKED), as they would be for a worker cut off mid-transaction, until the server's
  // keepalives find it gone. Another lane's transactions are in other schemas.
  bool abandoned_transactions_ended() {
    const std::string sql =
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE c.relnamespace = '" +
        schema_ +
        "'::regnamespace AND a.state LIKE 'idle in transaction%' AND l.pid <> pg_backend_pid()";
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (count(sql) > 0) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  // What is inconsistent in the schema: the tables half made, or rows that durable writes
  // together found apart.
  std::vector<std::string> problems() {
    std::vector<std::string> found;
    if (count("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()") == 0) {
      return found;
    }
    const auto expect = [&](const std::string& what, const std::string& sql, std::int64_t want) {
      const std::int64_t got = count(sql);
      if (got != want) found.push_back(what + ": " + std::to_string(got));
    };
    expect("schema version", std::string("SELECT max(version) FROM ") + detail::pg::kVersionTable,
           detail::pg::kPgSchemaVersion);
    expect("children with no invoke step",
           "SELECT count(*) FROM runs c WHERE c.parent_id IS NOT NULL AND NOT EXISTS (SELECT 1 "
           "FROM steps s WHERE s.run_id = c.parent_id AND s.key = c.parent_step AND "
           "s.kind = 'invoke')",
           0);
    expect("invoke steps with no child",
           "SELECT count(*) FROM steps s WHERE s.kind = 'invoke' AND NOT EXISTS (SELECT 1 FROM "
           "runs c WHERE c.parent_id = s.run_id AND c.parent_step = s.key)",
           0);
    expect("journal positions taken twice",
           "SELECT count(*) FROM (SELECT run_id, seq FROM steps GROUP BY run_id, seq "
           "HAVING count(*) > 1) twice",
           0);
    expect("waits of ended runs",
           "SELECT count(*) FROM waits w JOIN runs r ON r.id = w.run_id WHERE r.status IN "
           "('completed', 'failed', 'cancelled')",
           0);
    expect("running runs with no owner",
           "SELECT count(*) FROM runs WHERE status = 'running' AND owner IS NULL", 0);
    expect("schedule fires that started no run, or runs no fire started",
           "SELECT coalesce(sum(fired), 0) - (SELECT count(*) FROM runs WHERE workflow = 'tick') "
           "FROM schedules",
           0);
    expect("schedule starts lost or gained",
           "SELECT count(*) FROM schedules WHERE fired + remaining <> 2", 0);
    return found;
  }

 private:
  std::string in_schema(const std::string& uri) const {
    return uri + (uri.find('?') == std::string::npos ? "?" : "&") + "options=-c%20search_path%3D" +
           schema_;
  }
  // Runs `use` on the test's connection; a connection a server restart ended is made again.
  template <class F>
  void on_reader(F&& use) {
    for (int attempt = 1;; ++attempt) {
      try {
        if (!reader_) reader_ = detail::pg::connect(direct());
        use(*reader_);
        return;
      } catch (const detail::sql::Failure& e) {
        reader_.reset();
        if (e.fault() != detail::sql::Fault::connection || attempt == 2) throw;
      }
    }
  }
  std::int64_t count(const std::string& sql) {
    std::int64_t n = 0;
    on_reader([&](detail::pg::PgConnection& db) {
      detail::sql::Query query(db, sql);
      n = query.next() ? query.int64(0) : 0;
    });
    return n;
  }
  void read(std::map<std::string, std::string>& rows, const std::string& sql) {
    on_reader([&](detail::pg::PgConnection& db) {
      detail::sql::Query query(db, sql);
      while (query.next()) rows[query.text(0)] = query.text(1);
    });
  }

  Target* target_;
  PgProxy* proxy_;
  std::string schema_;
  std::unique_ptr<detail::pg::PgConnection> reader_;
};

std::unique_ptr<Runtime> workload_runtime(const std::string& uri, test::ManualClock& clock,
                                          test::CapturedLog& log) {
  RuntimeOptions opts;
  opts.threads = 2;
  opts.log_level = LogLevel::warn;
  opts.log_sink = log.sink();
  auto runtime = test::runtime_on(uri, clock, opts);
  test::workload::add(*runtime);
  return runtime;
}

// A step's output without what differs from one run of the workload to the next: the ids of
// an event and of a child run, and when the event was sent.
std::string comparable(json output) {
  if (output.is_object()) {
    for (const char* varies : {"id", "run", "time"}) output.erase(varies);
  }
  return output.dump();
}

// Every journal entry of every run, by workflow and input, with its attempts: the same
// whichever faults met the workload, each step journaled once.
std::multiset<std::string> journals(Runtime& runtime) {
  std::multiset<std::string> out;
  RunFilter all;
  all.limit = 1000;
  for (const RunInfo& run : runtime.list(all)) {
    for (const StepInfo& step : runtime.steps(run.id)) {
      out.insert(run.workflow + " " + run.input.dump() + " " + step.id + " " + step.kind + " " +
                 step.status + " " + std::to_string(step.attempts) + " " + comparable(step.output));
    }
  }
  return out;
}

struct Baseline {
  std::multiset<std::string> results, journals;
  std::int64_t statements = 0;
};

// The workload through the proxy with no fault: its results, its journals, and how many
// statements it sent (reading the results and journals afterwards left out).
Baseline baseline(Target& target) {
  PgProxy proxy(PgProxy::port_of(target.uri));
  Point point(target, proxy);
  test::ManualClock clock;
  test::CapturedLog log;
  Baseline b;
  auto runtime = workload_runtime(point.routed(), clock, log);
  for (int action = 0; action < test::workload::kActions; ++action) {
    test::workload::act(*runtime, clock, action);
  }
  const std::int64_t worked = proxy.statements();
  b.results = test::workload::results(*runtime);
  b.journals = journals(*runtime);
  const std::int64_t read = proxy.statements() - worked;
  runtime.reset();
  b.statements = proxy.statements() - read;
  return b;
}

// Takes the workload up again from its start on `runtime` once the leases of the runs it held
// have lapsed; whether it ended as the baseline did, and the journal replays.
bool finish(Runtime& runtime, test::ManualClock& clock, const Baseline& baseline) {
  clock.advance(RuntimeOptions{}.lease + 1s);
  for (int action = 0; action < test::workload::kActions; ++action) {
    test::workload::act(runtime, clock, action);
  }
  const std::multiset<std::string> results = test::workload::results(runtime);
  const std::multiset<std::string> steps = journals(runtime);
  CHECK(results == baseline.results);
  CHECK(steps == baseline.journals);
  if (steps != baseline.journals) {
    for (const std::string& s : steps) MESSAGE("journaled: ", s);
    for (const std::string& s : baseline.journals) MESSAGE("the baseline journaled: ", s);
  }
  if (results != baseline.results) {
    for (const std::string& s : results) MESSAGE("ended: ", s);
    for (const std::string& s : baseline.results) MESSAGE("the baseline ended: ", s);
    RunFilter all;
    all.limit = 1000;
    for (const RunInfo& run : runtime.list(all)) {
      if (run.status == Status::completed) continue;
      for (const auto& change : runtime.get(run.id).history) {
        MESSAGE("history of ", run.workflow, " ", run.input.dump(), ": ", to_string(change.status),
                ": ", change.reason);
      }
    }
  }
  const VerifyReport verified = runtime.verify();
  CHECK(verified.ok());
  return results == baseline.results && steps == baseline.journals && verified.ok();
}

// Whether everything of `before` is in `after`, unchanged.
bool kept(const std::map<std::string, std::string>& before,
          const std::map<std::string, std::string>& after) {
  bool all = true;
  for (const auto& entry : before) {  // no structured binding: INFO captures it (clang 14)
    INFO(entry.first);
    const auto found = after.find(entry.first);
    CHECK(found != after.end());
    if (found != after.end()) CHECK(found->second == entry.second);
    all = all && found != after.end() && found->second == entry.second;
  }
  return all;
}

struct Tally {
  int struck = 0;
  int reported = 0;  // by an Error from the call that met it
  int at_open = 0;   // by the Runtime's constructor: a new runtime finished the work
  int logged = 0;    // met by a connection of the runtime's own threads, which logged it
  int at_close = 0;  // struck as the runtime closed, its work done
  int recovered = 0;

  Tally& operator+=(const Tally& t) {
    struck += t.struck;
    reported += t.reported;
    at_open += t.at_open;
    logged += t.logged;
    at_close += t.at_close;
    recovered += t.recovered;
    return *this;
  }
};

// One fault point: the workload meets the fault (armed on the proxy by `arm`), then the checks.
void fault_at(Target& target, PgProxy& proxy, const Baseline& baseline,
              const std::function<void(PgProxy&)>& arm, const std::string& what, Tally& tally) {
  Point point(target, proxy);
  test::ManualClock clock;
  test::CapturedLog log;
  std::string error;
  std::map<std::string, std::string> journaled;
  std::unique_ptr<Runtime> runtime;
  arm(proxy);
  try {
    runtime = workload_runtime(point.routed(), clock, log);
    for (int action = 0; action < test::workload::kActions; ++action) {
      test::workload::act(*runtime, clock, action);
      if (!proxy.struck()) journaled = point.settled();  // what was journaled before it struck
    }
  } catch (const Error& e) {
    error = e.what();
  }
  bool at_close = false;
  if (!proxy.struck() && runtime) {
    runtime.reset();  // the fault may lie in closing
    at_close = proxy.struck();
  }
  if (!proxy.struck()) {  // past the workload's last statement
    CHECK(error.empty());
    return;
  }
  ++tally.struck;
  INFO(what, " (", proxy.struck_statement(), "): ", error);
  if (!error.empty()) {
    runtime ? ++tally.reported : ++tally.at_open;
    CHECK(test::has(error, "database '" + point.routed() + "'"));
    CHECK(test::has(error, test::kLostConnection));
  } else if (at_close) {
    ++tally.at_close;
  } else {
    // Met by the heartbeat's or the work watch's connection: no call failed, so a log line
    // must tell the operator (written as the thread meets the error, maybe after the work).
    ++tally.logged;
    CHECK(test::eventually([&] { return log.has({test::kLostConnection}); }));
  }
  const std::vector<std::string> problems = point.problems();
  for (const std::string& problem : problems) MESSAGE(problem);
  CHECK(problems.empty());
  std::map<std::string, std::string> before = point.settled();
  before.insert(journaled.begin(), journaled.end());
  // The runtime connects again by itself: the same one finishes the work. Only a constructor
  // that failed leaves none, and a new one is made.
  if (!runtime) runtime = workload_runtime(point.routed(), clock, log);
  CHECK(point.abandoned_transactions_ended());
  const bool finished = finish(*runtime, clock, baseline);
  runtime.reset();
  const bool intact = kept(before, point.settled());
  tally.recovered += problems.empty() && finished && intact;
}

// The sweep's stride: DURABLE_SWEEP_STRIDE where the environment sets it (the sanitizer builds
// of scripts/test), else `otherwise`.
std::int64_t stride(std::int64_t otherwise) {
  const char* every = std::getenv("DURABLE_SWEEP_STRIDE");
  return every != nullptr ? std::max(1, std::atoi(every)) : otherwise;
}

void report(const std::string& what, std::int64_t statements, const Tally& tally) {
  std::cout << what << ", over " << statements << " statements: " << tally.struck
            << " struck: " << tally.reported << " reported by the call, " << tally.at_open
            << " at open, " << tally.logged << " logged by a thread, " << tally.at_close
            << " at close; " << tally.recovered << " recovered\n";
  CHECK(tally.struck > 0);
  CHECK(tally.recovered == tally.struck);
  CHECK(tally.reported > 0);
}

// Runs `point(proxy, nth, tally)` for nth = first, first + every, ... to `last`, on `lanes`
// threads, each with a proxy of its own to the target's server: a point mostly waits (on the
// server's disk, on a runtime that closes), so a few at once take little more time than one.
Tally in_lanes(const Target& target, std::int64_t first, std::int64_t last, std::int64_t every,
               int lanes, const std::function<void(PgProxy&, std::int64_t, Tally&)>& point) {
  std::atomic<std::int64_t> next{first};
  std::vector<Tally> tallies(static_cast<std::size_t>(lanes));
  std::mutex mutex;
  std::vector<std::string> broken;  // what a point threw instead of failing a check
  std::vector<std::thread> threads;
  for (int lane = 0; lane < lanes; ++lane) {
    threads.emplace_back([&, lane] {
      try {
        PgProxy proxy(PgProxy::port_of(target.uri));
        for (std::int64_t nth = next.fetch_add(every); nth <= last; nth = next.fetch_add(every)) {
          point(proxy, nth, tallies[static_cast<std::size_t>(lane)]);
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        broken.emplace_back(e.what());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& e : broken) FAIL_CHECK(e);
  Tally all;
  for (const Tally& t : tallies) all += t;
  return all;
}

// Every point of one kind of drop, DURABLE_SWEEP_STRIDE apart (kStride unless set), from
// `first`, on a cluster of the sweep's own at `port`, which does not sync to the disk: what is
// swept is the connection, not the server's durability.
void sweep_drops(PgProxy::When when, const std::string& name, std::int64_t first, int port) {
  test::TempDir dir;
  test::OwnCluster cluster(dir.file("pg"), port, false);
  cluster.start();
  Target target{cluster.uri()};
  const Baseline b = baseline(target);
  const std::int64_t every = stride(kStride);
  const Tally tally = in_lanes(target, first, b.statements, every, kLanes,
                               [&](PgProxy& proxy, std::int64_t nth, Tally& lane) {
                                 fault_at(
                                     target, proxy, b, [&](PgProxy& p) { p.drop_at(nth, when); },
                                     "dropped " + name + " statement " + std::to_string(nth), lane);
                               });
  report("connections dropped " + name + " a statement, every " + std::to_string(every),
         b.statements, tally);
}

}  // namespace

TEST_CASE("on PostgreSQL, the fault workload ends as on SQLite, through the proxy") {
  Target target{test::fresh_database()};
  const Baseline b = baseline(target);
  CHECK(b.statements > 100);
  // 3 orders, 3 children, 2 ticks, each completed.
  REQUIRE(b.results.size() == 8);
  for (const std::string& r : b.results) CHECK(test::has(r, " completed "));
  CHECK(b.results.count(R"(order {"n":2} completed {"b":106,"n":2,"paid":2})") == 1);
  CHECK(b.journals.size() == 3 * 5 + 3 + 2);  // a, nap, paid, child, b; c; t
  std::cout << "the fault workload: " << b.statements << " statements\n";
}

TEST_CASE(
    "on PostgreSQL, a connection dropped before any statement reaches the server is reported, "
    "loses nothing journaled, and the runtime finishes every run by itself") {
  sweep_drops(PgProxy::When::before, "before", 1, DURABLE_SWEEP_BEFORE_PG_PORT);
}

TEST_CASE(
    "on PostgreSQL, a connection dropped after the server answered any statement, its commits "
    "too, is reported, loses nothing journaled, and the runtime finishes every run by itself") {
  // The statements between those the sweep of drops before a statement takes, where it skips.
  sweep_drops(PgProxy::When::after, "after", 1 + stride(kStride) / 2, DURABLE_SWEEP_AFTER_PG_PORT);
}

TEST_CASE(
    "on PostgreSQL, a server restarted at statements spread over the workload is reported, loses "
    "nothing journaled, and the runtime finishes every run by itself") {
  test::TempDir dir;
  test::OwnCluster cluster(dir.file("pg"), DURABLE_RESTART_PG_PORT);
  cluster.start();
  Target target{cluster.uri()};
  const Baseline b = baseline(target);
  constexpr int kRestarts = 5;
  Tally tally;
  int restarted = 0;
  PgProxy proxy(cluster.port());
  for (int k = 1; k <= kRestarts; ++k) {  // one at a time: a restart ends every session
    const std::int64_t nth = b.statements * k / (kRestarts + 1);
    fault_at(
        target, proxy, b,
        [&](PgProxy& p) { p.pause_at(nth, [&] { restarted += cluster.restart(); }); },
        "restarted at statement " + std::to_string(nth), tally);
  }
  report("server restarts at " + std::to_string(kRestarts) + " statements", b.statements, tally);
  CHECK(restarted == kRestarts);
  CHECK(tally.struck == kRestarts);
}
