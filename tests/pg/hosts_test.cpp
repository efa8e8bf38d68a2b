// SPDX-License-Identifier: Apache-2.0
// Workers on several hosts sharing one PostgreSQL database. The hosts are made by the test
// itself: a network namespace for the database server and one per host, each host linked to the
// server's by a veth pair on a subnet of its own (10.201.N.0/24, addresses that exist only in
// these namespaces), and each worker in new UTS and PID namespaces (its own host name and
// process ids: a host of its own as far as durable can tell). Needs root (ip netns, unshare);
// without it the test says so and fails.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <durable/durable.hpp>
#include <map>
#include <set>
#include <thread>

#include "stores.hpp"
#include "support.hpp"
#include "worker_workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

constexpr int kHosts = 3;

void sh(const std::string& command) {
  const std::pair<int, std::string> result = test::run_shell(command + " 2>&1");
  INFO(command << "\n" << result.second);
  REQUIRE(result.first == 0);
}

// `command` run in the network namespace `ns` (made by `ip netns add`). By nsenter, which
// switches only the network namespace: `ip -n` and `ip netns exec` also make a mount namespace
// and remount / and /sys in it, which fails where / is no mount point (a chroot).
std::string in_ns(const std::string& ns, const std::string& command) {
  return "nsenter --net=/var/run/netns/" + ns + " " + command;
}

// Moves the calling thread into a network namespace made by `ip netns add`, and back at the end
// of the scope. Sockets opened meanwhile stay in it.
class InNamespace {
 public:
  explicit InNamespace(const std::string& name)
      : home_(::open("/proc/thread-self/ns/net", O_RDONLY)) {
    REQUIRE(home_ >= 0);
    const int target = ::open(("/var/run/netns/" + name).c_str(), O_RDONLY);
    REQUIRE(target >= 0);
    REQUIRE(::setns(target, CLONE_NEWNET) == 0);
    ::close(target);
  }
  ~InNamespace() {
    ::setns(home_, CLONE_NEWNET);
    ::close(home_);
  }
  InNamespace(const InNamespace&) = delete;
  InNamespace& operator=(const InNamespace&) = delete;

 private:
  int home_;
};

// The namespaces, links and database server of the test, removed at the end.
class Hosts {
 public:
  explicit Hosts(const std::string& dir) : dir_(dir), tag_(std::to_string(::getpid() % 100000)) {}
  // Makes the namespaces and links and starts the server; the destructor removes whatever of
  // them exists, also after a failure half-way.
  void setup() {
    REQUIRE_MESSAGE(::geteuid() == 0, "the multi-host test makes network namespaces: run as root");
    sh("ip netns add " + db_ns());
    sh(in_ns(db_ns(), "ip link set lo up"));
    for (int h = 1; h <= kHosts; ++h) {
      const std::string host = host_ns(h), near = "dh" + std::to_string(h) + "_" + tag_,
                        far = "hh" + std::to_string(h) + "_" + tag_;
      sh("ip netns add " + host);
      sh(in_ns(host, "ip link set lo up"));
      sh("ip link add " + near + " netns " + db_ns() + " type veth peer name " + far + " netns " +
         host);
      sh(in_ns(db_ns(), "ip addr add " + server_address(h) + "/24 dev " + near));
      sh(in_ns(host, "ip addr add 10.201." + std::to_string(h) + ".2/24 dev " + far));
      sh(in_ns(db_ns(), "ip link set " + near + " up"));
      sh(in_ns(host, "ip link set " + far + " up"));
    }
    started_ = true;  // from here on, a half-started cluster is stopped at the end too
    // fsync off: what is tested is who may commit, not the server's own durability, and a
    // commit stalled behind the disk must not look like a worker gone quiet.
    sh(in_ns(db_ns(), "env PG_LISTEN='*' PG_FSYNC=off bash " +
                          std::string(DURABLE_PG_CLUSTER_SCRIPT) + " start " + dir_ + "/pg " +
                          std::to_string(DURABLE_SPARE_PG_PORT)));
  }
  ~Hosts() {
    for (const auto& [pid, host] : workers_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (started_) {
      test::run_shell("bash " + std::string(DURABLE_PG_CLUSTER_SCRIPT) + " stop " + dir_ + "/pg");
    }
    for (int h = 1; h <= kHosts; ++h) test::run_shell("ip netns del " + host_ns(h) + " 2>&1");
    test::run_shell("ip netns del " + db_ns() + " 2>&1");
  }
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  std::string db_ns() const { return "durdb" + tag_; }

  // The database as host h reaches it.
  std::string uri(int h) const {
    return "postgresql://postgres@" + server_address(h) + ":" +
           std::to_string(DURABLE_SPARE_PG_PORT) + "/postgres";
  }

  // A serving worker on host h (durable_serve_worker with a 4 s lease), in new UTS and PID
  // namespaces inside the host's network namespace; killing it kills everything of the host.
  void start_worker(int h, const std::string& log) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      if (freopen("/dev/null", "w", stdout) == nullptr) _exit(126);
      const std::string command = "hostname host" + std::to_string(h) + " && exec " +
                                  DURABLE_SERVE_WORKER + " '" + uri(h) + "' '" + log + "' 0 4000";
      const std::string net = "--net=/var/run/netns/" + host_ns(h);  // as in_ns()
      execlp("nsenter", "nsenter", net.c_str(), "unshare", "--uts", "--pid", "--fork",
             "--kill-child", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    workers_.emplace(pid, h);
  }
  // Kills host h whole: its worker and everything in its PID namespace.
  void kill_host(int h) {
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->second != h) {
        ++it;
        continue;
      }
      ::kill(it->first, SIGKILL);
      ::waitpid(it->first, nullptr, 0);
      it = workers_.erase(it);
    }
  }
  void cut(int h) {
    sh(in_ns(host_ns(h), "ip link set hh" + std::to_string(h) + "_" + tag_ + " down"));
  }
  void restore(int h) {
    sh(in_ns(host_ns(h), "ip link set hh" + std::to_string(h) + "_" + tag_ + " up"));
  }

 private:
  std::string host_ns(int h) const { return "durh" + std::to_string(h) + "_" + tag_; }
  static std::string server_address(int h) { return "10.201." + std::to_string(h) + ".1"; }

  std::string dir_, tag_;
  bool started_ = false;
  std::map<pid_t, int> workers_;  // pid -> host
};

}  // namespace

TEST_CASE(
    "workers on three hosts share one PostgreSQL database: every run once, a host killed whole "
    "is taken over after its lease, a host cut off cannot commit late") {
  test::TempDir dir;
  Hosts hosts(dir.path().string());
  hosts.setup();
  // The test itself reads and starts runs from the database's own namespace.
  const InNamespace in_db(hosts.db_ns());
  const std::string log = dir.file("bodies");
  // The test's own view, from the database's namespace (it starts runs and reads them).
  RuntimeOptions options = test::quiet(hosts.uri(1));
  auto runtime = std::make_unique<Runtime>(options);
  runtime->add(test::job_workflow(log));
  const auto completed = [&] {
    return runtime->list({.status = Status::completed, .workflow = "job", .limit = 100'000}).size();
  };
  // Each run completed once, and nothing was written for it after: a late commit of a worker
  // that lost the run would have added a transition (or failed it) after its completion.
  const auto check_runs = [&](const std::vector<std::string>& ids) {
    for (const std::string& id : ids) {
      const RunInfo run = runtime->get(id);
      CHECK(run.output == 45);
      CHECK(runtime->steps(id).size() == 10);
      int completions = 0;
      for (const Transition& t : run.history) completions += t.status == Status::completed ? 1 : 0;
      CHECK(completions == 1);
      REQUIRE_FALSE(run.history.empty());
      CHECK(run.history.back().status == Status::completed);
    }
  };
  const auto taken_over = [&](const std::vector<std::string>& ids) {
    int n = 0;
    for (const std::string& id : ids) {
      for (const Transition& t : runtime->get(id).history) {
        n += t.reason.starts_with("taken over") ? 1 : 0;
      }
    }
    return n;
  };

  // 1. 300 runs x 10 steps over three hosts: each completes once, no body runs twice.
  std::vector<std::string> first;
  for (int i = 0; i < 300; ++i) first.push_back(runtime->start("job", {{"i", i}}));
  for (int h = 1; h <= kHosts; ++h) hosts.start_worker(h, log);
  REQUIRE(test::eventually([&] { return completed() == 300; }, 120s, 50ms));
  auto bodies = test::bodies_by_step(log);
  CHECK(bodies.size() == 3000);
  CHECK(test::bodies_run_again(bodies) == 0);
  check_runs(first);

  // 2. Host 1 killed whole mid-run: hosts 2 and 3 take its runs over once its lease lapsed.
  std::vector<std::string> second;
  for (int i = 0; i < 60; ++i) second.push_back(runtime->start("job", {{"i", i}, {"ms", 40}}));
  REQUIRE(
      test::eventually([&] { return test::bodies_by_step(log).size() >= 3000 + 60; }, 60s, 50ms));
  hosts.kill_host(1);
  REQUIRE(test::eventually([&] { return completed() == 360; }, 120s, 50ms));
  bodies = test::bodies_by_step(log);
  const int again_after_kill = test::bodies_run_again(bodies);
  CHECK(bodies.size() == 3600);
  check_runs(second);
  const int taken_from_1 = taken_over(second);
  CHECK(taken_from_1 > 0);  // host 1 held runs when it was killed

  // 3. A host cut off mid-run, then linked again: the other takes its runs over; the cut host's
  // late commits are refused, and nothing is journaled twice. Which host to cut is read from
  // the runs: a worker may claim a whole batch of quick runs at once, so either may hold them.
  std::vector<std::string> third;
  for (int i = 0; i < 60; ++i) third.push_back(runtime->start("job", {{"i", i}, {"ms", 40}}));
  REQUIRE(
      test::eventually([&] { return test::bodies_by_step(log).size() >= 3600 + 60; }, 60s, 50ms));
  const auto running_on = [&](int h) {
    int held = 0;
    for (const RunInfo& run :
         runtime->list({.status = Status::running, .workflow = "job", .limit = 1000})) {
      held += run.worker.starts_with("host" + std::to_string(h) + ":") ? 1 : 0;
    }
    return held;
  };
  // Cut the host holding the most running runs. A run yields its turn now and then, and a host
  // may hold none for a moment, so what it holds is read again once it is cut off (and can
  // change nothing): if that is none, it is linked again and the choice made anew.
  int cut = 0;
  int held_when_cut = 0;
  for (int attempt = 0; attempt < 10 && held_when_cut == 0; ++attempt) {
    REQUIRE(test::eventually(
        [&] {
          cut = running_on(2) >= running_on(3) ? 2 : 3;
          return running_on(cut) > 0;
        },
        10s, 5ms));
    hosts.cut(cut);
    std::this_thread::sleep_for(300ms);  // what it sent before the cut has landed
    held_when_cut = running_on(cut);
    if (held_when_cut == 0) hosts.restore(cut);
  }
  REQUIRE(held_when_cut > 0);
  REQUIRE(test::eventually([&] { return completed() == 420; }, 120s, 50ms));
  hosts.restore(cut);
  std::this_thread::sleep_for(3s);  // the cut host gets its answers: its commits are refused
  bodies = test::bodies_by_step(log);
  CHECK(bodies.size() == 4200);
  check_runs(third);
  const int taken_from_cut = taken_over(third);
  CHECK(taken_from_cut > 0);  // the cut host held runs when it was cut off
  CHECK(completed() == 420);
  MESSAGE("bodies run again: after killing host 1 "
          << again_after_kill << ", after cutting host " << cut << " "
          << test::bodies_run_again(bodies) - again_after_kill << "; runs taken over from host 1: "
          << taken_from_1 << ", from host " << cut << ": " << taken_from_cut);
}
