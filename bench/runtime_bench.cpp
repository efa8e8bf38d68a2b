// SPDX-License-Identifier: Apache-2.0
// durable_runtime_bench: the benchmarks of DESIGN.md §4 that need the worker loop: many concurrent
// runs executed by serve(), the recovery of 10,000 runs after a restart, and the memory a sleeping
// run holds. Each figure stands beside the raw SQLite figure measured in the same run on the same
// file system, where one makes sense.
//
//   durable_runtime_bench [--quick] [DIR]
//
// DIR (default: a fresh directory under /tmp, removed afterwards) holds the database files; each
// measurement uses a fresh file and deletes it. --quick shrinks sizes and repetitions so the run
// takes seconds (the runtime_bench_smoke test uses it); its figures are not meant to be quoted.
//
// What is timed:
// - concurrent runs: `runs` runs of `steps` trivial steps are started, then serve() is started on
//   a thread (poll_interval 5 ms) and the clock runs until the runtime's counters report every
//   run completed (read every millisecond; list() confirms it afterwards). Beside it, as many
//   one-row INSERT + COMMIT transactions as steps into a journal-shaped table, WAL, the same
//   synchronous level, measured just before it; the ratio is the median of the per-repetition
//   ratios of these back-to-back pairs.
// - recovery: a database holding 10,000 runs of a 2-step workflow, either pending (started by a
//   runtime that was closed) or claimed ('running') by a child process that is then killed with
//   SIGKILL. Timed: from just before a fresh Runtime's constructor until serve() on a thread has
//   completed every run (2 steps each). Beside it: a raw connection opening the file and reading
//   the 10,000 rows of the runs table. A second table shows the phases of the same recoveries:
//   the first run completed, the runs completed by 1 s and by 10 s, and when the last of the
//   10,000 first-step bodies ran (every run claimed and its first invocation made).
// - memory: in a fresh process (this program re-executed, so no freed heap of the parent makes
//   growth look free) a Runtime starts 10,000 runs of a workflow that does one step and sleeps an
//   hour, and run_until_idle() executes them until all sleep. VmRSS (/proc/self/status) is read
//   before run_until_idle() (the runs pending, after a warm-up batch ran to sleep, so the step
//   threads and caches exist) and after it.
//
// The program re-executes itself with --claim-child or --memory-child for the child processes.

#include <SQLiteCpp/SQLiteCpp.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <durable/durable.hpp>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_support.hpp"

namespace {

using namespace durable::bench;

using durable::Replay;

// ---- settings ---------------------------------------------------------------------------------

struct Sizes {
  int reps = 5;          // repetitions of each normal-sync throughput figure
  int reps_full = 3;     // repetitions of each full-sync figure (every commit is an fsync)
  double budget_s = 30;  // no repetition starts after this long within one durability
  double budget_full_s = 60;
  int runs = 1000, steps_per_run = 10;
  int recovery_runs = 10'000;
  int recovery_reps = 3;
  int memory_runs = 10'000;
  int memory_reps = 3;
  double deadline_s = 180;  // a figure that takes longer than this is reported as not reached
};

Sizes quick_sizes() {
  Sizes s;
  s.reps = 1;
  s.reps_full = 1;
  s.runs = 20;
  s.recovery_runs = 48;
  s.recovery_reps = 1;
  s.memory_runs = 200;
  s.memory_reps = 1;
  s.deadline_s = 60;
  return s;
}

constexpr int kWarmupRuns = 16;  // memory: runs taken to sleep before the baseline is read

durable::RuntimeOptions options_for(const std::string& path, Durability durability,
                                    Replay replay = Replay::every_step) {
  durable::RuntimeOptions options;
  options.database = path;
  options.durability = durability;
  options.replay = replay;
  options.poll_interval = std::chrono::milliseconds(5);
  options.log_level = durable::LogLevel::off;
  return options;
}

// ---- child processes --------------------------------------------------------------------------

// A copy of this program started with `args`, its standard output readable from `output`.
struct Child {
  pid_t pid = -1;
  int output = -1;
};

Child spawn_self(const std::vector<std::string>& args) {
  // Everything the child needs is built before fork(): after it, only exec-safe calls.
  std::vector<std::string> owned{"durable_runtime_bench"};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : owned) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(fds[1]);
  return Child{pid, fds[0]};
}

// The child's next line of output (without the newline); nullopt at its end or after `limit`.
std::optional<std::string> read_line(int fd, std::chrono::seconds limit) {
  std::string line;
  const auto deadline = Stopwatch::now() + limit;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Stopwatch::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd waiting{fd, POLLIN, 0};
    if (poll(&waiting, 1, static_cast<int>(left.count())) <= 0) continue;
    char c = 0;
    const ssize_t n = read(fd, &c, 1);
    if (n <= 0) return std::nullopt;
    if (c == '\n') return line;
    line += c;
  }
}

int reap(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// ---- 1. concurrent runs under serve() ----------------------------------------------------------

// Throws unless exactly `expected` runs have this status.
void check_status_count(const durable::Runtime& runtime, durable::Status status,
                        std::size_t expected, const std::string& workflow) {
  durable::RunFilter filter;
  filter.status = status;
  filter.workflow = workflow;
  filter.limit = expected + 1;
  if (const std::size_t found = runtime.list(filter).size(); found != expected) {
    throw std::runtime_error(std::to_string(found) + " runs are " +
                             std::string(durable::to_string(status)) + ", expected " +
                             std::to_string(expected));
  }
}

// How a serve() run went: the seconds from the start until every run was completed, until the
// first was, and the runs completed by the 1 s and 10 s marks (or by the end, if sooner).
struct Served {
  double seconds = 0, first_done_s = 0;
  std::uint64_t done_at_1s = 0, done_at_10s = 0;
};

// Serves `runtime` on a thread until its counters report `runs` runs completed, reading them every
// millisecond, and confirms the count with list(). Throws when serve() fails or the deadline
// passes first.
Served serve_until_completed(durable::Runtime& runtime, const std::string& workflow,
                             std::uint64_t runs, Stopwatch::time_point start, double deadline_s) {
  std::exception_ptr failure;
  std::atomic<bool> ended{false};
  std::thread server([&] {
    try {
      runtime.serve();
    } catch (...) {
      failure = std::current_exception();
    }
    ended = true;
  });
  Served served;
  std::uint64_t done = 0;
  double now = 0;
  while ((done = runtime.counters().runs_completed) < runs && !ended &&
         (now = seconds_since(start)) < deadline_s) {
    if (done > 0 && served.first_done_s == 0) served.first_done_s = now;
    if (now < 1.0) served.done_at_1s = done;
    if (now < 10.0) served.done_at_10s = done;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  served.seconds = seconds_since(start);
  if (served.first_done_s == 0) served.first_done_s = served.seconds;
  if (served.seconds < 1.0) served.done_at_1s = done;
  if (served.seconds < 10.0) served.done_at_10s = done;
  runtime.stop();
  server.join();
  if (failure) std::rethrow_exception(failure);
  if (done < runs) {
    throw std::runtime_error("serve() completed " + std::to_string(done) + " of " +
                             std::to_string(runs) + " runs in " + std::to_string(served.seconds) +
                             " s");
  }
  check_status_count(runtime, durable::Status::completed, runs, workflow);
  return served;
}

// Steps per second of `runs` runs of `steps` steps each, started first, executed by serve().
double serve_step_rate(Scratch& scratch, Durability durability, int runs, int steps,
                       double deadline_s) {
  const std::string path = scratch.fresh("serve-" + std::string(name_of(durability)));
  double elapsed = 0;
  {
    durable::Runtime runtime(options_for(path, durability));
    runtime.add(loop_workflow());
    for (int r = 0; r < runs; ++r) runtime.start("loop", json{{"steps", steps}});
    const auto start = Stopwatch::now();
    elapsed =
        serve_until_completed(runtime, "loop", static_cast<std::uint64_t>(runs), start, deadline_s)
            .seconds;
  }
  Scratch::remove(path);
  return static_cast<double>(runs) * steps / elapsed;
}

// ---- the table ----------------------------------------------------------------------------------

std::string times(double ratio) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", ratio);
  return text;
}

// The concurrent-runs row of one durability: each repetition measures the raw commits, then the
// serve() run, back to back, so that both meet the same phase of a shared machine, whose fsync
// latency swings by an order of magnitude. Repetitions stop early, after the first, once the time
// budget is spent; `done` says how many ran.
Row concurrent_row(Scratch& scratch, const Sizes& sizes, Durability durability, int& done) {
  const bool full = durability == Durability::full;
  const int reps = full ? sizes.reps_full : sizes.reps;
  const double budget = full ? sizes.budget_full_s : sizes.budget_s;
  const int steps = sizes.runs * sizes.steps_per_run;
  const auto start = Stopwatch::now();
  std::vector<double> raw, served, ratios;
  for (done = 0; done < reps && (done == 0 || seconds_since(start) < budget); ++done) {
    raw.push_back(raw_insert_rate(scratch, durability, steps));
    served.push_back(
        serve_step_rate(scratch, durability, sizes.runs, sizes.steps_per_run, sizes.deadline_s));
    ratios.push_back(served.back() / raw.back());
  }
  const double rate = median(served), raw_rate = median(raw), ratio = median(ratios);
  return Row{std::to_string(sizes.runs) + " runs x " + std::to_string(sizes.steps_per_run) +
                 " steps, serve(), sync=" + std::string(name_of(durability)),
             with_commas(rate) + " steps/s, " + fixed(steps / rate * 1e3, "ms"),
             with_commas(raw_rate) + " rows/s, " + fixed(steps / raw_rate * 1e3, "ms"),
             times(ratio),
             !full          ? "-"
             : ratio >= 5.0 ? ">= 5x"
                            : ">= 5x (missed)"};
}

// ---- 2. recovery --------------------------------------------------------------------------------

// When the first step bodies of a recovery ran: how many so far, and when the last one expected
// began (in seconds since `start`).
struct FirstSteps {
  std::atomic<int> count{0};
  int expected = 0;
  Stopwatch::time_point start;
  std::atomic<double> all_s{0};
};

// Two trivial steps. With `hang`, the workflow code never gets to them (the claiming child's
// copy): the thread running it stays inside its claimed batch for good. (A hanging step body
// would not do: while bodies are slow, a claim takes a run per free step thread, so each
// claiming thread would hold one run.) With `first`, the first step's body counts itself.
durable::Workflow recover_workflow(bool hang, std::shared_ptr<FirstSteps> first = nullptr) {
  return durable::Workflow("recover", [hang, first](durable::Step& step, const json&) -> json {
    while (hang) std::this_thread::sleep_for(std::chrono::hours(1));
    const int a = step.run("first", [first] {
      if (first && first->count.fetch_add(1) + 1 == first->expected) {
        first->all_s = seconds_since(first->start);
      }
      return 1;
    });
    return step.run("second", [a] { return a + 1; });
  });
}

// Seconds a raw connection takes to open the file and read every row of its runs table; throws
// unless `expected` of them are runs of "recover" (the killed child's file also holds its 100
// warm-up runs).
double raw_read_runs(const std::string& path, int expected) {
  const auto start = Stopwatch::now();
  SQLite::Database db(path, SQLite::OPEN_READONLY);
  SQLite::Statement query(
      db, "SELECT id, workflow, correlation_id, status, input, due_at, owner FROM runs");
  struct RawRun {
    std::string id, workflow, correlation_id, status, input, owner;
    std::int64_t due_at = 0;
  };
  std::vector<RawRun> runs;
  while (query.executeStep()) {
    runs.push_back({query.getColumn(0).getString(), query.getColumn(1).getString(),
                    query.getColumn(2).getString(), query.getColumn(3).getString(),
                    query.getColumn(4).getString(), query.getColumn(6).getString(),
                    query.getColumn(5).getInt64()});
  }
  const double elapsed = seconds_since(start);
  const auto recover = std::count_if(runs.begin(), runs.end(),
                                     [](const RawRun& run) { return run.workflow == "recover"; });
  if (recover != expected) {
    throw std::runtime_error("the runs table holds " + std::to_string(recover) +
                             " runs of 'recover', not " + std::to_string(expected));
  }
  return elapsed;
}

int count_status(SQLite::Database& db, const char* status) {
  SQLite::Statement query(db, "SELECT count(*) FROM runs WHERE status = ?");
  query.bind(1, status);
  query.executeStep();
  return query.getColumn(0).getInt();
}

// A database of `runs` pending runs of "recover", started by a runtime that was then closed.
void leave_pending_runs(const std::string& path, int runs) {
  durable::Runtime runtime(options_for(path, Durability::normal));
  runtime.add(recover_workflow(false));
  for (int r = 0; r < runs; ++r) runtime.start("recover");
}

// The child of --claim-child: starts `runs` runs whose workflow code never ends and claims all of
// them, a claiming thread at a time until none is pending (each run_until_idle() claims one
// batch and stays inside it for good); then says "claimed" and waits to be killed.
int claim_child(const std::string& path, int runs) {
  durable::Runtime runtime(options_for(path, Durability::normal));
  runtime.add(recover_workflow(true));
  // Step bodies seen to end quickly first: only then does a claim take a whole batch.
  runtime.add(durable::Workflow("warm", [](durable::Step& step, const json&) -> json {
    return step.run("quick", [] { return 1; });
  }));
  for (int r = 0; r < 100; ++r) runtime.start("warm");
  runtime.run_until_idle();
  for (int r = 0; r < runs; ++r) runtime.start("recover");
  SQLite::Database look(path, SQLite::OPEN_READONLY);
  look.setBusyTimeout(10'000);
  std::vector<std::thread> claimers;
  for (int pending = count_status(look, "pending"); pending > 0;) {
    claimers.emplace_back([&runtime] { runtime.run_until_idle(); });
    const auto since = Stopwatch::now();
    int now_pending = pending;
    while ((now_pending = count_status(look, "pending")) == pending && seconds_since(since) < 5) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    pending = now_pending;
  }
  std::printf("claimed %zu\n", claimers.size());
  std::fflush(stdout);
  for (;;) pause();
}

// A database of `runs` runs claimed by a process that died: a child claims them all, then is
// killed with SIGKILL (and reaped, so its pid is seen to be gone).
void leave_claimed_runs(const std::string& path, int runs) {
  const Child child = spawn_self({"--claim-child", path, std::to_string(runs)});
  const std::optional<std::string> line = read_line(child.output, std::chrono::seconds(300));
  kill(child.pid, SIGKILL);
  reap(child.pid);
  close(child.output);
  if (!line || !line->starts_with("claimed")) {
    throw std::runtime_error("the claiming child process did not claim its runs");
  }
  SQLite::Database look(path, SQLite::OPEN_READONLY);
  if (const int running = count_status(look, "running"); running != runs) {
    throw std::runtime_error("the killed child left " + std::to_string(running) +
                             " runs running, not " + std::to_string(runs));
  }
}

struct Recovery {
  double raw_seconds = 0, first_steps_s = 0;
  Served served;
};

// Times the raw read of the file, then a fresh runtime serving until every run is completed.
Recovery recover(const std::string& path, int runs, double deadline_s) {
  Recovery result;
  result.raw_seconds = raw_read_runs(path, runs);
  auto first = std::make_shared<FirstSteps>();
  first->expected = runs;
  first->start = Stopwatch::now();
  durable::Runtime runtime(options_for(path, Durability::normal));
  runtime.add(recover_workflow(false, first));
  result.served = serve_until_completed(runtime, "recover", static_cast<std::uint64_t>(runs),
                                        first->start, deadline_s);
  result.first_steps_s = first->all_s;
  return result;
}

std::string duration_text(double seconds) {
  return seconds < 1.0 ? fixed(seconds * 1e3, "ms", 0) : fixed(seconds, "s", 2);
}

// The medians of one recovery case over its repetitions: a row of the main table, and one of the
// phases table (first run completed, runs done by 1 s and 10 s, every first step body begun).
struct RecoveryCase {
  std::string name;
  std::vector<Recovery> reps;

  Row row(int runs) const {
    const double d = pick([](const Recovery& r) { return r.served.seconds; });
    const double raw = pick([](const Recovery& r) { return r.raw_seconds; });
    return Row{"recover " + name + ", to all completed", duration_text(d),
               fixed(raw * 1e3, "ms") + " to read " + with_commas(runs) + " rows", times(d / raw),
               d < 0.5 ? "< 0.5 s (met)" : "< 0.5 s (missed)"};
  }
  Row phases() const {
    return Row{
        name, duration_text(pick([](const Recovery& r) { return r.served.first_done_s; })),
        with_commas(pick([](const Recovery& r) { return double(r.served.done_at_1s); })) + " / " +
            with_commas(pick([](const Recovery& r) { return double(r.served.done_at_10s); })),
        duration_text(pick([](const Recovery& r) { return r.first_steps_s; })),
        duration_text(pick([](const Recovery& r) { return r.served.seconds; }))};
  }
  template <class F>
  double pick(F field) const {
    std::vector<double> values;
    for (const Recovery& r : reps) values.push_back(field(r));
    return median(std::move(values));
  }
};

// Per repetition, the pending case, then the killed one, each on a fresh file.
std::vector<RecoveryCase> recovery_cases(Scratch& scratch, const Sizes& sizes) {
  const std::string n = with_commas(sizes.recovery_runs);
  RecoveryCase pending{n + " pending runs (closed runtime)", {}};
  RecoveryCase claimed{n + " runs claimed by a kill -9'd process", {}};
  for (int rep = 0; rep < sizes.recovery_reps; ++rep) {
    const std::string left = scratch.fresh("recover-pending");
    leave_pending_runs(left, sizes.recovery_runs);
    pending.reps.push_back(recover(left, sizes.recovery_runs, sizes.deadline_s));
    Scratch::remove(left);

    const std::string killed = scratch.fresh("recover-killed");
    leave_claimed_runs(killed, sizes.recovery_runs);
    claimed.reps.push_back(recover(killed, sizes.recovery_runs, sizes.deadline_s));
    Scratch::remove(killed);
  }
  return {pending, claimed};
}

// ---- 3. memory ----------------------------------------------------------------------------------

// One step, then a sleep of an hour: a run that stays sleeping.
durable::Workflow nap_workflow() {
  return durable::Workflow("nap", [](durable::Step& step, const json&) -> json {
    const int a = step.run("first", [] { return 1; });
    step.sleep("nap", std::chrono::hours(1));
    return step.run("second", [a] { return a + 1; });
  });
}

long rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      long kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(4096, '\n');
  }
  throw std::runtime_error("no VmRSS in /proc/self/status");
}

// The child of --memory-child: prints "RSS-before RSS-after" in bytes (see the file comment).
int memory_child(Replay replay, const std::string& path, int runs) {
  durable::Runtime runtime(options_for(path, Durability::normal, replay));
  runtime.add(nap_workflow());
  for (int r = 0; r < kWarmupRuns; ++r) runtime.start("nap");
  runtime.run_until_idle();
  for (int r = 0; r < runs; ++r) runtime.start("nap");
  const long before = rss_bytes();
  runtime.run_until_idle();
  const long after = rss_bytes();
  check_status_count(runtime, durable::Status::sleeping,
                     static_cast<std::size_t>(runs + kWarmupRuns), "nap");
  std::printf("%ld %ld\n", before, after);
  std::fflush(stdout);
  return 0;
}

Row memory_row(Scratch& scratch, const Sizes& sizes, Replay replay) {
  std::vector<double> before, after, per_run;
  for (int rep = 0; rep < sizes.memory_reps; ++rep) {
    const std::string path = scratch.fresh("memory-" + std::string(name_of(replay)));
    const Child child = spawn_self(
        {"--memory-child", std::string(name_of(replay)), path, std::to_string(sizes.memory_runs)});
    const std::optional<std::string> line = read_line(child.output, std::chrono::seconds(300));
    close(child.output);
    const int status = reap(child.pid);
    Scratch::remove(path);
    long b = 0, a = 0;
    if (!line || std::sscanf(line->c_str(), "%ld %ld", &b, &a) != 2 || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      throw std::runtime_error("the memory child process failed");
    }
    before.push_back(static_cast<double>(b));
    after.push_back(static_cast<double>(a));
    per_run.push_back(static_cast<double>(a - b) / sizes.memory_runs);
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  return Row{"RSS per sleeping run, " + with_commas(sizes.memory_runs) + " runs, " +
                 std::string(name_of(replay)),
             with_commas(median(per_run)) + " B/run (RSS " + fixed(median(before) / kMiB, "->") +
                 " " + fixed(median(after) / kMiB, "MiB") + ")",
             "-", "-", "-"};
}

// ---- main ---------------------------------------------------------------------------------------

// The re-executed child processes: --claim-child DB RUNS, --memory-child MODE DB RUNS.
std::optional<int> run_child(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode == "--claim-child" && argc == 4) return claim_child(argv[2], std::atoi(argv[3]));
  if (mode == "--memory-child" && argc == 5) {
    const Replay replay =
        std::string_view(argv[2]) == "on_recovery" ? Replay::on_recovery : Replay::every_step;
    return memory_child(replay, argv[3], std::atoi(argv[4]));
  }
  return std::nullopt;
}

int run(int argc, char** argv) {
  if (const std::optional<int> child = run_child(argc, argv)) return *child;
  bool quick = false;
  std::string dir, only;
  const char* usage =
      "usage: durable_runtime_bench [--quick] [--only concurrent|recovery|memory] [DIR]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
      if (only != "concurrent" && only != "recovery" && only != "memory") {
        std::fprintf(stderr,
                     "durable_runtime_bench: --only takes concurrent, recovery or memory\n");
        return 2;
      }
    } else if (arg == "-h" || arg == "--help") {
      std::printf("%s", usage);
      return 0;
    } else if (arg.starts_with("-") || !dir.empty()) {
      std::fprintf(stderr, "durable_runtime_bench: unexpected argument '%s'\n%s", argv[i], usage);
      return 2;
    } else {
      dir = std::string(arg);
    }
  }
  const Sizes sizes = quick ? quick_sizes() : Sizes{};
  Scratch scratch(dir, "durable-runtime-bench");
  const auto start = Stopwatch::now();
  std::printf("durable_runtime_bench %s | SQLite %s | %s (%s) | %u cores%s\n", utc_now().c_str(),
              sqlite3_libversion(), scratch.dir().c_str(), file_system_of(scratch.dir()).c_str(),
              std::thread::hardware_concurrency(), quick ? " | --quick" : "");
  std::fflush(stdout);
  int reps_normal = 0, reps_full = 0;
  std::vector<Row> rows;
  const auto wanted = [&only](std::string_view part) { return only.empty() || only == part; };
  if (wanted("concurrent")) {
    rows.push_back(concurrent_row(scratch, sizes, Durability::normal, reps_normal));
    rows.push_back(concurrent_row(scratch, sizes, Durability::full, reps_full));
  }
  std::vector<RecoveryCase> recoveries;
  if (wanted("recovery")) recoveries = recovery_cases(scratch, sizes);
  for (const RecoveryCase& c : recoveries) rows.push_back(c.row(sizes.recovery_runs));
  if (wanted("memory")) {
    rows.push_back(memory_row(scratch, sizes, Replay::every_step));
    rows.push_back(memory_row(scratch, sizes, Replay::on_recovery));
  }
  print_table(Row{"scenario", "durable", "raw sqlite", "ratio", "target"}, rows);
  std::printf("\n");
  std::vector<Row> phases;
  for (const RecoveryCase& c : recoveries) phases.push_back(c.phases());
  print_table(Row{"recovery phases (from the constructor)", "first completed", "done by 1 s / 10 s",
                  "all first steps", "all completed"},
              phases);
  std::printf(
      "medians of %d (normal) / %d (full) serve() repetitions, %d recoveries, %d memory children "
      "each; ratios: durable/raw (throughput: median of back-to-back pairs; recovery: time); "
      "recovery and memory at sync=normal; %.1f s\n",
      reps_normal, reps_full, sizes.recovery_reps, sizes.memory_reps, seconds_since(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "durable_runtime_bench: %s\n", e.what());
    return 1;
  }
}
