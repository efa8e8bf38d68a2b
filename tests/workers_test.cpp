// SPDX-License-Identifier: Apache-2.0
// Serving processes on one database: two at once, a loop of kill -9s, a graceful SIGTERM. The
// tests named "(on each store)" run on SQLite and again on PostgreSQL (stores.hpp).
// Real processes (durable_serve_worker), real signals.

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "admin.hpp"
#include "stores.hpp"
#include "support.hpp"
#include "worker_workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

// quarantine_after: the worker's RuntimeOptions::quarantine_after; empty: the default. lease_ms:
// its RuntimeOptions::lease (with a quarantine_after); empty: 5 s.
pid_t spawn_worker(const std::string& db, const std::string& log,
                   const std::string& quarantine_after = "", const std::string& lease_ms = "") {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (freopen("/dev/null", "w", stdout) == nullptr) _exit(126);
    execl(DURABLE_SERVE_WORKER, DURABLE_SERVE_WORKER, db.c_str(), log.c_str(),
          quarantine_after.empty() ? nullptr : quarantine_after.c_str(),
          lease_ms.empty() ? nullptr : lease_ms.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits for the process and returns its exit status, or -signal if a signal ended it.
int reap(pid_t pid) {
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return WEXITSTATUS(status);
}

// Whether a body logged this step.
bool logged(const std::string& log, const std::string& step) {
  for (const test::Body& body : test::read_bodies(log)) {
    if (body.step == step) return true;
  }
  return false;
}

// The test process's view of the database: it starts runs and reads them, executing nothing.
std::unique_ptr<Runtime> client(const std::string& db, const std::string& log) {
  auto runtime = std::make_unique<Runtime>(RuntimeOptions{.database = db});
  runtime->add(test::job_workflow(log));
  runtime->add(test::slow_workflow(log));
  return runtime;
}

std::size_t completed(Runtime& runtime, const std::string& workflow) {
  return runtime.list({.status = Status::completed, .workflow = workflow, .limit = 100'000}).size();
}

// "HOST:PID" of a process of this host, as RunInfo::worker names it.
std::string holder(pid_t pid) {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return std::string(name) + ":" + std::to_string(pid);
}

// What the durable command prints on stdout for these arguments.
std::string durable_cli(const std::string& args) {
  return test::run_shell(std::string(DURABLE_CLI) + " " + args + " 2>/dev/null").second;
}

}  // namespace

TEST_CASE(
    "two serving processes on one database: 200 runs each complete once, no body runs twice (on "
    "each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db"), log = dir.file("bodies");
  auto runtime = client(db, log);
  std::vector<std::string> ids;
  for (int i = 0; i < 200; ++i) ids.push_back(runtime->start("job", {{"i", i}}));
  const pid_t a = spawn_worker(db, log);
  const pid_t b = spawn_worker(db, log);
  const bool done = test::eventually([&] { return completed(*runtime, "job") == 200; }, 60s, 20ms);
  kill(a, SIGTERM);
  kill(b, SIGTERM);
  CHECK(reap(a) == 0);
  CHECK(reap(b) == 0);
  REQUIRE(done);

  std::map<std::pair<std::string, std::string>, int> runs_of;
  std::map<int, int> by_pid;
  for (const test::Body& body : test::read_bodies(log)) {
    ++runs_of[{body.run, body.step}];
    ++by_pid[body.pid];
  }
  CHECK(runs_of.size() == 2000);
  int twice = 0;
  for (const auto& [key, n] : runs_of) twice += n > 1;
  CHECK(twice == 0);
  for (const std::string& id : ids) {
    const RunInfo run = runtime->get(id);
    CHECK(run.output == 45);
    CHECK(runtime->steps(id).size() == 10);
  }
  MESSAGE("bodies per process: " << by_pid.begin()->second << " and "
                                 << (by_pid.size() > 1 ? by_pid.rbegin()->second : 0));
}

TEST_CASE("20 random kill -9s of a serving process during 100 runs lose no run (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db"), log = dir.file("bodies");
  auto runtime = client(db, log);
  std::vector<std::string> ids;
  // 1,000 bodies of 15 ms on a worker's few step threads take longer than the 20 lives of the
  // loop below, so every kill lands while work remains.
  for (int i = 0; i < 100; ++i) ids.push_back(runtime->start("job", {{"i", i}, {"ms", 15}}));
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> lifetime_ms(30, 250);
  int killed_during_work = 0;
  for (int kill_no = 0; kill_no < 20; ++kill_no) {
    const pid_t worker = spawn_worker(db, log);
    std::this_thread::sleep_for(std::chrono::milliseconds(lifetime_ms(random)));
    kill(worker, SIGKILL);
    CHECK(reap(worker) == -SIGKILL);
    killed_during_work += completed(*runtime, "job") < 100;
  }
  const std::size_t before_last = completed(*runtime, "job");
  CHECK(before_last < 100);
  const pid_t last = spawn_worker(db, log);
  const bool done = test::eventually([&] { return completed(*runtime, "job") == 100; }, 60s, 20ms);
  kill(last, SIGTERM);
  CHECK(reap(last) == 0);
  REQUIRE(done);

  // No run lost, no duplicate journal entry: each run holds exactly s0..s9 and the sum.
  for (const std::string& id : ids) {
    CHECK(runtime->get(id).output == 45);
    const std::vector<StepInfo> rows = runtime->steps(id);  // every journal row of the run
    std::set<std::string> keys;
    for (const StepInfo& step : rows) keys.insert(step.id);
    CHECK(rows.size() == 10);
    CHECK(keys.size() == 10);
    CHECK(keys.count("s0") == 1);
    CHECK(keys.count("s9") == 1);
  }
  // At least once: a body interrupted by a kill runs again, but only those.
  const auto runs_of = test::bodies_by_step(log);
  const int again = test::bodies_run_again(runs_of);
  CHECK(runs_of.size() == 1000);
  MESSAGE("kills during work: " << killed_during_work << " of 20; runs completed before the last "
                                << "worker: " << before_last << "; bodies run again: " << again);
}

TEST_CASE(
    "20 random kill -9s of a serving process during 100 runs of transfers in "
    "step.transaction apply none twice (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db"), log = dir.file("bodies");
  // The test's own runtime has only the workflows it runs itself: the tables, and reading them.
  Runtime bank(RuntimeOptions{.database = db, .log_level = LogLevel::off});
  bank.add(Workflow("sql", [](Step& step, const json& input) -> json {
    return step.transaction("sql", [&](Sql& sql) {
      for (const json& text : input.at("before")) sql.exec(text.get<std::string>());
      return sql.query(input.at("text").get<std::string>());
    });
  }));
  const auto query = [&](const std::string& text, json before = json::array()) {
    const std::string id = bank.start("sql", {{"text", text}, {"before", std::move(before)}});
    bank.run_until_idle();
    REQUIRE(bank.get(id).status == Status::completed);
    return bank.get(id).output;
  };
  query("SELECT 1 AS ok", {"CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER)",
                           "INSERT INTO accounts VALUES ('alice', 100000), ('bob', 100000)",
                           "CREATE TABLE applied (transfer TEXT NOT NULL)"});
  Runtime starter(RuntimeOptions{.database = db, .log_level = LogLevel::off});
  starter.add(test::transfers_workflow(log));
  std::vector<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    ids.push_back(starter.start("transfers", {{"amount", i + 1},
                                              {"from", i % 2 == 0 ? "alice" : "bob"},
                                              {"to", i % 2 == 0 ? "bob" : "alice"}}));
  }
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> lifetime_ms(30, 250);
  // The kills are the test's, not the runs' fault: a slow build (ThreadSanitizer, PostgreSQL)
  // can see one run held by five of them in a row, which quarantines it by default.
  const std::string kNoQuarantine = "1000";
  for (int kill_no = 0; kill_no < 20; ++kill_no) {
    const pid_t worker = spawn_worker(db, log, kNoQuarantine);
    std::this_thread::sleep_for(std::chrono::milliseconds(lifetime_ms(random)));
    kill(worker, SIGKILL);
    CHECK(reap(worker) == -SIGKILL);
  }
  const pid_t last = spawn_worker(db, log, kNoQuarantine);
  const bool done =
      test::eventually([&] { return completed(starter, "transfers") == 100; }, 60s, 20ms);
  kill(last, SIGTERM);
  // When the kills left nothing to do, the SIGTERM may come before serve() handles it.
  const int exit = reap(last);
  CHECK((exit == 0 || exit == -SIGTERM));
  REQUIRE(done);
  const json twice = query(
      "SELECT transfer, count(*) AS n FROM applied GROUP BY transfer "
      "HAVING count(*) > 1");
  const json applied = query("SELECT count(*) AS n FROM applied");
  const json total = query("SELECT sum(balance) AS total FROM accounts");
  CHECK(twice.empty());
  CHECK(applied[0]["n"] == 500);
  CHECK(total[0]["total"] == 200000);
  // The bodies a kill interrupted ran again, and their writes were rolled back with them.
  const int again = test::bodies_run_again(test::bodies_by_step(log));
  MESSAGE("transfers applied twice: " << twice.size() << "; applied " << applied[0]["n"]
                                      << " of 500; bodies run again after kills: " << again);
}

TEST_CASE(
    "SIGTERM stops a serving process gracefully: the running body finishes, the run goes on (on "
    "each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db"), log = dir.file("bodies");
  auto runtime = client(db, log);
  const std::string id = runtime->start("slow");
  const pid_t worker = spawn_worker(db, log);
  REQUIRE(test::eventually([&] { return logged(log, "begin-first"); }, 20s, 20ms));
  kill(worker, SIGTERM);
  CHECK(reap(worker) == 0);
  // The 600 ms body finished and the second step did not start: the log holds just these two.

  const std::vector<test::Body> bodies = test::read_bodies(log);
  REQUIRE(bodies.size() == 2);
  CHECK(bodies[1].step == "end-first");
  RunInfo run = runtime->get(id);
  CHECK(run.status == Status::pending);  // handed back, for the next worker at once
  CHECK(run.history.back().reason == "handed back: its runtime was stopped");
  REQUIRE(runtime->steps(id).size() == 1);
  CHECK(runtime->steps(id)[0].status == "completed");

  const pid_t next = spawn_worker(db, log);
  const bool done =
      test::eventually([&] { return runtime->get(id).status == Status::completed; }, 20s, 20ms);
  kill(next, SIGTERM);
  CHECK(reap(next) == 0);
  REQUIRE(done);
  int first_bodies = 0;
  for (const test::Body& body : test::read_bodies(log)) first_bodies += body.step == "begin-first";
  CHECK(first_bodies == 1);
}

TEST_CASE("a second SIGTERM during a graceful stop exits at once (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db"), log = dir.file("bodies");
  auto runtime = client(db, log);
  const std::string id = runtime->start("slow");
  const pid_t worker = spawn_worker(db, log);
  REQUIRE(test::eventually([&] { return logged(log, "begin-first"); }, 20s, 20ms));
  kill(worker, SIGTERM);
  std::this_thread::sleep_for(50ms);
  kill(worker, SIGTERM);
  CHECK(reap(worker) == 128 + SIGTERM);
  CHECK(!logged(log, "end-first"));  // the 600 ms body was cut short, not waited for
  CHECK(runtime->steps(id).empty());
}

TEST_CASE(
    "a run that kills every worker claiming it is quarantined, and the runs beside it go on") {
  // The default, and the lowest allowed: from one crashed claim on, a run is claimed alone.
  int quarantine_after = RuntimeOptions{}.quarantine_after;
  int most_bodies = 3;  // of a run beside the poison: two crashed batches and the last
  SUBCASE("quarantine_after 5") {}
  SUBCASE("quarantine_after 2") {
    quarantine_after = 2;
    most_bodies = 2;
  }
  CAPTURE(quarantine_after);
  test::TempDir dir;
  const std::string db = dir.file("db"), log = dir.file("bodies");
  auto runtime = client(db, log);
  runtime->add(test::poison_workflow(log));
  const std::string poison = runtime->start("poison");
  for (int i = 0; i < 6; ++i) runtime->start("job", {{"i", i}});
  const auto settled = [&] {
    return runtime->get(poison).status == Status::failed && completed(*runtime, "job") == 6;
  };
  // Each worker either dies at the poison's step, or lives on once the poison is failed. Without
  // the quarantine the poison would be claimed first by every worker, forever.
  int deaths = 0;
  bool done = false;
  for (int life = 0; life < 12 && !done; ++life) {
    const pid_t worker = spawn_worker(db, log, std::to_string(quarantine_after));
    int status = 0;
    bool died = false;
    test::eventually(
        [&] {
          died = waitpid(worker, &status, WNOHANG) == worker;
          return died || settled();
        },
        60s, 20ms);
    if (died) {
      CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
      ++deaths;
      continue;
    }
    done = settled();
    kill(worker, SIGTERM);
    CHECK(reap(worker) == 0);
  }
  REQUIRE(done);
  CHECK(deaths == quarantine_after);

  const RunInfo run = runtime->get(poison);
  REQUIRE(run.error.has_value());
  CHECK(run.error->type == "durable::Quarantined");
  CHECK(run.error->message.find("died " + std::to_string(quarantine_after) + " times in a row") !=
        std::string::npos);
  CHECK(run.history.back().reason.find("quarantined") == 0);
  CHECK(runtime->steps(poison).empty());
  // The runs claimed with the poison were suspected with it until they were claimed one at a
  // time: none of their bodies ran more often than the crashed batches they were in, and once.
  std::map<std::pair<std::string, std::string>, int> runs_of;
  int booms = 0;
  for (const test::Body& body : test::read_bodies(log)) {
    if (body.step == "boom") {
      ++booms;
    } else {
      ++runs_of[{body.run, body.step}];
    }
  }
  CHECK(booms == deaths);
  CHECK(runs_of.size() == 60);
  for (const auto& [key, n] : runs_of) CHECK(n <= most_bodies);

  // An operator's retry after the fix starts from a clean count.
  runtime->retry(poison);
  SQLite::Database look(db, SQLite::OPEN_READONLY);
  SQLite::Statement crashes(look, "SELECT crashes FROM runs WHERE id = ?");
  crashes.bind(1, poison);
  REQUIRE(crashes.executeStep());
  CHECK(crashes.getColumn(0).getInt() == 0);
}

TEST_CASE("a kill -9ed worker's run shows as orphaned, and the worker stops counting as live") {
  test::TempDir dir;
  const std::string db = dir.file("db"), log = dir.file("bodies");
  ops::Admin admin(db);  // no Runtime in this process: only the workers count
  const auto workers = [&] { return admin.stats().at("workers").get<int>(); };
  CHECK(workers() == 0);
  // A 600 ms lease: its heartbeat touches it every 200 ms; dead, it is stale after 1.2 s.
  const pid_t first = spawn_worker(db, log, "5", "600");
  REQUIRE(test::eventually([&] { return workers() == 1; }, 20s, 20ms));
  const std::string id =
      admin.start({.workflow = "slow", .queue_unknown = true}).at("id").get<std::string>();
  REQUIRE(test::eventually([&] { return logged(log, "begin-first"); }, 20s, 20ms));

  json run = admin.list({}).at("runs").at(0);
  CHECK(run.at("id") == id);
  CHECK(run.at("status") == "running");
  CHECK(run.at("worker") == holder(first));
  CHECK(run.at("lease_until").is_string());
  CHECK(run.at("orphaned") == false);

  kill(first, SIGKILL);
  CHECK(reap(first) == -SIGKILL);
  // Nothing renews the lease now: the run stays running, held by the dead process, until a
  // worker takes it over.
  REQUIRE(test::eventually([&] { return admin.show(id).at("orphaned") == true; }, 20s, 20ms));
  run = admin.show(id);
  CHECK(run.at("status") == "running");
  CHECK(run.at("worker") == holder(first));
  const std::string runs = durable_cli("--db '" + db + "' runs");
  CHECK(test::has(runs, "running (orphaned)"));
  CHECK(test::has(runs, holder(first)));
  const std::string shown = durable_cli("--db '" + db + "' show " + id);
  CHECK(test::has(shown, "held by"));
  CHECK(test::has(shown, "(lapsed: orphaned"));
  // Its row stays (it owns a running run), but it is no longer seen.
  REQUIRE(test::eventually([&] { return workers() == 0; }, 20s, 20ms));
  {
    SQLite::Database look(db, SQLite::OPEN_READONLY);
    CHECK(look.execAndGet("SELECT count(*) FROM workers").getInt() == 1);
  }

  const pid_t second = spawn_worker(db, log, "5", "600");
  const bool done = test::eventually(
      [&] { return admin.show(id).at("status") == "completed" && workers() == 1; }, 30s, 20ms);
  run = admin.show(id);
  kill(second, SIGTERM);
  CHECK(reap(second) == 0);
  REQUIRE(done);
  CHECK_FALSE(run.contains("worker"));
  CHECK_FALSE(run.contains("lease_until"));
  CHECK(run.at("orphaned") == false);
}

TEST_CASE(
    "kill -9 mid fan-out: the items that had ended are journaled and do not run again (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db"), log = dir.file("bodies");
  auto runtime = client(db, log);
  runtime->add(test::fanout_workflow(log));
  // Items 0-2 take 100 ms, items 3-7 1.5 s each.
  const std::string id = runtime->start("fanout", {{"slow_ms", 1500}});
  const auto journaled = [&] {
    std::set<std::string> keys;
    for (const StepInfo& step : runtime->steps(id)) {
      if (step.status == "completed") keys.insert(step.id);
    }
    return keys;
  };
  const std::set<std::string> quick = {"item[0]", "item[1]", "item[2]"};
  pid_t worker = spawn_worker(db, log);
  // The quick items are durable as they end, while the slow ones still run.
  REQUIRE(test::eventually([&] { return journaled() == quick; }, 30s, 20ms));
  kill(worker, SIGKILL);
  CHECK(reap(worker) == -SIGKILL);
  CHECK(journaled() == quick);

  worker = spawn_worker(db, log);
  REQUIRE(
      test::eventually([&] { return runtime->get(id).status == Status::completed; }, 60s, 20ms));
  kill(worker, SIGTERM);
  CHECK(reap(worker) == 0);
  CHECK(runtime->get(id).output == 28);
  std::map<std::string, int> runs_of;  // body executions per item, over both workers
  for (const test::Body& body : test::read_bodies(log)) ++runs_of[body.step];
  MESSAGE("bodies per item: " << json(runs_of).dump());
  for (int i = 0; i < 8; ++i) {
    const std::string item = "item-" + std::to_string(i);
    CAPTURE(item);
    // A quick item ran once; a slow one ran again only if the kill cut it short.
    if (i < 3) {
      CHECK(runs_of[item] == 1);
    } else {
      CHECK(runs_of[item] >= 1);
      CHECK(runs_of[item] <= 2);
    }
  }
}
