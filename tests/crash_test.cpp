// SPDX-License-Identifier: Apache-2.0
// Crash safety with real processes: kill -9 in the middle of a run, restart on the same file.

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

pid_t spawn(const std::vector<std::string>& args) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (freopen("/dev/null", "w", stdout) == nullptr) _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Log lines "what time_ms", in order.
std::vector<std::pair<std::string, long long>> read_log(const std::string& path) {
  std::vector<std::pair<std::string, long long>> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto space = line.rfind(' ');
    if (space == std::string::npos) continue;
    lines.emplace_back(line.substr(0, space), std::stoll(line.substr(space + 1)));
  }
  return lines;
}

int count(const std::vector<std::pair<std::string, long long>>& log, const std::string& what) {
  int n = 0;
  for (const auto& [line, at] : log) n += line == what;
  return n;
}

bool wait_for_line(const std::string& path, const std::string& what, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (count(read_log(path), what) > 0) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

int wait_exit(pid_t pid) {
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

// Kills a worker with kill -9 while step3's body runs, restarts one on the same file, and
// checks what ran how often and how soon recovery began.
static void check_kill9_recovery(const std::string& mode) {
  test::TempDir dir;
  const std::string db = dir.file("crash.db"), log = dir.file("bodies.log");
  const pid_t first = spawn({DURABLE_CRASH_WORKER, db, log, "start", "--hang", mode});
  REQUIRE(wait_for_line(log, "body step3", 30s));
  REQUIRE(kill(first, SIGKILL) == 0);
  const int killed = wait_exit(first);
  REQUIRE(WIFSIGNALED(killed));
  CHECK(WTERMSIG(killed) == SIGKILL);

  const pid_t second = spawn({DURABLE_CRASH_WORKER, db, log, "resume", mode});
  const int resumed = wait_exit(second);
  REQUIRE(WIFEXITED(resumed));
  CHECK(WEXITSTATUS(resumed) == 0);

  const auto lines = read_log(log);
  CHECK(count(lines, "body step1") == 1);
  CHECK(count(lines, "body step2") == 1);
  CHECK(count(lines, "body step3") == 2);
  CHECK(count(lines, "body step4") == 1);

  long long restart_at = 0, step3_again_at = 0;
  for (const auto& [line, at] : lines) {
    if (line == "process resume") restart_at = at;
    if (line == "body step3" && restart_at != 0) step3_again_at = at;
  }
  REQUIRE(restart_at != 0);
  REQUIRE(step3_again_at != 0);
  MESSAGE("recovery: step3 ran again " << step3_again_at - restart_at << " ms after the restart");
  CHECK(step3_again_at - restart_at < 1000);  // the lease is 30 s: this is not a lease expiry

  Runtime runtime({.database = db});
  const auto runs = runtime.list();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].status == Status::completed);
  CHECK(runs[0].output == 4);
  const auto steps = runtime.steps(runs[0].id);
  REQUIRE(steps.size() == 4);
  for (const auto& s : steps) CHECK(s.attempts == 1);
  // The killed process's worker row was forgotten once its run was taken over.
  SQLite::Database file(db);
  CHECK(file.execAndGet("SELECT count(*) FROM workers").getInt() == 1);
}

TEST_CASE(
    "kill -9 mid-run: completed steps do not run again, the interrupted one does, "
    "and recovery starts within a second") {
  check_kill9_recovery("--every-step");
}

TEST_CASE("kill -9 mid-run under on_recovery recovers the same way") {
  check_kill9_recovery("--on-recovery");
}

TEST_CASE("a running run of a live process on the same file is not taken over (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "live.db"), log = dir.file("bodies.log");
  const pid_t owner = spawn({DURABLE_CRASH_WORKER, db, log, "start", "--hang"});
  REQUIRE(wait_for_line(log, "body step3", 30s));
  {
    Runtime other({.database = db});
    other.add(Workflow("crashy", [](Step&, const json&) -> json { return "stolen"; }));
    CHECK(other.run_until_idle() == 0);
    CHECK(other.list().at(0).status == Status::running);
  }
  kill(owner, SIGKILL);
  wait_exit(owner);
}
